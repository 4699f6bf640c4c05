"""Writing predictions: files that are complete or absent, CSV and JSON streams, the summary.

:class:`AtomicOutput` writes to a temporary file in the target's folder and renames it
over the target only when everything was written, so a mistake found late in the input,
a full disk or a kill never leaves a truncated file. :class:`PredictionWriter` appends
chunks of :meth:`seer.predict.model.Model.predict`'s tidy frame as CSV (one row per (layer,
algorithm)) or JSON (an array with one object per layer and its algorithms), so that any
number of layers streams through bounded memory. :class:`PickSummary` counts what a
terminal shows instead of a table.
"""

from __future__ import annotations

import io
import json
import os
import re
import socket
import stat
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

import numpy as np
import pandas as pd

from seer.errors import InputError, os_reason
from seer.layers.files import STDIN, STDIN_NAME, iter_layer_chunks, label_columns
from seer.layers.shapes import LAYER_COLUMNS, frame_tensor_bytes
from seer.schema import INTERVAL_COLUMNS, PREDICTION_COLUMNS

FORMATS = ("csv", "json")
#: ``--out`` value that writes to standard output.
STDOUT = "-"


def format_for(path: str | Path | None, requested: str | None) -> str:
    """The output format: the one asked for, else by the file's extension, else CSV."""
    if requested is not None:
        return requested
    return "json" if path is not None and str(path).lower().endswith(".json") else "csv"


def _os_error(exc: OSError, path: Path) -> InputError:
    return InputError(f"cannot write here: {os_reason(exc)}", path=path)


#: A temporary file's name says which host and process writes it, so that a later run can
#: tell one left by a killed process (kill -9 runs no clean-up) from one still being written.
_TMP_PREFIX = ".seer-" + re.sub(r"[^A-Za-z0-9_.]", "_", socket.gethostname())[:64] + "-"
_ORPHAN = re.compile(re.escape(_TMP_PREFIX) + r"(\d+)-[^/]*\.tmp$")


def _remove_orphans(folder: Path) -> None:
    """Remove temporary files that this host's processes, now dead, left in ``folder``."""
    try:
        names = [entry.name for entry in os.scandir(folder) if entry.name.startswith(_TMP_PREFIX)]
    except OSError:
        return  # an unreadable folder: mkstemp will say what is wrong
    for name in names:
        found = _ORPHAN.match(name)
        if found is None or int(found.group(1)) == os.getpid():
            continue
        try:
            os.kill(int(found.group(1)), 0)
        except ProcessLookupError:
            try:
                os.unlink(folder / name)
            except OSError:
                pass  # another run removed it first, or the folder is not ours to clean
        except (PermissionError, OverflowError):
            pass  # alive under another user, or no pid at all: not ours to remove


class AtomicOutput:
    """Context manager: a file written under a temporary name, renamed into place on success
    and removed on any failure, so that a regular file is whole or untouched. A symbolic link
    is followed: its target is written, and the link stays. A device, FIFO or socket is
    written through in place, as a shell's ``>`` would (``-o /dev/null`` discards, a FIFO feeds
    its reader), never replaced by a file. Problems with the path are one-line InputErrors."""

    def __init__(self, path: str | Path, binary: bool = False) -> None:
        self.path = Path(path)
        self.binary = binary
        self._tmp: str | None = None
        self._target = self.path
        self._in_place = False
        self.handle: TextIO | None = None

    def __enter__(self) -> TextIO:
        path = self.path
        try:
            if path.is_dir():
                raise InputError("is a directory; give a file name", path=path)
            mode = path.stat().st_mode  # through a symbolic link, the target's
        except FileNotFoundError:
            mode = None  # the usual case: a new file (or a link to one not yet made)
        except OSError as exc:  # a name too long, a file where a folder should be, ...
            raise _os_error(exc, path) from None
        if path.is_symlink():
            self._target = Path(os.path.realpath(path))
        if mode is not None and not stat.S_ISREG(mode):
            try:
                fd = os.open(self._target, os.O_WRONLY)
            except OSError as exc:
                raise _os_error(exc, path) from None
            self._in_place = True
            self.handle = os.fdopen(fd, "wb") if self.binary else os.fdopen(fd, "w", newline="")
            return self.handle
        target = self._target
        folder = target.parent if str(target.parent) else Path(".")
        _remove_orphans(folder)
        try:
            fd, self._tmp = tempfile.mkstemp(prefix=f"{_TMP_PREFIX}{os.getpid()}-", suffix=".tmp", dir=folder)
        except OSError as exc:
            raise _os_error(exc, path) from None
        # mkstemp makes the file private (0600); the target gets what open() would give it.
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(fd, 0o666 & ~umask)
        self.handle = os.fdopen(fd, "wb") if self.binary else os.fdopen(fd, "w", newline="")
        return self.handle

    def __exit__(self, exc_type, exc, tb) -> None:
        if self._in_place:
            try:
                self.handle.close()  # flushes: a full device says so here
            except OSError as error:
                if exc_type is None:
                    raise _os_error(error, self.path) from None
            if isinstance(exc, OSError):
                raise _os_error(exc, self.path) from None
            return
        try:
            if exc_type is None:
                try:
                    self.handle.flush()
                    os.fsync(self.handle.fileno())
                    self.handle.close()
                    os.replace(self._tmp, self._target)
                    self._tmp = None
                except OSError as error:
                    raise _os_error(error, self.path) from None
        finally:
            if not self.handle.closed:
                try:
                    self.handle.close()
                except OSError:
                    pass  # a full disk refuses the flush; the file goes anyway
            if self._tmp is not None:
                os.unlink(self._tmp)
        if isinstance(exc, OSError):
            raise _os_error(exc, self.path) from None


def is_stream(path: str | Path | None) -> bool:
    """Whether ``path`` names a stream: ``-`` (standard input or output), a FIFO or a device.
    A stream can be read once and cannot take back what was written to it; a regular file
    can be read again and appears whole or not at all."""
    if path is None:
        return False
    if str(path) == STDOUT:
        return True
    try:
        return not stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False  # a file to be made (or a path AtomicOutput will refuse)


class _Spool(io.RawIOBase):
    """Reads a binary stream and keeps a copy of every byte read in ``copy``."""

    def __init__(self, stream, copy) -> None:
        self.stream, self.copy = stream, copy

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read1(len(buffer)) if hasattr(self.stream, "read1") else self.stream.read(len(buffer))
        buffer[:len(data)] = data
        self.copy.write(data)
        return len(data)


@contextmanager
def checked_layers(source: str | Path) -> Iterator[str | Path | BinaryIO]:
    """``source``, a layer file, read to its end and checked, as something to read again.

    Predictions streamed to standard output cannot be taken back, so a mistake on the last
    line must stop the command before the first prediction goes out. A regular file is simply
    read twice; standard input, a FIFO or a device is copied aside while it is checked (the
    reader's line cap bounds what a stream without end can make it copy)."""
    if not is_stream(source):  # a regular file, or a path whose problem the reader names
        for _ in iter_layer_chunks(source):
            pass
        yield source
        return
    with tempfile.TemporaryFile() as copy:
        if str(source) == STDIN:
            stream, name, close = getattr(sys.stdin, "buffer", None), STDIN_NAME, lambda: None
            if stream is None:  # already text (a test's StringIO, an embedding's stream)
                stream = io.BytesIO(sys.stdin.read().encode())
        else:
            try:
                stream = open(source, "rb")
            except OSError as exc:
                raise InputError(f"cannot open: {exc.strerror or exc}", path=source) from None
            name, close = str(source), stream.close
        try:
            with io.BufferedReader(_Spool(stream, copy)) as spool:
                for _ in iter_layer_chunks(spool, name=name):
                    pass
        finally:
            close()
        copy.seek(0)
        yield copy


def _check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InputError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", field="format")


def with_labels(predictions: pd.DataFrame, layers: pd.DataFrame, offset: int = 0) -> pd.DataFrame:
    """:meth:`seer.predict.model.Model.predict`'s frame for ``layers`` (a chunk of a layer file),
    with the chunk's label columns (:func:`seer.layers.files.label_columns`) after ``layer``,
    and ``layer`` numbered on from ``offset`` (the layers of the file before the chunk)."""
    rows = predictions["layer"].to_numpy()
    labels = label_columns(layers)
    out = predictions.copy(deep=False)
    for position, column in enumerate(labels, start=1):
        out.insert(position, column, layers[column].to_numpy()[rows])
    out["layer"] = rows + offset
    return out


def _output_columns(predictions: pd.DataFrame) -> list[str]:
    """``layer``, the labels that came with the layers, then :data:`seer.schema.PREDICTION_COLUMNS`."""
    return ["layer", *(c for c in predictions.columns if c != "layer" and c not in PREDICTION_COLUMNS),
            *PREDICTION_COLUMNS]


class PredictionWriter:
    """Appends chunks of predictions to a text stream as CSV or JSON (see the module docstring).
    The first chunk's columns (labels included: :func:`with_labels`) make the CSV's header."""

    def __init__(self, handle: TextIO, fmt: str = "csv") -> None:
        _check_format(fmt)
        self.handle, self.format = handle, fmt
        self._first = True
        self._columns: list[str] | None = None

    def write(self, predictions: pd.DataFrame) -> None:
        if self.format == "csv":
            if self._columns is None:
                self._columns = _output_columns(predictions)
            predictions.to_csv(self.handle, columns=self._columns, header=self._first, index=False)
            self._first = False
            return
        for layer in layer_objects(predictions):
            self.handle.write(("[\n" if self._first else ",\n") + json.dumps(layer, separators=(",", ":")))
            self._first = False

    def close(self) -> None:
        if self.format == "json":
            self.handle.write("[]\n" if self._first else "\n]\n")
        elif self._first:
            self.handle.write(",".join(["layer", *PREDICTION_COLUMNS]) + "\n")


def layer_objects(predictions: pd.DataFrame) -> list[dict]:
    """One JSON-ready object per layer: its number, labels and fields, math mode, the pick and
    its chance of being near the fastest, the extrapolation mark and every algorithm predicted
    to run with its time's intervals, rank 1 first (``algorithms`` empty if none)."""
    if predictions.empty:
        return []
    labels = [c for c in _output_columns(predictions)[1:] if c not in PREDICTION_COLUMNS]
    label_values = [predictions[c].to_numpy(dtype=object) for c in labels]
    layers = predictions["layer"].to_numpy()
    starts = np.flatnonzero(np.r_[True, layers[1:] != layers[:-1]])
    ends = np.r_[starts[1:], len(layers)]
    fields = predictions[list(LAYER_COLUMNS)].to_numpy(dtype=np.int64)
    algos = predictions["algo"].to_numpy(dtype=object, na_value=None)
    times = predictions["predicted_ms"].to_numpy(dtype=float)
    energies = predictions["predicted_mj"].to_numpy(dtype=float)
    ranks = predictions["rank"].to_numpy(dtype=float, na_value=np.nan)
    math = predictions["math"].to_numpy(dtype=object)
    extrapolated = predictions["extrapolated"].to_numpy(dtype=bool)
    bounds = predictions[list(INTERVAL_COLUMNS)].to_numpy(dtype=float)
    near_best = predictions["pick_near_best"].to_numpy(dtype=float)
    out = []
    for start, end in zip(starts, ends):
        runs = [{"algo": algos[i], "predicted_ms": float(times[i]),
                 **{c: _json_number(v) for c, v in zip(INTERVAL_COLUMNS, bounds[i])},
                 "predicted_mj": _json_number(energies[i]), "rank": int(ranks[i])}
                for i in range(start, end) if algos[i] is not None]
        out.append({"layer": int(layers[start]), **{c: _json_label(v[start]) for c, v in zip(labels, label_values)},
                    **dict(zip(LAYER_COLUMNS, fields[start].tolist())),
                    "math": math[start], "pick": runs[0]["algo"] if runs else None,
                    "pick_near_best": _json_number(near_best[start]),
                    "extrapolated": bool(extrapolated[start]), "algorithms": runs})
    return out


def _json_number(value: float) -> float | None:
    """A number as JSON has it: null where it is missing (JSON has no NaN)."""
    return float(value) if np.isfinite(value) else None


def _json_label(value):
    """A label as JSON has it: text, or null where the cell was missing."""
    return None if value is None or (isinstance(value, float) and np.isnan(value)) else str(value)


class PickSummary:
    """What a run predicted, in counts: layers, picks per algorithm, layers with no
    algorithm predicted to run, and layers outside the training ranges."""

    def __init__(self, memory_bytes: float = float("inf")) -> None:
        self.memory_bytes = memory_bytes
        self.layers = 0
        self.picks: Counter[str] = Counter()
        self.none = 0
        self.too_big = 0  # of those with none: their tensors alone exceed the GPU's memory
        self.extrapolated = 0

    def add(self, predictions: pd.DataFrame) -> None:
        first = predictions.drop_duplicates("layer")
        self.layers += len(first)
        self.extrapolated += int(first["extrapolated"].sum())
        picked = first["algo"].dropna()
        self.none += len(first) - len(picked)
        none = first[first["algo"].isna()]
        self.too_big += int((frame_tensor_bytes(none) > self.memory_bytes).sum()) if len(none) else 0
        self.picks.update(picked.tolist())


class NetworkWriter:
    """Writes a network's predictions (:class:`seer.networks.network_time.NetworkPrediction`): CSV as
    :class:`PredictionWriter` writes it with ``name`` and ``calls`` in front, or one JSON
    object with what was predicted (``about``), the layers, the totals and the skipped calls."""

    def __init__(self, handle: TextIO, fmt: str = "csv") -> None:
        _check_format(fmt)
        self.handle, self.format = handle, fmt

    def write(self, result, skipped: pd.DataFrame, about: dict) -> None:
        predictions = result.predictions
        if self.format == "csv":
            predictions.to_csv(self.handle, columns=["layer", "name", "calls", *PREDICTION_COLUMNS], index=False)
            return
        layers = layer_objects(predictions)
        for layer in layers:
            layer["calls"] = int(layer["calls"])
        totals = result.totals.astype(object).where(result.totals.notna(), None)
        json.dump({**about, "math": result.math, "totals": totals.to_dict(orient="records"), "layers": layers,
                   "skipped": skipped.to_dict(orient="records")}, self.handle, indent=1)
        self.handle.write("\n")

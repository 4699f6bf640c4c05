"""Writing predictions: files that are complete or absent, CSV and JSON streams, the summary.

:class:`AtomicOutput` writes to a temporary file in the target's folder and renames it
over the target only when everything was written, so a mistake found late in the input,
a full disk or a kill never leaves a truncated file. :class:`PredictionWriter` appends
chunks of :meth:`seer.predict.model.Model.predict`'s tidy frame, or of its prediction table
(:meth:`~seer.predict.model.Model.predict_table`, the same columns as numpy arrays, which needs no
pandas), as CSV (one row per (layer, algorithm)) or JSON (an array with one object per layer and its algorithms), or with
``rows="layer"`` one row (object) per layer: its pick and the runner-up
(:func:`layer_rows`), so that any number of layers streams through bounded memory.
:class:`PickSummary` counts what a terminal shows instead of a table.

A prediction frame's columns are of two kinds: those that hold one value per layer, the same
on each of its rows (``layer``, the labels, the layer fields and :data:`PER_LAYER_COLUMNS`),
and all others, one value per (layer, algorithm) (``algo``, ``predicted_ms``, ...). The
writers carry any column of either kind that the frame holds, so a column added to
:data:`seer.schema.PREDICTION_COLUMNS` reaches every output without a change here.
"""

from __future__ import annotations

import csv
import io
import itertools
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
from typing import TYPE_CHECKING, BinaryIO, Mapping, TextIO

import numpy as np

from seer.errors import InputError, os_reason
from seer.layers.files import STDIN, STDIN_NAME, iter_layer_chunks, label_columns
from seer.layers.shapes import LAYER_COLUMNS, frame_tensor_bytes
from seer.schema import PREDICTION_COLUMNS, PYTORCH_CHOICE, PYTORCH_COLUMNS

if TYPE_CHECKING:  # imported where used: seer predict writes prediction tables, without pandas
    import pandas as pd

#: Columns as numpy arrays (:data:`seer.predict.model.PredictionTable`), or a frame.
Table = Mapping[str, np.ndarray]

FORMATS = ("csv", "json")
#: What one CSV row or JSON object of the output holds: a (layer, algorithm predicted to run),
#: ranked, or a layer with its pick and runner-up (:func:`layer_rows`).
ROWS = ("algorithm", "layer")
#: ``--out`` value that writes to standard output.
STDOUT = "-"
#: Columns of a prediction frame that hold one value per layer, besides ``layer``, the labels
#: and the layer fields (:data:`seer.layers.shapes.LAYER_COLUMNS`); every other column holds
#: one value per (layer, algorithm).
#: Columns beside the labels that hold numbers, written to JSON as numbers (null where empty): an
#: input's share of zeros (a layer file's ``sparsity``) and the break-even sparsity
#: (:mod:`seer.predict.sparse`).
NUMBER_LABELS = ("sparsity", "break_even_sparsity")
PER_LAYER_COLUMNS = ("math", "extrapolated", "pick_near_best", *PYTORCH_COLUMNS)


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


def _check_rows(rows: str) -> None:
    if rows not in ROWS:
        raise InputError(f"unknown rows {rows!r}; choose one of {', '.join(ROWS)}", field="rows")


def with_labels(predictions: Table, layers: Table, offset: int = 0) -> dict[str, np.ndarray]:
    """:meth:`seer.predict.model.Model.predict_table`'s table for ``layers`` (a chunk of a layer
    file, a layer table), with the chunk's label columns (:func:`seer.layers.files.label_columns`)
    after ``layer``, and ``layer`` numbered on from ``offset`` (the layers of the file before the chunk)."""
    rows = np.asarray(predictions["layer"])
    labels = {column: np.asarray(layers[column])[rows] for column in label_columns(layers)}
    return {"layer": rows + offset, **labels, **{c: v for c, v in predictions.items() if c != "layer"}}


def prediction_columns(predictions: pd.DataFrame | Table) -> dict[str, np.ndarray]:
    """A prediction frame's columns as a prediction table (:data:`seer.predict.model.PredictionTable`:
    numpy arrays; pandas' strings and other extension columns as objects, missing None;
    its nullable integers as masked int64); a table as it is."""
    if not hasattr(predictions, "columns"):
        return dict(predictions)
    out = {}
    for name in predictions.columns:
        column = predictions[name]
        if isinstance(column.dtype, np.dtype):
            out[name] = column.to_numpy(dtype=object, na_value=None) if column.dtype == object else column.to_numpy()
        elif column.dtype.kind in "iu" and hasattr(column.dtype, "numpy_dtype"):
            out[name] = np.ma.masked_array(column.to_numpy(dtype=np.int64, na_value=0), mask=column.isna().to_numpy())
        else:
            out[name] = column.to_numpy(dtype=object, na_value=None)
    return out


def _output_columns(predictions: pd.DataFrame | Table) -> list[str]:
    """``layer``, the labels that came with the layers, then :data:`seer.schema.PREDICTION_COLUMNS`."""
    return ["layer", *(c for c in predictions.keys() if c != "layer" and c not in PREDICTION_COLUMNS),
            *PREDICTION_COLUMNS]


def _per_layer(columns: list[str]) -> set[str]:
    """Which of a prediction frame's output ``columns`` hold one value per layer: ``layer``, the
    labels, the layer fields and :data:`PER_LAYER_COLUMNS` (see the module docstring)."""
    labels = {c for c in columns if c != "layer" and c not in PREDICTION_COLUMNS}
    return {"layer", *labels, *LAYER_COLUMNS, *PER_LAYER_COLUMNS} & set(columns)


def _layer_starts(layers: np.ndarray) -> np.ndarray:
    """The first row of each layer in a prediction frame's ``layer`` column (a layer's rows
    are consecutive, rank 1 first)."""
    if not len(layers):
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero(np.r_[True, layers[1:] != layers[:-1]])


def _runner_up_name(column: str) -> str:
    """The name a per-algorithm column takes for the runner-up in :func:`layer_rows`."""
    if column == "algo":
        return "runner_up"
    return "runner_up_" + (column[len("predicted_"):] if column.startswith("predicted_") else column)


def _layer_columns(columns: list[str]) -> list[str]:
    """The columns of :func:`layer_rows` for a prediction frame's output ``columns``: the
    per-layer ones, the pick's per-algorithm ones (``algo`` named ``pick``, no ``rank``) and
    right after them the runner-up's, in the frame's order."""
    per_layer = _per_layer(columns)
    by_algorithm = [c for c in columns if c not in per_layer]
    out = []
    for column in columns:
        if column in per_layer:
            out.append(column)
        elif column != "rank":
            out.append("pick" if column == "algo" else column)
        if by_algorithm and column == by_algorithm[-1]:
            out += [_runner_up_name(c) for c in by_algorithm if c != "rank"]
    return out


def layer_rows(predictions: pd.DataFrame) -> pd.DataFrame:
    """One row per layer of a prediction frame (:meth:`seer.predict.model.Model.predict`, with
    :func:`with_labels`' labels): ``layer``, the labels, the layer fields and every other
    per-layer column (``math``, ``extrapolated``), the pick's per-algorithm columns (``algo``
    named ``pick``, its ``predicted_ms``, ``predicted_mj``, ...; ``rank`` left out) and the
    runner-up's (``runner_up``, ``runner_up_ms``, ``runner_up_mj``, ...: ``predicted_X`` becomes
    ``runner_up_X``), missing where a layer has none. A column added to the frame comes along
    by the same rules (see the module docstring). The frame of :func:`layer_row_table`."""
    import pandas as pd

    table, sources = layer_row_table(prediction_columns(predictions))
    out = {}
    for name, values in table.items():
        dtype = predictions[sources[name]].dtype
        if isinstance(dtype, np.dtype):
            out[name] = values
        elif np.ma.isMaskedArray(values):
            out[name] = pd.arrays.IntegerArray(values.data, np.ma.getmaskarray(values).copy()).astype(dtype)
        else:
            out[name] = pd.array(values, dtype=dtype)
    return pd.DataFrame(out, columns=list(table))


def layer_row_table(predictions: Table) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """:func:`layer_rows` of a prediction table, as a table, and per column of it the prediction
    column it comes from. A runner-up's missing values are NaN, masked or None, by the column's
    dtype, as pandas' ``where`` leaves them (integers become floats)."""
    columns = _output_columns(predictions)
    per_layer = _per_layer(columns)
    starts = _layer_starts(np.asarray(predictions["layer"]))
    rows = len(predictions["layer"])
    second = starts + 1
    # Rows come rank 1 first, so a layer's second row, where it has one, is its runner-up.
    has_second = second < np.append(starts[1:], rows)
    out, sources = {}, {}
    for column in columns:
        if column == "rank":
            continue
        values = predictions[column]
        name = "pick" if column == "algo" else column
        out[name], sources[name] = values[starts], column
        if column not in per_layer:
            name = _runner_up_name(column)
            out[name], sources[name] = _where(values[np.where(has_second, second, starts)], has_second), column
    return {name: out[name] for name in _layer_columns(columns)}, sources


def _frame(table: Table) -> pd.DataFrame:
    """A table as a frame, its masked integers as pandas' nullable ones."""
    import pandas as pd

    return pd.DataFrame({name: pd.arrays.IntegerArray(values.data, np.ma.getmaskarray(values).copy())
                         if np.ma.isMaskedArray(values) else values for name, values in table.items()})


def _where(values: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """``values`` where ``keep``, else missing (NaN in floats, integers made floats; masked; None)."""
    if np.ma.isMaskedArray(values):
        return np.ma.masked_array(values.data, mask=np.ma.getmaskarray(values) | ~keep)
    if values.dtype.kind in "fiu":
        return np.where(keep, values, np.nan)
    return np.where(keep, values.astype(object), None)


# -- text: the same bytes as pandas' to_csv and json.dumps, made faster ------------------------
#: Characters that may make the csv module quote a field (it decides: :func:`_csv_field`).
_CSV_SPECIAL = re.compile(r'[,"\r\n]')


def _csv_field(text: str) -> str:
    """``text`` as a field of a CSV row of several, as pandas' ``to_csv`` writes it (the csv
    module's minimal quoting)."""
    if _CSV_SPECIAL.search(text) is None:
        return text
    buffer = io.StringIO()
    csv.writer(buffer, lineterminator="\n").writerow([text, ""])
    return buffer.getvalue()[:-2]


def _codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per value of an object column, the position of its first equal among the distinct
    values, and those (missing ones, None or NaN, count as one, None)."""
    items = values.tolist()
    distinct = list(dict.fromkeys(items))
    if all(v is None or type(v) is str for v in distinct):  # names, or none: no equal keys of different types
        position = {value: i for i, value in enumerate(distinct)}
        out = np.empty(len(distinct), dtype=object)
        out[:] = distinct
        return np.fromiter(map(position.__getitem__, items), dtype=np.int64, count=len(items)), out
    codes = np.empty(len(items), dtype=np.int64)
    position, distinct = {}, []
    for i, value in enumerate(items):
        key = None if _is_missing(value) else (type(value), value)  # 1, 1.0 and True are equal keys, not equal cells
        try:
            codes[i] = position[key]
        except KeyError:
            codes[i] = position[key] = len(distinct)
            distinct.append(None if key is None else value)
    out = np.empty(len(distinct), dtype=object)
    out[:] = distinct
    return codes, out


def _is_missing(value) -> bool:
    """Whether an object column's value is missing: None, or a float NaN."""
    return value is None or (isinstance(value, float) and value != value)


def _missing(values: np.ndarray) -> np.ndarray:
    """:func:`_is_missing` of each value of an object column, compared in numpy's loop (a NaN
    is the one value not equal to itself)."""
    return np.asarray(np.equal(values, None), dtype=bool) | np.asarray(np.not_equal(values, values), dtype=bool)


def _text_kind(values: np.ndarray) -> str | None:
    """How a column (a numpy array: :func:`prediction_columns`) is written as text
    (:func:`_cells`, :func:`_arrow_cells`): ``float``, ``int`` (masked where missing), ``bool``
    or ``object``; None for a dtype left to pandas."""
    dtype = values.dtype
    if dtype == np.float64:
        return "float"
    if dtype.kind in "iu":
        return "int"
    if dtype == np.bool_:
        return "bool"
    return "object" if dtype == object else None


def _cells(values: np.ndarray, fmt: str) -> list[str] | None:
    """Each value of a column as text: as pandas' ``to_csv`` writes it (``fmt="csv"``:
    a float64 as ``repr``, which is numpy's ``str`` of it, missing values empty) or as
    ``json.dumps`` does (``"json"``: missing values ``null``). None for a dtype left to pandas."""
    kind = _text_kind(values)
    json_ = fmt == "json"
    missing = "null" if json_ else ""
    if kind == "float":
        cells = _float_texts(values)
        for i in np.flatnonzero(np.isnan(values)):
            cells[i] = missing
        return cells
    if kind == "int":
        masked = np.ma.getmaskarray(values) if np.ma.isMaskedArray(values) else None
        values = np.ma.getdata(values)
        if len(values) and 0 <= values.min() and values.max() < _SMALL:
            cells = _small_ints()[values].tolist()  # layer fields: a look-up, not a str() each
        else:
            cells = list(map(str, values.tolist()))
        if masked is not None:
            for i in np.flatnonzero(masked):
                cells[i] = missing
        return cells
    if kind == "bool":
        true, false = ("true", "false") if json_ else ("True", "False")
        return [true if value else false for value in values.tolist()]
    if kind == "object":
        # Names and labels repeat: each distinct value is formatted once.
        known: dict = {}
        cells = []
        for value in values.tolist():
            if _is_missing(value):
                cells.append(missing)
                continue
            key = (type(value), value)  # 1, 1.0 and True are equal keys, not equal cells
            try:
                cells.append(known[key])
                continue
            except (KeyError, TypeError):
                pass
            cell = _object_cell(value, json_)
            try:
                known[key] = cell
            except TypeError:
                pass
            cells.append(cell)
        return cells
    return None


def _object_cell(value, json_: bool) -> str:
    """A value of an object (or string, boolean, nullable integer) column as JSON text, or as the
    csv module writes it: a float (a numpy one too) as its repr, anything else as its str."""
    if json_:
        return _json_value(value)
    return _csv_field(value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value))


#: Float columns at least this long are written value by distinct value (:func:`_float_texts`).
_DEDUPLICATE_FLOATS = 4096


def _float_texts(values: np.ndarray) -> list[str]:
    """``repr`` of each float, NaN's text left for the caller to replace. Where values repeat
    (repeated layers share their predictions: the million-layer benchmark holds under ten
    thousand distinct layers), each distinct value is written once. ``np.unique`` takes 0.0 and
    -0.0 for one value, so a column holding -0.0 is written value by value."""
    if len(values) >= _DEDUPLICATE_FLOATS and not np.signbit(values[values == 0]).any():
        distinct, codes = np.unique(values, return_inverse=True)  # NaNs: one value, written by the caller
        if len(distinct) <= len(values) * 3 // 4:
            return np.array(list(map(repr, distinct.tolist())), dtype=object)[codes.ravel()].tolist()
    return list(map(repr, values.tolist()))


#: Integers below this are written from a table (:func:`_small_ints`).
_SMALL = 1 << 16
_SMALL_TEXT: np.ndarray | None = None


def _small_ints() -> np.ndarray:
    """``str(i)`` of every integer below :data:`_SMALL`, made once."""
    global _SMALL_TEXT
    if _SMALL_TEXT is None:
        _SMALL_TEXT = np.array([str(i) for i in range(_SMALL)], dtype=object)
    return _SMALL_TEXT


def _json_value(value) -> str:
    """A value of an object column as JSON text: a string, number or boolean as itself."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "null" if value != value else repr(value)
    return json.dumps(value if isinstance(value, str) else str(value))


#: Rows of CSV text joined at a time (:func:`_csv_lines`): text of a bounded size, whose memory
#: the next block's text reuses. Joining the 10,000-layer benchmark's 76,000 rows at once
#: made 25 MB of row strings and 25 MB of text, and the page faults of that fresh memory,
#: took a fifth of the writing time.
_CSV_BLOCK_ROWS = 2048


def _csv_lines(frame: Table, columns: list[str], header: bool) -> Iterator[str] | None:
    """``to_csv(columns=columns, header=header, index=False)``'s text of the frame of a table,
    built faster, in pieces of :data:`_CSV_BLOCK_ROWS` rows: a per-layer column is formatted
    once per layer, not once per row. None where a column's dtype is left to pandas."""
    starts = _layer_starts(frame["layer"])
    rows = len(frame["layer"])
    of_row = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, rows)))
    per_layer = {c for c in _per_layer(columns) if _constant_per_layer(frame[c], starts, of_row)}
    head = ",".join(_csv_field(str(c)) for c in columns) + "\n" if header else ""
    # Arrow's text is made a block at a time, after the first block is written: every column's
    # dtype is checked first, since a pandas fallback cannot follow written text.
    if _arrow_writes_floats() and all(_text_kind(frame[c]) for c in columns):
        return _arrow_blocks(_arrow_pieces(frame, columns, starts, per_layer), of_row, head)
    pieces = []
    for by_layer, group in itertools.groupby(columns, lambda c: c in per_layer and len(starts) < rows):
        cells = [_cells(frame[c][starts] if by_layer else frame[c], "csv") for c in group]
        if any(c is None for c in cells):
            return None
        joined = cells[0] if len(cells) == 1 else list(map(",".join, zip(*cells)))
        pieces.append(np.asarray(joined, dtype=object)[of_row].tolist() if by_layer else joined)
    return _csv_blocks(map(",".join, zip(*pieces)), rows, head)


# Arrow builds the same text in C++, a third of the time of the loop above (10,000 layers'
# 76,000 rows: 0.12 s against 0.30 s). Its text of a float has repr's digits, but not always
# repr's form (no '.0' on whole numbers, other bounds for exponents), so it is used where the
# form is the same, and every float outside those bounds is written by repr.
#: |x| in [low, high): Arrow writes a float as repr does, but for the '.0' of whole numbers.
_ARROW_FLOAT_BOUNDS = (1e-4, 1e7)
#: Floats whose text this pyarrow must write as repr does, checked once (:func:`_arrow_writes_floats`).
_FLOAT_PROBES = (0.0, -0.0, 1.0, -2.0, 0.1, -0.5, 1 / 3, 2.675, 0.30000000000000004, 1e-4, 0.00012345678901234567,
                 9999999.999999998, 1234567.0, 123456.789, 5e-5, 1e-7, 1e7, 12345678.9, 1e22, 5e-324,
                 float("nan"), float("inf"), -float("inf"))
_ARROW_FLOATS: bool | None = None


def _arrow_writes_floats() -> bool:
    """Whether :func:`_arrow_float_cells` writes this pyarrow's floats as ``repr`` does
    (checked once, on :data:`_FLOAT_PROBES`); else the writer builds its text in Python."""
    global _ARROW_FLOATS
    if _ARROW_FLOATS is None:
        try:
            probes = np.array(_FLOAT_PROBES)
            texts = _arrow_float_cells(probes).to_pylist()
            _ARROW_FLOATS = texts == ["" if v != v else repr(v) for v in probes.tolist()]
        except Exception:  # noqa: BLE001 - an older pyarrow lacking a kernel: the Python path writes
            _ARROW_FLOATS = False
    return _ARROW_FLOATS


def _arrow(values: np.ndarray):
    """A numpy array of numbers or booleans as an Arrow array of its values. Built from its
    buffer: ``pyarrow.array`` would import pandas (to ask whether it was given a pandas object),
    which ``seer predict`` does not need."""
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    if values.dtype == np.bool_:
        bits = np.packbits(values, bitorder="little")
        return pa.Array.from_buffers(pa.bool_(), len(values), [None, pa.py_buffer(bits)])
    kind = {np.dtype(np.float64): pa.float64(), np.dtype(np.int64): pa.int64()}.get(values.dtype)
    if kind is None:
        values, kind = values.astype(np.int64), pa.int64()
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def _arrow_texts(texts: list[str]):
    """A list of strings as an Arrow string array, from its buffers (see :func:`_arrow`)."""
    import pyarrow as pa

    encoded = [text.encode() for text in texts]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int32)
    np.cumsum(np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded)), out=offsets[1:])
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded)))


def _arrow_text(text: str):
    """A string as an Arrow scalar, for Arrow's functions (see :func:`_arrow`: given a Python
    string, they would make it with ``pyarrow.scalar``, which imports pandas)."""
    return _arrow_texts([text])[0]


def _arrow_float_cells(values: np.ndarray):
    """``repr`` of each float as an Arrow string array, NaN as empty."""
    import pyarrow as pa
    import pyarrow.compute as pc

    texts = pc.cast(_arrow(values), pa.string())
    size = np.abs(values)
    low, high = _ARROW_FLOAT_BOUNDS
    inside = ((size >= low) & (size < high)) | (size == 0)
    whole = inside & (np.floor(values) == values)
    if whole.any():
        texts = pc.if_else(_arrow(whole), pc.binary_join_element_wise(texts, _arrow_text(".0"), _arrow_text("")), texts)
    outside = ~inside  # NaN, infinities and the rest, written one by one
    if outside.any():
        others = ["" if v != v else repr(v) for v in values[outside].tolist()]
        texts = pc.replace_with_mask(texts, _arrow(outside), _arrow_texts(others))
    return texts


def _arrow_cells(column: np.ndarray):
    """:func:`_cells`' CSV text of ``column`` as an Arrow string array; None for a dtype left to pandas."""
    import pyarrow as pa
    import pyarrow.compute as pc

    kind = _text_kind(column)
    if kind == "float":
        return _arrow_float_cells(column)
    if kind == "int":
        texts = pc.cast(_arrow(np.ma.getdata(column)), pa.string())
        if np.ma.isMaskedArray(column) and np.ma.getmaskarray(column).any():
            texts = pc.if_else(_arrow(np.ma.getmaskarray(column)), _arrow_text(""), texts)
        return texts
    if kind == "bool":
        return pc.if_else(_arrow(column), _arrow_text("True"), _arrow_text("False"))
    if kind == "object":
        # Names and labels repeat: each distinct value's text once, taken per row by its code.
        try:
            codes, distinct = _codes(column)
        except TypeError:  # a value that cannot be a key (a list): every cell made on its own
            return _arrow_texts(_cells(column, "csv"))
        return pc.take(_arrow_texts(_cells(distinct, "csv")), _arrow(codes))
    return None


def _arrow_pieces(frame: Table, columns: list[str], starts: np.ndarray, per_layer: set[str]) -> list:
    """The rows' columns in pieces of consecutive ones: a per-layer piece as an Arrow string array
    of each layer's cells joined (one per layer), a per-row piece as its columns, formatted a
    block of rows at a time (:func:`_arrow_blocks`). Every column's dtype must be one
    :func:`_text_kind` knows."""
    import pyarrow.compute as pc

    rows = len(frame["layer"])
    pieces = []
    for by_layer, group in itertools.groupby(columns, lambda c: c in per_layer and len(starts) < rows):
        if not by_layer:
            pieces.append([frame[c] for c in group])
            continue
        cells = [_arrow_cells(frame[c][starts]) for c in group]
        pieces.append(cells[0] if len(cells) == 1 else pc.binary_join_element_wise(*cells, _arrow_text(",")))
    return pieces


#: Rows of Arrow-built text made at a time (:func:`_arrow_blocks`): only a block's cells and
#: text are ever whole, so memory stays bounded by the block, not the chunk.
_ARROW_BLOCK_ROWS = 8192


def _arrow_blocks(pieces: list, of_row: np.ndarray, head: str) -> Iterator[str]:
    """``head``, then the rows of ``pieces`` (:func:`_arrow_pieces`) with their line breaks,
    :data:`_ARROW_BLOCK_ROWS` at a time, in order. Arrow's kernels let go of Python's lock,
    so the blocks after the one being written are built on a thread per core meanwhile (a
    core's block at most ahead of the writer: memory stays bounded by a few blocks)."""
    from collections import deque
    from concurrent.futures import ThreadPoolExecutor

    if head:
        yield head
    starts = range(0, len(of_row), _ARROW_BLOCK_ROWS)
    workers = min(_cores(), len(starts))
    if workers <= 1:
        yield from (_arrow_block(pieces, of_row, start) for start in starts)
        return
    with ThreadPoolExecutor(workers, thread_name_prefix="seer-csv") as pool:
        pending: deque = deque()
        for start in starts:
            pending.append(pool.submit(_arrow_block, pieces, of_row, start))
            if len(pending) > workers:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def _cores() -> int:
    """The CPUs this process may run on (:func:`_arrow_blocks`' threads)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform
        return max(1, os.cpu_count() or 1)


def _arrow_block(pieces: list, of_row: np.ndarray, start: int) -> str:
    """The text of the rows ``start`` to ``start +`` :data:`_ARROW_BLOCK_ROWS` of ``pieces``
    (:func:`_arrow_blocks`)."""
    import pyarrow.compute as pc

    end = min(start + _ARROW_BLOCK_ROWS, len(of_row))
    parts = []
    for piece in pieces:
        if isinstance(piece, list):  # per-row columns: this block's cells
            parts.extend(_arrow_cells(column[start:end]) for column in piece)
        else:
            parts.append(pc.take(piece, _arrow(of_row[start:end])))
    lines = pc.binary_join_element_wise(*parts, _arrow_text(","))
    block = pc.binary_join_element_wise(lines, _arrow_text(""), _arrow_text("\n"))  # each line, its break, and nothing
    offsets, data = block.buffers()[1:3]
    ends = np.frombuffer(offsets, np.int32)[block.offset:block.offset + len(block) + 1]
    return str(memoryview(data)[ends[0]:ends[-1]], "utf-8")  # decoded from Arrow's buffer, not a copy of it


def _csv_blocks(lines: Iterator[str], rows: int, head: str) -> Iterator[str]:
    """``head``, then the ``rows`` ``lines`` joined :data:`_CSV_BLOCK_ROWS` at a time."""
    if head:
        yield head
    for _ in range(0, rows, _CSV_BLOCK_ROWS):
        yield "\n".join(itertools.islice(lines, _CSV_BLOCK_ROWS)) + "\n"


def _constant_per_layer(column: np.ndarray, starts: np.ndarray, of_row: np.ndarray) -> bool:
    """Whether ``column`` holds one value per layer, as :func:`_per_layer` says it does."""
    if len(starts) == len(column):
        return True
    if np.ma.isMaskedArray(column):
        mask = np.ma.getmaskarray(column)
        return _constant_per_layer(mask, starts, of_row) and _constant_per_layer(
            np.where(mask, 0, column.data), starts, of_row)
    repeated = column[starts][of_row]
    if column.dtype.kind == "f":
        return bool(np.array_equal(column, repeated, equal_nan=True))
    same = np.asarray(column == repeated, dtype=bool)
    if column.dtype == object and not same.all():  # missing is None or NaN, and NaN is not equal to itself
        differ = np.flatnonzero(~same)
        same[differ] = [_is_missing(a) and _is_missing(b)
                        for a, b in zip(column[differ].tolist(), repeated[differ].tolist())]
    return bool(same.all())


#: Characters written at a time (:meth:`PredictionWriter._put`).
_PIECE = 1 << 20


class PredictionWriter:
    """Appends chunks of predictions to a text stream as CSV or JSON (see the module docstring):
    with ``rows="algorithm"`` one row per (layer, algorithm), with ``rows="layer"`` one per layer
    (:func:`layer_rows`). The first chunk's columns (labels included: :func:`with_labels`) make
    the CSV's header."""

    def __init__(self, handle: TextIO, fmt: str = "csv", rows: str = "algorithm") -> None:
        _check_format(fmt)
        _check_rows(rows)
        self.handle, self.format, self.rows = handle, fmt, rows
        self._first = True
        self._columns: list[str] | None = None

    def write(self, predictions: pd.DataFrame | Table) -> None:
        """Append a chunk: a prediction frame, or a prediction table (:func:`prediction_columns`)."""
        predictions = prediction_columns(predictions)
        if self.rows == "layer":
            predictions = layer_row_table(predictions)[0]
            if self.format == "csv":
                self._write_csv(predictions, list(predictions))
            else:
                self._write_json(_json_objects(predictions, list(predictions)))
            return
        if self.format == "csv":
            if self._columns is None:
                self._columns = _output_columns(predictions)
            self._write_csv(predictions, self._columns)
            return
        self._write_json(layer_json(predictions))

    def _write_csv(self, frame: Table, columns: list[str]) -> None:
        texts = _csv_lines(frame, columns, header=self._first)
        if texts is None:
            _frame(frame).to_csv(self.handle, columns=columns, header=self._first, index=False)
        else:
            for text in texts:
                self._put(text)
        self._first = False

    def _write_json(self, objects: list[str]) -> None:
        if objects:
            self._put(("[\n" if self._first else ",\n") + ",\n".join(objects))
            self._first = False

    def _put(self, text: str) -> None:
        """Write ``text`` a mebibyte at a time: a pipe whose reader goes away (``| head``) cuts a
        write short and refuses the next, and one write of megabytes would end without either."""
        for start in range(0, len(text), _PIECE):
            self.handle.write(text[start:start + _PIECE])

    def close(self) -> None:
        if self.format == "json":
            self.handle.write("[]\n" if self._first else "\n]\n")
        elif self._first:
            columns = ["layer", *PREDICTION_COLUMNS]
            self.handle.write(",".join(_layer_columns(columns) if self.rows == "layer" else columns) + "\n")


def _json_objects(frame: Table, columns: list[str]) -> list[str]:
    """One JSON object per row of ``frame``, its ``columns`` as keys, as
    ``json.dumps(..., separators=(",", ":"))`` writes it."""
    keys = [json.dumps(str(c)) + ":" for c in columns]
    cells = [_json_cells(frame[c]) for c in columns]
    return ["{" + ",".join(map(str.__add__, keys, row)) + "}" for row in zip(*cells)]


def _json_cells(column: np.ndarray) -> list[str]:
    cells = _cells(column, "json")
    if cells is None:  # a dtype the fast path leaves alone: json itself
        import pandas as pd

        cells = [_json_value(v) if v is not None else "null"
                 for v in pd.Series(column).to_numpy(dtype=object, na_value=None).tolist()]
    return cells


def layer_json(predictions: pd.DataFrame | Table) -> list[str]:
    """:func:`layer_objects` as JSON text, one string per layer, as ``json.dumps(object,
    separators=(",", ":"))`` writes each; built column by column, faster."""
    predictions = prediction_columns(predictions)
    if not len(predictions["layer"]):
        return []
    columns = _output_columns(predictions)
    per_layer = _per_layer(columns)
    labels = [c for c in columns[1:] if c not in PREDICTION_COLUMNS]
    per_algorithm = [c for c in columns if c not in per_layer]
    starts = _layer_starts(predictions["layer"])
    ends = np.append(starts[1:], len(predictions["layer"]))
    first = {c: values[starts] for c, values in predictions.items()}
    runs = ~_missing(predictions["algo"])
    # Each algorithm's object, then per layer those of its algorithms predicted to run.
    keys = [json.dumps(c) + ":" for c in per_algorithm]
    cells = [_json_cells(predictions[c]) for c in per_algorithm]
    algorithms = ["{" + ",".join(map(str.__add__, keys, row)) + "}" for row in zip(*cells)]
    lists = ["[" + ",".join(algorithms[start:end]) + "]" if runs[start] else "[]"
             for start, end in zip(starts.tolist(), ends.tolist())]
    parts, pick_done = [], False
    for column in columns:
        if column in per_layer:
            cells = ([_label_json(v) for v in first[column].astype(object).tolist()]
                     if column in labels and column not in NUMBER_LABELS else _json_cells(first[column]))
            key = json.dumps(column) + ":"
            parts.append([key + cell for cell in cells])
        elif not pick_done:
            parts.append(['"pick":' + cell for cell in _json_cells(first["algo"])])
            pick_done = True
    parts.append(['"algorithms":' + items for items in lists])
    return ["{" + ",".join(row) + "}" for row in zip(*parts)]


def _label_json(value) -> str:
    return json.dumps(_json_label(value))


def layer_objects(predictions: pd.DataFrame) -> list[dict]:
    """One JSON-ready object per layer: its number, labels and fields, math mode, the pick and
    its chance of being near the fastest, the extrapolation mark and every algorithm predicted
    to run with its time's intervals, rank 1 first (``algorithms`` empty if none)."""
    return [json.loads(text) for text in layer_json(predictions)]



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
        self.guarded = 0  # layers with a predicted time of PyTorch's own choice
        self.kept = 0  # of those, where seer recommends keeping it

    def add(self, predictions: pd.DataFrame | Table) -> None:
        """Count a chunk of predictions: a prediction frame or table."""
        predictions = prediction_columns(predictions)
        starts = _layer_starts(np.asarray(predictions["layer"]))
        self.layers += len(starts)
        if "pytorch_ms" in predictions:
            guarded = ~np.isnan(predictions["pytorch_ms"][starts])
            self.guarded += int(guarded.sum())
            self.kept += int((guarded & (predictions["recommended"][starts] == PYTORCH_CHOICE)).sum())
        self.extrapolated += int(predictions["extrapolated"][starts].sum())
        algo = predictions["algo"][starts]
        none = _missing(algo)
        self.none += int(none.sum())
        if none.any():
            layers = {c: values[starts[none]] for c, values in predictions.items() if c in LAYER_COLUMNS}
            self.too_big += int((frame_tensor_bytes(layers) > self.memory_bytes).sum())
        self.picks.update(algo[~none].tolist())


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


def write_network_step(handle: TextIO, fmt: str, result, skipped: pd.DataFrame, about: dict) -> None:
    """A network's training step (:class:`seer.networks.network_time.NetworkStep`): CSV, one row
    per distinct (module, layer); or one JSON object with what was predicted (``about``), the
    totals per pass, the layers and the skipped calls."""
    _check_format(fmt)
    if fmt == "csv":
        result.layers.to_csv(handle, index=False, float_format="%.6g")
        return

    def records(frame: pd.DataFrame) -> list[dict]:
        return json.loads(frame.to_json(orient="records"))

    json.dump({**about, "math": result.math, "totals": records(result.totals), "layers": records(result.layers),
               "skipped": skipped.to_dict(orient="records")}, handle, indent=1)
    handle.write("\n")

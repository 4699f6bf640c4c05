"""Layer files in SEER's Test-set-II format: reading (whole or streamed) and writing.

The first line is the number of layers N, then N lines of eight integers::

    batch in_ch in_width out_ch out_width kernel_width stride padding

separated by ASCII blanks (spaces, tabs). Blank lines and ``#`` comments are allowed
anywhere. A field is ASCII digits only (no sign, underscore, exponent or other script's
digits), at most :data:`seer.shapes.MAX_FIELD`; padding may be 0, every other field is at
least 1; the filter fits the padded input and ``out_width`` follows from the others
(:func:`seer.shapes.conv_out_width`). Every mistake is an :class:`~seer.errors.InputError`
that reads ``file:line: field: message``.

Two paths check a layer line, and they agree (the tests fuzz them against each other):
a vectorised one (:func:`_fast_values`, :func:`invalid_rows`) that checks a whole chunk
of lines with numpy, and :func:`_check_line`, which builds a :class:`ConvShape` and so
words every message exactly as :mod:`seer.shapes` does. The second runs only once a chunk
is known to hold a mistake, to find and explain the first one.
"""

from __future__ import annotations

import io
import os
import re
import sys
from pathlib import Path
from typing import Iterator, Sequence, TextIO

import numpy as np
import pandas as pd

from seer.errors import InputError
from seer.shapes import MAX_FIELD, SEER_FIELDS, ConvShape, ShapeError, conv_out_width, shape_frame

#: Layers per chunk when a whole file is read: enough to amortise numpy's per-call cost,
#: small enough that a chunk's text and arrays stay a few megabytes.
DEFAULT_CHUNK_LAYERS = 1 << 16
#: Name of standard input in messages, and the source that selects it.
STDIN_NAME = "<stdin>"
STDIN = "-"

LayerSource = str | os.PathLike | TextIO
LayerTarget = str | os.PathLike | TextIO
Layers = pd.DataFrame | np.ndarray | Sequence[ConvShape]

# Fields are separated by ASCII blanks only, so that a no-break or ideographic space is
# refused as part of a field instead of silently separating two. These are also exactly
# the bytes that C's isspace (and so numpy's text parser) skips.
_BLANKS = " \t\n\r\v\f"
_TOKEN = re.compile(f"[^{re.escape(_BLANKS)}]+")
_DIGITS = re.compile(r"[0-9]+")  # [0-9] is ASCII only, unlike str.isdigit and int()
_NEGATIVE = re.compile(r"-0*[1-9][0-9]*")  # an integer, only out of range: say so
_SYNTAX = "must be an integer (ASCII digits 0-9 only)"
_FIELD_LIST = f"{len(SEER_FIELDS)}: {' '.join(SEER_FIELDS)}"

_BYTE_DIGIT = np.zeros(256, dtype=bool)
_BYTE_DIGIT[ord("0"): ord("9") + 1] = True
_BYTE_ALLOWED = _BYTE_DIGIT.copy()
_BYTE_ALLOWED[[ord(c) for c in _BLANKS]] = True
_COLUMN = {name: i for i, name in enumerate(SEER_FIELDS)}
# ConvShape's lower bounds, per column: padding may be 0, every size is at least 1.
_LOW = np.array([0 if name == "padding" else 1 for name in SEER_FIELDS], dtype=np.int64)


# -- reading ------------------------------------------------------------------------------
def read_layers(source: LayerSource, *, name: str | None = None) -> pd.DataFrame:
    """All layers of a file: SEER's eight columns as int64, one row per layer, in file order.

    ``source`` is a path, ``"-"`` for standard input, or an open text stream; ``name``
    overrides the file name used in messages. Raises :class:`InputError` on any mistake.
    """
    chunks = list(iter_layer_chunks(source, DEFAULT_CHUNK_LAYERS, name=name))
    if not chunks:
        return _frame(np.empty((0, len(SEER_FIELDS)), dtype=np.int64), 0)
    return pd.concat(chunks) if len(chunks) > 1 else chunks[0]


def iter_layer_chunks(source: LayerSource, chunk_layers: int = DEFAULT_CHUNK_LAYERS, *,
                      name: str | None = None) -> Iterator[pd.DataFrame]:
    """Stream a layer file as frames of at most ``chunk_layers`` layers, reading line by line.

    Every frame yielded has been fully checked; its index continues across frames (layer
    number - 1). The count on the first line can only be checked at the end: if the file
    holds more or fewer layers, the same :class:`InputError` as :func:`read_layers` raises
    after (some of) the frames, so a caller writing results as it goes must discard them.
    """
    if isinstance(chunk_layers, bool) or not isinstance(chunk_layers, int) or chunk_layers < 1:
        raise ValueError(f"chunk_layers must be a positive integer, got {chunk_layers!r}")
    stream, label, close = _open(source, name)
    try:
        yield from _read_chunks(stream, label, chunk_layers)
    except UnicodeDecodeError:
        # A text stream decodes ahead in blocks, so no line number would be exact.
        raise InputError("not a text file: it is not valid UTF-8", path=label) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror or exc}", path=label) from None
    finally:
        close()


def _open(source: LayerSource, name: str | None):
    """(text stream, name for messages, function that releases what was opened here)."""
    if isinstance(source, (str, os.PathLike)) and os.fspath(source) == STDIN:
        stdin = sys.stdin
        if stdin is None:
            raise InputError("there is no standard input to read", path=name or STDIN_NAME)
        buffer = getattr(stdin, "buffer", None)
        if buffer is None:  # already text (a test's StringIO, an embedding's stream)
            return stdin, name or STDIN_NAME, lambda: None
        # Decode as UTF-8 whatever the locale says; detach, not close, to leave stdin open.
        wrapper = io.TextIOWrapper(buffer, encoding="utf-8-sig")
        return wrapper, name or STDIN_NAME, wrapper.detach
    if isinstance(source, (str, os.PathLike)):
        label = name or os.fspath(source)
        try:
            stream = open(source, encoding="utf-8-sig")  # -sig: a BOM is not content
        except FileNotFoundError:
            raise InputError("no such file", path=label) from None
        except IsADirectoryError:
            raise InputError("is a directory, not a layer file", path=label) from None
        except PermissionError:
            raise InputError("permission denied", path=label) from None
        except OSError as exc:
            raise InputError(f"cannot open: {exc.strerror or exc}", path=label) from None
        return stream, label, stream.close
    if isinstance(source, (io.RawIOBase, io.BufferedIOBase)):
        wrapper = io.TextIOWrapper(source, encoding="utf-8-sig")
        return wrapper, name or _stream_name(source), wrapper.detach
    return source, name or _stream_name(source), lambda: None


def _stream_name(stream) -> str:
    found = getattr(stream, "name", None)
    return found if isinstance(found, str) else "<input>"


def _read_chunks(stream: TextIO, path: str, chunk_layers: int) -> Iterator[pd.DataFrame]:
    count = count_line = None
    done = 0  # layers already yielded
    surplus_line = None  # line of the first layer beyond the count
    contents: list[str] = []
    numbers: list[int] = []
    # The hot loop: one pass of cheap string calls per line; all checks wait for the chunk.
    for number, line in enumerate(stream, start=1):
        if "#" in line:
            line = line[: line.index("#")]
        if not line or line.isspace():
            continue
        if count is None:
            count, count_line = _check_count(line.lstrip("\ufeff"), number, path), number
            continue
        contents.append(line)
        numbers.append(number)
        if len(contents) == chunk_layers:
            if surplus_line is None and done + len(contents) > count:
                surplus_line = numbers[count - done]
            yield _frame(_check_chunk(contents, numbers, path), done)
            done += len(contents)
            contents, numbers = [], []
    if count is None:
        raise InputError("empty file: the first line must be the number of shapes", path=path, line=1)
    values = _check_chunk(contents, numbers, path)
    if surplus_line is None and done + len(contents) > count:
        surplus_line = numbers[count - done]
    total = done + len(contents)
    if total != count:
        # Point at the first surplus layer, or at the count that promised more.
        raise InputError(f"the first line says {count} shapes, but the file has {total}",
                         path=path, line=surplus_line or count_line, field="count")
    if contents:
        yield _frame(values, done)


def _frame(values: np.ndarray, start: int) -> pd.DataFrame:
    return pd.DataFrame(values, columns=list(SEER_FIELDS),
                        index=pd.RangeIndex(start, start + len(values)))


def _check_count(content: str, number: int, path: str) -> int:
    tokens = _TOKEN.findall(content)
    if len(tokens) != 1:
        raise InputError(f"the first line must hold only the number of shapes, got {' '.join(tokens)!r}",
                         path=path, line=number, field="count")
    count = _parse_int(tokens[0], path, number, "count", "the number of shapes ")
    if not 0 <= count <= MAX_FIELD:
        raise InputError(f"the number of shapes must be between 0 and {MAX_FIELD}, got {count}",
                         path=path, line=number, field="count")
    return count


def _parse_int(token: str, path: str, number: int, field: str, subject: str = "") -> int:
    """The integer a field holds; refuses what int() would take but a layer file must not."""
    if not (_DIGITS.fullmatch(token) or _NEGATIVE.fullmatch(token)):
        raise InputError(f"{subject}{_SYNTAX}, got {token!r}", path=path, line=number, field=field)
    try:
        return int(token)
    except ValueError:  # beyond Python's limit on digits converted (sys.set_int_max_str_digits)
        raise InputError(f"{subject}must be at most {MAX_FIELD}, got a number of {len(token)} digits",
                         path=path, line=number, field=field) from None


def _check_chunk(contents: list[str], numbers: list[int], path: str) -> np.ndarray:
    """The (n, 8) values of a chunk of layer lines, or the InputError of its first mistake."""
    values = _fast_values(contents)
    if values is not None:
        return values
    for content, number in zip(contents, numbers):
        _check_line(content, number, path)
    # The two paths disagree: a bug in this module, not in the file.
    raise AssertionError(f"{path}: lines {numbers[0]}-{numbers[-1]} failed the vectorised check only")


def _fast_values(contents: list[str]) -> np.ndarray | None:
    """The (n, 8) int64 values of these layer lines, or None if any line has a mistake.

    Vectorised: one pass over the chunk's bytes checks that only ASCII digits and blanks
    occur and that every line has eight fields; numpy parses the integers, and
    :func:`invalid_rows` applies the rules of :class:`ConvShape` to all rows at once.
    """
    n = len(contents)
    if n == 0:
        return np.empty((0, len(SEER_FIELDS)), dtype=np.int64)
    text = "\n".join(contents)
    if not text.isascii():
        return None
    raw = np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    if not _BYTE_ALLOWED[raw].all():
        return None
    # Only digits and blanks remain, so the fields are the runs of digits; count them per line.
    digit = _BYTE_DIGIT[raw]
    starts = digit.copy()
    starts[1:] &= ~digit[:-1]
    lengths = np.fromiter(map(len, contents), dtype=np.int64, count=n)
    offsets = np.zeros(n, dtype=np.int64)
    np.cumsum(lengths[:-1] + 1, out=offsets[1:])  # + 1: the joining newline
    if (np.add.reduceat(starts, offsets, dtype=np.int64) != len(SEER_FIELDS)).any():
        return None
    # Base 10 whatever the leading zeros; a value beyond int64 becomes int64's maximum,
    # which is out of range all the same.
    values = np.fromstring(text, dtype=np.int64, sep=" ").reshape(n, len(SEER_FIELDS))
    if invalid_rows(values).any():
        return None
    return values


def invalid_rows(values: np.ndarray) -> np.ndarray:
    """Which rows of an (n, 8) integer array (SEER's field order) are not valid shapes.

    The vectorised twin of :class:`ConvShape`'s checks: a row is flagged exactly when
    ``ConvShape(*row)`` would raise :class:`ShapeError`.
    """
    values = np.asarray(values, dtype=np.int64)
    bad = ((values < _LOW) | (values > MAX_FIELD)).any(axis=1)
    # Rows already out of range stay flagged; clipping keeps the sums below inside int64.
    v = np.clip(values, -1, MAX_FIELD + 1)
    in_width, out_width, kernel, stride, padding = (
        v[:, _COLUMN[f]] for f in ("in_width", "out_width", "kernel_width", "stride", "padding"))
    bad |= kernel > in_width + 2 * padding
    with np.errstate(divide="ignore", invalid="ignore"):  # stride 0: a row flagged above
        bad |= out_width != conv_out_width(in_width, kernel, stride, padding)
    return bad


def _check_line(content: str, number: int, path: str) -> None:
    """Raise the InputError of one layer line, worded by :class:`ConvShape`; None if valid."""
    tokens = _TOKEN.findall(content)
    # Left to right: a field glued to the next by an odd space reads as that field's
    # mistake, not as a missing field at the end.
    values = {field: _parse_int(token, path, number, field) for field, token in zip(SEER_FIELDS, tokens)}
    if len(tokens) < len(SEER_FIELDS):
        raise InputError(f"missing field (expected {_FIELD_LIST})", path=path, line=number,
                         field=SEER_FIELDS[len(tokens)])
    if len(tokens) > len(SEER_FIELDS):
        raise InputError(f"extra field {tokens[len(SEER_FIELDS)]!r} after padding (expected {_FIELD_LIST})",
                         path=path, line=number, field="padding")
    try:
        ConvShape(**values)
    except ShapeError as exc:
        raise InputError(exc.message, path=path, line=number, field=exc.field) from None


# -- writing ------------------------------------------------------------------------------
def check_layers(layers: Layers) -> pd.DataFrame:
    """The layers as a frame of SEER's eight int64 columns; ShapeError names the first bad row."""
    if isinstance(layers, pd.DataFrame) or len(layers):
        frame = shape_frame(layers)
    else:  # shape_frame cannot tell the columns of an empty list
        frame = _frame(np.empty((0, len(SEER_FIELDS)), dtype=np.int64), 0)
    bad = np.flatnonzero(invalid_rows(frame.to_numpy()))
    if len(bad):
        row = frame.iloc[bad[0]]
        try:
            ConvShape(*(int(v) for v in row))
        except ShapeError as exc:
            raise ShapeError(exc.field, f"{exc.message} (layer {bad[0] + 1})") from None
        raise AssertionError(f"layer {bad[0] + 1} failed the vectorised check only")
    return frame


def format_layers(layers: Layers) -> str:
    """The layers (frame, array or ConvShape list) as the text of a SEER layer file."""
    frame = check_layers(layers)
    body = frame.to_csv(sep=" ", header=False, index=False, lineterminator="\n") if len(frame) else ""
    return f"{len(frame)}\n{body}"


def write_layers(target: LayerTarget, layers: Layers) -> None:
    """Write layers in SEER's format to a path, ``"-"`` (standard output) or a text stream."""
    text = format_layers(layers)  # a bad layer fails before anything is written
    if isinstance(target, (str, os.PathLike)) and os.fspath(target) == STDIN:
        sys.stdout.write(text)
    elif isinstance(target, (str, os.PathLike)):
        Path(target).write_text(text, encoding="utf-8")
    else:
        target.write(text)


# -- lists of ConvShape (the API grids and older callers use) ---------------------------------
def parse_shapes(text: str, path: str | Path = "<input>") -> list[ConvShape]:
    """Parse the text of a layer file; raise InputError naming file, line and field."""
    frame = read_layers(io.StringIO(text, newline=None), name=str(path))
    return [ConvShape(*row) for row in frame.itertuples(index=False)]


def read_shapes_file(path: str | Path) -> list[ConvShape]:
    """Read a layer file (a path, or ``"-"`` for standard input) as a list of ConvShape."""
    return [ConvShape(*row) for row in read_layers(path).itertuples(index=False)]


def format_shapes(shapes: Sequence[ConvShape]) -> str:
    """Shapes as the text of a SEER layer file (count line, then one shape per line)."""
    return format_layers(shapes)


def write_shapes_file(path: str | Path, shapes: Sequence[ConvShape]) -> None:
    """Write shapes in SEER's format (count line, then one shape per line)."""
    write_layers(path, shapes)

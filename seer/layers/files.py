"""Layer files: reading (whole or streamed) and writing, in two formats.

**Layer CSV** (any layer kind): a header line naming the columns, then one layer per line::

    batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,stride_h,stride_w,pad_h,pad_w,groups
    32,128,128,56,56,3,3,1,1,1,1,32

``batch, in_ch, out_ch`` are required, and ``in_h, in_w, kernel_h, kernel_w`` (or
``in_width, kernel_width`` for a square layer). Optional columns take their defaults when
left out or left empty: ``groups`` (1), ``stride_h, stride_w`` (1), ``pad_h, pad_w`` (0),
``dilation_h, dilation_w`` (1). A 3D layer gives ``in_d`` and ``kernel_d`` (a row that leaves
them empty is 2D), and may give ``stride_d, pad_d, dilation_d``. Output sizes
(``out_d, out_h, out_w``, or ``out_width``) are computed, and checked where given. A
``name`` column labels layers and is kept as text. A file is read as CSV when its name ends
in ``.csv`` or its first line holds a comma (a count line never does).

**SEER's Test-set-II format** (square 2D layers only): the first line is the number of
layers N, then N lines of eight integers::

    batch in_ch in_width out_ch out_width kernel_width stride padding

separated by ASCII blanks (spaces, tabs). Blank lines and ``#`` comments are allowed
anywhere. A field is ASCII digits only (no sign, underscore, exponent or other script's
digits), at most :data:`seer.layers.shapes.MAX_FIELD`; padding may be 0, every other field is at
least 1; the filter fits the padded input and ``out_width`` follows from the others
(:func:`seer.layers.shapes.conv_out_width`). Every mistake is an :class:`~seer.errors.InputError`
that reads ``file:line: field: message``.

Both readers return :func:`seer.layers.shapes.layer_frame` frames. For SEER's format, two paths
check a layer line, and they agree (the tests fuzz them against each other):
a vectorised one (:func:`_fast_values`, :func:`invalid_rows`) that checks a whole chunk
of lines with numpy, and :func:`_check_line`, which builds a :class:`ConvShape` and so
words every message exactly as :mod:`seer.layers.shapes` does. The second runs only once a chunk
is known to hold a mistake, to find and explain the first one.
"""

from __future__ import annotations

import csv
import io
import os
import re
import sys
from pathlib import Path
from typing import Iterator, Sequence, TextIO

import numpy as np
import pandas as pd

from seer.errors import InputError
from seer.layers.shapes import (LAYER_COLUMNS, LAYER_DEFAULTS, LAYER_FIELDS, MAX_FIELD, OUTPUT_FIELDS, SEER_FIELDS,
                                ConvShape, ShapeError, check_layer_frame, conv_out_width, invalid_layer_rows,
                                is_seer_layer, layer_frame, row_error, seer_frame)

#: Layers per chunk when a whole file is read: enough to amortise numpy's per-call cost,
#: small enough that a chunk's text and arrays stay a few megabytes.
DEFAULT_CHUNK_LAYERS = 1 << 16
#: The longest line a layer file may hold (a layer takes well under 200 characters, a CSV row
#: with a long name a few hundred): a longer one, or a file with no line breaks (NUL bytes,
#: ``/dev/zero``), is refused after reading this much, so memory stays bounded.
MAX_LINE_CHARS = 1 << 16
#: How much of a bad value an error message quotes.
QUOTED_CHARS = 40
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
    """All layers of a file as a layer frame (:data:`~seer.layers.shapes.LAYER_COLUMNS`, int64, and
    ``name`` where a CSV gives it), one row per layer, in file order.

    ``source`` is a path, ``"-"`` for standard input, or an open text stream; ``name``
    overrides the file name used in messages. Raises :class:`InputError` on any mistake.
    """
    chunks = list(iter_layer_chunks(source, DEFAULT_CHUNK_LAYERS, name=name))
    if not chunks:
        return layer_frame(pd.DataFrame(np.empty((0, len(SEER_FIELDS)), dtype=np.int64), columns=list(SEER_FIELDS)))
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
        lines = _content_lines(stream, label)
        first = next(lines, None)
        if first is not None and (label.lower().endswith(".csv") or "," in first[1]):
            yield from _read_csv_chunks(first, lines, label, chunk_layers)
        else:
            yield from _read_chunks(first, lines, label, chunk_layers)
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


def _quoted(text: str) -> str:
    """``repr`` of ``text``, cut to :data:`QUOTED_CHARS` characters: errors stay one short line."""
    return repr(text) if len(text) <= QUOTED_CHARS else f"{text[:QUOTED_CHARS]!r}... ({len(text):,} characters)"


def _content_lines(stream: TextIO, path: str) -> Iterator[tuple[int, str]]:
    """(line number, content) of every line that holds more than blanks and a ``#`` comment;
    InputError for a line longer than :data:`MAX_LINE_CHARS`."""
    # Read in blocks and split them in C: a file without line breaks is refused after one
    # block past the limit, and the hot loop stays one pass of cheap string calls per line.
    number, rest, done = 0, "", False
    while not done:
        block = stream.read(_READ_CHARS)
        if block:
            lines = (rest + block).split("\n")
            rest = lines.pop()
            if len(rest) > MAX_LINE_CHARS:
                raise _long_line(rest, number + len(lines) + 1, path)
        else:  # the end: a last line without a line break is a line too
            lines, done = ([rest] if rest else []), True
        for line in lines:
            number += 1
            if "#" in line:
                line = line[: line.index("#")]
            if not line or line.isspace():
                continue
            if len(line) > MAX_LINE_CHARS:
                raise _long_line(line, number, path)
            yield number, line


#: Characters read at a time by :func:`_content_lines`.
_READ_CHARS = 1 << 20


def _long_line(line: str, number: int, path: str) -> InputError:
    return InputError(f"line longer than {MAX_LINE_CHARS:,} characters (it starts {_quoted(line)}): not a layer file",
                      path=path, line=number)


def _read_chunks(first: tuple[int, str] | None, lines: Iterator[tuple[int, str]], path: str,
                 chunk_layers: int) -> Iterator[pd.DataFrame]:
    """SEER's format: the count line ``first``, then the layers."""
    count = count_line = None
    done = 0  # layers already yielded
    surplus_line = None  # line of the first layer beyond the count
    contents: list[str] = []
    numbers: list[int] = []
    if first is not None:
        count, count_line = _check_count(first[1].lstrip("\ufeff"), first[0], path), first[0]
    for number, line in lines:
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
    """A layer frame from SEER's eight columns, indexed by layer number - 1."""
    return layer_frame(pd.DataFrame(values, columns=list(SEER_FIELDS), index=pd.RangeIndex(start, start + len(values))))


def _check_count(content: str, number: int, path: str) -> int:
    tokens = _TOKEN.findall(content)
    if len(tokens) != 1:
        raise InputError(f"the first line must hold only the number of shapes, got {_quoted(' '.join(tokens))}",
                         path=path, line=number, field="count")
    count = _parse_int(tokens[0], path, number, "count", "the number of shapes ")
    if not 0 <= count <= MAX_FIELD:
        raise InputError(f"the number of shapes must be between 0 and {MAX_FIELD}, got {count}",
                         path=path, line=number, field="count")
    return count


def _parse_int(token: str, path: str, number: int, field: str, subject: str = "") -> int:
    """The integer a field holds; refuses what int() would take but a layer file must not."""
    if not (_DIGITS.fullmatch(token) or _NEGATIVE.fullmatch(token)):
        raise InputError(f"{subject}{_SYNTAX}, got {_quoted(token)}", path=path, line=number, field=field)
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
    ``ConvShape.seer(*row)`` would raise :class:`ShapeError`.
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
        raise InputError(f"extra field {_quoted(tokens[len(SEER_FIELDS)])} after padding (expected {_FIELD_LIST})",
                         path=path, line=number, field="padding")
    try:
        ConvShape.seer(**values)
    except ShapeError as exc:
        raise InputError(exc.message, path=path, line=number, field=exc.field) from None


# -- layer CSV ----------------------------------------------------------------------------
#: Square aliases a CSV may use instead of the per-axis 2D columns.
_SQUARE_ALIASES = {"in_width": ("in_h", "in_w"), "kernel_width": ("kernel_h", "kernel_w"),
                   "out_width": ("out_h", "out_w")}
_CSV_COLUMNS = ("name", *[f for f in LAYER_FIELDS if f != "dims"], *OUTPUT_FIELDS, *_SQUARE_ALIASES)
_REQUIRED = ("batch", "in_ch", "out_ch")


def _read_csv_chunks(header: tuple[int, str], lines: Iterator[tuple[int, str]], path: str,
                     chunk_layers: int) -> Iterator[pd.DataFrame]:
    columns = _check_header(header[1].lstrip("\ufeff"), header[0], path)
    done = 0
    contents: list[str] = []
    numbers: list[int] = []
    for number, line in lines:
        contents.append(line)
        numbers.append(number)
        if len(contents) == chunk_layers:
            yield _csv_chunk(contents, numbers, columns, path, done)
            done += len(contents)
            contents, numbers = [], []
    if contents:
        yield _csv_chunk(contents, numbers, columns, path, done)


def _check_header(content: str, number: int, path: str) -> list[str]:
    names = [c.strip() for c in next(csv.reader([content]))]
    for name in names:
        if name not in _CSV_COLUMNS:
            raise InputError(f"unknown column {_quoted(name)}; a layer CSV's columns are {', '.join(_CSV_COLUMNS)}",
                             path=path, line=number, field=name or "header")
        if names.count(name) > 1:
            raise InputError(f"column {_quoted(name)} appears twice", path=path, line=number, field=name)
    for alias, (h, w) in _SQUARE_ALIASES.items():
        if alias in names and (h in names or w in names):
            raise InputError(f"give {alias} or {h},{w}, not both", path=path, line=number, field=alias)
    needed = [*_REQUIRED, *(("in_h", "in_w") if "in_width" not in names else ()),
              *(("kernel_h", "kernel_w") if "kernel_width" not in names else ())]
    for name in needed:
        if name not in names:
            raise InputError(f"missing column {name!r} (required: batch, in_ch, out_ch, and in_h, in_w, kernel_h, "
                             "kernel_w or in_width, kernel_width)", path=path, line=number, field=name)
    if ("in_d" in names) != ("kernel_d" in names):
        raise InputError("a 3D layer file needs both in_d and kernel_d", path=path, line=number,
                         field="kernel_d" if "in_d" in names else "in_d")
    return names


def _csv_chunk(contents: list[str], numbers: list[int], columns: list[str], path: str, start: int) -> pd.DataFrame:
    """The layer frame of a chunk of CSV lines, or the InputError of its first mistake."""
    rows = list(csv.reader(contents))
    for row, number in zip(rows, numbers):
        if len(row) != len(columns):
            more = len(row) > len(columns)
            raise InputError(f"{'more' if more else 'fewer'} fields ({len(row)}) than the header's {len(columns)} "
                             "columns", path=path, line=number,
                             field=columns[len(columns) - 1] if more else columns[len(row)])
    if not "".join(contents).isascii():  # str.isdigit takes other scripts' digits: refuse them first
        for row, number in zip(rows, numbers):
            for name, cell in zip(columns, row):
                if name != "name" and not cell.strip().isascii():
                    raise InputError(f"{_SYNTAX}, got {_quoted(cell.strip())}", path=path, line=number, field=name)
    cells = np.array(rows, dtype=str).reshape(len(rows), len(columns))
    index = pd.RangeIndex(start, start + len(rows))
    values: dict[str, np.ndarray] = {}
    given: dict[str, np.ndarray] = {}
    for j, name in enumerate(columns):
        if name == "name":
            continue
        column = np.char.strip(cells[:, j])
        empty = column == ""
        ok = np.char.isdigit(column) | empty
        required = name in _REQUIRED or name in _SQUARE_ALIASES and name != "out_width" or (
            name in ("in_h", "in_w", "kernel_h", "kernel_w"))
        if required:
            ok &= ~empty
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            if empty[i]:
                raise InputError("missing value (this column is required)", path=path, line=numbers[i], field=name)
            _parse_int(str(column[i]), path, numbers[i], name)  # raises, worded as in SEER's format
            raise InputError(f"{_SYNTAX}, got {_quoted(str(column[i]))}", path=path, line=numbers[i], field=name)
        too_long = np.char.str_len(column) > 10
        if too_long.any():
            i = int(np.flatnonzero(too_long)[0])
            raise InputError(f"must be at most {MAX_FIELD}, got a number of {len(column[i])} digits",
                             path=path, line=numbers[i], field=name)
        number = np.where(empty, "0", column).astype(np.int64)
        given[name] = ~empty
        for target in _SQUARE_ALIASES.get(name, (name,)):
            default = LAYER_DEFAULTS.get(target, 0)
            values[target] = np.where(empty, default, number)
            given[target] = ~empty
    deep = np.zeros(len(rows), dtype=bool)
    for name in ("in_d", "kernel_d"):
        if name in given:
            deep |= given[name]
    for name in ("in_d", "kernel_d"):
        if name in given:
            missing = deep & ~given[name]
            if missing.any():
                i = int(np.flatnonzero(missing)[0])
                raise InputError("missing value (a 3D layer gives both in_d and kernel_d)", path=path,
                                 line=numbers[i], field=name)
    frame = layer_frame(pd.DataFrame({k: v for k, v in values.items() if k in LAYER_FIELDS}, index=index)
                        .assign(dims=np.where(deep, 3, 2)))
    bad = invalid_layer_rows(frame)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        exc = row_error(frame, i)
        raise InputError(exc.message, path=path, line=numbers[i], field=_alias_of(exc.field, columns))
    for name in OUTPUT_FIELDS:
        if name in given:
            wrong = given[name] & (values[name] != frame[name].to_numpy())
            if wrong.any():
                i = int(np.flatnonzero(wrong)[0])
                raise InputError(f"is {values[name][i]}, but the layer's other fields give {frame[name].iloc[i]}",
                                 path=path, line=numbers[i], field=_alias_of(name, columns))
    if "name" in columns:
        frame["name"] = cells[:, columns.index("name")].astype(object)
    return frame


def _alias_of(field: str, columns: list[str]) -> str:
    """The column a CSV used for ``field`` (``in_width`` for ``in_h``, say)."""
    for alias, targets in _SQUARE_ALIASES.items():
        if field in targets and alias in columns:
            return alias
    return field


# -- writing ------------------------------------------------------------------------------
#: Formats :func:`format_layers` writes.
LAYER_FORMATS = ("seer", "csv")


def check_layers(layers: Layers) -> pd.DataFrame:
    """The layers as a layer frame; ShapeError names the first bad row.

    SEER's eight columns (a frame or an array of them) are checked by SEER's rules,
    ``out_width`` included.
    """
    if not isinstance(layers, pd.DataFrame) and not len(layers):  # an empty list has no columns to tell
        return _frame(np.empty((0, len(SEER_FIELDS)), dtype=np.int64), 0)
    seer_columns = (not isinstance(layers, pd.DataFrame) and not isinstance(layers[0], ConvShape)) or (
        isinstance(layers, pd.DataFrame) and "in_width" in layers.columns and "in_h" not in layers.columns)
    if seer_columns:
        values = (layers[list(SEER_FIELDS)] if isinstance(layers, pd.DataFrame) else
                  pd.DataFrame(np.asarray(layers, dtype=np.int64).reshape(len(layers), -1)[:, :len(SEER_FIELDS)],
                               columns=list(SEER_FIELDS))).to_numpy(dtype=np.int64)
        bad = np.flatnonzero(invalid_rows(values))
        if len(bad):
            try:
                ConvShape.seer(*(int(v) for v in values[bad[0]]))
            except ShapeError as exc:
                raise ShapeError(exc.field, f"{exc.message} (layer {bad[0] + 1})") from None
    frame = layer_frame(layers)
    check_layer_frame(frame)
    return frame


def format_layers(layers: Layers, fmt: str = "auto") -> str:
    """The layers (frame, array or ConvShape list) as the text of a layer file.

    ``fmt``: ``seer`` (SEER's format; every layer must be square 2D, ungrouped and
    undilated), ``csv`` (the layer CSV, every column), or ``auto``: SEER's where it can
    describe every layer, else CSV.
    """
    frame = check_layers(layers)
    seer = is_seer_layer(frame).all()
    if fmt == "auto":
        fmt = "seer" if seer else "csv"
    if fmt == "seer":
        if not seer:
            bad = int(np.flatnonzero(~is_seer_layer(frame))[0])
            raise ShapeError("format", f"SEER's format cannot describe layer {bad + 1} ({ConvShape.from_mapping(frame.iloc[bad])}): "
                                       "write it as CSV")
        eight = seer_frame(frame)
        body = eight.to_csv(sep=" ", header=False, index=False, lineterminator="\n") if len(eight) else ""
        return f"{len(eight)}\n{body}"
    if fmt != "csv":
        raise ValueError(f"unknown layer format {fmt!r}; use {', '.join(LAYER_FORMATS)} or auto")
    columns = [c for c in LAYER_COLUMNS if c != "dims"]
    text = frame[columns].astype(str)
    flat = frame["dims"].to_numpy() == 2
    for name in columns:
        if name.endswith("_d"):
            text.loc[flat, name] = ""  # a 2D layer leaves its depth empty
    if isinstance(layers, pd.DataFrame) and "name" in layers.columns:
        text.insert(0, "name", layers["name"].astype(str).to_numpy())
    return text.to_csv(index=False, lineterminator="\n")


def write_layers(target: LayerTarget, layers: Layers, fmt: str = "auto") -> None:
    """Write layers (:func:`format_layers`) to a path, ``"-"`` (standard output) or a text stream."""
    text = format_layers(layers, fmt)  # a bad layer fails before anything is written
    if isinstance(target, (str, os.PathLike)) and os.fspath(target) == STDIN:
        sys.stdout.write(text)
    elif isinstance(target, (str, os.PathLike)):
        Path(target).write_text(text, encoding="utf-8")
    else:
        target.write(text)


# -- lists of ConvShape (the API grids and older callers use) ---------------------------------
def frame_shapes(frame: pd.DataFrame) -> list[ConvShape]:
    """One :class:`ConvShape` per row of a layer frame."""
    fields_ = frame[list(LAYER_FIELDS)].to_numpy(dtype=np.int64).tolist()
    return [ConvShape(*row) for row in fields_]


def parse_shapes(text: str, path: str | Path = "<input>") -> list[ConvShape]:
    """Parse the text of a layer file; raise InputError naming file, line and field."""
    return frame_shapes(read_layers(io.StringIO(text, newline=None), name=str(path)))


def read_shapes_file(path: str | Path) -> list[ConvShape]:
    """Read a layer file (a path, or ``"-"`` for standard input) as a list of ConvShape."""
    return frame_shapes(read_layers(path))


def format_shapes(shapes: Sequence[ConvShape]) -> str:
    """Shapes as the text of a layer file (:func:`format_layers`)."""
    return format_layers(shapes)


def write_shapes_file(path: str | Path, shapes: Sequence[ConvShape]) -> None:
    """Write shapes as a layer file (:func:`format_layers`)."""
    write_layers(path, shapes)

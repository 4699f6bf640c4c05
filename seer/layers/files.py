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
``name`` column, and any column seer does not use, labels layers: kept as text and carried
into the predictions (:func:`label_columns`). A file is read as CSV when its name ends
in ``.csv`` or its first line holds a comma (a count line never does). Fields are quoted as
the csv module quotes them; a quoted field may hold commas, quotes (doubled), ``#`` and line
breaks, which it keeps as written. Outside quotes ``#`` starts a comment, to the end of the
line. A record is numbered by the line it starts on. A number is ASCII digits, leading
zeros allowed as in SEER's format, with ASCII blanks around it at most.
:func:`format_layers` quotes every name that needs it, so a name reads back as it was.

**SEER's Test-set-II format** (square 2D layers only): the first line is the number of
layers N, then N lines of eight integers::

    batch in_ch in_width out_ch out_width kernel_width stride padding

separated by ASCII blanks (spaces, tabs). Blank lines and ``#`` comments are allowed
anywhere. A field is ASCII digits only (no sign, underscore, exponent or other script's
digits), at most :data:`seer.layers.shapes.MAX_FIELD`; padding may be 0, every other field is at
least 1; the filter fits the padded input and ``out_width`` follows from the others
(:func:`seer.layers.shapes.conv_out_width`). Every mistake is an :class:`~seer.errors.InputError`
that reads ``file:line: field: message``. In both formats a line ends at LF, CR LF or a lone
CR, whatever the source (a path, standard input or a stream).

Both readers return :func:`seer.layers.shapes.layer_frame` frames. For SEER's format, two paths
check a layer line, and they agree (the tests fuzz them against each other):
a vectorised one (:func:`_fast_values`, :func:`invalid_rows`) that checks a whole chunk
of lines with numpy, and :func:`_check_line`, which builds a :class:`ConvShape` and so
words every message exactly as :mod:`seer.layers.shapes` does. The second runs only once a chunk
is known to hold a mistake, to find and explain the first one.
"""

from __future__ import annotations

import csv
import difflib
import io
import itertools
import math
import os
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Generator, Iterator, Sequence, TextIO

import numpy as np

from seer.errors import InputError
from seer.layers.shapes import (LAYER_COLUMNS, LAYER_DEFAULTS, LAYER_FIELDS, MAX_FIELD, OUTPUT_FIELDS, SEER_FIELDS,
                                ConvShape, ShapeError, check_layer_frame, conv_out_width, invalid_layer_rows,
                                is_seer_layer, layer_columns, layer_frame, row_error, seer_frame, table_rows)

if TYPE_CHECKING:  # imported where used: seer predict reads layer tables, which need no pandas
    import pandas as pd

    from seer.layers.shapes import LayerTable

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
Layers = "pd.DataFrame | np.ndarray | Sequence[ConvShape]"

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
    import pandas as pd

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
    The frames of :func:`iter_layer_tables`' tables.
    """
    import pandas as pd

    done = 0
    for table in iter_layer_tables(source, chunk_layers, name=name):
        rows = table_rows(table)
        yield pd.DataFrame(table, index=pd.RangeIndex(done, done + rows))
        done += rows


def iter_layer_tables(source: LayerSource, chunk_layers: int = DEFAULT_CHUNK_LAYERS, *,
                      name: str | None = None) -> Iterator[LayerTable]:
    """:func:`iter_layer_chunks`' chunks as layer tables (:data:`~seer.layers.shapes.LayerTable`:
    the same columns as arrays), read without pandas (which ``seer predict`` then never imports)."""
    if isinstance(chunk_layers, bool) or not isinstance(chunk_layers, int) or chunk_layers < 1:
        raise ValueError(f"chunk_layers must be a positive integer, got {chunk_layers!r}")
    with _reading(source, name) as (blocks, label):
        number, first, rest = _first_line(blocks, label)
        if rest:
            blocks = itertools.chain([rest], blocks)
        if first is not None and (label.lower().endswith(".csv") or "," in first):
            yield from _read_csv_chunks((number, first), blocks, label, chunk_layers)
        else:
            yield from _read_chunks(None if first is None else (number, first),
                                    _content_lines(blocks, label, number), label, chunk_layers)


@contextmanager
def _reading(source: LayerSource, name: str | None) -> Iterator[tuple[Iterator[str], str]]:
    """(the text's blocks, the name for messages) of an opened source, released at the end;
    a decoding or reading failure inside becomes an InputError."""
    stream, label, close = _open(source, name)
    try:
        yield _blocks(stream), label
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
        wrapper = io.TextIOWrapper(buffer, encoding="utf-8-sig", newline="")
        return wrapper, name or STDIN_NAME, wrapper.detach
    if isinstance(source, (str, os.PathLike)):
        label = name or os.fspath(source)
        try:
            # -sig: a BOM is not content; newline="": line breaks are found here (_blocks), so that
            # a quoted CSV field keeps the ones it holds as they are.
            stream = open(source, encoding="utf-8-sig", newline="")
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
        wrapper = io.TextIOWrapper(source, encoding="utf-8-sig", newline="")
        return wrapper, name or _stream_name(source), wrapper.detach
    return source, name or _stream_name(source), lambda: None


def _stream_name(stream) -> str:
    found = getattr(stream, "name", None)
    return found if isinstance(found, str) else "<input>"


def _quoted(text: str) -> str:
    """``repr`` of ``text``, cut to :data:`QUOTED_CHARS` characters: errors stay one short line."""
    return repr(text) if len(text) <= QUOTED_CHARS else f"{text[:QUOTED_CHARS]!r}... ({len(text):,} characters)"


def _blocks(stream: TextIO) -> Iterator[str]:
    """The stream's text in blocks of about :data:`_READ_CHARS` characters; no block but the
    last ends in a CR, so a CR LF is never split between two."""
    while block := stream.read(_READ_CHARS):
        while block.endswith("\r"):
            more = stream.read(1)
            if not more:
                break
            block += more
        yield block


def _first_line(blocks: Iterator[str], path: str) -> tuple[int, str | None, str]:
    """(number, content) of the first line that holds more than blanks and a ``#`` comment, and
    the text after its line break; (lines read, None, "") where there is none."""
    # Only the lines up to the first with content go through here, one regex search each.
    buffer, number = "", 0
    for block in itertools.chain(blocks, [None]):
        final = block is None
        buffer += block or ""
        pos = 0
        while pos < len(buffer):
            found = _LINE_BREAK.search(buffer, pos)
            if found is None and not final:
                break
            end, after = (len(buffer), len(buffer)) if found is None else found.span()
            number += 1
            line = buffer[pos:end]
            if "#" in line:
                line = line[: line.index("#")]
            if line and not line.isspace():
                if len(line) > MAX_LINE_CHARS:
                    raise _long_line(line, number, path)
                return number, line, buffer[after:]
            pos = after
        buffer = buffer[pos:]
        if len(buffer) > MAX_LINE_CHARS:
            raise _long_line(buffer, number + 1, path)
    return number, None, ""


def _content_lines(blocks: Iterator[str], path: str, number: int = 0) -> Iterator[tuple[int, str]]:
    """(line number, content) of every line that holds more than blanks and a ``#`` comment,
    numbered on from ``number``; InputError for a line longer than :data:`MAX_LINE_CHARS`."""
    # Blocks are split in C: a file without line breaks is refused after one block past the
    # limit, and the hot loop stays one pass of cheap string calls per line.
    rest, done = "", False
    while not done:
        block = next(blocks, None)
        if block is not None:
            # A lone CR ends a line too, as in universal newlines; a CR LF's CR is one more blank.
            if "\r" in block and block.count("\r") != block.count("\r\n"):
                block = block.replace("\r\n", "\n").replace("\r", "\n")
            lines = (rest + block).split("\n")
            rest = lines.pop()
            if len(rest) > MAX_LINE_CHARS:
                raise _long_line(rest, number + len(lines) + 1, path)
        else:  # the end: a last line without a line break is a line too
            lines, done = ([rest] if rest else []), True
        number = yield from _numbered_content(lines, number, path)


def _numbered_content(lines: list[str], number: int, path: str) -> Generator[tuple[int, str], None, int]:
    """(line number, content) of each of ``lines`` that holds more than blanks and a ``#``
    comment, numbered on from ``number``; returns the last number used. InputError for a
    line longer than :data:`MAX_LINE_CHARS`."""
    for line in lines:
        number += 1
        if "#" in line:
            line = line[: line.index("#")]
        if not line or line.isspace():
            continue
        if len(line) > MAX_LINE_CHARS:
            raise _long_line(line, number, path)
        yield number, line
    return number


#: Characters read at a time by :func:`_blocks`.
_READ_CHARS = 1 << 20
#: A line break, as universal newlines reads them: CR LF, a lone CR, or LF.
_LINE_BREAK = re.compile(r"\r\n|\r|\n")


def _long_line(line: str, number: int, path: str) -> InputError:
    return InputError(f"line longer than {MAX_LINE_CHARS:,} characters (it starts {_quoted(line)}): not a layer file",
                      path=path, line=number)


def _read_chunks(first: tuple[int, str] | None, lines: Iterator[tuple[int, str]], path: str,
                 chunk_layers: int) -> Iterator[LayerTable]:
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
            yield layer_columns(_check_chunk(contents, numbers, path))
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
        yield layer_columns(values)


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
_CSV_COLUMNS = ("name", *LAYER_FIELDS, *OUTPUT_FIELDS, *_SQUARE_ALIASES)
#: What a 2D layer's depth fields may hold where a CSV gives them and says ``dims`` 2 (as
#: ``ConvShape.as_dict`` and the prediction files write a 2D layer).
_FLAT_DEPTH = {"in_d": 1, "kernel_d": 1, "stride_d": 1, "pad_d": 0, "dilation_d": 1, "out_d": 1}
_REQUIRED = ("batch", "in_ch", "out_ch")
#: Names a label column may not take: the columns that predictions add, and layer fields
#: that a CSV spells otherwise (SEER's format's names, the computed ``dims``).
_RESERVED = {"layer": "seer's output numbers the layers in it", "math": "seer's output uses it",
             "algo": "seer's output uses it", "predicted_ms": "seer's output uses it",
             "predicted_mj": "seer's output uses it", "rank": "seer's output uses it",
             "extrapolated": "seer's output uses it", "pick": "seer's output uses it",
             "algorithms": "seer's output uses it", "calls": "seer's output uses it",
             "stride": "give stride_h and stride_w", "padding": "give pad_h and pad_w",
             "pad": "give pad_h and pad_w", "dilation": "give dilation_h and dilation_w",
             "group": "the column is groups"}
#: The input's share of zeros, in [0, 1) (empty: 0): not a layer field (the dense algorithms'
#: times do not depend on it), but what seer's sparse kernels' times do (seer.predict.sparse).
SPARSITY_COLUMN = "sparsity"
#: How crowded the input's non-zeros are on pixels (:func:`seer.layers.sparsity.pixel_crowding`,
#: about 1 where they spread evenly; empty: not measured, taken as even): seer's sparse kernels'
#: times are predicted at it (seer.predict.sparse).
CROWDING_COLUMN = "crowding"
#: The columns that describe a layer's input rather than the layer, read as numbers.
_INPUT_COLUMNS = (SPARSITY_COLUMN, CROWDING_COLUMN)
#: A sparsity cell: a plain decimal number (an exponent allowed), ASCII only.
_SPARSITY = re.compile(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?", re.ASCII)


def label_columns(frame: pd.DataFrame | LayerTable) -> list[str]:
    """The columns of a read layer frame (or table) that label its layers (``name``, and any
    column of a layer CSV that seer does not use), in the file's order: predictions carry them along."""
    return [c for c in frame.keys() if c not in LAYER_COLUMNS]


def _read_csv_chunks(header: tuple[int, str], blocks: Iterator[str], path: str,
                     chunk_layers: int) -> Iterator[LayerTable]:
    """A layer CSV: the ``header`` line, then the records in ``blocks``, the text after it."""
    columns = _check_header(header[1].lstrip("\ufeff"), header[0], path)
    contents: list[str] = []
    numbers: list[int] = []
    for number, line in _csv_records(blocks, path, header[0], columns):
        contents.append(line)
        numbers.append(number)
        if len(contents) == chunk_layers:
            yield _csv_chunk(contents, numbers, columns, path)
            contents, numbers = [], []
    if contents:
        yield _csv_chunk(contents, numbers, columns, path)


def _csv_records(blocks: Iterator[str], path: str, number: int, columns: list[str]) -> Iterator[tuple[int, str]]:
    """(line number, text) of each record of a layer CSV, numbered on from ``number``.

    A record is a line, or more where a quoted field holds line breaks: it is numbered by the
    line it starts on, and keeps its quoted line breaks as written. ``#`` starts a comment
    only outside quotes; blank and comment-only lines are no records.
    """
    buffer = ""  # always starts at a record
    for block in itertools.chain(blocks, [None]):
        final = block is None
        buffer += block or ""
        if not final and '"' not in buffer and buffer.count("\r") == buffer.count("\r\n"):
            # The usual file, no quote and no lone CR: every line is a record, split in C.
            if "\r" in buffer:
                buffer = buffer.replace("\r\n", "\n")
            lines = buffer.split("\n")
            buffer = lines.pop()
            number = yield from _numbered_content(lines, number, path)
        else:
            records, used, number = _scan_records(buffer, number, final, path, columns)
            yield from records
            buffer = buffer[used:]
        if len(buffer) > MAX_LINE_CHARS:  # one record, unfinished: quoted line breaks in it mean an open quote
            if "\n" in buffer or "\r" in buffer:
                raise InputError(f"a record longer than {MAX_LINE_CHARS:,} characters, line breaks in quotes "
                                 f"included (it starts {_quoted(buffer)}): is a closing quote missing?",
                                 path=path, line=number + 1)
            raise _long_line(buffer, number + 1, path)


#: What ends or changes an unquoted stretch of a CSV record: a comment, a line break, or the
#: quote that opens a field (only at a field's start, as the csv module reads it).
_CSV_EVENT = re.compile(r'[#\r\n]|(?<=,)"')


def _scan_records(text: str, number: int, final: bool, path: str,
                  columns: list[str]) -> tuple[list[tuple[int, str]], int, int]:
    """The complete records of ``text`` (which starts at a record) as :func:`_csv_records` yields
    them, the offset of the unfinished rest, and the number of the last line consumed.

    Quotes are followed as the csv module's default dialect reads them: a field that starts
    with ``"`` is quoted up to the next lone ``"`` (``""`` is a quote in it); elsewhere a
    ``"`` is text. With ``final``, the end of ``text`` ends the file.
    """
    records: list[tuple[int, str]] = []
    pos, size = 0, len(text)
    while pos < size:
        start, line, at = pos, number + 1, pos
        quoted = text.startswith('"', at)
        while True:
            if quoted:  # at the opening quote: skip to the closing one
                close = text.find('"', at + 1)
                while 0 <= close < size - 1 and text[close + 1] == '"':
                    close = text.find('"', close + 2)
                if close < 0 or (close == size - 1 and not final):  # the next block may hold more
                    if not final:
                        return records, start, number
                    raise _unclosed_quote(text, start, at, line, path, columns)
                at, quoted = close + 1, False
            event = _CSV_EVENT.search(text, at)
            if event is None:
                if not final:
                    return records, start, number
                end = after = size
                break
            if event[0] == '"':
                at, quoted = event.start(), True
                continue
            end = event.start()
            if event[0] == "#":  # a comment, to the end of the line
                found = _LINE_BREAK.search(text, end)
                if found is None and not final:
                    return records, start, number
                after = size if found is None else found.end()
            else:
                after = event.end() + (event[0] == "\r" and text.startswith("\n", event.end()))
            break
        record = text[start:end]
        number = line + _line_breaks(record)
        pos = after
        if not record or record.isspace():
            continue
        if len(record) > MAX_LINE_CHARS:
            raise _long_line(record, line, path)
        records.append((line, record))
    return records, pos, number


def _line_breaks(text: str) -> int:
    """How many lines ``text`` ends: CR LF, a lone CR and LF each end one."""
    return text.count("\n") + text.count("\r") - text.count("\r\n")


def _unclosed_quote(text: str, start: int, quote: int, line: int, path: str, columns: list[str]) -> InputError:
    """The error of a quoted field at ``quote`` that the file ends inside."""
    before = next(csv.reader([text[start:quote]]), [])  # the fields before it, the last one empty
    index = max(len(before) - 1, 0)
    return InputError(f"a quoted field is never closed (it starts {_quoted(text[quote:])})", path=path,
                      line=line + _line_breaks(text[start:quote]), field=columns[min(index, len(columns) - 1)])


def _check_header(content: str, number: int, path: str) -> list[str]:
    names = [c.strip() for c in next(csv.reader([content]))]
    for name in names:
        if name not in _CSV_COLUMNS:
            _check_label(name, number, path)
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


def _check_label(name: str, number: int, path: str) -> None:
    """A column seer does not use labels the layers and passes through to the predictions,
    unless it has no name, is one seer's output or layer fields use, or reads like a
    misspelt layer column (which would otherwise silently take its default)."""
    if not name:
        raise InputError("a column has no name", path=path, line=number, field="header")
    if name in _INPUT_COLUMNS:
        return
    folded = name.lower().replace("-", "_").replace(" ", "_")
    reason = _RESERVED.get(folded)
    if reason is None and folded != name and folded in (*_CSV_COLUMNS, *_INPUT_COLUMNS):
        reason = f"the column is {folded}"
    if reason is None:
        close = difflib.get_close_matches(folded, (*_CSV_COLUMNS, *_INPUT_COLUMNS), n=1, cutoff=0.8)
        reason = f"did you mean {close[0]}?" if close else None
    if reason is not None:
        raise InputError(f"column {_quoted(name)} cannot label layers: {reason} (a layer CSV's columns are "
                         f"{', '.join(_CSV_COLUMNS)}; any other column passes through to the predictions)",
                         path=path, line=number, field=name)


def _csv_chunk(contents: list[str], numbers: list[int], columns: list[str], path: str) -> LayerTable:
    """The layer table of a chunk of CSV records, or the InputError of its first mistake in file order."""
    try:
        return _csv_table(contents, numbers, columns, path)
    except InputError:
        if len(contents) == 1:
            raise
    # Each record is checked on its own, so the first bad one ends the shortest prefix that fails:
    # bisection finds it (the vectorised checks go column by column, not in file order).
    good, bad = 0, len(contents)
    while bad - good > 1:
        middle = (good + bad) // 2
        try:
            _csv_table(contents[:middle], numbers[:middle], columns, path)
        except InputError:
            bad = middle
        else:
            good = middle
    _csv_table(contents[good:bad], numbers[good:bad], columns, path)  # raises its mistake
    raise AssertionError(f"{path}: lines {numbers[0]}-{numbers[-1]} failed together, but not one by one")


def _field_count_error(row: list[str], columns: list[str], number: int, path: str) -> InputError:
    """The error of a CSV record with more or fewer fields than its header has columns."""
    more = len(row) > len(columns)
    return InputError(f"{'more' if more else 'fewer'} fields ({len(row)}) than the header's {len(columns)} columns",
                      path=path, line=number, field=columns[-1] if more else columns[len(row)])


#: Blanks a CSV number may have around it: ASCII's, as between the fields of SEER's format.
_CELL_BLANKS = " \t\v\f"
#: Longer than this, blanks and leading zeros dropped, a number cell is a mistake: checked before
#: numpy makes every cell of a column as wide as its widest.
_LONGEST_CELL = 64


def _csv_table(contents: list[str], numbers: list[int], columns: list[str], path: str) -> LayerTable:
    """The layer table of CSV records; InputError for a mistake (the first of its kind found)."""
    rows = list(csv.reader(contents))
    for row, number in zip(rows, numbers):
        if len(row) != len(columns):
            raise _field_count_error(row, columns, number, path)
    text = "".join(contents)
    # str.isdigit takes other scripts' digits, and numpy drops a trailing NUL: refuse both first.
    if not text.isascii() or "\0" in text:
        for row, number in zip(rows, numbers):
            for name, cell in zip(columns, row):
                if name in _CSV_COLUMNS and name != "name" and (not cell.isascii() or "\0" in cell):
                    raise InputError(f"{_SYNTAX}, got {_quoted(cell.strip(_CELL_BLANKS))}", path=path, line=number,
                                     field=name)
    long_records = max(map(len, contents)) > _LONGEST_CELL  # only then can a number cell be long
    # Cells as objects, made fixed-width text column by column: a long name widens only its own.
    table = np.array(rows, dtype=object).reshape(len(rows), len(columns))
    values: dict[str, np.ndarray] = {}
    given: dict[str, np.ndarray] = {}
    for j, name in enumerate(columns):
        if name == "name" or name not in _CSV_COLUMNS:
            continue  # text that labels the layer
        cells = table[:, j]
        if long_records and max(map(len, cells)) > _LONGEST_CELL:
            cells = np.array([_short_cell(cell, number, name, path) for cell, number in zip(cells, numbers)],
                             dtype=object)
        column = np.char.strip(cells.astype(str), _CELL_BLANKS)
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
            raise _cell_error(str(column[i]), numbers[i], name, path)
        digits = np.char.lstrip(column, "0")  # leading zeros, as SEER's format takes them
        too_long = np.char.str_len(digits) > len(str(MAX_FIELD))
        if too_long.any():
            i = int(np.flatnonzero(too_long)[0])
            raise _cell_error(str(column[i]), numbers[i], name, path)
        number = _digit_values(digits)
        given[name] = ~empty
        for target in _SQUARE_ALIASES.get(name, (name,)):
            default = LAYER_DEFAULTS.get(target, 0)
            values[target] = np.where(empty, default, number)
            given[target] = ~empty
    deep = np.zeros(len(rows), dtype=bool)
    for name in ("in_d", "kernel_d"):
        if name in given:
            deep |= given[name]
    if "dims" in given:  # where a row says, it decides; elsewhere the depth fields do
        dims = values.pop("dims")
        stated = given["dims"]
        wrong = stated & (dims != 2) & (dims != 3)
        if wrong.any():
            i = int(np.flatnonzero(wrong)[0])
            raise InputError(f"dims must be 2 or 3, got {dims[i]}", path=path, line=numbers[i], field="dims")
        flat = stated & (dims == 2)
        for name, value in _FLAT_DEPTH.items():
            if name in given:
                deep_field = flat & given[name] & (values[name] != value)
                if deep_field.any():
                    i = int(np.flatnonzero(deep_field)[0])
                    raise InputError(f"a 2D layer (dims 2) has {name} {value}, got {values[name][i]}", path=path,
                                     line=numbers[i], field=name)
        deep = np.where(stated, dims == 3, deep)
    for name in ("in_d", "kernel_d"):
        if name in given:
            missing = deep & ~given[name]
            if missing.any():
                i = int(np.flatnonzero(missing)[0])
                raise InputError("missing value (a 3D layer gives both in_d and kernel_d)", path=path,
                                 line=numbers[i], field=name)
    frame = layer_columns({**{k: v for k, v in values.items() if k in LAYER_FIELDS}, "dims": np.where(deep, 3, 2)})
    bad = invalid_layer_rows(frame)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        exc = row_error(frame, i)
        raise InputError(exc.message, path=path, line=numbers[i], field=_alias_of(exc.field, columns))
    for name in OUTPUT_FIELDS:
        if name in given:
            wrong = given[name] & (values[name] != frame[name])
            if wrong.any():
                i = int(np.flatnonzero(wrong)[0])
                raise InputError(f"is {values[name][i]}, but the layer's other fields give {frame[name][i]}",
                                 path=path, line=numbers[i], field=_alias_of(name, columns))
    for j, name in enumerate(columns):
        if name in _INPUT_COLUMNS:
            frame[name] = np.asarray(_input_cells(name, table[:, j], numbers, path), dtype=float)
        elif name == "name" or name not in _CSV_COLUMNS:
            frame[name] = table[:, j].copy()
    return frame


def _input_cells(column: str, cells: np.ndarray, numbers: list[int], path: str) -> np.ndarray:
    """A ``sparsity`` column's cells as floats in [0, 1), empty as 0, or a ``crowding`` column's
    as floats from 0, empty as NaN (not measured); InputError naming the first bad cell's line."""
    sparsity = column == SPARSITY_COLUMN
    out = np.full(len(cells), 0.0 if sparsity else math.nan)
    for i, cell in enumerate(cells):
        text = str(cell).strip(_CELL_BLANKS)
        if not text:
            continue
        value = float(text) if len(text) <= _LONGEST_CELL and _SPARSITY.fullmatch(text) else math.nan
        if sparsity and not 0 <= value < 1:  # NaN fails too
            raise InputError(f"sparsity must be a number from 0 to below 1 (the share of the input's values that "
                             f"are zero; empty: 0), got {_quoted(text)}", path=path, line=numbers[i], field=column)
        if not sparsity and not 0 <= value < math.inf:
            raise InputError(f"crowding must be a number from 0 (how crowded the input's non-zeros are on pixels, "
                             f"about 1 where even; empty: not measured), got {_quoted(text)}", path=path,
                             line=numbers[i], field=column)
        out[i] = value
    return out


def read_module_inputs(source: LayerSource, *, name: str | None = None) -> pd.DataFrame:
    """Each convolution module's measured input, from a CSV with ``name``, ``sparsity`` and
    optionally ``crowding`` columns (what ``seer.torch.input_sparsity(...).layers`` holds; other
    columns are ignored), read as a layer CSV is: ``#`` comments, blank lines and quoted fields,
    line numbers as in the file, and the same cells (empty sparsity: 0; empty crowding: not
    measured, NaN). Columns ``name``, ``sparsity``, ``crowding`` where the file has it, and
    ``line``; InputError naming the file, line and field of the first mistake."""
    with _reading(source, name) as (blocks, label):
        number, first, rest = _first_line(blocks, label)
        if first is None:
            raise InputError("no header line: the columns are name, sparsity and optionally crowding", path=label)
        if rest:
            blocks = itertools.chain([rest], blocks)
        columns = [c.strip() for c in next(csv.reader([first.lstrip("\ufeff")]))]
        for column in ("name", SPARSITY_COLUMN):
            if column not in columns:
                raise InputError(f"missing column {column!r} (the columns are name, sparsity and optionally "
                                 "crowding)", path=label, line=number, field=column)
        for column in ("name", *_INPUT_COLUMNS):
            if columns.count(column) > 1:
                raise InputError(f"column {column!r} appears twice", path=label, line=number, field=column)
        wanted = {c: columns.index(c) for c in ("name", *_INPUT_COLUMNS) if c in columns}
        cells: dict[str, list[str]] = {c: [] for c in wanted}
        numbers: list[int] = []
        for line, record in _csv_records(blocks, label, number, columns):
            row = next(csv.reader([record]))
            if len(row) != len(columns):
                raise _field_count_error(row, columns, line, label)
            for column, j in wanted.items():
                cells[column].append(row[j])
            numbers.append(line)
    import pandas as pd

    frame = pd.DataFrame({"name": pd.Series(cells["name"], dtype=object)})
    for column in _INPUT_COLUMNS:
        if column in cells:
            frame[column] = _input_cells(column, np.array(cells[column], dtype=object), numbers, label)
    frame["line"] = np.array(numbers, dtype=np.int64)
    return frame


def _digit_values(digits: np.ndarray) -> np.ndarray:
    """The int64 values of fixed-width strings of at most 18 ASCII digits (``""`` is 0).

    Vectorised over the characters' code points: numpy's own ``astype(np.int64)`` converts
    each string through a Python int, several times slower.
    """
    width = digits.dtype.itemsize // 4
    codes = np.ascontiguousarray(digits).view(np.uint32).reshape(len(digits), width).astype(np.int64)
    present = codes != 0  # a shorter string is padded with NULs (a cell holding one was refused)
    places = present.sum(axis=1, keepdims=True) - 1 - np.arange(width)
    return np.where(present, (codes - ord("0")) * 10 ** np.maximum(places, 0), 0).sum(axis=1)


def _short_cell(cell: str, number: int, field: str, path: str) -> str:
    """A number cell, without its blanks and leading zeros where it is long; InputError if it stays long."""
    if len(cell) <= _LONGEST_CELL:
        return cell
    value = cell.strip(_CELL_BLANKS)
    if _DIGITS.fullmatch(value):
        value = value.lstrip("0") or "0"
    if len(value) > _LONGEST_CELL:
        raise _cell_error(value, number, field, path)
    return value


def _cell_error(value: str, number: int, field: str, path: str) -> InputError:
    """The error of a CSV number cell (blanks stripped, not empty) that is no valid number."""
    if _DIGITS.fullmatch(value):
        return InputError(f"must be at most {MAX_FIELD}, got a number of {len(value.lstrip('0'))} digits",
                          path=path, line=number, field=field)
    _parse_int(value, path, number, field)  # raises, worded as in SEER's format
    return InputError(f"{_SYNTAX}, got {_quoted(value)}", path=path, line=number, field=field)  # a negative


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
    import pandas as pd

    if not isinstance(layers, pd.DataFrame) and not len(layers):  # an empty list has no columns to tell
        return layer_frame(np.empty((0, len(SEER_FIELDS)), dtype=np.int64))
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
    import pandas as pd

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
    body = text.to_csv(index=False, lineterminator="\n")  # numbers and empty cells: nothing to quote
    if not (isinstance(layers, pd.DataFrame) and "name" in layers.columns):
        return body
    names = ["name", *map(_csv_field, layers["name"].astype(str))]
    return "".join(f"{name},{line}\n" for name, line in zip(names, body.split("\n")))


def _csv_field(text: str) -> str:
    """``text`` as a CSV field that :func:`read_layers` reads back as it is: quoted where it holds
    a comma, a quote, a line break or a ``#`` (which would start a comment outside quotes)."""
    if any(c in text for c in ',"#\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def write_layers(target: LayerTarget, layers: Layers, fmt: str = "auto") -> None:
    """Write layers (:func:`format_layers`) to a path, ``"-"`` (standard output) or a text stream."""
    text = format_layers(layers, fmt)  # a bad layer fails before anything is written
    if isinstance(target, (str, os.PathLike)) and os.fspath(target) == STDIN:
        sys.stdout.write(text)
    elif isinstance(target, (str, os.PathLike)):
        Path(target).write_text(text, encoding="utf-8", newline="")  # a quoted line break stays as it is
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

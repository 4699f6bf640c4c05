"""Layer files: strict parsing, located messages, standard input, streaming, writing."""

import io
import re
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from seer.errors import InputError
from seer.layers import files as layers
from seer.layers.files import (check_layers, format_layers, format_shapes, invalid_rows, iter_layer_chunks,
                               parse_shapes, read_layers, read_shapes_file, write_layers, write_shapes_file)
from seer.layers.files import frame_shapes, label_columns
from seer.layers.grids import quick_grid
from seer.layers.shapes import LAYER_COLUMNS, MAX_FIELD, SEER_FIELDS, ConvShape, ShapeError, seer_frame


def seer_rows(frame: pd.DataFrame) -> list[list[int]]:
    """SEER's eight numbers per row of a layer frame."""
    return seer_frame(frame).to_numpy().tolist()

GOOD = """3
# batch in_ch in_width out_ch out_width kernel_width stride padding
128 16 128 16 128 3 1 1
1\t3\t224\t64\t112\t7\t2\t3

32 512 7 2048 7 1 1 0   # a 1x1 layer
"""
ROWS = [[128, 16, 128, 16, 128, 3, 1, 1], [1, 3, 224, 64, 112, 7, 2, 3], [32, 512, 7, 2048, 7, 1, 1, 0]]
LAYER = "1 3 8 4 8 3 1 1"


def layer_file(n: int, seed: int = 0) -> str:
    """n valid layers, with comments and blank lines between some of them."""
    rng = np.random.default_rng(seed)
    lines = [f"# {n} layers", str(n)]
    for i in range(n):
        width, kernel, stride = int(rng.integers(7, 64)), int(rng.choice([1, 3, 5, 7])), int(rng.integers(1, 5))
        shape = ConvShape.square(int(rng.integers(1, 65)), int(rng.integers(1, 513)), width,
                                     int(rng.integers(1, 513)), kernel, stride, kernel // 2)
        lines.append(shape.to_seer_line() + ("  # note" if i % 7 == 0 else ""))
        if i % 5 == 0:
            lines.append("")
    return "\n".join(lines) + "\n"


def test_reads_seer_format_with_comments_blank_lines_and_tabs():
    frame = read_layers(io.StringIO(GOOD))
    assert list(frame.columns) == list(LAYER_COLUMNS)
    assert (frame.dtypes == np.int64).all() and list(frame.index) == [0, 1, 2]
    assert seer_rows(frame) == ROWS
    assert parse_shapes(GOOD) == [ConvShape.seer(*row) for row in ROWS]


def test_edge_values_are_accepted():
    text = f"0002\n{MAX_FIELD} 3 8 4 8 3 1 1\r\n1 1 1 1 1 1 {MAX_FIELD} 0\n"
    assert seer_rows(read_layers(io.StringIO(text))) == [
        [MAX_FIELD, 3, 8, 4, 8, 3, 1, 1], [1, 1, 1, 1, 1, 1, MAX_FIELD, 0]]
    assert read_layers(io.StringIO("0\n# nothing\n")).shape == (0, len(LAYER_COLUMNS))


@pytest.mark.parametrize("text, line, field, words", [
    # Today's mistakes, today's messages.
    ("2\n1 3 8 4 8 3 1 1\n", 1, "count", "says 2 shapes, but the file has 1"),
    ("1\n1 3 8 4 8 3 1 1\n1 3 8 4 8 3 1 1\n", 3, "count", "says 1 shapes, but the file has 2"),
    ("x\n1 3 8 4 8 3 1 1\n", 1, "count", "the number of shapes must be an integer"),
    ("1 2\n1 3 8 4 8 3 1 1\n", 1, "count", "only the number"),
    ("1\n1 3 8 4 8 3 1\n", 2, "padding", "missing field"),
    ("1\n1 3 8 4 8\n", 2, "kernel_width", "missing field"),
    ("1\n1 3 8 4 8 3 1 1 0\n", 2, "padding", "extra field '0'"),
    ("1\n1 3 8.5 4 8 3 1 1\n", 2, "in_width", "integer"),
    ("1\n1 three 8 4 8 3 1 1\n", 2, "in_ch", "integer"),
    ("1\n0 3 8 4 8 3 1 1\n", 2, "batch", f"between 1 and {MAX_FIELD}, got 0"),
    ("1\n1 3 8 -4 8 3 1 1\n", 2, "out_ch", f"between 1 and {MAX_FIELD}, got -4"),
    ("1\n1 3 8 4 8 3 0 1\n", 2, "stride", f"between 1 and {MAX_FIELD}, got 0"),
    ("1\n1 3 8 4 8 3 1 -1\n", 2, "padding", f"between 0 and {MAX_FIELD}, got -1"),
    ("1\n1 3 8 4 7 3 1 1\n", 2, "out_width", "give 8"),
    ("1\n1 3 4 4 1 9 1 0\n", 2, "kernel_width", "wider"),
    ("", 1, None, "empty"),
    ("# only a comment\n\n", 1, None, "empty"),
    # What int() takes but a layer file must not.
    ("1\n6_4 3 8 4 8 3 1 1\n", 2, "batch", "ASCII digits 0-9 only), got '6_4'"),
    ("1\n+8 3 8 4 8 3 1 1\n", 2, "batch", "got '+8'"),
    ("1\n1 ８ 8 4 8 3 1 1\n", 2, "in_ch", "got '８'"),  # full-width
    ("1\n1 3 ٨ 4 8 3 1 1\n", 2, "in_width", "got '٨'"),  # Arabic-Indic
    ("1\n1 3 8 4 8 3 1 0x10\n", 2, "padding", "got '0x10'"),
    ("1\n1 3 8 4 8 3 1 1e0\n", 2, "padding", "got '1e0'"),
    ("1\n1 3 8 x4 8 3 1 1\n", 2, "out_ch", "got 'x4'"),
    ("1\n1 3 8 4 8 3 1 1;\n", 2, "padding", "got '1;'"),
    ("1\n1 3 8 4 8 3 1 -0\n", 2, "padding", "got '-0'"),
    ("1\n1 3 8 4 8 3 1\u00a01\n", 2, "stride", "got '1\\xa01'"),  # a no-break space glues two
    ("1\n1 3 8 4 8 3 1\x1c1\n", 2, "stride", "got '1\\x1c1'"),
    # Values beyond what cuDNN's 32-bit descriptors hold; the message gives the range.
    ("1\n9223372036854775808 3 8 4 8 3 1 1\n", 2, "batch",
     f"between 1 and {MAX_FIELD}, got 9223372036854775808"),
    (f"1\n1 {MAX_FIELD + 1} 8 4 8 3 1 1\n", 2, "in_ch", f"between 1 and {MAX_FIELD}, got {MAX_FIELD + 1}"),
    ("1\n" + "7" * 5000 + " 3 8 4 8 3 1 1\n", 2, "batch", f"at most {MAX_FIELD}, got a number of 5000 digits"),
    # The count line follows the same rules.
    ("+1\n1 3 8 4 8 3 1 1\n", 1, "count", "got '+1'"),
    ("１\n1 3 8 4 8 3 1 1\n", 1, "count", "got '１'"),
    ("1_0\n", 1, "count", "got '1_0'"),
    ("0x1\n1 3 8 4 8 3 1 1\n", 1, "count", "got '0x1'"),
    ("-1\n", 1, "count", f"between 0 and {MAX_FIELD}, got -1"),
    (f"{MAX_FIELD + 1}\n", 1, "count", f"between 0 and {MAX_FIELD}, got {MAX_FIELD + 1}"),
    # The first mistake in file order, wherever it is.
    ("\n# c\n3\n" + LAYER + "\n\n" + LAYER + " # c\n1 3 8 4 8 3 1 2\n" + "1 3 8 4 8 3 1 +1\n",
     7, "out_width", "give 10"),
])
def test_every_mistake_names_file_line_and_field(text, line, field, words):
    with pytest.raises(InputError) as info:
        parse_shapes(text, "layers.txt")
    _assert_one_line_error(info.value, "layers.txt", line, field, words)


def _assert_one_line_error(err: InputError, path: str, line: int, field: str | None, words: str) -> None:
    """``path:line: field: message`` with ``words`` in the message, on one line."""
    assert (err.path, err.line, err.field) == (path, line, field), str(err)
    assert words in err.message
    assert str(err).startswith(f"{path}:{line}: {field + ': ' if field else ''}")
    assert "\n" not in str(err)


def test_a_file_names_itself_and_its_problems_in_one_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("2\n1 3 8 4 8 3 1 1\n1 3 8 4 8 3 1 1 1\n", encoding="utf-8")
    with pytest.raises(InputError, match=f"^{path}:3: padding: extra field '1'"):
        read_layers(path)
    with pytest.raises(InputError, match=f"^{tmp_path / 'nope.txt'}: no such file$"):
        read_layers(tmp_path / "nope.txt")
    with pytest.raises(InputError, match=f"^{tmp_path}: is a directory"):
        read_layers(tmp_path)
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"1\n1 3 8 4 8 3 1 1 # caf\xe9\n")  # Latin-1, not UTF-8
    with pytest.raises(InputError) as info:
        read_shapes_file(binary)
    assert str(info.value) == f"{binary}: not a text file: it is not valid UTF-8"


def test_a_byte_order_mark_is_not_content(tmp_path):
    path = tmp_path / "bom.txt"
    path.write_bytes(b"\xef\xbb\xbf1\r\n1 3 8 4 8 3 1 1\r\n")
    assert read_shapes_file(path) == [ConvShape.seer(1, 3, 8, 4, 8, 3, 1, 1)]


def test_standard_input_is_read_and_named(monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(GOOD))
    assert seer_rows(read_layers("-")) == ROWS
    monkeypatch.setattr(sys, "stdin", io.StringIO("1\n1 3 8 4 8 3 1 ８\n"))
    with pytest.raises(InputError, match="^<stdin>:2: padding: must be an integer"):
        read_layers("-")


def test_standard_input_bytes_are_decoded_as_utf8_and_left_open(monkeypatch):
    buffer = io.BytesIO("1\n1 3 8 4 8 3 1 1 # é\n".encode())
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(buffer, encoding="ascii"))
    assert read_layers("-").shape == (1, len(LAYER_COLUMNS))
    assert not buffer.closed
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"1\n\xff\n"), encoding="utf-8"))
    with pytest.raises(InputError, match="^<stdin>: not a text file"):
        read_layers("-")


@pytest.mark.parametrize("chunk_layers", [1, 2, 7, 64, 300, 301, 10_000])
def test_chunked_reading_equals_whole_file_reading(tmp_path, chunk_layers):
    path = tmp_path / "l.txt"
    path.write_text(layer_file(300))
    whole = read_layers(path)
    chunks = list(iter_layer_chunks(path, chunk_layers))
    assert all(0 < len(c) <= chunk_layers for c in chunks)
    assert len(chunks) == -(-300 // chunk_layers)
    pd.testing.assert_frame_equal(pd.concat(chunks), whole)
    assert frame_shapes(whole) == parse_shapes(path.read_text())


@pytest.mark.parametrize("promised, line", [(5, 8), (9, 2)])
def test_a_wrong_count_is_found_at_the_end_of_the_stream(promised, line):
    # Seven layers on lines 3-9 (line 1 a comment, line 2 the count).
    text = f"# layers\n{promised}\n" + "\n".join([LAYER] * 7) + "\n"
    with pytest.raises(InputError) as whole:
        read_layers(io.StringIO(text), name="l.txt")
    seen = []
    with pytest.raises(InputError) as streamed:
        for chunk in iter_layer_chunks(io.StringIO(text), 2, name="l.txt"):
            seen.append(len(chunk))
    assert str(streamed.value) == str(whole.value)
    assert str(whole.value) == f"l.txt:{line}: count: the first line says {promised} shapes, but the file has 7"
    assert sum(seen) >= 6  # the chunks before the end were all yielded (and validated)


def test_a_mistake_deep_in_a_stream_is_raised_with_its_line_before_later_chunks():
    lines = ["2000"] + [LAYER] * 2000
    lines[1500] = "1 3 8 4 8 3 1 ８"
    lines[1700] = "1 3 8 4 8"
    chunks = iter_layer_chunks(io.StringIO("\n".join(lines)), 256, name="big.txt")
    for _ in range(5):  # layers 1-1280 are fine
        next(chunks)
    with pytest.raises(InputError, match=r"^big.txt:1501: padding: must be an integer"):
        next(chunks)


def test_chunk_size_must_be_positive():
    with pytest.raises(ValueError, match="chunk_layers"):
        next(iter_layer_chunks(io.StringIO(GOOD), 0))


def test_write_then_read_round_trip(tmp_path):
    shapes = quick_grid()
    path = tmp_path / "grid.txt"
    write_shapes_file(path, shapes)
    assert read_shapes_file(path) == shapes
    assert path.read_text().splitlines()[0] == str(len(shapes))
    frame = read_layers(path)
    stream = io.StringIO()
    write_layers(stream, frame)
    assert stream.getvalue() == path.read_text() == format_layers(seer_frame(frame).to_numpy())


def test_format_matches_seer_layout_and_writes_to_stdout(capsys):
    shape = ConvShape.square(128, 16, 128, 16, 3, 1, 1)
    assert format_shapes([shape]) == "1\n128 16 128 16 128 3 1 1\n"
    assert format_layers([]) == "0\n"
    assert format_layers(pd.DataFrame(columns=list(SEER_FIELDS))) == "0\n"
    write_layers("-", [shape])
    assert capsys.readouterr().out == "1\n128 16 128 16 128 3 1 1\n"


def test_an_impossible_layer_is_not_written(tmp_path):
    frame = pd.DataFrame(ROWS, columns=list(SEER_FIELDS))
    frame.loc[1, "out_width"] = 111
    with pytest.raises(ShapeError) as info:
        write_layers(tmp_path / "x.txt", frame)
    assert info.value.field == "out_width" and "(layer 2)" in str(info.value)
    assert not (tmp_path / "x.txt").exists()
    assert seer_rows(check_layers(frame.iloc[[0, 2]])) == frame.iloc[[0, 2]].to_numpy().tolist()


# -- the two paths agree, and nothing but InputError escapes ---------------------------------------
# A valid shape with up to two fields replaced, so that every rule is met both ways.
VALID_ROWS = st.builds(
    lambda batch, in_ch, width, out_ch, kernel, stride, padding:
        list(ConvShape.square(batch, in_ch, width + kernel, out_ch, kernel, stride, padding).seer_fields.values()),
    st.integers(1, 9), st.integers(1, 9), st.integers(0, 9), st.integers(1, 9), st.integers(1, 7),
    st.integers(1, 4), st.integers(0, 3))
EDGE_VALUES = st.one_of(
    st.integers(-3, 12),
    st.sampled_from([MAX_FIELD - 1, MAX_FIELD, MAX_FIELD + 1, 2**62, 2**63 - 1, -(2**63)]),
)
ROW_EDITS = st.dictionaries(st.integers(0, 7), EDGE_VALUES, max_size=2)


def edited(row: list, edits: dict) -> list:
    return [edits.get(i, value) for i, value in enumerate(row)]


@settings(max_examples=1000, deadline=None)
@given(VALID_ROWS, ROW_EDITS)
def test_vectorised_rules_agree_with_convshape(row, edits):
    row = edited(row, edits)
    try:
        ConvShape.seer(*row)
        valid = True
    except ShapeError:
        valid = False
    assert bool(invalid_rows(np.array([row], dtype=np.int64))[0]) == (not valid)


ODD_TOKENS = st.sampled_from(["00", "007", "-1", "-0", "+1", "1_0", "８", "٣", "0x1", "1e1", "x", "1.0", "",
                              str(MAX_FIELD), str(MAX_FIELD + 1), "9" * 25, "0" * 25 + "3", "1\u00a02",
                              "1\x1c2", "1 2", "1#2"])
SEPARATORS = st.sampled_from([" ", "  ", "\t", " \t ", "\v", "\f", "\r", "\u3000", "\x1c", "\u00a0"])


@settings(max_examples=1000, deadline=None)
@given(VALID_ROWS, ROW_EDITS, st.dictionaries(st.integers(0, 8), ODD_TOKENS, max_size=2),
       st.lists(SEPARATORS, min_size=9, max_size=9), st.integers(6, 9))
@pytest.mark.slow
@example([1, 3, 8, 4, 8, 3, 1, 1], {}, {}, [" "] * 9, 8)
def test_vectorised_line_check_agrees_with_the_convshape_check(row, edits, odd, seps, length):
    tokens = [odd.get(i, str(v)) for i, v in enumerate(edited(row, edits) + [1])][:length]
    # Mostly the usual blanks between fields, sometimes a stranger one.
    line = "".join(t + (s if i % 3 == 0 else " ") for i, (t, s) in enumerate(zip(tokens, seps))).lstrip()
    assume(line and not line.isspace() and "#" not in line)  # blank and comment lines never get here
    fast = layers._fast_values([line])
    try:
        layers._check_line(line, 1, "f")
        slow = True
    except InputError:
        slow = False
    assert (fast is not None) == slow
    if slow:
        assert fast.tolist() == [[int(t) for t in line.split()]]


@settings(max_examples=300, deadline=None)
@given(st.one_of(
    st.text(alphabet="0123456789 -+_.\n\r\t#abx８٣\u00a0\u3000\x1c\x0c", max_size=120),
    st.text(max_size=80),
    st.lists(st.lists(st.integers(0, 40), min_size=7, max_size=9), max_size=4).map(
        lambda rows: f"{len(rows)}\n" + "\n".join(" ".join(map(str, r)) for r in rows)),
))
def test_fuzzed_input_is_either_parsed_or_an_input_error(text):
    for chunk_layers in (1, 3):
        try:
            frame = pd.concat(list(iter_layer_chunks(io.StringIO(text), chunk_layers, name="fuzz.txt")) or
                              [read_layers(io.StringIO("0\n"))])
        except InputError as err:
            assert err.path == "fuzz.txt" and err.line is not None and "\n" not in str(err)
        else:
            assert not invalid_rows(seer_frame(frame).to_numpy()).any()
            assert all(isinstance(s, ConvShape) for s in parse_shapes(text))


# -- layer CSV --------------------------------------------------------------------------------
CSV = """# layers of every kind
batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,stride_h,stride_w,pad_h,pad_w,groups,dilation_h,dilation_w
32,128,128,56,56,3,3,1,1,1,1,32,,
1,768,192,17,17,1,7,,,0,3,,,

2,64,64,64,96,3,3,2,2,2,2,,2,2
"""


def test_layer_csv_reads_every_kind_with_defaults():
    frame = read_layers(io.StringIO(CSV), name="layers.csv")
    assert list(frame.columns) == list(LAYER_COLUMNS) and list(frame.index) == [0, 1, 2]
    shapes = frame_shapes(frame)
    assert shapes[0] == ConvShape(32, 128, 128, groups=32, in_h=56, in_w=56, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
    assert shapes[1] == ConvShape(1, 768, 192, in_h=17, in_w=17, kernel_h=1, kernel_w=7, pad_w=3)
    assert shapes[2].out_h == 32 and shapes[2].out_w == 48 and shapes[2].dilation_h == 2
    # Detected by the comma on the first line too (standard input has no file name).
    pd.testing.assert_frame_equal(read_layers(io.StringIO(CSV)), frame)


def test_layer_csv_square_aliases_3d_names_and_output_checks():
    text = ("name,batch,in_ch,out_ch,in_width,kernel_width,out_width,stride_h,stride_w,padding\n")
    with pytest.raises(InputError) as info:
        read_layers(io.StringIO(text), name="a.csv")
    assert (info.value.line, info.value.field) == (1, "padding") and "give pad_h and pad_w" in info.value.message
    text = "name,batch,in_ch,out_ch,in_width,kernel_width,out_width\nconv1,1,3,64,224,7,218\n"
    frame = read_layers(io.StringIO(text), name="a.csv")
    assert frame["name"].tolist() == ["conv1"] and frame["out_h"].tolist() == [218]
    text = ("batch,in_ch,out_ch,in_d,in_h,in_w,kernel_d,kernel_h,kernel_w,pad_d,pad_h,pad_w,stride_d\n"
            "2,4,32,128,128,128,3,3,3,1,1,1,2\n1,3,8,,16,16,,3,3,,1,1,\n")
    frame = read_layers(io.StringIO(text), name="v.csv")
    assert frame["dims"].tolist() == [3, 2] and frame["out_d"].tolist() == [64, 1]
    assert frame_shapes(frame)[0].output_dims == (2, 32, 64, 128, 128)


@pytest.mark.parametrize("text, line, field, words", [
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h\n", 1, "kernel_w", "missing column"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,in_h\n", 1, "in_h", "twice"),
    ("batch,in_ch,out_ch,in_width,in_h,kernel_width\n", 1, "in_width", "not both"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,in_d\n", 1, "kernel_d", "both in_d and kernel_d"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,groups\n1,10,8,5,5,3,3,4\n", 2, "in_ch", "multiple of groups"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,groups\n1,8,10,5,5,3,3,4\n", 2, "out_ch", "multiple of groups"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,5,3,9\n", 2, "kernel_w", "larger than the padded"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,dilation_h\n1,8,8,5,5,3,3,3\n", 2, "kernel_h", "dilated by 3"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,out_h\n1,8,8,5,5,3,3,4\n", 2, "out_h", "give 3"),
    ("batch,in_ch,out_ch,in_width,kernel_width,out_width\n1,8,8,5,3,4\n", 2, "out_width", "give 3"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,,3,3\n", 2, "in_w", "missing value"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,5,3\n", 2, "kernel_w", "fewer fields"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,5,3,3,1\n", 2, "kernel_w", "more fields"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,5,3,+3\n", 2, "kernel_w", "ASCII digits"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,5,3,\uff13\n", 2, "kernel_w", "ASCII digits"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,5,3,3.0\n", 2, "kernel_w", "ASCII digits"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,5,99999999999,3,3\n", 2, "in_w", "at most"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n\n# c\n1,8,8,5,5,3,3\n0,8,8,5,5,3,3\n", 5, "batch",
     "between 1"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,in_d,kernel_d\n1,8,8,5,5,3,3,4,\n", 2, "kernel_d",
     "both in_d and kernel_d"),
    ("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,stride_d\n1,8,8,5,5,3,3,2\n", 2, "stride_d", "2D layer"),
    ("batch,in_ch,out_ch,dims,in_h,in_w,kernel_h,kernel_w\n1,8,8,4,5,5,3,3\n", 2, "dims", "2 or 3"),
    ("batch,in_ch,out_ch,dims,in_d,in_h,in_w,kernel_d,kernel_h,kernel_w\n1,8,8,2,4,5,5,1,3,3\n", 2, "in_d",
     "a 2D layer (dims 2) has in_d 1"),
])
def test_every_csv_mistake_names_file_line_and_field(text, line, field, words):
    with pytest.raises(InputError) as info:
        read_layers(io.StringIO(text), name="bad.csv")
    _assert_one_line_error(info.value, "bad.csv", line, field, words)


def test_layers_written_with_every_field_and_dims_read_back_the_same(tmp_path):
    # What ConvShape.as_dict gives (dims, and a 2D layer's depth fields at 1 and 0) is a layer CSV.
    layers = [ConvShape.square(8, 64, 56, 64, 3, 1, 1),
              ConvShape(1, 8, 8, in_d=8, in_h=8, in_w=8, kernel_d=3, kernel_h=3, kernel_w=3, pad_d=1, pad_h=1, pad_w=1),
              ConvShape(1, 8, 8, dims=3, in_d=1, in_h=8, in_w=8, kernel_d=1, kernel_h=3, kernel_w=3)]  # 3D, depth 1
    path = tmp_path / "every.csv"
    pd.DataFrame([layer.as_dict() for layer in layers]).to_csv(path, index=False)
    frame = read_layers(path)
    assert frame["dims"].tolist() == [2, 3, 3]
    assert [ConvShape.from_mapping(row) for row in frame.to_dict("records")] == layers


def test_general_layers_write_as_csv_and_read_back(tmp_path):
    from seer.layers.grids import quick_general_grid

    shapes = quick_general_grid()
    path = tmp_path / "general.csv"
    write_shapes_file(path, shapes)
    assert path.read_text().startswith("batch,in_ch,out_ch,groups,in_d,")
    assert read_shapes_file(path) == shapes
    with pytest.raises(ShapeError, match="write it as CSV"):
        format_layers(shapes, "seer")
    # A square layer written as CSV reads back the same.
    square = [ConvShape.square(8, 64, 56, 64, 3, 1, 1)]
    assert parse_shapes(format_layers(square, "csv"), "s.csv") == square


def test_a_file_without_line_breaks_is_refused_after_one_block_and_errors_quote_a_prefix(tmp_path):
    from seer.errors import InputError
    from seer.layers.files import MAX_LINE_CHARS, QUOTED_CHARS, read_layers

    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"1\n" + b"\0" * (4 * MAX_LINE_CHARS))
    for source in (nul, "/dev/zero"):  # /dev/zero never ends: only the cap stops the read
        with pytest.raises(InputError, match="line longer than") as caught:
            read_layers(source)
        assert len(str(caught.value)) < 400 and "\n" not in str(caught.value)
    long_token = tmp_path / "token.txt"
    long_token.write_text("1\n1 64 56 " + "x" * (MAX_LINE_CHARS // 2) + " 56 3 1 1\n")
    with pytest.raises(InputError, match=r"out_ch: .*\(32,768 characters\)") as caught:
        read_layers(long_token)
    assert len(str(caught.value)) < 100 + 4 * QUOTED_CHARS


# -- layer CSV: quotes, comments, line numbers and leading zeros ----------------------------------
NAMED = "name,batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n"


def test_a_hash_in_quotes_is_text_and_outside_quotes_starts_a_comment():
    text = (NAMED + '"block#1/conv",1,3,8,5,5,3,3  # a comment, with "a quote\n# a whole line\n'
            'plain,2,3,8,5,5,3,3#glued\n"say ""#1"", twice",3,3,8,5,5,3,3\n')
    frame = read_layers(io.StringIO(text), name="n.csv")
    assert list(frame["name"]) == ["block#1/conv", "plain", 'say "#1", twice'] and frame["batch"].tolist() == [1, 2, 3]
    with pytest.raises(InputError) as info:  # in quotes, a # is part of the field
        read_layers(io.StringIO(NAMED + 'x,1,3,8,5,5,3,"3#"\n'), name="n.csv")
    _assert_one_line_error(info.value, "n.csv", 2, "kernel_w", "got '3#'")


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_quoted_line_breaks_are_kept_and_errors_name_the_line_a_record_starts_on(tmp_path, newline):
    records = [NAMED.strip(), f'"two{newline}lines",1,3,8,5,5,3,3', '"three\nmixed\r\nlines",1,3,8,5,5,3,3',
               "# a comment", "ok,1,3,8,5,5,3,3", '"bad\nline",1,3,8,5,5,3,+3']
    path = tmp_path / "breaks.csv"  # lines: header 1, records on 2-3, 4-6, (7), 8, 9-10
    path.write_bytes(newline.join(records[:-1]).encode() + newline.encode())
    frame = read_layers(path)
    assert list(frame["name"]) == [f"two{newline}lines", "three\nmixed\r\nlines", "ok"]
    path.write_bytes(newline.join(records).encode() + newline.encode())
    for read in (lambda: read_layers(path), lambda: list(iter_layer_chunks(path, 1))):
        with pytest.raises(InputError) as info:
            read()
        _assert_one_line_error(info.value, str(path), 9, "kernel_w", "got '+3'")


@pytest.mark.parametrize("number", ["000000000008", "08", "0" * 30 + "8", " 0008\t", '"008"', " " * 100 + "8",
                                    "0" * 5000 + "8"])
def test_csv_numbers_take_leading_zeros_and_ascii_blanks_as_seers_format_does(number):
    frame = read_layers(io.StringIO(NAMED + f"a,{number},3,8,5,5,3,3\n"), name="z.csv")
    assert frame["batch"].tolist() == [8]
    seer = number.strip(' \t"')
    assert seer_rows(read_layers(io.StringIO(f"1\n{seer} 3 8 4 8 3 1 1\n"))) == [[8, 3, 8, 4, 8, 3, 1, 1]]


@pytest.mark.parametrize("number, words", [
    ("+8", "got '+8'"), ("-8", "got '-8'"), ("8.0", "got '8.0'"), ("0x8", "got '0x8'"), ("1e1", "got '1e1'"),
    ("٨", "got '٨'"), ("8\u3000", "got '8\\u3000'"), ("\u00a08", "got '\\xa08'"), ("8\x1c", "got '8\\x1c'"),
    ("8\x00", "got '8\\x00'"), ('"8\n"', "got '8\\n'"), ("0000" + "9" * 11, "got a number of 11 digits"),
    ("9" * 70, "got a number of 70 digits"), ("x" * 70, "got 'xxxxxxxxxx"), ("00004294967296", "got 4294967296"),
])
def test_csv_numbers_refuse_signs_floats_and_other_text(number, words):
    with pytest.raises(InputError) as info:
        read_layers(io.StringIO(NAMED + f"a,1,3,8,5,5,3,3\nb,{number},3,8,5,5,3,3\n"), name="z.csv")
    _assert_one_line_error(info.value, "z.csv", 3, "batch", words)


def test_the_first_csv_mistake_in_file_order_is_the_one_named():
    # Columns are checked one at a time; the error is still the first bad record's, chunks or not.
    text = NAMED + "a,1,3,8,5,5,3,3\nb,0,3,8,5,5,3,3\nc,1,3,8,5,x,3,3\nd,1,3,8,5,5,3,+3\n"
    for chunk_layers in (1, 2, 100):
        with pytest.raises(InputError) as info:
            list(iter_layer_chunks(io.StringIO(text), chunk_layers, name="o.csv"))
        _assert_one_line_error(info.value, "o.csv", 3, "batch", "between 1")


def test_an_unclosed_quote_is_one_error_and_a_runaway_one_stops_at_the_line_cap():
    from seer.layers.files import MAX_LINE_CHARS

    text = NAMED + 'a,1,3,8,5,5,3,3\nb,1,3,8,"5,5,3,3\nc,1,3,8,5,5,3,3\n'
    with pytest.raises(InputError) as info:
        read_layers(io.StringIO(text), name="q.csv")
    _assert_one_line_error(info.value, "q.csv", 3, "in_h", "a quoted field is never closed")
    runaway = NAMED + '"' + "x,1,3,8,5,5,3,3\n" * (MAX_LINE_CHARS // 8)
    with pytest.raises(InputError) as info:
        read_layers(io.StringIO(runaway), name="q.csv")
    _assert_one_line_error(info.value, "q.csv", 2, None, "is a closing quote missing?")
    assert len(str(info.value)) < 250


def test_a_long_name_does_not_widen_the_number_columns():
    import tracemalloc

    text = NAMED + f"{'n' * 60_000},1,3,8,5,5,3,3\n" + "a,1,3,8,5,5,3,3\n" * 200
    tracemalloc.start()
    try:
        frame = read_layers(io.StringIO(text), name="long.csv")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Every cell as wide as the name would be 201 x 8 x 60,000 x 4 bytes: 386 MB.
    assert len(frame) == 201 and len(frame["name"].iloc[0]) == 60_000 and peak < 30e6


@pytest.mark.parametrize("source", ["text", "file"])
def test_a_lone_cr_ends_a_line_whatever_the_source(tmp_path, source):
    def read(text: str) -> pd.DataFrame:
        path = tmp_path / "cr.txt"
        path.write_bytes(text.encode())
        return read_layers(io.StringIO(text) if source == "text" else path)

    text = "# classic Mac\r2\r1 3 8 4 8 3 1 1\r\n1 3 8 4 8 3 1 1\r"  # lines 1-4: CR, CR, CR LF, CR
    assert seer_rows(read(text)) == [[1, 3, 8, 4, 8, 3, 1, 1]] * 2
    with pytest.raises(InputError, match=r":3: padding: must be an integer"):
        read(text.replace("1\r\n", "x\r\n"))


def _csv_quoted(text: str) -> str:
    """A CSV field that reads back as ``text``: the test's own quoting, always quoting what is odd."""
    return '"' + text.replace('"', '""') + '"' if any(c in text for c in ',"#\r\n') else text


# Text a UTF-8 file (or an ONNX node's name) can hold: no lone surrogates.
ODD_NAMES = st.text(st.one_of(st.sampled_from(list(',"#\r\n \t\x00\ufeff\u2028\x1c')), st.characters(codec="utf-8")),
                    max_size=16)


@settings(max_examples=60, deadline=None)
@given(st.lists(ODD_NAMES, min_size=1, max_size=5))
def test_any_names_written_as_csv_read_back_the_same(names):
    layers = read_layers(io.StringIO(f"{len(names)}\n" + f"{LAYER}\n" * len(names)))
    text = format_layers(layers.assign(name=names), "csv")
    back = read_layers(io.BytesIO(text.encode()), name="names.csv")  # bytes, as a file is read
    assert list(back["name"]) == names and back.drop(columns="name").equals(layers)


# A layer CSV of valid layers with arbitrary names, numbers spelt every way the reader takes or
# refuses, comments, blank lines and every line break: read right, or one line naming the bad line.
OPTIONAL = ("groups", "stride_h", "stride_w", "pad_h", "pad_w", "dilation_h", "dilation_w")
REQUIRED = ("batch", "in_ch", "out_ch", "in_h", "in_w", "kernel_h", "kernel_w")
VALID_SPELLINGS = st.sampled_from(["{}", "{}", "0{}", "000000000000{}", " {}\t", '"{}"', '" 0{} "', "0" * 70 + "{}"])
BAD_SPELLINGS = st.sampled_from(["+{}", "-{}", "{}.0", "0x{}", "{}e0", "{} {}", "٣", "８", "{}\x00", '{}"', "\u00a0{}",
                                 "\x1c{}", "9" * 11, "4294967296", '"{}#"', '"{}\n"', "{}_0"])
BREAKS = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def layer_csvs(draw) -> tuple[str, list[dict], list[str], int | None]:
    """(file text, layers, names, line of the first bad record or None)."""
    columns = ["name", *REQUIRED, *draw(st.lists(st.sampled_from(OPTIONAL), unique=True))]
    columns = draw(st.permutations(columns))
    text, layers, names, first_bad = ",".join(columns), [], [], None
    for _ in range(draw(st.integers(0, 5))):
        text += draw(BREAKS)
        for _ in range(draw(st.integers(0, 2))):  # comment and blank lines, quotes and all
            text += draw(st.sampled_from(["", "  ", "# a comment", '# "an open quote', "\t# x,y"])) + draw(BREAKS)
        group = draw(st.integers(1, 2)) if "groups" in columns else 1
        layer = {"batch": draw(st.integers(1, 4)), "in_ch": group * draw(st.integers(1, 3)),
                 "out_ch": group * draw(st.integers(1, 3)), "groups": group,
                 "in_h": draw(st.integers(5, 9)), "in_w": draw(st.integers(5, 9)),
                 "kernel_h": draw(st.integers(1, 3)), "kernel_w": draw(st.integers(1, 3))}
        for name in OPTIONAL[1:]:  # stride 1-2, padding 0-1, dilation 1-2; defaults where not a column
            low = 0 if name.startswith("pad") else 1
            layer[name] = draw(st.integers(low, low + 1)) if name in columns else low
        line = len(re.findall(r"\r\n|\r|\n", text)) + 1
        bad = False
        cells = []
        for column in columns:
            if column == "name":
                names.append(draw(ODD_NAMES))
                always = draw(st.booleans())  # quoted whether it needs it or not
                cells.append('"' + names[-1].replace('"', '""') + '"' if always else _csv_quoted(names[-1]))
                continue
            if draw(st.integers(0, 30)) == 0:  # an empty cell is a mistake only in a required column
                spelling = draw(st.one_of(BAD_SPELLINGS, st.just("") if column in REQUIRED else BAD_SPELLINGS))
                bad = True
            else:
                spelling = draw(VALID_SPELLINGS)
            cells.append(spelling.replace("{}", str(layer[column])))
        # A blank before a comment belongs to the field before it: a name keeps it, a number drops it.
        comments = ["", "#note", '#"open'] if columns[-1] == "name" else ["", " # note", ' # "open']
        text += ",".join(cells) + draw(st.sampled_from(comments))
        if bad and first_bad is None:
            first_bad = line
        layers.append(layer)
    return text + draw(st.sampled_from(["", "\n", "\r\n"])), layers, names, first_bad


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(layer_csvs())
def test_a_layer_csv_reads_as_written_or_names_the_line_of_its_first_mistake(tmp_path, case):
    text, written, names, first_bad = case
    path = tmp_path / "fuzz.csv"
    path.write_bytes(text.encode())

    def chunked() -> pd.DataFrame:  # two layers a chunk: records and mistakes on either side of a chunk's end
        chunks = list(iter_layer_chunks(path, 2))
        return pd.concat(chunks) if chunks else read_layers(path)

    for read in (lambda: read_layers(path), chunked):
        try:
            frame = read()
        except InputError as err:
            assert first_bad is not None, str(err)
            assert (err.path, err.line) == (str(path), first_bad), str(err)
            assert str(err).startswith(f"{path}:{first_bad}: ") and len(str(err).splitlines()) == 1
        else:
            assert first_bad is None and len(frame) == len(written)
            if written:  # a file of no layers reads as SEER's columns only
                assert list(frame["name"]) == names
                assert frame[list(written[0])].to_dict("records") == written


def test_columns_seer_does_not_use_label_the_layers_in_file_order():
    text = ('stage,batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,name,note\n'
            '"stem, first",32,3,64,224,224,7,7,conv1,\n'
            's2,1,64,64,56,56,3,3,"layer ""2""",é\n')
    frame = read_layers(io.StringIO(text), name="a.csv")
    assert label_columns(frame) == ["stage", "name", "note"]
    assert frame["stage"].tolist() == ["stem, first", "s2"] and frame["name"].tolist() == ["conv1", 'layer "2"']
    assert frame["note"].tolist() == ["", "é"] and frame["batch"].tolist() == [32, 1]
    assert label_columns(read_layers(io.StringIO("1\n1 3 8 8 8 1 1 0\n"))) == []


@pytest.mark.parametrize("column, words", [
    ("stride", "give stride_h and stride_w"), ("Pad_H", "the column is pad_h"), ("kernal_w", "did you mean kernel_w?"),
    ("algo", "seer's output uses it"), ("layer", "seer's output numbers"), ("", "a column has no name"),
    ("Sparsity", "the column is sparsity"), ("sparsty", "did you mean sparsity?")])
def test_a_label_column_that_reads_like_a_layer_field_or_an_output_column_is_refused(column, words):
    text = f"batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,{column}\n1,3,8,8,8,1,1,2\n"
    with pytest.raises(InputError) as info:
        read_layers(io.StringIO(text), name="a.csv")
    assert info.value.line == 1 and words in info.value.message
    assert info.value.field == (column or "header")

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seer.errors import InputError
from seer import grids
from seer.grids import (SEER_KERNELS, SEER_MAX_FLOPS, format_shapes, networks_grid, parse_shapes,
                        quick_grid, read_shapes_file, resolve_grids, seer_grid, write_shapes_file)
from seer.shapes import ConvShape

GOOD = """3
# batch in_ch in_width out_ch out_width kernel_width stride padding
128 16 128 16 128 3 1 1
1\t3\t224\t64\t112\t7\t2\t3
32 512 7 2048 7 1 1 0   # a 1x1 layer
"""


def test_parses_seer_format_with_comments_and_tabs():
    shapes = parse_shapes(GOOD, "t.txt")
    assert shapes[1] == ConvShape.from_layer(1, 3, 224, 64, 7, 2, 3)
    assert len(shapes) == 3


def test_write_then_read_round_trip(tmp_path):
    shapes = quick_grid()
    path = tmp_path / "grid.txt"
    write_shapes_file(path, shapes)
    assert read_shapes_file(path) == shapes
    assert path.read_text().splitlines()[0] == str(len(shapes))


@pytest.mark.parametrize("text, line, field, words", [
    ("2\n1 3 8 4 8 3 1 1\n", 1, "count", "says 2 shapes"),
    ("1\n1 3 8 4 8 3 1 1\n1 3 8 4 8 3 1 1\n", 3, "count", "says 1 shapes"),
    ("x\n1 3 8 4 8 3 1 1\n", 1, "count", "integer"),
    ("1 2\n1 3 8 4 8 3 1 1\n", 1, "count", "only the number"),
    ("1\n1 3 8 4 8 3 1\n", 2, "padding", "missing field"),
    ("1\n1 3 8 4 8\n", 2, "kernel_width", "missing field"),
    ("1\n1 3 8 4 8 3 1 1 0\n", 2, "padding", "extra field"),
    ("1\n1 3 8.5 4 8 3 1 1\n", 2, "in_width", "integer"),
    ("1\n1 three 8 4 8 3 1 1\n", 2, "in_ch", "integer"),
    ("1\n0 3 8 4 8 3 1 1\n", 2, "batch", "positive"),
    ("1\n1 3 8 -4 8 3 1 1\n", 2, "out_ch", "positive"),
    ("1\n1 3 8 4 8 3 0 1\n", 2, "stride", "positive"),
    ("1\n1 3 8 4 8 3 1 -1\n", 2, "padding", ">= 0"),
    ("1\n1 3 8 4 7 3 1 1\n", 2, "out_width", "give 8"),
    ("1\n1 3 4 4 1 9 1 0\n", 2, "kernel_width", "wider"),
    ("", 1, None, "empty"),
])
def test_every_mistake_names_file_line_and_field(text, line, field, words):
    with pytest.raises(InputError) as info:
        parse_shapes(text, "layers.txt")
    err = info.value
    assert err.path == "layers.txt" and err.line == line and err.field == field
    assert words in str(err)
    assert str(err).startswith(f"layers.txt:{line}: ")


def test_missing_and_binary_files(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_shapes_file(tmp_path / "nope.txt")
    binary = tmp_path / "b.txt"
    binary.write_bytes(b"\xff\xfe\x00\x81")
    with pytest.raises(InputError, match="not a text file"):
        read_shapes_file(binary)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="0123456789 -.\nabx#\t", max_size=80))
def test_fuzzed_input_is_either_parsed_or_an_input_error(text):
    try:
        shapes = parse_shapes(text, "fuzz.txt")
    except InputError as err:
        assert err.path == "fuzz.txt" and err.line is not None
    else:
        assert all(isinstance(s, ConvShape) for s in shapes)


def test_seer_grid_is_reproducible_bounded_and_covers_every_kernel_and_stride():
    a, b = seer_grid(), seer_grid()
    assert a == b and len(set(a)) == len(a) > 1000
    assert max(s.flops for s in a) <= SEER_MAX_FLOPS
    assert {s.kernel_width for s in a} == set(SEER_KERNELS)
    assert {s.stride for s in a} == {1, 2, 3, 4}
    assert sum(s.stride == 1 for s in a) / len(a) == pytest.approx(0.5, abs=0.02)
    assert {s.padding == s.kernel_width // 2 for s in a} == {True, False}


def test_quick_grid_is_small_and_varied():
    q = quick_grid()
    assert 20 <= len(q) <= 40 and len(set(q)) == len(q)
    assert {s.kernel_width for s in q} == set(SEER_KERNELS) and {1, 2} <= {s.stride for s in q}


def test_test_set_ii_excludes_every_training_shape():
    training = set(seer_grid()) | set(networks_grid())
    t2 = grids.test_set_ii_grid()  # imported by module: pytest would collect a test_* name
    assert t2 and not (set(t2) & training)


def test_resolve_grids_dedupes_and_labels(tmp_path):
    path = tmp_path / "mine.txt"
    write_shapes_file(path, quick_grid()[:3] + [ConvShape.from_layer(2, 5, 9, 7, 3)])
    shapes = resolve_grids(f"quick,{path}")
    labels = {gs.shape: gs.grid for gs in shapes}
    assert len(shapes) == len(quick_grid()) + 1
    assert labels[quick_grid()[0]] == "quick"
    assert labels[ConvShape.from_layer(2, 5, 9, 7, 3)] == "file:mine"
    with pytest.raises(InputError, match="named grids are"):
        resolve_grids("seerr")


def test_format_shapes_matches_seer_layout():
    assert format_shapes([ConvShape.from_layer(128, 16, 128, 16, 3, 1, 1)]) == "1\n128 16 128 16 128 3 1 1\n"


def test_random_grid_is_reproducible_and_leaves_out_the_other_grids():
    from seer.grids import networks_grid, random_grid, seer_grid, test_set_ii_grid

    shapes = random_grid(300)
    assert shapes == random_grid(300) and len(set(shapes)) == 300
    assert not set(shapes) & (set(test_set_ii_grid()) | set(seer_grid()) | set(networks_grid()))
    # Off SEER's powers of two: odd widths and channel counts that are not powers of two.
    assert any(s.in_width % 2 for s in shapes)
    assert any(s.in_ch & (s.in_ch - 1) for s in shapes)

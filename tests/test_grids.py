import pytest

from seer.errors import InputError
from seer.layers import grids
from seer.layers import files as layers
from seer.layers.grids import SEER_KERNELS, SEER_MAX_FLOPS, networks_grid, quick_grid, resolve_grids, seer_grid
from seer.layers.shapes import ConvShape


def test_layer_file_functions_are_still_importable_from_grids():
    # Older callers read and write layer files through seer.layers.grids; seer.layers.files owns them now.
    for name in ("parse_shapes", "read_shapes_file", "format_shapes", "write_shapes_file"):
        assert getattr(grids, name) is getattr(layers, name)


@pytest.mark.slow
def test_seer_grid_is_reproducible_bounded_and_covers_every_kernel_and_stride():
    a, b = seer_grid(), seer_grid()
    assert a == b and len(set(a)) == len(a) > 1000
    assert max(s.flops for s in a) <= SEER_MAX_FLOPS
    assert {s.kernel_w for s in a} == set(SEER_KERNELS)
    assert {s.stride_w for s in a} == {1, 2, 3, 4}
    assert sum(s.stride_w == 1 for s in a) / len(a) == pytest.approx(0.5, abs=0.02)
    assert {s.pad_w == s.kernel_w // 2 for s in a} == {True, False}


def test_quick_grid_is_small_and_varied():
    q = quick_grid()
    assert 20 <= len(q) <= 40 and len(set(q)) == len(q)
    assert {s.kernel_w for s in q} == set(SEER_KERNELS) and {1, 2} <= {s.stride_w for s in q}


@pytest.mark.slow
def test_test_set_ii_excludes_every_training_shape():
    training = set(seer_grid()) | set(networks_grid())
    t2 = grids.test_set_ii_grid()  # imported by module: pytest would collect a test_* name
    assert t2 and not (set(t2) & training)


def test_resolve_grids_dedupes_and_labels(tmp_path):
    path = tmp_path / "mine.txt"
    layers.write_shapes_file(path, quick_grid()[:3] + [ConvShape.square(2, 5, 9, 7, 3)])
    shapes = resolve_grids(f"quick,{path}")
    labels = {gs.shape: gs.grid for gs in shapes}
    assert len(shapes) == len(quick_grid()) + 1
    assert labels[quick_grid()[0]] == "quick"
    assert labels[ConvShape.square(2, 5, 9, 7, 3)] == "file:mine"
    with pytest.raises(InputError, match="named grids are"):
        resolve_grids("seerr")


def test_resolve_grids_reports_a_bad_layer_file_by_line(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("1\n1 3 8 4 8 3 1 ８\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"bad.txt:2: padding: must be an integer"):
        resolve_grids(str(path))


@pytest.mark.slow
def test_random_grid_is_reproducible_and_leaves_out_the_other_grids():
    from seer.layers.grids import networks_grid, random_grid, seer_grid, test_set_ii_grid

    shapes = random_grid(300)
    assert shapes == random_grid(300) and len(set(shapes)) == 300
    assert not set(shapes) & (set(test_set_ii_grid()) | set(seer_grid()) | set(networks_grid()))
    # Off SEER's powers of two: odd widths and channel counts that are not powers of two.
    assert any(s.in_w % 2 for s in shapes)
    assert any(s.in_ch & (s.in_ch - 1) for s in shapes)


def test_kinds_filter_a_grid_to_the_named_layer_kinds():
    from seer.layers.grids import of_kinds, parse_kinds, resolve_grids
    from seer.layers.shapes import layer_frame, layer_kind_flags

    shapes = resolve_grids("networks-general")
    general = of_kinds(shapes, parse_kinds("general"))
    flags = layer_kind_flags(layer_frame([s.shape for s in general]))
    assert 0 < len(general) < len(shapes) and not flags["square"].any()
    depthwise = of_kinds(shapes, parse_kinds("depthwise"))
    assert depthwise and all(s.shape.groups == s.shape.in_ch > 1 for s in depthwise)
    # Order is kept, and the union of every kind is the whole grid.
    assert of_kinds(shapes, parse_kinds("square,general")) == shapes
    assert parse_kinds("3D,3D") == ("3D",)


def test_an_unknown_kind_is_refused_by_name(capsys):
    from seer.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["collect", "--gpu", "h100", "--kinds", "grouped,wide"])
    assert exit_info.value.code == 2
    assert "unknown layer kind 'wide'" in capsys.readouterr().err

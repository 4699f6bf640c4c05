from dataclasses import fields

import numpy as np
import pandas as pd
import pytest

from seer.layers.shapes import (LAYER_COLUMNS, LAYER_FIELDS, LAYER_KIND_NAMES, ConvShape, ShapeError, conv_out_width,
                                describe, frame_flops, invalid_layer_rows, is_seer_layer, layer_frame, layer_kind_flags,
                                seer_frame)


def test_out_width_rule_matches_frameworks():
    assert conv_out_width(224, 7, 2, 3) == 112
    assert conv_out_width(56, 3, 1, 1) == 56
    assert conv_out_width(56, 1, 2, 0) == 28
    assert conv_out_width(227, 11, 4, 0) == 55
    # Dilation spreads the kernel: a 3x3 dilated by 2 spans 5 (PyTorch's formula).
    assert conv_out_width(32, 3, 1, 2, dilation=2) == 32
    assert conv_out_width(65, 3, 2, 0, dilation=4) == 29


def test_flops_and_bytes_by_hand():
    s = ConvShape.square(2, 3, 8, 4, 3, 1, 1)  # 2x3x8x8 -> 2x4x8x8
    assert s.out_w == s.out_h == 8
    assert s.macs == 2 * 4 * 3 * 9 * 64
    assert s.flops == 2 * s.macs
    assert s.tensor_bytes == 4 * (2 * 3 * 64 + 4 * 3 * 9 + 2 * 4 * 64)


def test_grouped_layer_counts_channels_per_group():
    s = ConvShape(2, 32, 64, groups=8, in_h=10, in_w=12, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
    assert s.filter_dims == (64, 4, 3, 3)
    assert s.macs == 2 * 64 * 4 * 9 * 10 * 12
    assert s.tensor_elements == (2 * 32 * 120, 64 * 4 * 9, 2 * 64 * 120)
    depthwise = ConvShape(1, 16, 16, groups=16, in_h=8, in_w=8, kernel_h=3, kernel_w=3)
    assert depthwise.macs == 16 * 9 * 36


def test_3d_layer_has_five_dimensional_descriptors():
    s = ConvShape(1, 4, 16, in_d=32, in_h=30, in_w=28, kernel_d=3, kernel_h=3, kernel_w=3, stride_d=2, pad_d=1,
                  pad_h=1, pad_w=1)
    assert s.dims == 3 and s.is_3d
    assert s.input_dims == (1, 4, 32, 30, 28)
    assert s.output_dims == (1, 16, 16, 30, 28)
    assert s.spatial_stride == (2, 1, 1) and s.spatial_padding == (1, 1, 1)
    assert s.macs == 16 * 4 * 27 * 16 * 30 * 28


@pytest.mark.parametrize("field, kwargs", [
    ("batch", dict(batch=0)),
    ("in_ch", dict(in_ch=-3)),
    ("pad_h", dict(pad_h=-1)),
    ("stride_w", dict(stride_w=0)),
    ("kernel_w", dict(kernel_w=9, in_w=5, pad_w=0)),
    ("kernel_h", dict(kernel_h=3, dilation_h=4, in_h=8, pad_h=0)),
    ("in_ch", dict(groups=4, in_ch=6, out_ch=8)),
    ("out_ch", dict(groups=3, in_ch=6, out_ch=8)),
    ("stride_d", dict(dims=2, stride_d=2)),
    ("dims", dict(dims=4)),
    ("batch", dict(batch=1.5)),
    ("batch", dict(batch=True)),
])
def test_invalid_layers_name_their_field(field, kwargs):
    base = dict(batch=1, in_ch=3, out_ch=8, in_h=56, in_w=56, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
    base.update(kwargs)
    with pytest.raises(ShapeError) as info:
        ConvShape(**base)
    assert info.value.field == field


@pytest.mark.parametrize("field, args", [
    ("out_width", (1, 3, 56, 8, 57, 3, 1, 1)),
    ("kernel_width", (1, 3, 5, 8, 1, 9, 1, 0)),
    ("padding", (1, 3, 5, 8, 1, 3, 1, -1)),
    ("in_width", (1, 3, 0, 8, 1, 3, 1, 0)),
])
def test_seer_constructor_names_seers_fields(field, args):
    with pytest.raises(ShapeError) as info:
        ConvShape.seer(*args)
    assert info.value.field == field


def test_shape_id_is_stable_and_distinct():
    a = ConvShape.square(8, 64, 56, 64, 3, 1, 1)
    b = ConvShape.square(8, 64, 56, 64, 3, 1, 1)
    c = ConvShape.square(8, 64, 56, 64, 3, 2, 1)
    assert a.shape_id == b.shape_id != c.shape_id
    # Frozen in stone: the id keys committed data, so it must never change.
    assert ConvShape.square(1, 3, 224, 64, 7, 2, 3).shape_id == "2a873c56b4b7"
    grouped = ConvShape(8, 64, 64, groups=2, in_h=56, in_w=56, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
    flat3d = ConvShape(8, 64, 64, dims=3, in_h=56, in_w=56, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
    assert len({a.shape_id, grouped.shape_id, flat3d.shape_id}) == 3


def test_round_trip_through_dict_and_seer_line():
    s = ConvShape.square(32, 512, 7, 2048, 1, 1, 0)
    d = s.as_dict()
    assert list(d) == list(LAYER_COLUMNS)
    assert ConvShape.from_mapping(d) == s
    assert s.to_seer_line() == "32 512 7 2048 7 1 1 0"
    assert ConvShape.from_mapping(dict(zip(("batch", "in_ch", "in_width", "out_ch", "out_width", "kernel_width",
                                            "stride", "padding"), (32, 512, 7, 2048, 7, 1, 1, 0)))) == s


def test_fields_are_in_table_order():
    assert tuple(f.name for f in fields(ConvShape)) == LAYER_FIELDS


def test_description_reads_like_the_issue():
    g = ConvShape(32, 128, 128, groups=32, in_h=56, in_w=56, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
    assert describe(g.as_dict()) == str(g) == "32x128x56x56 -> 128, 3x3 s1 p1 g32"
    f = ConvShape(1, 768, 192, in_h=17, in_w=17, kernel_h=1, kernel_w=7, pad_w=3)
    assert str(f) == "1x768x17x17 -> 192, 1x7 s1 p0,3"
    d = ConvShape(2, 4, 8, in_d=16, in_h=32, in_w=32, kernel_d=3, kernel_h=3, kernel_w=3, dilation_d=2,
                  dilation_h=2, dilation_w=2, pad_d=2, pad_h=2, pad_w=2)
    assert str(d) == "2x4x16x32x32 -> 8, 3x3x3 s1 p2 d2"


def test_frames_agree_with_the_dataclass():
    rng = np.random.default_rng(0)
    shapes = []
    rows = []
    for _ in range(3000):
        kwargs = dict(batch=int(rng.integers(1, 4)), in_ch=int(rng.choice((4, 6, 8))), out_ch=int(rng.choice((4, 6))),
                      groups=int(rng.choice((1, 2, 3))), in_h=int(rng.integers(1, 9)), in_w=int(rng.integers(1, 9)),
                      kernel_h=int(rng.integers(1, 5)), kernel_w=int(rng.integers(1, 5)),
                      stride_h=int(rng.integers(0, 3)), pad_w=int(rng.integers(-1, 3)),
                      dilation_h=int(rng.integers(1, 4)))
        if rng.random() < 0.3:
            kwargs |= dict(in_d=int(rng.integers(1, 6)), kernel_d=int(rng.integers(1, 4)), dims=3)
        else:
            kwargs |= dict(in_d=1, kernel_d=int(rng.choice((1, 1, 1, 2))), dims=2)
        rows.append(kwargs)
        try:
            shapes.append(ConvShape(**kwargs))
        except ShapeError:
            shapes.append(None)
    frame = layer_frame(pd.DataFrame(rows))
    bad = invalid_layer_rows(frame)
    assert list(bad) == [s is None for s in shapes]
    good = [s for s in shapes if s is not None]
    assert 300 < len(good) < 2900
    expected = layer_frame(good)
    assert (frame[~bad].reset_index(drop=True) == expected).all().all()
    assert np.allclose(frame_flops(expected), [s.flops for s in good])


def test_layer_kinds_and_seer_view():
    layers = [ConvShape.square(1, 8, 8, 8, 3, 1, 1),
              ConvShape(1, 8, 8, groups=2, in_h=8, in_w=8, kernel_h=3, kernel_w=3),
              ConvShape(1, 8, 8, groups=8, in_h=8, in_w=8, kernel_h=3, kernel_w=3),
              ConvShape(1, 8, 8, in_h=8, in_w=8, kernel_h=1, kernel_w=7, pad_w=3),
              ConvShape(1, 8, 8, in_h=8, in_w=16, kernel_h=3, kernel_w=3),
              ConvShape(1, 8, 8, in_h=8, in_w=8, kernel_h=3, kernel_w=3, dilation_h=2, dilation_w=2),
              ConvShape(1, 8, 8, in_d=4, in_h=8, in_w=8, kernel_d=3, kernel_h=3, kernel_w=3)]
    flags = layer_kind_flags(layer_frame(layers))
    assert list(flags.columns) == list(LAYER_KIND_NAMES)
    assert flags.to_numpy().tolist() == np.eye(len(layers), dtype=bool).tolist()
    assert is_seer_layer(layer_frame(layers)).tolist() == [True] + [False] * 6
    assert seer_frame(layer_frame(layers[:1])).iloc[0].tolist() == [1, 8, 8, 8, 8, 3, 1, 1]
    with pytest.raises(ValueError):
        seer_frame(layer_frame(layers))


def test_a_layer_frame_fills_empty_optional_fields_with_their_defaults():
    # Rows of several kinds in one frame: the 2D row leaves groups and the depth fields empty.
    rows = pd.DataFrame([{"batch": 1, "in_ch": 4, "out_ch": 8, "in_h": 9, "in_w": 9, "kernel_h": 3, "kernel_w": 3},
                         {"batch": 1, "in_ch": 4, "out_ch": 8, "in_h": 9, "in_w": 9, "kernel_h": 3, "kernel_w": 3,
                          "groups": 4, "in_d": 5, "kernel_d": 3}])
    frame = layer_frame(rows)
    assert frame["groups"].tolist() == [1, 4] and frame["dims"].tolist() == [2, 3]
    assert frame["out_d"].tolist() == [1, 3] and frame["out_h"].tolist() == [7, 7]
    with pytest.raises(ValueError, match="in_ch is empty in 1 rows"):
        layer_frame(rows.assign(in_ch=[4, None]))


def test_layout_orders_and_cudnn_strides_agree_with_numpy():
    """The axis order a layout stores a tensor in, and the strides cuDNN is told, are numpy's
    for the transposed, packed tensor."""
    from seer.gpu.cudnn import packed_strides

    for shape in (ConvShape.square(2, 16, 9, 12, 3), ConvShape(1, 8, 4, in_d=5, in_h=6, in_w=7, kernel_d=3)):
        dims = shape.input_dims
        assert shape.layout_order("nchw") == tuple(range(len(dims)))
        for layout in ("nchw", "nhwc"):
            order = shape.layout_order(layout)
            packed = np.ascontiguousarray(np.zeros(dims, dtype=np.float32).transpose(order)).transpose(np.argsort(order))
            assert packed.shape == dims
            assert packed_strides(dims, layout) == [s // 4 for s in packed.strides]
    with pytest.raises(ValueError, match="layout"):
        ConvShape.square(1, 8, 8, 8, 3).layout_order("chwn")

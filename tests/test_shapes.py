import pytest

from seer.shapes import SHAPE_COLUMNS, ConvShape, ShapeError, conv_out_width


def test_out_width_rule_matches_frameworks():
    assert conv_out_width(224, 7, 2, 3) == 112
    assert conv_out_width(56, 3, 1, 1) == 56
    assert conv_out_width(56, 1, 2, 0) == 28
    assert conv_out_width(227, 11, 4, 0) == 55


def test_flops_and_bytes_by_hand():
    s = ConvShape.from_layer(2, 3, 8, 4, 3, 1, 1)  # 2x3x8x8 -> 2x4x8x8
    assert s.out_width == 8
    assert s.macs == 2 * 4 * 3 * 9 * 64
    assert s.flops == 2 * s.macs
    assert s.tensor_bytes == 4 * (2 * 3 * 64 + 4 * 3 * 9 + 2 * 4 * 64)


@pytest.mark.parametrize("field, kwargs", [
    ("batch", dict(batch=0)),
    ("in_ch", dict(in_ch=-3)),
    ("padding", dict(padding=-1)),
    ("stride", dict(stride=0)),
    ("out_width", dict(out_width=57)),
    ("kernel_width", dict(kernel_width=9, out_width=1, padding=0, in_width=5)),
    ("batch", dict(batch=1.5)),
    ("batch", dict(batch=True)),
])
def test_invalid_shapes_name_their_field(field, kwargs):
    base = dict(batch=1, in_ch=3, in_width=56, out_ch=8, out_width=56, kernel_width=3, stride=1, padding=1)
    base.update(kwargs)
    with pytest.raises(ShapeError) as info:
        ConvShape(**base)
    assert info.value.field == field


def test_shape_id_is_stable_and_distinct():
    a = ConvShape.from_layer(8, 64, 56, 64, 3, 1, 1)
    b = ConvShape.from_layer(8, 64, 56, 64, 3, 1, 1)
    c = ConvShape.from_layer(8, 64, 56, 64, 3, 2, 1)
    assert a.shape_id == b.shape_id != c.shape_id
    # Frozen in stone: the id keys committed data, so it must never change.
    assert ConvShape.from_layer(1, 3, 224, 64, 7, 2, 3).shape_id == "2a873c56b4b7"


def test_round_trip_through_dict_and_seer_line():
    s = ConvShape.from_layer(32, 512, 7, 2048, 1, 1, 0)
    d = s.as_dict()
    assert list(d) == list(SHAPE_COLUMNS)
    assert ConvShape.from_mapping(d) == s
    assert s.to_seer_line() == "32 512 7 2048 7 1 1 0"


def test_3d_shape_depth_follows_same_rule():
    s = ConvShape.from_layer(1, 4, 32, 16, 3, 1, 1, in_depth=32, kernel_depth=3)
    assert s.is_3d and s.out_depth == 32
    assert s.macs == 1 * 16 * 4 * 27 * 32 ** 3

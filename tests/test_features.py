import numpy as np
import pandas as pd
import pytest

from seer.hardware.gpus import get_gpu_spec
from seer.predict.features import GEMM_TILES, feature_names, shape_features

H100 = get_gpu_spec("h100")


def _one(**fields) -> pd.Series:
    layer = {"batch": 1, "in_ch": 1, "out_ch": 1, "in_h": 1, "in_w": 1, "kernel_h": 1, "kernel_w": 1} | fields
    return shape_features(pd.DataFrame([layer]), H100).iloc[0]


def test_tile_rounds_bound_a_small_grid_by_one_tile_per_sm():
    # 8x240x1x1 -> 960, 1x1: the implicit GEMM is M=8, N=960, K=240. A 256x64 tile gives a
    # grid of 1 x 15 blocks, one round on 132 SMs, each block 2*256*64*240 FLOPs.
    # The feature is that time over the FP32 floor, 2*M*N*K / peak.
    f = _one(batch=8, in_ch=240, out_ch=960)
    floor = 2 * 8 * 960 * 240 / H100.peak_fp32_flops_per_s
    sm_flops = H100.peak_fp32_flops_per_s / H100.sm_count
    assert 2 ** f["log2_tile_rounds_over_floor_256x64"] == pytest.approx(2 * 256 * 64 * 240 / sm_flops / floor)
    assert 2 ** f["log2_tile_rounds_over_floor_32x32"] == pytest.approx(2 * 32 * 32 * 240 / sm_flops / floor)
    # A grid of more blocks than SMs takes more rounds: 2 * 132 + 1 blocks of 32x32 -> 3 rounds.
    f = _one(batch=32 * 265, in_ch=8, out_ch=32)
    floor = 2 * 32 * 265 * 32 * 8 / H100.peak_fp32_flops_per_s
    assert 2 ** f["log2_tile_rounds_over_floor_32x32"] == pytest.approx(3 * 2 * 32 * 32 * 8 / sm_flops / floor)


def test_group_layout_bytes_grow_with_the_groups():
    one, four = _one(batch=8, in_ch=64, out_ch=64, in_h=112, in_w=112, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1, groups=1), \
        _one(batch=8, in_ch=64, out_ch=64, in_h=112, in_w=112, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1, groups=4)
    # Input and output are the same size (stride 1, padding 1); the filter is 64*(64/groups)*9 floats.
    tensor = 8 * 64 * 112 * 112
    for groups, f in ((1, one), (4, four)):
        assert 2 ** f["log2_group_layout_over_tensor_bytes"] == pytest.approx(
            groups * 2 * tensor / (2 * tensor + 64 * 64 // groups * 9))


def test_every_feature_is_finite_on_every_layer_kind():
    layers = pd.DataFrame([
        {"batch": 1, "in_ch": 3, "out_ch": 64, "in_h": 224, "in_w": 224, "kernel_h": 7, "kernel_w": 7},
        {"batch": 8, "in_ch": 128, "out_ch": 128, "in_h": 56, "in_w": 56, "kernel_h": 3, "kernel_w": 3, "groups": 32},
        {"batch": 8, "in_ch": 96, "out_ch": 96, "in_h": 28, "in_w": 28, "kernel_h": 3, "kernel_w": 3, "groups": 96},
        {"batch": 8, "in_ch": 128, "out_ch": 192, "in_h": 17, "in_w": 17, "kernel_h": 1, "kernel_w": 7},
        {"batch": 2, "in_ch": 64, "out_ch": 64, "in_h": 64, "in_w": 96, "kernel_h": 3, "kernel_w": 3,
         "dilation_h": 2, "dilation_w": 2},
        {"batch": 1, "in_ch": 16, "out_ch": 32, "in_d": 32, "in_h": 32, "in_w": 32, "kernel_d": 3, "kernel_h": 3,
         "kernel_w": 3},
    ])
    features = shape_features(layers, H100)
    assert list(features.columns) == feature_names(H100)
    assert np.isfinite(features.to_numpy()).all()
    assert {f"log2_tile_rounds_over_floor_{m}x{n}" for m, n in GEMM_TILES} <= set(features.columns)


def test_fft_tiles_of_16_cover_every_axis():
    # 3D: 30x30x30 out of a 3x3x3 kernel (padding 1): 14 outputs per tile and axis -> 3 tiles each.
    f = _one(in_ch=4, out_ch=4, in_d=30, in_h=30, in_w=30, kernel_d=3, kernel_h=3, kernel_w=3,
             pad_d=1, pad_h=1, pad_w=1)
    assert 2 ** f["log2_fft_tiles_16"] == pytest.approx(27)
    # 2D: the depth axis is one tile.
    f = _one(in_ch=4, out_ch=4, in_h=30, in_w=30, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1)
    assert 2 ** f["log2_fft_tiles_16"] == pytest.approx(9)

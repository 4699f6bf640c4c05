"""Shape-only features: what a model may know about a layer before it has ever run.

Everything here is computed from a layer's fields (:data:`seer.layers.shapes.LAYER_COLUMNS`) and a
GPU spec, so prediction needs no GPU and no profile. The features follow how the
algorithms work:

- sizes and work, per axis and in total: analytic FLOPs, tensor bytes, channels per
  group, the implicit-GEMM problem of one group (M = N*P*Q, N = K/G, K = (C/G)*R*S), the
  explicit GEMM's im2col buffer;
- a roofline: the time floors FLOPs / peak and bytes / bandwidth, for FP32 and TF32, and
  their sum (``log2_roofline_floor_s``), the scale that :class:`~seer.training.estimators.AlgorithmSelector`
  measures every time against;
- waves: for the tile sizes cuDNN's GEMM kernels use, how many thread blocks the grid has
  and how full the last wave is (SEER's iterations and epsilon);
- transform algorithms: FFT sizes and tile counts, the FFT algorithms' own time floor
  (transforms, per-frequency products, spectra) over the roofline's, Winograd tile counts;
- alignment: whether channels are multiples of 4, 8, 32 (vectorised and tensor-core paths).

:class:`ShapeFeatures` wraps :func:`shape_features` as a stateless scikit-learn transformer.
:func:`transform_matrix` (and :func:`transform_features`, its frame) adds the transform algorithms' problem sizes per axis and per
transform (FFT sizes, the batched complex GEMM, Winograd's GEMMs), which only the times learnt
from cuDNN's answers read, where validation chose them (:mod:`seer.training.answers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from seer.hardware.gpus import GPUSpec
from seer.layers.shapes import (AXES, FP32_BYTES, LAYER_COLUMNS, SEER_FIELDS, LayerTable, direct_macs, frame_flops,
                                frame_volumes, layer_columns, tensor_elements)

if TYPE_CHECKING:  # imported where used: seer predict computes on layer tables, without pandas
    import pandas as pd

#: (rows, columns) tiles of the output matrix that cuDNN's implicit-GEMM kernels use.
GEMM_TILES = ((32, 32), (64, 64), (128, 64), (128, 128), (256, 64))
#: Blocks per SM assumed when counting waves of a tile (a typical figure for cuDNN's
#: implicit-GEMM main kernels). Only the fill of the last wave depends on it; trees are
#: indifferent to the scale.
ASSUMED_BLOCKS_PER_SM = 3


def _log2(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=float), 1e-12))


def shape_features(layers: pd.DataFrame, spec: GPUSpec) -> pd.DataFrame:
    """Feature frame (one row per layer) from a layer frame (:func:`seer.layers.shapes.layer_frame`)."""
    import pandas as pd

    names, values = feature_matrix(layers, spec)
    return pd.DataFrame(values, index=layers.index if hasattr(layers, "columns") else None, columns=names, copy=False)


def feature_matrix(layers: pd.DataFrame | LayerTable, spec: GPUSpec) -> tuple[list[str], np.ndarray]:
    """The features' names and values, one row per layer, row-major (what the tree loop reads),
    of a layer frame or layer table: :func:`shape_features` without pandas."""
    f = layer_columns(layers)
    rows = len(f["batch"])
    col = {name: f[name].astype(float) for name in LAYER_COLUMNS}
    out = {}
    for name in LAYER_COLUMNS:
        out[f"log2_{name}"] = _log2(col[name] + (1 if name.startswith("pad_") else 0))
    n, c, k, g = col["batch"], col["in_ch"], col["out_ch"], col["groups"]
    c_g, k_g = c / g, k / g
    vol = frame_volumes(f)
    out["log2_in_ch_per_group"] = _log2(c_g)
    out["log2_out_ch_per_group"] = _log2(k_g)
    out["depthwise"] = ((g > 1) & (g == c)).astype(float)
    for q in ("in", "kernel", "out"):
        out[f"log2_{q}_volume"] = _log2(vol[q])
    flops = 2 * direct_macs(n, c, k, g, vol["kernel"], vol["out"])
    input_bytes, filter_bytes, output_bytes = (
        FP32_BYTES * e for e in tensor_elements(n, c, k, g, vol["in"], vol["kernel"], vol["out"]))
    tensor_bytes = input_bytes + filter_bytes + output_bytes
    # The implicit GEMM of one group: M = N*(output volume), N = K/G, K = (C/G)*(kernel volume).
    gemm_m, gemm_n, gemm_k = n * vol["out"], k_g, c_g * vol["kernel"]
    # Compute and memory floors added, not maxed: neither overlaps fully with the other in a
    # real kernel, and the sum stays smooth where the two cross.
    floor_s = flops / spec.peak_fp32_flops_per_s + tensor_bytes / spec.memory_bandwidth_bytes_per_s
    out |= {
        "log2_flops": _log2(flops),
        "log2_input_bytes": _log2(input_bytes),
        "log2_filter_bytes": _log2(filter_bytes),
        "log2_output_bytes": _log2(output_bytes),
        "log2_im2col_bytes": _log2(FP32_BYTES * gemm_m * gemm_k * g),
        "log2_gemm_m": _log2(gemm_m),
        "log2_gemm_n": _log2(gemm_n),
        "log2_gemm_k": _log2(gemm_k),
        "log2_intensity": _log2(flops / tensor_bytes),
        "log2_fp32_floor_s": _log2(flops / spec.peak_fp32_flops_per_s),
        "log2_tf32_floor_s": _log2(flops / max(spec.peak_tf32_flops_per_s, spec.peak_fp32_flops_per_s)),
        "log2_dram_floor_s": _log2(tensor_bytes / spec.memory_bandwidth_bytes_per_s),
        # Grouped implicit-precomp GEMM often transposes per group (2 or 3 layout kernels per
        # group in half of the traced grouped calls that transpose at all), which can outweigh
        # the convolution: the bytes such moves take over the bytes of the convolution itself.
        "log2_group_layout_over_tensor_bytes": _log2(g * (input_bytes + output_bytes) / tensor_bytes),
        "log2_roofline_floor_s": _log2(floor_s),
    }
    sm_flops_per_s = spec.peak_fp32_flops_per_s / spec.sm_count
    for tm, tn in GEMM_TILES:
        blocks = np.ceil(gemm_m / tm) * np.ceil(gemm_n / tn) * g
        waves = blocks / (ASSUMED_BLOCKS_PER_SM * spec.sm_count)
        # The busiest SM's FP32 time if each SM works one tile after another, over the FP32
        # floor: cuDNN runs its large tiles on small problems too (a 256x64 tile on a grid of
        # 15 blocks), and there the tiles' serial work, not the GPU's total FLOPs, sets the
        # time. A ratio, like the regressors' target, so that it means the same at any size.
        out[f"log2_tile_rounds_over_floor_{tm}x{tn}"] = _log2(
            np.ceil(blocks / spec.sm_count) * 2 * tm * tn * gemm_k / sm_flops_per_s * spec.peak_fp32_flops_per_s
            / flops)
        out[f"log2_blocks_{tm}x{tn}"] = _log2(blocks)
        out[f"waves_{tm}x{tn}"] = np.minimum(waves, 64.0)
        # Fill of the last wave: 1 means every SM busy to the end, small means a ragged tail.
        out[f"tail_{tm}x{tn}"] = waves / np.maximum(np.ceil(waves), 1)
        # Work the tiles pad out, as a fraction of the useful work.
        out[f"tile_waste_{tm}x{tn}"] = np.ceil(gemm_m / tm) * tm * np.ceil(gemm_n / tn) * tn / (gemm_m * gemm_n)
    padded = np.maximum(col["in_h"] + 2 * col["pad_h"], col["in_w"] + 2 * col["pad_w"])
    out["log2_fft_size"] = _log2(2 ** np.ceil(np.log2(np.maximum(padded, 1))))
    out["log2_fft_tiles_32"] = _log2(np.ceil(col["out_h"] / np.maximum(32 - col["kernel_h"] + 1, 1))
                                     * np.ceil(col["out_w"] / np.maximum(32 - col["kernel_w"] + 1, 1)) * col["out_d"])
    # Per tile size of FFT_TILING, the tiles and each tile's points. 3D FFT_TILING transforms
    # 16x16x16 tiles (fft3d_r2c_16x16x16 in the traces); each tile yields 16 - k + 1 outputs per
    # axis. A 2D layer's depth axis counts one tile, of one point: its depth takes no transform.
    padded_points = np.ones(rows)
    tiles, tile_points = {16: np.ones(rows), 32: np.ones(rows)}, {16: np.ones(rows), 32: np.ones(rows)}
    for a in AXES:
        used = col[f"in_{a}"] > 1 if a == "d" else np.ones(rows, dtype=bool)
        padded_points *= np.where(used, 2 ** np.ceil(np.log2(np.maximum(col[f"in_{a}"] + 2 * col[f"pad_{a}"], 1))), 1)
        reach = col[f"dilation_{a}"] * (col[f"kernel_{a}"] - 1) + 1
        for size in tiles:
            tiles[size] *= np.ceil(col[f"out_{a}"] / np.maximum(size - reach + 1, 1))
            tile_points[size] *= np.where(used, size, 1)
    out["log2_fft_tiles_16"] = _log2(tiles[16])
    # The FFT algorithms' own floor over the roofline's: a transform of every input, filter
    # and output channel, a complex product summed over the channels at each frequency, and
    # the spectra's bytes; over the whole padded input (FFT) or per tile of 16 or 32 points
    # an axis (FFT_TILING). A ratio, like the regressors' target.
    out["log2_fft_cost_over_floor"] = _log2(_fft_seconds(padded_points, 1, n, c, k, g, spec) / floor_s)
    for size, points in tile_points.items():
        out[f"log2_fft_tiled_{size}_cost_over_floor"] = _log2(
            _fft_seconds(points, tiles[size], n, c, k, g, spec) / floor_s)
    for tile in (4, 2):
        out[f"log2_winograd_tiles_{tile}"] = _log2(n * np.ceil(col["out_h"] / tile) * np.ceil(col["out_w"] / tile)
                                                   * col["out_d"])
    for m in (4, 8, 32):
        out[f"in_ch_mult_{m}"] = (c_g % m == 0).astype(float)
        out[f"out_ch_mult_{m}"] = (k_g % m == 0).astype(float)
    same = np.ones(rows, dtype=bool)
    for a in AXES:
        same &= col[f"pad_{a}"] == col[f"dilation_{a}"] * (col[f"kernel_{a}"] - 1) // 2
    out["same_padding"] = same.astype(float)
    out["output_pixels_per_input"] = vol["out"] / vol["in"]
    # One C-ordered block, the frame a view of it: the frame's values (``to_numpy()``) are then the
    # row-major matrix the tree loop reads, with no copy per model (a frame built from the dict
    # holds the transpose).
    values = np.empty((rows, len(out)))
    for j, column in enumerate(out.values()):
        values[:, j] = column
    return list(out), values


def _fft_seconds(points, transforms_per_image, n, c, k, g, spec: GPUSpec) -> np.ndarray:
    """Time floor of a convolution by FFT: ``points`` per transform (5 P log2 P flops each),
    ``transforms_per_image`` per channel of an input or output image, one per filter channel,
    complex multiply-adds (8 flops) at each of P/2 + 1 frequencies, and the spectra in complex64."""
    frequencies = points / 2 + 1
    transforms = n * transforms_per_image * c + c * k / g + n * transforms_per_image * k
    transform_flops = 5 * points * np.log2(np.maximum(points, 2)) * transforms
    flops = transform_flops + 8 * frequencies * n * transforms_per_image * c * k / g
    return flops / spec.peak_fp32_flops_per_s + 8 * frequencies * transforms / spec.memory_bandwidth_bytes_per_s


def log2_flops(shapes: pd.DataFrame) -> np.ndarray:
    """log2 of the analytic FLOPs per shape (:func:`seer.layers.shapes.frame_flops`)."""
    return np.log2(frame_flops(shapes))


def feature_names(spec: GPUSpec) -> list[str]:
    """The columns :func:`shape_features` returns, in order."""
    return feature_matrix(np.ones((1, len(SEER_FIELDS)), dtype=np.int64), spec)[0]


#: Winograd transforms (output tile m, filter r) whose sizes :func:`transform_features` counts:
#: F(4x4, 3x3), F(2x2, 3x3), F(2x2, 5x5).
WINOGRAD_TRANSFORMS = ((4, 3), (2, 3), (2, 5))
#: FFT_TILING's tile sizes (points per axis) that :func:`transform_features` counts.
FFT_TILE_SIZES = (32, 16)


def transform_matrix(layers: pd.DataFrame | LayerTable) -> tuple[list[str], np.ndarray]:
    """The names and values (one row per layer) of the transform algorithms' problem sizes, which :func:`shape_features` sums up
    per layer only: the FFT's size per axis (the padded input's next power of two, as cuDNN's
    ``fft2d_r2c_NxN`` kernels take it) and how full it is, its frequencies, the spectra's
    elements, the batched complex GEMM's FLOPs and blocks (one GEMM of N x K/G x C/G per
    frequency and group); per FFT_TILING tile size the same per tile; per Winograd transform
    the batched GEMM's FLOPs, the transformed input's elements and blocks; and how far the
    batch and channels per group are from multiples of 32. Read by the answer-informed time
    regressors of the algorithms whose validation they helped (:mod:`seer.training.answers`)."""
    f = layer_columns(layers)
    col = {name: f[name].astype(float) for name in LAYER_COLUMNS}
    n, c, k, g = col["batch"], col["in_ch"], col["out_ch"], col["groups"]
    c_g, k_g = c / g, k / g
    out = {}
    size = {}
    for a in ("h", "w"):
        padded = col[f"in_{a}"] + 2 * col[f"pad_{a}"]
        size[a] = 2 ** np.ceil(np.log2(np.maximum(padded, 1)))
        out[f"log2_fft_{a}"] = np.log2(size[a])
        out[f"fft_fill_{a}"] = padded / size[a]
    frequencies = size["h"] * (size["w"] / 2 + 1)  # a real transform's half spectrum
    out["log2_fft_frequencies"] = np.log2(frequencies)
    out["log2_fft_input_elements"] = np.log2(n * c * frequencies)
    out["log2_fft_filter_elements"] = np.log2(c * k_g * frequencies)
    out["log2_fft_output_elements"] = np.log2(n * k * frequencies)
    out["log2_fft_gemm_flops"] = np.log2(8 * frequencies * n * c_g * k_g * g)
    for tile in (32, 64):
        out[f"log2_fft_gemm_blocks_{tile}"] = np.log2(frequencies * g * np.ceil(n / tile) * np.ceil(k_g / tile))
    for points in FFT_TILE_SIZES:
        tiles = col["out_d"].copy()
        for a in ("h", "w"):
            reach = col[f"dilation_{a}"] * (col[f"kernel_{a}"] - 1) + 1
            tiles *= np.ceil(col[f"out_{a}"] / np.maximum(points - reach + 1, 1))
        tile_frequencies = points * (points / 2 + 1)
        out[f"log2_tile{points}_rows"] = np.log2(n * tiles)
        out[f"log2_tile{points}_gemm_flops"] = np.log2(8 * tile_frequencies * n * tiles * c_g * k_g * g)
        out[f"log2_tile{points}_input_elements"] = np.log2(n * tiles * c * tile_frequencies)
        out[f"log2_tile{points}_gemm_blocks_32"] = np.log2(
            tile_frequencies * g * np.ceil(n * tiles / 32) * np.ceil(k_g / 32))
    for m, r in WINOGRAD_TRANSFORMS:
        tiles = n * np.ceil(col["out_h"] / m) * np.ceil(col["out_w"] / m) * col["out_d"]
        points = (m + r - 1) ** 2  # one GEMM per point of the transformed tile
        out[f"log2_winograd_{m}x{r}_gemm_flops"] = np.log2(2 * points * tiles * c_g * k_g * g)
        out[f"log2_winograd_{m}x{r}_input_elements"] = np.log2(points * tiles * c)
        out[f"log2_winograd_{m}x{r}_gemm_blocks_64"] = np.log2(points * g * np.ceil(tiles / 64) * np.ceil(k_g / 64))
    for name, value in (("batch", n), ("in_ch_per_group", c_g), ("out_ch_per_group", k_g)):
        out[f"{name}_mod_32"] = (value % 32) / 32
        out[f"{name}_power_of_2"] = (np.log2(value) % 1 == 0).astype(float)
    return list(out), np.column_stack(list(out.values()))


def transform_features(layers: pd.DataFrame) -> pd.DataFrame:
    """:func:`transform_matrix` as a frame with the layers' index."""
    import pandas as pd

    names, values = transform_matrix(layers)
    return pd.DataFrame(values, index=layers.index if hasattr(layers, "columns") else None, columns=names)


#: The columns :func:`transform_matrix` returns, in order.
TRANSFORM_FEATURES: tuple[str, ...] = tuple(transform_matrix(np.ones((1, len(SEER_FIELDS)), dtype=np.int64))[0])

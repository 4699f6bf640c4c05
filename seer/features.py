"""Shape-only features: what a model may know about a layer before it has ever run.

Everything here is computed from the eight shape integers and a GPU spec, so prediction
needs no GPU and no profile. The features follow how the algorithms work:

- sizes and work: analytic FLOPs, tensor bytes, the implicit-GEMM problem (M = N*P*Q,
  N = K, K = C*R*S), the explicit GEMM's im2col buffer;
- a roofline: the time floors FLOPs / peak and bytes / bandwidth, for FP32 and TF32, and
  their sum (``log2_roofline_floor_s``), the scale that :class:`~seer.estimators.AlgorithmSelector`
  measures every time against;
- waves: for the tile sizes cuDNN's GEMM kernels use, how many thread blocks the grid has
  and how full the last wave is (SEER's iterations and epsilon);
- transform algorithms: FFT sizes and tile counts, Winograd tile counts;
- alignment: whether channels are multiples of 4, 8, 32 (vectorised and tensor-core paths).

:class:`ShapeFeatures` wraps :func:`shape_features` as a stateless scikit-learn transformer.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from seer.gpus import GPUSpec
from seer.shapes import FP32_BYTES, SEER_FIELDS, direct_macs, frame_flops, shape_frame, tensor_elements

#: (rows, columns) tiles of the output matrix that cuDNN's implicit-GEMM kernels use.
GEMM_TILES = ((32, 32), (64, 64), (128, 64), (128, 128), (256, 64))
#: Blocks per SM assumed when counting waves of a tile (a typical figure for cuDNN's
#: implicit-GEMM main kernels). Only the fill of the last wave depends on it; trees are
#: indifferent to the scale.
ASSUMED_BLOCKS_PER_SM = 3


def _log2(x) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=float), 1e-12))


def shape_features(shapes: pd.DataFrame, spec: GPUSpec) -> pd.DataFrame:
    """Feature frame (one row per shape) from SEER's eight shape columns."""
    shapes = shape_frame(shapes)
    n, c, w, k, p, r, s, pad = (shapes[f].to_numpy(dtype=float) for f in SEER_FIELDS)
    out = {}
    for name, value in zip(SEER_FIELDS, (n, c, w, k, p, r, s, pad)):
        out[f"log2_{name}"] = _log2(value + (1 if name == "padding" else 0))
    flops = 2 * direct_macs(n, c, k, r, p)
    input_bytes, filter_bytes, output_bytes = (FP32_BYTES * e for e in tensor_elements(n, c, w, k, p, r))
    tensor_bytes = input_bytes + filter_bytes + output_bytes
    gemm_m, gemm_n, gemm_k = n * p * p, k, c * r * r
    out |= {
        "log2_flops": _log2(flops),
        "log2_input_bytes": _log2(input_bytes),
        "log2_filter_bytes": _log2(filter_bytes),
        "log2_output_bytes": _log2(output_bytes),
        "log2_im2col_bytes": _log2(4 * gemm_m * gemm_k),
        "log2_gemm_m": _log2(gemm_m),
        "log2_gemm_k": _log2(gemm_k),
        "log2_intensity": _log2(flops / tensor_bytes),
        "log2_fp32_floor_s": _log2(flops / spec.peak_fp32_flops_per_s),
        "log2_tf32_floor_s": _log2(flops / max(spec.peak_tf32_flops_per_s, spec.peak_fp32_flops_per_s)),
        "log2_dram_floor_s": _log2(tensor_bytes / spec.memory_bandwidth_bytes_per_s),
        # Compute and memory floors added, not maxed: neither overlaps fully with the
        # other in a real kernel, and the sum stays smooth where the two cross.
        "log2_roofline_floor_s": _log2(flops / spec.peak_fp32_flops_per_s
                                       + tensor_bytes / spec.memory_bandwidth_bytes_per_s),
    }
    for tm, tn in GEMM_TILES:
        blocks = np.ceil(gemm_m / tm) * np.ceil(gemm_n / tn)
        waves = blocks / (ASSUMED_BLOCKS_PER_SM * spec.sm_count)
        out[f"log2_blocks_{tm}x{tn}"] = _log2(blocks)
        out[f"waves_{tm}x{tn}"] = np.minimum(waves, 64.0)
        # Fill of the last wave: 1 means every SM busy to the end, small means a ragged tail.
        out[f"tail_{tm}x{tn}"] = waves / np.maximum(np.ceil(waves), 1)
        # Work the tiles pad out, as a fraction of the useful work.
        out[f"tile_waste_{tm}x{tn}"] = np.ceil(gemm_m / tm) * tm * np.ceil(gemm_n / tn) * tn / (gemm_m * gemm_n)
    padded = w + 2 * pad
    out["log2_fft_size"] = _log2(2 ** np.ceil(np.log2(np.maximum(padded, 1))))
    out["log2_fft_tiles_32"] = _log2(np.ceil(p / np.maximum(32 - r + 1, 1)) ** 2)
    out["log2_winograd_tiles_4"] = _log2(n * np.ceil(p / 4) ** 2)
    out["log2_winograd_tiles_2"] = _log2(n * np.ceil(p / 2) ** 2)
    for m in (4, 8, 32):
        out[f"in_ch_mult_{m}"] = (c % m == 0).astype(float)
        out[f"out_ch_mult_{m}"] = (k % m == 0).astype(float)
    out["same_padding"] = (pad == r // 2).astype(float)
    out["output_pixels_per_input"] = (p * p) / (w * w)
    return pd.DataFrame(out, index=shapes.index)


def log2_flops(shapes: pd.DataFrame) -> np.ndarray:
    """log2 of the analytic FLOPs per shape (:func:`seer.shapes.frame_flops`)."""
    return np.log2(frame_flops(shapes))


def feature_names(spec: GPUSpec) -> list[str]:
    """The columns :func:`shape_features` returns, in order."""
    return list(shape_features(pd.DataFrame([[1, 1, 1, 1, 1, 1, 1, 0]], columns=list(SEER_FIELDS)), spec).columns)

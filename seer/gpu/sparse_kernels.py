"""seer's sparse forward convolutions: they skip the zeros of the input (GPU hosts, CuPy).

``pointwise`` takes 1x1, stride-1, ungrouped layers as one sparse-dense product through
cuSPARSE (``cupyx.scipy.sparse``): the input, laid out as an (N·H·W) x C matrix, is
compressed to CSR, multiplied by the filter's C x K transpose, and the (N·H·W) x K product
is laid out again as the NC[D]HW output. Finding the non-zeros (the layout change and the
compression) is part of each call, and so of its measured time: a real network hands over
a dense tensor with zeros in it, not a compressed one.
"""

from __future__ import annotations

import cupy as cp
from cupyx.scipy import sparse

from seer.layers.shapes import ConvShape


def pointwise_refusal(shape: ConvShape) -> str | None:
    """Why ``pointwise`` cannot run ``shape``, else None."""
    kernel = (shape.kernel_d, shape.kernel_h, shape.kernel_w)
    if kernel != (1, 1, 1) or shape.groups != 1:
        return "it takes 1x1 ungrouped layers only"
    if (shape.stride_d, shape.stride_h, shape.stride_w) != (1, 1, 1) or any(
            (shape.pad_d, shape.pad_h, shape.pad_w)):
        return "it takes stride 1 and no padding only"
    return None


def pointwise(shape: ConvShape, x: cp.ndarray, w: cp.ndarray, y: cp.ndarray) -> None:
    """y = conv(x, w) for a 1x1 layer (:func:`pointwise_refusal`), NC[D]HW fp32 tensors."""
    reason = pointwise_refusal(shape)
    if reason is not None:
        raise ValueError(f"pointwise sparse convolution: {reason}")
    n, c, k = shape.batch, shape.in_ch, shape.out_ch
    # (N, C, P) -> (N·P, C): one row per pixel, its channels the columns.
    rows = x.reshape(n, c, -1).transpose(0, 2, 1).reshape(-1, c)
    product = sparse.csr_matrix(rows) @ w.reshape(k, c).T   # cuSPARSE SpMM: (N·P, K)
    y.reshape(n, k, -1)[...] = cp.asarray(product).reshape(n, -1, k).transpose(0, 2, 1)

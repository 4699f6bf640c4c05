"""seer's sparse forward convolutions: they skip the zeros of the input (GPU hosts, CuPy).

``scatter`` takes any layer (kernel size, stride, padding, dilation, groups, 2D or 3D),
NC[D]HW: it finds the input's non-zeros (their flat indices and values), zeroes the output,
and one thread per (non-zero, output channel of its group) adds the value times each filter
tap to the outputs it reaches, with atomic adds (so the order of the sums, and their last
bits, may change from call to call). Its work is proportional to the non-zeros: it pays
where most of the input is zero, and loses to cuDNN on dense inputs.

``pointwise`` takes 1x1, stride-1, ungrouped layers as one sparse-dense product through
cuSPARSE (``cupyx.scipy.sparse``): the input, laid out as an (N·H·W) x C matrix, is
compressed to CSR, multiplied by the filter's C x K transpose, and the (N·H·W) x K product
is laid out again as the NC[D]HW output. Finding the non-zeros (the layout change and the
compression) is part of each call, and so of its measured time: a real network hands over
a dense tensor with zeros in it, not a compressed one.
"""

from __future__ import annotations

from functools import lru_cache

import cupy as cp
from cupyx.scipy import sparse

from seer.layers.shapes import ConvShape

_SCATTER_SOURCE = r"""
extern "C" __global__ void seer_sparse_scatter(
    const float* values, const long long* where, const long long nnz, const float* w, float* y,
    const int C, const int K, const int G, const int D, const int H, const int W,
    const int T, const int R, const int S, const int OD, const int OH, const int OW,
    const int sd, const int sh, const int sw, const int pd, const int ph, const int pw,
    const int dd, const int dh, const int dw)
{
    const int kg = K / G, cg = C / G;
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= nnz * kg) return;
    const long long e = t / kg;
    const int kk = (int)(t % kg);
    long long i = where[e];                         // flat index into x[N][C][D][H][W]
    const int iw = i % W; i /= W;
    const int ih = i % H; i /= H;
    const int id = i % D; i /= D;
    const int c = i % C;
    const long long n = i / C;
    const int g = c / cg, k = g * kg + kk, cl = c - g * cg;
    const float v = values[e];
    for (int a = 0; a < T; ++a) {
        const int zd = id + pd - a * dd;
        if (zd < 0 || zd % sd) continue;
        const int od = zd / sd;
        if (od >= OD) continue;
        for (int r = 0; r < R; ++r) {
            const int zh = ih + ph - r * dh;
            if (zh < 0 || zh % sh) continue;
            const int oh = zh / sh;
            if (oh >= OH) continue;
            for (int s = 0; s < S; ++s) {
                const int zw = iw + pw - s * dw;
                if (zw < 0 || zw % sw) continue;
                const int ow = zw / sw;
                if (ow >= OW) continue;
                const float tap = w[(((long long)k * cg + cl) * T + a) * R * S + r * S + s];
                atomicAdd(&y[(((n * K + k) * OD + od) * (long long)OH + oh) * OW + ow], v * tap);
            }
        }
    }
}
"""
_THREADS = 256


def scatter(shape: ConvShape, x: cp.ndarray, w: cp.ndarray, y: cp.ndarray) -> None:
    """y = conv(x, w) for any layer, NC[D]HW fp32 tensors, in work proportional to x's non-zeros."""
    where = cp.flatnonzero(x)                  # finding the non-zeros is part of the call
    values = x.ravel()[where]
    y.fill(0)
    kg = shape.out_ch // shape.groups
    threads = int(where.size) * kg
    if threads:
        sizes = [shape.in_ch, shape.out_ch, shape.groups, shape.in_d, shape.in_h, shape.in_w, shape.kernel_d,
                 shape.kernel_h, shape.kernel_w, shape.out_d, shape.out_h, shape.out_w, shape.stride_d,
                 shape.stride_h, shape.stride_w, shape.pad_d, shape.pad_h, shape.pad_w, shape.dilation_d,
                 shape.dilation_h, shape.dilation_w]
        _scatter_kernel()(((threads + _THREADS - 1) // _THREADS,), (_THREADS,),
                          (values, where, cp.int64(where.size), w, y, *(cp.int32(v) for v in sizes)))


@lru_cache(maxsize=1)
def _scatter_kernel() -> cp.RawKernel:
    return cp.RawKernel(_SCATTER_SOURCE, "seer_sparse_scatter")


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

"""seer's sparse forward convolutions: they skip the zeros of the input (GPU hosts, CuPy).

``gather`` takes any layer (kernel size, stride, padding, dilation, groups, 2D or 3D),
NC[D]HW, and writes each output once, with no atomics: it first lists, per input pixel and
block of 32 channels, the channels that are not zero and their values (one pass over the
input, into buffers the size of the input; no count travels to the host), then one thread per
(output position, output channel) walks the lists of the pixels its filter covers and adds
value x filter tap in a register. A block of threads shares one output position, so every
list entry it reads is one broadcast load, and the filter, laid out channel-last once per
call, is read in whole lines. Its work is proportional to the non-zeros under each filter.

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
from typing import NamedTuple

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


_GATHER_SOURCE = r"""
// Input x[N][G*cg][P] (P = D*H*W). Per (n, g, chunk of 32 channels, pixel): how many of the
// chunk's channels are not zero, and which (cols) with their values (vals), stored at
// [(n*G + g)*cg + chunk*32 + j][p], so that threads of consecutive pixels write consecutive words.
extern "C" __global__ void seer_sparse_list(
    const float* x, int* cols, float* vals, int* counts, const long long NG, const int cg,
    const int chunks, const long long P)
{
    const long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (t >= NG * chunks * P) return;
    const long long p = t % P;
    const long long row = t / P;                  // (n*G + g) * chunks + chunk
    const int chunk = (int)(row % chunks);
    const long long ng = row / chunks;
    const int first = chunk * 32, last = min(cg, first + 32);
    const long long base = (ng * cg + first) * P + p;
    int j = 0;
    for (int c = first; c < last; ++c) {
        const float v = x[(ng * cg + c) * P + p];
        if (v != 0.0f) {
            cols[base + j * P] = c;
            vals[base + j * P] = v;
            ++j;
        }
    }
    counts[t] = j;
}

// Threads of a block: kt along the group's output channels (KPT channels each, read as one
// vector of the channel-last filter wt[g][c][tap][k]) times blockDim.x / kt output positions.
// Threads of one position read the same list entries: broadcast loads.
extern "C" __global__ void seer_sparse_gather(
    const int* cols, const float* vals, const int* counts, const float* wt, float* y,
    const long long outputs, const int kt, const int G, const int cg, const int kg, const int chunks,
    const int D, const int H, const int W, const int T, const int R, const int S,
    const int OD, const int OH, const int OW, const int sd, const int sh, const int sw,
    const int pd, const int ph, const int pw, const int dd, const int dh, const int dw)
{
    const int tx = threadIdx.x % kt, ty = threadIdx.x / kt;
    const long long position = (long long)blockIdx.x * (blockDim.x / kt) + ty;
    const int k0 = (blockIdx.y * kt + tx) * KPT;
    if (ty >= blockDim.x / kt || position >= outputs || k0 >= kg) return;
    const int g = blockIdx.z;
    const long long OP = (long long)OD * OH * OW, P = (long long)D * H * W;
    const long long n = position / OP;
    const long long o = position % OP;
    const int ow = (int)(o % OW), oh = (int)((o / OW) % OH), od = (int)(o / ((long long)OW * OH));
    const long long ng = n * G + g;
    const int taps = T * R * S;
    const float* wg = wt + (long long)g * cg * taps * kg + k0;
    float acc[KPT];
    for (int i = 0; i < KPT; ++i) acc[i] = 0.0f;
    for (int a = 0; a < T; ++a) {
        const int id = od * sd - pd + a * dd;
        if (id < 0 || id >= D) continue;
        for (int r = 0; r < R; ++r) {
            const int ih = oh * sh - ph + r * dh;
            if (ih < 0 || ih >= H) continue;
            for (int s = 0; s < S; ++s) {
                const int iw = ow * sw - pw + s * dw;
                if (iw < 0 || iw >= W) continue;
                const long long p = ((long long)id * H + ih) * W + iw;
                const int tap = (a * R + r) * S + s;
                for (int chunk = 0; chunk < chunks; ++chunk) {
                    const int m = counts[(ng * chunks + chunk) * P + p];
                    const long long base = (ng * cg + chunk * 32) * P + p;
                    for (int j = 0; j < m; ++j) {
                        const int c = cols[base + j * P];
                        const float v = vals[base + j * P];
                        const float* tapw = wg + ((long long)c * taps + tap) * kg;
#if KPT == 4
                        const float4 f = *reinterpret_cast<const float4*>(tapw);
                        acc[0] += v * f.x; acc[1] += v * f.y; acc[2] += v * f.z; acc[3] += v * f.w;
#else
                        acc[0] += v * tapw[0];
#endif
                    }
                }
            }
        }
    }
    for (int i = 0; i < KPT; ++i) y[((n * G + g) * kg + k0 + i) * OP + o] = acc[i];
}
"""


class GatherScratch(NamedTuple):
    """What :func:`gather` lists the non-zeros into (sizes: :func:`gather_scratch_sizes`) and
    the filter laid out channel-last, ``w.reshape(G, K/G, C/G, taps)`` permuted to (0, 2, 3, 1),
    contiguous: given by a caller whose allocator must own them (CUDA-graph capture)."""

    cols: cp.ndarray  # int32
    vals: cp.ndarray  # float32
    counts: cp.ndarray  # int32
    wt: cp.ndarray  # float32


def gather_scratch_sizes(shape: ConvShape) -> tuple[int, int]:
    """Elements of :class:`GatherScratch`'s ``cols`` and ``vals`` (each), and of ``counts``."""
    chunks = (shape.in_ch // shape.groups + 31) // 32
    pixels = shape.in_d * shape.in_h * shape.in_w
    return shape.batch * shape.in_ch * pixels, shape.batch * shape.groups * chunks * pixels


def gather(shape: ConvShape, x: cp.ndarray, w: cp.ndarray, y: cp.ndarray, scratch: GatherScratch | None = None) -> None:
    """y = conv(x, w) for any layer, NC[D]HW fp32 tensors; each output written once, from the
    non-zeros under its filter (listed in the call). Without ``scratch``, its buffers come
    from CuPy's pool. Nothing waits for the GPU, so a call can be captured in a CUDA graph
    once its kernels are compiled (:func:`compile_for`) and ``scratch`` is given."""
    g, cg, kg = shape.groups, shape.in_ch // shape.groups, shape.out_ch // shape.groups
    pixels = shape.in_d * shape.in_h * shape.in_w
    chunks = (cg + 31) // 32
    taps = shape.kernel_d * shape.kernel_h * shape.kernel_w
    # Listing the non-zeros and laying the filter out channel-last are part of every call.
    if scratch is None:
        entries, listed = gather_scratch_sizes(shape)
        scratch = GatherScratch(cp.empty(entries, dtype=cp.int32), cp.empty(entries, dtype=cp.float32),
                                cp.empty(listed, dtype=cp.int32),
                                cp.ascontiguousarray(w.reshape(g, kg, cg, taps).transpose(0, 2, 3, 1)))
    cols, vals, counts, wt = scratch
    per_thread = _per_thread(kg)
    list_kernel, gather_kernel = _gather_kernels(per_thread)
    list_kernel(((counts.size + _THREADS - 1) // _THREADS,), (_THREADS,),
                (x, cols, vals, counts, cp.int64(shape.batch * g), cp.int32(cg), cp.int32(chunks), cp.int64(pixels)))
    k_threads = min(_THREADS, -(-kg // per_thread))
    positions = _THREADS // k_threads             # output positions per block
    outputs = shape.batch * shape.out_d * shape.out_h * shape.out_w
    sizes = [k_threads, g, cg, kg, chunks, shape.in_d, shape.in_h, shape.in_w, shape.kernel_d, shape.kernel_h,
             shape.kernel_w, shape.out_d, shape.out_h, shape.out_w, shape.stride_d, shape.stride_h, shape.stride_w,
             shape.pad_d, shape.pad_h, shape.pad_w, shape.dilation_d, shape.dilation_h, shape.dilation_w]
    grid = (-(-outputs // positions), -(-kg // (per_thread * k_threads)), g)
    gather_kernel(grid, (positions * k_threads,), (cols, vals, counts, wt, y, cp.int64(outputs),
                                                    *(cp.int32(v) for v in sizes)))


@lru_cache(maxsize=2)
def _gather_kernels(per_thread: int) -> tuple[cp.RawKernel, cp.RawKernel]:
    module = cp.RawModule(code=_GATHER_SOURCE, options=(f"-DKPT={per_thread}",))
    return module.get_function("seer_sparse_list"), module.get_function("seer_sparse_gather")


def compile_for(kernel: str, shape: ConvShape) -> None:
    """Compile the CUDA code that ``kernel`` (``gather`` or ``scatter``; ``pointwise`` runs
    cuSPARSE's) launches on ``shape``, so that no call of it waits for the compiler."""
    if kernel == "gather":
        _gather_kernels(_per_thread(shape.out_ch // shape.groups))  # get_function compiles the module
    elif kernel == "scatter":
        _scatter_kernel().compile()


def _per_thread(kg: int) -> int:
    """Output channels per thread of ``gather``: four (one vector load of the filter) where
    a group's output channels come in fours."""
    return 4 if kg % 4 == 0 else 1


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

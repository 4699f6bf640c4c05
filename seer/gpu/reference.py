"""Device tensors for one layer and an independent float64 check of any algorithm's output.

The check does not trust cuDNN: small CuPy kernels compute a seeded sample of output
elements directly, in float64 (any group count, dilation, 2D or 3D), and the algorithm's output is compared with it by
relative L2 error. The same holds for the backward passes: a sample of the input's gradient
(dx, from the filter and the output's gradient dy) and of the filter's (dw, from x and dy).
Inputs are random normal (never zeros, which hide unwritten outputs
and run faster than real data), and the output is poisoned with NaN before each run so
that an element the algorithm never wrote cannot pass.
"""

from __future__ import annotations

import cupy as cp
import numpy as np

from seer.layers.shapes import ConvShape

SAMPLES = 4096

_REFERENCE_SOURCE = r"""
extern "C" __global__ void conv_reference_sampled(
    const float* x, const float* w, const long long* index, double* out, const int n_samples,
    const int C, const int K, const int G, const int D, const int H, const int W,
    const int T, const int R, const int S, const int OD, const int OH, const int OW,
    const int sd, const int sh, const int sw, const int pd, const int ph, const int pw,
    const int dd, const int dh, const int dw)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_samples) return;
    long long i = index[t];                       // flat index into y[N][K][OD][OH][OW]
    const int ow = i % OW; i /= OW;
    const int oh = i % OH; i /= OH;
    const int od = i % OD; i /= OD;
    const int k = i % K;
    const long long n = i / K;
    const int cg = C / G, g = k / (K / G);        // group g reads channels g*cg .. g*cg+cg-1
    double acc = 0.0;
    for (int c = 0; c < cg; ++c) {
        const long long ci = (long long)g * cg + c;
        for (int tt = 0; tt < T; ++tt) {
            const int id = od * sd - pd + tt * dd;
            if (id < 0 || id >= D) continue;
            for (int r = 0; r < R; ++r) {
                const int ih = oh * sh - ph + r * dh;
                if (ih < 0 || ih >= H) continue;
                for (int s = 0; s < S; ++s) {
                    const int iw = ow * sw - pw + s * dw;
                    if (iw < 0 || iw >= W) continue;
                    const double xv = x[(((n * C + ci) * D + id) * (long long)H + ih) * W + iw];
                    const double wv = w[((((long long)k * cg + c) * T + tt) * R + r) * S + s];
                    acc += xv * wv;
                }
            }
        }
    }
    out[t] = acc;
}
"""

# dx[n][c][d][h][w] sums dy[n][k][od][oh][ow] * w[k][c % cg][t][r][s] over the k of c's group
# and the filter taps whose strided output position is whole and inside the output.
_GRAD_INPUT_SOURCE = r"""
extern "C" __global__ void grad_input_reference_sampled(
    const float* w, const float* dy, const long long* index, double* out, const int n_samples,
    const int C, const int K, const int G, const int D, const int H, const int W,
    const int T, const int R, const int S, const int OD, const int OH, const int OW,
    const int sd, const int sh, const int sw, const int pd, const int ph, const int pw,
    const int dd, const int dh, const int dw)
{
    const int t = blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= n_samples) return;
    long long i = index[t];                       // flat index into dx[N][C][D][H][W]
    const int iw = i % W; i /= W;
    const int ih = i % H; i /= H;
    const int id = i % D; i /= D;
    const int c = i % C;
    const long long n = i / C;
    const int cg = C / G, kg = K / G, g = c / cg, cl = c % cg;
    double acc = 0.0;
    for (int k = g * kg; k < (g + 1) * kg; ++k) {
        for (int tt = 0; tt < T; ++tt) {
            const int zd = id + pd - tt * dd;
            if (zd < 0 || zd % sd != 0 || zd / sd >= OD) continue;
            for (int r = 0; r < R; ++r) {
                const int zh = ih + ph - r * dh;
                if (zh < 0 || zh % sh != 0 || zh / sh >= OH) continue;
                for (int s = 0; s < S; ++s) {
                    const int zw = iw + pw - s * dw;
                    if (zw < 0 || zw % sw != 0 || zw / sw >= OW) continue;
                    const double gv = dy[(((n * K + k) * OD + zd / sd) * (long long)OH + zh / sh) * OW + zw / sw];
                    const double wv = w[((((long long)k * cg + cl) * T + tt) * R + r) * S + s];
                    acc += gv * wv;
                }
            }
        }
    }
    out[t] = acc;
}
"""

# dw[k][c][t][r][s] sums x * dy over the batch and every output position: one block per
# sampled element, its threads striding over the positions (coalesced along ow).
_GRAD_FILTER_SOURCE = r"""
extern "C" __global__ void grad_filter_reference_sampled(
    const float* x, const float* dy, const long long* index, double* out,
    const int N, const int C, const int K, const int G, const int D, const int H, const int W,
    const int T, const int R, const int S, const int OD, const int OH, const int OW,
    const int sd, const int sh, const int sw, const int pd, const int ph, const int pw,
    const int dd, const int dh, const int dw)
{
    __shared__ double partial[256];
    long long i = index[blockIdx.x];              // flat index into dw[K][C/G][T][R][S]
    const int s = i % S; i /= S;
    const int r = i % R; i /= R;
    const int tt = i % T; i /= T;
    const int cg = C / G;
    const int cl = i % cg;
    const int k = i / cg;
    const long long ci = (long long)(k / (K / G)) * cg + cl;
    const long long positions = (long long)N * OD * OH * OW;
    double acc = 0.0;
    for (long long p = threadIdx.x; p < positions; p += blockDim.x) {
        long long q = p;
        const int ow = q % OW; q /= OW;
        const int oh = q % OH; q /= OH;
        const int od = q % OD;
        const long long n = q / OD;
        const int id = od * sd - pd + tt * dd, ih = oh * sh - ph + r * dh, iw = ow * sw - pw + s * dw;
        if (id < 0 || id >= D || ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
        acc += (double)x[(((n * C + ci) * D + id) * (long long)H + ih) * W + iw]
             * (double)dy[(((n * K + k) * OD + od) * (long long)OH + oh) * OW + ow];
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) partial[threadIdx.x] += partial[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = partial[0];
}
"""
_kernels: dict[str, cp.RawKernel] = {}


def _compiled(source: str, name: str) -> cp.RawKernel:
    if name not in _kernels:
        _kernels[name] = cp.RawKernel(source, name)
    return _kernels[name]


def _reference_kernel():
    return _compiled(_REFERENCE_SOURCE, "conv_reference_sampled")


def _sizes(shape: ConvShape) -> list[int]:
    """The kernels' size arguments from C to the dilations, in their order."""
    return [shape.in_ch, shape.out_ch, shape.groups, shape.in_d, shape.in_h, shape.in_w, shape.kernel_d,
            shape.kernel_h, shape.kernel_w, shape.out_d, shape.out_h, shape.out_w, shape.stride_d,
            shape.stride_h, shape.stride_w, shape.pad_d, shape.pad_h, shape.pad_w, shape.dilation_d,
            shape.dilation_h, shape.dilation_w]


def _sample(size: int, n: int, seed: int) -> cp.ndarray:
    # CuPy's Generator has no sampling without replacement; NumPy's is O(n) in the sample.
    picks = np.random.default_rng(seed).choice(size, size=min(n, size), replace=False)
    return cp.asarray(np.sort(picks), dtype=cp.int64)


#: Multiply-adds the sampled filter gradient may cost: a wide layer's dw element sums over
#: millions of positions, so it gets fewer samples (never fewer than MIN_FILTER_SAMPLES).
FILTER_REFERENCE_MACS = 4 * 10**9
MIN_FILTER_SAMPLES = 256


class SampledCheck:
    """One computed tensor (``out``) and its float64 reference at sampled elements: poison,
    run, then :meth:`relative_error`."""

    def __init__(self, out: cp.ndarray, sample_index: cp.ndarray, reference: cp.ndarray) -> None:
        self.out, self.sample_index, self.reference = out, sample_index, reference
        self.reference_norm = float(cp.linalg.norm(reference))

    def poison_output(self) -> None:
        self.out.fill(cp.nan)

    def relative_error(self) -> float:
        """Relative L2 error of the sampled elements; inf if any element is not finite."""
        if not bool(cp.isfinite(self.out).all()):
            return float("inf")
        got = self.out.ravel()[self.sample_index].astype(cp.float64)
        return float(cp.linalg.norm(got - self.reference)) / max(self.reference_norm, 1e-30)


class Gradient(SampledCheck):
    """A backward pass of a shape on the GPU: the output's gradient ``dy`` (random normal),
    the known operand ``known`` (the filter for ``bwd_data``, the input for ``bwd_filter``),
    the gradient it computes (``out``: dx or dw) and, with ``reference``, that gradient's
    float64 sample. NCHW only."""

    def __init__(self, tensors: "ShapeTensors", pass_: str, seed: int, reference: bool = True) -> None:
        shape = tensors.shape
        if tensors.layout != "nchw":
            raise ValueError("the backward passes are checked in NCHW only")
        if pass_ not in ("bwd_data", "bwd_filter"):
            raise ValueError(f"unknown backward pass {pass_!r}")
        self.pass_ = pass_
        self.dy = cp.random.default_rng(seed).standard_normal(shape.output_dims, dtype=cp.float32)
        self.known = tensors.w if pass_ == "bwd_data" else tensors.x
        out = cp.empty(shape.input_dims if pass_ == "bwd_data" else shape.filter_dims, dtype=cp.float32)
        if not reference:
            self.out = out
            return
        if pass_ == "bwd_data":
            index = _sample(out.size, SAMPLES, seed)
            expected = cp.empty(index.size, dtype=cp.float64)
            threads = 128
            _compiled(_GRAD_INPUT_SOURCE, "grad_input_reference_sampled")(
                ((index.size + threads - 1) // threads,), (threads,),
                (tensors.w, self.dy, index, expected, cp.int32(index.size), *(cp.int32(v) for v in _sizes(shape))))
        else:
            positions = shape.batch * shape.out_d * shape.out_h * shape.out_w
            index = _sample(out.size, max(MIN_FILTER_SAMPLES, min(SAMPLES, FILTER_REFERENCE_MACS // positions)), seed)
            expected = cp.empty(index.size, dtype=cp.float64)
            _compiled(_GRAD_FILTER_SOURCE, "grad_filter_reference_sampled")(
                (index.size,), (256,),  # 256 threads: the kernel's shared array
                (tensors.x, self.dy, index, expected, cp.int32(shape.batch), *(cp.int32(v) for v in _sizes(shape))))
        super().__init__(out, index, expected)

    @property
    def nbytes(self) -> int:
        return self.dy.nbytes + self.out.nbytes


class ShapeTensors:
    """Input, filter, output and the float64 reference sample of one shape, on the GPU.

    Parameters
    ----------
    shape : ConvShape
    seed : int
        Seeds the inputs and the sampled output positions.
    reference : bool, default=True
        Compute the float64 reference sample. Profiling skips it: its runs were checked
        when they were timed, and under ncu every extra kernel launch costs time.
    layout : {"nchw", "nhwc"}, default="nchw"
        Memory order of ``x``, ``w`` and ``y`` (:data:`seer.layers.shapes.LAYOUTS`); the same
        values in either.
    x : cupy.ndarray, optional
        The input's values (float32, NC[D]HW), instead of random normal ones: an input of a
        given sparsity (:func:`seer.layers.sparsity.sparse_input`).
    """

    def __init__(self, shape: ConvShape, seed: int, reference: bool = True, layout: str = "nchw",
                 x: cp.ndarray | None = None) -> None:
        self.shape, self.layout = shape, layout
        self._order = shape.layout_order(layout)
        rng = cp.random.default_rng(seed)
        self.x_dims, self.w_dims, self.y_dims = (tuple(dims[a] for a in self._order) for dims in
                                                 (shape.input_dims, shape.filter_dims, shape.output_dims))
        given = x
        x = rng.standard_normal(shape.input_dims, dtype=cp.float32)  # drawn anyway: the filter stays the seed's
        if given is not None:  # the input's values (NC[D]HW), e.g. of a given sparsity
            if tuple(given.shape) != tuple(shape.input_dims) or given.dtype != cp.float32:
                raise ValueError(f"the input must be float32 of {shape.input_dims}, got {given.dtype} {given.shape}")
            x = given
        w = rng.standard_normal(shape.filter_dims, dtype=cp.float32)
        self.x = cp.ascontiguousarray(x.transpose(self._order))
        self.w = cp.ascontiguousarray(w.transpose(self._order))
        self.y = cp.empty(self.y_dims, dtype=cp.float32)
        self._seed, self._reference = seed, reference
        self._gradients: dict[str, Gradient] = {}
        if not reference:
            return
        self.sample_index = _sample(self.y.size, SAMPLES, seed)
        n = self.sample_index.size
        self.reference = cp.empty(n, dtype=cp.float64)
        threads = 128
        _reference_kernel()(((n + threads - 1) // threads,), (threads,),
                            (x, w, self.sample_index, self.reference, cp.int32(n),
                             *(cp.int32(v) for v in _sizes(shape))))
        self.reference_norm = float(cp.linalg.norm(self.reference))

    def check_of(self, pass_: str):
        """What a run of ``pass_`` is checked on: these tensors for the forward, else the pass's
        :class:`Gradient` (made on first use; it lives as long as these tensors)."""
        if pass_ == "fwd":
            return self
        if pass_ not in self._gradients:
            self._gradients[pass_] = Gradient(self, pass_, self._seed ^ (1 if pass_ == "bwd_data" else 2),
                                              reference=self._reference)
        return self._gradients[pass_]

    def poison_output(self) -> None:
        self.y.fill(cp.nan)

    def relative_error(self) -> float:
        """Relative L2 error of the sampled outputs; inf if any output is not finite."""
        if not bool(cp.isfinite(self.y).all()):
            return float("inf")
        y = self.y if self.layout == "nchw" else self.y.transpose(np.argsort(self._order))
        got = y.ravel()[self.sample_index].astype(cp.float64)
        return float(cp.linalg.norm(got - self.reference)) / max(self.reference_norm, 1e-30)

    @property
    def nbytes(self) -> int:
        return self.x.nbytes + self.w.nbytes + self.y.nbytes

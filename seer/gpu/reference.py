"""Device tensors for one layer and an independent float64 check of any algorithm's output.

The check does not trust cuDNN: a small CuPy kernel computes a seeded sample of output
elements directly, in float64 (any group count, dilation, 2D or 3D), and the algorithm's output is compared with it by
relative L2 error. Inputs are random normal (never zeros, which hide unwritten outputs
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
_kernel = None


def _reference_kernel():
    global _kernel
    if _kernel is None:
        _kernel = cp.RawKernel(_REFERENCE_SOURCE, "conv_reference_sampled")
    return _kernel


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
    """

    def __init__(self, shape: ConvShape, seed: int, reference: bool = True, layout: str = "nchw") -> None:
        self.shape, self.layout = shape, layout
        self._order = shape.layout_order(layout)
        rng = cp.random.default_rng(seed)
        self.x_dims, self.w_dims, self.y_dims = (tuple(dims[a] for a in self._order) for dims in
                                                 (shape.input_dims, shape.filter_dims, shape.output_dims))
        x = rng.standard_normal(shape.input_dims, dtype=cp.float32)
        w = rng.standard_normal(shape.filter_dims, dtype=cp.float32)
        self.x = cp.ascontiguousarray(x.transpose(self._order))
        self.w = cp.ascontiguousarray(w.transpose(self._order))
        self.y = cp.empty(self.y_dims, dtype=cp.float32)
        if not reference:
            return
        n_out = self.y.size
        n = min(SAMPLES, n_out)
        # CuPy's Generator has no sampling without replacement; NumPy's is O(n) in the sample.
        picks = np.random.default_rng(seed).choice(n_out, size=n, replace=False)
        self.sample_index = cp.asarray(np.sort(picks), dtype=cp.int64)
        self.reference = cp.empty(n, dtype=cp.float64)
        threads = 128
        sizes = [shape.in_ch, shape.out_ch, shape.groups, shape.in_d, shape.in_h, shape.in_w, shape.kernel_d,
                 shape.kernel_h, shape.kernel_w, shape.out_d, shape.out_h, shape.out_w, shape.stride_d,
                 shape.stride_h, shape.stride_w, shape.pad_d, shape.pad_h, shape.pad_w, shape.dilation_d,
                 shape.dilation_h, shape.dilation_w]
        _reference_kernel()(((n + threads - 1) // threads,), (threads,),
                            (x, w, self.sample_index, self.reference, cp.int32(n),
                             *(cp.int32(v) for v in sizes)))
        self.reference_norm = float(cp.linalg.norm(self.reference))

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

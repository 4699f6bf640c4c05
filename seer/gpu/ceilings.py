"""The GPU's measured ceilings, for the hierarchical roofline (``seer ceilings``).

Compute: a large square GEMM through cuBLAS (CuPy's matmul), once in plain FP32 and once
with TF32 tensor cores allowed. Memory: one kernel per level, each timed in bursts like
every other measurement (:class:`seer.gpu.timing.BurstTimer`):

- DRAM: a copy of a buffer many times the L2's size (bytes read + bytes written);
- L2: every block re-reads a buffer that fits in L2 with ``ld.global.cg`` (cached in L2,
  not in L1);
- L1: every block re-reads its own few KiB with ``ld.global.ca`` (cached in L1).

The result is the best of a few sizes per ceiling; the datasheet's figures stand beside
it in the GPU spec (:mod:`seer.hardware.gpus`).
"""

from __future__ import annotations

import numpy as np

_SOURCE = r"""
extern "C" __global__ void copy_f4(const float4* __restrict__ src, float4* __restrict__ dst, const long long n)
{
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        dst[i] = src[i];
}

// Each thread sums `rounds` passes over a window of `n` float4s; the window is the whole
// buffer (L2) or one per block (L1). The sum is written so that no load is dead code.
extern "C" __global__ void reread_l2(const float4* __restrict__ src, float* __restrict__ out, const int n,
                                      const int rounds)
{
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const int stride = gridDim.x * blockDim.x;
    const int start = blockIdx.x * blockDim.x + threadIdx.x;
    for (int r = 0; r < rounds; ++r)
        for (int i = start; i < n; i += stride) {
            const float4 v = __ldcg(src + i);
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
    out[start] = acc.x + acc.y + acc.z + acc.w;
}

extern "C" __global__ void reread_l1(const float4* __restrict__ src, float* __restrict__ out, const int n,
                                      const int rounds)
{
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    const float4* mine = src + (long long)blockIdx.x * n;
    for (int r = 0; r < rounds; ++r)
        for (int i = threadIdx.x; i < n; i += blockDim.x) {
            const float4 v = __ldca(mine + i);
            acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        }
    out[blockIdx.x * blockDim.x + threadIdx.x] = acc.x + acc.y + acc.z + acc.w;
}
"""

#: Ceilings, in the order they are measured: name -> (unit, what it is).
CEILINGS = {
    "fp32_gemm_flops": ("FLOP/s", "cuBLAS SGEMM, CUBLAS_DEFAULT_MATH (FP32 FMA)"),
    "tf32_gemm_flops": ("FLOP/s", "cuBLAS SGEMM, CUBLAS_TF32_TENSOR_OP_MATH"),
    "dram_bytes": ("bytes/s", "copy of a buffer 16x the L2 (read + write)"),
    "l2_bytes": ("bytes/s", "re-reads of a buffer of half the L2, ld.global.cg"),
    "l1_bytes": ("bytes/s", "re-reads of 16 KiB per block, ld.global.ca"),
}


#: cublasMath_t value (cublas_api.h) that CuPy's binding does not name.
CUBLAS_TF32_TENSOR_OP_MATH = 3


def _timed_ms(fn, timer) -> float:
    """Median GPU time of one call, in bursts behind the spinner (as every measurement)."""
    from seer.collect.records import steadiest

    estimate = timer.estimate_ms(fn)
    (times, _, _), _ = steadiest(lambda: timer.measure(fn, estimate, budget_ms=max(50.0, 10 * estimate),
                                                       min_reps=5, max_reps=20))
    return float(np.median(times))


def measure_ceilings(progress=lambda message: None) -> dict[str, float]:
    """Measure every ceiling of :data:`CEILINGS` on the current GPU (a few seconds)."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    from seer.gpu.timing import BurstTimer

    timer = BurstTimer()
    module = cp.RawModule(code=_SOURCE)
    props = cp.cuda.runtime.getDeviceProperties(0)
    sms, l2 = int(props["multiProcessorCount"]), int(props["l2CacheSize"])
    out: dict[str, float] = {}

    handle = cp.cuda.device.get_cublas_handle()
    for name, mode in (("fp32_gemm_flops", cublas.CUBLAS_DEFAULT_MATH),
                       ("tf32_gemm_flops", CUBLAS_TF32_TENSOR_OP_MATH)):
        cublas.setMathMode(handle, mode)
        best = 0.0
        for n in (4096, 8192):
            a = cp.random.standard_normal((n, n), dtype=cp.float32)
            b = cp.random.standard_normal((n, n), dtype=cp.float32)
            c = cp.empty((n, n), dtype=cp.float32)
            best = max(best, 2 * n**3 / (_timed_ms(lambda: cp.matmul(a, b, out=c), timer) * 1e-3))
        out[name] = best
        progress(f"{name}: {best / 1e12:.1f} TFLOP/s")
    cublas.setMathMode(handle, cublas.CUBLAS_DEFAULT_MATH)

    n4 = 16 * l2 // 16  # float4s in a buffer 16x the L2
    src, dst = cp.ones(n4 * 4, dtype=cp.float32), cp.empty(n4 * 4, dtype=cp.float32)
    copy = module.get_function("copy_f4")
    ms = _timed_ms(lambda: copy((sms * 8,), (512,), (src, dst, np.int64(n4))), timer)
    out["dram_bytes"] = 2 * n4 * 16 / (ms * 1e-3)
    progress(f"dram_bytes: {out['dram_bytes'] / 1e12:.2f} TB/s")

    blocks, threads = sms * 4, 512
    sink = cp.empty(blocks * threads, dtype=cp.float32)
    n_l2, rounds = (l2 // 2) // 16, 8
    buffer = cp.ones(n_l2 * 4, dtype=cp.float32)
    reread = module.get_function("reread_l2")
    ms = _timed_ms(lambda: reread((blocks,), (threads,), (buffer, sink, np.int32(n_l2), np.int32(rounds))), timer)
    out["l2_bytes"] = rounds * n_l2 * 16 / (ms * 1e-3)
    progress(f"l2_bytes: {out['l2_bytes'] / 1e12:.2f} TB/s")

    n_l1, rounds = 16384 // 16, 256
    buffer = cp.ones(blocks * n_l1 * 4, dtype=cp.float32)
    reread = module.get_function("reread_l1")
    ms = _timed_ms(lambda: reread((blocks,), (threads,), (buffer, sink, np.int32(n_l1), np.int32(rounds))), timer)
    out["l1_bytes"] = blocks * rounds * n_l1 * 16 / (ms * 1e-3)
    progress(f"l1_bytes: {out['l1_bytes'] / 1e12:.2f} TB/s")
    return out

"""CUPTI kernel tracing of cuDNN forward calls on a real GPU (skipped without one)."""

import subprocess
import sys
import time

import numpy as np
import pytest

from seer.layers.shapes import ConvShape

pytestmark = pytest.mark.gpu

SHAPE = ConvShape.square(8, 64, 56, 64, 3, stride=1, padding=1)  # 3x3, 64 -> 64 channels, 56x56
#: cuDNN enum -> a substring of the kernel every run of it launches (None: no check).
ALGOS = {0: "implicit_convolve_sgemm", 1: None, 4: None, 7: None}


@pytest.fixture(scope="module")
def conv():
    """forward(algo) -> a callable running one cuDNN forward call with that algorithm."""
    import cupy as cp

    from seer.gpu import cudnn

    rng = cp.random.default_rng(0)
    x = rng.standard_normal(SHAPE.input_dims, dtype=cp.float32)
    w = rng.standard_normal(SHAPE.filter_dims, dtype=cp.float32)
    with cudnn.Handle(stream=cp.cuda.get_current_stream().ptr) as handle, cudnn.ConvolutionProblem(
            handle, SHAPE, "fma") as problem:
        y = cp.empty(problem.y_dims, dtype=cp.float32)
        keep = []

        def forward(algo: int):
            try:
                ws = problem.workspace_size(algo)
            except cudnn.CudnnNotSupported:
                pytest.skip(f"algorithm {algo} not supported for this shape")
            buf = cp.empty(ws, dtype=cp.uint8) if ws else None
            keep.append(buf)
            ptr = buf.data.ptr if buf is not None else 0

            def call() -> None:
                problem.forward(algo, x.data.ptr, w.data.ptr, y.data.ptr, ptr, ws)

            call()  # warm-up: module loading and cuDNN's first-call work stay out of traces
            cp.cuda.Device().synchronize()
            return call

        yield forward


def _timed_ms(call, estimate_ms: float) -> float:
    from seer.gpu.timing import BurstTimer

    times, _, _ = BurstTimer().measure(call, max(estimate_ms, 0.005), budget_ms=30)
    return float(np.median(times))


@pytest.mark.parametrize("algo", sorted(ALGOS))
def test_trace_lists_the_algorithms_kernels_and_their_times_add_up(tracer, conv, algo):
    call = conv(algo)
    kernels = tracer.trace(call)
    again = tracer.trace(call)
    assert kernels, "a forward call launches at least one kernel"
    assert [k.name for k in again] == [k.name for k in kernels]
    assert all(k.duration_ms > 0 for k in kernels)
    assert [k.start_ns for k in kernels] == sorted(k.start_ns for k in kernels)
    for name in {k.name for k in kernels}:  # the longest launch of each name has its configuration
        launches = [k for k in kernels if k.name == name]
        longest = max(k.end_ns - k.start_ns for k in launches)
        configured = [k for k in launches if k.launch is not None]
        assert any(k.end_ns - k.start_ns == longest for k in configured), name
        assert all(min(k.launch.grid) >= 1 and min(k.launch.block) >= 1 and k.launch.registers > 0
                   for k in configured)
    assert not any(k.name.startswith("_Z") for k in kernels), "names are demangled"
    if ALGOS[algo]:
        assert any(ALGOS[algo] in k.name for k in kernels), [k.name for k in kernels]
    if algo == 4:  # FFT: transforms of input and filter, a product, an inverse transform
        assert len(kernels) >= 3, [k.name for k in kernels]
    traced = sum(k.duration_ms for k in kernels)
    timed = _timed_ms(call, traced)
    # Burst timing adds the gaps between an algorithm's kernels; the kernels are the rest.
    assert 0.8 * timed <= traced <= 1.2 * timed, (traced, timed, [k.name for k in kernels])


def test_kernels_launched_outside_trace_are_not_reported(tracer, conv):
    import cupy as cp

    spin = cp.RawKernel(r'extern "C" __global__ void seer_outside(long long c)'
                        r'{ long long s = clock64(); while (clock64() - s < c) { } }', "seer_outside")
    call = conv(0)
    spin((1,), (1,), (cp.int64(1000),))
    cp.cuda.Device().synchronize()
    spin((1,), (1,), (cp.int64(10_000_000),))  # still running when trace starts
    names = [k.name for k in tracer.trace(call)]
    spin((1,), (1,), (cp.int64(1000),))  # between traces
    assert not any("seer_outside" in n for n in names) and names
    assert not any("seer_outside" in k.name for k in tracer.trace(call))
    inside = tracer.trace(lambda: spin((1,), (1,), (cp.int64(1000),)))
    assert [k.name for k in inside] == ["seer_outside"]
    assert inside[0].launch.grid == (1, 1, 1) and inside[0].launch.block == (1, 1, 1)


def test_trace_costs_little_more_than_the_call(tracer, conv):
    import cupy as cp

    call = conv(0)
    device = cp.cuda.Device()

    def wall_ms(fn, n: int = 20) -> float:
        times = []
        for _ in range(n):
            started = time.perf_counter()
            fn()
            times.append((time.perf_counter() - started) * 1e3)
        return float(np.median(times))

    plain = wall_ms(lambda: (call(), device.synchronize()))
    traced = wall_ms(lambda: tracer.trace(call))
    assert traced < plain + 5.0, (traced, plain)


def test_close_is_idempotent_and_a_new_tracer_works(conv):
    from seer.gpu import tracing

    call = conv(0)
    first = tracing.KernelTracer()
    names = [k.name for k in first.trace(call)]
    first.close()
    first.close()
    with pytest.raises(RuntimeError):
        first.trace(call)
    with tracing.KernelTracer() as second:
        assert [k.name for k in second.trace(call)] == names


def test_module_imports_neither_cupti_nor_cupy():
    code = ("import sys, seer.gpu.tracing as t; "
            "assert not {'cupti', 'cupy'} & set(sys.modules), sorted(sys.modules); "
            "print(t.demangle('_Z3addPfS_i'))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "add(float*, float*, int)"

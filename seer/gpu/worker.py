"""The GPU side of a collection: runs in a child process, under ncu when profiling.

``seer collect`` starts this program (``python -m seer.gpu.worker``) with a plan
file of shapes and their pending (math, algorithm) items, and reads what it appends to a
results file: a ``start`` event before each item and a ``row`` (timing) or ``profiled``
event after it. If the child dies (segfault, sticky CUDA error, driver reset) the
orchestrator knows which item killed it from the last ``start``, records that item's
failure and starts a fresh child for the rest. A CUDA runtime error inside an item ends
the child on purpose: the context may be unusable afterwards. The worker dies with the
process that started it (:func:`seer.collect.children.die_with_parent`), so that it never
keeps the GPU busy for an orchestrator that is gone.

Subcommands: ``probe`` (device, driver, CUDA, cuDNN facts as JSON), ``time``, ``profile``,
``census`` (cuDNN's support and workspace answers, without running anything).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable

from seer.algorithms import SPARSE_SOURCE, cudnn_algorithm_by_enum, get_algorithm, heuristic_ranks
from seer.collect import protocol
from seer.collect.children import die_with_parent
from seer.collect.ncu import range_name
from seer.collect.protocol import EVENT, ShapeWork, census_pass, start_event
from seer.schema import get_math_mode

EXIT_CUDA_ERROR = 3


# -- probe --------------------------------------------------------------------------------
def probe() -> dict:
    """Facts about this machine's GPU stack, for the orchestrator and provenance."""
    import cupy as cp

    from seer.gpu import cudnn

    info: dict = {"python": platform.python_version(), "cupy_version": cp.__version__,
                  "hostname": platform.node()}
    count = cp.cuda.runtime.getDeviceCount()
    info["device_count"] = count
    props = cp.cuda.runtime.getDeviceProperties(0)
    info["device_name"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    info["sm_count"] = int(props["multiProcessorCount"])
    info["memory_bytes"] = int(props["totalGlobalMem"])
    info["compute_capability"] = f"{props['major']}.{props['minor']}"
    info["l2_cache_bytes"] = int(props["l2CacheSize"])
    info["cuda_runtime_version"] = _cuda_version(cp.cuda.runtime.runtimeGetVersion())
    info["cuda_driver_api_version"] = _cuda_version(cp.cuda.runtime.driverGetVersion())
    try:
        import pynvml

        from seer.gpu.energy import own_or_first_handle

        pynvml.nvmlInit()
        info["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        h, problem = own_or_first_handle(pynvml)  # this process's GPU, whatever CUDA_VISIBLE_DEVICES says
        if problem:  # NVML's first GPU then, as before, and the record says so
            info["nvml_device_by_index"] = problem
        info["nvml_device_name"] = _text(pynvml.nvmlDeviceGetName(h))
        info["max_sm_clock_mhz"] = int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM))
        info["max_memory_clock_mhz"] = int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM))
        info["power_limit_w"] = pynvml.nvmlDeviceGetPowerManagementLimit(h) / 1000
        pynvml.nvmlShutdown()
    except Exception as exc:  # NVML is optional: provenance says why it is missing
        info["driver_version"] = None
        info["nvml_error"] = f"{type(exc).__name__}: {exc}"
    info["cudnn_version"] = cudnn.version()
    info["cudnn_library"] = cudnn.library_path()
    try:  # PyTorch's policies run under this version; read without importing PyTorch
        from importlib.metadata import version

        info["torch_version"] = version("torch")
    except Exception:
        info["torch_version"] = None
    return info


def _cuda_version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


# -- shared per-item machinery ------------------------------------------------------------
def _shape_seed(shape_id: str, seed: int) -> int:
    return (int(shape_id, 16) ^ seed) & 0x7FFFFFFF


def _heuristic_choices(problem, pass_: str = "fwd") -> tuple[list[tuple[str, int]], str | None]:
    """cuDNN's heuristic list of one pass (``cudnnGet...Algorithm_v7``), best first:
    (algorithm, math type) of its successful entries.

    An algorithm may appear more than once (with different math types)."""
    from seer.gpu.cudnn import CudnnError

    try:
        choices = problem.heuristic() if pass_ == "fwd" else problem.backward_heuristic(pass_)
    except CudnnError as exc:
        return [], str(exc)
    out = []
    for choice in choices:
        if choice.status != 0:
            continue
        try:
            out.append((cudnn_algorithm_by_enum(choice.algo, pass_).name, choice.math_type))
        except KeyError:
            continue
    return out, None


def _heuristic_ranks(problem, pass_: str = "fwd") -> tuple[dict[str, int], str | None]:
    """1-based rank of each algorithm in cuDNN's heuristic list of ``pass_`` (successful
    entries only)."""
    choices, error = _heuristic_choices(problem, pass_)
    return heuristic_ranks(choices), error


class PytorchCudaError(RuntimeError):
    """A CUDA error inside one of PyTorch's calls: the context may be unusable."""


class ItemFailed(Exception):
    """A run that cannot be made, with the status it is recorded under (not_supported, oom...)."""

    def __init__(self, status: str, detail: str) -> None:
        self.status, self.detail = status, detail
        super().__init__(detail)


def check_of(tensors, algo: str):
    """What ``algo``'s run writes and is checked on (:meth:`ShapeTensors.check_of`), or
    ItemFailed where its pass's tensors do not fit."""
    import cupy as cp

    try:
        return tensors.check_of(get_algorithm(algo).pass_)
    except cp.cuda.memory.OutOfMemoryError as exc:
        raise ItemFailed("oom", f"the gradient's tensors: {exc}") from None


def prepare_run(problem, tensors, algo: str, workspace_cap: int):
    """One algorithm's call on the shape's tensors (cuDNN's forward or backward, seer's own,
    or PyTorch's policy), its workspace and the workspace's size; or ItemFailed with the
    status to record."""
    import cupy as cp

    from seer.gpu.cudnn import CudnnError, CudnnNotSupported

    algorithm = get_algorithm(algo)
    if algorithm.source == "cupy":
        return _prepare_own(tensors, algo)
    if algorithm.source == SPARSE_SOURCE:
        return _prepare_sparse(tensors, algo)
    target = check_of(tensors, algo)
    if algorithm.source == "pytorch":
        return _prepare_pytorch(tensors, target, algo, problem.math)
    enum, pass_ = algorithm.enum, algorithm.pass_
    try:
        workspace_bytes = (problem.workspace_size(enum) if pass_ == "fwd"
                           else problem.backward_workspace_size(pass_, enum))
    except CudnnNotSupported as exc:
        raise ItemFailed("not_supported", str(exc)) from None
    except CudnnError as exc:
        raise ItemFailed("error", str(exc)) from None
    if workspace_bytes > workspace_cap:
        raise ItemFailed("workspace_too_large",
                          f"needs {workspace_bytes} bytes of workspace, cap is {workspace_cap}")
    try:
        workspace = cp.empty(workspace_bytes, dtype=cp.uint8) if workspace_bytes else None
    except cp.cuda.memory.OutOfMemoryError as exc:
        raise ItemFailed("oom", f"workspace of {workspace_bytes} bytes: {exc}") from None
    ptr = workspace.data.ptr if workspace is not None else 0
    if pass_ != "fwd":
        known, dy, out = target.known.data.ptr, target.dy.data.ptr, target.out.data.ptr

        def backward() -> None:
            problem.backward(pass_, enum, known, dy, out, ptr, workspace_bytes)

        return backward, workspace, workspace_bytes

    def forward() -> None:
        problem.forward(enum, tensors.x.data.ptr, tensors.w.data.ptr, tensors.y.data.ptr,
                        ptr, workspace_bytes)

    return forward, workspace, workspace_bytes


def _prepare_own(tensors, algo: str):
    """seer's own kernel for one algorithm (no workspace), or ItemFailed with the status."""
    from cupy.cuda.compiler import CompileException

    from seer.gpu import kernels
    from seer.hardware.kernel_plans import unsupported_reason

    reason = unsupported_reason(algo, tensors.shape, tensors.layout)
    if reason:
        raise ItemFailed("not_supported", reason)
    try:
        forward, _ = kernels.forward(algo, tensors.shape, tensors.x, tensors.w, tensors.y, layout=tensors.layout)
    except CompileException as exc:
        raise ItemFailed("error", f"compiling seer's kernels: {str(exc).splitlines()[0]}") from None
    return forward, None, 0


def _prepare_sparse(tensors, algo: str):
    """One of seer's sparse kernels (:mod:`seer.gpu.sparse_kernels`; no workspace: the
    buffers of the non-zeros are allocated in each call, as part of it), or ItemFailed."""
    from cupy.cuda.compiler import CompileException

    from seer.gpu import sparse_kernels

    if tensors.layout != "nchw":
        raise ItemFailed("not_supported", "seer's sparse kernels take NC[D]HW tensors only")
    if algo == "SEER_SPARSE_POINTWISE":
        reason = sparse_kernels.pointwise_refusal(tensors.shape)
        if reason is not None:
            raise ItemFailed("not_supported", reason)
    kernel = {"SEER_SPARSE_GATHER": sparse_kernels.gather, "SEER_SPARSE_SCATTER": sparse_kernels.scatter,
              "SEER_SPARSE_POINTWISE": sparse_kernels.pointwise}[algo]
    shape, x, w, y = tensors.shape, tensors.x, tensors.w, tensors.y

    def forward() -> None:
        kernel(shape, x, w, y)

    try:  # compiled here: the first checked call's time (first_call_ms) is the kernel's own
        sparse_kernels.compile_for(algo.removeprefix("SEER_SPARSE_").lower(), shape)
    except CompileException as exc:
        raise ItemFailed("error", f"compiling seer's sparse kernels: {str(exc).splitlines()[0]}") from None
    return forward, None, 0


def _prepare_pytorch(tensors, target, algo: str, math_mode: str):
    """PyTorch's own convolution (or its gradient) under one of its policies, writing
    ``target``'s output when checked; the run object is kept as the item's "workspace"
    (PyTorch sizes its own) so that it lives as long as the item."""
    try:
        from seer.gpu.pytorch_policy import PytorchRun
    except ImportError as exc:
        raise ItemFailed("error", f"PyTorch is not importable here: {exc}") from None
    run = PytorchRun(tensors, algo, math_mode, target)
    return run.forward, run, 0


def _run_unchecked(forward) -> None:
    """One forward call to completion; cuDNN's refusals become ItemFailed statuses."""
    import cupy as cp

    from seer.gpu.cudnn import CudnnError, CudnnNotSupported

    torch = sys.modules.get("torch")
    try:
        forward()
        cp.cuda.Device().synchronize()
    except CudnnNotSupported as exc:
        raise ItemFailed("not_supported", f"at run time: {exc}") from None
    except CudnnError as exc:
        raise ItemFailed("error", str(exc)) from None
    except cp.cuda.memory.OutOfMemoryError as exc:
        raise ItemFailed("oom", str(exc)) from None
    except Exception as exc:
        if torch is None or not isinstance(exc, RuntimeError):
            raise
        # PyTorch's policies: an allocation or a refusal ends the item; a CUDA error ends the
        # worker, as for every algorithm.
        if isinstance(exc, torch.cuda.OutOfMemoryError):
            raise ItemFailed("oom", str(exc).splitlines()[0]) from None
        if str(exc).startswith("CUDA error"):
            raise PytorchCudaError(str(exc).splitlines()[0]) from None
        raise ItemFailed("error", str(exc).splitlines()[0]) from None


def _release(workspace) -> None:
    """Give an item's workspace back: a PyTorch run returns its caching allocator's blocks."""
    release = getattr(workspace, "release", None)
    if release is not None:
        release()


def _run_checked(forward, target, workspace=None) -> float:
    """One call on a poisoned output (``target``'s: the forward's tensors or a pass's
    gradient); the relative error against float64. A PyTorch policy's run (its
    ``workspace``) copies its output in for the check."""
    target.poison_output()
    _run_unchecked(getattr(workspace, "checked_forward", forward))
    return target.relative_error()


def _for_each_item(plan: list[ShapeWork], emit, seed: int, per_item,
                   stop_file: str | None = None, reference: bool = True) -> None:
    """Allocate each shape once, build descriptors per math mode, call per_item per algo.

    ``per_item(problem, tensors, work, math, algo, heuristic_rank)`` returns the record to
    emit. Failures of a whole shape (its tensors do not fit) are emitted for every item.
    When ``stop_file`` appears, the worker stops after the current shape and exits
    normally, so that ncu still writes the results of everything profiled so far.
    """
    import cupy as cp

    from seer.gpu import cudnn

    pool = cp.get_default_memory_pool()
    handle = cudnn.Handle(stream=cp.cuda.get_current_stream().ptr)
    for work in plan:
        if stop_file and os.path.exists(stop_file):
            break
        zeros: dict = {}
        try:
            tensors, zeros = _shape_tensors(work, seed, reference)
        except cp.cuda.memory.OutOfMemoryError as exc:
            for math_mode, algo in work.items:
                emit({EVENT: protocol.ROW, "row": _base_row(work, math_mode, algo) | {
                    "status": "oom", "status_detail": f"input/filter/output tensors: {exc}"}})
            pool.free_all_blocks()
            continue
        by_math: dict[str, list[str]] = {}
        for math_mode, algo in work.items:
            by_math.setdefault(math_mode, []).append(algo)
        for math_mode, algos in by_math.items():
            with cudnn.ConvolutionProblem(handle, work.shape, math_mode) as problem:
                ranks: dict[str, tuple[dict[str, int], str | None]] = {}  # per pass, asked once
                for algo in algos:
                    pass_ = get_algorithm(algo).pass_
                    if pass_ not in ranks:
                        ranks[pass_] = _heuristic_ranks(problem, pass_)
                    pass_ranks, rank_error = ranks[pass_]
                    emit(start_event(work.shape_id, math_mode, algo))
                    record = per_item(problem, tensors, work, math_mode, algo, pass_ranks.get(algo))
                    if rank_error and record.get("row"):
                        record["row"]["heuristic_error"] = rank_error
                    if zeros and record.get("row"):
                        record["row"] |= zeros
                    emit(record)
        del tensors
        pool.free_all_blocks()
    handle.close()


def _shape_tensors(work: ShapeWork, seed: int, reference: bool):
    """The shape's tensors, and what its records add: for a sparse shape, an input of its
    sparsity and pattern (seeded by the sparse shape's id; the filter is the dense layer's)
    and the share of zeros it holds (``input_zero_fraction``) and how crowded its non-zeros
    are on pixels (``input_crowding``), measured, not assumed."""
    import cupy as cp

    from seer.gpu.reference import ShapeTensors

    dense_seed = _shape_seed(work.dense_shape_id, seed)
    if not work.sparsity:
        return ShapeTensors(work.shape, dense_seed, reference=reference), {}
    from seer.layers.sparsity import input_crowding, sparse_input, zero_fraction

    x = sparse_input(work.shape.input_dims, work.sparsity, work.pattern, seed=_shape_seed(work.shape_id, seed), xp=cp)
    zeros = {"input_zero_fraction": zero_fraction(x), "input_crowding": input_crowding(x)}
    cp.get_default_memory_pool().free_all_blocks()  # the pattern's temporaries (FFT, quantiles) go
    return ShapeTensors(work.shape, dense_seed, reference=reference, x=x), zeros


def _cuda_errors() -> tuple[type[BaseException], ...]:
    """Errors after which the CUDA context may be unusable: a launch (driver API, seer's
    kernels) or a call (runtime API) that failed."""
    import cupy as cp

    return cp.cuda.runtime.CUDARuntimeError, cp.cuda.driver.CUDADriverError, PytorchCudaError


def _base_row(work: ShapeWork, math_mode: str, algo: str) -> dict:
    return {"shape_id": work.shape_id, "math": math_mode, "algo": algo, "grid": work.grid,
            **work.shape.as_dict(), **work.sparse_fields()}


# -- timing -------------------------------------------------------------------------------
def _sm_clock_reader() -> Callable[[], int | None]:
    """A function returning the SM clock in MHz now (NVML) of the GPU this process runs on, or
    None without NVML."""
    try:
        import pynvml

        from seer.gpu.energy import own_or_first_handle

        pynvml.nvmlInit()
        handle, _ = own_or_first_handle(pynvml)  # NVML's index 0 is another GPU under --gpus
        return lambda: int(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
    except Exception:  # NVML is optional; rows then carry no clock
        return lambda: None


def time_plan(plan: list[ShapeWork], emit, *, workspace_cap: int, seed: int,
              budget_ms: float, min_reps: int, max_reps: int, min_burst_ms: float = 1.0,
              energy_s: float = 0.0, stop_file: str | None = None) -> None:
    """Time every item: check the result, then the median GPU time per call over bursts.

    See :mod:`seer.gpu.timing`: each timed repetition is a burst of back-to-back calls of
    at least ``min_burst_ms``, started behind a spinning GPU so that host-side work stays
    outside the timed region; about ``budget_ms`` of bursts, ``min_reps`` to ``max_reps``
    of them. Repeated calls reuse the same buffers (a warm L2, as in a framework's
    benchmark mode). With ``energy_s``, a successful run's energy per call is read over
    about that many seconds of back-to-back calls (:mod:`seer.gpu.energy`).
    """
    import numpy as np

    from seer.collect.records import steadiest
    from seer.gpu.timing import BurstTimer

    timer = BurstTimer()
    cuda_errors = _cuda_errors()
    sm_clock = _sm_clock_reader()
    tracer, trace_problem = _kernel_tracer()
    meter, energy_problem = _energy_meter(energy_s)

    def per_item(problem, tensors, work, math_mode, algo, rank):
        row = _base_row(work, math_mode, algo) | {"heuristic_rank": rank}
        try:
            forward, workspace, workspace_bytes = prepare_run(problem, tensors, algo, workspace_cap)
            try:
                row["workspace_bytes"] = workspace_bytes
                started = time.perf_counter()
                error = _run_checked(forward, check_of(tensors, algo), workspace)
                first_ms = (time.perf_counter() - started) * 1e3
                row["rel_error"] = error if math.isfinite(error) else None
                tolerance = get_math_mode(math_mode).tolerance
                status = "ok" if error <= tolerance else "wrong_result"
                if status == "wrong_result":
                    row["status_detail"] = (f"relative error {error:.3g} > tolerance {tolerance:g}"
                                            if math.isfinite(error) else "output has NaN/inf (unwritten or overflow)")
                estimate = timer.estimate_ms(forward)
                (times_ms, schedule, host_us), attempts = steadiest(lambda: timer.measure(
                    forward, estimate, budget_ms=budget_ms, min_burst_ms=min_burst_ms,
                    min_reps=min_reps, max_reps=max_reps))
                q25, median, q75 = np.percentile(times_ms, [25, 50, 75])
                row |= {"status": status, "time_ms": float(median), "time_ms_iqr": float(q75 - q25),
                        "time_ms_min": float(times_ms.min()), "n_reps": schedule.reps, "burst": schedule.burst,
                        "timing_attempts": attempts,
                        "host_us_per_call": round(host_us, 2), "first_call_ms": first_ms,
                        "sm_clock_mhz": sm_clock()}
                row |= _traced_kernels(tracer, trace_problem, forward)
                if energy_s > 0 and status == "ok":
                    row |= (meter.measure(forward, float(median), energy_s).as_row() if meter is not None
                            else {"energy_detail": energy_problem})
            finally:
                _release(workspace)
        except ItemFailed as exc:
            row |= {"status": exc.status, "status_detail": exc.detail}
        except cuda_errors as exc:
            # The context may be unusable: record the item, then let a fresh worker go on.
            emit({EVENT: protocol.ROW, "row": row | {"status": "error", "status_detail": f"CUDA error: {exc}"}})
            sys.exit(EXIT_CUDA_ERROR)
        return {EVENT: protocol.ROW, "row": row}

    _for_each_item(plan, emit, seed, per_item, stop_file)


def _kernel_tracer():
    """(a CUPTI kernel tracer, None) where tracing works here, else (None, the reason)."""
    from seer.gpu import tracing

    reason = tracing.available()
    if reason is not None:
        return None, reason
    try:
        return tracing.KernelTracer(), None
    except Exception as exc:  # tracing is extra information: the timing goes on without it
        return None, f"{type(exc).__name__}: {exc}"


def _energy_meter(energy_s: float):
    """(an NVML energy meter, None) when energy is asked for and NVML works, else (None, why)."""
    if energy_s <= 0:
        return None, None
    try:
        from seer.gpu.energy import EnergyMeter

        return EnergyMeter(), None
    except Exception as exc:  # energy is extra information: the timing goes on without it
        return None, f"NVML: {type(exc).__name__}: {exc}"


def _traced_kernels(tracer, problem: str | None, forward) -> dict:
    """One more call of ``forward`` under CUPTI, outside the timed bursts: the kernels it ran,
    summed by name (:func:`seer.collect.records.sum_by_name`)."""
    if tracer is None:
        return {"trace_status": "unavailable", "trace_detail": problem}
    try:
        kernels = tracer.trace(forward)
    except Exception as exc:
        return {"trace_status": "error", "trace_detail": f"{type(exc).__name__}: {exc}"}
    from seer.collect.records import sum_by_name

    return {"trace_status": "ok", "traced_kernels": sum_by_name(k.summable() for k in kernels)}


# -- profiling ----------------------------------------------------------------------------
def profile_plan(plan: list[ShapeWork], emit, *, workspace_cap: int, seed: int,
                 stop_file: str | None = None) -> None:
    """Run each item once inside its NVTX range, after one warm-up call outside it.

    The timing pass already checked every run against float64; here the warm-up is a
    plain call, so that ncu intercepts no launches beyond the algorithm's own.
    """
    import cupy as cp
    from cupy.cuda import nvtx

    cuda_errors = _cuda_errors()

    def per_item(problem, tensors, work, math_mode, algo, rank):
        record = {EVENT: protocol.PROFILED, "shape_id": work.shape_id, "math": math_mode, "algo": algo}
        try:
            forward, workspace, _ = prepare_run(problem, tensors, algo, workspace_cap)
            try:
                _run_unchecked(forward)  # warm-up: lazy module loading stays out of the profile
                nvtx.RangePush(range_name(work.shape_id, math_mode, algo))
                try:
                    forward()
                    cp.cuda.Device().synchronize()
                finally:
                    nvtx.RangePop()
            finally:
                _release(workspace)
            record["status"] = "ok"
        except ItemFailed as exc:
            record |= {"status": "error", "status_detail": f"{exc.status}: {exc.detail}"}
        except cuda_errors as exc:
            emit(record | {"status": "error", "status_detail": f"CUDA error: {exc}"})
            sys.exit(EXIT_CUDA_ERROR)
        return record

    _for_each_item(plan, emit, seed, per_item, stop_file, reference=False)


# -- census -------------------------------------------------------------------------------
#: Records a census worker hands over at once: one fsync per batch, not per record.
CENSUS_BATCH = 256


def census_record(problem, work: ShapeWork, math_mode: str, workspace_cap: int, pass_: str = "fwd") -> dict:
    """cuDNN's answers for one shape, math mode and pass, before anything runs.

    Per cuDNN algorithm of ``pass_``: whether its workspace-size call
    (``cudnnGetConvolutionForwardWorkspaceSize``, ``...BackwardDataWorkspaceSize``,
    ``...BackwardFilterWorkspaceSize``) accepts it, and the workspace it asks for (which also
    tells the kernel path: cuDNN's GEMM asks for an im2col buffer, or for nothing when it
    falls back to a direct kernel); and the pass's v7 heuristic ranking, with the math type
    it would use. A timed run asks the same calls first (:func:`prepare_run`).
    """
    from seer.gpu.answers import workspace_answers

    workspace, unsupported, errors = workspace_answers(problem, pass_)
    record = work.head(math_mode) | {
        "pass": pass_, "status": "ok", "workspace_bytes": workspace, "not_supported": unsupported,
        "workspace_cap_bytes": workspace_cap}
    if errors:
        record["errors"] = errors
    choices, heuristic_error = _heuristic_choices(problem, pass_)
    record["heuristic"] = [list(c) for c in choices]
    if heuristic_error:
        record["heuristic_error"] = heuristic_error
    return record


def census_plan(plan: list[ShapeWork], emit, *, workspace_cap: int, stop_file: str | None = None) -> None:
    """Record cuDNN's answers (:func:`census_record`) for every (shape, math, pass) item; an
    item's ``algo`` names its pass (:func:`seer.collect.protocol.census_item`).

    Only descriptors are made: no tensor is allocated and no kernel runs, so a shape costs
    a few host calls, and shapes larger than device memory can be asked about too.
    """
    from seer.gpu import cudnn

    batch: list[dict] = []

    def flush() -> None:
        if batch:
            emit({EVENT: protocol.CENSUS, "records": list(batch)})
            batch.clear()

    with cudnn.Handle() as handle:
        for work in plan:
            if stop_file and os.path.exists(stop_file):
                break
            shape = work.shape
            for math_mode, item in work.items:
                pass_ = census_pass(item)
                if len(batch) >= CENSUS_BATCH:
                    flush()
                emit(start_event(work.shape_id, math_mode, item))
                try:
                    with cudnn.ConvolutionProblem(handle, shape, math_mode) as problem:
                        batch.append(census_record(problem, work, math_mode, workspace_cap, pass_))
                except cudnn.CudnnError as exc:  # the descriptors themselves were refused
                    batch.append(work.head(math_mode) | {"pass": pass_, "status": "error",
                                                         "status_detail": str(exc)})
    flush()


# -- entry point --------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    die_with_parent()  # first: nothing here is worth running for a dead orchestrator
    parser = argparse.ArgumentParser(prog="python -m seer.gpu.worker", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--out", required=True)
    for name in ("time", "profile", "census"):
        p = sub.add_parser(name)
        p.add_argument("--plan", required=True)
        p.add_argument("--results", required=True)
        p.add_argument("--workspace-cap", type=int, required=True)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument("--stop-file", help="stop cleanly after the current shape once this file exists")
        if name == "time":
            p.add_argument("--budget-ms", type=float, default=10.0)
            p.add_argument("--min-burst-ms", type=float, default=1.0)
            p.add_argument("--min-reps", type=int, default=5)
            p.add_argument("--max-reps", type=int, default=50)
            p.add_argument("--energy-s", type=float, default=0.0)
    args = parser.parse_args(argv)
    if args.command == "probe":
        try:
            info = probe()
        except Exception as exc:  # reported to the orchestrator, which says it in one sentence
            info = {"error": f"{type(exc).__name__}: {exc}"}
        Path(args.out).write_text(json.dumps(info))
        return 0 if "error" not in info else 1
    emit = protocol.emitter(args.results)
    plan = protocol.read_plan(args.plan)
    if args.command == "census":
        census_plan(plan, emit, workspace_cap=args.workspace_cap, stop_file=args.stop_file)
    elif args.command == "time":
        time_plan(plan, emit, workspace_cap=args.workspace_cap, seed=args.seed,
                  budget_ms=args.budget_ms, min_reps=args.min_reps, max_reps=args.max_reps,
                  min_burst_ms=args.min_burst_ms, energy_s=args.energy_s, stop_file=args.stop_file)
    else:
        profile_plan(plan, emit, workspace_cap=args.workspace_cap, seed=args.seed,
                     stop_file=args.stop_file)
    emit({EVENT: protocol.DONE})
    return 0


if __name__ == "__main__":
    sys.exit(main())

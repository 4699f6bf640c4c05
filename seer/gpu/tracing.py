"""Every GPU kernel of one call and its duration, from CUPTI's activity API (GPU hosts only).

Nsight Compute replays each kernel many times to read its counters; to learn only *which*
kernels an algorithm launched and how long each ran, CUPTI's kernel activity records are
enough: a traced call costs one more call plus CUPTI's flush (data/h100/DATASHEET.md, "Kernel traces",
gives the measured cost). This module reads them through NVIDIA's
``cupti-python`` package (module ``cupti``).

The durations are those of one isolated call, whose kernels wait for the host between
launches; for algorithms of many kernels they can add up to more than the burst-timed
time per call, where the kernels run back to back.

CUPTI's activity API is process-wide: one pair of buffer callbacks per process, and kinds
are enabled for every context. So the callbacks are registered once (:class:`_Cupti`) and
a :class:`KernelTracer` enables kernel records only while :meth:`KernelTracer.trace` runs:
outside it, launches (such as the burst timing of :mod:`seer.gpu.timing`) pay nothing for
tracing and leave no records behind. Within ``trace`` the device is synchronized before
the call, so work launched earlier finishes before the window opens, and records that
start before the window are dropped all the same.

Neither ``cupti`` nor ``cupy`` is imported at module import: this module is imported on
CPU-only machines too. Do not trace under ncu or nsys: they own CUPTI there.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Callable

from seer.errors import EnvironmentProblem

#: Bytes of each host buffer handed to CUPTI. A kernel record is about 250 bytes and one
#: call launches a handful of kernels; a small buffer keeps each trace's allocation cheap,
#: and CUPTI asks for another one if it fills up.
BUFFER_BYTES = 1 << 20


class TracingError(RuntimeError):
    """CUPTI delivered records that cannot be trusted (incomplete timestamps)."""


@dataclass(frozen=True)
class LaunchConfig:
    """How a kernel was launched."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    registers: int  # per thread
    shared_mem_bytes: int  # static + dynamic

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@dataclass(frozen=True)
class TracedKernel:
    """One kernel execution as CUPTI recorded it.

    ``launch`` is read only for the longest launch of each kernel name so far in a trace
    (None for the others): calls that launch one kernel per group or image launch thousands,
    and reading every record's nine launch fields was most of the tracer's cost. The
    longest launch of a name, the one :func:`seer.collect.records.sum_by_name` keeps, always has it.
    """

    name: str  # demangled kernel name as CUPTI reports it
    start_ns: int  # CUPTI timestamps (ns, the host's clock domain)
    end_ns: int
    launch: LaunchConfig | None

    @property
    def duration_ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6

    def summable(self) -> list:
        """This launch as an entry of :func:`seer.collect.records.sum_by_name`."""
        launch = self.launch
        config = ([launch.blocks, launch.threads_per_block, launch.registers, launch.shared_mem_bytes]
                  if launch is not None else [None] * 4)
        return [self.name, 1, self.end_ns - self.start_ns, *config]


# -- demangling ---------------------------------------------------------------------------
# CUPTI reports a kernel's mangled symbol (``_Z23implicit_convolve_sgemm...``); ncu and
# seer.algorithms.classify_kernel work with demangled names. libstdc++'s demangler is on
# every Linux host that runs CUDA, so no extra package is needed.
_demangled: dict[str, str] = {}
_cxa_demangle = None
_free = None


def demangle(symbol: str) -> str:
    """``symbol`` demangled by libstdc++ (cached), or unchanged where that is impossible."""
    global _cxa_demangle, _free
    if not symbol.startswith("_Z"):
        return symbol  # extern "C" kernels (CuPy's RawKernel) are not mangled
    cached = _demangled.get(symbol)
    if cached is not None:
        return cached
    text = symbol
    try:
        if _cxa_demangle is None:
            fn = getattr(ctypes.CDLL("libstdc++.so.6"), "__cxa_demangle")
            fn.restype = ctypes.c_void_p  # a malloc'ed string the caller frees
            fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
            free = ctypes.CDLL(None).free
            free.argtypes, free.restype = [ctypes.c_void_p], None
            _cxa_demangle, _free = fn, free
        status = ctypes.c_int(-1)
        ptr = _cxa_demangle(symbol.encode(), None, None, ctypes.byref(status))
        if ptr:
            try:
                if status.value == 0:
                    text = ctypes.string_at(ptr).decode(errors="replace")
            finally:
                _free(ptr)
    except (OSError, AttributeError):  # no libstdc++: keep the mangled name
        pass
    _demangled[symbol] = text
    return text


# -- the process-wide CUPTI state ---------------------------------------------------------
#: A kernel record as copied out of CUPTI's buffer (plain Python values only).
_Record = tuple  # (name, start, end, LaunchConfig or None, correlation_id)


class _Cupti:
    """CUPTI's activity state for this process: callbacks, the kind in use, the records.

    CUPTI may hand back a full buffer on a thread of its own, so the records collected
    from buffers are guarded by a lock. Records are copied out inside the callback, into
    plain values: the activity objects may view a buffer that is reused or freed later.
    """

    def __init__(self) -> None:
        from cupti import cupti

        self.cupti = cupti
        self.lock = threading.Lock()
        self.records: list[_Record] = []
        self.callback_errors: list[str] = []
        self.longest_ns: dict[str, int] = {}  # per kernel name, since the last take()
        self.kernel_kinds = (int(cupti.ActivityKind.CONCURRENT_KERNEL), int(cupti.ActivityKind.KERNEL))
        try:
            cupti.activity_register_callbacks(self._buffer_requested, self._buffer_completed)
        except cupti.cuptiError as exc:
            raise EnvironmentProblem(f"CUPTI refused activity buffer callbacks (is ncu or nsys "
                                     f"profiling this process?): {exc}") from None
        self.kind = self._choose_kind()

    def _choose_kind(self) -> int:
        """CONCURRENT_KERNEL (kernels keep overlapping as in an untraced run), else KERNEL
        (serializes kernels; older setups offer only that)."""
        cupti = self.cupti
        errors = []
        for kind in (cupti.ActivityKind.CONCURRENT_KERNEL, cupti.ActivityKind.KERNEL):
            try:
                cupti.activity_enable(kind)
            except cupti.cuptiError as exc:
                errors.append(f"{kind.name}: {exc}")
                continue
            cupti.activity_disable(kind)
            return int(kind)
        raise EnvironmentProblem("CUPTI refused kernel activity records (is ncu or nsys "
                                 "profiling this process?): " + "; ".join(errors))

    # cupti-python's callback protocol: the request callback returns (buffer size, maximum
    # records; 0 = as many as fit) and cupti-python allocates the buffer; the completion
    # callback receives the buffer's records as a list of activity objects.
    @staticmethod
    def _buffer_requested() -> tuple[int, int]:
        return BUFFER_BYTES, 0

    def _buffer_completed(self, activities: list) -> None:
        try:
            kept = []
            with self.lock:
                longest = self.longest_ns
                for a in activities:
                    if a.kind not in self.kernel_kinds:
                        continue
                    name, start, end = a.name or "<unnamed>", int(a.start), int(a.end)
                    launch = None
                    if end - start > longest.get(name, -1):  # see TracedKernel.launch
                        longest[name] = end - start
                        launch = LaunchConfig(
                            (int(a.grid_x), int(a.grid_y), int(a.grid_z)),
                            (int(a.block_x), int(a.block_y), int(a.block_z)),
                            int(a.registers_per_thread),
                            int(a.static_shared_memory) + int(a.dynamic_shared_memory))
                    kept.append((name, start, end, launch, int(a.correlation_id)))
                self.records.extend(kept)
        except Exception as exc:  # an exception must not unwind into CUPTI's C code
            with self.lock:
                self.callback_errors.append(f"{type(exc).__name__}: {exc}")

    def flush(self) -> None:
        """Deliver every buffer now, incomplete ones too (the caller has synchronized).

        Forced, so that a partly filled buffer is delivered whatever CUPTI thinks of its
        records; the callbacks run before this returns."""
        self.cupti.activity_flush_all(int(self.cupti.ActivityFlag.FLUSH_FORCED))

    def take(self) -> tuple[list[_Record], list[str]]:
        with self.lock:
            records, errors = self.records, self.callback_errors
            self.records, self.callback_errors, self.longest_ns = [], [], {}
        return records, errors


_state: _Cupti | None = None
_state_lock = threading.Lock()


def _cupti_state() -> _Cupti:
    global _state
    with _state_lock:
        if _state is None:
            _state = _Cupti()
        return _state


def available() -> str | None:
    """None if CUPTI kernel tracing can be used here, else a one-line reason."""
    try:
        from cupti import cupti
    except ImportError as exc:
        return f"cupti-python is not installed (module cupti: {exc})"
    except OSError as exc:
        return f"cupti-python could not load its libraries: {exc}"
    try:
        cupti.get_timestamp()  # the first CUPTI call loads libcupti
    except Exception as exc:
        return f"libcupti could not be loaded or used: {type(exc).__name__}: {exc}"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:
        return f"no usable CUDA device: {type(exc).__name__}: {exc}"
    return None


# -- the tracer ---------------------------------------------------------------------------
class KernelTracer:
    """Context manager over CUPTI CONCURRENT_KERNEL (or KERNEL) activity records, set up once per
    process; `trace(fn)` runs fn(), synchronizes the device, flushes CUPTI, and returns the list of
    TracedKernel launched during fn, in start order.

    The buffer callbacks are registered once per process; the kernel kind is switched on
    only for the duration of each ``trace``, so calls outside it are neither slowed nor
    recorded. Kernels launched by other host threads during ``trace`` would be recorded
    too: trace from the only thread that launches work. Raises EnvironmentProblem when
    CUPTI cannot be used (see :func:`available`).
    """

    def __init__(self) -> None:
        reason = available()
        if reason is not None:
            raise EnvironmentProblem(f"CUPTI kernel tracing is unavailable: {reason}")
        import cupy

        self._cupy = cupy
        self._state = _cupti_state()
        self._open = True

    def trace(self, fn: Callable[[], None]) -> list[TracedKernel]:
        """Run ``fn()`` once and return the kernels it launched, in start order."""
        if not self._open:
            raise RuntimeError("KernelTracer is closed")
        state, cupti = self._state, self._state.cupti
        device = self._cupy.cuda.Device()
        # Earlier work finishes outside the window, and stale records are thrown away.
        device.synchronize()
        state.flush()
        state.take()
        cupti.activity_enable(state.kind)
        try:
            window_start = cupti.get_timestamp()
            fn()
            device.synchronize()  # every record complete before the forced flush
            state.flush()
        finally:
            cupti.activity_disable(state.kind)
        records, errors = state.take()
        if errors:
            raise TracingError("reading CUPTI's activity buffer failed: " + "; ".join(errors))
        return _select(records, window_start)

    def close(self) -> None:
        """Disable kernel records, deliver and drop what is left; idempotent.

        The callbacks stay registered (CUPTI allows one pair per process); a later
        tracer reuses them. cupti-python frees each buffer once it has been delivered.
        """
        if not self._open:
            return
        self._open = False
        state = self._state
        try:
            state.cupti.activity_disable(state.kind)
        except state.cupti.cuptiError:
            pass  # already disabled: trace disables it on the way out
        state.flush()
        state.take()

    def __enter__(self) -> "KernelTracer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _select(records: list[_Record], window_start: int) -> list[TracedKernel]:
    """Kernels that ran inside the window, in start order; incomplete records are an error."""
    kernels = []
    for name, start, end, launch, _correlation in sorted(records, key=lambda r: (r[1], r[4])):
        if start == 0 or end < start:
            raise TracingError(f"CUPTI record of {name} has no complete timestamps "
                               f"(start {start}, end {end}); records were dropped or unfinished")
        if start < window_start:
            continue  # ran before the window (only for safety: the sync and flush clear these)
        kernels.append(TracedKernel(demangle(name), start, end, launch))
    return kernels

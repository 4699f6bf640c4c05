"""GPU timing that sees the kernels, not the host: bursts behind a spinning GPU.

The first H100 collection timed each forward call alone between two CUDA events. Events
run on the GPU, but the start event executes as soon as it is enqueued, so the host's own
work for the call (Python, ctypes, cuDNN's dispatch) lands inside the timed region, and so
does its jitter: on short kernels, identical kernels timed under both math modes often
differed widely (data/h100/DATASHEET.md, "Measured on the H100", timing quality).

Here a small kernel first keeps the GPU busy for longer than the host needs to enqueue a
burst of calls; the start event, the burst and the end event then run back to back on
the GPU, and the elapsed time over the burst length is the GPU time per call, launch gaps
between an algorithm's kernels included. Bursts are at least ``min_burst_ms`` long and
are repeated for about ``budget_ms``; the median over repetitions is reported.

Now and then the host falls behind the spin (another process, the OS) and some bursts
include idle GPU time. Such a measurement shows as a spread of its repetitions far wider
than a typical run's, and re-timed in a fresh process most such runs were much faster
(data/h100/DATASHEET.md, unsteady measurements). So a measurement whose
spread exceeds :data:`seer.collect.records.MAX_SPREAD` is taken again, up to
:data:`~seer.collect.records.MAX_ATTEMPTS` times in all, and the steadiest attempt is kept
(:func:`seer.collect.records.steadiest`).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

#: Clock cycles the spin kernel waits per microsecond; the H100 boosts to 1980 MHz, and a
#: longer wait at a lower clock only adds idle GPU time before the timed region.
CYCLES_PER_US = 2000


@dataclass(frozen=True)
class Schedule:
    burst: int  # calls back to back between the two events
    reps: int  # timed bursts


def schedule(estimate_ms: float, *, budget_ms: float = 10.0, min_burst_ms: float = 1.0,
             min_reps: int = 5, max_reps: int = 50, max_burst: int = 1000) -> Schedule:
    """How many calls per burst and how many bursts, for one call taking ``estimate_ms``.

    A burst holds at least ``min_burst_ms`` of GPU work (at most ``max_burst`` calls); the
    bursts fill about ``budget_ms``, with at least ``min_reps`` and at most ``max_reps``.
    """
    if not estimate_ms > 0:
        raise ValueError(f"estimate_ms must be positive, got {estimate_ms}")
    burst = max(1, min(max_burst, math.ceil(min_burst_ms / estimate_ms)))
    reps = int(budget_ms // (burst * estimate_ms))
    return Schedule(burst, max(min_reps, min(max_reps, reps)))


_SPIN_SOURCE = r"""
extern "C" __global__ void seer_spin(const long long cycles) {
    const long long start = clock64();
    while (clock64() - start < cycles) { }
}
"""


class BurstTimer:
    """Times bursts of a forward call on the current CuPy stream."""

    def __init__(self) -> None:
        import cupy as cp

        self._cp = cp
        self._spin = cp.RawKernel(_SPIN_SOURCE, "seer_spin")
        self._start = cp.cuda.Event()
        self._end = cp.cuda.Event()

    def host_us_per_call(self, forward: Callable[[], None], calls: int = 5) -> float:
        """Host time to enqueue one call (the GPU may still be running them)."""
        started = time.perf_counter()
        for _ in range(calls):
            forward()
        elapsed = (time.perf_counter() - started) / calls * 1e6
        self._cp.cuda.Device().synchronize()
        return elapsed

    def burst_ms(self, forward: Callable[[], None], burst: int, host_us: float) -> float:
        """GPU milliseconds per call over one burst of ``burst`` back-to-back calls."""
        cp = self._cp
        spin_us = 1.5 * burst * host_us + 50.0
        self._spin((1,), (1,), (cp.int64(int(spin_us * CYCLES_PER_US)),))
        self._start.record()
        for _ in range(burst):
            forward()
        self._end.record()
        self._end.synchronize()
        return cp.cuda.get_elapsed_time(self._start, self._end) / burst

    @staticmethod
    def estimate_ms(forward: Callable[[], None]) -> float:
        """GPU time of one warm call, host time included (it can only overestimate): what
        sizes the bursts of :meth:`measure`."""
        from cupyx.profiler import benchmark

        return benchmark(forward, n_repeat=1, n_warmup=1).gpu_times[0][0] * 1e3

    def measure(self, forward: Callable[[], None], estimate_ms: float, **schedule_args):
        """Per-call times (ms) of every timed burst, after one untimed warm-up burst."""
        import numpy as np

        plan = schedule(estimate_ms, **schedule_args)
        # Over at most one burst's calls: the host time sizes the spin before a burst, and
        # for a call long enough to fill a burst alone, five calls cost five calls of GPU time.
        host_us = self.host_us_per_call(forward, calls=min(5, plan.burst))
        self.burst_ms(forward, plan.burst, host_us)  # warm-up: clocks up, caches and code loaded
        times = np.array([self.burst_ms(forward, plan.burst, host_us) for _ in range(plan.reps)])
        return times, plan, host_us

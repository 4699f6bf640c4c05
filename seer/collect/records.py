"""What a collection record holds and how it is judged, shared by the orchestrator, the
GPU worker and the dataset: the spread of a measurement's timed bursts and when to take it
again, and the kernel traces' summed format.

This module runs on any machine; the GPU side (:mod:`seer.gpu.timing`,
:mod:`seer.gpu.tracing`) imports it, never the other way round.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

#: Interquartile range over median above which a measurement is taken again.
MAX_SPREAD = 0.1
#: Measurements per item at most, the first included.
MAX_ATTEMPTS = 3


def spread(times_ms) -> float:
    """Interquartile range of the repetitions over their median (0 for a single one)."""
    q25, median, q75 = np.percentile(np.asarray(times_ms, dtype=float), [25, 50, 75])
    return float((q75 - q25) / median) if median > 0 else float("inf")


def steadiest(measure_once: Callable[[], tuple], max_spread: float = MAX_SPREAD,
              max_attempts: int = MAX_ATTEMPTS) -> tuple[tuple, int]:
    """Call ``measure_once`` (returning repetition times first) until its spread is at most
    ``max_spread`` or ``max_attempts`` calls were made; return the attempt with the lowest
    spread and the number of attempts."""
    best, best_spread = None, float("inf")
    for attempt in range(1, max_attempts + 1):
        result = measure_once()
        result_spread = spread(result[0])
        if result_spread < best_spread:
            best, best_spread = result, result_spread
        if result_spread <= max_spread:
            break
    return best, attempt


def sum_by_name(entries: Iterable[Sequence]) -> list[list]:
    """Kernels summed by name, in order of first launch.

    Each entry, in and out, is ``[name, launches, total ns, grid blocks, block threads,
    registers, shared memory bytes]``; a summed entry keeps the launch configuration of its
    longest part (the first of equals). Some algorithms launch one kernel per group or tile,
    thousands of them: summing keeps a run's record small.
    """
    by_name: dict[str, list] = {}
    longest: dict[str, int] = {}
    for name, launches, ns, blocks, threads, registers, shared in entries:
        entry = by_name.get(name)
        if entry is None:  # (a dataset is rebuilt from millions of entries: no list made per entry)
            by_name[name] = [name, 0 + launches, 0 + ns, blocks, threads, registers, shared]
            longest[name] = max(-1, ns)
            continue
        entry[1] += launches
        entry[2] += ns
        if ns > longest[name]:
            longest[name] = ns
            entry[3:] = blocks, threads, registers, shared
    return list(by_name.values())


def stored_trace(kernels: Sequence[Sequence]) -> list[list]:
    """A timing record's ``traced_kernels`` in the summed format of :func:`sum_by_name`.

    The first traced records (2026-11-23, before 23:31 UTC) held one entry per launch,
    ``[name, ns, grid blocks, block threads, registers, shared memory bytes]``; they are
    summed here by the same rule.
    """
    return sum_by_name((k[0], 1, *k[1:]) if len(k) == 6 else k for k in kernels)


def trace_totals(kernels: Sequence[Sequence]) -> tuple[int, int]:
    """Kernel launches and their summed nanoseconds in a timing record's ``traced_kernels``
    (either format, :func:`stored_trace`)."""
    summed = stored_trace(kernels)
    return sum(int(k[1]) for k in summed), sum(int(k[2]) for k in summed)

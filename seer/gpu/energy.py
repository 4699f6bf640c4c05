"""Energy per call from NVML's total-energy counter (``nvmlDeviceGetTotalEnergyConsumption``).

The counter counts millijoules since the driver loaded, but it moves in steps: on the H100
it changed about every 100 ms. A single call is far shorter, so the call is repeated
back to back for a window of whole counter steps, and the energy is read between two
steps, both taken while the GPU was busy with the calls:

    average power = (energy at step b - energy at step a) / (host time of b - host time of a)
    energy per call = average power x GPU time per call (from the timed bursts)

Both steps are inside the busy period, so neither idle time before nor the drain after
the calls counts. The power is the board's, all of it (static power included), as NVML
reports it. The window's length and its number of counter steps are recorded with it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

#: Seconds of calls before the first reading: the board's power settles after the load starts.
SETTLE_S = 0.25
#: Calls queued ahead of the one the host waits on, in chunks of about this many ms of GPU time.
CHUNK_MS = 10.0


#: The fields of one energy reading in a timing record (:meth:`EnergyReading.as_row`).
ENERGY_FIELDS = ("power_w", "energy_mj", "energy_window_s", "energy_counter_steps")


@dataclass(frozen=True)
class EnergyReading:
    power_w: float  # average over the window
    energy_mj: float  # per call
    window_s: float
    counter_steps: int

    def as_row(self) -> dict:
        return dict(zip(ENERGY_FIELDS, (self.power_w, self.energy_mj, self.window_s, self.counter_steps)))


def current_device_handle(pynvml):
    """NVML's handle of the GPU CuPy runs on, found by its PCI bus id: NVML numbers every GPU of
    the host whatever ``CUDA_VISIBLE_DEVICES`` hides, so under ``seer collect --gpus`` (or any
    process pinned to another GPU than the first) NVML's index 0 is another GPU."""
    import cupy as cp

    return pynvml.nvmlDeviceGetHandleByPciBusId(cp.cuda.Device().pci_bus_id)


def own_or_first_handle(pynvml) -> tuple[object, str | None]:
    """:func:`current_device_handle`, or NVML's first GPU where that cannot be found, with why
    (None where it was)."""
    try:
        return current_device_handle(pynvml), None
    except Exception as exc:  # noqa: BLE001 - NVML and CuPy raise their own types
        return pynvml.nvmlDeviceGetHandleByIndex(0), f"{type(exc).__name__}: {exc}"


class EnergyMeter:
    """Reads one GPU's energy counter around back-to-back calls (see the module's doc)."""

    def __init__(self, device_index: int | None = None) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handle = (current_device_handle(pynvml) if device_index is None
                        else pynvml.nvmlDeviceGetHandleByIndex(device_index))

    def counter_mj(self) -> int:
        return int(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle))

    def measure(self, fn: Callable[[], None], call_ms: float, window_s: float = 1.0) -> EnergyReading:
        """Run ``fn`` (one call, enqueued on the current CuPy stream, ``call_ms`` of GPU time)
        back to back for about ``SETTLE_S + window_s`` and read the power over ``window_s``."""
        import cupy as cp

        per_chunk = max(1, int(CHUNK_MS / max(call_ms, 1e-4)))
        stream = cp.cuda.get_current_stream()
        in_flight: list = []

        def enqueue() -> None:
            for _ in range(per_chunk):
                fn()
            in_flight.append(stream.record())

        def keep_busy() -> None:
            # Three chunks queued: the GPU never waits for the host.
            while len(in_flight) < 3:
                enqueue()
            if in_flight[0].done:
                in_flight.pop(0)

        def next_step(after: int) -> tuple[int, float]:
            while True:
                keep_busy()
                value = self.counter_mj()
                if value != after:
                    return value, time.perf_counter()

        started = time.perf_counter()
        while time.perf_counter() - started < SETTLE_S:
            keep_busy()
        first, t_first = next_step(self.counter_mj())
        last, t_last, steps = first, t_first, 0
        while t_last - t_first < window_s:
            last, t_last = next_step(last)
            steps += 1
        stream.synchronize()
        power_w = (last - first) / 1e3 / (t_last - t_first)
        return EnergyReading(power_w=power_w, energy_mj=power_w * call_ms, window_s=t_last - t_first,
                             counter_steps=steps)

    def close(self) -> None:
        self._nvml.nvmlShutdown()

"""Resident blocks per SM and waves, from a launch configuration and a GPU spec.

The CUDA occupancy calculator's rules in pure Python and NumPy: a prediction for a kernel
that was never profiled needs SEER's B_max (resident blocks per SM times SMs) and waves
without Nsight Compute. The four limits are those ncu reports as
``launch__occupancy_limit_{blocks,warps,registers,shared_mem}``; tests check them
against the limits ncu measured on the H100.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seer.gpus import GPUSpec

WARP_SIZE = 32


def _ceil_to(value, unit):
    return np.ceil(np.asarray(value, dtype=float) / unit) * unit


@dataclass(frozen=True)
class OccupancyLimits:
    """Resident blocks per SM allowed by each resource (as ncu's launch__occupancy_limit_*)."""

    blocks: int
    warps: int
    registers: int
    shared_mem: int

    @property
    def blocks_per_sm(self) -> int:
        return min(self.blocks, self.warps, self.registers, self.shared_mem)

    @property
    def limiter(self) -> str:
        """Name of the binding limit (the first, in field order, on ties)."""
        values = {"blocks": self.blocks, "warps": self.warps, "registers": self.registers,
                  "shared_mem": self.shared_mem}
        return min(values, key=values.get)


def shared_mem_carveout(spec: GPUSpec, shared_mem_per_block_bytes) -> np.ndarray:
    """The largest shared-memory carveout, used when the configured one is not known.

    The driver picks the carveout per launch; on the H100 it picked ones that never made
    shared memory the binding limit (tests/test_occupancy.py), so the largest carveout
    gives the same resident blocks per SM, though not the same shared-memory limit.
    """
    shape = np.shape(np.asarray(shared_mem_per_block_bytes))
    return np.full(shape, max(spec.shared_mem_carveouts_kib) * 1024.0)


def _block_shared_mem(spec: GPUSpec, shared_mem_per_block_bytes) -> np.ndarray:
    raw = np.asarray(shared_mem_per_block_bytes, dtype=float)
    return _ceil_to(raw + spec.reserved_shared_mem_per_block_bytes, spec.shared_mem_allocation_unit_bytes)


def occupancy_limits_array(spec: GPUSpec, threads_per_block, registers_per_thread,
                           shared_mem_per_block_bytes, shared_mem_config_bytes=None) -> dict[str, np.ndarray]:
    """Vectorised :func:`occupancy_limits`: arrays of the four limits (no launch checks)."""
    threads = np.asarray(threads_per_block, dtype=float)
    regs = np.asarray(registers_per_thread, dtype=float)
    smem = np.asarray(shared_mem_per_block_bytes, dtype=float)
    warps_per_block = np.ceil(threads / WARP_SIZE)
    by_blocks = np.full(np.broadcast(threads, regs, smem).shape, float(spec.max_blocks_per_sm))
    by_warps = np.floor(spec.max_warps_per_sm / warps_per_block)
    # Registers are allocated per warp, in units; whole warp groups of the allocation
    # granularity must fit in the register file.
    regs_per_warp = _ceil_to(regs * WARP_SIZE, spec.register_allocation_unit)
    with np.errstate(divide="ignore"):
        warps_by_regs = np.floor(spec.max_registers_per_block / regs_per_warp
                                 / spec.warp_allocation_granularity) * spec.warp_allocation_granularity
        by_regs = np.floor(warps_by_regs / warps_per_block) * (spec.registers_per_sm // spec.max_registers_per_block)
    by_regs = np.where(regs > 0, by_regs, spec.max_blocks_per_sm)
    config = (shared_mem_carveout(spec, smem) if shared_mem_config_bytes is None
              else np.asarray(shared_mem_config_bytes, dtype=float))
    per_block = _block_shared_mem(spec, smem)
    # Since cc 8.0 every block reserves 1 KiB, so even kernels without shared memory are
    # limited by the carveout (ncu reports e.g. 8 blocks for an 8 KiB carveout).
    with np.errstate(divide="ignore", invalid="ignore"):
        by_smem = np.where(per_block > 0, np.floor(config / per_block), spec.max_blocks_per_sm)
    return {"blocks": by_blocks, "warps": by_warps, "registers": by_regs, "shared_mem": by_smem}


def occupancy_limits(spec: GPUSpec, threads_per_block: int, registers_per_thread: int,
                     shared_mem_per_block_bytes: int,
                     shared_mem_config_bytes: int | None = None) -> OccupancyLimits:
    """Resident blocks per SM allowed by block count, warps, registers and shared memory.

    Parameters
    ----------
    spec : GPUSpec
    threads_per_block, registers_per_thread, shared_mem_per_block_bytes : int
        The launch configuration (static plus dynamic shared memory).
    shared_mem_config_bytes : int, optional
        The SM's shared-memory carveout (ncu's launch__shared_mem_config_size); by default
        the largest one (see :func:`shared_mem_carveout`).

    Raises
    ------
    ValueError
        If the launch is impossible on this GPU; the message names the argument.
    """
    if not 0 < threads_per_block <= spec.max_threads_per_block:
        raise ValueError(f"threads_per_block={threads_per_block} must be in 1..{spec.max_threads_per_block}")
    if not 0 <= registers_per_thread <= spec.max_registers_per_thread:
        raise ValueError(f"registers_per_thread={registers_per_thread} must be in 0..{spec.max_registers_per_thread}")
    if not 0 <= shared_mem_per_block_bytes <= spec.max_shared_mem_per_block_bytes:
        raise ValueError(f"shared_mem_per_block_bytes={shared_mem_per_block_bytes} must be in "
                         f"0..{spec.max_shared_mem_per_block_bytes}")
    limits = occupancy_limits_array(spec, threads_per_block, registers_per_thread,
                                    shared_mem_per_block_bytes, shared_mem_config_bytes)
    return OccupancyLimits(**{k: int(np.asarray(v).item()) for k, v in limits.items()})


def theoretical_occupancy(spec: GPUSpec, threads_per_block: int, registers_per_thread: int,
                          shared_mem_per_block_bytes: int, shared_mem_config_bytes: int | None = None) -> float:
    """Active warps per SM over the maximum, at the resident-block limit."""
    limits = occupancy_limits(spec, threads_per_block, registers_per_thread, shared_mem_per_block_bytes,
                              shared_mem_config_bytes)
    warps = limits.blocks_per_sm * -(-threads_per_block // WARP_SIZE)
    return warps / spec.max_warps_per_sm


def waves(grid_blocks, blocks_per_sm, sm_count: int):
    """SEER's waves: grid blocks over B_max = resident blocks per SM x SMs (fractional)."""
    return np.asarray(grid_blocks, dtype=float) / (np.asarray(blocks_per_sm, dtype=float) * sm_count)


def whole_waves(grid_blocks, blocks_per_sm, sm_count: int):
    """Waves rounded up: how many times the GPU fills up with blocks."""
    return np.ceil(waves(grid_blocks, blocks_per_sm, sm_count))

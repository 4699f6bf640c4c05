"""Occupancy limits: hand-checked cases, and every kernel ncu measured on the H100."""

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from seer.gpus import get_gpu_spec
from seer.occupancy import (LIMIT_NAMES, occupancy_limits, occupancy_limits_array, theoretical_occupancy, waves,
                            whole_waves)

H100 = get_gpu_spec("h100")
V100 = get_gpu_spec("v100")


def test_hand_checked_sm90_cases():
    # 256 threads = 8 warps; 128 regs x 32 = 4096 per warp -> 16 warps fit in 64K regs -> 2 blocks.
    # 64 warps / 8 -> 8 blocks. Registers allow 2 blocks, and 2 x (48 + 1 reserved) KiB fit
    # in 100 KiB, the smallest carveout that holds them, which the driver picks by default;
    # in it shared memory allows 2 blocks too.
    limits = occupancy_limits(H100, 256, 128, 48 * 1024)
    assert (limits.blocks, limits.warps, limits.registers, limits.shared_mem) == (32, 8, 2, 2)
    assert limits.blocks_per_sm == 2 and limits.limiter == "registers"
    assert limits.limiters == ("registers", "shared_mem")
    assert theoretical_occupancy(H100, 256, 128, 48 * 1024) == 16 / 64
    # With the largest carveout, shared memory would allow 228 // 49 = 4 blocks.
    assert occupancy_limits(H100, 256, 128, 48 * 1024, shared_mem_config_bytes=228 * 1024).shared_mem == 4
    # 128 threads, 32 regs, no shared memory: 16 blocks by warps and registers; the 1 KiB
    # reservation per block makes 16 KiB the smallest carveout for them.
    small = occupancy_limits(H100, 128, 32, 0)
    assert small.warps == 16 and small.registers == 16 and small.shared_mem == 16
    # ncu's own numbers for an 8 KiB carveout and a kernel without shared memory: 8 blocks.
    assert occupancy_limits(H100, 1024, 40, 0, shared_mem_config_bytes=8192).shared_mem == 8


def test_hand_checked_sm70_case_without_reserved_shared_memory():
    # 255 regs -> 8160 -> 8192 per warp (unit 256) -> 8 warps, a multiple of the granularity 4.
    limits = occupancy_limits(V100, 64, 255, 0)
    assert limits.registers == 4 and limits.shared_mem == 32 and limits.blocks_per_sm == 4


@pytest.mark.parametrize("args, name", [
    ((2048, 32, 0), "threads_per_block"), ((128, 300, 0), "registers_per_thread"),
    ((128, 32, 300_000), "shared_mem_per_block_bytes")])
def test_impossible_launches_name_the_argument(args, name):
    with pytest.raises(ValueError, match=name):
        occupancy_limits(H100, *args)


def test_waves():
    assert waves(264, 2, 132) == 1.0 and whole_waves(265, 2, 132) == 2.0
    assert np.allclose(waves([132, 66], [1, 1], 132), [1.0, 0.5])


def test_every_kernel_ncu_profiled_on_the_h100():
    """All four limits equal ncu's launch__occupancy_limit_* given its carveout, and
    resident blocks per SM equal ncu's even with the default (largest) carveout."""
    k = pd.read_csv(REPO / "data" / "h100" / "kernels.csv.gz")
    smem = k["shared_mem_static_bytes"] + k["shared_mem_dynamic_bytes"]
    measured = k[["occupancy_limit_blocks", "occupancy_limit_warps", "occupancy_limit_registers",
                  "occupancy_limit_shared_mem"]].to_numpy()
    given = occupancy_limits_array(H100, k["block_threads"], k["registers"], smem, k["shared_mem_config_bytes"])
    ours = np.column_stack([given[n] for n in ("blocks", "warps", "registers", "shared_mem")])
    assert len(k) > 3000 and (ours == measured).all()
    default = occupancy_limits_array(H100, k["block_threads"], k["registers"], smem)
    blocks = np.minimum.reduce([default[n] for n in LIMIT_NAMES])
    assert (blocks == measured.min(axis=1)).all()

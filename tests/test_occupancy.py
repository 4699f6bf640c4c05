"""Occupancy limits: hand-checked cases, and every kernel ncu measured on the H100."""

import numpy as np
import pandas as pd
import pytest

from conftest import REPO
from seer.dataset.tables import read_parts
from seer.hardware.gpus import get_gpu_spec
from seer.hardware.occupancy import (b_max, blocks_per_sm, occupancy_limits, occupancy_limits_array,
                                     theoretical_occupancy, waves, whole_waves)

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
    assert b_max(2, 132) == 264 and isinstance(b_max(2, 132), int) and isinstance(whole_waves(265, 2, 132), int)


def test_waves_of_a_table_skip_runs_that_were_not_profiled():
    """Table columns are floats, NaN where a run was not profiled: NaN in, NaN out."""
    grid = pd.Series([264.0, 265.0, np.nan, 7.0])
    per_sm = pd.Series([2.0, 2.0, np.nan, np.nan])
    assert np.array_equal(b_max(per_sm, 132), [264.0, 264.0, np.nan, np.nan], equal_nan=True)
    assert np.array_equal(waves(grid, per_sm, 132), [1.0, 265 / 264, np.nan, np.nan], equal_nan=True)
    whole = whole_waves(grid, per_sm, 132)
    assert whole.dtype == float and np.array_equal(whole, [1.0, 2.0, np.nan, np.nan], equal_nan=True)
    # pandas' nullable integers too.
    assert np.array_equal(whole_waves(grid.astype("Int64"), per_sm.astype("Int64"), 132), whole, equal_nan=True)


@pytest.mark.parametrize("grid, per_sm, sms, name", [
    (10, 0, 132, "blocks_per_sm"), (10, [2.0, 0.0], 132, "blocks_per_sm"), (-1, 2, 132, "grid_blocks"),
    ([10.5], 2, 132, "grid_blocks"), (10, 1.5, 132, "blocks_per_sm"), (10, np.inf, 132, "blocks_per_sm"),
    (10, 2, 0, "sm_count")])
def test_impossible_waves_name_the_argument(grid, per_sm, sms, name):
    with pytest.raises(ValueError, match=name):
        waves(grid, per_sm, sms)
    with pytest.raises(ValueError, match=name):
        whole_waves(grid, per_sm, sms)


def test_blocks_per_sm_is_the_least_limit_and_skips_missing_ones():
    limits = occupancy_limits(H100, 256, 128, 48 * 1024)
    assert blocks_per_sm(limits.as_dict()) == limits.blocks_per_sm == 2
    # By seer's column names, beside a "registers" column that holds registers per thread.
    frame = pd.DataFrame({"occupancy_limit_blocks": [32.0, np.nan, 32.0], "occupancy_limit_warps": [8.0, np.nan, 4.0],
                          "occupancy_limit_registers": [2.0, np.nan, np.nan],
                          "occupancy_limit_shared_mem": [3.0, np.nan, 16.0], "registers": [1.0, 1.0, 1.0]})
    assert np.array_equal(blocks_per_sm(frame), [2.0, np.nan, 4.0], equal_nan=True)
    arrays = occupancy_limits_array(H100, [256, 1024], [128, 32], [48 * 1024, 0])
    assert list(blocks_per_sm(arrays)) == [2, 2] and blocks_per_sm(arrays).dtype == np.int64
    with pytest.raises(KeyError, match="occupancy_limit_blocks"):
        blocks_per_sm(frame.drop(columns="occupancy_limit_warps"))


def test_every_kernel_ncu_profiled_on_the_h100():
    """All four limits equal ncu's launch__occupancy_limit_* given its carveout, and
    resident blocks per SM equal ncu's even with the default (largest) carveout."""
    k = read_parts(REPO / "data" / "h100" / "kernels")
    smem = k["shared_mem_static_bytes"] + k["shared_mem_dynamic_bytes"]
    measured = k[["occupancy_limit_blocks", "occupancy_limit_warps", "occupancy_limit_registers",
                  "occupancy_limit_shared_mem"]].to_numpy()
    given = occupancy_limits_array(H100, k["block_threads"], k["registers"], smem, k["shared_mem_config_bytes"])
    ours = np.column_stack([given[n] for n in ("blocks", "warps", "registers", "shared_mem")])
    assert len(k) > 3000 and (ours == measured).all()
    default = occupancy_limits_array(H100, k["block_threads"], k["registers"], smem)
    assert (blocks_per_sm(default) == blocks_per_sm(k)).all()
    assert (blocks_per_sm(k) == measured.min(axis=1)).all()

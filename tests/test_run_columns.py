"""The run columns of the measurements table (seer.metrics.RUN_COLUMNS): declared once, and
every one of them produced."""

import numpy as np
import pandas as pd
import pytest

from seer.dataset.build import rollup_kernels
from seer.hardware.gpus import get_gpu_spec
from seer.metrics import GROUP_COLUMNS, METRIC_BY_COLUMN, METRIC_SETS, METRICS, RUN_COLUMNS
from seer.schema import MEASUREMENT_COLUMNS


def test_each_run_column_names_its_metrics_or_its_source():
    names = [c.column for c in RUN_COLUMNS]
    assert len(set(names)) == len(names)
    # One block of the measurements table, in the declared order.
    start = MEASUREMENT_COLUMNS.index(names[0])
    assert MEASUREMENT_COLUMNS[start:start + len(names)] == tuple(names)
    for c in RUN_COLUMNS:
        assert c.unit and c.description, c.column
        assert all(m in METRIC_BY_COLUMN for m in c.metrics), c.column
        assert bool(c.metrics) != bool(c.source), c.column  # converted from metrics, or computed from a source
        assert not (c.from_layer and c.metrics), c.column
        if c.per == 100:
            assert c.unit == "fraction" and all(METRIC_BY_COLUMN[m].unit == "%" for m in c.metrics), c.column


def _kernels() -> pd.DataFrame:
    """Two runs of two kernels each, every metric recorded: values 1, 2, ... per column."""
    kernels = pd.DataFrame({"shape_id": ["a", "a", "b", "b"], "math": ["fma", "fma", "default", "default"],
                            "algo": ["GEMM"] * 4, "kernel_idx": [0, 1, 0, 1],
                            "kernel_name": ["k_transform", "k_gemm", "k_gemm", "k_transform"],
                            "kernel_role": ["transform", "compute", "compute", "transform"],
                            "kernel_variant": ["t", "g", "g", "t"]})
    for i, m in enumerate(METRICS):
        kernels[m.column] = np.arange(1.0, 5.0) + 10 * i
    return kernels


def test_rollup_gives_every_run_column_but_those_of_the_layer():
    runs = rollup_kernels(_kernels(), get_gpu_spec("h100"))
    expected = [c.column for c in RUN_COLUMNS if not c.from_layer]
    assert not set(expected) - set(runs.columns)
    assert runs[expected].notna().all().all()
    # The declared conversions, on the main (compute) kernel or summed as each metric rolls up.
    main = runs.set_index("shape_id")
    assert main.loc["a", "ncu_time_ms"] == main.loc["a", "duration_ns"] / 1e6
    assert main.loc["a", "shared_mem_bytes"] == main.loc["a", "shared_mem_static_bytes"] + main.loc[
        "a", "shared_mem_dynamic_bytes"]
    assert main.loc["b", "achieved_occupancy"] == pytest.approx(main.loc["b", "achieved_occupancy_pct"] / 100)
    assert main.loc["b", "sm_throughput_util"] == pytest.approx(main.loc["b", "sm_util_pct"] / 100)
    # ncu's waves, main kernel's: the second kernel of run a, the first of run b.
    waves = _kernels()["waves"]
    assert list(main["ncu_waves"]) == [waves[1], waves[2]]


def test_the_committed_table_has_every_run_column_of_the_core_metrics(table):
    """Every run column whose metrics the core set collects (the full set's were not) is filled
    for the profiled runs, those computed from the layer's shape in measurements_table among them."""
    core = set().union(*(GROUP_COLUMNS[g] for g in METRIC_SETS["core"]))
    profiled = table[(table["profile_status"] == "ok") & (table["status"] == "ok")]
    assert len(profiled)
    for c in RUN_COLUMNS:
        if set(c.metrics) <= core and all(METRIC_BY_COLUMN[m].required for m in c.metrics):
            assert profiled[c.column].notna().all(), c.column

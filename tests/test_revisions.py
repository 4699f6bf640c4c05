"""Revisions of seer's own kernels: runs are stamped with the revision of the code that ran
them, and runs of an earlier revision (other code) are timed again, profiled again and left
out of the tables; and the roofline's FLOPs from every floating-point instruction count."""

import json

import numpy as np
import pandas as pd
import pytest

from seer.algorithms import REVISION_FIELD, current_revision, get_algorithm
from seer.collect.orchestrate import Collector
from seer.collect.store import RunStore, profile_records
from seer.dataset.build import latest_timing_records
from seer.metrics import thread_flops
from seer.schema import RUN_KEY
from test_orchestrate import _options

REVISION = get_algorithm("SEER_IMPLICIT_GEMM").revision


def _write_legacy(store_dir, kind, records):
    """Records as an earlier revision's collection wrote them: no revision field."""
    raw = store_dir / "raw"
    with open(raw / f"{kind}-legacy.jsonl", "a") as handle:
        for record in records:
            handle.write(json.dumps(record) + "\n")


def test_the_revision_in_force_is_today_s_and_old_records_were_revision_1():
    frame = pd.DataFrame({"algo": ["GEMM", "SEER_DIRECT", "SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM", "census"],
                          REVISION_FIELD: [np.nan, np.nan, np.nan, REVISION, np.nan]})
    assert REVISION > 1 and get_algorithm("SEER_DIRECT").revision == 1
    assert current_revision(frame).tolist() == [True, True, False, True, True]
    assert current_revision(frame.drop(columns=REVISION_FIELD)).tolist() == [True, True, False, False, True]


@pytest.mark.slow
def test_runs_of_an_earlier_revision_are_timed_again_and_left_out_of_the_table(tmp_path, fake_worker):
    options = _options(tmp_path, maths=["fma"], algos=["GEMM", "SEER_IMPLICIT_GEMM"])
    Collector(options).run()
    store = RunStore(tmp_path / "h100")
    rows = store.read("timing", RUN_KEY)
    own = rows["algo"] == "SEER_IMPLICIT_GEMM"
    assert set(rows.loc[own, REVISION_FIELD]) == {REVISION} and rows.loc[~own, REVISION_FIELD].isna().all()
    # A later record of one run (stored after it, at the same second), as the earlier
    # revision of the kernel measured it.
    stale = rows[own].iloc[0].drop(REVISION_FIELD).to_dict() | {"time_ms": 99.0}
    _write_legacy(tmp_path / "h100", "timing", [stale])
    key = tuple(stale[k] for k in RUN_KEY)
    table = latest_timing_records(RunStore(tmp_path / "h100"))
    assert key not in set(table[list(RUN_KEY)].itertuples(index=False, name=None))
    assert len(table) == len(rows) - 1
    # Timed again, that run only; then the table has it, measured by today's code.
    assert Collector(options).run()["counts"]["timing_rows"] == 1
    table = latest_timing_records(RunStore(tmp_path / "h100")).set_index(list(RUN_KEY))
    assert len(table) == len(rows) and table.loc[key, "time_ms"] != 99.0


def test_profiles_of_an_earlier_revision_do_not_count(tmp_path):
    store = RunStore(tmp_path / "h100")
    fields = {"shape_id": "0123456789ab", "math": "fma", "group": "counters", "profile_status": "ok"}
    store.append("profiles", [fields | {"algo": "GEMM"}, fields | {"algo": "SEER_IMPLICIT_GEMM"}])
    _write_legacy(tmp_path / "h100", "profiles", [fields | {"algo": "SEER_IMPLICIT_GEMM_SPLITK"}])
    assert sorted(profile_records(store)["algo"]) == ["GEMM", "SEER_IMPLICIT_GEMM"]


def test_thread_flops_count_fp32_fp16_and_fp64_and_what_older_profiles_lack_adds_nothing():
    counts = pd.DataFrame({"inst_ffma": [10.0, 10.0], "inst_fadd": [1.0, 1.0], "inst_fmul": [2.0, 2.0],
                           "inst_hfma": [0.0, 0.0], "inst_hadd": [np.nan, 3.0], "inst_hmul": [np.nan, 4.0],
                           "inst_dfma": [np.nan, 5.0], "inst_dadd": [np.nan, 6.0], "inst_dmul": [np.nan, 7.0]})
    assert thread_flops(counts).tolist() == [23.0, 23.0 + 3 + 4 + 10 + 6 + 7]
    # A required counter missing is not papered over.
    assert np.isnan(thread_flops(counts.assign(inst_ffma=np.nan)).iloc[0])


def test_a_run_timed_again_without_its_energy_keeps_the_earlier_reading(tmp_path):
    store = RunStore(tmp_path / "h200")
    run = {"shape_id": "0123456789ab", "math": "fma", "grid": "g", "status": "ok"}
    reading = {"power_w": 300.0, "energy_mj": 1.5, "energy_window_s": 1.0, "energy_counter_steps": 10}
    store.append("timing", [
        run | {"algo": "GEMM", "time_ms": 5.0, "collected_at": "2026-11-27T10:00:00+00:00"} | reading,
        run | {"algo": "GEMM", "time_ms": 4.9, "collected_at": "2026-11-27T11:00:00+00:00"},  # traced, no energy
        run | {"algo": "IMPLICIT_GEMM", "time_ms": 2.0, "collected_at": "2026-11-27T10:00:00+00:00"} | reading,
        run | {"algo": "IMPLICIT_GEMM", "status": "error", "time_ms": None,
               "collected_at": "2026-11-27T11:00:00+00:00"},  # failed since: nothing to read
        run | {"algo": "FFT", "time_ms": 3.0, "collected_at": "2026-11-27T10:00:00+00:00"},  # never read
    ])
    table = latest_timing_records(store).set_index("algo")
    assert table.loc["GEMM", "time_ms"] == 4.9  # the latest timing
    assert table.loc["GEMM", ["power_w", "energy_mj", "energy_counter_steps"]].tolist() == [300.0, 1.5, 10]
    assert np.isnan(table.loc["IMPLICIT_GEMM", "energy_mj"]) and np.isnan(table.loc["FFT", "energy_mj"])


def test_a_run_timed_again_without_cupti_keeps_the_earlier_trace(tmp_path):
    from seer.dataset.build import traced_kernels_table

    store = RunStore(tmp_path / "h200")
    run = {"shape_id": "0123456789ab", "math": "fma", "grid": "g", "status": "ok", "algo": "GEMM"}
    kernels = [["gemm_kernel", 1, 5000, 128, 256, 64, 0]]  # name, launches, ns, blocks, threads, registers, shared
    store.append("timing", [
        run | {"time_ms": 5.0, "trace_status": "ok", "traced_kernels": kernels, "collected_at": "2026-11-27T10:00:00+00:00"},
        run | {"time_ms": 4.9, "trace_status": "unavailable", "trace_detail": "cupti-python is not installed",
               "collected_at": "2026-11-27T11:00:00+00:00"},
    ])
    table = latest_timing_records(store)
    assert table["time_ms"].tolist() == [4.9] and table["trace_status"].tolist() == ["ok"]
    assert table["traced_kernels"].iloc[0] == kernels
    assert traced_kernels_table(table)["kernel_name"].tolist() == ["gemm_kernel"]

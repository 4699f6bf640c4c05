"""The orchestrator's bookkeeping, with a protocol-compatible stand-in for the GPU worker.

Real GPU collection is tested in test_gpu_collect.py (marked gpu); here the child process
is tests/fake_worker.py so that crash recovery, hangs, resume and time limits can be forced.
"""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import _thread
from pathlib import Path

import pandas as pd
import pytest

from seer.algorithms import PASSES, algorithm_names, get_algorithm, select_algorithms
from seer.collect import children, orchestrate, scratch
from seer.collect.orchestrate import (CollectOptions, Collector, check_device, no_energy_keys, trace_mismatch_keys,
                                      unstable_keys, untraced_keys)
from seer.collect.store import MAX_JOB_NAME, TORN_SUFFIX, RunStore, default_tag, job_name, profile_records, read_jsonl
from seer.dataset.build import census_table, kernels_table, profile_status_table, read_census
from seer.dataset.tables import read_parts, write_parts
from seer.errors import EnvironmentProblem
from seer.hardware.gpus import get_gpu_spec
from seer.layers.grids import GridShape
from seer.layers.shapes import ConvShape
from seer.metrics import GROUP_COLUMNS
from seer.schema import CENSUS_COLUMNS, CENSUS_KEY, GROUP_KEY, RUN_KEY
from conftest import FAKE, H100_PROBE

ALGOS = ["IMPLICIT_GEMM", "GEMM", "FFT"]


def _shapes(n=3):
    return [GridShape(ConvShape.square(1, 8 * (i + 1), 16, 8, 3, 1, 1), "quick") for i in range(n)]


def _time_limit_when_stored(monkeypatch, collector, condition):
    """Make the collector's time limit pass once it stores a record meeting ``condition``:
    the limit then falls at a known point of the work rather than a moment of the clock."""
    append = collector.store.append

    def append_then_check(kind, records):
        records = list(records)
        written = append(kind, records)
        if any(condition(kind, r) for r in records):
            collector.deadline.at = time.monotonic() - 1
        return written

    monkeypatch.setattr(collector.store, "append", append_then_check)


def _options(tmp_path, **kw):
    base = dict(gpu=get_gpu_spec("h100"), shapes=_shapes(), maths=["fma", "default"], algos=ALGOS,
                dataset_dir=tmp_path / "h100", profile_shapes=0, item_timeout_s=5.0)
    base.update(kw)
    return CollectOptions(**base)


def test_collects_every_item_and_resumes_without_repeating(tmp_path, fake_worker):
    session = Collector(_options(tmp_path)).run()
    assert session["counts"]["timing_rows"] == 3 * 2 * 3
    frame = RunStore(tmp_path / "h100").read("timing", RUN_KEY)
    assert len(frame) == 18 and set(frame["status"]) == {"ok"}
    assert set(frame["gpu"]) == {"h100"} and set(frame["cudnn_version"]) == {"9.19.0"}
    again = Collector(_options(tmp_path)).run()
    assert again["counts"]["timing_rows"] == 0
    assert len(RunStore(tmp_path / "h100").sessions()) == 2


@pytest.mark.slow
def test_a_crashing_item_is_recorded_and_the_rest_continues(tmp_path, fake_worker, monkeypatch):
    victim = _shapes()[1].shape.shape_id
    monkeypatch.setenv("FAKE_CRASH", f"{victim}:fma:GEMM")
    session = Collector(_options(tmp_path)).run()
    frame = RunStore(tmp_path / "h100").read("timing", RUN_KEY).set_index(list(RUN_KEY))
    assert len(frame) == 18
    crashed = frame.loc[(victim, "fma", "GEMM")]
    assert crashed["status"] == "error" and "SIGSEGV" in crashed["status_detail"]
    assert (frame.drop(index=(victim, "fma", "GEMM"))["status"] == "ok").all()
    assert session["counts"]["worker_restarts"] == 1


@pytest.mark.slow
def test_a_hanging_item_times_out(tmp_path, fake_worker, monkeypatch):
    victim = _shapes()[0].shape.shape_id
    monkeypatch.setenv("FAKE_HANG", f"{victim}:default:FFT")
    session = Collector(_options(tmp_path, item_timeout_s=1.0)).run()
    frame = RunStore(tmp_path / "h100").read("timing", RUN_KEY).set_index(list(RUN_KEY))
    assert len(frame) == 18 and session["counts"]["worker_restarts"] == 1
    hung = frame.loc[(victim, "default", "FFT")]
    assert hung["status"] == "error" and "timeout" in hung["status_detail"]
    assert (frame.drop(index=(victim, "default", "FFT"))["status"] == "ok").all()


@pytest.mark.slow
def test_retry_measures_failed_items_again(tmp_path, fake_worker, monkeypatch):
    victim = _shapes()[2].shape.shape_id
    monkeypatch.setenv("FAKE_CRASH", f"{victim}:fma:FFT")
    Collector(_options(tmp_path)).run()
    monkeypatch.delenv("FAKE_CRASH")
    session = Collector(_options(tmp_path, retry=("error",))).run()
    assert session["counts"]["timing_rows"] == 1
    frame = RunStore(tmp_path / "h100").read("timing", RUN_KEY)
    assert set(frame["status"]) == {"ok"}


@pytest.mark.slow
def test_retry_unstable_times_widely_spread_runs_again(tmp_path, fake_worker, monkeypatch):
    victim = _shapes()[1].shape.shape_id
    monkeypatch.setenv("FAKE_WIDE", f"{victim}:default:GEMM")
    Collector(_options(tmp_path)).run()
    store = RunStore(tmp_path / "h100")
    assert unstable_keys(store.read("timing", RUN_KEY)) == {(victim, "default", "GEMM")}
    monkeypatch.delenv("FAKE_WIDE")
    assert Collector(_options(tmp_path, retry=("error",))).run()["counts"]["timing_rows"] == 0
    session = Collector(_options(tmp_path, retry=("unstable",))).run()
    assert session["counts"]["timing_rows"] == 1
    assert unstable_keys(store.read("timing", RUN_KEY)) == set()


@pytest.mark.slow
def test_retry_trace_mismatch_times_one_kernel_runs_the_trace_contradicts_again(tmp_path, fake_worker, monkeypatch):
    # The fake trace holds 1 microsecond of kernel time against about 1.4 ms timed: GEMM's
    # one-kernel traces contradict its timing; FFT's three launches are not judged.
    monkeypatch.setenv("FAKE_TRACED", "GEMM=1,FFT=3")
    Collector(_options(tmp_path)).run()
    store = RunStore(tmp_path / "h100")
    mismatched = trace_mismatch_keys(store.read("timing", RUN_KEY))
    assert len(mismatched) == 6 and {k[2] for k in mismatched} == {"GEMM"}  # 3 shapes x 2 math modes
    assert trace_mismatch_keys(store.read("timing", RUN_KEY), max_ratio=2000.0) == set()
    session = Collector(_options(tmp_path, retry=("trace_mismatch",))).run()
    assert session["counts"]["timing_rows"] == 6


@pytest.mark.slow
def test_retry_untraced_times_runs_without_a_trace_again(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_TRACED", "GEMM=3")
    Collector(_options(tmp_path)).run()
    store = RunStore(tmp_path / "h100")
    untraced = untraced_keys(store.read("timing", RUN_KEY))
    assert len(untraced) == 12 and {k[2] for k in untraced} == set(ALGOS) - {"GEMM"}
    monkeypatch.setenv("FAKE_TRACED", ",".join(f"{a}=1" for a in ALGOS))
    session = Collector(_options(tmp_path, retry=("untraced",))).run()
    assert session["counts"]["timing_rows"] == 12
    assert untraced_keys(store.read("timing", RUN_KEY)) == set()


@pytest.mark.slow
def test_time_limit_stops_cleanly_and_a_rerun_finishes(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_ITEM_SECONDS", "0.1")
    collector = Collector(_options(tmp_path))
    _time_limit_when_stored(monkeypatch, collector, lambda kind, record: kind == "timing")
    first = collector.run()
    assert first["stopped_at_time_limit"] and not first["interrupted"]
    assert first["counts"]["worker_restarts"] == 0  # asked to stop, not killed
    store = RunStore(tmp_path / "h100")
    per_shape = store.read("timing").groupby("shape_id").size()
    # The worker finished the shape it was on, then stopped: whole shapes, not all of them.
    assert set(per_shape) == {6} and 0 < len(per_shape) < 3
    assert first["counts"]["timing_rows"] == per_shape.sum()
    monkeypatch.setenv("FAKE_ITEM_SECONDS", "0")
    second = Collector(_options(tmp_path)).run()
    assert not second["stopped_at_time_limit"]
    assert second["counts"]["timing_rows"] == 18 - per_shape.sum()
    records = store.read("timing")
    assert len(records) == 18 and not records.duplicated(list(RUN_KEY)).any()  # none measured twice


def test_a_worker_that_cannot_start_is_one_clear_error(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL_AT_START", "1")
    with pytest.raises(EnvironmentProblem, match="before timing anything"):
        Collector(_options(tmp_path)).run()


def test_tensors_too_large_for_the_gpu_are_skipped_with_a_reason(tmp_path, fake_worker):
    huge = GridShape(ConvShape.square(4096, 1024, 224, 1024, 3, 1, 1), "seer")
    Collector(_options(tmp_path, shapes=[huge, *_shapes(1)])).run()
    frame = RunStore(tmp_path / "h100").read("timing", RUN_KEY)
    skipped = frame[frame["shape_id"] == huge.shape.shape_id]
    assert len(skipped) == 6 and set(skipped["status"]) == {"too_large"}
    assert skipped["status_detail"].str.contains("bytes").all()


def test_wrong_gpu_is_refused_in_one_sentence():
    with pytest.raises(EnvironmentProblem) as info:
        check_device(get_gpu_spec("v100"), H100_PROBE)
    message = str(info.value)
    assert "v100" in message and "H100" in message and "--gpu h100" in message
    check_device(get_gpu_spec("h100"), H100_PROBE)  # the right one passes


# -- profiling, with a stand-in ncu that replays rows of a real H100 capture ------------------
CAPTURE = Path(__file__).with_name("data") / "ncu-raw-quick-h100.csv.gz"
CAPTURED_SHAPES = ("0051ed247c1d", "1481ad061071")


@pytest.fixture
def fake_ncu(fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_CAPTURE", str(CAPTURE))
    return str(Path(__file__).with_name("fake_ncu.py"))


def _captured_shapes():
    from seer.layers.grids import quick_grid

    by_id = {s.shape_id: s for s in quick_grid()}
    return [GridShape(by_id[sid], "quick") for sid in CAPTURED_SHAPES]


def _profile_options(tmp_path, ncu, **kw):
    return _options(tmp_path, shapes=_captured_shapes(), profile_shapes=None, ncu=ncu,
                    algos=["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "FFT", "FFT_TILING"], **kw)


@pytest.mark.slow
def test_profiling_merges_every_metric_group_per_kernel(tmp_path, fake_ncu):
    session = Collector(_profile_options(tmp_path, fake_ncu)).run()
    store = RunStore(tmp_path / "h100")
    statuses = profile_status_table(store)
    assert len(statuses) == 2 * 2 * 5 and set(statuses["profile_status"]) == {"ok"}
    kernels = kernels_table(store)
    assert len(kernels) == 2 * (13 + 8 + 3 + 4 + 5 + 3)
    assert session["counts"]["profiled_runs"] == 20
    # Every group's columns arrived, from its own ncu run (the tensor group: default math only).
    for column in ("grid_blocks", "inst_ffma", "dram_read_bytes", "l1_bytes", "duration_ns",
                   "achieved_occupancy_pct"):
        assert kernels[column].notna().all(), column
    assert kernels.loc[kernels["math"] == "default", "tensor_ops_tf32"].notna().all()
    assert kernels.loc[kernels["math"] == "fma", "tensor_ops_tf32"].isna().all()
    assert set(session["ncu_groups"]) == {"launch_sass", "counters", "tensor"}
    # Resuming profiles nothing twice.
    assert Collector(_profile_options(tmp_path, fake_ncu)).run()["counts"]["kernels"] == 0


@pytest.mark.slow
def test_groups_that_saw_different_kernels_are_refused(tmp_path, fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_NCU_DROP", "dram__bytes_read.sum")
    Collector(_profile_options(tmp_path, fake_ncu)).run()
    statuses = profile_status_table(RunStore(tmp_path / "h100"))
    bad = statuses[statuses["profile_status"] == "inconsistent"]
    assert len(bad) == 1 and bad.iloc[0]["algo"] == "FFT_TILING"
    kernels = kernels_table(RunStore(tmp_path / "h100"))
    assert not kernels.merge(bad[list(RUN_KEY)], on=list(RUN_KEY)).shape[0]


@pytest.mark.slow
def test_a_time_limit_keeps_finished_groups_and_resumes_the_rest(tmp_path, fake_ncu, monkeypatch):
    first_shape, second_shape = CAPTURED_SHAPES  # profiled in this order, one shape per chunk
    collector = Collector(_profile_options(tmp_path, fake_ncu, profile_chunk_items=10))
    # The limit passes once the second shape's first metric group is stored.
    _time_limit_when_stored(monkeypatch, collector,
                            lambda kind, record: kind == "profiles" and record["shape_id"] == second_shape)
    first = collector.run()
    assert first["stopped_at_time_limit"] and first["counts"]["profiled_runs"] == 10
    store = RunStore(tmp_path / "h100")
    statuses = profile_status_table(store).set_index("shape_id")["profile_status"]
    assert set(statuses.loc[first_shape]) == {"ok"} and len(statuses.loc[first_shape]) == 10
    assert set(statuses.loc[second_shape]) == {"partial"} and len(statuses.loc[second_shape]) == 10
    assert set(profile_records(store).query("shape_id == @second_shape")["group"]) == {"launch_sass"}
    # The rerun profiles exactly what the stop left: the second shape's other groups.
    second = Collector(_profile_options(tmp_path, fake_ncu)).run()
    assert set(second["ncu_groups"]) == {"counters", "tensor"}
    assert second["counts"]["profiled_runs"] == 10
    records = store.read("profiles")
    assert len(records) == 2 * (10 + 10 + 5) and not records.duplicated(list(GROUP_KEY)).any()
    statuses = profile_status_table(store)
    assert len(statuses) == 20 and set(statuses["profile_status"]) == {"ok"}
    assert len(kernels_table(store)) == 2 * (13 + 8 + 3 + 4 + 5 + 3)


def test_rows_timed_under_an_older_protocol_are_measured_again(tmp_path, fake_worker):
    Collector(_options(tmp_path)).run()
    store = RunStore(tmp_path / "h100", tag="legacy")
    old = store.read("timing", RUN_KEY).iloc[0].to_dict()
    old.pop("timing_protocol")  # as written before protocols were recorded
    old["collected_at"] = "2099-01-01T00:00:00+00:00"
    store.append("timing", [old])
    store.close()
    again = Collector(_options(tmp_path)).run()
    assert again["counts"]["timing_rows"] == 1
    # Measured again: the old row's key only (its first record, the old one, the new one).
    times = RunStore(tmp_path / "h100").read("timing").groupby(list(RUN_KEY)).size()
    legacy = tuple(old[k] for k in RUN_KEY)
    assert times[legacy] == 3 and set(times.drop(index=[legacy])) == {1}


@pytest.mark.slow
def test_runs_with_too_many_kernels_get_only_the_first_group(tmp_path, fake_ncu):
    session = Collector(_profile_options(tmp_path, fake_ncu, max_profile_kernels=6)).run()
    store = RunStore(tmp_path / "h100")
    first = profile_records(store).query("group == 'launch_sass'").set_index(list(RUN_KEY))["n_kernels"]
    statuses = profile_status_table(store).set_index(list(RUN_KEY))["profile_status"]
    long_runs = first[first > 6].index
    assert 0 < len(long_runs) < len(statuses)
    assert set(statuses.loc[long_runs]) == {"too_many_kernels"}
    assert set(statuses.drop(long_runs)) == {"ok"}
    # Only the first group profiled them.
    groups = session["ncu_groups"]
    assert groups["launch_sass"]["kernels"] - groups["counters"]["kernels"] == first[first > 6].sum()
    assert session["max_profile_kernels"] == 6
    # A rerun has nothing left to do.
    again = Collector(_profile_options(tmp_path, fake_ncu, max_profile_kernels=6)).run()
    assert again["counts"]["kernels"] == 0


@pytest.mark.slow
def test_traced_runs_with_too_many_kernels_are_not_profiled(tmp_path, fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_TRACED", "FFT_TILING=40,GEMM=2")
    session = Collector(_profile_options(tmp_path, fake_ncu, max_profile_kernels=6)).run()
    store = RunStore(tmp_path / "h100")
    statuses = profile_status_table(store).set_index(list(RUN_KEY))
    fft_tiling = statuses.index.get_level_values("algo") == "FFT_TILING"
    assert set(statuses.loc[fft_tiling, "profile_status"]) == {"too_many_kernels"}
    assert statuses.loc[fft_tiling, "profile_detail"].str.contains("40 kernels per call by its CUPTI trace").all()
    # No metric group ran them; the traced GEMM runs (under the cap) were profiled as usual.
    assert "FFT_TILING" not in set(kernels_table(store)["algo"])
    assert set(statuses.loc[statuses.index.get_level_values("algo") == "GEMM", "profile_status"]) == {"ok"}
    assert session["counts"]["profile_errors"] == 0


@pytest.mark.slow
def test_retrying_too_many_kernels_does_not_profile_what_it_just_skipped(tmp_path, fake_ncu, monkeypatch):
    monkeypatch.setenv("FAKE_TRACED", "FFT_TILING=40,GEMM=2")
    Collector(_profile_options(tmp_path, fake_ncu, max_profile_kernels=6)).run()
    store = RunStore(tmp_path / "h100")

    def skipped() -> int:
        return int((store.read("profiles")["profile_status"] == "too_many_kernels").sum())

    first = skipped()
    assert first > 0
    # A retry looks at every such run again and records the same reason, but profiles
    # none of them: its fresh too_many_kernels records count as done within the session.
    again = Collector(_profile_options(tmp_path, fake_ncu, max_profile_kernels=6,
                                       retry=("too_many_kernels",))).run()
    assert again["counts"]["kernels"] == 0 and not again["ncu_groups"]
    assert skipped() == 2 * first
    assert "FFT_TILING" not in set(kernels_table(store)["algo"])


def _split_into_retired_groups(source: RunStore, target: RunStore) -> None:
    """Rewrite a store's ``counters`` records as the three groups that collected them before."""
    from seer.metrics import RETIRED_GROUPS

    for kind in ("profiles", "kernels"):
        out = []
        for record in source.records(kind):
            if record["group"] != "counters":
                out.append(record)
                continue
            counters = GROUP_COLUMNS["counters"]
            for group, columns in RETIRED_GROUPS.items():
                out.append({k: v for k, v in record.items() if k not in counters or k in columns}
                           | {"group": group})
        target.append(kind, out)
    target.close()


@pytest.mark.slow
def test_records_of_retired_groups_still_count(tmp_path, fake_ncu):
    Collector(_profile_options(tmp_path / "new", fake_ncu)).run()
    new = RunStore(tmp_path / "new" / "h100")
    old = RunStore(tmp_path / "old" / "h100", tag="before-counters")
    old.append("timing", new.records("timing"))
    _split_into_retired_groups(new, old)
    assert "counters" not in set(profile_records(old)["group"])
    # Same statuses and the same merged kernels as the one-group collection.
    assert set(profile_status_table(old)["profile_status"]) == {"ok"}
    pd.testing.assert_frame_equal(kernels_table(old).drop(columns="collected_at"),
                                  kernels_table(new).drop(columns="collected_at"))
    # Nothing is profiled again.
    assert Collector(_profile_options(tmp_path / "old", fake_ncu)).run()["counts"]["kernels"] == 0


@pytest.mark.slow
def test_a_run_missing_a_retired_group_is_profiled_again_with_the_new_group(tmp_path, fake_ncu):
    Collector(_profile_options(tmp_path / "new", fake_ncu)).run()
    new = RunStore(tmp_path / "new" / "h100")
    split = RunStore(tmp_path / "split" / "h100", tag="split")
    _split_into_retired_groups(new, split)
    victim = ("0051ed247c1d", "fma", "GEMM")
    old = RunStore(tmp_path / "old" / "h100", tag="before-counters")
    old.append("timing", new.records("timing"))
    for kind in ("profiles", "kernels"):
        old.append(kind, [r for r in split.records(kind)
                          if not (tuple(r[k] for k in RUN_KEY) == victim and r["group"] == "cache")])
    old.close()
    statuses = profile_status_table(old).set_index(list(RUN_KEY))
    assert statuses.loc[victim, "profile_status"] == "partial"
    assert statuses.loc[victim, "profile_detail"] == "group counters not profiled yet"
    session = Collector(_profile_options(tmp_path / "old", fake_ncu)).run()
    victim_kernels = (kernels_table(new)[list(RUN_KEY)].apply(tuple, axis=1) == victim).sum()
    assert session["ncu_groups"]["counters"]["kernels"] == victim_kernels  # that run only
    assert set(session["ncu_groups"]) == {"counters"}
    assert set(profile_status_table(old)["profile_status"]) == {"ok"}
    kernels = kernels_table(old)
    assert kernels.loc[kernels[list(RUN_KEY)].apply(tuple, axis=1) == victim, "l1_bytes"].notna().all()


def _census_options(tmp_path, **kw):
    shapes = [GridShape(ConvShape.square(1, 8 + i, 16, 8, 3, 1 + i % 2, 1), "census") for i in range(5)]
    return _options(tmp_path, shapes=shapes, census=True, **kw)


def test_census_asks_every_shape_once_and_resumes(tmp_path, fake_worker):
    session = Collector(_census_options(tmp_path)).run()
    assert session["census"] and session["counts"]["census_records"] == 5 * 2
    assert session["counts"]["timing_rows"] == 0
    store = RunStore(tmp_path / "h100")
    assert store.read("timing").empty
    assert Collector(_census_options(tmp_path)).run()["counts"]["census_records"] == 0
    table = census_table(store)
    assert len(table) == 5 * 2 * len(algorithm_names("cudnn"))
    by_key = table.set_index(["shape_id", "math", "algo"])
    for gs in _census_options(tmp_path).shapes:
        shape = gs.shape
        gemm = by_key.loc[(shape.shape_id, "fma", "GEMM")]
        assert gemm["status"] == "ok" and gemm["workspace_bytes"] == (4096 if shape.in_ch % 2 == 0 else 0)
        fft = by_key.loc[(shape.shape_id, "default", "FFT")]
        assert fft["status"] == ("not_supported" if shape.stride_w > 1 else "ok")
        # Algorithms the answer does not name were not accepted.
        assert by_key.loc[(shape.shape_id, "fma", "WINOGRAD"), "status"] == "not_supported"
        assert by_key.loc[(shape.shape_id, "fma", "IMPLICIT_GEMM"), "heuristic_rank"] == 2


@pytest.mark.slow
def test_the_tidy_census_leaves_out_timed_shapes_and_no_stale_file(tmp_path, fake_worker):
    from seer.dataset.build import build_dataset

    Collector(_census_options(tmp_path)).run()
    files = build_dataset(tmp_path / "h100", get_gpu_spec("h100"))
    assert len(read_parts(files.census)) == 5 * 2 * len(algorithm_names("cudnn"))
    # Once every census shape has been timed too, the census has nothing of its own left.
    Collector(_options(tmp_path, shapes=_census_options(tmp_path).shapes)).run()
    files = build_dataset(tmp_path / "h100", get_gpu_spec("h100"))
    assert files.census is None and not (tmp_path / "h100" / "census").exists()


@pytest.mark.slow
def test_census_records_a_crash_and_goes_on(tmp_path, fake_worker, monkeypatch):
    victim = _census_options(tmp_path).shapes[2].shape.shape_id
    monkeypatch.setenv("FAKE_CRASH", f"{victim}:default:*")
    session = Collector(_census_options(tmp_path)).run()
    assert session["counts"]["worker_restarts"] == 1
    records = RunStore(tmp_path / "h100").read("census", CENSUS_KEY).set_index(list(CENSUS_KEY))
    assert len(records) == 10
    assert records.loc[(victim, "default", "fwd"), "status"] == "error"
    assert "SIGSEGV" in records.loc[(victim, "default", "fwd"), "status_detail"]
    assert (records.drop(index=(victim, "default", "fwd"))["status"] == "ok").all()
    table = census_table(RunStore(tmp_path / "h100"))
    assert set(table.loc[(table["shape_id"] == victim) & (table["math"] == "default"), "status"]) == {"error"}


def test_backward_census_asks_each_pass_apart_and_resumes(tmp_path, fake_worker):
    """``--census --algo backward`` asks dgrad's and wgrad's algorithms per (shape, math); the
    key holds the pass, so a forward census of the same shapes is still to do, and the table
    gives each pass's algorithms, a shape's forward rows first."""
    backward = select_algorithms("backward")
    session = Collector(_census_options(tmp_path, algos=backward)).run()
    assert session["census_passes"] == ["bwd_data", "bwd_filter"]
    assert session["counts"]["census_records"] == 5 * 2 * 2
    assert Collector(_census_options(tmp_path, algos=backward)).run()["counts"]["census_records"] == 0
    # The forward's answers are not the backward's: a forward census of the same shapes asks them.
    session = Collector(_census_options(tmp_path, algos=select_algorithms("all"))).run()
    assert session["census_passes"] == ["fwd"] and session["counts"]["census_records"] == 5 * 2
    store = RunStore(tmp_path / "h100")
    records = store.read("census", CENSUS_KEY)
    assert sorted(records.groupby("pass").size().items()) == [("bwd_data", 10), ("bwd_filter", 10), ("fwd", 10)]
    table = census_table(store)
    per_shape = sum(len(algorithm_names("cudnn", pass_=p)) for p in PASSES)
    assert len(table) == 5 * 2 * per_shape and not table.duplicated(["shape_id", "math", "algo"]).any()
    # A shape's rows: the forward's algorithms, then dgrad's, then wgrad's, math modes within each.
    first = table[table["shape_id"] == table["shape_id"].iloc[0]]
    assert list(first["algo"]) == [a for p in PASSES for a in algorithm_names("cudnn", pass_=p) for _ in range(2)]
    by_key = table.set_index(["shape_id", "math", "algo"])
    for gs in _census_options(tmp_path).shapes:
        shape, even = gs.shape, gs.shape.in_ch % 2 == 0
        for pass_, gemm, fft, plain in (("fwd", "GEMM", "FFT", "IMPLICIT_GEMM"),
                                        ("bwd_data", "BWD_DATA_ALGO_0", "BWD_DATA_FFT", "BWD_DATA_ALGO_1"),
                                        ("bwd_filter", "BWD_FILTER_ALGO_0", "BWD_FILTER_FFT", "BWD_FILTER_ALGO_1")):
            workspace = 4096 * (1 + PASSES.index(pass_)) if even else 0
            assert by_key.loc[(shape.shape_id, "fma", gemm), "workspace_bytes"] == workspace, pass_
            assert by_key.loc[(shape.shape_id, "default", gemm), "heuristic_rank"] == 1
            assert by_key.loc[(shape.shape_id, "fma", plain), "heuristic_rank"] == 2
            assert by_key.loc[(shape.shape_id, "default", fft), "status"] == (
                "not_supported" if shape.stride_w > 1 else "ok")
        # Algorithms an answer does not name were not accepted, in every pass.
        for algo in ("WINOGRAD", "BWD_DATA_WINOGRAD", "BWD_FILTER_ALGO_3"):
            assert by_key.loc[(shape.shape_id, "fma", algo), "status"] == "not_supported"
            assert pd.isna(by_key.loc[(shape.shape_id, "fma", algo), "heuristic_rank"])


def test_census_records_without_a_pass_are_the_forwards(tmp_path, fake_worker):
    """Census records written before the backward census name no pass: they answered for
    the forward, and the table they give is the one the same records with ``pass: fwd`` give."""
    Collector(_census_options(tmp_path)).run()
    new = RunStore(tmp_path / "h100").records("census")
    assert {r["pass"] for r in new} == {"fwd"}
    old = RunStore(tmp_path / "old", tag="before-passes")
    old.append("census", [{k: v for k, v in r.items() if k != "pass"} for r in new])
    old.close()
    assert all("pass" not in r for r in read_jsonl(next((tmp_path / "old" / "raw").glob("census-*.jsonl"))))
    pd.testing.assert_frame_equal(census_table(old), census_table(RunStore(tmp_path / "h100")))
    # A forward census over the old records has nothing to do; a backward one asks every shape.
    options = _census_options(tmp_path, dataset_dir=tmp_path / "old")
    assert Collector(options).run()["counts"]["census_records"] == 0
    options = _census_options(tmp_path, dataset_dir=tmp_path / "old", algos=["BWD_FILTER_ALGO_1"])
    assert Collector(options).run()["counts"]["census_records"] == 5 * 2
    assert set(census_table(old)["algo"]) == set(algorithm_names("cudnn")) | set(
        algorithm_names("cudnn", pass_="bwd_filter"))


def test_read_census_gives_and_filters_the_pass(tmp_path, fake_worker):
    Collector(_census_options(tmp_path, algos=select_algorithms("all,bwd_data"))).run()
    table = census_table(RunStore(tmp_path / "h100"))
    assert "pass" not in table.columns  # the files hold no pass: the registry says it
    write_parts(table, tmp_path / "census")
    every = read_census(tmp_path / "census")
    assert list(every.columns) == [*CENSUS_COLUMNS[:CENSUS_COLUMNS.index("algo") + 1], "pass",
                                   *CENSUS_COLUMNS[CENSUS_COLUMNS.index("algo") + 1:]]
    assert (every["pass"] == every["algo"].map(lambda a: get_algorithm(a).pass_)).all()
    assert set(every["pass"]) == {"fwd", "bwd_data"}
    dgrad = read_census(tmp_path / "census", passes=("bwd_data",))
    assert len(dgrad) == 5 * 2 * len(algorithm_names("cudnn", pass_="bwd_data"))
    assert set(dgrad["algo"]) == set(algorithm_names("cudnn", pass_="bwd_data"))
    pd.testing.assert_frame_equal(dgrad, every[every["pass"] == "bwd_data"].reset_index(drop=True))
    assert read_census(tmp_path / "census", passes=("bwd_filter",)).empty


@pytest.mark.slow
def test_seer_collect_census_algo_backward_writes_the_tidy_census_of_both_passes(tmp_path, fake_worker):
    """The command line end to end: ``seer collect --census --algo backward`` over a grid, the
    tidy table it parses, read by pass, and the provenance's counts per pass."""
    import json

    from seer.cli import main

    grid = ["--gpu", "h100", "--grid", "quick", "--limit-shapes", "4", "--data-dir", str(tmp_path)]
    assert main(["collect", *grid, "--census", "--algo", "backward"]) == 0
    census = tmp_path / "h100" / "census"
    dgrad, wgrad = (read_census(census, passes=(p,)) for p in ("bwd_data", "bwd_filter"))
    assert len(dgrad) == 4 * 2 * len(algorithm_names("cudnn", pass_="bwd_data"))
    assert len(wgrad) == 4 * 2 * len(algorithm_names("cudnn", pass_="bwd_filter"))
    assert read_census(census, passes=("fwd",)).empty
    counts = json.loads((tmp_path / "h100" / "provenance.json").read_text())["counts"]
    assert counts["census_answers_by_pass"] == {"bwd_data": len(dgrad), "bwd_filter": len(wgrad)}
    # The forward's census of the same shapes joins them; the passes' answers stay apart.
    assert main(["collect", *grid, "--census"]) == 0
    every = read_census(census)
    assert every.groupby("pass").size().to_dict() == {"bwd_data": len(dgrad), "bwd_filter": len(wgrad),
                                                      "fwd": 4 * 2 * len(algorithm_names("cudnn"))}
    pd.testing.assert_frame_equal(read_census(census, passes=("bwd_data",)), dgrad)


@pytest.mark.slow
def test_census_records_a_crash_of_a_backward_item_under_its_pass(tmp_path, fake_worker, monkeypatch):
    victim = _census_options(tmp_path).shapes[2].shape.shape_id
    monkeypatch.setenv("FAKE_CRASH", f"{victim}:default:*bwd_filter")
    session = Collector(_census_options(tmp_path, algos=select_algorithms("backward"))).run()
    assert session["counts"]["worker_restarts"] == 1
    records = RunStore(tmp_path / "h100").read("census", CENSUS_KEY).set_index(list(CENSUS_KEY))
    assert len(records) == 5 * 2 * 2
    assert records.loc[(victim, "default", "bwd_filter"), "status"] == "error"
    assert "SIGSEGV" in records.loc[(victim, "default", "bwd_filter"), "status_detail"]
    assert (records.drop(index=(victim, "default", "bwd_filter"))["status"] == "ok").all()
    table = census_table(RunStore(tmp_path / "h100"))
    crashed = table[(table["shape_id"] == victim) & (table["math"] == "default")]
    assert set(crashed.loc[crashed["algo"].str.startswith("BWD_FILTER"), "status"]) == {"error"}
    assert "error" not in set(crashed.loc[crashed["algo"].str.startswith("BWD_DATA"), "status"])


# -- torn records --------------------------------------------------------------------------
@pytest.mark.slow
def test_a_record_torn_by_a_crash_is_measured_again(tmp_path, fake_worker):
    Collector(_options(tmp_path)).run()
    (path,) = (tmp_path / "h100" / "raw").glob("timing-*.jsonl")
    text = path.read_text()
    last = json.loads(text.splitlines()[-1])
    fragment = text.splitlines()[-1][:40]
    path.write_text(text[: text.rindex("\n", 0, len(text) - 1) + 1] + fragment)  # the crash
    again = Collector(_options(tmp_path)).run()
    assert again["counts"]["timing_rows"] == 1
    records = read_jsonl(path)
    assert len(records) == 18 and tuple(records[-1][k] for k in RUN_KEY) == tuple(last[k] for k in RUN_KEY)
    assert path.read_text().endswith("\n") and path.with_name(path.name + TORN_SUFFIX).read_text() == fragment + "\n"
    assert Collector(_options(tmp_path)).run()["counts"]["timing_rows"] == 0


# -- scratch folders -----------------------------------------------------------------------
def _complete_lines(path: Path) -> list[str]:
    """The lines of a file another process may be writing, but for an unfinished last one."""
    text = path.read_text() if path.exists() else ""
    return text[: text.rfind("\n") + 1].splitlines()


def _scratch_folders(temp: Path) -> list[Path]:
    return sorted(temp.glob(f"{scratch.PREFIX}*"))


@pytest.fixture
def ctrl_c():
    """``ctrl_c(path)`` presses Ctrl-C in this process once ``path`` holds a whole line (or
    after a timeout), as a terminal would: KeyboardInterrupt in the main thread."""
    # Python's own handler, also where the tests were started with SIGINT ignored (a
    # background job), where the simulated Ctrl-C would do nothing.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threads = []

    def press_when(path: Path, timeout_s: float = 20.0) -> None:
        def wait_then_interrupt():
            deadline = time.monotonic() + timeout_s
            while not _complete_lines(path) and time.monotonic() < deadline:
                time.sleep(0.02)
            _thread.interrupt_main(signal.SIGINT)

        threads.append(threading.Thread(target=wait_then_interrupt, daemon=True))
        threads[-1].start()

    try:
        yield press_when
    finally:
        for thread in threads:
            thread.join()
        signal.signal(signal.SIGINT, previous)


def test_the_scratch_folder_is_removed_after_a_run(tmp_path, fake_worker, monkeypatch):
    seen = []
    monkeypatch.setattr(orchestrate, "probe_device", lambda workdir: seen.append(workdir) or dict(H100_PROBE))
    Collector(_options(tmp_path)).run()
    assert seen and seen[0].parent == fake_worker  # it was made in the temp directory
    assert seen[0].name.startswith(f"{scratch.PREFIX}{scratch._host()}-{os.getpid()}-")
    assert _scratch_folders(fake_worker) == []


def test_the_scratch_folder_is_removed_after_an_error(tmp_path, fake_worker, monkeypatch):
    monkeypatch.setenv("FAKE_FAIL_AT_START", "1")
    with pytest.raises(EnvironmentProblem):
        Collector(_options(tmp_path)).run()
    assert _scratch_folders(fake_worker) == []


def test_ctrl_c_stops_the_worker_and_removes_the_scratch_folder(tmp_path, fake_worker, monkeypatch, ctrl_c):
    pids = tmp_path / "pids"
    monkeypatch.setenv("FAKE_PID_FILE", str(pids))
    monkeypatch.setenv("FAKE_ITEM_SECONDS", "30")
    ctrl_c(pids)
    with pytest.raises(KeyboardInterrupt):
        Collector(_options(tmp_path, item_timeout_s=60)).run()
    (worker,) = [int(line.split()[0]) for line in _complete_lines(pids)]
    assert not children.process_running(worker)
    assert _scratch_folders(fake_worker) == []
    session = RunStore(tmp_path / "h100").sessions()[-1]
    assert session["interrupted"] and session["timing_seconds"] > 0  # the time spent until Ctrl-C


def test_a_new_run_removes_the_scratch_folders_of_dead_runs_only(tmp_path, fake_worker):
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = scratch._host()
    stale = fake_worker / f"{scratch.PREFIX}{host}-{dead.pid}-abc"
    alive = fake_worker / f"{scratch.PREFIX}{host}-{os.getpid()}-abc"
    elsewhere = fake_worker / f"{scratch.PREFIX}otherhost-{dead.pid}-abc"
    unowned = fake_worker / f"{scratch.PREFIX}k3j2h1x9"  # named before owners were
    for folder in (stale, alive, elsewhere, unowned):
        (folder / "results.jsonl").parent.mkdir()
        (folder / "results.jsonl").write_text("{}\n")
    Collector(_options(tmp_path)).run()
    assert _scratch_folders(fake_worker) == sorted([alive, elsewhere, unowned])


# -- no child outlives the orchestrator ----------------------------------------------------
def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while children.process_running(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _kill_if_running(*pids: int) -> None:
    for pid in pids:
        if children.process_running(pid):
            os.kill(pid, signal.SIGKILL)


pdeathsig = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs Linux's parent-death signal")


def test_a_child_that_exits_takes_what_it_started_along(tmp_path):
    pid_file = tmp_path / "grandchild"
    outcome = children.run_child(["sh", "-c", f"sleep 30 & echo $! > {pid_file}"], tmp_path / "results",
                                 tmp_path / "log", lambda event: None, item_timeout_s=10)
    grandchild = int(pid_file.read_text())
    try:
        assert outcome.returncode == 0 and not outcome.finished
        assert _gone_within(grandchild, 2)
    finally:
        _kill_if_running(grandchild)


def test_ctrl_c_ends_the_child_and_everything_it_started(tmp_path, ctrl_c):
    pid_file = tmp_path / "pids"
    command = ["sh", "-c", f"sleep 30 & echo $$ $! > {pid_file}.tmp; mv {pid_file}.tmp {pid_file}; wait"]
    ctrl_c(pid_file)
    with pytest.raises(KeyboardInterrupt):
        children.run_child(command, tmp_path / "results", tmp_path / "log", lambda event: None,
                           item_timeout_s=30, first_timeout_s=30)
    shell, grandchild = map(int, pid_file.read_text().split())
    try:
        assert not children.process_running(shell) and _gone_within(grandchild, 2)
    finally:
        _kill_if_running(shell, grandchild)


#: An orchestrator in a process of its own, with the stand-ins for the worker and the probe.
_ORCHESTRATOR = """
import json, sys
from pathlib import Path
from seer.collect import children, orchestrate
from seer.collect.orchestrate import CollectOptions, Collector
from seer.hardware.gpus import get_gpu_spec
from seer.layers.grids import GridShape, quick_grid

spec = json.loads(sys.argv[1])
children.worker_command = lambda: spec["worker"]
orchestrate.probe_device = lambda workdir: spec["probe"]
by_id = {s.shape_id: s for s in quick_grid()}
Collector(CollectOptions(
    gpu=get_gpu_spec("h100"), shapes=[GridShape(by_id[sid], "quick") for sid in spec["shapes"]],
    maths=["fma", "default"], algos=spec["algos"], dataset_dir=Path(spec["dataset"]),
    profile_shapes=spec["profile_shapes"], ncu=spec["ncu"], item_timeout_s=60)).run()
"""


@pytest.mark.slow
@pdeathsig
@pytest.mark.parametrize("under_ncu", [False, True], ids=["worker", "worker-under-ncu"])
def test_a_worker_whose_orchestrator_is_killed_stops_at_once(tmp_path, monkeypatch, under_ncu):
    temp, pids = tmp_path / "temp", tmp_path / "pids"
    temp.mkdir()
    command = "profile" if under_ncu else "time"
    spec = {"worker": FAKE, "probe": H100_PROBE, "shapes": list(CAPTURED_SHAPES), "algos": ALGOS,
            "dataset": str(tmp_path / "h100"), "profile_shapes": None if under_ncu else 0,
            "ncu": str(Path(__file__).with_name("fake_ncu.py")) if under_ncu else None}
    env = os.environ | {"TMPDIR": str(temp), "FAKE_PID_FILE": str(pids), "FAKE_ITEM_SECONDS": f"{command}=60",
                        "FAKE_NCU_CAPTURE": str(CAPTURE)}
    orchestrator = subprocess.Popen([sys.executable, "-c", _ORCHESTRATOR, json.dumps(spec)], env=env,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    worker = parent = None
    try:
        deadline = time.monotonic() + 60
        while worker is None and time.monotonic() < deadline and orchestrator.poll() is None:
            worker = next((int(pid) for pid, name in map(str.split, _complete_lines(pids)) if name == command),
                          None)
            time.sleep(0.05)
        assert worker is not None, "the worker never started"
        parent = int(Path(f"/proc/{worker}/stat").read_text().rsplit(")", 1)[1].split()[1])
        assert children.process_running(worker) and children.process_running(parent)
        assert (parent != orchestrator.pid) == under_ncu  # under ncu, its parent is one of ncu's
        orchestrator.kill()
        orchestrator.wait()
        assert _gone_within(worker, 5) and _gone_within(parent, 5)
    finally:
        orchestrator.kill()
        orchestrator.wait()
        _kill_if_running(*(pid for pid in (worker, parent) if pid is not None))
    # The killed run could not remove its scratch folder; the next run's sweep does.
    (left,) = temp.glob(f"{scratch.PREFIX}*-{orchestrator.pid}-*")
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    assert scratch.remove_stale() == [left] and not left.exists()


@pdeathsig
def test_a_worker_started_after_its_orchestrator_died_exits_at_once(tmp_path):
    plan, pids = tmp_path / "plan.jsonl", tmp_path / "pids"
    plan.write_text("")
    command = [*FAKE, "time", "--plan", str(plan), "--results", str(tmp_path / "results.jsonl")]
    dead = subprocess.Popen(["true"])
    dead.wait()
    env = children.child_env() | {"FAKE_PID_FILE": str(pids)}
    orphan = subprocess.run(command, env=env | {children.ORCHESTRATOR_PID: str(dead.pid)}, timeout=60)
    assert orphan.returncode == children.EXIT_ORPHANED and not pids.exists()
    # The same worker with its orchestrator alive does its (empty) plan.
    assert subprocess.run(command, env=env, timeout=60).returncode == 0 and pids.exists()


def test_traced_kernel_counts_read_both_stored_trace_formats(tmp_path):
    from seer.collect.profiling import traced_kernel_counts

    store = RunStore(tmp_path / "h100")
    per_launch = [["k1", 2336, 46, 1024, 32, 0], ["k2", 900, 1, 256, 32, 0], ["k2", 950, 1, 256, 32, 0]]
    summed = [["k1", 1, 2336, 46, 1024, 32, 0], ["k2", 960, 1415323, 144, 256, 27, 2048]]
    store.append("timing", [
        {"shape_id": "a", "math": "fma", "algo": "GEMM", "status": "ok", "trace_status": "ok", "traced_kernels": per_launch},
        {"shape_id": "b", "math": "fma", "algo": "FFT", "status": "ok", "trace_status": "ok", "traced_kernels": summed},
        {"shape_id": "c", "math": "fma", "algo": "FFT", "status": "ok", "trace_status": "error"}])
    assert traced_kernel_counts(store.read("timing", RUN_KEY)) == {("a", "fma", "GEMM"): 3, ("b", "fma", "FFT"): 961}


@pytest.mark.slow
def test_a_shape_keeps_the_grid_that_first_timed_it(tmp_path, fake_worker, monkeypatch):
    from seer.dataset.build import measurements_table

    Collector(_options(tmp_path)).run()
    store = RunStore(tmp_path / "h100")
    moved = [GridShape(gs.shape, "test-set-ii-general") for gs in _shapes()]
    monkeypatch.setenv("FAKE_TRACED", ",".join(f"{a}=1" for a in ALGOS))
    assert Collector(_options(tmp_path, shapes=moved, retry=("untraced",))).run()["counts"]["timing_rows"] == 18
    records = store.read("timing", RUN_KEY)
    assert set(records["grid"]) == {gs.grid for gs in _shapes()}
    # Records written under the other grid's name (as before this rule) do not move the shape either.
    store.append("timing", [records.iloc[0].to_dict() | {"grid": "test-set-ii-general"}])
    table = measurements_table(store, get_gpu_spec("h100"))
    assert table.groupby("shape_id")["split"].nunique().max() == 1
    assert "test2" not in set(table["split"])


def test_retry_energy_takes_the_successful_runs_without_a_reading():
    timing = pd.DataFrame({"shape_id": ["a", "a", "b", "c"], "math": "fma", "algo": ["GEMM", "FFT", "GEMM", "GEMM"],
                           "status": ["ok", "ok", "ok", "oom"], "energy_mj": [12.5, None, None, None]})
    assert no_energy_keys(timing) == {("a", "fma", "FFT"), ("b", "fma", "GEMM")}
    assert no_energy_keys(timing.drop(columns="energy_mj")) == {("a", "fma", "GEMM"), ("a", "fma", "FFT"),
                                                                ("b", "fma", "GEMM")}
    assert no_energy_keys(timing.iloc[:0]) == set()


# -- one collection per shard, and a folder it can write ----------------------------------
_HOLD = """
import sys, time
from pathlib import Path
from seer.collect.lock import CollectionLock
with CollectionLock(Path(sys.argv[1]), (1, 1), {"started_at": "then", "command": "seer collect --grid " + sys.argv[2]},
                    sys.argv[2]):
    print("held", flush=True)
    time.sleep(60)
"""


def test_a_second_collection_of_a_shard_is_refused_until_the_first_dies(tmp_path, fake_worker):
    raw = tmp_path / "h100" / "raw"
    first = subprocess.Popen([sys.executable, "-c", _HOLD, str(raw), "quick"], stdout=subprocess.PIPE, text=True)
    try:
        assert first.stdout.readline().strip() == "held"
        with pytest.raises(EnvironmentProblem, match=rf"another collection of this shard is running \(pid "
                                                     rf"{first.pid} on .* seer collect --grid quick\)"):
            Collector(_options(tmp_path)).run()
        assert not list(raw.glob("timing-*"))  # refused before timing anything
        # Another shard of the same folder runs beside it, as a SLURM job array's tasks do.
        assert Collector(_options(tmp_path, shard_index=2, shard_count=2)).run()["counts"]["timing_rows"] == 6
    finally:
        first.kill()  # kill -9 runs no clean-up: the kernel drops the lock with the process
        first.wait()
    # The whole grid, less what the other shard timed.
    assert Collector(_options(tmp_path)).run()["counts"]["timing_rows"] == 3 * 2 * 3 - 6


def test_collections_of_other_grids_run_beside_each_other_into_one_folder(tmp_path, fake_worker):
    # Shard 1/1 of another grid, and a census of this grid's shard, each hold a lock of their own.
    raw = tmp_path / "h100" / "raw"
    others = [subprocess.Popen([sys.executable, "-c", _HOLD, str(raw), job], stdout=subprocess.PIPE, text=True)
              for job in ("random", "quick-census")]
    try:
        assert [other.stdout.readline().strip() for other in others] == ["held", "held"]
        assert Collector(_options(tmp_path)).run()["counts"]["timing_rows"] == 3 * 2 * 3
    finally:
        for other in others:
            other.kill()
            other.wait()
    # Its files are named by its grid, so another grid's writer of the same shard never shares them.
    assert [p.name for p in raw.glob("timing-*")] == [f"timing-{default_tag(1, 1, 'quick')}.jsonl"]
    many = [f"grid-{i}" for i in range(30)]
    assert job_name(["random", "general", "random"]) == "general+random"
    assert len(job_name(many)) == MAX_JOB_NAME and job_name(many) != job_name(many[:-1])


def test_a_data_folder_that_cannot_be_written_is_one_sentence_before_any_timing(tmp_path, fake_worker):
    (tmp_path / "h100").mkdir()
    (tmp_path / "h100" / "raw").write_text("a file where the raw folder should be")
    with pytest.raises(EnvironmentProblem, match="cannot write the collection's records there: .*nothing was "
                                                 "collected"):
        Collector(_options(tmp_path)).run()


@pytest.fixture
def small_file_system(tmp_path):
    """A real 1 MiB tmpfs at ``tmp_path/fs``, mounted read-write; skipped where mounting is not allowed."""
    mount_point = tmp_path / "fs"
    mount_point.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount_point)],
                          capture_output=True, text=True)
    if made.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {made.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_a_read_only_or_full_file_system_is_one_sentence_before_any_timing(tmp_path, fake_worker,
                                                                          small_file_system):
    # 1 MiB in all is less than a collection needs to start.
    with pytest.raises(EnvironmentProblem, match="no space left on the device"):
        Collector(_options(small_file_system)).run()
    subprocess.run(["mount", "-o", "remount,ro", str(small_file_system)], check=True)
    with pytest.raises(EnvironmentProblem, match="read-only file system"):
        Collector(_options(small_file_system, dataset_dir=small_file_system / "h100")).run()

"""The shipped H100 dataset: rebuilt from its raw records, and checked for what it promises."""

import json
import shutil

import numpy as np
import openpyxl
import pandas as pd
import pytest

from conftest import REPO
from seer.algorithms import algorithm_names
from seer.dataset.build import build_dataset, read_measurements, rollup_kernels, split_of
from seer.dataset.tables import parts
from seer.dataset.views import POLICIES
from seer.hardware.gpus import get_gpu_spec
from seer.layers.grids import read_shapes_file
from seer.layers.shapes import LAYER_COLUMNS, SEER_FIELDS, is_seer_layer, layer_frame
from seer.schema import CENSUS_COLUMNS, MEASUREMENT_COLUMNS, STATUSES

H100 = REPO / "data" / "h100"
SPEC = get_gpu_spec("h100")
ISSUE_COLUMNS = ("gpu cudnn_version math batch in_ch out_ch groups dims in_d in_h in_w kernel_d kernel_h kernel_w "
                 "stride_d stride_h stride_w pad_d pad_h pad_w dilation_d dilation_h dilation_w out_d out_h out_w "
                 "trace_status trace_n_kernels trace_time_ms trace_main_kernel trace_variant "
                 "algo status time_ms workspace_bytes heuristic_rank n_kernels main_kernel variant grid_blocks "
                 "block_threads registers shared_mem_bytes blocks_per_sm waves achieved_occupancy flops "
                 "dram_read_bytes dram_write_bytes l2_bytes sm_util dram_util split").split()


@pytest.fixture(scope="module")
def rebuilt(tmp_path_factory):
    """The dataset rebuilt from the committed raw records into a fresh directory."""
    target = tmp_path_factory.mktemp("h100")
    shutil.copytree(H100 / "raw", target / "raw")
    files = build_dataset(target, SPEC)
    return target, files


def _same_parts(rebuilt, committed) -> None:
    """Part for part, row for row: the same bytes, or, where they differ (Parquet's bytes name
    the pyarrow version that wrote them), the same rows."""
    assert [p.name for p in parts(rebuilt)] == [p.name for p in parts(committed)], rebuilt.name
    for rebuilt_part, committed_part in zip(parts(rebuilt), parts(committed)):
        if rebuilt_part.read_bytes() != committed_part.read_bytes():
            pd.testing.assert_frame_equal(pd.read_parquet(rebuilt_part), pd.read_parquet(committed_part))


@pytest.mark.slow
def test_committed_tables_are_exactly_what_the_raw_records_give(rebuilt, table):
    target, files = rebuilt
    again = read_measurements(files.measurements)
    pd.testing.assert_frame_equal(again, table)
    for name in ("measurements", "kernels", "traced_kernels"):
        _same_parts(target / name, H100 / name)
    # The runs on sparse inputs (seer collect --sparsity: the sparse-seed grid) have their own table.
    assert files.sparse_measurements == target / "sparse_measurements" and files.sparse_rows == 14168
    _same_parts(target / "sparse_measurements", H100 / "sparse_measurements")
    for name in ("Test-set-II.txt", "Test-set-II-times.csv", "provenance.json"):
        assert (target / name).read_text() == (H100 / name).read_text(), name
    for name in ("train.xlsx", "test.xlsx"):  # the same bytes, or (another openpyxl wrote one) cell for cell
        if (target / name).read_bytes() == (H100 / name).read_bytes():
            continue
        again, committed = (pd.read_excel(d / name, sheet_name=None) for d in (target, H100))
        assert list(again) == list(committed), name
        for sheet in committed:
            pd.testing.assert_frame_equal(again[sheet], committed[sheet], obj=f"{name}:{sheet}")


@pytest.mark.slow
def test_committed_census_is_exactly_what_the_raw_census_records_give(rebuilt, census, table):
    target, files = rebuilt
    assert files.census == target / "census"
    _same_parts(files.census, H100 / "census")
    # The committed census (conftest's fixture) as read_census reads it: the forward's answers,
    # each answer's pass read from the registry, not stored.
    assert list(census.drop(columns="pass").columns) == list(CENSUS_COLUMNS)
    assert set(census["pass"]) == {"fwd"}
    # One row per (shape, math, algorithm), as the provenance counts them.
    counts = json.loads((H100 / "provenance.json").read_text())["counts"]
    assert len(census) == counts["census_answers"] == 16 * counts["census_shapes"]
    assert not census.duplicated(["shape_id", "math", "algo"]).any()
    assert census["status"].value_counts().to_dict() == counts["census_status"]
    assert "census_answers_by_pass" not in counts  # a forward census is counted as it always was
    # No census shape is a timed shape (the committed measurements, conftest's fixture).
    assert not census["shape_id"].isin(table["shape_id"]).any()


def test_columns_keys_and_statuses(table):
    assert list(table.drop(columns="pass").columns) == list(MEASUREMENT_COLUMNS)  # the pass: from the registry
    assert set(ISSUE_COLUMNS) <= set(table.columns)
    assert not table.duplicated(["shape_id", "math", "algo"]).any()
    assert set(table["status"]) <= set(STATUSES)
    assert set(table["gpu"]) == {"h100"} and table["cudnn_version"].nunique() == 1
    # Every (shape, math) has all eight cuDNN algorithms, whatever their status, except at
    # most one per session stopped early (time limit or Ctrl-C), which left its shape
    # part-way: resuming completes it. seer's own kernels ran on some shapes only, a few of
    # them (of a grid's tail) not timed with cuDNN's algorithms (yet).
    assert set(table["algo"]) <= set(algorithm_names(pass_=None))
    cudnn = table[table["algo"].isin(algorithm_names("cudnn"))]
    sizes = cudnn.groupby(["shape_id", "math"]).size()
    sessions = [json.loads(line) for line in (H100 / "raw" / "sessions.jsonl").read_text().splitlines()]
    stopped = sum(bool(s.get("stopped_at_time_limit") or s.get("interrupted")) for s in sessions)
    assert (sizes <= 8).all() and (sizes < 8).sum() <= stopped
    ok = table[table["status"] == "ok"]
    assert (ok["time_ms"] > 0).all() and ok["time_ms"].notna().all()
    failed = table[table["status"] != "ok"]
    assert failed["status_detail"].notna().all() and failed["time_ms"].isna().all()


@pytest.mark.slow
def test_dataset_size_promised_by_the_issue(table):
    shapes = table.groupby("grid")["shape_id"].nunique()
    assert shapes["seer"] + shapes["networks"] >= 1500
    assert set(table["math"]) == {"fma", "default"}
    # ncu metrics for every successful cuDNN run of at least 600 shapes, from both grids (seer's
    # own kernels are profiled on some layers only).
    ok = table[(table["status"] == "ok") & table["algo"].isin(algorithm_names("cudnn"))]
    complete = ok.groupby("shape_id")["profile_status"].agg(lambda s: (s == "ok").all())
    profiled = ok[ok["shape_id"].isin(complete[complete].index)]
    assert len(complete[complete]) >= 600
    assert set(profiled["grid"]) >= {"seer", "networks", "networks-general", "test-set-ii-general"}
    assert set(profiled["algo"]) >= {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "FFT", "FFT_TILING",
                                     "WINOGRAD_NONFUSED"}
    # Layers of the general kinds with runs under ncu, 2D and 3D (issue 14 asks for 500).
    general = ok[~is_seer_layer(ok) & (ok["profile_status"] == "ok")]
    assert general["shape_id"].nunique() >= 300 and set(general["dims"]) == {2, 3}


def test_split_is_by_shape_seeded_and_near_70_30(table):
    per_shape = table.groupby("shape_id")["split"].nunique()
    assert (per_shape == 1).all()  # a shape never sits on both sides
    train_test = table[table["split"] != "test2"].drop_duplicates("shape_id")
    assert train_test["split"].value_counts(normalize=True)["test1"] == pytest.approx(0.3, abs=0.03)
    assert (table.loc[table["grid"] == "test-set-ii", "split"] == "test2").all()
    assert all(split_of(s, g) == sp for s, g, sp in
               train_test[["shape_id", "grid", "split"]].head(50).itertuples(index=False))


def test_profiled_runs_roll_up_consistently(table):
    p = table[table["profile_status"] == "ok"]
    assert len(p) > 0
    limits = p[["occupancy_limit_blocks", "occupancy_limit_registers", "occupancy_limit_shared_mem",
                "occupancy_limit_warps"]].min(axis=1)
    assert (p["blocks_per_sm"] == limits).all() and (p["blocks_per_sm"] >= 1).all()
    assert np.allclose(p["waves"], p["grid_blocks"] / (p["blocks_per_sm"] * 132))
    assert ((p["waves"] - p["ncu_waves"]).abs() <= 0.0051).all()  # ncu prints two decimals
    assert p["achieved_occupancy"].between(0, 1).all() and (p["dram_util"] >= 0).all()
    # FMA math forbids tensor cores: no TF32 kernel, no tensor FLOPs.
    fma = p[p["math"] == "fma"]
    assert not fma["variant"].str.contains("tf32").any() and (fma["tensor_flops"] == 0).all()
    # cuDNN's implicit GEMM does at least the analytic multiply-adds (tiles may pad). On
    # grouped layers IMPLICIT_GEMM runs a direct kernel instead, which skips the taps that
    # fall on zero padding: it does fewer only where there is padding.
    ig = p[(p["algo"] == "IMPLICIT_GEMM") & (p["math"] == "fma")]
    direct = ig["main_kernel"].str.contains("grouped_direct_kernel")
    padded = (ig[["pad_d", "pad_h", "pad_w"]] > 0).any(axis=1)
    assert (ig.loc[~direct | ~padded, "flops_ratio"] >= 0.999).all()
    assert (ig.loc[direct & padded, "flops_ratio"] < 0.999).any()


def test_rollup_sums_traffic_and_takes_launch_config_from_the_longest_compute_kernel():
    kernels = pd.DataFrame({
        "shape_id": ["a"] * 3, "math": ["fma"] * 3, "algo": ["FFT"] * 3, "kernel_idx": [0, 1, 2],
        "kernel_name": ["fft2d_r2c_32x32", "sm80_xmma_gemm_cf32cf32_f32f32_cf32_tn_n_tilesize32x64x8",
                        "fft2d_c2r_32x32"],
        "kernel_role": ["transform", "compute", "transform"],
        "kernel_variant": ["fft_r2c_32x32", "sm80_gemm_cf32cf32_f32f32_32x64x8", "fft_c2r_32x32"],
        "duration_ns": [500.0, 300.0, 400.0], "dram_read_bytes": [10.0, 20.0, 30.0],
        "grid_blocks": [7, 99, 5],
    })
    for column in ("dram_write_bytes", "l2_bytes", "l1_bytes", "inst_ffma", "inst_fadd", "inst_fmul",
                   "inst_hfma", "inst_tensor", "tensor_ops_tf32", "sm_clock_hz", "achieved_occupancy_pct",
                   "block_threads", "registers", "shared_mem_static_bytes", "shared_mem_dynamic_bytes",
                   "shared_mem_config_bytes", "occupancy_limit_blocks", "occupancy_limit_registers",
                   "occupancy_limit_shared_mem", "occupancy_limit_warps", "waves", "sm_util_pct",
                   "dram_util_pct", "fma_pipe_util_pct", "tensor_pipe_util_pct"):
        kernels[column] = 1.0
    # The main kernel's limits allow 3 blocks per SM (shared memory); the others', 1.
    kernels[["occupancy_limit_blocks", "occupancy_limit_warps", "occupancy_limit_registers"]] = [4.0, 4.0, 5.0]
    kernels["occupancy_limit_shared_mem"] = [1.0, 3.0, 1.0]
    kernels["registers"] = 2.0  # per thread: no occupancy limit, whatever its name
    run = rollup_kernels(kernels, SPEC).iloc[0]
    assert run["n_kernels"] == 3 and run["duration_ns"] == 1200 and run["dram_read_bytes"] == 60
    assert run["grid_blocks"] == 99 and run["variant"] == "sm80_gemm_cf32cf32_f32f32_32x64x8"
    assert run["main_kernel_share"] == pytest.approx(0.25)
    # Occupancy and waves from the main kernel: the least of its four limits; SEER's waves.
    assert run["blocks_per_sm"] == 3 and run["waves"] == 99 / (3 * SPEC.sm_count) and run["ncu_waves"] == 1


@pytest.mark.slow
def test_seer_excel_files(rebuilt, table):
    target, files = rebuilt
    for path, split in ((files.train_xlsx, "train"), (files.test_xlsx, "test1")):
        book = openpyxl.load_workbook(path, read_only=True)
        assert book.sheetnames[0] == "index"
        assert all(len(name) <= 31 for name in book.sheetnames)
        index = pd.read_excel(path, sheet_name="index")
        assert list(index["sheet"]) == book.sheetnames[1:]
        expected = table[(table["split"] == split) & (table["status"] == "ok") & (table["profile_status"] == "ok")
                         & is_seer_layer(table)]  # SEER's sheets: its own layers only
        assert index["rows"].sum() == len(expected)
        first = pd.read_excel(path, sheet_name=book.sheetnames[1])
        assert list(first.columns[:9]) == [*SEER_FIELDS, "algo_index"]


def test_test_set_ii_file_and_times(table):
    shapes = read_shapes_file(H100 / "Test-set-II.txt")
    t2 = table[table["grid"] == "test-set-ii"]
    assert len(shapes) == t2["shape_id"].nunique() == 300
    times = pd.read_csv(H100 / "Test-set-II-times.csv")
    times = times.merge(layer_frame(shapes), on=list(LAYER_COLUMNS))
    assert len(times) == 2 * 300
    ok = t2[(t2["status"] == "ok") & ~t2["algo"].isin(POLICIES)]  # PyTorch's choice is shown, not ranked
    fastest = ok.loc[ok.groupby(["shape_id", "math"])["time_ms"].idxmin()]
    # The CSV holds six significant digits; the table the measured value.
    np.testing.assert_allclose(np.sort(times["fastest_ms"]), np.sort(fastest["time_ms"]), rtol=1e-5)
    # The held-out networks of every kind: their own file, in the layer CSV.
    general = read_shapes_file(H100 / "Test-set-II-general.csv")
    assert len(general) == table.loc[table["grid"] == "test-set-ii-general", "shape_id"].nunique() > 500
    assert {s.shape_id for s in general}.isdisjoint({s.shape_id for s in shapes})


def test_provenance_names_the_machine_and_software():
    prov = json.loads((H100 / "provenance.json").read_text())
    assert prov["gpu"]["device_name"] == ["NVIDIA H100 80GB HBM3"] and prov["gpu"]["sm_count"] == 132
    for field in ("driver_version", "cuda_runtime_version", "cudnn_version", "ncu_version"):
        assert prov["software"][field], field
    assert prov["sessions"] and all(s["command"].startswith("seer collect") for s in prov["sessions"])
    assert prov["counts"]["runs"] == sum(prov["counts"]["status"].values())


def test_traces_sum_by_name_in_launch_order_with_the_longest_launch_configuration():
    from seer.collect.records import sum_by_name
    from seer.dataset.build import traced_kernels_table

    launches = [["fft", 1, 10, 8, 128, 32, 0], ["gemm", 1, 50, 64, 256, 96, 1024], ["fft", 1, 30, 16, 128, 32, 0]]
    assert sum_by_name(launches) == [["fft", 2, 40, 16, 128, 32, 0], ["gemm", 1, 50, 64, 256, 96, 1024]]
    # Records of both formats (per launch, and already summed) give the same rows.
    per_launch = [[k[0], *k[2:]] for k in launches]
    timing = pd.DataFrame({"shape_id": ["a", "b"], "math": "fma", "algo": "FFT",
                           "traced_kernels": [per_launch, sum_by_name(launches)]})
    table = traced_kernels_table(timing)
    first, second = (table[table["shape_id"] == s].drop(columns="shape_id").reset_index(drop=True) for s in "ab")
    pd.testing.assert_frame_equal(first, second)
    assert table["launches"].tolist() == [2, 1, 2, 1] and table["grid_blocks"].tolist() == [16, 64, 16, 64]


@pytest.mark.slow
def test_committed_h200_tables_are_what_its_raw_records_give(tmp_path):
    """The H200 dataset (the forward's algorithms and PyTorch's choice, the census, the backward passes,
    the ncu profiles and the energy readings) rebuilt from its raw records."""
    from seer.hardware.gpus import get_gpu_spec

    h200 = H100.parent / "h200"
    shutil.copytree(h200 / "raw", tmp_path / "raw")
    build_dataset(tmp_path, get_gpu_spec("h200"))
    for name in ("measurements", "kernels", "traced_kernels", "census"):
        _same_parts(tmp_path / name, h200 / name)
    assert (tmp_path / "provenance.json").read_text() == (h200 / "provenance.json").read_text()
    runs = read_measurements(tmp_path / "measurements", ["algo", "pass"])
    assert set(runs["pass"]) == {"fwd", "bwd_data", "bwd_filter"}


def test_a_census_shape_timed_in_one_pass_keeps_its_answers_of_the_others():
    """The census holds cuDNN's answers for shapes that never ran: a shape later timed forward
    gives its forward answers in its runs, and keeps the census rows of its backward passes."""
    from seer.dataset.build import untimed_census

    census = pd.DataFrame({"shape_id": ["a", "a", "a", "b", "c"],
                           "algo": ["IMPLICIT_GEMM", "BWD_DATA_ALGO_0", "BWD_FILTER_ALGO_1", "IMPLICIT_GEMM",
                                    "BWD_DATA_ALGO_1"]})
    table = pd.DataFrame({"shape_id": ["a", "a", "c"], "algo": ["GEMM", "PYTORCH", "BWD_DATA_ALGO_0"]})
    kept = untimed_census(census, table)
    assert list(zip(kept["shape_id"], kept["algo"])) == [("a", "BWD_DATA_ALGO_0"), ("a", "BWD_FILTER_ALGO_1"),
                                                          ("b", "IMPLICIT_GEMM")]

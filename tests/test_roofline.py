"""The hierarchical roofline on the CPU, from the committed H100 dataset and its measured
ceilings (seer/reporting/roofline.py, `seer roofline`, `seer ceilings`)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from seer.cli import main
from seer.errors import InputError
from seer.hardware.gpus import get_gpu_spec
from seer.reporting.roofline import (LEVELS, POINT_COLUMNS, datasheet_ceilings, read_ceilings, roofline_points,
                                     write_ceilings)

H100 = Path(__file__).resolve().parents[1] / "data" / "h100"


@pytest.mark.parametrize("gpu, device", [("h100", "NVIDIA H100 80GB HBM3"), ("h200", "NVIDIA H200")])
def test_the_committed_ceilings_are_measured_values_beside_the_datasheet(gpu, device):
    ceilings = read_ceilings(H100.parent / gpu)
    measured, datasheet = ceilings["measured"], ceilings["datasheet"]
    assert set(measured) == {"fp32_gemm_flops", "tf32_gemm_flops", "dram_bytes", "l2_bytes", "l1_bytes"}
    # Measured below the datasheet, and the levels in the order of the hierarchy.
    for name in datasheet:
        assert 0.5 * datasheet[name] < measured[name] <= datasheet[name]
    assert measured["dram_bytes"] < measured["l2_bytes"] < measured["l1_bytes"]
    assert ceilings["machine"]["device_name"] == device and ceilings["command"].startswith("seer ")
    assert datasheet == datasheet_ceilings(get_gpu_spec(gpu))


def test_ceilings_are_written_into_a_dataset_folder_not_yet_made(tmp_path):
    spec = get_gpu_spec("h200")
    measured = read_ceilings(H100.parent / "h200")["measured"]
    path = write_ceilings(tmp_path / "data" / "h200", spec, measured, {"device_name": "NVIDIA H200"}, ["ceilings"])
    assert path == tmp_path / "data" / "h200" / "ceilings.json"
    assert read_ceilings(path.parent)["measured"] == measured


def test_points_are_flops_over_bytes_and_time(table):
    rows = table[table["shape_id"].isin(table.loc[table["algo"] == "SEER_IMPLICIT_GEMM", "shape_id"])]
    points = roofline_points(rows)
    assert list(points.columns) == list(POINT_COLUMNS) and len(points) > 50
    assert {"SEER_IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM"} <= set(points["algo"])
    for level in LEVELS:
        key = level.name.lower()
        assert np.allclose(points[f"ai_{key}"] * points[f"{key}_bytes"], points["flops"])
    assert np.allclose(points["flops_per_s"] * points["ncu_time_ms"] * 1e-3, points["flops"])
    # An FMA-only implicit GEMM counts at least the convolution's multiply-adds.
    own = points[points["algo"] == "SEER_IMPLICIT_GEMM"].join(table.set_index(["shape_id", "math", "algo"])[
        "flops_analytic"], on=["shape_id", "math", "algo"])
    assert (own["flops"] >= 0.99 * own["flops_analytic"]).all()
    assert roofline_points(pd.DataFrame()).empty


@pytest.mark.slow
def test_seer_roofline_writes_points_and_plots(tmp_path, capsys):
    out = tmp_path / "roofline"
    assert main(["roofline", "--gpu", "h100", "--layers", "seer/data/networks/cosmoflow.csv", "--math", "fma",
                 "--out", str(out)]) == 0
    points = pd.read_csv(out / "roofline.csv")
    assert set(points["math"]) == {"fma"} and len(points) >= 5 * 3
    assert (out / "roofline-fma.png").stat().st_size > 10_000


@pytest.mark.parametrize("argv, words", [
    (["--algo", "FASTEST"], "algo: unknown algorithm"),
    (["--layers", "no-such-grid"], "no such grid or file"),
])
def test_roofline_mistakes_are_one_line_and_exit_2(tmp_path, capsys, argv, words):
    assert main(["roofline", "--gpu", "h100", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert words in err and len(err.strip().splitlines()) == 1


def test_ceilings_file_missing_or_broken_is_one_line(tmp_path):
    with pytest.raises(InputError, match="seer ceilings"):
        read_ceilings(tmp_path)
    (tmp_path / "ceilings.json").write_text(json.dumps({"measured": {"dram_bytes": "fast"}}))
    with pytest.raises(InputError, match="not a ceilings file"):
        read_ceilings(tmp_path)


def test_ceilings_without_a_gpu_stack_is_one_sentence(tmp_path, capsys):
    shutil.copytree(H100, tmp_path / "h100", ignore=shutil.ignore_patterns("raw", "*.gz", "*.xlsx"))
    code = main(["ceilings", "--gpu", "h100", "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 1 and "needs a GPU host with CuPy" in err and "Traceback" not in err
    assert json.loads((tmp_path / "h100" / "ceilings.json").read_text()) == json.loads(
        (H100 / "ceilings.json").read_text())  # nothing half-written


def test_backward_runs_under_the_datasheet_ceilings(tmp_path):
    """The H200's profiled dgrad and wgrad runs (it has no measured ceilings): one plot per pass
    and math, the points of the backward algorithms only, and a summary of them per algorithm."""
    out = tmp_path / "roofline"
    assert main(["roofline", "--gpu", "h200", "--algo", "backward", "--math", "fma", "--layers", "networks-general",
                 "--ceilings", "datasheet", "--out", str(out)]) == 0
    points = pd.read_csv(out / "roofline.csv")
    assert set(points["pass"]) == {"bwd_data", "bwd_filter"} and set(points["math"]) == {"fma"}
    assert points["algo"].str.startswith(("BWD_DATA_", "BWD_FILTER_")).all() and len(points) > 300
    assert sorted(p.name for p in out.glob("*.png")) == ["roofline-bwd_data-fma.png", "roofline-bwd_filter-fma.png"]
    summary = pd.read_csv(out / "summary.csv")
    assert summary["runs"].sum() == len(points)
    one = summary.set_index("algo").loc["BWD_DATA_ALGO_1"]
    own = points[points["algo"] == "BWD_DATA_ALGO_1"]
    assert np.isclose(one["median_flops_per_s"], own["flops_per_s"].median(), rtol=1e-3)
    spec = get_gpu_spec("h200")
    ridge = spec.peak_fp32_flops_per_s / spec.memory_bandwidth_bytes_per_s  # the datasheet's DRAM ridge
    assert np.isclose(one["share_dram_bound"], (own["ai_dram"] < ridge).mean(), atol=1e-3)


def test_a_gpu_without_measured_ceilings_is_told_of_the_datasheet(tmp_path, capsys):
    dataset = tmp_path / "data" / "h200"  # the H200's tables without its ceilings
    dataset.mkdir(parents=True)
    for entry in (H100.parent / "h200").iterdir():
        if entry.name != "ceilings.json":
            (dataset / entry.name).symlink_to(entry)
    assert main(["roofline", "--gpu", "h200", "--data-dir", str(tmp_path / "data"), "--algo", "backward",
                 "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "seer ceilings" in err and "--ceilings datasheet" in err and len(err.strip().splitlines()) == 1

"""Evaluation: the metrics on hand-checked cases, and the report against cuDNN's heuristic."""

from __future__ import annotations

import io
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd
import pytest

from seer.cli import main
from seer.predict.model import Model
from seer.reporting.scoring import evaluate, regression_metrics, regrets, selection_metrics


def test_metrics_on_a_hand_checked_case():
    measured = pd.DataFrame({"A": [1.0, 2.0, np.nan, 1.005], "B": [2.0, 1.0, 4.0, 1.0]}, index=["x", "y", "z", "w"])
    picks = pd.Series({"x": "A", "y": "A", "z": "A", "w": "A"})
    # x: best (regret 0); y: 2/1 - 1 = 100%; z: A did not run; w: 0.5%, near the best.
    assert np.allclose(regrets(measured, picks), [0.0, 1.0, np.nan, 0.005], equal_nan=True)
    m = selection_metrics(measured, picks)
    assert m["top1_pct"] == pytest.approx(100 / 4) and m["picks_not_run"] == 1
    assert m["near_best_pct"] == pytest.approx(200 / 4)
    assert m["mean_regret_pct"] == pytest.approx(100.5 / 3) and m["max_regret_pct"] == pytest.approx(100.0)
    r = regression_metrics([1.0, 2.0, 4.0], [1.05, 2.0, 3.0])
    assert r["mape_pct"] == pytest.approx((5 + 0 + 25) / 3)
    assert r["median_ape_pct"] == pytest.approx(5.0) and r["within_10pct"] == pytest.approx(200 / 3)
    # R^2 of log time: 1 - SS_res / SS_tot.
    log_m, log_p = np.log([1.0, 2.0, 4.0]), np.log([1.05, 2.0, 3.0])
    expected = 1 - ((log_m - log_p) ** 2).sum() / ((log_m - log_m.mean()) ** 2).sum()
    assert r["r2_log"] == pytest.approx(expected)


class Evaluated(NamedTuple):
    """What one ``seer evaluate`` run printed and wrote, and what :func:`evaluate` was given and gave there."""

    code: int
    report: Path
    printed: str
    logged: str
    model: Model
    table: pd.DataFrame
    results: dict[str, pd.DataFrame]
    steps: list[tuple[int, int, str]]


@pytest.fixture(scope="module")
def evaluated(small_models, small_dataset, tmp_path_factory) -> Evaluated:
    """``seer evaluate`` of the small model on the small dataset, run once for the tests that read it
    (its report's plots alone take seconds), with :func:`evaluate` watched for what it was given,
    the steps it reported and its results."""
    from seer.reporting import scoring

    seen: dict = {"steps": []}

    def watched(model: Model, table: pd.DataFrame, progress=None) -> dict[str, pd.DataFrame]:
        def step(done: int, total: int, text: str) -> None:
            seen["steps"].append((done, total, text))
            if progress:
                progress(done, total, text)

        seen.update(model=model, table=table, results=evaluate(model, table, progress=step))
        return seen["results"]

    report = tmp_path_factory.mktemp("reports") / "h100-evaluation.md"
    printed, logged = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as patch, redirect_stdout(printed), redirect_stderr(logged):
        patch.setattr(scoring, "evaluate", watched)
        code = main(["evaluate", "--gpu", "h100", "--models-dir", str(small_models), "--data-dir",
                     str(small_dataset.parent), "--out", str(report)])
    return Evaluated(code, report, printed.getvalue(), logged.getvalue(), seen["model"], seen["table"],
                     seen["results"], seen["steps"])


@pytest.mark.slow
def test_the_evaluation_compares_every_policy_with_the_measured_fastest(evaluated):
    results, steps = evaluated.results, evaluated.steps
    assert [s[0] for s in steps] == list(range(len(steps))) and steps[-1][1] == len(steps)
    selection = results["selection"]
    assert {"ours", "seer", "cudnn heuristic", "oracle", "always IMPLICIT_GEMM"} <= set(selection["policy"])
    assert set(selection["split"]) == {"Test-set-I", "Test-set-II"}
    oracle = selection[selection["policy"] == "oracle"]
    assert (oracle["top1_pct"] == 100).all() and (oracle["mean_regret_pct"] == 0).all()
    # With seer's own kernels, on the layers where every algorithm was timed: the picks among
    # cuDNN's alone are scored against the fastest of all, and seer's kernels win somewhere.
    own = selection[selection["algorithms"] == "cudnn+seer"].set_index(["split", "math", "policy"])
    assert {"ours", "oracle", "ours (cudnn only)", "oracle (cudnn only)"} <= set(own.index.get_level_values("policy"))
    cudnn_best = own.xs("oracle (cudnn only)", level="policy")
    assert (cudnn_best["mean_regret_pct"] > 0).all() and (cudnn_best["top1_pct"] < 100).all()
    # Every test layer has seer's kernels timed (one layer of an old 3D grid aside, if drawn).
    every = own.xs("ours", level="policy")["layers"]
    cudnn_layers = selection.loc[(selection["algorithms"] == "cudnn") & (selection["policy"] == "ours")].set_index(
        ["split", "math"])["layers"]
    assert (every <= cudnn_layers).all() and (every.loc["Test-set-II"] == cudnn_layers.loc["Test-set-II"]).all()
    assert (every.loc["Test-set-I"] >= cudnn_layers.loc["Test-set-I"] - 1).all()
    selection = selection[selection["algorithms"] == "cudnn"]
    ours = selection[selection["policy"] == "ours"].set_index(["split", "math"])
    heuristic = selection[selection["policy"] == "cudnn heuristic"].set_index(["split", "math"])
    # Even the small model picks better than cuDNN's heuristic under strict FP32.
    assert (ours.loc[("Test-set-II", "fma"), "mean_regret_pct"]
            < heuristic.loc[("Test-set-II", "fma"), "mean_regret_pct"])
    networks = results["networks"]
    assert not networks.empty and (networks["ours_ms"] >= networks["oracle_ms"] - 1e-9).all()
    assert all(f.stat().st_size > 0 for f in evaluated.report.parent.iterdir())
    assert "## Test-set-II" in evaluated.report.read_text()


@pytest.mark.slow
def test_the_energy_models_are_scored_on_held_out_readings(evaluated):
    model, table, results = evaluated.model, evaluated.table, evaluated.results
    energy, picks = results["energy"], results["energy_selection"]
    fits = energy[(energy["split"] == "Test-set-II") & (energy["math"] == "fma")]
    # Every algorithm with an energy model is scored on the held-out readings, energy and power.
    assert set(fits["algo"]) == set(model.predictors["fma"].power)
    assert set(fits["quantity"]) == {"energy_mj", "power_w"}
    assert (fits["n"] > 0).all() and np.isfinite(fits["mape_pct"]).all()
    held_out = table[(table["split"] == "test2") & (table["math"] == "fma") & table["energy_mj"].notna()
                     & (table["algo"] == "SEER_IMPLICIT_GEMM")]
    assert fits.set_index(["algo", "quantity"]).loc[("SEER_IMPLICIT_GEMM", "power_w"), "n"] == len(held_out)
    judged = picks[(picks["split"] == "Test-set-II") & (picks["math"] == "fma")].set_index(["judged_by", "policy"])
    assert judged.loc[("energy", "least energy measured"), "top1_pct"] == 100
    assert judged.loc[("time", "fastest measured"), "top1_pct"] == 100
    # Where the least energy and the fastest differ, each pays by the other's measure.
    assert judged.loc[("energy", "fastest measured"), "mean_regret_pct"] >= 0
    assert judged.loc[("time", "least energy measured"), "mean_regret_pct"] >= 0
    report = evaluated.report.read_text()
    assert "## Energy per call" in report and "least energy measured" in report


@pytest.mark.slow
def test_the_evaluate_command_writes_the_report_and_plots(evaluated, small_models):
    assert evaluated.code == 0
    text = evaluated.report.read_text()
    assert "## Test-set-I" in text and "## Test-set-II" in text and "cudnn heuristic" in text
    assert len(list(evaluated.report.parent.glob("h100-evaluation-*.png"))) == 5
    assert "Test-set-II" in evaluated.printed and "top-1" in evaluated.printed
    assert "evaluating: step 1/" in evaluated.logged  # progress, as log lines without a terminal
    assert main(["evaluate", "--gpu", "a100", "--models-dir", str(small_models)]) == 2


@pytest.mark.parametrize("content, words", [
    (b"not parquet at all", "general.parquet: cannot be read as Parquet"),
    (b"", "general.parquet: cannot be read as Parquet"),
])
def test_evaluate_on_a_broken_table_is_one_line(small_models, tmp_path, capsys, content, words):
    (tmp_path / "h100" / "measurements").mkdir(parents=True)
    (tmp_path / "h100" / "measurements" / "general.parquet").write_bytes(content)
    code = main(["evaluate", "--gpu", "h100", "--models-dir", str(small_models), "--data-dir", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err and words in err

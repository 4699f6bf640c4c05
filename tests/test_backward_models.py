"""Models of the backward passes, trained on the committed H200 backward runs: a model per
pass, saved under GPU/PASS/, loaded by pass, predicting the pass's own algorithms and
PyTorch's own dgrad or wgrad, from Python and from ``seer predict --pass``."""

import json

import numpy as np
import pandas as pd
import pytest

from seer.algorithms import algorithm_names
from seer.cli import main
from seer.dataset.build import read_measurements
from seer.errors import InputError
from seer.hardware.gpus import get_gpu_spec
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict import persist

from conftest import REPO, small_selector

pytestmark = pytest.mark.slow
H200 = REPO / "data" / "h200"
PASS = "bwd_filter"


#: Shapes of the fixture's census per pass: train-split layers whose backward runs it leaves out.
CENSUS_SHAPES = 300


def census_of_runs(runs: pd.DataFrame) -> pd.DataFrame:
    """The census rows cuDNN would give for timed runs of its algorithms (what
    ``test_backward_census_answers_match_what_the_timed_backward_runs_saw`` checks on a GPU):
    a run that got a workspace was accepted by the workspace call; any other keeps its status."""
    from seer.schema import CENSUS_COLUMNS

    runs = runs[runs["algo"].isin(algorithm_names("cudnn", pass_=None))]
    asked = runs.assign(status=runs["status"].where(runs["workspace_bytes"].isna(), "ok"),
                        heuristic_math_type=pd.NA)
    return asked[list(CENSUS_COLUMNS)].reset_index(drop=True)


@pytest.fixture(scope="module")
def h200_table() -> pd.DataFrame:
    """The committed H200 measurements, every pass (read once for the fixtures below)."""
    return read_measurements(H200 / "measurements")


@pytest.fixture(scope="module")
def backward_census(h200_table):
    """A census of the forward (a sample of the committed H200 census) and of both backward
    passes (from train-split layers whose runs the fixture's dataset leaves out), and the
    shapes of wgrad's census with every wgrad algorithm answered under fma."""
    from seer.dataset.build import read_census

    table = h200_table
    rng = np.random.default_rng(1)
    backward = table[(table["split"] == "train") & (table["pass"] != "fwd")]
    answered = backward[(backward["math"] == "fma") & backward["algo"].isin(algorithm_names("cudnn", pass_=None))]
    full = answered.groupby("shape_id")["algo"].nunique()
    complete = np.sort(full.index[full == len(algorithm_names("cudnn", pass_=None)) - len(algorithm_names("cudnn"))])
    ids = rng.choice(complete, size=CENSUS_SHAPES, replace=False)
    forward = read_census(H200 / "census", passes=("fwd",))
    forward = forward[forward["shape_id"].isin(rng.choice(forward["shape_id"].unique(), 200, replace=False))]
    census = pd.concat([forward.drop(columns="pass"), census_of_runs(backward[backward["shape_id"].isin(ids)])],
                       ignore_index=True)
    return census, set(ids)


@pytest.fixture(scope="module")
def backward_models(tmp_path_factory, backward_census, h200_table):
    """A models directory with a small strict-FP32 wgrad model of a sample of the H200 runs,
    its first stage learnt from the census's wgrad answers."""
    from seer.dataset.tables import write_parts
    from seer.schema import DatasetDir
    from seer.training import train as training

    table = h200_table
    census, census_ids = backward_census
    rng = np.random.default_rng(0)
    keep = []
    for split, count in (("train", 500), ("test1", 300)):
        ids = np.sort(table.loc[(table["split"] == split) & (table["pass"] != "fwd")
                                & ~table["shape_id"].isin(census_ids), "shape_id"].unique())
        keep.extend(rng.choice(ids, size=count, replace=False))
    keep.extend(table.loc[table["split"] == "test2", "shape_id"].unique())
    data = tmp_path_factory.mktemp("data")
    write_parts(table[table["shape_id"].isin(keep)].drop(columns="pass"), DatasetDir(data / "h200").measurements)
    write_parts(census, DatasetDir(data / "h200").census)
    model = training.train(data / "h200", get_gpu_spec("h200"), maths=["fma"], selector=small_selector(),
                           pass_=PASS, use_census=True)
    root = tmp_path_factory.mktemp("models")
    persist.save(model, persist.model_dir(root, "h200", PASS))
    return root


def test_a_backward_models_first_stage_learns_from_the_census_of_its_pass(backward_models, backward_census):
    """``seer train --pass bwd_filter`` learns support and workspace from the census's wgrad
    answers: not from the training runs, and not from the forward's or dgrad's answers."""
    model = persist.load_model("h200", models_dir=backward_models, pass_=PASS)
    fma = model.card["maths"]["fma"]
    assert fma["first_stage"] == "census"
    assert fma["census_shapes"] == len(backward_census[1])  # wgrad's census shapes only
    assert model.card["training_data"]["census_sha256"]
    assert set(fma["support"]) <= set(algorithm_names("cudnn", pass_=PASS))


def test_a_backward_model_is_saved_under_its_pass_and_loaded_by_it(backward_models):
    assert persist.available(backward_models, PASS) == ["h200"] and persist.available(backward_models) == []
    model = persist.load_model("h200", models_dir=backward_models, pass_=PASS)
    assert model.pass_ == PASS and f"({PASS})" in repr(model)
    assert set(model.predictor("fma").algorithms) <= set(algorithm_names("cudnn", pass_=PASS))
    assert set(model.predictor("fma").policies) <= set(algorithm_names("pytorch", pass_=PASS))
    assert model.baselines == {} and model.card["pass"] == PASS
    with pytest.raises(InputError, match="no trained bwd_data model"):
        persist.load_model("h200", models_dir=backward_models, pass_="bwd_data")
    with pytest.raises(InputError, match="no trained models"):
        persist.load_model(models_dir=backward_models)  # the forward's


def test_backward_predictions_rank_the_pass_algorithms_and_guard_with_pytorchs_wgrad(backward_models):
    model = persist.load_model("h200", models_dir=backward_models, pass_=PASS)
    runs = read_measurements(H200 / "measurements", ["shape_id", "split", *LAYER_COLUMNS], passes=(PASS,))
    layers = runs[runs["split"] == "test2"].drop_duplicates("shape_id").head(40)[list(LAYER_COLUMNS)]
    predictions = model.predict(layers, "fma")
    ranked = predictions.dropna(subset=["algo"])
    assert set(ranked["algo"]) <= set(algorithm_names("cudnn", pass_=PASS)) and len(set(ranked["algo"])) >= 2
    assert (ranked["predicted_ms"] > 0).all()
    assert predictions["pytorch_ms"].notna().all()  # PyTorch's own wgrad, predicted
    assert set(predictions["recommended"].dropna()) <= set(ranked["algo"]) | {"PYTORCH"}


def test_seer_predict_pass_writes_the_pass_algorithms(backward_models, tmp_path, capsys):
    layers = tmp_path / "layers.csv"
    layers.write_text("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,pad_h,pad_w\n32,64,64,56,56,3,3,1,1\n")
    out = tmp_path / "pred.json"
    assert main(["predict", str(layers), "--gpu", "h200", "--pass", PASS, "--math", "fma",
                 "--models-dir", str(backward_models), "-o", str(out)]) == 0
    algos = [a["algo"] for a in json.loads(out.read_text())[0]["algorithms"]]
    assert algos and set(algos) <= set(algorithm_names("cudnn", pass_=PASS))
    assert main(["predict", str(layers), "--gpu", "h200", "--pass", PASS, "--math", "fma",
                 "--models-dir", str(backward_models)]) == 0
    assert "h200 backward filter (wgrad), fma math" in capsys.readouterr().out
    assert main(["predict", str(layers), "--gpu", "h200", "--math", "fma", "--models-dir", str(backward_models)]) == 2
    assert "no trained model for GPU 'h200'" in capsys.readouterr().err


def test_backward_options_that_do_not_apply_are_refused_in_one_line(backward_models, tmp_path, capsys):
    layers = tmp_path / "layers.csv"
    layers.write_text("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n1,8,8,8,8,3,3\n")
    assert main(["predict", str(layers), "--gpu", "h200", "--pass", "all", "--cudnn-answers",
                 "--models-dir", str(backward_models)]) == 2
    assert main(["train", "--gpu", "h200", "--pass", PASS, "--policies-only",
                 "--models-dir", str(backward_models)]) == 2
    with pytest.raises(SystemExit) as exit_:  # argparse's choices
        main(["predict", str(layers), "--pass", "backward"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--cudnn-answers is for one pass" in err and "--policies-only" in err
    from seer.training.train import train

    with pytest.raises(InputError, match="unknown pass"):
        train(H200, get_gpu_spec("h200"), pass_="backward")


def test_seer_calibrate_pass_fits_the_intervals_of_that_pass_on_the_committed_runs(backward_models, tmp_path):
    """``seer calibrate --pass bwd_filter`` refits the wgrad model's intervals on the calibration
    half of Test-set-I's wgrad runs, in the pass's folder; its times do not change."""
    import shutil

    from seer.training.calibrate import calibration_half

    root = tmp_path / "models"
    shutil.copytree(backward_models, root)
    layers = pd.DataFrame([dict(batch=32, in_ch=64, out_ch=64, in_h=56, in_w=56, kernel_h=3, kernel_w=3,
                                pad_h=1, pad_w=1)])
    before = persist.load_model("h200", models_dir=root, pass_=PASS).predict(layers, "fma")
    assert main(["calibrate", "--gpu", "h200", "--pass", PASS, "--data-dir", str(REPO / "data"),
                 "--models-dir", str(root)]) == 0
    assert not (root / "h200" / "model.json").exists()  # the forward's folder is not written
    model = persist.load_model("h200", models_dir=root, pass_=PASS)
    runs = read_measurements(H200 / "measurements", ["shape_id", "split", "math"], passes=(PASS,))
    test1 = runs.loc[(runs["split"] == "test1") & (runs["math"] == "fma"), "shape_id"].unique()
    assert model.card["calibration"]["shapes"]["fma"] == int(calibration_half(test1).sum())
    after = model.predict(layers, "fma")
    pd.testing.assert_series_equal(after["predicted_ms"], before["predicted_ms"])
    assert after["predicted_ms_high80"].notna().all()


def test_the_committed_backward_runs_read_by_pass(tmp_path):
    """The tidy table's pass comes from the registry, and a reader of one pass sees only its runs."""
    runs = read_measurements(H200 / "measurements", ["algo", "pass", "status"])
    assert set(runs["pass"]) == {"fwd", "bwd_data", "bwd_filter"}
    assert set(runs.loc[runs["pass"] == "fwd", "algo"]) == set(algorithm_names(pass_="fwd"))
    dgrad = read_measurements(H200 / "measurements", ["algo"], passes=("bwd_data",))
    assert set(dgrad["algo"]) == set(algorithm_names(pass_="bwd_data"))
    assert list(dgrad.columns) == ["algo"]


def test_backward_choice_benchmark_measures_pytorch_against_the_fastest(tmp_path):
    from conftest import benchmark_module

    choice = benchmark_module("backward_choice")
    assert choice.main(["--gpu", "h200", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "backward-choice.json").read_text())
    held_out = results["held-out networks (Test-set-II)"]
    for key, r in held_out.items():
        assert r["layers"] > 600 and sum(r["fastest_counts"].values()) == r["layers"]
        for v in r["vs_fastest"].values():  # the fastest legacy algorithm bounds every legacy pick
            assert v["within_1_percent"] <= 1
    # Under strict FP32 PyTorch's dgrad leaves a third of the time on the table (DATASHEET, docs/backward.md).
    assert held_out["bwd_data/fma"]["vs_fastest"]["PyTorch default"]["total_ratio"] > 1.2
    assert held_out["bwd_data/fma"]["vs_fastest"]["cuDNN heuristic (v7 first)"]["total_ratio"] >= 1


def test_deterministic_picks_leave_out_the_atomic_algorithms(backward_models, tmp_path):
    layers = tmp_path / "layers.csv"
    layers.write_text("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,pad_h,pad_w\n"
                      "32,64,64,56,56,3,3,1,1\n8,256,256,14,14,3,3,1,1\n64,32,64,28,28,1,1,0,0\n")
    common = ["predict", str(layers), "--gpu", "h200", "--pass", PASS, "--math", "fma",
              "--models-dir", str(backward_models)]
    out = tmp_path / "all.csv"
    assert main([*common, "-o", str(out)]) == 0
    every = set(pd.read_csv(out)["algo"])
    assert every & {"BWD_FILTER_ALGO_0", "BWD_FILTER_ALGO_3"}  # the atomic ones rank when allowed
    assert main([*common, "--deterministic", "-o", str(out)]) == 0
    kept = set(pd.read_csv(out)["algo"])
    assert kept and kept == {a for a in every if a not in ("BWD_FILTER_ALGO_0", "BWD_FILTER_ALGO_3")}


def test_seer_train_learns_kernel_paths_where_the_pass_defaults_to_them_as_the_shipped_models_did():
    """wgrad's time regressors may read their algorithms' kernel paths unless told otherwise; the
    forward's and dgrad's do not. The shipped models' cards say they were trained so."""
    from seer.algorithms import PASSES
    from seer.cli import build_parser
    from seer.training.train import DEFAULT_KERNEL_PATHS

    assert set(DEFAULT_KERNEL_PATHS) == set(PASSES) and DEFAULT_KERNEL_PATHS["bwd_filter"] > 0
    assert build_parser().parse_args(["train", "--gpu", "h200"]).kernel_paths is None
    for card, pass_ in ((REPO / "models" / "h200" / "bwd_data" / "model.json", "bwd_data"),
                        (REPO / "models" / "h200" / "bwd_filter" / "model.json", "bwd_filter"),
                        (REPO / "models" / "h100" / "model.json", "fwd")):
        assert json.loads(card.read_text())["max_kernel_paths"] == DEFAULT_KERNEL_PATHS[pass_], card

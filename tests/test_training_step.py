"""The training step (``seer predict --pass all``, :func:`seer.predict.step.training_step`): the
shipped H200 models of the three passes, one row per layer, each pass's recommended algorithm
and time, and sums that agree with the passes' own predictions."""

import json

import numpy as np
import pandas as pd
import pytest

from seer.algorithms import PASSES, algorithm_names, get_algorithm
from seer.cli import main
from seer.errors import InputError
from seer.layers.files import read_layers
from seer.predict import persist
from seer.predict.step import STEP_COLUMNS, training_step
from seer.schema import INTERVAL_LEVELS, PYTORCH_CHOICE

from conftest import REPO

LAYERS = REPO / "data" / "h200" / "Test-set-II-general.csv"


@pytest.fixture(scope="module")
def models():
    return persist.load_passes("h200", math="fma", models_dir=REPO / "models")


@pytest.fixture(scope="module")
def layers():
    return read_layers(LAYERS).head(60).reset_index(drop=True)


def test_the_models_of_every_pass_load_for_a_gpu_that_has_them(models):
    assert list(models) == list(PASSES) and all(models[p].pass_ == p and models[p].gpu == "h200" for p in PASSES)
    assert persist.resolve_gpu(None, REPO / "models", PASSES) == "h200"  # the only GPU with all three
    with pytest.raises(InputError, match="no trained fwd, bwd_data, bwd_filter model for GPU 'h100'"):
        persist.load_passes("h100", models_dir=REPO / "models")


def test_a_step_row_sums_the_passes_recommended_times(models, layers):
    step = training_step(models, layers, "fma")
    assert list(step.columns) == list(STEP_COLUMNS) and len(step) == len(layers)
    parts = step[[f"{p}_ms" for p in PASSES]].to_numpy()
    assert np.allclose(step["step_ms"], parts.sum(axis=1))
    assert np.allclose(step["pytorch_step_ms"], step[[f"{p}_pytorch_ms" for p in PASSES]].to_numpy().sum(axis=1))
    for level in INTERVAL_LEVELS:
        assert (step[f"step_ms_low{level}"] <= step["step_ms"]).all()
        assert (step["step_ms"] <= step[f"step_ms_high{level}"]).all()
    assert (step["step_ms"] > 0).all()


def test_each_pass_of_the_step_is_what_that_pass_recommends(models, layers):
    step = training_step(models, layers, "fma")
    for pass_ in PASSES:
        picks = models[pass_].pick(layers, "fma")
        assert step[f"{pass_}_algo"].tolist() == picks["recommended"].tolist()
        expected = np.where(picks["recommended"] == PYTORCH_CHOICE, picks["pytorch_ms"], picks["best_ms"])
        assert np.allclose(step[f"{pass_}_ms"], expected)
        named = set(step[f"{pass_}_algo"]) - {PYTORCH_CHOICE}
        assert named <= set(algorithm_names(pass_=pass_)), pass_
    # the step's own extrapolation mark: any pass's
    marks = np.any([models[p].pick(layers, "fma")["extrapolated"].to_numpy() for p in PASSES], axis=0)
    assert step["extrapolated"].tolist() == marks.tolist()


def test_a_step_refuses_models_of_other_passes_or_gpus(models, layers):
    with pytest.raises(InputError, match="missing: bwd_filter"):
        training_step({p: models[p] for p in PASSES[:2]}, layers, "fma")
    swapped = dict(models, bwd_data=models["bwd_filter"])
    with pytest.raises(InputError, match="given for bwd_data predicts bwd_filter"):
        training_step(swapped, layers, "fma")


def test_seer_predict_pass_all_writes_one_row_per_layer(tmp_path, capsys):
    out = tmp_path / "step.csv"
    assert main(["predict", str(LAYERS), "--gpu", "h200", "--pass", "all", "--math", "fma", "-o", str(out)]) == 0
    written = pd.read_csv(out, keep_default_na=False, na_values=[""])
    assert len(written) == len(read_layers(LAYERS)) and list(written["layer"]) == list(range(len(written)))
    assert set(STEP_COLUMNS) <= set(written.columns)
    assert np.allclose(written["step_ms"], written[[f"{p}_ms" for p in PASSES]].sum(axis=1), rtol=1e-5)
    text = capsys.readouterr().out
    assert "the training step of" in text and "ms per step with seer's choices" in text


def test_seer_predict_pass_all_shows_a_table_and_writes_json(tmp_path, capsys):
    layers = tmp_path / "layers.csv"
    layers.write_text("name,batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,pad_h,pad_w\n"
                      "conv1,32,64,64,56,56,3,3,1,1\nconv2,32,256,64,56,56,1,1,0,0\n")
    assert main(["predict", str(layers), "--gpu", "h200", "--pass", "all", "--math", "fma"]) == 0
    text = capsys.readouterr().out
    assert "one training step per layer" in text and "dgrad" in text and "PyTorch step ms" in text
    out = tmp_path / "step.json"
    assert main(["predict", str(layers), "--pass", "all", "--math", "default", "-o", str(out)]) == 0
    objects = json.loads(out.read_text())
    assert [o["name"] for o in objects] == ["conv1", "conv2"] and all(o["math"] == "default" for o in objects)


def test_deterministic_steps_leave_out_the_atomic_backward_algorithms(tmp_path):
    out = tmp_path / "step.csv"
    assert main(["predict", str(LAYERS), "--gpu", "h200", "--pass", "all", "--math", "fma", "--deterministic",
                 "-o", str(out)]) == 0
    written = pd.read_csv(out)
    for pass_ in PASSES:
        named = set(written[f"{pass_}_algo"].dropna()) - {PYTORCH_CHOICE}
        assert all(get_algorithm(a).deterministic for a in named), pass_


@pytest.mark.parametrize("extra, message", [
    (["--rows", "layer"], "--rows is for one pass"),
    (["--objective", "energy"], "--objective is for one pass"),
    (["--gpu", "h100"], "no trained fwd, bwd_data, bwd_filter model for GPU 'h100'"),
    (["--algo", "NO_SUCH_ALGO"], "unknown algorithm 'NO_SUCH_ALGO'"),
])
def test_seer_predict_pass_all_refuses_what_has_no_meaning_for_a_step(tmp_path, capsys, extra, message):
    out = [] if "--rows" not in extra else ["-o", str(tmp_path / "x.csv")]
    code = main(["predict", str(LAYERS), "--pass", "all", "--math", "fma", *extra, *out])
    assert code == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "x.csv").exists()


def test_algo_limits_the_passes_whose_algorithms_it_names(tmp_path):
    out = tmp_path / "step.csv"
    assert main(["predict", str(LAYERS), "--pass", "all", "--math", "fma", "--algo", "cudnn,BWD_FILTER_ALGO_1",
                 "-o", str(out)]) == 0
    written = pd.read_csv(out)
    assert set(written["fwd_algo"]) - {PYTORCH_CHOICE} <= set(algorithm_names("cudnn"))
    assert set(written["bwd_filter_algo"]) <= {"BWD_FILTER_ALGO_1", PYTORCH_CHOICE}
    # no dgrad algorithm named: dgrad ranks all of its own
    assert len(set(written["bwd_data_algo"]) - {PYTORCH_CHOICE}) >= 2


def test_the_training_step_is_part_of_the_small_api(layers):
    import seer

    assert {"load_passes", "training_step"} <= set(seer.__all__)
    step = seer.training_step(seer.load_passes("h200", math="fma", models_dir=REPO / "models"), layers, "fma")
    assert list(step.columns) == list(STEP_COLUMNS) and len(step) == len(layers)


def test_a_file_without_layers_gives_the_header_alone(tmp_path):
    empty = tmp_path / "empty.csv"
    empty.write_text("batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w\n")
    out = tmp_path / "step.csv"
    assert main(["predict", str(empty), "--gpu", "h200", "--pass", "all", "-o", str(out)]) == 0
    written = pd.read_csv(out)
    assert written.empty and set(STEP_COLUMNS) <= set(written.columns)
    assert main(["predict", str(empty), "--gpu", "h200", "--pass", "all", "-o", str(tmp_path / "step.json")]) == 0
    assert json.loads((tmp_path / "step.json").read_text()) == []

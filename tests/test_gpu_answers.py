"""cuDNN's own answers on a real GPU (skipped without one): asked from descriptors, used by
``seer predict --cudnn-answers`` and ``seer.torch.apply``."""

import numpy as np
import pandas as pd
import pytest

from seer.algorithms import algorithm_names, get_algorithm
from seer.cli import main
from seer.layers.shapes import ConvShape

pytestmark = pytest.mark.gpu

LAYERS = [ConvShape.square(32, 256, 56, 64, 1), ConvShape.square(8, 64, 56, 64, 3, 2, 1),
          ConvShape.square(1, 96, 28, 96, 3, 1, 1, groups=96), ConvShape.square(32, 256, 56, 64, 1)]


def _are_the_direct_calls(answers: pd.DataFrame, pass_: str = "fwd") -> None:
    """The first three layers' answers are what cuDNN's own workspace call of ``pass_`` gives."""
    from seer.gpu import cudnn

    with cudnn.Handle() as handle:
        for i, layer in enumerate(LAYERS[:3]):
            with cudnn.ConvolutionProblem(handle, layer, "fma") as problem:
                for name in answers.columns:
                    enum = get_algorithm(name).enum
                    try:
                        expected = float(problem.workspace_size(enum) if pass_ == "fwd"
                                         else problem.backward_workspace_size(pass_, enum))
                    except cudnn.CudnnError:
                        expected = np.nan
                    assert np.isclose(answers.at[i, name], expected, equal_nan=True), (layer, name)


def test_answers_are_the_census_calls_and_the_predictions_follow_them():
    from seer.gpu.answers import cudnn_workspaces
    from seer.predict.persist import load_model

    answers = cudnn_workspaces(LAYERS, "fma")
    assert list(answers.columns) == algorithm_names("cudnn") and len(answers) == len(LAYERS)
    assert answers.iloc[0].equals(answers.iloc[3])  # one question per distinct layer, one row per layer
    _are_the_direct_calls(answers)
    assert np.isnan(answers.at[1, "FFT"])  # cuDNN's FFT takes no stride 2
    assert answers.at[0, "IMPLICIT_GEMM"] == 0
    model = load_model("h100", math="fma")
    predicted = model.predict(LAYERS, "fma", algorithms="cudnn", workspaces=answers)
    ran = predicted.dropna(subset=["algo"]).groupby("layer")["algo"].agg(set)
    for i in range(len(LAYERS)):
        assert set(ran[i]) <= {a for a in answers.columns if np.isfinite(answers.at[i, a])}


def test_seer_predict_asks_cudnn(tmp_path, capsys):
    layers = tmp_path / "layers.csv"
    fields = ["batch", "in_ch", "out_ch", "groups", "in_h", "in_w", "kernel_h", "kernel_w", "stride_h", "stride_w",
              "pad_h", "pad_w"]  # a 2D layer file
    pd.DataFrame([layer.as_dict() for layer in LAYERS])[fields].to_csv(layers, index=False)
    out = tmp_path / "out.csv"
    assert main(["predict", str(layers), "--math", "fma", "--cudnn-answers", "-o", str(out)]) == 0
    frame = pd.read_csv(out)
    assert not ((frame["layer"] == 1) & (frame["algo"] == "FFT")).any()


def test_on_a_gpu_cudnns_answers_time_its_algorithms():
    from dataclasses import replace

    from seer.gpu.answers import cudnn_workspaces
    from seer.predict.persist import load_model

    model = load_model("h100", math="fma", cudnn_answers=True)
    assert model.answer_times
    answers = cudnn_workspaces(LAYERS, "fma")
    learnt = model.predict(LAYERS, "fma", workspaces=answers).set_index(["layer", "algo"])["predicted_ms"]
    shape_only = replace(model, answer_times={}).predict(LAYERS, "fma", workspaces=answers).set_index(
        ["layer", "algo"])["predicted_ms"]
    assert learnt.index.equals(shape_only.index)  # the same algorithms run: cuDNN's answer
    cudnn = learnt.index.get_level_values("algo").isin(list(model.answer_times["fma"].regressors))
    assert not np.allclose(learnt[cudnn], shape_only[cudnn])  # timed from the answers
    assert np.allclose(learnt[~cudnn], shape_only[~cudnn])  # seer's own kernels keep their times


@pytest.mark.parametrize("pass_", ["bwd_data", "bwd_filter"])
def test_a_backward_pass_asks_its_own_calls_and_seer_predict_takes_them(tmp_path, pass_):
    from seer.gpu.answers import cudnn_workspaces

    answers = cudnn_workspaces(LAYERS, "fma", pass_=pass_)
    assert list(answers.columns) == algorithm_names("cudnn", pass_=pass_) and len(answers) == len(LAYERS)
    _are_the_direct_calls(answers, pass_)
    layers, out = tmp_path / "layers.csv", tmp_path / "out.csv"
    pd.DataFrame([layer.as_dict() for layer in LAYERS]).to_csv(layers, index=False)
    assert main(["predict", str(layers), "--gpu", "h200", "--pass", pass_, "--math", "fma", "--cudnn-answers",
                 "-o", str(out)]) == 0
    ran = pd.read_csv(out).dropna(subset=["algo"]).groupby("layer")["algo"].agg(set)
    for i in range(len(LAYERS)):  # only what cuDNN takes (and PyTorch's own, a policy)
        assert ran[i] - set(algorithm_names("pytorch", pass_=pass_)) <= {
            a for a in answers.columns if np.isfinite(answers.at[i, a])}

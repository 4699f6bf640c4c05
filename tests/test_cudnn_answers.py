"""cuDNN's own answers in place of the first stage's guesses (the GPU side is
tests/test_gpu_answers.py): which algorithms run follows them, and nothing else changes
unless the workspace answers are asked for too."""

import numpy as np
import pandas as pd
import pytest

from seer.algorithms import algorithm_names
from seer.layers.shapes import ConvShape
from seer.predict.persist import load_model
from seer.predict.predictors import with_cudnn_answers


@pytest.fixture(scope="module")
def model():
    return load_model("h100", math="fma")


def test_the_algorithms_cudnn_refuses_get_no_time_and_the_rest_keep_theirs(model):
    layers = [ConvShape.square(8, 64, 56, 64, 3, 2, 1), ConvShape.square(32, 256, 56, 64, 1)]
    guessed = model.predict(layers, "fma", algorithms="cudnn")
    answers = pd.DataFrame(0.0, index=range(2), columns=algorithm_names("cudnn"))
    answers.loc[0, ["FFT", "GEMM"]] = np.nan  # refused on the first layer
    answered = model.predict(layers, "fma", algorithms="cudnn", workspaces=answers)
    first = set(answered.loc[answered["layer"] == 0, "algo"])
    assert "FFT" not in first and "GEMM" not in first and first
    both = guessed.merge(answered, on=["layer", "algo"], suffixes=("_guessed", "_answered"))
    assert len(both) and np.allclose(both["predicted_ms_guessed"], both["predicted_ms_answered"])
    with pytest.raises(ValueError, match="cuDNN answered for 1 layers"):
        model.predict(layers, "fma", workspaces=answers.iloc[:1])


def test_workspace_answers_replace_the_path_and_size_only_when_asked(model):
    predictor = model.predictor("fma")
    from seer.predict.features import shape_features
    from seer.layers.shapes import layer_frame

    F = shape_features(layer_frame([ConvShape.square(32, 256, 56, 64, 3, 1, 1)]), predictor.spec).to_numpy()
    guessed = predictor.workspace.answers(F)
    sizes = pd.DataFrame([[2.0 ** 20] * len(algorithm_names("cudnn"))], columns=algorithm_names("cudnn"))
    j = predictor.algorithms.index("GEMM")
    runs_only = with_cudnn_answers(guessed, predictor.algorithms, sizes)
    assert runs_only[0, 3 * j] == 1 and np.array_equal(runs_only[0, 3 * j + 1:3 * j + 3], guessed[0, 3 * j + 1:3 * j + 3])
    every = with_cudnn_answers(guessed, predictor.algorithms, sizes, workspace=True)
    assert list(every[0, 3 * j:3 * j + 3]) == [1.0, 1.0, 20.0]
    seer = predictor.algorithms.index("SEER_IMPLICIT_GEMM")  # not cuDNN's: its guesses stay
    assert np.array_equal(every[:, 3 * seer:3 * seer + 3], guessed[:, 3 * seer:3 * seer + 3], equal_nan=True)


def test_a_backward_model_takes_the_workspace_answer_as_the_kernel_path():
    """Inception-v3's 7x1 wgrads at 17x17, batch 8, measured on the H200 (Test-set-II): cuDNN's
    BWD_FILTER_ALGO_1 runs its direct kernel there (no workspace), 14-16x slower than at the
    XMMA path the first stage guesses. Given cuDNN's answers, a backward model takes the path
    from them (PATH_ANSWER_PASSES) and times the algorithm near its measurement."""
    from seer.dataset.build import read_measurements
    from seer.layers.shapes import LAYER_COLUMNS
    from seer.schema import DatasetDir

    runs = read_measurements(DatasetDir("data/h200").measurements, passes=("bwd_filter",),
                             columns=[*LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms",
                                      "workspace_bytes"])
    # Test-set-II's inception-v3 layers: the grids hold other 7x1 layers, some too small for the paths to differ.
    runs = runs[(runs["split"] == "test2") & (runs["math"] == "fma") & (runs["kernel_h"] == 7) & (runs["kernel_w"] == 1)
                & (runs["in_h"] == 17) & (runs["batch"] == 8) & runs["algo"].str.startswith("BWD_FILTER_")]
    answers = runs.pivot_table(index="shape_id", columns="algo", values="workspace_bytes").where(
        lambda w: w.notna())  # NaN: not supported
    layers = runs.drop_duplicates("shape_id").set_index("shape_id").loc[answers.index, list(LAYER_COLUMNS)]
    measured = runs[runs["algo"] == "BWD_FILTER_ALGO_1"].set_index("shape_id").loc[answers.index, "time_ms"]
    assert len(layers) >= 3 and (answers["BWD_FILTER_ALGO_1"] == 0).all()
    model = load_model("h200", math="fma", pass_="bwd_filter")

    def algo_1(workspaces):
        p = model.predict(layers.reset_index(drop=True), "fma", workspaces=workspaces)
        return p[p["algo"] == "BWD_FILTER_ALGO_1"].sort_values("layer")["predicted_ms"].to_numpy()

    guessed = algo_1(None)
    answered = algo_1(answers.reindex(columns=algorithm_names("cudnn", pass_="bwd_filter")).reset_index(drop=True))
    assert (guessed < 0.3 * measured.to_numpy()).all()  # the XMMA path's time
    assert (np.abs(answered / measured.to_numpy() - 1) < 0.2).all()  # the direct kernel's

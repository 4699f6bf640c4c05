"""wgrad's kernel paths mixed in prediction: the time regressor that learnt each traced run's
own path is asked once per path and its answers weighed by the path classifier's guess."""

from __future__ import annotations

import numpy as np
import pytest

from seer.predict import predictors
from seer.predict.predictors import WITH_WORKSPACE, WITHOUT_WORKSPACE, likeliest_path_ratio, path_mixture


class _PerPath:
    """A regressor whose ratio is the path's (the indicator columns after one input)."""

    def __init__(self, ratios):
        self.ratios, self.seen = np.asarray(ratios, dtype=float), []

    def predict(self, X):
        self.seen.append(X.copy())
        indicators = X[:, 1:]
        assert set(np.unique(indicators)) <= {0.0, 1.0} and np.allclose(indicators.sum(axis=1), 1)
        return indicators @ self.ratios


def test_the_pick_weighs_the_paths_geometrically_and_the_report_takes_the_likeliest():
    regressor = _PerPath([1.0, 10.0])
    inputs = np.zeros((3, 1))
    proba = np.array([[0.9, 0.1], [0.2, 0.8], [0.05, 0.95]])
    reported, weighed = path_mixture(regressor, inputs, proba)
    assert np.allclose(weighed, np.exp(proba @ np.log([1.0, 10.0])))
    # Between a fast path and one 10x slower, the fast one is reported unless it is unlikely,
    # as between the workspace's two paths.
    assert reported.tolist() == [1.0, 1.0, 10.0]
    two = {WITH_WORKSPACE: np.ones(3), WITHOUT_WORKSPACE: np.full(3, 10.0)}
    assert np.array_equal(reported, likeliest_path_ratio(two, proba[:, 0]))


def test_a_negligible_path_is_left_out_and_its_regressor_not_asked(monkeypatch):
    monkeypatch.setattr(predictors, "NEGLIGIBLE_PATH", 1e-3)
    regressor = _PerPath([1.0, 10.0, 100.0])
    proba = np.array([[0.9995, 0.0004, 0.0001], [0.6, 0.4, 0.0]])
    reported, weighed = path_mixture(regressor, np.zeros((2, 1)), proba)
    assert weighed[0] == pytest.approx(1.0)
    assert weighed[1] == pytest.approx(np.exp(0.4 * np.log(10.0)))
    asked = np.vstack(regressor.seen)[:, 1:]
    assert len(asked) == 3 and not asked[:, 2].any()  # path 0 on both rows, path 1 on the second
    assert reported.tolist() == [1.0, 1.0]


def test_the_mix_is_a_choice_of_the_model_file_and_absent_from_files_without_it(tmp_path):
    from seer.predict.persist import load_model

    model = load_model("h200", math="fma", pass_="bwd_filter")
    predictor = model.predictors["fma"]
    assert not predictor.kernel_path_mix and "kernel_path_mix" not in predictor.state()
    mixed = predictors.AlgorithmPredictor.from_state({**predictor.state(), "kernel_path_mix": True})
    assert mixed.kernel_path_mix and mixed.state()["kernel_path_mix"] is True
    with pytest.raises(predictors.StateError):
        predictors.AlgorithmPredictor.from_state({**predictor.state(), "kernel_path_mix": "yes"})
    layers = {"batch": [8, 32], "in_ch": [192, 512], "out_ch": [192, 256], "in_h": [17, 13], "in_w": [17, 13],
              "kernel_h": [7, 1], "kernel_w": [1, 1], "pad_h": [3, 0]}
    import pandas as pd

    frame = pd.DataFrame(layers)
    plain, with_mix = predictor.predict(frame), mixed.predict(frame)
    # Only the algorithms with a path classifier change.
    for j, algo in enumerate(predictor.algorithms):
        if algo not in predictor.kernel_paths:
            assert np.allclose(plain[:, j], with_mix[:, j], equal_nan=True), algo


def test_the_options_default_to_the_shipped_design_and_are_checked():
    from sklearn.ensemble import HistGradientBoostingClassifier

    from seer.hardware.gpus import get_gpu_spec
    from seer.training import estimators
    from seer.training.estimators import AlgorithmSelector, WorkspaceModel

    assert AlgorithmSelector().kernel_path_inputs == "known" and WorkspaceModel().path_l2 == 0.0
    assert estimators._classifier(300).l2_regularization == 0.0
    assert isinstance(estimators._classifier(300, 10.0), HistGradientBoostingClassifier)
    assert estimators._classifier(300, 10.0).l2_regularization == 10.0
    selector = AlgorithmSelector(gpu=get_gpu_spec("h200"), kernel_path_inputs="both")
    with pytest.raises(ValueError, match="kernel_path_inputs"):
        selector.fit(pd_frame(), pd_frame())


def pd_frame():
    import pandas as pd

    return pd.DataFrame({"batch": [1], "in_ch": [8], "out_ch": [8], "in_h": [8], "in_w": [8], "kernel_h": [3],
                         "kernel_w": [3]})


def test_path_l2_regularises_the_workspace_path_classifier_and_not_the_support():
    import pandas as pd

    from seer.hardware.gpus import get_gpu_spec
    from seer.training.estimators import WorkspaceModel

    n = 90
    rng = np.random.default_rng(0)
    shapes = pd.DataFrame({"batch": rng.integers(1, 64, n), "in_ch": rng.integers(8, 512, n),
                           "out_ch": rng.integers(8, 512, n), "in_h": rng.integers(7, 64, n),
                           "in_w": rng.integers(7, 64, n), "kernel_h": 3, "kernel_w": 3, "pad_h": 1, "pad_w": 1})
    workspace = np.where(np.arange(n) % 3 == 0, np.nan, np.where(np.arange(n) % 3 == 1, 0.0, 4096.0))
    fitted = WorkspaceModel(gpu=get_gpu_spec("h200"), max_iter=5, path_l2=10.0).fit(
        shapes, pd.DataFrame({"BWD_FILTER_ALGO_1": workspace}))
    assert fitted.nonzero_["BWD_FILTER_ALGO_1"].l2_regularization == 10.0
    assert fitted.runs_["BWD_FILTER_ALGO_1"].l2_regularization == 0.0

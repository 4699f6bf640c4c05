"""The design of the times learnt from cuDNN's answers, chosen per algorithm on a validation split
of the train layers: finer trees, and the transform algorithms' problem sizes as inputs, where
they time the held-out train layers closer; model files say which algorithms read those sizes,
and refuse regressors that do not read what the file says."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor

from seer.predict import persist
from seer.predict.features import TRANSFORM_FEATURES, shape_features, transform_features
from seer.predict.persist import load_model
from seer.predict.predictors import ALL_RUNS, AnswerTimePredictor, StateError
from seer.training.answers import DESIGNS, MIN_GAIN_POINTS, choose_design
from seer.training.estimators import accurate_candidates, default_candidates, finer_trees, log_time_regressor


@pytest.fixture(scope="module")
def model():
    return load_model("h100", math="fma", cudnn_answers=True)


def test_finer_trees_of_the_compact_set_are_the_accurate_set():
    accurate = accurate_candidates()
    for name, candidate in default_candidates().items():
        assert repr(finer_trees(candidate).get_params()) == repr(accurate[name].get_params()), name


def test_transform_features_take_the_fft_sizes_cudnn_ran():
    # 8x256x33x33 -> 256, 3x3, pad 1: the padded 35 points take a 64-point FFT per axis (its
    # trace ran fft2d_r2c_64x64); a 32x32 input without padding fits 32 points.
    layers = pd.DataFrame({"batch": [8, 8], "in_ch": [256, 256], "out_ch": [256, 256], "in_h": [33, 32],
                           "in_w": [33, 32], "kernel_h": [3, 1], "kernel_w": [3, 1], "pad_h": [1, 0], "pad_w": [1, 0]})
    got = transform_features(layers)
    assert tuple(got.columns) == TRANSFORM_FEATURES
    assert got["log2_fft_h"].tolist() == [6.0, 5.0] and got["fft_fill_w"].tolist() == [35 / 64, 1.0]
    assert got["log2_fft_frequencies"].iloc[0] == np.log2(64 * 33)  # a real transform's half spectrum
    # Winograd F(4x4, 3x3): 8 images of 9x9 output tiles, 36 GEMMs of 256 x 256 each.
    assert got["log2_winograd_4x3_gemm_flops"].iloc[0] == pytest.approx(np.log2(2 * 36 * 8 * 81 * 256 * 256))
    assert got["batch_power_of_2"].tolist() == [1.0, 1.0] and got["batch_mod_32"].iloc[0] == 8 / 32


def _synthetic(target) -> tuple:
    """2,000 layers' inputs (5 columns, and 3 more standing for the transform features) and a
    time ratio of ``target``(inputs with the transforms)."""
    rng = np.random.default_rng(0)
    answers = rng.normal(size=(2000, 5))
    with_transforms = np.hstack([answers, rng.normal(size=(2000, 3))])
    return answers, with_transforms, target(with_transforms, rng)


def _small_trees() -> dict:
    return {ALL_RUNS: log_time_regressor(HistGradientBoostingRegressor(max_iter=30, max_leaf_nodes=7,
                                                                       random_state=0))}


def test_validation_keeps_the_default_design_where_none_times_closer():
    answers, with_transforms, ratio = _synthetic(lambda X, rng: np.exp(rng.normal(0, 0.1, len(X))))
    runs = np.ones(len(ratio), dtype=bool)
    design, info = choose_design(answers, with_transforms, ratio, runs, {ALL_RUNS: runs}, _small_trees())
    assert design == DESIGNS[0] and info["trees"] == "chosen" and not info["transform_inputs"]
    assert len(info["validation_mape"]) == len(DESIGNS)
    assert min(info["validation_mape"].values()) > info["validation_mape"]["chosen"] - MIN_GAIN_POINTS


def test_validation_takes_the_transform_features_where_they_tell_the_time():
    answers, with_transforms, ratio = _synthetic(lambda X, rng: np.exp(0.5 * X[:, -1]))
    runs = np.ones(len(ratio), dtype=bool)
    design, info = choose_design(answers, with_transforms, ratio, runs, {ALL_RUNS: runs}, _small_trees())
    assert design[1] and info["transform_inputs"], info
    assert info["validation_runs"] == pytest.approx(0.2 * len(ratio), rel=0.1)
    # The default alone is no choice: nothing is fitted, and it is kept.
    assert choose_design(answers, with_transforms, ratio, runs, {ALL_RUNS: runs}, _small_trees(),
                         DESIGNS[:1])[0] == DESIGNS[0]


def test_the_shipped_model_reads_the_transform_features_where_its_card_chose_them(model):
    answer_times = model.answer_times["fma"]
    designs = model.card["cudnn_answers"]["maths"]["fma"]["designs"]
    assert set(designs) == set(answer_times.regressors)
    assert answer_times.transform_inputs == [a for a in answer_times.regressors if designs[a]["transform_inputs"]]
    assert "FFT" in answer_times.transform_inputs  # validation 10.98% -> 9.74% MAPE with them and finer trees
    n = len(model.predictors["fma"].features) + len(answer_times.algorithms)
    for algo, paths in answer_times.regressors.items():
        extra = len(TRANSFORM_FEATURES) if algo in answer_times.transform_inputs else 0
        assert {r.n_inputs for r in paths.values()} == {n + extra}, algo


def test_a_model_file_round_trip_keeps_the_transform_inputs(model, tmp_path):
    answer_times = model.answer_times["fma"]
    path = tmp_path / "answers-fma.zip"
    persist.write_model_file(answer_times, path)
    loaded = persist.read_model_file(path, AnswerTimePredictor)
    assert loaded.transform_inputs == answer_times.transform_inputs
    layers = pd.DataFrame({"batch": [8, 1], "in_ch": [256, 64], "out_ch": [256, 128], "in_h": [33, 56],
                           "in_w": [33, 56], "kernel_h": [3, 3], "kernel_w": [3, 3], "pad_h": [1, 1], "pad_w": [1, 1]})
    predictor = model.predictors["fma"]
    F = shape_features(layers, predictor.feature_spec).to_numpy()
    sizes = np.zeros((len(layers), len(answer_times.algorithms)))
    transforms = transform_features(layers).to_numpy()
    algo = answer_times.transform_inputs[0]
    assert np.array_equal(loaded.ratios(algo, F, sizes, transforms), answer_times.ratios(algo, F, sizes, transforms))
    with pytest.raises(ValueError, match="transform features"):
        loaded.ratios(algo, F, sizes)


def test_loading_refuses_transform_inputs_the_regressors_do_not_read(model):
    answer_times = model.answer_times["fma"]
    state = {"algorithms": answer_times.algorithms, "regressors": answer_times.regressors,
             "variants": answer_times.variants}
    reads_none = next(a for a in answer_times.regressors if a not in answer_times.transform_inputs)
    with pytest.raises(StateError, match="same shape features and answers"):
        AnswerTimePredictor.from_state(state | {"transform_inputs": [*answer_times.transform_inputs, reads_none]})
    with pytest.raises(StateError, match="same shape features and answers"):
        AnswerTimePredictor.from_state(state | {"transform_inputs": []})  # the files' regressors read them
    with pytest.raises(StateError, match="of algorithms it has regressors of"):
        AnswerTimePredictor.from_state(state | {"transform_inputs": ["SEER_DIRECT"]})


def test_files_written_before_the_transform_features_read_none(model):
    answer_times = model.answer_times["fma"]
    without = {a: p for a, p in answer_times.regressors.items() if a not in answer_times.transform_inputs}
    older = AnswerTimePredictor.from_state({"algorithms": answer_times.algorithms, "regressors": without,
                                            "variants": {a: v for a, v in answer_times.variants.items()
                                                         if a in without}})
    assert older.transform_inputs == [] and older.n_inputs == answer_times.n_inputs

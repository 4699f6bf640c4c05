"""The kernel-variant mixture of the times learnt from cuDNN's answers: fitted on a slice of the
committed train runs, it times IMPLICIT_GEMM closer on held-out layers; validation keeps the
single regressor where the variants tell nothing; unsure guesses keep it too; model files hold
it as plain data and refuse anything else in its place."""

from __future__ import annotations

import json
import zipfile
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from seer.errors import InputError
from seer.predict import persist
from seer.predict.persist import load_model
from seer.predict.predictors import (ALL_RUNS, RARE_VARIANTS, AnswerTimePredictor, StateError, VariantTimes,
                                     answer_inputs)
from seer.training.answers import DESIGNS, MIN_GAIN_POINTS, fit_answer_times, fit_variant_mixture, fit_variant_times
from seer.training.estimators import default_candidates
from seer.training.train import training_inputs

ALGO = "IMPLICIT_GEMM"
#: Train layers of the small slice: enough traced runs of IMPLICIT_GEMM's five variants to fit
#: a mixture, too few for validation to keep it (the per-variant regressors see a tenth of the runs).
SMALL_SLICE = 3000
#: Train layers of the large slice, where validation keeps it (as on all 21,827).
LARGE_SLICE = 12000


@pytest.fixture(scope="module")
def predictor():
    return load_model("h100", math="fma").predictors["fma"]


# The variants' tests fit the default design alone (DESIGNS[:1]): what they measure is the
# mixture against the single regressor, and the design's own choice is tests/test_answer_designs.py's.


def _slice(table, size: int):
    ids = np.sort(table.loc[table["split"] == "train", "shape_id"].unique())
    keep = np.random.default_rng(0).choice(ids, size=size, replace=False)
    return training_inputs(table[table["shape_id"].isin(keep)], pd.DataFrame(), "fma")


def _inputs(answer_times: AnswerTimePredictor, predictor, frames) -> np.ndarray:
    from seer.layers.shapes import layer_frame
    from seer.predict.features import shape_features

    F = shape_features(layer_frame(frames.shapes), predictor.feature_spec).to_numpy()
    return np.hstack([F, answer_inputs(frames.workspaces[answer_times.algorithms].to_numpy(dtype=float))])


@pytest.fixture(scope="module")
def test2(table):
    """Every Test-set-II layer (fma), as training reads a split."""
    return training_inputs(table[table["split"] == "test2"], pd.DataFrame(), "fma", split="test2")


@pytest.fixture(scope="module")
def small_slice(predictor, table) -> tuple:
    """The small slice, and IMPLICIT_GEMM's answer times fitted there with its traced variants."""
    train = _slice(table, SMALL_SLICE)
    return train, fit_answer_times(predictor, train.shapes, train.times[[ALGO]], train.workspaces,
                                   variants=train.paths, designs=DESIGNS[:1])


@pytest.fixture(scope="module")
def small(predictor, small_slice):
    """IMPLICIT_GEMM's answer times fitted on the small slice, given a mixture fitted there
    whatever validation says of it (threshold 0.5): what the file and refusal tests need."""
    # The single regressors are fitted alike with or without the variants: one fit serves both.
    train, (answer_times, chosen, _, _) = small_slice
    inputs = _inputs(answer_times, predictor, train)
    ms = train.times[ALGO].to_numpy(dtype=float)
    ran = np.isfinite(ms) & np.isfinite(train.workspaces[ALGO].to_numpy(dtype=float))
    of_run = train.paths[ALGO].to_numpy(dtype=object)
    ratio = ms / predictor.baseline_ms(inputs[:, :len(predictor.features)], ALGO)
    classifier, regressors = fit_variant_mixture(inputs, ratio, ran & pd.notna(of_run), of_run,
                                                 {ALL_RUNS: np.ones(len(ms), dtype=bool)},
                                                 {ALL_RUNS: default_candidates()[chosen[ALGO][ALL_RUNS]]}, 30)
    return replace(answer_times, variants={ALGO: VariantTimes(classifier, 0.5, regressors)})


@pytest.fixture(scope="module")
def large(predictor, table):
    train = _slice(table, LARGE_SLICE)
    return train, fit_answer_times(predictor, train.shapes, train.times[[ALGO]], train.workspaces,
                                   variants=train.paths, designs=DESIGNS[:1])


def _ratios(answer_times: AnswerTimePredictor, predictor, frames) -> tuple[np.ndarray, np.ndarray]:
    """IMPLICIT_GEMM's predicted and measured time ratios on the runs of ``frames``."""
    inputs = _inputs(answer_times, predictor, frames)
    F, sizes = inputs[:, :len(predictor.features)], inputs[:, len(predictor.features):]
    ms = frames.times[ALGO].to_numpy(dtype=float)
    ran = np.isfinite(ms) & np.isfinite(frames.workspaces[ALGO].to_numpy(dtype=float))
    predicted = answer_times.ratios(ALGO, F[ran], sizes[ran])
    return predicted, ms[ran] / predictor.baseline_ms(F[ran], ALGO)


@pytest.mark.slow
def test_a_mixture_kept_on_a_slice_times_implicit_gemm_closer_on_the_held_out_networks(large, predictor, test2):
    _, (answer_times, _, decided, _) = large
    assert set(answer_times.variants) == {ALGO} and decided[ALGO]["used"], decided
    info = decided[ALGO]
    assert info["validation_mape_mixture"][str(info["threshold"])] <= info["validation_mape_single"] - MIN_GAIN_POINTS
    assert answer_times.variants[ALGO].threshold == info["threshold"]
    errors = {}
    for name, model in (("mixture", answer_times), ("single", replace(answer_times, variants={}))):
        predicted, measured = _ratios(model, predictor, test2)
        errors[name] = float(np.mean(np.abs(predicted / measured - 1)))
    assert errors["mixture"] < errors["single"] - 0.01, errors


@pytest.mark.slow
def test_validation_keeps_the_single_regressor_where_the_variants_tell_nothing(large, predictor):
    train, _ = large
    # Each traced run given another run's variant: the classes are as many and as frequent,
    # but no longer say anything of the time.
    shuffled = train.paths.copy()
    column = shuffled[ALGO].to_numpy(dtype=object)
    traced = np.flatnonzero(pd.notna(column))
    column[traced] = column[np.random.default_rng(1).permutation(traced)]
    shuffled[ALGO] = column
    answer_times, _, decided, _ = fit_answer_times(predictor, train.shapes, train.times[[ALGO]], train.workspaces,
                                                variants=shuffled, designs=DESIGNS[:1])
    assert not answer_times.variants and not decided[ALGO]["used"], decided
    assert decided[ALGO]["reason"].startswith("validation gain under")


def test_on_a_small_slice_validation_keeps_the_single_regressor(small_slice):
    _, (answer_times, _, decided, _) = small_slice
    # The same variants that 12,000 layers time better (above) are too thin a split of 3,000.
    assert not answer_times.variants and decided[ALGO]["validation_mape_single"] < min(
        decided[ALGO]["validation_mape_mixture"].values()), decided


def test_variants_with_too_few_runs_keep_the_single_regressor():
    rng = np.random.default_rng(0)
    inputs, ratio = rng.random((200, 3)), np.exp(rng.random(200))
    of_run = np.array(["a", "b"] * 100, dtype=object)
    ran = np.ones(200, dtype=bool)
    mixture, info = fit_variant_times(inputs, ratio, ran, ran, of_run, {ALL_RUNS: ran},
                                      {ALL_RUNS: default_candidates()["boosted_trees"]}, min_runs=101)
    assert mixture is None and not info["used"] and info["reason"].startswith("fewer than two variants")


def test_unsure_guesses_keep_the_single_regressor(small, predictor, test2):
    mixture = small.variants[ALGO]
    inputs = _inputs(small, predictor, test2)
    single = np.full(len(inputs), -1.0)  # no ratio is negative: a row that kept it is plain to see
    proba = mixture.classifier.predict_proba(inputs)
    guessed = np.asarray(mixture.classifier.classes, dtype=object)[proba.argmax(axis=1)]
    for threshold in (0.0, 0.9, 0.999):
        out = VariantTimes(mixture.classifier, threshold, mixture.regressors).ratios(
            inputs, {ALL_RUNS: np.ones(len(inputs), dtype=bool)}, single)
        own = (proba.max(axis=1) >= threshold) & np.isin(guessed, list(mixture.regressors[ALL_RUNS]))
        assert np.all(out[~own] == -1.0) and np.all(out[own] > 0)
        if threshold == 0.0:
            assert own.mean() > 0.9  # nearly every run is guessed a variant with a regressor
        for variant, regressor in mixture.regressors[ALL_RUNS].items():
            rows = own & (guessed == variant)
            assert np.allclose(out[rows], regressor.predict(inputs[rows]))


def test_a_model_file_round_trip_predicts_the_same(small, predictor, test2, tmp_path):
    path = tmp_path / "answers-fma.zip"
    persist.write_model_file(small, path)
    loaded = persist.read_model_file(path, AnswerTimePredictor)
    assert type(loaded.variants[ALGO]) is VariantTimes and loaded.variants[ALGO].threshold == 0.5
    with_mixture, without = _ratios(loaded, predictor, test2)[0], _ratios(replace(loaded, variants={}), predictor,
                                                                          test2)[0]
    assert np.array_equal(with_mixture, _ratios(small, predictor, test2)[0])
    assert not np.array_equal(with_mixture, without)  # the mixture came back and is used


def _edited(answer_times: AnswerTimePredictor, tmp_path, edit) -> persist.Path:
    """A model file of ``answer_times`` whose model.json ``edit`` changed."""
    path = tmp_path / "answers-fma.zip"
    persist.write_model_file(answer_times, path)
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    document = json.loads(members["model.json"])
    edit(document["root"]["state"]["variants"][ALGO])
    members["model.json"] = json.dumps(document).encode()
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


@pytest.mark.parametrize("edit, words", [
    # A classifier of another library in the mixture's place: no name but seer's parts is trusted.
    (lambda v: v["state"]["classifier"].update({"$type": "HistGradientBoostingClassifier"}), "does not trust"),
    (lambda v: v.update({"$type": "BoostedClassifier"}), "BoostedClassifier"),
    (lambda v: v["state"].update({"threshold": 1.5}), "threshold must be a probability"),
    (lambda v: v["state"]["regressors"]["all"].update(
        {"not-a-variant": v["state"]["regressors"]["all"][next(iter(v["state"]["regressors"]["all"]))]}),
     "a variant its classifier guesses"),
    (lambda v: v["state"]["regressors"].update({"elsewhere": v["state"]["regressors"].pop("all")}),
     "by kernel path"),
])
def test_loading_refuses_what_is_not_a_variant_mixture(small, tmp_path, edit, words):
    path = _edited(small, tmp_path, edit)
    with pytest.raises(InputError, match=words):
        persist.read_model_file(path, AnswerTimePredictor)


def test_a_mixture_for_an_algorithm_without_regressors_is_refused(small):
    answer_times = small
    with pytest.raises(StateError, match="variants must be of algorithms"):
        AnswerTimePredictor.from_state({"algorithms": answer_times.algorithms, "regressors": answer_times.regressors,
                                        "variants": {"GEMM": answer_times.variants[ALGO]}})


def test_files_written_before_mixtures_load_without_them(small):
    answer_times = small
    older = AnswerTimePredictor.from_state({"algorithms": answer_times.algorithms,
                                            "regressors": answer_times.regressors})
    assert older.variants == {}


def test_the_rare_variants_class_is_no_regressor(small):
    mixture = small.variants[ALGO]
    state = mixture.state()
    regressor = next(iter(state["regressors"][ALL_RUNS].values()))
    classifier = replace(mixture.classifier, classes=[*mixture.classifier.classes[:-1], RARE_VARIANTS])
    with pytest.raises(StateError, match="a variant its classifier guesses"):
        VariantTimes.from_state({"classifier": classifier, "threshold": 0.5,
                                 "regressors": {ALL_RUNS: {RARE_VARIANTS: regressor}}})

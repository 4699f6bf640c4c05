"""The estimators on samples of the committed H100 data: what each part of the model buys."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from sklearn.model_selection import KFold

from conftest import small_selector
from seer.dataset.views import training_frames
from seer.hardware.gpus import get_gpu_spec
from seer.layers.shapes import SEER_FIELDS, is_seer_layer
from seer.predict import predictors
from seer.predict.features import log2_flops
from seer.predict.predictors import NOT_RUN, path_weight, pick_inputs, regressor_inputs
from seer.training.estimators import (CANDIDATE_SETS, OTHER_KERNEL_PATHS, AlgorithmSelector, ShapeFeatures,
                                      WorkspaceModel, kernel_path_stage, mape, quadratic_power_law)
from seer.training.train import training_inputs

H100 = get_gpu_spec("h100")


def _sample(shapes: pd.DataFrame, values: pd.DataFrame, n: int, seed: int = 0):
    rows = np.random.default_rng(seed).choice(len(shapes), size=min(n, len(shapes)), replace=False)
    return shapes.iloc[np.sort(rows)], values.iloc[np.sort(rows)]


def _small(**params) -> AlgorithmSelector:
    return small_selector().set_params(gpu=H100, **params)


@pytest.mark.slow
def test_each_algorithms_model_beats_a_constant_on_held_out_layers(table):
    shapes, times = _sample(*training_frames(table, "fma", "train"), 3000)
    test_shapes, test_times = _sample(*training_frames(table, "fma", "test1"), 1500, seed=1)
    selector = _small().fit(shapes, times)
    predicted = pd.DataFrame(selector.predict_unmasked(test_shapes), index=test_shapes.index,
                             columns=selector.algorithms_)
    for algo in ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "FFT_TILING"):
        ran = test_times[algo].notna()
        constant = np.full(ran.sum(), times[algo].median())
        assert mape(test_times.loc[ran, algo], predicted.loc[ran, algo]) < 0.5 * mape(test_times.loc[ran, algo], constant)
    # Algorithms that never ran are never predicted to.
    assert selector.supports_["DIRECT"] == "never" and selector.supports_["WINOGRAD"] == "never"
    assert np.isnan(selector.predict(test_shapes)[:, selector.algorithms_.index("DIRECT")]).all()


@pytest.mark.slow
@pytest.mark.parametrize("algo", ["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM"])
def test_the_roofline_baseline_lets_trees_extrapolate_to_larger_layers(table, algo):
    """Trained on layers under 10 GFLOP, judged on measured layers over 20 GFLOP: trees on
    time saturate at the largest training time; trees on the ratio to the roofline do not."""
    shapes, times = training_frames(table, "fma", None)
    gflops = 2.0 ** log2_flops(shapes) / 1e9
    # Ungrouped layers only: grouped IMPLICIT_PRECOMP_GEMM transposes per group, time the
    # roofline (FLOPs and tensor bytes) does not hold, and the ratio then extrapolates worse.
    small = gflops < 10
    large = (gflops > 20) & times[algo].notna().to_numpy() & (shapes["groups"] == 1).to_numpy()
    train_shapes, train_times = _sample(shapes[small], times.loc[small, [algo]], 4000)
    errors = {}
    for baseline in ("roofline", "none"):
        selector = _small(baseline=baseline).fit(train_shapes, train_times)
        errors[baseline] = mape(times.loc[large, algo], selector.predict_unmasked(shapes[large])[:, 0])
    assert errors["roofline"] < 35 and errors["roofline"] < 0.8 * errors["none"], errors


@pytest.mark.slow
def test_the_quadratic_power_law_beats_a_constant_too(table):
    # SEER's form, on SEER's layers: over the general kinds its ~9,000 terms extrapolate wildly.
    square = table[is_seer_layer(table)]
    shapes, times = _sample(*training_frames(square, "default", "train"), 1500)
    test_shapes, test_times = training_frames(square, "default", "test1")
    power_law = {"quadratic_power_law": quadratic_power_law()}
    selector = AlgorithmSelector(H100, candidates=power_law, cv=2).fit(shapes, times[["IMPLICIT_GEMM"]])
    assert selector.choice_["IMPLICIT_GEMM"] == {"all": "quadratic_power_law"}
    ran = test_times["IMPLICIT_GEMM"].notna()
    predicted = selector.predict_unmasked(test_shapes)[:, 0][ran.to_numpy()]
    constant = np.full(ran.sum(), times["IMPLICIT_GEMM"].median())
    measured = test_times.loc[ran, "IMPLICIT_GEMM"].to_numpy()

    def median_ape(values):  # robust: a fit of ~9,000 terms on 1,500 layers throws a few far off
        return np.median(np.abs(values / measured - 1))

    assert median_ape(predicted) < 0.5 * median_ape(constant)
    # The converted power law predicts what scikit-learn's pipeline does.
    inputs = selector.features_.transform(test_shapes)
    np.testing.assert_allclose(selector.predictor_.regressors["IMPLICIT_GEMM"]["all"].predict(inputs),
                               selector.regressors_["IMPLICIT_GEMM"]["all"].predict(inputs), rtol=1e-9)


def test_a_census_without_a_kind_the_training_runs_hold_is_named(table, census):
    """A census of square layers alone (the H200's) would teach the first stage nothing of the
    grouped, depthwise, 1xN, dilated or 3D layers the runs hold: ``seer train`` learns it from
    the runs then; a census of every kind (the H100's) is taken."""
    from seer.layers.shapes import is_seer_layer
    from seer.training.train import kinds_the_census_lacks

    training = table[table["split"] == "train"]
    assert kinds_the_census_lacks(census, training) == []
    square = census[is_seer_layer(census)]
    assert kinds_the_census_lacks(square, training) == ["grouped", "depthwise", "1xN", "non-square input", "dilated",
                                                        "3D"]
    flat = training[training["dims"] == 2]
    assert "3D" not in kinds_the_census_lacks(square, flat)  # no 3D run: no 3D census needed
    assert kinds_the_census_lacks(census.iloc[:0], training) == []  # no census: nothing to judge


@pytest.mark.slow
def test_seer_train_learns_the_first_stage_from_the_runs_where_the_census_lacks_their_kinds(table, census, tmp_path):
    """``train``'s default: with a census of square layers only, the first stage learns from the
    training runs and the card says why; told to take the census, it does."""
    from seer.dataset.tables import write_parts
    from seer.schema import DatasetDir
    from seer.training.train import train

    rng = np.random.default_rng(0)
    keep = [rng.choice(np.sort(table.loc[table["split"] == split, "shape_id"].unique()), size=count, replace=False)
            for split, count in (("train", 400), ("test1", 200))]
    files = DatasetDir(tmp_path / "h100")
    write_parts(table[table["shape_id"].isin(np.concatenate([*keep, table.loc[table["split"] == "test2",
                                                                              "shape_id"].unique()]))],
                files.measurements)
    square = census[is_seer_layer(census)]
    write_parts(square[square["shape_id"].isin(rng.choice(np.sort(square["shape_id"].unique()), 2000,
                                                          replace=False))], files.census)
    card = train(files.root, H100, maths=("fma",), selector=small_selector()).card["maths"]["fma"]
    assert card["first_stage"] == "training runs (out of fold)" and card["census_shapes"] == 0
    assert card["first_stage_note"].startswith("the census holds no grouped, depthwise")
    told = train(files.root, H100, maths=("fma",), selector=small_selector(), use_census=True).card["maths"]["fma"]
    assert told["first_stage"] == "census" and told["census_shapes"] == 2000 and "first_stage_note" not in told


@pytest.mark.slow
def test_the_first_stage_learns_cudnns_answers_from_the_census(table, census):
    """Support and GEMM's kernel path (im2col buffer or none) on timed layers it never saw."""
    shapes, workspaces = _sample(*training_frames(census, "fma", split=None, value="workspace_bytes"), 20000)
    model = WorkspaceModel(H100, max_iter=60).fit(shapes, workspaces)
    assert model.runs_["DIRECT"] == "never" and model.runs_["WINOGRAD"] == "never"
    assert model.nonzero_["IMPLICIT_GEMM"] == "never"  # IMPLICIT_GEMM never asks for a workspace
    test_shapes, test_workspaces = training_frames(table, "fma", "test1", value="workspace_bytes")
    answers = pd.DataFrame(model.transform(test_shapes), columns=model.get_feature_names_out())
    ran = test_workspaces.notna().to_numpy()
    support = answers[[f"{a}_p_runs" for a in model.algorithms_]].to_numpy() >= 0.5
    assert (support == ran[:, [list(test_workspaces.columns).index(a) for a in model.algorithms_]]).mean() > 0.99
    gemm = test_workspaces["GEMM"].notna().to_numpy()
    im2col = test_workspaces["GEMM"].to_numpy()[gemm] > 0
    assert ((answers["GEMM_p_workspace"].to_numpy()[gemm] >= 0.5) == im2col).mean() > 0.95
    # The size of FFT's workspace, where it asks for one, within a factor of two for most layers.
    fft = test_workspaces["FFT"].to_numpy()
    sized = np.isfinite(fft) & (fft > 0)
    assert (np.abs(answers["FFT_log2_workspace"].to_numpy()[sized] - np.log2(fft[sized])) < 1).mean() > 0.9


@pytest.fixture(scope="module")
def path_selector(table, census):
    """A small selector of IMPLICIT_GEMM (one path) and GEMM (two), fitted with a census."""
    shapes, times, workspaces, asked = training_inputs(table, census, "fma")[:4]
    keep = ["IMPLICIT_GEMM", "GEMM"]
    rows = np.sort(np.random.default_rng(0).choice(len(shapes), size=4000, replace=False))
    asked = (asked[0].iloc[:15000], asked[1].iloc[:15000][keep])
    shapes, times, workspaces = shapes.iloc[rows], times.iloc[rows][keep], workspaces.iloc[rows][keep]
    return _small().fit(shapes, times, workspaces, asked), shapes, times


@pytest.mark.slow
def test_kernel_paths_get_their_own_regressors_where_the_workspace_tells_them_apart(table, path_selector):
    selector, shapes, times = path_selector
    assert set(selector.regressors_["GEMM"]) == {"workspace", "no_workspace"}
    assert set(selector.regressors_["IMPLICIT_GEMM"]) == {"all"}
    assert selector.supports_["GEMM"] == "workspace model"
    test_shapes, test_times = training_frames(table, "fma", "test1")
    gemm = test_times["GEMM"].notna()
    predicted = selector.predict_unmasked(test_shapes[gemm])[:, 1]
    without = _small().fit(shapes, times)
    assert set(without.regressors_["GEMM"]) == {"all"} and without.workspace_model_ is None
    baseline = without.predict_unmasked(test_shapes[gemm])[:, 1]
    # Knowing GEMM's kernel path cuts its error by at least a fifth (less on general layers,
    # which the 4,000-row sample holds more of as the data grows).
    assert mape(test_times.loc[gemm, "GEMM"], predicted) < 0.8 * mape(test_times.loc[gemm, "GEMM"], baseline)


@pytest.mark.slow
def test_the_kernel_path_classifier_names_held_out_runs_paths(table):
    inputs = training_inputs(table, pd.DataFrame(), "fma")
    shapes, times, paths = inputs.shapes, inputs.times, inputs.paths
    test_shapes, _ = training_frames(table, "fma", "test1")
    test_paths = training_frames(table, "fma", "test1", value="trace_variant")[1]["IMPLICIT_GEMM"].dropna()
    features = ShapeFeatures(H100).fit(shapes)
    labels = paths["IMPLICIT_GEMM"].to_numpy(dtype=object)
    runs = times["IMPLICIT_GEMM"].notna().to_numpy()
    folds = KFold(n_splits=2, shuffle=True, random_state=0)
    classifier, known, guessed = kernel_path_stage(features.transform(shapes), labels, runs, 2, 20, folds)
    classes = list(classifier.classes_)
    assert len(classes) == 3 and OTHER_KERNEL_PATHS in classes  # the 2 most frequent, and the rest
    traced = runs & pd.notna(labels)
    # Where the trace tells the path, "known" is it; elsewhere both are the classifier's guess.
    assert set(np.unique(known[traced])) <= {0.0, 1.0} and np.allclose(known[~traced], guessed[~traced])
    assert np.allclose(guessed.sum(axis=1), 1)
    # cuDNN's path inside IMPLICIT_GEMM (a grouped direct kernel, or a GEMM of some tile)
    # follows from the shape: out of fold and on held-out layers, the guess is mostly right.
    out_of_fold = np.asarray(classes)[guessed[traced].argmax(axis=1)]
    assert (out_of_fold == np.asarray(classes)[known[traced].argmax(axis=1)]).mean() > 0.9
    # A held-out run of a rarer path belongs to the pooled class, as a training run would.
    expected = np.where(np.isin(test_paths, classes), test_paths.to_numpy(dtype=object), OTHER_KERNEL_PATHS)
    predicted = classifier.predict(features.transform(test_shapes.loc[test_paths.index]))
    assert (predicted == expected).mean() > 0.9


@pytest.mark.slow
def test_kernel_paths_feed_the_regressors_only_where_cross_validation_says_so(table):
    inputs = training_inputs(table, pd.DataFrame(), "fma")
    shapes, times, workspaces, paths = inputs.shapes, inputs.times, inputs.workspaces, inputs.paths
    keep = ["IMPLICIT_GEMM", "FFT"]
    traced = np.flatnonzero(paths["IMPLICIT_GEMM"].notna().to_numpy())
    rows = np.sort(np.random.default_rng(0).choice(traced, size=2500, replace=False))
    fit = (shapes.iloc[rows], times.iloc[rows][keep], workspaces.iloc[rows][keep], None, paths.iloc[rows][keep])
    selector = _small(max_kernel_paths=6).fit(*fit)
    for algo in keep:
        scores = selector.cv_mape_[algo]["all"]
        uses = scores["boosted_trees + kernel path"] < scores["boosted_trees"]
        assert (algo in selector.kernel_path_classifiers_) == uses == (algo in selector.predictor_.kernel_paths)
        assert selector.choice_[algo]["all"] == "boosted_trees" + " + kernel path" * uses
    # The predictor feeds the regressors what they learned from: the converted classifier's
    # probabilities match scikit-learn's.
    for algo, classifier in selector.kernel_path_classifiers_.items():
        F, answers, _ = selector.predictor_.prepare(shapes.iloc[rows[:200]])
        inputs = regressor_inputs(F, answers, keep.index(algo))
        assert np.allclose(selector.predictor_.kernel_paths[algo].predict_proba(inputs),
                           classifier.predict_proba(inputs))
    # Off by default: no classifier, no candidate with the path.
    plain = _small().fit(*fit)
    assert not plain.kernel_path_classifiers_ and "boosted_trees + kernel path" not in plain.cv_mape_["FFT"]["all"]


@pytest.mark.slow
def test_the_path_mix_leaves_out_only_negligible_paths_and_masking_changes_no_time(table, path_selector,
                                                                                   monkeypatch):
    # The small first stage is less sure of itself than the shipped one: a larger threshold
    # gives both kinds of row.
    negligible = 0.02
    monkeypatch.setattr(predictors, "NEGLIGIBLE_PATH", negligible)
    selector, _, _ = path_selector
    predictor = selector.predictor_
    test_shapes, _ = training_frames(table, "fma", "test1")
    unmasked = predictor.predict_unmasked(test_shapes)
    masked = predictor.predict(test_shapes)
    runs = predictor.predict_support(test_shapes) >= 0.5
    # Masked predictions skip the first stage's work where an algorithm does not run, and
    # change nothing where it does.
    np.testing.assert_array_equal(masked[runs], unmasked[runs])
    assert np.isnan(masked[~runs]).all()
    # What the pick weighs for GEMM: the exact geometric mix of both paths' predictions.
    F, answers, planned = predictor.prepare(test_shapes)
    j = predictor.algorithms.index("GEMM")
    inputs = regressor_inputs(F, answers, j)
    with_ws, without_ws = (predictor.regressors["GEMM"][path].predict(inputs) for path in ("workspace", "no_workspace"))
    base = predictor.baseline_ms(F, "GEMM")
    p = answers[:, 3 * j + 1]
    exact = np.exp(p * np.log(with_ws) + (1 - p) * np.log(without_ws)) * base
    reported, weighed = (times[:, j] for times in predictor._times(F, answers, planned, masked=False))
    np.testing.assert_array_equal(reported, unmasked[:, j])
    sure = (p < negligible) | (p > 1 - negligible)
    assert sure.any() and (~sure).any()
    np.testing.assert_allclose(weighed[~sure], exact[~sure], rtol=1e-12)
    bound = negligible * np.abs(np.log(with_ws / without_ws))
    assert (np.abs(np.log(weighed / exact))[sure] <= bound[sure] * (1 + 1e-9)).all()
    assert np.array_equal(path_weight(answers, j) == 0, p < negligible)
    # The time reported is one path's, the one with the lower expected relative error.
    weight = path_weight(answers, j)
    error = {path: sum(w * np.abs(ratio / other - 1) for w, other in ((weight, with_ws), (1 - weight, without_ws)))
             for path, ratio in (("workspace", with_ws), ("no_workspace", without_ws))}
    expected = np.where(error["workspace"] <= error["no_workspace"], with_ws, without_ws) * base
    np.testing.assert_allclose(reported, expected, rtol=1e-12)
    assert (reported != weighed).any()


def test_the_reported_path_is_the_fast_one_unless_it_is_unlikely():
    fast, slow = np.full(4, 1.0), np.full(4, 8.0)
    weight = np.array([0.0, 0.1, 0.2, 1.0])  # probability of the first (fast) path
    ratios = {predictors.WITH_WORKSPACE: fast, predictors.WITHOUT_WORKSPACE: slow}
    # Reporting the fast time errs (1 - w) x 7/8 in expectation, the slow one w x 7: the fast
    # one wins from w = 1/9 on.
    np.testing.assert_array_equal(predictors.likeliest_path_ratio(ratios, weight), [8.0, 8.0, 1.0, 1.0])
    np.testing.assert_array_equal(predictors.likeliest_path_ratio({predictors.ALL_RUNS: slow}, None), slow)


@pytest.mark.slow
def test_the_pick_weight_is_chosen_by_out_of_fold_regret_and_only_lowers_scores(small_models):
    from seer.predict import persist
    from seer.training.estimators import PICK_WEIGHTS

    model = persist.load(small_models / "h100")
    card = model.card["maths"]["fma"]
    assert set(card["pick_cv_regret_percent"]) == {str(w) for w in PICK_WEIGHTS}
    assert card["pick_cv_regret_percent"][str(card["pick_weight"])] == min(card["pick_cv_regret_percent"].values())
    predictor = model.predictors["fma"]
    frame = pd.DataFrame([[8, 64, 56, 64, 56, 3, 1, 1], [32, 256, 14, 512, 7, 3, 2, 1]], columns=list(SEER_FIELDS))
    # The pick weighs each algorithm's time with both kernel paths mixed (_times' second array).
    weighed, scores = predictor._times(*predictor.prepare(frame, complete=False))[1], predictor.pick_scores(frame)
    assert np.array_equal(np.isnan(predictor.predict(frame)), np.isnan(scores))
    assert np.array_equal(np.isnan(weighed), np.isnan(scores))
    assert (scores[np.isfinite(scores)] <= weighed[np.isfinite(weighed)]).all()  # a confident class only lowers


@pytest.mark.slow
def test_the_pick_classifier_reads_the_same_inputs_whether_or_not_the_first_stage_skipped_work(table, small_models):
    from seer.predict import persist

    predictor = persist.load(small_models / "h100", maths=["fma"], families=["ours"]).predictors["fma"]
    shapes, _ = training_frames(table, "fma", "test1")
    F, complete, _ = predictor.prepare(shapes, complete=True)
    _, masked, _ = predictor.prepare(shapes, complete=False)
    assert np.isnan(masked).any() and not np.isnan(complete).any()
    inputs = pick_inputs(F, complete)
    np.testing.assert_array_equal(inputs, pick_inputs(F, masked))
    # Algorithms predicted not to run (FFT on many shapes) show as NOT_RUN, nowhere else.
    not_run = inputs[:, F.shape[1]:] == NOT_RUN
    runs = complete[:, 0::3] >= 0.5
    assert not_run.any()
    assert not (not_run[:, 1::3] & runs).any() and (not_run[:, 1::3] == ~runs).all()


def test_an_algorithm_predicted_not_to_run_is_never_recommended(small_models):
    from seer.predict import persist

    model = persist.load(small_models / "h100")
    frame = pd.DataFrame([[32, 64, 56, 128, 28, 3, 2, 1], [8, 64, 56, 64, 56, 7, 1, 3]], columns=list(SEER_FIELDS))
    predictions = model.predict(frame, "fma")
    assert "DIRECT" not in set(predictions["algo"]) and "WINOGRAD" not in set(predictions["algo"])
    predictor = model.predictors["fma"]
    support = predictor.predict_support(frame)
    for layer, algo in predictions[["layer", "algo"]].itertuples(index=False):
        assert support[layer, predictor.algorithms.index(algo)] >= 0.5


def test_extrapolated_flags_layers_outside_the_training_ranges(small_models):
    from seer.predict import persist

    predictor = persist.load(small_models / "h100").predictors["default"]
    frame = pd.DataFrame([[16, 64, 56, 64, 56, 3, 1, 1], [512, 64, 56, 64, 56, 3, 1, 1]], columns=list(SEER_FIELDS))
    assert predictor.extrapolated(frame).tolist() == [False, True]


@pytest.mark.slow
def test_seers_model_beats_a_constant_on_held_out_layers(table):
    from seer.training.seer_baseline import SeerFamily

    family = SeerFamily(H100).fit(table[(table["split"] == "train") & (table["math"] == "fma")])
    assert {"IMPLICIT_GEMM", "GEMM", "FFT", "FFT_TILING"} <= set(family.algorithms_)
    shapes, times = training_frames(table, "fma", "test1")
    _, train_times = training_frames(table, "fma", "train")
    predicted = family.predict_times(shapes, list(times.columns))
    for algo in ("IMPLICIT_GEMM", "GEMM", "FFT"):
        j = list(times.columns).index(algo)
        ran = times[algo].notna().to_numpy() & np.isfinite(predicted[:, j])
        assert ran.sum() > 100
        constant = np.full(ran.sum(), train_times[algo].median())
        assert mape(times[algo].to_numpy()[ran], predicted[ran, j]) < 0.5 * mape(times[algo].to_numpy()[ran], constant)


def test_relative_least_squares_recovers_a_linear_law_and_weighs_errors_relatively():
    from seer.training.seer_baseline import relative_least_squares

    x = np.array([1.0, 2.0, 4.0, 8.0, 16.0])
    design = np.column_stack([x, np.ones_like(x)])
    assert np.allclose(relative_least_squares(design, 3 * x + 0.5), [3.0, 0.5])
    # A 10% error on the smallest point costs as much as 10% on the largest: the fit
    # through (1, 1.1) and (16, 16) under relative weights differs from plain least squares.
    y = x.copy()
    y[0] = 1.1
    relative = relative_least_squares(design, y)
    plain, *_ = np.linalg.lstsq(design, y, rcond=None)

    def relative_error(coefficients):
        return np.sum(((design @ coefficients) - y) ** 2 / y ** 2)

    assert relative_error(relative) < relative_error(plain)


def test_train_names_its_tree_sets_as_the_estimators_do(tmp_path):
    from seer.cli import build_parser
    from seer.errors import InputError
    from seer.training import train as training

    train = build_parser()._subparsers._group_actions[0].choices["train"]
    trees = next(a for a in train._actions if a.dest == "trees")
    assert set(trees.choices) == set(CANDIDATE_SETS) and trees.default == "compact"
    with pytest.raises(InputError, match="unknown tree set"):
        training.train(tmp_path, H100, trees="huge")


def test_a_gpu_must_be_given_as_a_spec():
    with pytest.raises(ValueError, match="GPUSpec"):
        AlgorithmSelector().fit(pd.DataFrame([[1, 1, 1, 1, 1, 1, 1, 0]], columns=list(SEER_FIELDS)),
                                pd.DataFrame({"GEMM": [1.0]}))


# scikit-learn's common checks that apply. seer's estimators take layer shapes (SEER's eight
# integer columns) and, for the selector and the first stage, a frame with one column per
# algorithm; the checks' random float matrices are neither, so the checks that fit on them
# do not apply. The estimator contract does: parameters, cloning, repr, tags, unfitted use.
CONTRACT_CHECKS = ("check_no_attributes_set_in_init", "check_parameters_default_constructible",
                   "check_get_params_invariance", "check_set_params", "check_estimator_repr",
                   "check_do_not_raise_errors_in_init_or_set_params", "check_estimators_unfitted",
                   "check_mixin_order", "check_valid_tag_types", "check_estimator_tags_renamed")


def _estimators():
    from seer.training.seer_baseline import SeerAlgorithmModel, SeerFamily

    return [ShapeFeatures(H100), WorkspaceModel(H100), AlgorithmSelector(H100), SeerFamily(H100),
            SeerAlgorithmModel(gpu=H100)]


@pytest.mark.parametrize("estimator", _estimators(), ids=lambda e: type(e).__name__)
@pytest.mark.parametrize("name", CONTRACT_CHECKS)
def test_scikit_learn_estimator_contract(estimator, name):
    from sklearn.base import clone
    from sklearn.utils import estimator_checks

    check = getattr(estimator_checks, name)
    check(type(estimator).__name__, clone(estimator))

"""Estimators that learn every algorithm's time for a layer from its shape alone.

Two stages, both scikit-learn estimators that take shapes (SEER's eight columns):

1. :class:`WorkspaceModel` learns what cuDNN answers before anything runs: per
   algorithm, whether it runs (supported, workspace within the cap), whether its workspace
   is non-zero, and how large it is. cuDNN settles the kernel path when it sizes the
   workspace: its GEMM asks for an im2col buffer, or for nothing when it falls back to a
   much slower direct kernel; IMPLICIT_PRECOMP_GEMM asks for none on its fallback kernel.
   It is fitted on a census (``seer collect --census``: cuDNN's answers for shapes that
   never ran) or on the timed runs' own answers.
2. :class:`AlgorithmSelector` learns the time of every algorithm: ``fit(X, Y, W, census)``
   takes the shapes, a frame of measured times with one column per algorithm (NaN where
   the algorithm did not run), the workspaces of those runs and the census. Per algorithm
   it fits a time regressor on shape features and the first stage's answers for it, one
   per kernel path where the data has both paths, and chooses each regressor among
   candidates by cross-validation on the training data it is given. Optionally, where the
   runs' kernel traces name the path cuDNN took inside an algorithm (the main kernel's
   variant), a classifier learns it from the shape, and its probabilities become regressor
   inputs if cross-validation says they help. A classifier of the fastest algorithm,
   weighted by out-of-fold regret, refines the pick.

The regressors learn the time's ratio to a physical baseline (the algorithm's fixed cost
plus the roofline floor), so that trees, which cannot extrapolate, do so at the efficiency
reached on the largest layers. Fitting ends by converting what was learned into
:mod:`seer.predict.predictors` (``predictor_``): prediction, here and from a model file, runs
there, on seer's own arrays.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, TransformerMixin, clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import KFold, cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler
from sklearn.utils.validation import check_is_fitted

from seer.hardware.gpus import GPUSpec
from seer.layers.shapes import LAYER_COLUMNS, layer_frame
from seer.predict.features import feature_names, log2_flops, shape_features
from seer.predict.predictors import (ALL_RUNS, ALWAYS, BASELINES, BY_FIRST_STAGE, BY_KERNEL_PLAN,
                                     KERNEL_PLAN_ALGORITHMS, NEVER, WITH_WORKSPACE, WITHOUT_WORKSPACE,
                                     AlgorithmPredictor, BoostedClassifier, BoostedRegressor, Constant, LogTarget, Part,
                                     QuadraticRegressor, WorkspacePredictor, baseline_ms, mix_paths, path_ratios,
                                     path_weight, pick_inputs, regressor_inputs)
from seer.predict.trees import from_hist_gradient_boosting

#: Quantile of an algorithm's training times taken as its fixed cost in the baseline.
FIXED_COST_QUANTILE = 0.01
#: Weights of the fastest-algorithm classifier in the pick that cross-validation chooses from.
PICK_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 0.9)
#: Suffix of a candidate's name when it also sees the kernel path.
WITH_KERNEL_PATH = " + kernel path"
#: The kernel-path class of traced runs whose path is too rare to have a class of its own.
OTHER_KERNEL_PATHS = "rarer paths"
#: What the time regressors learn as a traced run's kernel path: its own (the traced path as
#: indicators) or the path classifier's out-of-fold guess, as they are given it in prediction.
#: "mixed": they learn its own path, and predict once per path, mixed by the guess
#: (:func:`seer.predict.predictors.path_mixture`).
KERNEL_PATH_INPUTS = ("known", "guessed", "mixed")
#: A progress callback: called with (steps done, steps in all, what comes next).
Progress = Callable[[int, int, str], None]


def log_time_regressor(regressor) -> TransformedTargetRegressor:
    """Fit ``regressor`` on log time: errors are relative, and times span orders of magnitude."""
    return TransformedTargetRegressor(regressor=regressor, func=np.log, inverse_func=np.exp)


def _candidates(leaves: int, mean_rounds: int, median_rounds: int, learning_rate: float) -> dict[str, object]:
    return {
        "boosted_trees": log_time_regressor(HistGradientBoostingRegressor(
            max_iter=mean_rounds, learning_rate=learning_rate, max_leaf_nodes=leaves, max_features=0.5,
            random_state=0)),
        "boosted_trees_median": log_time_regressor(HistGradientBoostingRegressor(
            loss="absolute_error", max_iter=median_rounds, learning_rate=learning_rate, max_leaf_nodes=leaves,
            random_state=0)),
    }


def power_regressor() -> TransformedTargetRegressor:
    """Average power (W) of an algorithm from the shape features: shallow boosted trees on
    log power, for the few layers that energy readings cover (about a second of GPU time
    each)."""
    return log_time_regressor(HistGradientBoostingRegressor(
        max_iter=60, learning_rate=0.1, max_depth=2, min_samples_leaf=3, random_state=0))


def quadratic_power_law() -> TransformedTargetRegressor:
    """Ridge regression on the standardised log features and all their products: a smooth
    power law. No longer a default candidate: it was never chosen on the H100 data, and
    over the ~130 features of every layer kind it has ~9,000 terms, which made each fit
    take minutes. It still converts (:func:`to_part`) for callers that pass it."""
    return log_time_regressor(Pipeline([("scale", StandardScaler()), ("square", PolynomialFeatures(2)),
                                        ("ridge", RidgeCV(alphas=np.logspace(-3, 3, 13)))]))


def default_candidates() -> dict[str, object]:
    """Time regressors that cross-validation chooses from, per algorithm (and kernel path).

    Two kinds of boosted trees, one fitting the mean of the log ratio with half the
    features per split (decorrelated trees), one its median (robust to the few runs whose
    kernel choice the features miss). The trees are compact
    (63 leaves, 200 and 150 rounds at learning rate 0.1): prediction walks every tree for
    every layer, so the number of trees sets its speed; see :func:`accurate_candidates`.
    """
    return _candidates(leaves=63, mean_rounds=200, median_rounds=150, learning_rate=0.1)


def accurate_candidates() -> dict[str, object]:
    """The same two kinds with four times the trees (31 leaves, 800 and 600 rounds at
    learning rate 0.05): a little more accurate, slower to predict
    (``benchmarks/ablation.py``, variant ``accurate_trees``; ``benchmarks/predict_speed.py``)."""
    return _candidates(leaves=31, mean_rounds=800, median_rounds=600, learning_rate=0.05)


def finer_trees(candidate: TransformedTargetRegressor) -> TransformedTargetRegressor:
    """``candidate`` (a log-target regressor of boosted trees, unfitted) with four times the
    rounds at half the learning rate, each tree with half the leaves: what
    :func:`accurate_candidates` is to :func:`default_candidates`."""
    params = candidate.regressor.get_params()
    return clone(candidate).set_params(regressor__max_iter=4 * params["max_iter"],
                                       regressor__learning_rate=params["learning_rate"] / 2,
                                       regressor__max_leaf_nodes=params["max_leaf_nodes"] // 2)


#: Candidate sets by name (``seer train --trees``).
CANDIDATE_SETS = {"compact": default_candidates, "accurate": accurate_candidates}


def mape(measured, predicted) -> float:
    """Mean absolute percentage error, in percent."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    return float(np.mean(np.abs(predicted / measured - 1)) * 100)


# -- from fitted scikit-learn estimators to seer's predictors -------------------------------
def to_part(estimator) -> Part | str:
    """The :mod:`seer.predict.predictors` part that predicts as the fitted ``estimator`` does.

    Decisions ``"always"``/``"never"`` stay as they are, and a number becomes a constant.
    """
    if isinstance(estimator, str):
        return estimator
    if isinstance(estimator, (int, float)):
        return Constant(float(estimator))
    if isinstance(estimator, TransformedTargetRegressor):
        if estimator.func is not np.log or estimator.inverse_func is not np.exp:
            raise TypeError("only regressors of log values convert")
        return LogTarget(to_part(estimator.regressor_))
    if isinstance(estimator, HistGradientBoostingRegressor):
        return BoostedRegressor(from_hist_gradient_boosting(estimator))
    if isinstance(estimator, HistGradientBoostingClassifier):
        return BoostedClassifier(from_hist_gradient_boosting(estimator), [c.item() if hasattr(c, "item") else c
                                                                          for c in estimator.classes_])
    if isinstance(estimator, Pipeline) and [type(step) for _, step in estimator.steps] == [
            StandardScaler, PolynomialFeatures, RidgeCV]:
        scale, square, ridge = (step for _, step in estimator.steps)
        return QuadraticRegressor(scale.mean_.astype(float), scale.scale_.astype(float), square.powers_.astype(np.int64),
                                  np.asarray(ridge.coef_, dtype=float), float(ridge.intercept_))
    raise TypeError(f"seer cannot convert a fitted {type(estimator).__name__}")


class ShapeFeatures(TransformerMixin, BaseEstimator):
    """Scikit-learn transformer: SEER's shape columns -> :func:`seer.predict.features.shape_features`.

    Parameters
    ----------
    gpu : GPUSpec
        The GPU whose peaks and SM count enter the features.
    """

    def __init__(self, gpu: GPUSpec | None = None) -> None:
        self.gpu = gpu

    def fit(self, X, y=None):
        _require_gpu(self.gpu)
        layer_frame(X)  # the columns a transform will need
        self.feature_names_out_ = np.array(feature_names(self.gpu))
        self.n_features_in_ = len(LAYER_COLUMNS)
        return self

    def transform(self, X):
        check_is_fitted(self, "feature_names_out_")
        return shape_features(X, self.gpu).to_numpy()

    def get_feature_names_out(self, input_features=None):
        return self.feature_names_out_


def _require_gpu(gpu) -> None:
    if not isinstance(gpu, GPUSpec):
        raise ValueError(f"gpu must be a seer.hardware.gpus.GPUSpec (see seer.hardware.gpus.get_gpu_spec), got {gpu!r}")


def _classifier(max_iter: int, l2: float = 0.0):
    return HistGradientBoostingClassifier(max_iter=max_iter, max_leaf_nodes=63, l2_regularization=l2, random_state=0)


def kernel_path_stage(inputs: np.ndarray, labels: np.ndarray, runs: np.ndarray, max_paths: int, min_runs: int,
                      folds) -> tuple:
    """A classifier of the kernel path an algorithm's traces saw, and the path per row as
    known (one column per class: the traced runs' indicators, else the classifier's
    probabilities) and as guessed (its probabilities, out of fold for the runs it learned
    from); ``(None, None, None)`` where the traces show fewer than two paths.

    ``labels`` holds each row's traced path (missing where untraced), ``runs`` which rows
    ran. The classes are the ``max_paths`` most frequent paths with ``min_runs`` runs each;
    traced runs of rarer paths form one more class when there are enough of them.
    """
    traced = runs & pd.notna(labels)
    counts = pd.Series(labels[traced]).value_counts()
    frequent = list(counts[counts >= min_runs].index[:max_paths])
    rare = traced & ~np.isin(labels, frequent)
    classes = frequent + ([OTHER_KERNEL_PATHS] if rare.sum() >= min_runs else [])
    if len(classes) < 2:
        return None, None, None
    learn = traced & (~rare | (OTHER_KERNEL_PATHS in classes))
    y = np.where(rare, OTHER_KERNEL_PATHS, labels)[learn].astype(str)
    classifier = _kernel_path_classifier().fit(inputs[learn], y)
    # Columns in the classifier's order of classes, as prediction will have them.
    guessed = classifier.predict_proba(inputs)
    guessed[learn] = cross_val_predict(_kernel_path_classifier(), inputs[learn], y, cv=folds, method="predict_proba")
    known = guessed.copy()
    known[learn] = (y[:, None] == classifier.classes_[None, :]).astype(float)
    return classifier, known, guessed


def _cross_val_predict(estimator, X_learn: np.ndarray, X_guess: np.ndarray, y: np.ndarray, folds,
                       mixed_paths: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Out-of-fold predictions of ``estimator``: fitted on the other folds' rows of ``X_learn``,
    predicting each fold from its rows of ``X_guess`` (scikit-learn's ``cross_val_predict``
    where the two hold the same values), as (reported, weighed) by :func:`seer.predict.predictors.path_ratios`."""
    reported, weighed = np.empty(len(y)), np.empty(len(y))
    for fit_rows, held_out in folds.split(X_learn):
        fitted = clone(estimator).fit(X_learn[fit_rows], y[fit_rows])
        reported[held_out], weighed[held_out] = path_ratios(fitted, X_guess[held_out], mixed_paths)
    return reported, weighed


def _kernel_path_classifier():
    # Small trees and few rounds: every class costs its trees in prediction. At scikit-learn's
    # default learning rate the multinomial fit diverged on some algorithms' paths
    # (benchmarks/kernel_paths.py); at 0.05 it does not.
    return HistGradientBoostingClassifier(max_iter=100, learning_rate=0.05, max_leaf_nodes=15, random_state=0)


class WorkspaceModel(TransformerMixin, BaseEstimator):
    """What cuDNN answers for a shape before anything runs, learned from the shape.

    ``fit(X, W)`` takes shapes and a frame with one column per algorithm: the workspace
    (bytes) cuDNN asked for where the algorithm runs, NaN where it does not (not
    supported, workspace over the cap). ``transform`` gives the three answers per
    algorithm of :class:`seer.predict.predictors.WorkspacePredictor`.

    Parameters
    ----------
    gpu : GPUSpec
        GPU spec whose figures enter the shape features.
    min_answers : int, default=20
        Fewer answers of a kind than this: the answer is taken as constant (an algorithm
        that ran on fewer shapes never runs; a path seen fewer times is never taken).
    max_iter : int, default=300
        Boosting rounds of each classifier and regressor (gradient-boosted trees of 63 leaves).
    path_l2 : float, default=0.0
        L2 regularisation of the classifiers of whether an algorithm's workspace is non-zero
        (its kernel path). Unregularised, they were overconfident out of fold on the H200's
        wgrads (benchmarks/results/h200-wgrad-paths/wgrad-paths.md); off by default all the same.

    Attributes
    ----------
    algorithms_ : list of str
    features_ : ShapeFeatures
    runs_, nonzero_ : dict
        Per algorithm, a fitted classifier or ``"always"`` / ``"never"``.
    log2_bytes_ : dict
        Per algorithm, a fitted regressor of log2 bytes, or the constant log2 bytes.
    predictor_ : WorkspacePredictor
        What ``transform`` runs.
    """

    def __init__(self, gpu: GPUSpec | None = None, min_answers: int = 20, max_iter: int = 300,
                 path_l2: float = 0.0) -> None:
        self.gpu = gpu
        self.min_answers = min_answers
        self.max_iter = max_iter
        self.path_l2 = path_l2

    def fit(self, X: pd.DataFrame, W: pd.DataFrame, progress: Progress | None = None) -> "WorkspaceModel":
        X = layer_frame(X)
        if len(X) != len(W):
            raise ValueError(f"X has {len(X)} shapes but W has {len(W)} rows")
        self.features_ = ShapeFeatures(self.gpu).fit(X)
        F = self.features_.transform(X)
        self.algorithms_ = [str(a) for a in W.columns]
        self.runs_, self.nonzero_, self.log2_bytes_ = {}, {}, {}
        for step, algo in enumerate(self.algorithms_):
            if progress:
                progress(step, len(self.algorithms_), f"first stage: {algo}")
            workspace = W[algo].to_numpy(dtype=float)
            runs = np.isfinite(workspace)
            self.runs_[algo] = self._decision(F, runs)
            nonzero = workspace[runs] > 0
            self.nonzero_[algo] = self._decision(F[runs], nonzero, self.path_l2) if runs.sum() else NEVER
            sized = np.log2(workspace[runs][nonzero])
            if len(sized) >= self.min_answers and np.ptp(sized) > 0:
                self.log2_bytes_[algo] = HistGradientBoostingRegressor(
                    max_iter=self.max_iter, max_leaf_nodes=63, random_state=0).fit(F[runs][nonzero], sized)
            else:
                self.log2_bytes_[algo] = float(sized.mean()) if len(sized) else 0.0
        self.predictor_ = WorkspacePredictor(
            self.algorithms_, {a: to_part(d) for a, d in self.runs_.items()},
            {a: to_part(d) for a, d in self.nonzero_.items()}, {a: to_part(r) for a, r in self.log2_bytes_.items()})
        return self

    def _decision(self, F: np.ndarray, labels: np.ndarray, l2: float = 0.0):
        """A classifier of ``labels``, or a constant where one side has too few examples."""
        if labels.sum() < self.min_answers:
            return NEVER
        if (~labels).sum() < self.min_answers:
            return ALWAYS
        return _classifier(self.max_iter, l2).fit(F, labels)

    def transform(self, X) -> np.ndarray:
        check_is_fitted(self, "predictor_")
        return self.predictor_.answers(self.features_.transform(layer_frame(X)))

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        return np.array(self.predictor_.answer_names(), dtype=object)


class AlgorithmSelector(BaseEstimator):
    """Per-algorithm time regressors over shape features and cuDNN's predicted answers.

    Parameters
    ----------
    gpu : GPUSpec
        GPU spec whose SM count and peaks enter the shape features.
    candidates : dict of str to regressor, default=None
        Time regressors to choose from per algorithm (and kernel path) by ``cv``-fold
        cross-validated MAPE on the training data; None means :func:`default_candidates`.
        Each is cloned.
    classifier : classifier, default=None
        Without a census or workspaces, predicts whether an algorithm runs on a shape;
        None means gradient-boosted trees.
    cv : int, default=5
        Folds of the cross-validations (regressor choice; first-stage answers for the
        training shapes when no census is given; the pick weight).
    min_runs : int, default=20
        Fewer successful training runs than this: the algorithm is treated as never
        running; a kernel path with fewer runs gets no regressor of its own.
    baseline : {"roofline", "none"}, default="roofline"
        What the regressors predict a ratio to: the algorithm's fixed cost plus the roofline
        floor, or nothing (1 ms: they predict time directly).
    workspace_model : WorkspaceModel, default=None
        The first stage to clone and fit (its ``gpu`` is set to ``gpu``); None means
        ``WorkspaceModel(min_answers=min_runs)``.
    max_kernel_paths : int, default=0
        With 2 or more (and ``paths`` given to ``fit``), per algorithm a classifier of the
        kernel path its traces saw, telling apart this many of the most frequent paths
        (:func:`kernel_path_stage`); its probabilities become regressor inputs where
        cross-validation says they help. Off by default: on the H100 data it did not lower
        the held-out error (data/h100/DATASHEET.md, *Kernel paths in the models*), and each class costs
        trees in prediction.
    min_power_runs : int, default=10
        Fewer energy readings than this: the algorithm gets no energy model.
    kernel_path_inputs : {"known", "guessed", "mixed"}, default="known"
        With a kernel-path classifier (:data:`KERNEL_PATH_INPUTS`): the regressors learn each
        traced run's own path and are given the classifier's probabilities (``known``), learn
        and are given its out-of-fold probabilities (``guessed``), or learn the run's own path
        and are asked once per path, mixed by the probabilities (``mixed``). On the H200's
        wgrads neither alternative met the bar for a default
        (benchmarks/results/h200-wgrad-paths/wgrad-paths.md).
    pick_classifier : HistGradientBoostingClassifier, default=None
        The classifier of the fastest algorithm that refines the pick (cloned); None means
        gradient-boosted trees of 15 leaves, 80 rounds at learning rate 0.1.

    Attributes
    ----------
    algorithms_ : list of str
        The columns of ``Y``, in the order ``predict`` returns them.
    workspace_model_ : WorkspaceModel or None
        The first stage (None when fitted without a census or workspaces).
    supports_ : dict
        Per algorithm, ``"always"`` / ``"never"``, ``"workspace model"`` (the first stage
        decides), ``"kernel plan"`` (seer's own kernels) or a fitted classifier.
    regressors_ : dict
        Per algorithm that runs anywhere, its fitted time regressors by kernel path
        (``"all"``, or ``"workspace"`` and ``"no_workspace"``).
    fixed_cost_ms_ : dict of str to float
        Per algorithm that runs anywhere, the fixed cost in its baseline.
    kernel_path_classifiers_ : dict
        Per algorithm whose regressors take the traced kernel path's probabilities, the
        fitted path classifier.
    choice_ : dict
        Per algorithm and kernel path, the candidate chosen.
    cv_mape_ : dict
        Per algorithm, kernel path and candidate, the cross-validated MAPE (percent).
    power_regressors_ : dict
        Per algorithm with ``min_power_runs`` energy readings, its fitted power regressor
        (:func:`power_regressor`).
    power_cv_mape_ : dict of str to float
        Per such algorithm, the cross-validated MAPE (percent) of its power.
    pick_weight_ : float
        The fastest-algorithm classifier's weight in the pick.
    pick_cv_regret_ : dict of float to float
        Out-of-fold mean regret (percent) per candidate weight.
    training_ranges_ : dict of str to [min, max]
        Ranges of the shape fields (and of log2 FLOPs) seen in training.
    predictor_ : AlgorithmPredictor
        What the prediction methods run; what a model file stores.
    """

    def __init__(self, gpu: GPUSpec | None = None, candidates=None, classifier=None, cv: int = 5,
                 min_runs: int = 20, baseline: str = "roofline", workspace_model=None,
                 max_kernel_paths: int = 0, min_power_runs: int = 10, pick_classifier=None,
                 kernel_path_inputs: str = "known") -> None:
        self.gpu = gpu
        self.candidates = candidates
        self.classifier = classifier
        self.cv = cv
        self.min_runs = min_runs
        self.baseline = baseline
        self.workspace_model = workspace_model
        self.max_kernel_paths = max_kernel_paths
        self.min_power_runs = min_power_runs
        self.pick_classifier = pick_classifier
        self.kernel_path_inputs = kernel_path_inputs

    def fit(self, X: pd.DataFrame, Y: pd.DataFrame, W: pd.DataFrame | None = None,
            census: tuple[pd.DataFrame, pd.DataFrame] | None = None,
            paths: pd.DataFrame | None = None, progress: Progress | None = None,
            recorded: pd.DataFrame | None = None, power: pd.DataFrame | None = None) -> "AlgorithmSelector":
        """Fit on shapes ``X`` and times ``Y`` (one column per algorithm, NaN: did not run).

        ``W`` (``Y``'s layout) holds the workspaces of the training runs, which tell their
        kernel paths. ``census`` is ``(shapes, workspaces)`` of shapes cuDNN was only asked
        about, workspaces in ``W``'s layout (NaN: does not run). With a census the first
        stage learns from it; without one, from ``W``, and its answers for the training
        shapes then come out of fold; with neither there is no first stage. ``paths``
        (``Y``'s layout) names the kernel path each run's trace saw, missing where it was not
        traced. ``recorded`` (``Y``'s layout, bool) says which runs were made at all, where an
        algorithm was run on part of the shapes only (None: every one): a time model learns
        from the shapes its algorithm ran on, and the pick from the shapes where every
        algorithm was run. seer's own kernels run where their plan says (exactly, from the
        shape); the others as the first stage or a classifier predicts.
        ``power`` (``Y``'s layout) holds the average power (W) of the runs with an energy
        reading, NaN elsewhere. ``progress`` is told each step as it starts.
        """
        _require_gpu(self.gpu)
        X = layer_frame(X)
        Y = pd.DataFrame(Y)
        if len(X) != len(Y):
            raise ValueError(f"X has {len(X)} shapes but Y has {len(Y)} rows")
        for name, frame in (("W", W), ("paths", paths), ("recorded", recorded), ("power", power)):
            if frame is not None and (len(frame) != len(Y) or list(frame.columns) != list(Y.columns)):
                raise ValueError(f"{name} must have Y's rows and columns")
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")
        if self.kernel_path_inputs not in KERNEL_PATH_INPUTS:
            raise ValueError(f"kernel_path_inputs must be one of {', '.join(KERNEL_PATH_INPUTS)}, "
                             f"got {self.kernel_path_inputs!r}")
        self.features_ = ShapeFeatures(self.gpu).fit(X)
        F = self.features_.transform(X)
        feature_names = list(self.features_.get_feature_names_out())
        self.algorithms_ = [str(a) for a in Y.columns]
        n_algos = len(self.algorithms_)
        has_first_stage = census is not None or W is not None
        steps = (n_algos if has_first_stage else 0) + n_algos + 1

        def first_stage_progress(done: int, total: int, text: str) -> None:
            if progress:
                progress(done, steps, text)

        folds = KFold(n_splits=self.cv, shuffle=True, random_state=0)
        answers = self._fit_workspace_model(X, W, census, folds, first_stage_progress)
        done = n_algos if has_first_stage else 0
        candidates = self.candidates if self.candidates is not None else default_candidates()
        classifier = self.classifier if self.classifier is not None else HistGradientBoostingClassifier(
            max_iter=50, max_leaf_nodes=15, random_state=0)
        roofline_column = feature_names.index("log2_roofline_floor_s")
        self.supports_, self.regressors_, self.choice_, self.cv_mape_ = {}, {}, {}, {}
        self.fixed_cost_ms_, self.kernel_path_classifiers_ = {}, {}
        out_of_fold = np.full((len(X), n_algos), np.nan)
        for j, algo in enumerate(self.algorithms_):
            if progress:
                progress(done + j, steps, f"time: {algo}")
            times = Y[algo].to_numpy(dtype=float)
            runs = np.isfinite(times) & (times > 0)
            if runs.sum() < self.min_runs:
                self.supports_[algo] = NEVER
                continue
            if algo in KERNEL_PLAN_ALGORITHMS:
                self.supports_[algo] = BY_KERNEL_PLAN
            elif self.workspace_model_ is not None:
                self.supports_[algo] = BY_FIRST_STAGE
            else:
                made = np.ones(len(X), dtype=bool) if recorded is None else recorded[algo].to_numpy(dtype=bool)
                self.supports_[algo] = ALWAYS if runs[made].all() else clone(classifier).fit(F[made], runs[made])
            self.fixed_cost_ms_[algo] = (float(np.quantile(times[runs], FIXED_COST_QUANTILE))
                                         if self.baseline == "roofline" else 0.0)
            inputs = regressor_inputs(F, answers, j)
            base = baseline_ms(F[:, roofline_column], self.fixed_cost_ms_[algo], self.baseline)
            ratio = np.where(runs, times, np.nan) / base
            workspace_paths = self._paths(algo, runs, W)
            path_classifier, known_path, guessed_path = None, None, None
            if paths is not None and self.max_kernel_paths >= 2:
                path_classifier, known_path, guessed_path = kernel_path_stage(
                    inputs, paths.iloc[:, j].to_numpy(dtype=object), runs, self.max_kernel_paths, self.min_runs, folds)
            # Per input set, what the regressors learn from and what they predict from: with the
            # kernel path, they learn each traced run's own path and predict from the classifier's
            # guess (out of fold for the runs it learned from), as they will for a new layer.
            input_sets = {"": (inputs, inputs)}
            if path_classifier is not None:
                learnt_path = guessed_path if self.kernel_path_inputs == "guessed" else known_path
                input_sets[WITH_KERNEL_PATH] = (np.hstack([inputs, learnt_path]), np.hstack([inputs, guessed_path]))
            mixed = {"": 0, WITH_KERNEL_PATH: known_path.shape[1] if path_classifier is not None
                     and self.kernel_path_inputs == "mixed" else 0}
            # A ratio's relative error is the time's, so the CV scores stay MAPEs of time. Per
            # candidate: the ratios reported (scored) and the ratios the pick weighs.
            predictions = {path: {name + suffix: _cross_val_predict(candidate, learn[members], guess[members],
                                                                    ratio[members], folds, mixed[suffix])
                                  for suffix, (learn, guess) in input_sets.items()
                                  for name, candidate in candidates.items()}
                           for path, members in workspace_paths.items()}
            scores = {path: {name: mape(ratio[workspace_paths[path]], p[0]) for name, p in by_name.items()}
                      for path, by_name in predictions.items()}
            # All of an algorithm's regressors see the same inputs: the kernel path where it
            # lowers the best CV MAPE over all its runs.
            suffix = WITH_KERNEL_PATH if path_classifier is not None and self._path_helps(
                scores, workspace_paths) else ""
            if suffix:
                self.kernel_path_classifiers_[algo] = path_classifier
            learn, guess = input_sets[suffix]
            self.regressors_[algo], self.choice_[algo], self.cv_mape_[algo] = {}, {}, {}
            own_path = {}
            for path, members in workspace_paths.items():
                usable = {n: v for n, v in scores[path].items() if n.endswith(WITH_KERNEL_PATH) == bool(suffix)}
                best = min(usable, key=usable.get)
                self.cv_mape_[algo][path] = {name: round(v, 3) for name, v in scores[path].items()}
                self.choice_[algo][path] = best
                self.regressors_[algo][path] = clone(candidates[best.removesuffix(suffix)]).fit(
                    learn[members], ratio[members])
                own_path[path] = (members, predictions[path][best][1])
            # The pick weight is tuned on out-of-fold times: each run's own path out of
            # fold, the other path (which never saw the run) as fitted.
            ratios = {path: path_ratios(self.regressors_[algo][path], guess[runs], mixed[suffix])[1]
                      for path in own_path}
            for path, (members, predicted) in own_path.items():
                ratios[path][members[runs]] = predicted
            weight = None if ALL_RUNS in ratios else path_weight(answers[runs], j)
            out_of_fold[runs, j] = mix_paths(ratios, weight) * base[runs]
        if progress:
            progress(steps - 1, steps, "pick classifier")
        complete = np.ones(len(X), dtype=bool) if recorded is None else recorded.to_numpy(dtype=bool).all(axis=1)
        self._fit_pick(pick_inputs(F[complete], answers[complete] if answers is not None else None),
                       Y.to_numpy(dtype=float)[complete], out_of_fold[complete], folds)
        self._fit_power(F, power)
        log_flops = log2_flops(X)
        self.training_ranges_ = {f: [int(X[f].min()), int(X[f].max())] for f in LAYER_COLUMNS}
        self.training_ranges_["log2_flops"] = [float(log_flops.min()), float(log_flops.max())]
        self.predictor_ = AlgorithmPredictor(
            spec=self.gpu, features=feature_names, algorithms=list(self.algorithms_),
            workspace=self.workspace_model_.predictor_ if self.workspace_model_ is not None else None,
            supports={a: s if isinstance(s, str) else to_part(s) for a, s in self.supports_.items()},
            regressors={a: {p: to_part(r) for p, r in by_path.items()} for a, by_path in self.regressors_.items()},
            fixed_cost_ms=dict(self.fixed_cost_ms_), baseline=self.baseline,
            kernel_paths={a: to_part(c) for a, c in self.kernel_path_classifiers_.items()},
            power={a: to_part(r) for a, r in self.power_regressors_.items()},
            pick_classifier=to_part(self.pick_classifier_) if self.pick_classifier_ is not None else None,
            pick_weight=float(self.pick_weight_), training_ranges=self.training_ranges_,
            kernel_path_mix=self.kernel_path_inputs == "mixed")
        if progress:
            progress(steps, steps, "done")
        return self

    def _fit_workspace_model(self, X: pd.DataFrame, W, census, folds, progress) -> np.ndarray | None:
        """Fit the first stage; return its answers for the training shapes (None without one)."""
        self.workspace_model_ = None
        template = (self.workspace_model if self.workspace_model is not None
                    else WorkspaceModel(min_answers=self.min_runs))
        template = clone(template).set_params(gpu=self.gpu)
        if census is not None:
            shapes, workspaces = census
            self.workspace_model_ = clone(template).fit(shapes, workspaces.reindex(columns=self.algorithms_),
                                                        progress=progress)
            return self.workspace_model_.transform(X)
        if W is None:
            return None
        # Answers for a training shape come from a model that never saw it, as for a new one.
        answers = np.empty((len(X), 3 * len(self.algorithms_)))
        for fit_rows, held_out in folds.split(X):
            fold = clone(template).fit(X.iloc[fit_rows], W.iloc[fit_rows])
            answers[held_out] = fold.transform(X.iloc[held_out])
        self.workspace_model_ = clone(template).fit(X, W, progress=progress)
        return answers

    def _fit_power(self, F: np.ndarray, power: pd.DataFrame | None) -> None:
        """A power regressor per timed algorithm with enough energy readings, and its
        cross-validated MAPE."""
        self.power_regressors_, self.power_cv_mape_ = {}, {}
        if power is None:
            return
        for algo in self.regressors_:
            watts = power[algo].to_numpy(dtype=float)
            read = np.isfinite(watts) & (watts > 0)
            if read.sum() < max(self.min_power_runs, 2):
                continue
            folds = KFold(n_splits=min(self.cv, int(read.sum())), shuffle=True, random_state=0)
            predicted = cross_val_predict(power_regressor(), F[read], watts[read], cv=folds)
            self.power_cv_mape_[algo] = round(mape(watts[read], predicted), 3)
            self.power_regressors_[algo] = power_regressor().fit(F[read], watts[read])

    @staticmethod
    def _path_helps(scores: dict, workspace_paths: dict) -> bool:
        """Whether the kernel path's probabilities lower the best CV MAPE, weighted by runs."""
        def best(with_path: bool) -> float:
            return sum(min(v for n, v in by_name.items() if n.endswith(WITH_KERNEL_PATH) == with_path)
                       * workspace_paths[path].sum() for path, by_name in scores.items())
        return best(True) < best(False)

    def _paths(self, algo: str, runs: np.ndarray, W) -> dict[str, np.ndarray]:
        """Training runs per kernel path: split by workspace where the first stage tells the
        paths apart and each has ``min_runs`` runs, else one path of all runs."""
        model = self.workspace_model_
        if W is not None and model is not None and not isinstance(model.nonzero_.get(algo, NEVER), str):
            with_workspace = runs & (W[algo].to_numpy(dtype=float) > 0)
            without = runs & ~with_workspace
            if min(with_workspace.sum(), without.sum()) >= self.min_runs:
                return {WITH_WORKSPACE: with_workspace, WITHOUT_WORKSPACE: without}
        return {ALL_RUNS: runs}

    def _fit_pick(self, F: np.ndarray, times: np.ndarray, out_of_fold: np.ndarray, folds) -> None:
        """Fit the classifier of the fastest algorithm and the weight it gets in the pick.

        The pick minimises ``predicted time x (1 - pick_weight_ x P(fastest))``. The weight
        is the one of :data:`PICK_WEIGHTS` with the lowest mean regret over the training
        shapes, all predictions out of fold, among the algorithms that ran; 0 means the
        predicted times alone decide.
        """
        ran = np.isfinite(times) & (times > 0)
        has_any = ran.any(axis=1)
        fastest = np.where(ran, times, np.inf).argmin(axis=1)
        labels = np.asarray(self.algorithms_, dtype=object)[fastest]
        self.pick_weight_, self.pick_cv_regret_ = 0.0, {}
        self.pick_classifier_ = None
        if len(set(labels[has_any])) < 2:
            return
        classifier = self.pick_classifier if self.pick_classifier is not None else HistGradientBoostingClassifier(
            max_iter=80, learning_rate=0.1, max_leaf_nodes=15, random_state=0)
        proba = np.zeros_like(times)
        oof = cross_val_predict(clone(classifier), F[has_any], labels[has_any], cv=folds, method="predict_proba")
        classes = sorted(set(labels[has_any]))
        for k, name in enumerate(classes):
            proba[has_any, self.algorithms_.index(name)] = oof[:, k]
        best_time = np.where(ran, times, np.inf).min(axis=1)
        for weight in PICK_WEIGHTS:
            score = np.where(ran & np.isfinite(out_of_fold), out_of_fold * (1 - weight * proba), np.inf)
            usable = has_any & np.isfinite(score).any(axis=1)
            chosen = times[np.arange(len(times)), score.argmin(axis=1)]
            regret = chosen[usable] / best_time[usable] - 1
            self.pick_cv_regret_[weight] = round(float(regret.mean() * 100), 3)
        self.pick_weight_ = min(PICK_WEIGHTS, key=lambda w: (self.pick_cv_regret_[w], w))
        self.pick_classifier_ = clone(classifier).fit(F[has_any], labels[has_any]) if self.pick_weight_ else None

    # -- prediction: the fitted predictor's -------------------------------------------------
    def _predictor(self) -> AlgorithmPredictor:
        check_is_fitted(self, "predictor_")
        return self.predictor_

    def predict(self, X) -> np.ndarray:
        """Predicted time (ms) per shape and algorithm; NaN where predicted not to run."""
        return self._predictor().predict(X)

    def predict_support(self, X) -> np.ndarray:
        return self._predictor().predict_support(X)

    def predict_unmasked(self, X) -> np.ndarray:
        return self._predictor().predict_unmasked(X)

    def predict_with_scores(self, X) -> tuple[np.ndarray, np.ndarray]:
        return self._predictor().predict_with_scores(X)

    def pick_scores(self, X) -> np.ndarray:
        return self._predictor().pick_scores(X)

    def select(self, X) -> np.ndarray:
        return self._predictor().select(X)

    def extrapolated(self, X) -> np.ndarray:
        return self._predictor().extrapolated(X)

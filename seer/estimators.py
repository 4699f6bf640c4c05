"""Estimators that predict every algorithm's time for a layer from its shape alone.

:class:`AlgorithmSelector` follows scikit-learn's conventions: ``fit(X, Y)`` takes shapes
(SEER's eight columns) and a frame of measured times with one column per algorithm (NaN
where the algorithm did not run: not supported, workspace too large). Per algorithm it
clones a support classifier (will the algorithm run on this shape?) and a time regressor
on shape features, and it chooses each regressor among candidates by cross-validation
on the training data it is given.

The regressors do not learn the time itself but its ratio to a physical baseline: the
algorithm's fixed cost (the 1st percentile of its training times: launches, transforms)
plus the roofline floor (FP32 FLOPs at peak plus tensor bytes at DRAM bandwidth, from the
GPU spec). Trees cannot extrapolate: trained on times alone they predict a 150-GFLOP
layer as fast as the largest layer they saw. On the ratio they extrapolate as a GPU
does, at the efficiency reached on the largest layers. ``predict`` returns times in
``algorithms_`` order, NaN where an algorithm is predicted not to run, so that such an
algorithm is never recommended; ``select`` returns the predicted fastest.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator, clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
from sklearn.linear_model import RidgeCV
from sklearn.model_selection import KFold, cross_val_predict
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import PolynomialFeatures, StandardScaler
from sklearn.utils.validation import check_is_fitted

from seer.features import ShapeFeatures, log2_flops
from seer.shapes import SEER_FIELDS

#: Support decisions that need no classifier: the algorithm ran on every or no training shape.
ALWAYS, NEVER = "always", "never"
#: Baselines the time regressors learn a ratio to (see the module docstring).
BASELINES = ("roofline", "none")
#: Quantile of an algorithm's training times taken as its fixed cost in the baseline.
FIXED_COST_QUANTILE = 0.01
#: Weights of the fastest-algorithm classifier in the pick that cross-validation chooses from.
PICK_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 0.9)


def log_time_regressor(regressor) -> TransformedTargetRegressor:
    """Fit ``regressor`` on log time: errors are relative, and times span six decades."""
    return TransformedTargetRegressor(regressor=regressor, func=np.log, inverse_func=np.exp)


def default_candidates() -> dict[str, object]:
    """Time regressors that cross-validation chooses from, per algorithm."""
    return {
        "boosted_trees": log_time_regressor(HistGradientBoostingRegressor(
            max_iter=600, learning_rate=0.05, max_leaf_nodes=31, random_state=0)),
        "quadratic_power_law": log_time_regressor(Pipeline([
            ("scale", StandardScaler()), ("square", PolynomialFeatures(2)),
            ("ridge", RidgeCV(alphas=np.logspace(-3, 3, 13)))])),
    }


def mape(measured, predicted) -> float:
    """Mean absolute percentage error, in percent."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    return float(np.mean(np.abs(predicted / measured - 1)) * 100)


class AlgorithmSelector(BaseEstimator):
    """Per-algorithm support classifiers and time regressors over shape features.

    Parameters
    ----------
    candidates : dict of str to regressor, default=None
        Time regressors to choose from per algorithm by ``cv``-fold cross-validated MAPE
        on the training data; None means :func:`default_candidates`. Each is cloned.
    classifier : classifier, default=None
        Predicts whether an algorithm runs on a shape; None means gradient-boosted trees.
    gpu : str, default="h100"
        GPU spec whose SM count and peaks enter the shape features.
    cv : int, default=5
        Folds of the cross-validation that chooses among ``candidates``.
    min_runs : int, default=20
        Fewer successful training runs than this: the algorithm is treated as never running.
    baseline : {"roofline", "none"}, default="roofline"
        What the regressors predict a ratio to: the algorithm's fixed cost plus the roofline
        floor (see the module docstring), or nothing (1 ms: they predict time directly).

    Attributes
    ----------
    algorithms_ : list of str
        The columns of ``Y``, in the order ``predict`` returns them.
    features_ : ShapeFeatures
        The fitted feature transformer.
    supports_ : dict
        Per algorithm, a fitted classifier, or ``"always"`` / ``"never"``.
    regressors_ : dict
        Per algorithm that runs anywhere, the fitted time regressor.
    fixed_cost_ms_ : dict of str to float
        Per algorithm that runs anywhere, the fixed cost in its baseline (0 with
        ``baseline="none"``).
    choice_ : dict of str to str
        The candidate chosen per algorithm.
    cv_mape_ : dict
        Per algorithm and candidate, the cross-validated MAPE (percent).
    training_ranges_ : dict of str to [min, max]
        Ranges of the shape fields (and of log2 FLOPs) seen in training.
    """

    def __init__(self, candidates=None, classifier=None, gpu: str = "h100", cv: int = 5,
                 min_runs: int = 20, baseline: str = "roofline") -> None:
        self.candidates = candidates
        self.classifier = classifier
        self.gpu = gpu
        self.cv = cv
        self.min_runs = min_runs
        self.baseline = baseline

    def fit(self, X: pd.DataFrame, Y: pd.DataFrame) -> "AlgorithmSelector":
        X = _shapes(X)
        if len(X) != len(Y):
            raise ValueError(f"X has {len(X)} shapes but Y has {len(Y)} rows")
        self.features_ = ShapeFeatures(self.gpu).fit(X)
        F = self.features_.transform(X)
        self.algorithms_ = [str(a) for a in Y.columns]
        candidates = self.candidates if self.candidates is not None else default_candidates()
        classifier = self.classifier if self.classifier is not None else HistGradientBoostingClassifier(
            max_iter=50, max_leaf_nodes=15, random_state=0)
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")
        self.supports_, self.regressors_, self.choice_, self.cv_mape_ = {}, {}, {}, {}
        self.fixed_cost_ms_ = {}
        folds = KFold(n_splits=self.cv, shuffle=True, random_state=0)
        out_of_fold = np.full((len(X), len(self.algorithms_)), np.nan)
        for j, algo in enumerate(self.algorithms_):
            times = Y[algo].to_numpy(dtype=float)
            runs = np.isfinite(times) & (times > 0)
            if runs.sum() < self.min_runs:
                self.supports_[algo] = NEVER
                continue
            self.supports_[algo] = ALWAYS if runs.all() else clone(classifier).fit(F, runs)
            self.fixed_cost_ms_[algo] = (float(np.quantile(times[runs], FIXED_COST_QUANTILE))
                                         if self.baseline == "roofline" else 0.0)
            # A ratio's relative error is the time's, so the CV scores stay MAPEs of time.
            base = self._baseline_ms(F[runs], algo)
            predictions = {name: cross_val_predict(clone(c), F[runs], times[runs] / base, cv=folds) * base
                           for name, c in candidates.items()}
            scores = {name: mape(times[runs], p) for name, p in predictions.items()}
            best = min(scores, key=scores.get)
            out_of_fold[runs, j] = predictions[best]
            self.cv_mape_[algo] = {name: round(v, 3) for name, v in scores.items()}
            self.choice_[algo] = best
            self.regressors_[algo] = clone(candidates[best]).fit(F[runs], times[runs] / base)
        self._fit_pick(F, Y.to_numpy(dtype=float), out_of_fold, folds)
        log_flops = log2_flops(X)
        self.training_ranges_ = {f: [int(X[f].min()), int(X[f].max())] for f in SEER_FIELDS}
        self.training_ranges_["log2_flops"] = [float(log_flops.min()), float(log_flops.max())]
        return self

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
        if len(set(labels[has_any])) < 2:
            self.pick_classifier_ = None
            return
        classifier = HistGradientBoostingClassifier(max_iter=80, learning_rate=0.1, max_leaf_nodes=15,
                                                    random_state=0)
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

    # Public methods take shapes; each computes the features once and hands them to the
    # private methods below, which the public ones share.
    def predict_support(self, X: pd.DataFrame) -> np.ndarray:
        """Probability that each algorithm runs on each shape, shape (n_shapes, n_algorithms)."""
        check_is_fitted(self, "supports_")
        return self._support(self.features_.transform(_shapes(X)))

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted time (ms) per shape and algorithm; NaN where predicted not to run."""
        check_is_fitted(self, "regressors_")
        return self._times(self.features_.transform(_shapes(X)))

    def predict_unmasked(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted time (ms) per shape and algorithm as if every algorithm ran (NaN only for
        algorithms that never ran in training): to judge the time models on their own."""
        check_is_fitted(self, "regressors_")
        return self._times(self.features_.transform(_shapes(X)), masked=False)

    def predict_with_scores(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predict` and :meth:`pick_scores` together, from one pass over the models."""
        check_is_fitted(self, "regressors_")
        F = self.features_.transform(_shapes(X))
        times = self._times(F)
        return times, self._scores(F, times)

    def pick_scores(self, X: pd.DataFrame) -> np.ndarray:
        """What the pick minimises per shape and algorithm: the predicted time, lowered where
        the classifier of the fastest algorithm is confident (see ``_fit_pick``); NaN where
        an algorithm is predicted not to run."""
        return self.predict_with_scores(X)[1]

    def select(self, X: pd.DataFrame) -> np.ndarray:
        """The pick per shape: the lowest :meth:`pick_scores` (None where no algorithm is
        predicted to run)."""
        times = self.pick_scores(X)
        best = np.where(np.isfinite(times), times, np.inf).argmin(axis=1)
        names = np.array(self.algorithms_, dtype=object)[best]
        names[~np.isfinite(times).any(axis=1)] = None
        return names

    def _support(self, F: np.ndarray) -> np.ndarray:
        out = np.empty((len(F), len(self.algorithms_)))
        if len(F) == 0:
            return out
        for j, algo in enumerate(self.algorithms_):
            support = self.supports_[algo]
            if isinstance(support, str):
                out[:, j] = 1.0 if support == ALWAYS else 0.0
            else:
                proba = support.predict_proba(F)
                out[:, j] = proba[:, list(support.classes_).index(True)]
        return out

    def _baseline_ms(self, F: np.ndarray, algo: str) -> np.ndarray:
        """What algorithm ``algo``'s regressor predicts a ratio to, per row of ``F``, in ms."""
        if self.baseline == "none":
            return np.ones(len(F))
        column = list(self.features_.get_feature_names_out()).index("log2_roofline_floor_s")
        return self.fixed_cost_ms_[algo] + 2.0 ** F[:, column] * 1e3

    def _times(self, F: np.ndarray, masked: bool = True) -> np.ndarray:
        runs = self._support(F) >= 0.5 if masked else np.ones((len(F), len(self.algorithms_)), dtype=bool)
        out = np.full((len(F), len(self.algorithms_)), np.nan)
        for j, algo in enumerate(self.algorithms_):
            if algo in self.regressors_ and runs[:, j].any():
                rows = F[runs[:, j]]
                out[runs[:, j], j] = self.regressors_[algo].predict(rows) * self._baseline_ms(rows, algo)
        return out

    def _scores(self, F: np.ndarray, times: np.ndarray) -> np.ndarray:
        classifier = getattr(self, "pick_classifier_", None)
        if classifier is None or not len(times):
            return times
        proba = np.zeros_like(times)
        probabilities = classifier.predict_proba(F)
        for k, name in enumerate(classifier.classes_):
            proba[:, self.algorithms_.index(name)] = probabilities[:, k]
        return times * (1 - self.pick_weight_ * proba)

    def extrapolated(self, X: pd.DataFrame) -> np.ndarray:
        """Whether each shape lies outside the ranges seen in training (any field, or FLOPs)."""
        check_is_fitted(self, "training_ranges_")
        X = _shapes(X)
        outside = np.zeros(len(X), dtype=bool)
        for field in SEER_FIELDS:
            low, high = self.training_ranges_[field]
            outside |= (X[field] < low).to_numpy() | (X[field] > high).to_numpy()
        low, high = self.training_ranges_["log2_flops"]
        log_flops = log2_flops(X)
        return outside | (log_flops < low) | (log_flops > high)


def _shapes(X) -> pd.DataFrame:
    if isinstance(X, pd.DataFrame):
        missing = [f for f in SEER_FIELDS if f not in X.columns]
        if missing:
            raise ValueError(f"shape columns missing: {', '.join(missing)}")
        return X[list(SEER_FIELDS)].astype(np.int64)
    return pd.DataFrame(np.asarray(X, dtype=np.int64)[:, : len(SEER_FIELDS)], columns=list(SEER_FIELDS))

"""Estimators that predict every algorithm's time for a layer from its shape alone.

Two stages, both scikit-learn estimators that take shapes (SEER's eight columns):

1. :class:`WorkspaceModel` predicts what cuDNN answers before anything runs: per
   algorithm, whether it runs (supported, workspace within the cap), whether its workspace
   is non-zero, and how large it is. cuDNN settles the kernel path when it sizes the
   workspace: its GEMM asks for an im2col buffer, or for nothing when it falls back to a
   direct kernel several times slower; IMPLICIT_PRECOMP_GEMM asks for none on its
   fallback kernel. It is fitted on a census (``seer collect --census``: cuDNN's answers
   for tens of thousands of shapes that never ran) or on the timed runs' own answers.
2. :class:`AlgorithmSelector` predicts the time of every algorithm: ``fit(X, Y, W, census)``
   takes the shapes, a frame of measured times with one column per algorithm (NaN where
   the algorithm did not run), the workspaces of those runs and the census. Per algorithm
   it fits a time regressor on shape features and the first stage's answers for it, one
   per kernel path where the data has both paths (mixed by the predicted probability of
   each), and chooses each regressor among candidates by cross-validation on the training
   data it is given.

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
from sklearn.base import BaseEstimator, TransformerMixin, clone
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
#: An algorithm is predicted to run where the probability that it runs is at least this.
RUNS_THRESHOLD = 0.5
#: A kernel path less probable than this is left out of the mix (its regressor is not
#: evaluated there). Leaving out a path of probability p moves a predicted time by at most
#: p x |ln(ratio of the two paths' times)|: under 0.03% even for paths 13x apart, and it
#: saves most of the second regressor's work where the first stage is sure of the path.
NEGLIGIBLE_PATH = 1e-4
#: Workspace answers of an algorithm predicted not to run, as the pick classifier reads
#: them: below both answers' ranges (a probability; log2 of at least one byte).
NOT_RUN = -1.0


def log_time_regressor(regressor) -> TransformedTargetRegressor:
    """Fit ``regressor`` on log time: errors are relative, and times span six decades."""
    return TransformedTargetRegressor(regressor=regressor, func=np.log, inverse_func=np.exp)


def _candidates(leaves: int, mean_rounds: int, median_rounds: int, learning_rate: float) -> dict[str, object]:
    return {
        "boosted_trees": log_time_regressor(HistGradientBoostingRegressor(
            max_iter=mean_rounds, learning_rate=learning_rate, max_leaf_nodes=leaves, max_features=0.5,
            random_state=0)),
        "boosted_trees_median": log_time_regressor(HistGradientBoostingRegressor(
            loss="absolute_error", max_iter=median_rounds, learning_rate=learning_rate, max_leaf_nodes=leaves,
            random_state=0)),
        "quadratic_power_law": log_time_regressor(Pipeline([
            ("scale", StandardScaler()), ("square", PolynomialFeatures(2)),
            ("ridge", RidgeCV(alphas=np.logspace(-3, 3, 13)))])),
    }


def default_candidates() -> dict[str, object]:
    """Time regressors that cross-validation chooses from, per algorithm (and kernel path).

    Two kinds of boosted trees, one fitting the mean of the log ratio with half the
    features per split (decorrelated trees), one its median (robust to the few runs whose
    kernel choice the features miss), and a quadratic power law. The trees are compact:
    63 leaves, 200 and 150 rounds at learning rate 0.1. Prediction walks every tree for
    every layer, so the number of trees sets its speed; see :func:`accurate_candidates`.
    """
    return _candidates(leaves=63, mean_rounds=200, median_rounds=150, learning_rate=0.1)


def accurate_candidates() -> dict[str, object]:
    """The same three kinds with four times the trees (31 leaves, 800 and 600 rounds at
    learning rate 0.05): on the H100 data about half a point lower MAPE and twice the
    prediction time (``benchmarks/ablation.py``, variant ``accurate_trees``)."""
    return _candidates(leaves=31, mean_rounds=800, median_rounds=600, learning_rate=0.05)


#: Candidate sets by name (``seer train --trees``).
CANDIDATE_SETS = {"compact": default_candidates, "accurate": accurate_candidates}


def mape(measured, predicted) -> float:
    """Mean absolute percentage error, in percent."""
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    return float(np.mean(np.abs(predicted / measured - 1)) * 100)


#: Kernel paths of an algorithm, told apart by its workspace (see the module docstring).
WITH_WORKSPACE, WITHOUT_WORKSPACE, ALL_RUNS = "workspace", "no_workspace", "all"


def _classifier(max_iter: int):
    return HistGradientBoostingClassifier(max_iter=max_iter, max_leaf_nodes=63, random_state=0)


class WorkspaceModel(TransformerMixin, BaseEstimator):
    """What cuDNN answers for a shape before anything runs, predicted from the shape.

    ``fit(X, W)`` takes shapes and a frame with one column per algorithm: the workspace
    (bytes) cuDNN asked for where the algorithm runs, NaN where it does not (not
    supported, workspace over the cap). ``transform`` gives, per algorithm, three columns:
    ``p_runs`` (probability that it runs), ``p_workspace`` (probability that its workspace
    is non-zero, given that it runs) and ``log2_workspace`` (predicted log2 bytes of a
    non-zero workspace).

    Parameters
    ----------
    gpu : str, default="h100"
        GPU spec whose figures enter the shape features.
    min_answers : int, default=20
        Fewer answers of a kind than this: the answer is taken as constant (an algorithm
        that ran on fewer shapes never runs; a path seen fewer times is never taken).
    max_iter : int, default=300
        Boosting rounds of each classifier and regressor (gradient-boosted trees of 63 leaves).

    Attributes
    ----------
    algorithms_ : list of str
    features_ : ShapeFeatures
    runs_, nonzero_ : dict
        Per algorithm, a fitted classifier or ``"always"`` / ``"never"``.
    log2_bytes_ : dict
        Per algorithm, a fitted regressor of log2 bytes, or the constant log2 bytes.
    """

    def __init__(self, gpu: str = "h100", min_answers: int = 20, max_iter: int = 300) -> None:
        self.gpu = gpu
        self.min_answers = min_answers
        self.max_iter = max_iter

    def fit(self, X: pd.DataFrame, W: pd.DataFrame) -> "WorkspaceModel":
        X = _shapes(X)
        if len(X) != len(W):
            raise ValueError(f"X has {len(X)} shapes but W has {len(W)} rows")
        self.features_ = ShapeFeatures(self.gpu).fit(X)
        F = self.features_.transform(X)
        self.algorithms_ = [str(a) for a in W.columns]
        self.runs_, self.nonzero_, self.log2_bytes_ = {}, {}, {}
        for algo in self.algorithms_:
            workspace = W[algo].to_numpy(dtype=float)
            runs = np.isfinite(workspace)
            self.runs_[algo] = self._decision(F, runs)
            nonzero = workspace[runs] > 0
            self.nonzero_[algo] = self._decision(F[runs], nonzero) if runs.sum() else NEVER
            sized = np.log2(workspace[runs][nonzero])
            if len(sized) >= self.min_answers and np.ptp(sized) > 0:
                self.log2_bytes_[algo] = HistGradientBoostingRegressor(
                    max_iter=self.max_iter, max_leaf_nodes=63, random_state=0).fit(F[runs][nonzero], sized)
            else:
                self.log2_bytes_[algo] = float(sized.mean()) if len(sized) else 0.0
        return self

    def _decision(self, F: np.ndarray, labels: np.ndarray):
        """A classifier of ``labels``, or a constant where one side has too few examples."""
        if labels.sum() < self.min_answers:
            return NEVER
        if (~labels).sum() < self.min_answers:
            return ALWAYS
        return _classifier(self.max_iter).fit(F, labels)

    def transform(self, X) -> np.ndarray:
        check_is_fitted(self, "runs_")
        return self._answers(self.features_.transform(_shapes(X)))

    def _answers(self, F: np.ndarray, only_where_runs: bool = False) -> np.ndarray:
        """The answers per row of features ``F``; with ``only_where_runs``, the workspace
        answers are left NaN where the algorithm is predicted not to run (they would be
        the most expensive part of the answers and nothing masked reads them there)."""
        out = np.full((len(F), 3 * len(self.algorithms_)), np.nan)
        for j, algo in enumerate(self.algorithms_):
            p_runs = _probability(self.runs_[algo], F)
            out[:, 3 * j] = p_runs
            rows = p_runs >= RUNS_THRESHOLD if only_where_runs else slice(None)
            F_run = F[rows]
            out[rows, 3 * j + 1] = _probability(self.nonzero_[algo], F_run)
            size = self.log2_bytes_[algo]
            out[rows, 3 * j + 2] = size if isinstance(size, float) else (size.predict(F_run) if len(F_run) else 0.0)
        return out

    def get_feature_names_out(self, input_features=None) -> np.ndarray:
        return np.array([f"{algo}_{name}" for algo in self.algorithms_ for name in ANSWER_NAMES], dtype=object)


#: What :class:`WorkspaceModel` answers per algorithm, in its column order.
ANSWER_NAMES = ("p_runs", "p_workspace", "log2_workspace")


def _probability(decision, F: np.ndarray) -> np.ndarray:
    if isinstance(decision, str):
        return np.full(len(F), 1.0 if decision == ALWAYS else 0.0)
    if not len(F):
        return np.empty(0)
    return decision.predict_proba(F)[:, list(decision.classes_).index(True)]


class AlgorithmSelector(BaseEstimator):
    """Per-algorithm time regressors over shape features and cuDNN's predicted answers.

    Parameters
    ----------
    candidates : dict of str to regressor, default=None
        Time regressors to choose from per algorithm (and kernel path) by ``cv``-fold
        cross-validated MAPE on the training data; None means :func:`default_candidates`.
        Each is cloned.
    classifier : classifier, default=None
        Without a census or workspaces, predicts whether an algorithm runs on a shape;
        None means gradient-boosted trees.
    gpu : str, default="h100"
        GPU spec whose SM count and peaks enter the shape features.
    cv : int, default=5
        Folds of the cross-validations (regressor choice; first-stage answers for the
        training shapes when no census is given; the pick weight).
    min_runs : int, default=20
        Fewer successful training runs than this: the algorithm is treated as never
        running; a kernel path with fewer runs gets no regressor of its own.
    baseline : {"roofline", "none"}, default="roofline"
        What the regressors predict a ratio to: the algorithm's fixed cost plus the roofline
        floor (see the module docstring), or nothing (1 ms: they predict time directly).
    workspace_model : WorkspaceModel, default=None
        The first stage to clone and fit (its ``gpu`` is set to ``gpu``); None means
        ``WorkspaceModel(min_answers=min_runs)``.

    Attributes
    ----------
    algorithms_ : list of str
        The columns of ``Y``, in the order ``predict`` returns them.
    features_ : ShapeFeatures
        The fitted feature transformer.
    workspace_model_ : WorkspaceModel or None
        The first stage (None when fitted without a census or workspaces).
    supports_ : dict
        Per algorithm, ``"always"`` / ``"never"``, ``"workspace model"`` (the first stage
        decides) or a fitted classifier.
    regressors_ : dict
        Per algorithm that runs anywhere, its fitted time regressors by kernel path
        (``"all"``, or ``"workspace"`` and ``"no_workspace"``).
    fixed_cost_ms_ : dict of str to float
        Per algorithm that runs anywhere, the fixed cost in its baseline (0 with
        ``baseline="none"``).
    choice_ : dict
        Per algorithm and kernel path, the candidate chosen.
    cv_mape_ : dict
        Per algorithm, kernel path and candidate, the cross-validated MAPE (percent).
    training_ranges_ : dict of str to [min, max]
        Ranges of the shape fields (and of log2 FLOPs) seen in training.
    """

    def __init__(self, candidates=None, classifier=None, gpu: str = "h100", cv: int = 5,
                 min_runs: int = 20, baseline: str = "roofline", workspace_model=None) -> None:
        self.candidates = candidates
        self.classifier = classifier
        self.gpu = gpu
        self.cv = cv
        self.min_runs = min_runs
        self.baseline = baseline
        self.workspace_model = workspace_model

    def fit(self, X: pd.DataFrame, Y: pd.DataFrame, W: pd.DataFrame | None = None,
            census: tuple[pd.DataFrame, pd.DataFrame] | None = None) -> "AlgorithmSelector":
        """Fit on shapes ``X`` and times ``Y`` (one column per algorithm, NaN: did not run).

        ``W`` (``Y``'s layout) holds the workspaces of the training runs, which tell their
        kernel paths. ``census`` is ``(shapes, workspaces)`` of shapes cuDNN was only asked
        about, workspaces in ``W``'s layout (NaN: does not run). With a census the first
        stage learns from it; without one, from ``W``, and its answers for the training
        shapes then come out of fold; with neither there is no first stage.
        """
        X = _shapes(X)
        if len(X) != len(Y):
            raise ValueError(f"X has {len(X)} shapes but Y has {len(Y)} rows")
        if W is not None and (len(W) != len(Y) or list(W.columns) != list(Y.columns)):
            raise ValueError("W must have Y's rows and columns")
        if self.baseline not in BASELINES:
            raise ValueError(f"baseline must be one of {', '.join(BASELINES)}, got {self.baseline!r}")
        self.features_ = ShapeFeatures(self.gpu).fit(X)
        F = self.features_.transform(X)
        self.algorithms_ = [str(a) for a in Y.columns]
        folds = KFold(n_splits=self.cv, shuffle=True, random_state=0)
        answers = self._fit_workspace_model(X, W, census, folds)
        candidates = self.candidates if self.candidates is not None else default_candidates()
        classifier = self.classifier if self.classifier is not None else HistGradientBoostingClassifier(
            max_iter=50, max_leaf_nodes=15, random_state=0)
        self.supports_, self.regressors_, self.choice_, self.cv_mape_ = {}, {}, {}, {}
        self.fixed_cost_ms_ = {}
        out_of_fold = np.full((len(X), len(self.algorithms_)), np.nan)
        for j, algo in enumerate(self.algorithms_):
            times = Y[algo].to_numpy(dtype=float)
            runs = np.isfinite(times) & (times > 0)
            if runs.sum() < self.min_runs:
                self.supports_[algo] = NEVER
                continue
            if self.workspace_model_ is not None:
                self.supports_[algo] = "workspace model"
            else:
                self.supports_[algo] = ALWAYS if runs.all() else clone(classifier).fit(F, runs)
            self.fixed_cost_ms_[algo] = (float(np.quantile(times[runs], FIXED_COST_QUANTILE))
                                         if self.baseline == "roofline" else 0.0)
            inputs, base = self._inputs(F, answers, algo), self._baseline_ms(F, algo)
            ratio = np.where(runs, times, np.nan) / base
            self.regressors_[algo], self.choice_[algo], self.cv_mape_[algo] = {}, {}, {}
            own_path = {}
            for path, members in self._paths(algo, runs, W).items():
                # A ratio's relative error is the time's, so the CV scores stay MAPEs of time.
                predictions = {name: cross_val_predict(clone(c), inputs[members], ratio[members], cv=folds)
                               for name, c in candidates.items()}
                scores = {name: mape(ratio[members], p) for name, p in predictions.items()}
                best = min(scores, key=scores.get)
                self.cv_mape_[algo][path] = {name: round(v, 3) for name, v in scores.items()}
                self.choice_[algo][path] = best
                self.regressors_[algo][path] = clone(candidates[best]).fit(inputs[members], ratio[members])
                own_path[path] = (members, predictions[best])
            # The pick weight is tuned on out-of-fold times: each run's own path out of
            # fold, the other path (which never saw the run) as fitted.
            ratios = {path: self.regressors_[algo][path].predict(inputs[runs]) for path in own_path}
            for path, (members, predicted) in own_path.items():
                ratios[path][members[runs]] = predicted
            out_of_fold[runs, j] = self._mix(algo, ratios, answers[runs] if answers is not None else None) * base[runs]
        self._fit_pick(self._pick_inputs(F, answers), Y.to_numpy(dtype=float), out_of_fold, folds)
        log_flops = log2_flops(X)
        self.training_ranges_ = {f: [int(X[f].min()), int(X[f].max())] for f in SEER_FIELDS}
        self.training_ranges_["log2_flops"] = [float(log_flops.min()), float(log_flops.max())]
        return self

    def _fit_workspace_model(self, X: pd.DataFrame, W, census, folds) -> np.ndarray | None:
        """Fit the first stage; return its answers for the training shapes (None without one)."""
        self.workspace_model_ = None
        template = (self.workspace_model if self.workspace_model is not None
                    else WorkspaceModel(min_answers=self.min_runs))
        template = clone(template).set_params(gpu=self.gpu)
        if census is not None:
            shapes, workspaces = census
            self.workspace_model_ = clone(template).fit(shapes, workspaces.reindex(columns=self.algorithms_))
            return self.workspace_model_.transform(X)
        if W is None:
            return None
        # Answers for a training shape come from a model that never saw it, as for a new one.
        answers = np.empty((len(X), 3 * len(self.algorithms_)))
        for fit_rows, held_out in folds.split(X):
            fold = clone(template).fit(X.iloc[fit_rows], W.iloc[fit_rows])
            answers[held_out] = fold.transform(X.iloc[held_out])
        self.workspace_model_ = clone(template).fit(X, W)
        return answers

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

    def _inputs(self, F: np.ndarray, answers: np.ndarray | None, algo: str) -> np.ndarray:
        """A time regressor's inputs: the shape features and the first stage's workspace answers
        for ``algo`` (whether it runs is not news to a model of the runs that happened)."""
        if answers is None:
            return F
        j = self.algorithms_.index(algo)
        return np.hstack([F, answers[:, 3 * j + 1:3 * j + 3]])

    def _pick_inputs(self, F: np.ndarray, answers: np.ndarray | None) -> np.ndarray:
        """The fastest-algorithm classifier's inputs: the shape features and every algorithm's
        answers, its workspace answers set to :data:`NOT_RUN` where it is predicted not to
        run. There its workspace means nothing, and not computing it spares prediction the
        first stage's costliest part."""
        if answers is None:
            return F
        answers = answers.copy()
        for j in range(len(self.algorithms_)):
            answers[answers[:, 3 * j] < RUNS_THRESHOLD, 3 * j + 1:3 * j + 3] = NOT_RUN
        return np.hstack([F, answers])

    def _path_weight(self, algo: str, answers: np.ndarray) -> np.ndarray:
        """Weight of the workspace path per row: the first stage's probability of it, with
        :data:`NEGLIGIBLE_PATH` at either end rounded to certainty."""
        p = answers[:, 3 * self.algorithms_.index(algo) + 1]
        return np.where(p < NEGLIGIBLE_PATH, 0.0, np.where(p > 1 - NEGLIGIBLE_PATH, 1.0, p))

    def _mix(self, algo: str, ratios: dict[str, np.ndarray], answers: np.ndarray | None) -> np.ndarray:
        """One ratio per row from the paths' predictions: geometric mean weighted by the
        first stage's probability of each path (the paths' times can differ several-fold)."""
        if ALL_RUNS in ratios:
            return ratios[ALL_RUNS]
        weight = self._path_weight(algo, answers)
        log_ratio = np.zeros(len(weight))
        for path, path_weight in ((WITH_WORKSPACE, weight), (WITHOUT_WORKSPACE, 1 - weight)):
            used = path_weight > 0
            log_ratio[used] += path_weight[used] * np.log(ratios[path][used])
        return np.exp(log_ratio)

    def _predict_ratios(self, algo: str, inputs: np.ndarray, answers: np.ndarray | None) -> np.ndarray:
        """The mixed ratio to the baseline per row of ``inputs``, evaluating each path's
        regressor only on the rows where that path has weight."""
        regressors = self.regressors_[algo]
        if ALL_RUNS in regressors:
            return regressors[ALL_RUNS].predict(inputs)
        weight = self._path_weight(algo, answers)
        ratios = {}
        for path, used in ((WITH_WORKSPACE, weight > 0), (WITHOUT_WORKSPACE, weight < 1)):
            ratios[path] = np.ones(len(inputs))
            if used.any():
                ratios[path][used] = regressors[path].predict(inputs[used])
        return self._mix(algo, ratios, answers)

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

    # Public methods take shapes; each computes the features and the first stage's answers
    # once and hands them to the private methods below, which the public ones share.
    def _prepare(self, X, complete: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Features and the first stage's answers; ``complete=False`` leaves out the workspace
        answers of algorithms predicted not to run (enough for masked predictions)."""
        F = self.features_.transform(_shapes(X))
        model = getattr(self, "workspace_model_", None)
        # Both stages compute the same stateless features of the same GPU: computed once.
        return F, (model._answers(F, only_where_runs=not complete) if model is not None else None)

    def predict_support(self, X: pd.DataFrame) -> np.ndarray:
        """Probability that each algorithm runs on each shape, shape (n_shapes, n_algorithms)."""
        check_is_fitted(self, "supports_")
        return self._support(*self._prepare(X, complete=False))

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted time (ms) per shape and algorithm; NaN where predicted not to run."""
        check_is_fitted(self, "regressors_")
        return self._times(*self._prepare(X, complete=False))

    def predict_unmasked(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted time (ms) per shape and algorithm as if every algorithm ran (NaN only for
        algorithms that never ran in training): to judge the time models on their own."""
        check_is_fitted(self, "regressors_")
        return self._times(*self._prepare(X), masked=False)

    def predict_with_scores(self, X: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predict` and :meth:`pick_scores` together, from one pass over the models."""
        check_is_fitted(self, "regressors_")
        F, answers = self._prepare(X, complete=False)
        times = self._times(F, answers)
        return times, self._scores(F, answers, times)

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

    def _support(self, F: np.ndarray, answers: np.ndarray | None) -> np.ndarray:
        out = np.empty((len(F), len(self.algorithms_)))
        for j, algo in enumerate(self.algorithms_):
            support = self.supports_[algo]
            if support == "workspace model":
                out[:, j] = answers[:, 3 * j]
            else:
                out[:, j] = _probability(support, F)
        return out

    def _baseline_ms(self, F: np.ndarray, algo: str) -> np.ndarray:
        """What algorithm ``algo``'s regressor predicts a ratio to, per row of ``F``, in ms."""
        if self.baseline == "none":
            return np.ones(len(F))
        column = list(self.features_.get_feature_names_out()).index("log2_roofline_floor_s")
        return self.fixed_cost_ms_[algo] + 2.0 ** F[:, column] * 1e3

    def _times(self, F: np.ndarray, answers: np.ndarray | None, masked: bool = True) -> np.ndarray:
        runs = (self._support(F, answers) >= RUNS_THRESHOLD if masked
                else np.ones((len(F), len(self.algorithms_)), dtype=bool))
        out = np.full((len(F), len(self.algorithms_)), np.nan)
        for j, algo in enumerate(self.algorithms_):
            rows = runs[:, j]
            if algo not in self.regressors_ or not rows.any():
                continue
            answers_run = answers[rows] if answers is not None else None
            ratios = self._predict_ratios(algo, self._inputs(F[rows], answers_run, algo), answers_run)
            out[rows, j] = ratios * self._baseline_ms(F[rows], algo)
        return out

    def _scores(self, F: np.ndarray, answers: np.ndarray | None, times: np.ndarray) -> np.ndarray:
        classifier = getattr(self, "pick_classifier_", None)
        if classifier is None or not len(times):
            return times
        proba = np.zeros_like(times)
        probabilities = classifier.predict_proba(self._pick_inputs(F, answers))
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

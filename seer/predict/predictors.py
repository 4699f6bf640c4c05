"""Fitted models as seer predicts with them: numpy, a compiled tree loop and plain data, no scikit-learn.

Training (:mod:`seer.training.estimators`, :mod:`seer.training.seer_baseline`) fits scikit-learn estimators
and converts what it learned into the classes here; model files store these classes'
state (:mod:`seer.predict.persist`) and loading builds them back, so prediction neither imports
nor depends on the library that trained the model.

Parts (each predicts from a feature matrix):

- :class:`Constant`, :class:`BoostedRegressor` (a boosted-tree sum), :class:`LogTarget`
  (``exp`` of another part: the time regressors fit log ratios), :class:`QuadraticRegressor`
  (ridge regression on standardised features and their pairwise products);
- :class:`BoostedClassifier` (class probabilities of a boosted classifier) and
  :class:`TreeClassifier` / :class:`TreeRegressor` (single decision trees, SEER's model).

Models: :class:`WorkspacePredictor` (the first stage: what cuDNN answers before anything
runs), :class:`AlgorithmPredictor` (every algorithm's time and the pick),
:class:`AnswerTimePredictor` (cuDNN's algorithms' times from cuDNN's own answers, on a GPU host, with
:class:`VariantTimes` where the kernel variant launched is guessed with confidence) and
:class:`SeerAlgorithmPredictor` / :class:`SeerFamilyPredictor` (SEER's model, the baseline).
Each class's ``state()`` gives its fields as plain data and arrays, and ``from_state``
checks them before it builds anything.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from typing import TYPE_CHECKING, Any, ClassVar, Sequence

import numpy as np

from seer.algorithms import FAMILIES, algorithm_names, get_algorithm
from seer.hardware.gpus import GPUSpec, spec_from_fields
from seer.hardware.kernel_plans import runs_layers
from seer.layers.shapes import LAYER_COLUMNS, LayerTable, is_seer_layer, layer_columns, layer_frame, table_rows
from seer.predict.features import (TRANSFORM_FEATURES, feature_matrix, feature_names, log2_flops, shape_features,
                                   transform_matrix)
from seer.predict.trees import TreeEnsemble, TreeError
from seer.predict.uncertainty import (check_guard_margins, check_intervals, check_near_best, guard_margin,
                                      interval_bounds, interval_kind, near_best_probability, pick_margin)

if TYPE_CHECKING:  # imported where used: seer predict computes on layer tables, without pandas
    import pandas as pd

#: Support decisions that need no classifier: the algorithm ran on every or no training shape.
ALWAYS, NEVER = "always", "never"
#: The support of an algorithm that the first stage decides.
BY_FIRST_STAGE = "workspace model"
#: The support of seer's own kernels: their launch plan decides, exactly, from the shape
#: (:func:`seer.hardware.kernel_plans.unsupported_reason`).
BY_KERNEL_PLAN = "kernel plan"
#: The algorithms that have such a plan: seer's own kernels.
KERNEL_PLAN_ALGORITHMS = tuple(algorithm_names("cupy"))
#: What the time regressors predict a ratio to (see :class:`AlgorithmPredictor`).
BASELINES = ("roofline", "none")
#: An algorithm is predicted to run where the probability that it runs is at least this.
RUNS_THRESHOLD = 0.5
#: A kernel path less probable than this is left out of the mix, and its regressor is not
#: evaluated there. Leaving out a path of probability p moves a predicted time by at most
#: p x |ln(ratio of the two paths' times)|.
NEGLIGIBLE_PATH = 1e-4
#: How many features layers are sorted by before a model's trees walk them
#: (:meth:`AlgorithmPredictor.walk_order`): those its trees split on first most often.
WALK_FEATURES = 3
#: Workspace answers of an algorithm predicted not to run, as the pick classifier reads
#: them: below both answers' ranges (a probability; log2 of at least one byte).
NOT_RUN = -1.0
#: What the first stage answers per algorithm, in its column order.
ANSWER_NAMES = ("p_runs", "p_workspace", "log2_workspace")
#: Kernel paths of an algorithm, told apart by its workspace.
WITH_WORKSPACE, WITHOUT_WORKSPACE, ALL_RUNS = "workspace", "no_workspace", "all"
PATHS = (WITH_WORKSPACE, WITHOUT_WORKSPACE, ALL_RUNS)


class StateError(ValueError):
    """A model's state that does not describe a valid predictor (a damaged or hand-made file)."""


#: The largest log value (of a time ratio or a power) a model may give: e^100 is already
#: far beyond any GPU's time or power, and exp overflows past e^709.
MAX_LOG_VALUE = 100.0


def _require(state: Any, key: str, kinds, where: str):
    """``state[key]`` if it is one of ``kinds``; StateError otherwise."""
    if not isinstance(state, dict) or key not in state:
        raise StateError(f"{where}: missing {key!r}")
    value = state[key]
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise StateError(f"{where}: {key!r} has the wrong type")
    if not isinstance(value, kinds):
        raise StateError(f"{where}: {key!r} has the wrong type")
    return value


def _array(state: dict, key: str, kind: str, ndim: int, where: str) -> np.ndarray:
    """A numeric array of the given dtype kind ('f' float, 'i' integer) and dimension."""
    value = _require(state, key, np.ndarray, where)
    if value.ndim != ndim or value.dtype.kind not in kind:
        raise StateError(f"{where}: {key!r} must be a {ndim}-D array of kind {kind!r}")
    return value


class Part:
    """A fitted piece of a model, registered by its exact class name for model files."""

    registry: ClassVar[dict[str, type]] = {}

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        Part.registry[cls.__name__] = cls

    def state(self) -> dict:
        """The fields as plain data: an ensemble as its arrays (:mod:`seer.predict.trees`) and
        ``n_features``, a GPU spec as its fields; everything else as it is."""
        out = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, TreeEnsemble):
                out[f.name], out["n_features"] = value.arrays(), value.n_features
            elif isinstance(value, GPUSpec):
                out[f.name] = asdict(value)
            else:
                out[f.name] = value
        return out

    @property
    def n_inputs(self) -> int | None:
        """How many input columns the part reads (None: any number)."""
        trees = getattr(self, "trees", None)
        return trees.n_features if isinstance(trees, TreeEnsemble) else None

    @classmethod
    def from_state(cls, state: dict) -> "Part":
        raise NotImplementedError


def _ensembles(value: Any):
    """Every tree ensemble in a part, its fields and the dicts and lists they hold."""
    if isinstance(value, TreeEnsemble):
        yield value
    elif isinstance(value, Part):
        for f in fields(value):
            yield from _ensembles(getattr(value, f.name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _ensembles(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _ensembles(item)


# -- parts --------------------------------------------------------------------------------
@dataclass
class Constant(Part):
    """The same value for every row."""

    value: float

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.value)

    @classmethod
    def from_state(cls, state: dict) -> "Constant":
        return cls(float(_require(state, "value", (int, float), cls.__name__)))


@dataclass
class BoostedRegressor(Part):
    """A boosted-tree regressor: the ensemble's one raw output."""

    trees: TreeEnsemble

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.trees.raw(X)[:, 0]

    @classmethod
    def from_state(cls, state: dict) -> "BoostedRegressor":
        trees = _trees(state, cls.__name__)
        if trees.n_outputs != 1:
            raise StateError(f"{cls.__name__}: a regressor has one output")
        return cls(trees)


def _trees(state: dict, where: str) -> TreeEnsemble:
    arrays = _require(state, "trees", dict, where)
    n_features = _require(state, "n_features", int, where)
    try:
        return TreeEnsemble(**{name: arrays.get(name) for name in ("feature", "threshold", "left", "missing_left",
                                                                   "value", "roots", "output", "base")},
                            n_features=n_features)
    except TreeError as exc:
        raise StateError(f"{where}: {exc}") from None


@dataclass
class LogTarget(Part):
    """``exp`` of a regressor fitted on log values (times span orders of magnitude; errors are relative)."""

    regressor: Part

    def predict(self, X: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):  # an overflow is inf, which Model.predict refuses
            return np.exp(self.regressor.predict(X))

    @property
    def n_inputs(self) -> int | None:
        return self.regressor.n_inputs

    @classmethod
    def from_state(cls, state: dict) -> "LogTarget":
        regressor = _require(state, "regressor", (BoostedRegressor, QuadraticRegressor, Constant), cls.__name__)
        # exp overflows past e^709: a log value that large is no time or power of any GPU.
        if isinstance(regressor, Constant):
            low = high = regressor.value
        elif isinstance(regressor, BoostedRegressor):
            low, high = (bound[0] for bound in regressor.trees.output_bounds())
        else:
            low = high = 0.0  # a polynomial has no bound; Model.predict checks its answers
        if not -MAX_LOG_VALUE <= low <= high <= MAX_LOG_VALUE:
            raise StateError(f"{cls.__name__}: its log values reach {max(abs(low), abs(high)):.3g}, "
                             f"beyond e^{MAX_LOG_VALUE:g} of any real value")
        return cls(regressor)


@dataclass
class QuadraticRegressor(Part):
    """A linear model of the standardised features and all their products up to degree 2."""

    mean: np.ndarray
    scale: np.ndarray
    powers: np.ndarray  # (n_terms, n_features): each term's exponent of each feature
    coef: np.ndarray
    intercept: float

    @property
    def n_inputs(self) -> int | None:
        return len(self.mean)

    def predict(self, X: np.ndarray) -> np.ndarray:
        Z = (np.asarray(X, dtype=float) - self.mean) / self.scale
        terms = np.ones((len(Z), len(self.powers)))
        for j, exponents in enumerate(self.powers):
            for feature in np.flatnonzero(exponents):
                terms[:, j] *= Z[:, feature] ** exponents[feature]
        return terms @ self.coef + self.intercept

    @classmethod
    def from_state(cls, state: dict) -> "QuadraticRegressor":
        where = cls.__name__
        mean, scale = _array(state, "mean", "f", 1, where), _array(state, "scale", "f", 1, where)
        powers, coef = _array(state, "powers", "iu", 2, where), _array(state, "coef", "f", 1, where)
        if len(scale) != len(mean) or powers.shape != (len(coef), len(mean)) or np.any(powers < 0) \
                or np.any(powers > 2):
            raise StateError(f"{where}: arrays of inconsistent sizes")
        return cls(mean, scale, powers, coef, float(_require(state, "intercept", (int, float), where)))


@dataclass
class BoostedClassifier(Part):
    """Class probabilities of a boosted classifier: a sigmoid of one output for two classes,
    a softmax over one output per class otherwise."""

    trees: TreeEnsemble
    classes: list

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        raw = self.trees.raw(X)
        if len(self.classes) == 2:
            with np.errstate(over="ignore"):  # exp(-raw) = inf gives the right limit, 0
                positive = 1.0 / (1.0 + np.exp(-raw[:, 0]))
            return np.column_stack([1.0 - positive, positive])
        raw = np.exp(raw - raw.max(axis=1, keepdims=True))
        return raw / raw.sum(axis=1, keepdims=True)

    def probability_of(self, label, X: np.ndarray) -> np.ndarray:
        return self.predict_proba(X)[:, self.classes.index(label)]

    @classmethod
    def from_state(cls, state: dict) -> "BoostedClassifier":
        trees = _trees(state, cls.__name__)
        classes = _require(state, "classes", list, cls.__name__)
        if len(classes) < 2 or trees.n_outputs != (1 if len(classes) == 2 else len(classes)) \
                or not all(isinstance(c, (str, bool)) for c in classes):
            raise StateError(f"{cls.__name__}: classes do not match the trees' outputs")
        return cls(trees, classes)


@dataclass
class TreeRegressor(Part):
    """One decision tree's prediction. Its inputs are rounded to float32 first, as the
    library that grew it compares them."""

    trees: TreeEnsemble

    def predict(self, X: np.ndarray) -> np.ndarray:
        return self.trees.raw(np.asarray(X, dtype=np.float32))[:, 0]

    @classmethod
    def from_state(cls, state: dict) -> "TreeRegressor":
        trees = _trees(state, cls.__name__)
        if trees.n_outputs != 1 or trees.n_trees != 1:
            raise StateError(f"{cls.__name__}: one tree with one output")
        return cls(trees)


@dataclass
class TreeClassifier(Part):
    """One decision tree's predicted class: its leaves hold the index of the class."""

    trees: TreeEnsemble
    classes: list

    def predict(self, X: np.ndarray) -> np.ndarray:
        index = self.trees.raw(np.asarray(X, dtype=np.float32))[:, 0].astype(np.int64)
        return np.asarray(self.classes, dtype=object)[index]

    @classmethod
    def from_state(cls, state: dict) -> "TreeClassifier":
        trees = _trees(state, cls.__name__)
        classes = _require(state, "classes", list, cls.__name__)
        leaves = trees.value[trees.left < 0]
        if trees.n_trees != 1 or not classes or np.any((leaves < 0) | (leaves >= len(classes))
                                                       | (leaves != np.floor(leaves))):
            raise StateError(f"{cls.__name__}: leaves must name one of the classes")
        return cls(trees, classes)


def _decision(value, where: str):
    """A support or path decision: ALWAYS, NEVER or a boosted classifier of True/False."""
    if value in (ALWAYS, NEVER) or isinstance(value, BoostedClassifier) and True in value.classes:
        return value
    raise StateError(f"{where}: a decision must be {ALWAYS!r}, {NEVER!r} or a classifier of True/False")


def probability(decision, X: np.ndarray) -> np.ndarray:
    """Probability of True per row: 1 or 0 for a constant decision."""
    if isinstance(decision, str):
        return np.full(len(X), 1.0 if decision == ALWAYS else 0.0)
    if not len(X):
        return np.empty(0)
    return decision.probability_of(True, X)


# -- seer's model -------------------------------------------------------------------------
@dataclass
class WorkspacePredictor(Part):
    """What cuDNN answers for a shape before anything runs (the first stage).

    Per algorithm, three answers from the shape features: ``p_runs`` (probability that it
    runs: supported, workspace within the cap), ``p_workspace`` (probability that its
    workspace is non-zero, given that it runs) and ``log2_workspace`` (log2 bytes of a
    non-zero workspace). cuDNN settles an algorithm's kernel path when it sizes the
    workspace, so the second answer tells the path.
    """

    algorithms: list[str]
    runs: dict = field(default_factory=dict)
    nonzero: dict = field(default_factory=dict)
    log2_bytes: dict = field(default_factory=dict)

    def answers(self, F: np.ndarray, only_where_runs: bool = False) -> np.ndarray:
        """The answers per row of features ``F``, three columns per algorithm; with
        ``only_where_runs`` the workspace answers are left NaN where the algorithm is
        predicted not to run (the costliest part, and nothing masked reads them there)."""
        out = np.full((len(F), 3 * len(self.algorithms)), np.nan)
        for j, algo in enumerate(self.algorithms):
            p_runs = probability(self.runs[algo], F)
            out[:, 3 * j] = p_runs
            self._workspace_answers(out, F, j, p_runs >= RUNS_THRESHOLD if only_where_runs else slice(None))
        return out

    def completed(self, answers: np.ndarray, F: np.ndarray, j: int) -> np.ndarray:
        """``answers`` (of :meth:`answers` with ``only_where_runs``) with algorithm ``j``'s
        workspace answers on every row, as ``only_where_runs=False`` gives them."""
        missing = np.isnan(answers[:, 3 * j + 1])
        if not missing.any():
            return answers
        answers = answers.copy()
        self._workspace_answers(answers, F, j, missing)
        return answers

    def _workspace_answers(self, out: np.ndarray, F: np.ndarray, j: int, rows) -> None:
        algo, F_rows = self.algorithms[j], F[rows]
        out[rows, 3 * j + 1] = probability(self.nonzero[algo], F_rows)
        out[rows, 3 * j + 2] = self.log2_bytes[algo].predict(F_rows)

    def answer_names(self) -> list[str]:
        return [f"{algo}_{name}" for algo in self.algorithms for name in ANSWER_NAMES]

    @classmethod
    def from_state(cls, state: dict) -> "WorkspacePredictor":
        where = cls.__name__
        algorithms = _names(_require(state, "algorithms", list, where), where)
        parts = {}
        for key in ("runs", "nonzero", "log2_bytes"):
            parts[key] = _require(state, key, dict, where)
            if set(parts[key]) != set(algorithms):
                raise StateError(f"{where}: {key!r} must hold one entry per algorithm")
        for algo in algorithms:
            _decision(parts["runs"][algo], where)
            _decision(parts["nonzero"][algo], where)
            if not isinstance(parts["log2_bytes"][algo], (Constant, BoostedRegressor)):
                raise StateError(f"{where}: a workspace size must be a constant or a boosted regressor")
        return cls(algorithms, **parts)


def _names(values: list, where: str) -> list[str]:
    if not values or not all(isinstance(v, str) and v for v in values) or len(set(values)) != len(values):
        raise StateError(f"{where}: algorithms must be distinct names")
    return values


def with_cudnn_answers(answers: np.ndarray, algorithms: list[str], workspaces: pd.DataFrame,
                       workspace: bool = False) -> np.ndarray:
    """The first stage's ``answers`` (complete: :meth:`WorkspacePredictor.answers`) replaced by
    cuDNN's own where a GPU gave them: ``workspaces`` has a row per layer and a column per
    cuDNN algorithm (by name), the workspace bytes cuDNN asks for, NaN where it refuses the
    algorithm or asks for more than the cap. Whether each algorithm runs becomes certain.
    With ``workspace``, so do whether its workspace is non-zero (its kernel path) and its
    size where non-zero; the time models learnt from the first stage's answers, and on the
    held-out networks these answers make some algorithms' times better and others' worse
    (``benchmarks/cudnn_answers.py``), so by default they stay the first stage's."""
    answers = answers.copy()
    if len(workspaces) != len(answers):
        raise ValueError(f"cuDNN answered for {len(workspaces)} layers, the model predicts {len(answers)}")
    for j, algo in enumerate(algorithms):
        if algo not in workspaces.columns:
            continue
        size = workspaces[algo].to_numpy(dtype=float)
        runs, nonzero = np.isfinite(size), np.isfinite(size) & (size > 0)
        answers[:, 3 * j] = runs
        if not workspace:
            continue
        answers[runs, 3 * j + 1] = nonzero[runs]
        with np.errstate(divide="ignore"):
            answers[nonzero, 3 * j + 2] = np.log2(size[nonzero])
    return answers


#: The passes whose models take cuDNN's workspace answers, where a GPU gives them, as the
#: kernel path (and its size) too, not only as whether each algorithm runs: their models learnt
#: no times from cuDNN's answers, and there the path's answer makes their time errors smaller
#: (``benchmarks/cudnn_answers.py --pass``). The forward keeps its first stage's path.
PATH_ANSWER_PASSES = ("bwd_data", "bwd_filter")


#: The answer input of an algorithm cuDNN refuses (or that asks for more than the cap):
#: below log2(1 + bytes) of any workspace, zero included.
REFUSED = -1.0


def answer_inputs(workspaces: np.ndarray) -> np.ndarray:
    """cuDNN's answers as inputs of :class:`AnswerTimePredictor`: per algorithm (column),
    log2(1 + workspace bytes), or :data:`REFUSED` where ``workspaces`` is NaN."""
    workspaces = np.asarray(workspaces, dtype=float)
    with np.errstate(invalid="ignore"):
        sizes = np.log2(1 + workspaces)
    return np.where(np.isfinite(sizes), sizes, REFUSED)


def answer_paths(workspace: np.ndarray) -> dict[str, np.ndarray]:
    """Rows per kernel path as cuDNN's workspace answer tells it: non-zero or zero."""
    with_workspace = np.asarray(workspace, dtype=float) > 0
    return {WITH_WORKSPACE: with_workspace, WITHOUT_WORKSPACE: ~with_workspace}


#: The class of :class:`VariantTimes`' classifier that stands for every kernel variant
#: without a regressor of its own (too few training runs): a run guessed to be one of them
#: keeps the algorithm's single regressor. Not a kernel name (those have no parentheses).
RARE_VARIANTS = "(rare)"


@dataclass
class VariantTimes(Part):
    """One algorithm's times per kernel variant cuDNN launches inside it, the variant guessed.

    ``classifier`` guesses from the same inputs as the regressors (shape features and cuDNN's
    answers) which variant of the algorithm's kernels a run launches, as the run's CUPTI trace
    names it; where its top probability is at least ``threshold`` and that variant has a
    regressor on the run's kernel path (``regressors``: path -> variant -> regressor of the
    time's ratio to the baseline), the run takes that regressor's ratio. Every other run keeps
    the algorithm's single regressor: a variant guessed wrongly, or unsure, errs far more with
    the wrong variant's regressor than with the one fitted on every variant.
    """

    classifier: BoostedClassifier
    threshold: float
    regressors: dict

    def ratios(self, inputs: np.ndarray, paths: dict[str, np.ndarray], single: np.ndarray) -> np.ndarray:
        """Per row of ``inputs``: its guessed variant's ratio where sure, else ``single``'s.
        ``paths`` gives the rows of each kernel path (:data:`ALL_RUNS`: every row)."""
        out = np.array(single, dtype=float, copy=True)
        if not len(inputs):
            return out
        proba = self.classifier.predict_proba(inputs)
        guessed, sure = proba.argmax(axis=1), proba.max(axis=1) >= self.threshold
        for path, rows in paths.items():
            for variant, regressor in self.regressors.get(path, {}).items():
                members = rows & sure & (guessed == self.classifier.classes.index(variant))
                if members.any():
                    out[members] = regressor.predict(inputs[members])
        return out

    @property
    def n_inputs(self) -> int | None:
        return self.classifier.n_inputs

    @classmethod
    def from_state(cls, state: dict) -> "VariantTimes":
        where = cls.__name__
        classifier = _require(state, "classifier", BoostedClassifier, where)
        threshold = float(_require(state, "threshold", (int, float), where))
        if not 0.0 <= threshold <= 1.0:
            raise StateError(f"{where}: threshold must be a probability")
        regressors = _require(state, "regressors", dict, where)
        if not regressors or not set(regressors) <= set(PATHS):
            raise StateError(f"{where}: regressors must be by kernel path")
        for variants in regressors.values():
            if not isinstance(variants, dict) or not variants or not all(
                    isinstance(v, str) and v in classifier.classes and v != RARE_VARIANTS and isinstance(r, LogTarget)
                    and r.n_inputs == classifier.n_inputs for v, r in variants.items()):
                raise StateError(f"{where}: each regressor must be of a variant its classifier guesses, "
                                 f"reading the same inputs")
        return cls(classifier, threshold, regressors)


@dataclass
class AnswerTimePredictor(Part):
    """Times of cuDNN's algorithms where a GPU gave cuDNN's own answers (``seer predict
    --cudnn-answers``, :func:`seer.gpu.answers.cudnn_workspaces`).

    Per algorithm and kernel path, a regressor of the time's ratio to the algorithm's
    baseline (the :class:`AlgorithmPredictor`'s) from the shape features and cuDNN's answer
    for every algorithm of ``algorithms`` (:func:`answer_inputs`): which algorithms cuDNN takes
    and the workspace each asks for, which together tell the kernel path. The path of the
    algorithm itself is its workspace answer (:func:`answer_paths`), so no guess is mixed in.
    Where ``variants`` has an algorithm, its runs whose kernel variant is confidently guessed
    take that variant's regressor instead (:class:`VariantTimes`). The regressors of the
    algorithms in ``transform_inputs`` also read the transform algorithms' problem sizes
    (:func:`seer.predict.features.transform_matrix`), after the answers. Learnt from the
    measured runs' recorded answers and traces (:mod:`seer.training.answers`).
    """

    algorithms: list[str]
    regressors: dict
    variants: dict = field(default_factory=dict)
    transform_inputs: list = field(default_factory=list)

    def ratios(self, algo: str, F: np.ndarray, sizes: np.ndarray, transforms: np.ndarray | None = None) -> np.ndarray:
        """``algo``'s time over its baseline per row of features ``F`` and answer inputs ``sizes``;
        ``transforms`` (:func:`seer.predict.features.transform_matrix`'s values, same rows) is needed
        where ``algo`` is in :attr:`transform_inputs`."""
        blocks = [F, sizes]
        if algo in self.transform_inputs:
            if transforms is None:
                raise ValueError(f"{algo}'s answer-informed times read the transform features")
            blocks.append(transforms)
        inputs = np.hstack(blocks)
        paths = self.regressors[algo]
        if ALL_RUNS in paths:
            rows_of = {ALL_RUNS: np.ones(len(F), dtype=bool)}
        else:
            # log2(1 + bytes) is positive exactly where the workspace is.
            own = sizes[:, self.algorithms.index(algo)]
            rows_of = {WITH_WORKSPACE: own > 0, WITHOUT_WORKSPACE: own <= 0}
        out = np.empty(len(F))
        for path, rows in rows_of.items():
            if rows.any():
                out[rows] = paths[path].predict(inputs[rows])
        if algo in self.variants:
            out = self.variants[algo].ratios(inputs, rows_of, out)
        return out

    @classmethod
    def from_state(cls, state: dict) -> "AnswerTimePredictor":
        where = cls.__name__
        algorithms = _names(_require(state, "algorithms", list, where), where)
        regressors = _require(state, "regressors", dict, where)
        if not regressors or not set(regressors) <= set(algorithms):
            raise StateError(f"{where}: regressors must be of algorithms whose answers it reads")
        for algo, paths in regressors.items():
            if not isinstance(paths, dict) or not (set(paths) == {ALL_RUNS} or set(paths) == {
                    WITH_WORKSPACE, WITHOUT_WORKSPACE}) or not all(isinstance(r, LogTarget) for r in paths.values()):
                raise StateError(f"{where}: {algo}'s regressors must be one per kernel path")
            if len({r.n_inputs for r in paths.values()}) != 1:
                raise StateError(f"{where}: {algo}'s regressors must read the same inputs")
        # Optional: files written before the transform features existed read none.
        transform_inputs = _require(state, "transform_inputs", list, where) if "transform_inputs" in state else []
        if transform_inputs and not set(_names(transform_inputs, where)) <= set(regressors):
            raise StateError(f"{where}: transform inputs must be of algorithms it has regressors of")
        if len({next(iter(paths.values())).n_inputs - (len(TRANSFORM_FEATURES) if algo in transform_inputs else 0)
                for algo, paths in regressors.items()}) != 1:
            raise StateError(f"{where}: every algorithm's regressors must read the same shape features and answers, "
                             f"and the transform features where it lists them")
        # Optional: files written before variants existed have none, and predict as they did.
        variants = state.get("variants", {})
        if not isinstance(variants, dict) or not set(variants) <= set(regressors):
            raise StateError(f"{where}: variants must be of algorithms it has regressors of")
        for algo, mixture in variants.items():
            if not isinstance(mixture, VariantTimes) or not set(mixture.regressors) <= set(regressors[algo]) \
                    or mixture.n_inputs != next(iter(regressors[algo].values())).n_inputs:
                raise StateError(f"{where}: {algo}'s variants must be on its kernel paths, reading its inputs")
        return cls(algorithms, regressors, variants, list(transform_inputs))

    @property
    def n_inputs(self) -> int | None:
        """The shape features and answers every regressor reads (without the transform features)."""
        algo, paths = next(iter(self.regressors.items()))
        return next(iter(paths.values())).n_inputs - (len(TRANSFORM_FEATURES) if algo in self.transform_inputs else 0)


def regressor_inputs(F: np.ndarray, answers: np.ndarray | None, j: int) -> np.ndarray:
    """A time regressor's inputs: the shape features and the first stage's workspace answers
    for algorithm ``j`` (whether it runs is not news to a model of the runs that happened)."""
    if answers is None:
        return F
    return np.hstack([F, answers[:, 3 * j + 1:3 * j + 3]])


def pick_inputs(F: np.ndarray, answers: np.ndarray | None) -> np.ndarray:
    """The fastest-algorithm classifier's inputs: the shape features and every algorithm's
    answers, the workspace answers set to :data:`NOT_RUN` where the algorithm is predicted
    not to run (there they mean nothing, and prediction need not compute them)."""
    if answers is None:
        return F
    answers = answers.copy()
    for j in range(answers.shape[1] // 3):
        answers[answers[:, 3 * j] < RUNS_THRESHOLD, 3 * j + 1:3 * j + 3] = NOT_RUN
    return np.hstack([F, answers])


def path_weight(answers: np.ndarray, j: int) -> np.ndarray:
    """Weight of the workspace path per row: the first stage's probability of it, with
    :data:`NEGLIGIBLE_PATH` at either end rounded to certainty."""
    p = answers[:, 3 * j + 1]
    return np.where(p < NEGLIGIBLE_PATH, 0.0, np.where(p > 1 - NEGLIGIBLE_PATH, 1.0, p))


def mix_paths(ratios: dict[str, np.ndarray], weight: np.ndarray | None) -> np.ndarray:
    """One ratio per row from the paths' predictions: their geometric mean weighted by the
    probability of each path (the paths' times can differ several-fold)."""
    if ALL_RUNS in ratios:
        return ratios[ALL_RUNS]
    log_ratio = np.zeros(len(weight))
    for path, path_weight_ in ((WITH_WORKSPACE, weight), (WITHOUT_WORKSPACE, 1 - weight)):
        used = path_weight_ > 0
        log_ratio[used] += path_weight_[used] * np.log(ratios[path][used])
    return np.exp(log_ratio)


def likeliest_path_ratio(ratios: dict[str, np.ndarray], weight: np.ndarray | None) -> np.ndarray:
    """One ratio per row: the path's whose expected relative error, over the probability of
    each path, is lowest. Between two paths whose times differ several-fold, any value in
    between errs more in expectation than one of the two; and an overestimate of a fast path
    errs more than an underestimate of a slow one, so the fast path wins unless it is unlikely."""
    if ALL_RUNS in ratios:
        return ratios[ALL_RUNS]
    with_, without = ratios[WITH_WORKSPACE], ratios[WITHOUT_WORKSPACE]
    error_if_with = (1 - weight) * np.abs(with_ / without - 1)
    error_if_without = weight * np.abs(without / with_ - 1)
    return np.where(error_if_with <= error_if_without, with_, without)


def path_mixture(regressor, inputs: np.ndarray, proba: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A regressor that reads a kernel path's indicators after ``inputs``, evaluated once per
    path (each path's indicator set) where the classifier's ``proba`` gives it at least
    :data:`NEGLIGIBLE_PATH`: per row, the ratio to report (the path's whose expected relative
    error over the probability of each path is lowest, as :func:`likeliest_path_ratio`) and
    the one the pick weighs (the paths' ratios mixed geometrically by their probabilities, as
    :func:`mix_paths`). The regressor learnt from each traced run's own path, so it is asked
    about one path at a time, never about a mixture of indicators it never saw."""
    n, k = proba.shape
    weight = np.where(proba >= NEGLIGIBLE_PATH, proba, 0.0)
    weight = weight / weight.sum(axis=1, keepdims=True)
    ratio = np.ones((n, k))
    for c in range(k):
        used = weight[:, c] > 0
        if used.any():
            indicators = np.zeros((int(used.sum()), k))
            indicators[:, c] = 1.0
            ratio[used, c] = regressor.predict(np.hstack([inputs[used], indicators]))
    weighed = np.exp((weight * np.log(ratio)).sum(axis=1))
    errors = np.stack([(weight * np.abs(ratio[:, [i]] / ratio - 1)).sum(axis=1) for i in range(k)], axis=1)
    errors[weight == 0] = np.inf
    return ratio[np.arange(n), errors.argmin(axis=1)], weighed


def path_ratios(regressor, inputs: np.ndarray, mixed_paths: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A time regressor's ratios per row, to report and to weigh in the pick: its prediction, or
    where the last ``mixed_paths`` columns of ``inputs`` are a kernel path's probabilities, its
    prediction per path mixed by them (:func:`path_mixture`)."""
    if not mixed_paths:
        ratio = regressor.predict(inputs)
        return ratio, ratio
    return path_mixture(regressor, inputs[:, :-mixed_paths], inputs[:, -mixed_paths:])


@dataclass
class AlgorithmPredictor(Part):
    """Every algorithm's predicted time for a layer, from its shape alone, and the pick.

    Per algorithm: whether it runs (the first stage's answer, seer's kernel plan, or a
    decision of its own),
    and its time as a multiple of a physical baseline, the algorithm's fixed cost plus the
    roofline floor (FP32 FLOPs at peak plus tensor bytes at DRAM bandwidth, from the GPU
    spec): trees cannot extrapolate beyond the times they saw, but a ratio to the roofline
    extrapolates as a GPU does. Where the training runs took two kernel paths, each path
    has a regressor; the time reported is the path's with the lower expected relative error
    under the first stage's probability of each, and the pick weighs the two, their times
    mixed geometrically by those probabilities. The pick minimises that time x
    (1 - ``pick_weight`` x P(fastest)), P from a classifier of the fastest algorithm.
    Times come in ``algorithms`` order, NaN where an algorithm is predicted not to run, so
    that it is never recommended. Where ``kernel_paths`` has a classifier of the
    kernel path cuDNN takes inside an algorithm, its probabilities are regressor inputs too.
    ``power`` holds, per algorithm timed with energy readings, a regressor of its average
    power (W) from the shape features: energy per call is predicted time x predicted power.
    ``intervals`` and ``near_best`` say how sure the times and the pick are
    (:mod:`seer.predict.uncertainty`); ``guard_margins``, per layer kind, how far the pick's
    predicted ratio to PyTorch's choice's time must lie below 1 for the guard to take it
    (:func:`seer.predict.uncertainty.fit_guard_margins`; empty before them). ``policies`` predicts the time of PyTorch's own choice
    (not an algorithm seer picks): per policy, a regressor of its ratio to the predicted time
    of ``policy_reference`` (the algorithm whose kernels PyTorch's engine runs on most layers),
    from the shape features and that algorithm's own ratio to its baseline. A model carried
    over from another GPU (:mod:`seer.training.transfer`) keeps that GPU's spec as
    ``source_spec``, whose figures its features use as in training, and multiplies each
    algorithm's times by ``time_scale`` (measured on ``spec``'s GPU); ``spec`` is the GPU it
    predicts for (its memory bounds the layers).
    """

    spec: GPUSpec
    features: list[str]
    algorithms: list[str]
    workspace: WorkspacePredictor | None
    supports: dict
    regressors: dict
    fixed_cost_ms: dict
    baseline: str
    pick_classifier: BoostedClassifier | None
    pick_weight: float
    training_ranges: dict
    kernel_paths: dict = field(default_factory=dict)
    power: dict = field(default_factory=dict)
    intervals: dict = field(default_factory=dict)
    near_best: dict = field(default_factory=dict)
    policies: dict = field(default_factory=dict)
    policy_reference: str = ""
    source_spec: GPUSpec | None = None
    time_scale: dict = field(default_factory=dict)
    guard_margins: dict = field(default_factory=dict)
    kernel_path_mix: bool = False

    def __post_init__(self) -> None:
        self._roofline_column = self.features.index("log2_roofline_floor_s")

    @property
    def feature_spec(self) -> GPUSpec:
        """The GPU whose figures the shape features use: the one the trees learnt on."""
        return self.source_spec or self.spec

    def state(self) -> dict:
        # A model of the GPU it learnt on stores neither field: its file stays as before them.
        out = super().state()
        if self.source_spec is None:
            del out["source_spec"]
        if not self.time_scale:
            del out["time_scale"]
        if not self.guard_margins:  # an uncalibrated model's file stays as before them
            del out["guard_margins"]
        if not self.kernel_path_mix:  # a model that feeds the paths' probabilities stays as before
            del out["kernel_path_mix"]
        return out

    def guard_margin(self, kinds: np.ndarray) -> np.ndarray:
        """Per layer (``kinds``: each one's :func:`~seer.predict.uncertainty.interval_kind`), the
        guard's margin (:func:`seer.predict.uncertainty.guard_margin`; NaN without margins)."""
        return guard_margin(kinds, self.guard_margins)

    def uncertainty(self, X: pd.DataFrame, times: np.ndarray, scores: np.ndarray,
                    kinds: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Bounds of ``times`` (rows, algorithms, levels, 2; :func:`seer.predict.uncertainty.interval_bounds`)
        and the chance that the pick of ``scores`` is near the fastest, per row of the layer frame ``X``
        (NaN where the model has no calibration: models trained before 0.8). ``kinds``: the rows'
        :func:`~seer.predict.uncertainty.interval_kind`, where the caller has them already."""
        kinds = interval_kind(X) if kinds is None else kinds
        return (interval_bounds(times, kinds, self.algorithms, self.intervals),
                near_best_probability(pick_margin(scores), self.near_best))

    def walk_order(self, F: np.ndarray) -> np.ndarray:
        """An order of the rows of features ``F`` in which the trees walk them fastest: sorted by
        the :data:`WALK_FEATURES` features that the model's trees split on first most often, so
        that neighbours take much the same paths (see :mod:`seer.predict.trees`). Nothing a
        row is predicted depends on the order."""
        if not len(self._walk_features):  # a model without trees (a power law): nothing to sort by
            return np.arange(len(F))
        return np.lexsort(F[:, self._walk_features[::-1]].T)  # the last key sorts first

    @cached_property
    def _walk_features(self) -> np.ndarray:
        roots = np.concatenate([trees.root_features() for trees in _ensembles(self)] or [np.empty(0, np.int32)])
        roots = roots[roots < len(self.features)]  # every model's inputs start with the shape features
        features, trees = np.unique(roots, return_counts=True)
        return features[np.argsort(-trees, kind="stable")][:WALK_FEATURES]

    def _walked(self, X, workspaces: pd.DataFrame | None = None
                ) -> tuple[LayerTable, np.ndarray, pd.DataFrame | None, np.ndarray]:
        """The layers ``X`` (and cuDNN's answers for them, where given) in :meth:`walk_order`, their
        features, and per layer of ``X`` its row among them: the public methods predict the
        walked rows and return ``values[given]``, in the order given."""
        X = layer_columns(X)
        F = feature_matrix(X, self.feature_spec)[1]
        order = self.walk_order(F)
        given = np.empty_like(order)
        given[order] = np.arange(len(order))
        if workspaces is not None:
            workspaces = workspaces.iloc[order].reset_index(drop=True)
        return {name: column[order] for name, column in X.items()}, F[order], workspaces, given

    # Public methods take shapes; each computes the features and the first stage's answers
    # once, over the shapes in walk order (:meth:`_walked`), and hands them to the private
    # methods, which they share.
    def prepare(self, X, complete: bool = True, workspaces: pd.DataFrame | None = None,
                features: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """Features, the first stage's answers, and whether each algorithm's kernel plan
        takes each shape (True for an algorithm without one); ``complete=False`` leaves out
        the workspace answers of algorithms predicted not to run (enough for masked
        predictions). ``workspaces``: cuDNN's own answers, where a GPU gave them
        (:func:`with_cudnn_answers`); ``features``: ``X``'s features, where the caller has them."""
        X = layer_columns(X)
        F = feature_matrix(X, self.feature_spec)[1] if features is None else features
        answers = None
        if self.workspace is not None:
            answers = self.workspace.answers(F, only_where_runs=not complete and workspaces is None)
            if workspaces is not None:
                path = get_algorithm(self.algorithms[0]).pass_ in PATH_ANSWER_PASSES
                answers = with_cudnn_answers(answers, self.algorithms, workspaces, workspace=path)
        return F, answers, kernel_plan_support(X, self.algorithms, self.supports)

    def predict_power(self, X) -> np.ndarray:
        """Predicted average power (W) per shape and algorithm while it runs back to back;
        NaN for an algorithm without an energy model."""
        _, F, _, given = self._walked(X)
        return self._power(F)[given]

    def _energies(self, F: np.ndarray, times: np.ndarray) -> np.ndarray:
        """``times`` x predicted power, the power models walked only where there is a time: NaN
        elsewhere, as the product gives there (a power model is a tenth of a layer's trees)."""
        out = np.full(times.shape, np.nan)
        for j, algo in enumerate(self.algorithms):
            rows = np.isfinite(times[:, j])
            if algo in self.power and rows.any():
                out[rows, j] = times[rows, j] * self.power[algo].predict(F[rows])
        return out

    def _power(self, F: np.ndarray) -> np.ndarray:
        out = np.full((len(F), len(self.algorithms)), np.nan)
        for j, algo in enumerate(self.algorithms):
            if algo in self.power and len(F):
                out[:, j] = self.power[algo].predict(F)
        return out

    def predict_support(self, X) -> np.ndarray:
        """Probability that each algorithm runs on each shape, shape (n_shapes, n_algorithms)."""
        X, F, _, given = self._walked(X)
        return self._support(*self.prepare(X, complete=False, features=F))[given]

    def predict(self, X) -> np.ndarray:
        """Predicted time (ms) per shape and algorithm; NaN where predicted not to run."""
        X, F, _, given = self._walked(X)
        return self._times(*self.prepare(X, complete=False, features=F))[0][given]

    def predict_unmasked(self, X) -> np.ndarray:
        """Predicted time (ms) per shape and algorithm as if every algorithm ran (NaN only for
        algorithms that never ran in training): to judge the time models on their own."""
        X, F, _, given = self._walked(X)
        return self._times(*self.prepare(X, features=F), masked=False)[0][given]

    def predict_with_scores(self, X) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`predict` and :meth:`pick_scores` together, from one pass over the models."""
        X, F, _, given = self._walked(X)
        F, answers, planned = self.prepare(X, complete=False, features=F)
        reported, weighed = self._times(F, answers, planned)
        return reported[given], self._scores(F, answers, weighed)[given]

    def predict_with_energy(self, X, policies: Sequence[str] = (), workspaces: pd.DataFrame | None = None,
                            answer_times: AnswerTimePredictor | None = None) -> tuple[np.ndarray, ...]:
        """:meth:`predict_with_scores`, the energy per call (mJ: predicted time x predicted
        power; NaN without an energy model) and :meth:`predict_policies` of ``policies``,
        from one pass over the features; with cuDNN's own answers where ``workspaces`` gives
        them (:meth:`prepare`), and then, given ``answer_times``, the times of the algorithms
        it models from those answers (:meth:`with_answer_times`)."""
        X, F, workspaces, given = self._walked(X, workspaces)
        F, answers, planned = self.prepare(X, complete=False, workspaces=workspaces, features=F)
        known: dict = {}
        reported, weighed = self._times(F, answers, planned, ratios=known)
        if workspaces is not None and answer_times is not None:
            transforms = transform_matrix(X)[1] if answer_times.transform_inputs else None
            reported, weighed = self.with_answer_times(F, workspaces, answer_times, reported, weighed, transforms)
        return tuple(values[given] for values in (reported, self._scores(F, answers, weighed),
                                                  self._energies(F, reported),
                                                  self._policy_times(F, answers, policies, known)))

    def with_answer_times(self, F: np.ndarray, workspaces: pd.DataFrame, answer_times: AnswerTimePredictor,
                          reported: np.ndarray, weighed: np.ndarray,
                          transforms: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``reported`` and ``weighed`` (:meth:`_times`) with ``answer_times``' times of its
        algorithms wherever they have a time (cuDNN takes them, and they fit in memory): there
        the kernel path is known, so the time to report and the one the pick weighs are one.
        PyTorch's predicted time stays the shape-only reference's, which its models learnt from.
        ``transforms``: the layers' :func:`~seer.predict.features.transform_matrix` values, where
        ``answer_times`` reads them."""
        missing = [a for a in answer_times.algorithms if a not in workspaces.columns]
        if missing:
            raise ValueError(f"cuDNN's answers lack {', '.join(missing)}, which the answer-informed models read")
        sizes = answer_inputs(workspaces[answer_times.algorithms].to_numpy(dtype=float))
        reported, weighed = reported.copy(), weighed.copy()
        for algo in answer_times.regressors:
            j = self.algorithms.index(algo)
            rows = np.isfinite(reported[:, j])
            if rows.any():
                ms = answer_times.ratios(algo, F[rows], sizes[rows], None if transforms is None else transforms[rows]
                                         ) * self.baseline_ms(F[rows], algo)
                reported[rows, j] = weighed[rows, j] = ms
        return reported, weighed

    def pick_scores(self, X) -> np.ndarray:
        """What the pick minimises per shape and algorithm (NaN where predicted not to run)."""
        return self.predict_with_scores(X)[1]

    def select(self, X) -> np.ndarray:
        """The pick per shape: the lowest :meth:`pick_scores` (None where no algorithm is
        predicted to run)."""
        return pick(self.pick_scores(X), self.algorithms)

    def extrapolated(self, X) -> np.ndarray:
        """Whether each shape lies outside the ranges seen in training (any field, or FLOPs)."""
        X = layer_columns(X)
        outside = np.zeros(table_rows(X), dtype=bool)
        for field_ in LAYER_COLUMNS:
            low, high = self.training_ranges[field_]
            outside |= (X[field_] < low) | (X[field_] > high)
        low, high = self.training_ranges["log2_flops"]
        log_flops = log2_flops(X)
        return outside | (log_flops < low) | (log_flops > high)

    def predict_policies(self, X, names: list[str] | None = None) -> np.ndarray:
        """Predicted time (ms) of PyTorch's policies ``names`` (default: all it models, in
        ``policies``' order) per shape; an empty second axis for a model without them."""
        X, F, _, given = self._walked(X)
        F, answers, _ = self.prepare(X, complete=False, features=F)
        return self._policy_times(F, answers, list(self.policies) if names is None else names)[given]

    def _policy_times(self, F: np.ndarray, answers: np.ndarray | None, names: Sequence[str],
                      known: dict | None = None) -> np.ndarray:
        if not names:
            return np.empty((len(F), 0))
        reference, inputs = self.policy_inputs(F, answers, known)
        return np.column_stack([reference * self.policies[name].predict(inputs) for name in names])

    def policy_inputs(self, F: np.ndarray, answers: np.ndarray | None, known: dict | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
        """The reference algorithm's predicted time (ms) as if it ran, and the policy
        regressors' inputs: the shape features and the log of that time over its baseline.
        ``answers`` may leave out the workspace answers where an algorithm is predicted not to
        run: the reference's are completed. ``known``: the ratios :meth:`_times` reported, by
        algorithm, reused where they came from the same inputs (each row's ratio is its own)."""
        j = self.algorithms.index(self.policy_reference)
        ratio, rest = np.empty(len(F)), np.ones(len(F), dtype=bool)
        if known and j in known:
            rows, values = known[j]
            if answers is not None:  # rows whose answers completed() would not change
                values, rows = values[~np.isnan(answers[rows, 3 * j + 1])], rows & ~np.isnan(answers[:, 3 * j + 1])
            ratio[rows], rest = values, ~rows
        if rest.any():
            F_rest = F[rest]
            answers_rest = None if answers is None else self.workspace.completed(answers[rest], F_rest, j)
            ratio[rest] = self._ratios(j, self._regressor_inputs(j, F_rest, answers_rest), answers_rest)[0]
        return ratio * self.baseline_ms(F, self.policy_reference), np.column_stack([F, np.log(ratio)])

    def baseline_ms(self, F: np.ndarray, algo: str) -> np.ndarray:
        """What ``algo``'s regressor predicts a ratio to, per row of features, in ms."""
        return (baseline_ms(F[:, self._roofline_column], self.fixed_cost_ms.get(algo, 0.0), self.baseline)
                * self.time_scale.get(algo, 1.0))

    def _support(self, F: np.ndarray, answers: np.ndarray | None, planned: np.ndarray) -> np.ndarray:
        out = np.empty((len(F), len(self.algorithms)))
        for j, algo in enumerate(self.algorithms):
            support = self.supports[algo]
            out[:, j] = (answers[:, 3 * j] if support == BY_FIRST_STAGE else planned[:, j].astype(float)
                         if support == BY_KERNEL_PLAN else probability(support, F))
        return out

    def _ratios(self, j: int, inputs: np.ndarray, answers: np.ndarray | None) -> tuple[np.ndarray, np.ndarray]:
        """Per row, the ratio to the baseline to report (:func:`likeliest_path_ratio`) and the
        one the pick weighs (:func:`mix_paths`), evaluating each path's regressor only on the
        rows where that path has weight."""
        regressors = self.regressors[self.algorithms[j]]
        classifier = self.kernel_paths.get(self.algorithms[j]) if self.kernel_path_mix else None
        mixed = 0 if classifier is None else len(classifier.classes)

        def predict(regressor, rows) -> tuple[np.ndarray, np.ndarray]:
            return path_ratios(regressor, inputs[rows], mixed)

        if ALL_RUNS in regressors:
            return predict(regressors[ALL_RUNS], slice(None))
        weight = path_weight(answers, j)
        reported, weighed = {}, {}
        for path, used in ((WITH_WORKSPACE, weight > 0), (WITHOUT_WORKSPACE, weight < 1)):
            reported[path], weighed[path] = np.ones(len(inputs)), np.ones(len(inputs))
            if used.any():
                reported[path][used], weighed[path][used] = predict(regressors[path], used)
        return likeliest_path_ratio(reported, weight), mix_paths(weighed, weight)

    def memory_bytes(self, F: np.ndarray, answers: np.ndarray | None) -> np.ndarray:
        """Bytes of GPU memory each algorithm needs per row: the FP32 input, filter and output,
        and the workspace the first stage predicts where it predicts one (0 elsewhere)."""
        tensors = sum(2.0 ** F[:, self.features.index(f"log2_{name}_bytes")] for name in ("input", "filter", "output"))
        workspace = np.zeros((len(F), len(self.algorithms)))
        if answers is not None:
            nonzero, log2_bytes = answers[:, 1::3], answers[:, 2::3]
            with np.errstate(over="ignore", invalid="ignore"):
                workspace = np.where(nonzero >= 0.5, 2.0 ** log2_bytes, 0.0)
            workspace = np.nan_to_num(workspace, nan=0.0)
        return tensors[:, None] + workspace

    def _fits(self, F: np.ndarray, answers: np.ndarray | None) -> np.ndarray:
        """Whether each algorithm's tensors and workspace fit the GPU's memory, per row: a layer
        that cannot run gets no time rather than an extrapolated one."""
        return self.memory_bytes(F, answers) <= self.spec.memory_bytes

    def _regressor_inputs(self, j: int, F: np.ndarray, answers: np.ndarray | None) -> np.ndarray:
        inputs = regressor_inputs(F, answers, j)
        classifier = self.kernel_paths.get(self.algorithms[j])
        return inputs if classifier is None else np.hstack([inputs, classifier.predict_proba(inputs)])

    def _times(self, F: np.ndarray, answers: np.ndarray | None, planned: np.ndarray,
               masked: bool = True, ratios: dict | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Times (ms) per row and algorithm, NaN where not run (``masked``) or never trained:
        the ones to report and the ones the pick weighs (:meth:`_ratios`). ``ratios`` receives,
        per algorithm index, the rows timed and their reported ratios (for :meth:`policy_inputs`)."""
        runs = (self._support(F, answers, planned) >= RUNS_THRESHOLD) & self._fits(F, answers) if masked \
            else np.ones((len(F), len(self.algorithms)), dtype=bool)
        reported = np.full((len(F), len(self.algorithms)), np.nan)
        weighed = reported.copy()
        for j, algo in enumerate(self.algorithms):
            rows = runs[:, j]
            if algo not in self.regressors or not rows.any():
                continue
            F_run, answers_run = F[rows], answers[rows] if answers is not None else None
            to_report, to_weigh = self._ratios(j, self._regressor_inputs(j, F_run, answers_run), answers_run)
            if ratios is not None:
                ratios[j] = (rows, to_report)
            base = self.baseline_ms(F_run, algo)
            reported[rows, j], weighed[rows, j] = to_report * base, to_weigh * base
        return reported, weighed

    def _scores(self, F: np.ndarray, answers: np.ndarray | None, times: np.ndarray) -> np.ndarray:
        if self.pick_classifier is None or not len(times):
            return times
        proba = np.zeros_like(times)
        probabilities = self.pick_classifier.predict_proba(pick_inputs(F, answers))
        for k, name in enumerate(self.pick_classifier.classes):
            proba[:, self.algorithms.index(name)] = probabilities[:, k]
        return times * (1 - self.pick_weight * proba)

    @classmethod
    def from_state(cls, state: dict) -> "AlgorithmPredictor":
        where = cls.__name__
        try:
            spec = spec_from_fields(_require(state, "spec", dict, where))
        except ValueError as exc:
            raise StateError(f"{where}: GPU spec: {exc}") from None
        source = state.get("source_spec")  # a model carried over from another GPU
        try:
            source = None if source is None else spec_from_fields(_require(state, "source_spec", dict, where))
        except ValueError as exc:
            raise StateError(f"{where}: the source GPU's spec: {exc}") from None
        features = _require(state, "features", list, where)
        if features != feature_names(source or spec):
            raise StateError(f"{where}: the model was trained on other features than this seer computes; retrain it")
        algorithms = _names(_require(state, "algorithms", list, where), where)
        workspace = state.get("workspace")
        if workspace is not None and (not isinstance(workspace, WorkspacePredictor)
                                      or workspace.algorithms != algorithms):
            raise StateError(f"{where}: the first stage must answer for the same algorithms")
        supports = _require(state, "supports", dict, where)
        regressors = _require(state, "regressors", dict, where)
        fixed_cost = _require(state, "fixed_cost_ms", dict, where)
        if set(supports) != set(algorithms) or not set(regressors) <= set(algorithms) \
                or set(fixed_cost) != set(regressors):
            raise StateError(f"{where}: supports, regressors and fixed costs must name its algorithms")
        for algo, support in supports.items():
            if support == BY_FIRST_STAGE:
                if workspace is None:
                    raise StateError(f"{where}: support by a first stage that is missing")
            elif support == BY_KERNEL_PLAN:
                if algo not in KERNEL_PLAN_ALGORITHMS:
                    raise StateError(f"{where}: {algo} has no kernel plan of seer's")
            else:
                _decision(support, where)
        for algo, paths in regressors.items():
            if not isinstance(paths, dict) or not paths or not (set(paths) == {ALL_RUNS} or set(paths) == {
                    WITH_WORKSPACE, WITHOUT_WORKSPACE}) or not all(
                    isinstance(r, (LogTarget, Constant)) for r in paths.values()):
                raise StateError(f"{where}: {algo}'s regressors must be one per kernel path")
            if ALL_RUNS not in paths and workspace is None:
                raise StateError(f"{where}: kernel paths need a first stage")
            if not isinstance(fixed_cost[algo], (int, float)) or isinstance(fixed_cost[algo], bool):
                raise StateError(f"{where}: fixed costs must be numbers")
        baseline = _require(state, "baseline", str, where)
        if baseline not in BASELINES:
            raise StateError(f"{where}: unknown baseline {baseline!r}")
        classifier = state.get("pick_classifier")
        if classifier is not None and (not isinstance(classifier, BoostedClassifier)
                                       or not set(classifier.classes) <= set(algorithms)):
            raise StateError(f"{where}: the pick classifier must choose among its algorithms")
        weight = float(_require(state, "pick_weight", (int, float), where))
        kernel_paths = _require(state, "kernel_paths", dict, where)
        if not set(kernel_paths) <= set(regressors) or not all(
                isinstance(c, BoostedClassifier) for c in kernel_paths.values()):
            raise StateError(f"{where}: kernel-path classifiers must be boosted classifiers of algorithms it times")
        power = state.get("power", {})  # models trained before energy readings have none
        if not isinstance(power, dict) or not set(power) <= set(regressors) or not all(
                isinstance(r, LogTarget) for r in power.values()):
            raise StateError(f"{where}: power models must be log-target regressors of algorithms it times")
        ranges = _require(state, "training_ranges", dict, where)
        if set(ranges) != {*LAYER_COLUMNS, "log2_flops"} or not all(
                isinstance(r, list) and len(r) == 2 and all(isinstance(v, (int, float)) for v in r)
                and r[0] <= r[1] for r in ranges.values()):
            raise StateError(f"{where}: training ranges must give [low, high] per shape field and log2_flops")
        if not 0 <= weight <= 1 or any(cost < 0 for cost in fixed_cost.values()):
            raise StateError(f"{where}: the pick weight must lie in [0, 1] and fixed costs must not be negative")
        _check_inputs(len(features), algorithms, workspace, supports, regressors, classifier, kernel_paths,
                      power, where)
        policies, reference = state.get("policies", {}), state.get("policy_reference", "")  # none before 0.8
        known_policies = set(algorithm_names("pytorch", pass_=None))
        if not isinstance(policies, dict) or not set(policies) <= known_policies or not all(
                isinstance(r, LogTarget) and r.n_inputs in (None, len(features) + 1) for r in policies.values()):
            raise StateError(f"{where}: PyTorch's policies need log-target regressors of the features and one more input")
        if policies and reference not in regressors:
            raise StateError(f"{where}: PyTorch's policies need a reference algorithm it times")
        intervals, near_best = state.get("intervals", {}), state.get("near_best", {})  # none before 0.8
        margins = state.get("guard_margins", {})  # none before the ratio guard
        try:
            check_intervals(intervals, [*regressors, *policies], where)
            check_near_best(near_best, where)
            check_guard_margins(margins, where)
        except ValueError as exc:
            raise StateError(str(exc)) from None
        scale = state.get("time_scale", {})
        if not isinstance(scale, dict) or not set(scale) <= set(regressors) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and 0.1 <= v <= 10 for v in scale.values()):
            raise StateError(f"{where}: time scales must be numbers in [0.1, 10] of algorithms it times")
        mix = state.get("kernel_path_mix", False)  # models before it feed the paths' probabilities
        if not isinstance(mix, bool):
            raise StateError(f"{where}: kernel_path_mix must be true or false")
        return cls(spec, features, algorithms, workspace, supports, regressors,
                   {a: float(v) for a, v in fixed_cost.items()}, baseline, classifier, weight, ranges, kernel_paths,
                   power, intervals, near_best, policies, reference, source,
                   {a: float(v) for a, v in scale.items()}, dict(margins), mix)


def _check_inputs(n: int, algorithms: list[str], workspace: WorkspacePredictor | None, supports: dict,
                  regressors: dict, classifier: BoostedClassifier | None, kernel_paths: dict, power: dict,
                  where: str) -> None:
    """Every part reads as many columns as :class:`AlgorithmPredictor` hands it: ``n`` shape
    features, plus the first stage's answers and kernel-path probabilities where they apply."""
    def check(part, expected: int, what: str) -> None:
        if isinstance(part, Part) and part.n_inputs not in (None, expected):
            raise StateError(f"{where}: {what} reads {part.n_inputs} inputs where the model has {expected}")

    if workspace is not None:
        for algo in algorithms:
            for key in ("runs", "nonzero", "log2_bytes"):
                check(getattr(workspace, key)[algo], n, f"{algo}'s first-stage answer {key!r}")
    for algo, support in supports.items():
        check(support, n, f"{algo}'s support")
    with_answers = n + (2 if workspace is not None else 0)
    for algo, paths in regressors.items():
        paths_classifier = kernel_paths.get(algo)
        check(paths_classifier, with_answers, f"{algo}'s kernel-path classifier")
        inputs = with_answers + (len(paths_classifier.classes) if paths_classifier is not None else 0)
        for path, regressor in paths.items():
            check(regressor, inputs, f"{algo}'s time regressor ({path})")
    check(classifier, n + (3 * len(algorithms) if workspace is not None else 0), "the pick classifier")
    for algo, regressor in power.items():
        check(regressor, n, f"{algo}'s power model")


def kernel_plan_support(X: pd.DataFrame | LayerTable, algorithms: list[str], supports: dict) -> np.ndarray:
    """Per shape and algorithm, whether seer's kernel plan takes the shape: for the
    algorithms whose support is :data:`BY_KERNEL_PLAN`; True for the others."""
    planned = np.ones((table_rows(X), len(algorithms)), dtype=bool)
    for j, algo in enumerate(algorithms):
        if supports.get(algo) == BY_KERNEL_PLAN:
            planned[:, j] = runs_layers(algo, X)
    return planned


def baseline_ms(log2_roofline_s: np.ndarray, fixed_cost_ms: float, baseline: str) -> np.ndarray:
    """What a time regressor predicts a ratio to, in ms: the algorithm's fixed cost plus the
    roofline floor (``baseline="roofline"``), or 1 ms (``"none"``)."""
    if baseline == "none":
        return np.ones(len(log2_roofline_s))
    return fixed_cost_ms + 2.0 ** log2_roofline_s * 1e3


def pick(scores: np.ndarray, algorithms: list[str]) -> np.ndarray:
    """Per row, the algorithm with the lowest finite score (None where there is none)."""
    best = np.where(np.isfinite(scores), scores, np.inf).argmin(axis=1)
    names = np.array(algorithms, dtype=object)[best]
    names[~np.isfinite(scores).any(axis=1)] = None
    return names


# -- SEER's model -------------------------------------------------------------------------
#: SEER's labels of a run: compute-bound, memory-bound, under-utilised.
COMPUTE, MEMORY, UNDER = 0, 1, 2
FFT_ALGOS = tuple(algorithm_names(family="fft"))
WINOGRAD_ALGOS = tuple(algorithm_names(family="winograd"))
FFT_WIDTH_BUCKETS = (16, 32, 64, 128, 256)


def shape_block(X: pd.DataFrame) -> dict[str, np.ndarray]:
    """SEER's letters for the fields of square 2D layers (a layer frame's width axis), as float arrays."""
    return {"N": X["batch"].to_numpy(float), "C": X["in_ch"].to_numpy(float), "W": X["in_w"].to_numpy(float),
            "K": X["out_ch"].to_numpy(float), "Q": X["out_w"].to_numpy(float),
            "R": X["kernel_w"].to_numpy(float), "S": X["stride_w"].to_numpy(float)}


def variant_features(X: pd.DataFrame) -> np.ndarray:
    s = shape_block(X)
    return np.column_stack([s["C"], s["W"], s["K"], s["Q"], s["R"], s["S"]])


def grid_features(X: pd.DataFrame) -> np.ndarray:
    # SEER's grid formulas use N*Q^2 and K; with batch varying, the tree needs N too.
    s = shape_block(X)
    return np.column_stack([variant_features(X), s["N"], s["N"] * s["Q"] ** 2])


def dram_features(X: pd.DataFrame, blocks: np.ndarray, winograd: bool) -> np.ndarray:
    s = shape_block(X)
    base = variant_features(X)
    if winograd:
        return base
    return np.column_stack([base, blocks, s["R"] ** 2 * s["C"], s["R"] ** 2 * s["C"] * s["K"],
                            s["Q"] ** 2 * s["C"] * s["R"] ** 2])


def fft_design(s: dict, algo: str) -> np.ndarray:
    """SEER's FFT time formula's terms: C, C*K, K, 1 (times the tiles for FFT_TILING)."""
    design = np.column_stack([s["C"], s["C"] * s["K"], s["K"], np.ones_like(s["C"])])
    if algo == "FFT_TILING":
        design = design * (np.ceil(s["Q"] / np.maximum(32 - s["R"] + 1, 1)) ** 2)[:, None]
    return design


def fft_bucket(width: np.ndarray) -> np.ndarray:
    """SEER's input-width bucket of the FFT formulas, -1 beyond the largest."""
    bucket = np.searchsorted(np.array(FFT_WIDTH_BUCKETS), width, side="left")
    return np.where(bucket < len(FFT_WIDTH_BUCKETS), bucket, -1)


def time_design(label: int, whole_waves, b_max, blocks, flop_blk, read_blk, write_blk) -> np.ndarray:
    """SEER's time formula's terms for each class of run (see :mod:`seer.training.seer_baseline`);
    ``whole_waves`` is ``ceil(blocks / b_max)`` (:func:`seer.hardware.occupancy.whole_waves`)."""
    if label == COMPUTE:
        return np.column_stack([whole_waves * b_max * flop_blk, whole_waves])
    if label == MEMORY:
        return np.column_stack([blocks * (read_blk + write_blk), np.ones_like(blocks)])
    return np.column_stack([blocks * read_blk, blocks * write_blk, whole_waves * b_max * flop_blk,
                            np.ones_like(blocks)])


@dataclass
class SeerVariantPredictor(Part):
    """SEER's chain for one kernel variant: grid size, work and traffic per block, class, time."""

    b_max: float
    grid_tree: TreeRegressor
    flop_coefficients: np.ndarray
    read_tree: TreeRegressor
    write_tree: TreeRegressor
    class_tree: TreeClassifier | int
    time_coefficients: dict  # str(label) -> coefficients

    def predict(self, X: pd.DataFrame, winograd: bool) -> np.ndarray:
        s = shape_block(X)
        blocks = np.maximum(np.round(np.exp(self.grid_tree.predict(grid_features(X)))), 1)
        whole_waves = np.ceil(blocks / self.b_max)
        flop_term = np.ceil(s["C"] / 8) if winograd else s["R"] ** 2 * s["C"]
        flop_blk = np.column_stack([flop_term, np.ones_like(flop_term)]) @ self.flop_coefficients
        read_scale = s["C"] if winograd else s["R"] ** 2 * s["C"]
        features = dram_features(X, blocks, winograd)
        read_blk = self.read_tree.predict(features) * read_scale
        write_blk = self.write_tree.predict(features)
        tree = self.class_tree
        labels = (tree.predict(np.column_stack([variant_features(X), blocks])).astype(int)
                  if isinstance(tree, TreeClassifier) else np.full(len(X), tree))
        out = np.empty(len(X))
        for label, coefficients in self.time_coefficients.items():
            rows = labels == int(label)
            if rows.any():
                design = time_design(int(label), whole_waves[rows], self.b_max, blocks[rows], flop_blk[rows], read_blk[rows],
                                     write_blk[rows])
                out[rows] = design @ coefficients
        return out

    @classmethod
    def from_state(cls, state: dict) -> "SeerVariantPredictor":
        where = cls.__name__
        class_tree = _require(state, "class_tree", (TreeClassifier, int), where)
        coefficients = _require(state, "time_coefficients", dict, where)
        if set(coefficients) != {str(COMPUTE), str(MEMORY), str(UNDER)} or not all(
                isinstance(c, np.ndarray) and c.ndim == 1 and c.dtype.kind == "f" for c in coefficients.values()):
            raise StateError(f"{where}: one coefficient array per class of run")
        for label, size in ((COMPUTE, 2), (MEMORY, 2), (UNDER, 4)):
            if len(coefficients[str(label)]) != size:
                raise StateError(f"{where}: wrong number of time coefficients")
        flop = _array(state, "flop_coefficients", "f", 1, where)
        if len(flop) != 2:
            raise StateError(f"{where}: two FLOP coefficients")
        return cls(float(_require(state, "b_max", (int, float), where)),
                   _require(state, "grid_tree", TreeRegressor, where), flop,
                   _require(state, "read_tree", TreeRegressor, where), _require(state, "write_tree", TreeRegressor, where),
                   class_tree, coefficients)


@dataclass
class SeerAlgorithmPredictor(Part):
    """SEER's model of one algorithm: a variant tree and a chain per variant, or for the
    FFT algorithms a formula per input-width bucket."""

    algo: str
    variants: list[str] = field(default_factory=list)
    variant_tree: TreeClassifier | None = None
    parts: dict = field(default_factory=dict)
    fft_coefficients: dict = field(default_factory=dict)  # str(bucket) -> coefficients

    def predict(self, X: pd.DataFrame) -> np.ndarray:
        """Predicted time (ms) per shape; NaN where SEER's model has no answer (FFT beyond
        width 256 or a width bucket without training runs)."""
        X = layer_frame(X).reset_index(drop=True)
        out = np.full(len(X), np.nan)
        if self.algo in FFT_ALGOS:
            s = shape_block(X)
            design, bucket = fft_design(s, self.algo), fft_bucket(s["W"])
            for b, coefficients in self.fft_coefficients.items():
                rows = bucket == int(b)
                out[rows] = design[rows] @ coefficients
            return out
        variants = (self.variant_tree.predict(variant_features(X)) if self.variant_tree is not None
                    else np.full(len(X), self.variants[0], dtype=object))
        for variant, part in self.parts.items():
            rows = variants == variant
            if rows.any():
                out[rows] = part.predict(X[rows], self.algo in WINOGRAD_ALGOS)
        return out

    @classmethod
    def from_state(cls, state: dict) -> "SeerAlgorithmPredictor":
        where = cls.__name__
        algo = _require(state, "algo", str, where)
        variants = _require(state, "variants", list, where)
        tree = state.get("variant_tree")
        parts = _require(state, "parts", dict, where)
        fft = _require(state, "fft_coefficients", dict, where)
        if algo in FFT_ALGOS:
            if not all(k.isdigit() and int(k) < len(FFT_WIDTH_BUCKETS) and isinstance(c, np.ndarray)
                       and c.shape == (4,) for k, c in fft.items()):
                raise StateError(f"{where}: FFT coefficients must be four per width bucket")
        elif not variants or set(parts) != set(variants) or not all(
                isinstance(p, SeerVariantPredictor) for p in parts.values()) or (
                tree is not None and (not isinstance(tree, TreeClassifier) or not set(tree.classes) <= set(variants))) \
                or (tree is None and len(variants) != 1):
            raise StateError(f"{where}: variants, their tree and their chains do not match")
        return cls(algo, variants, tree, parts, fft)


@dataclass
class SeerFamilyPredictor(Part):
    """SEER's model for every algorithm of one math mode."""

    models: dict

    @property
    def algorithms(self) -> list[str]:
        return list(self.models)

    def predict_times(self, X, algorithms) -> np.ndarray:
        """Times (ms) per shape for ``algorithms`` in that order; NaN where SEER has no model
        or no answer. SEER's inputs exist only for square, ungrouped, undilated 2D layers:
        other layers get NaN. A linear form can go negative far from its data; a time
        cannot, so predictions are floored at 1 microsecond."""
        X = layer_frame(X)
        out = np.full((len(X), len(algorithms)), np.nan)
        square = is_seer_layer(X)
        if square.any():
            for j, algo in enumerate(algorithms):
                if algo in self.models:
                    out[square, j] = self.models[algo].predict(X[square])
        return np.where(np.isfinite(out), np.maximum(out, 1e-3), np.nan)

    @classmethod
    def from_state(cls, state: dict) -> "SeerFamilyPredictor":
        models = _require(state, "models", dict, cls.__name__)
        if not all(isinstance(m, SeerAlgorithmPredictor) and m.algo == a for a, m in models.items()):
            raise StateError(f"{cls.__name__}: one SEER model per algorithm")
        return cls(models)


# -- every GPU with a spec ----------------------------------------------------------------
#: The spec figures the cross-GPU model reads beside the shape features, each as log2.
CROSS_GPU_SPEC_FIELDS: tuple[str, ...] = ("sm_count", "boost_clock_mhz", "peak_fp32_tflops", "memory_bandwidth_gbs",
                                          "l2_cache_bytes", "shared_mem_per_sm_bytes")


def cross_gpu_inputs(layers: pd.DataFrame, spec: GPUSpec) -> tuple[np.ndarray, np.ndarray]:
    """The cross-GPU model's inputs for ``layers`` on ``spec``'s GPU (the shape features computed
    with that spec, then log2 of its :data:`CROSS_GPU_SPEC_FIELDS`) and each layer's roofline floor
    (log2 seconds), which its target is relative to."""
    F = shape_features(layer_frame(layers), spec)
    figures = np.log2([float(getattr(spec, name)) for name in CROSS_GPU_SPEC_FIELDS])
    X = np.hstack([F.to_numpy(dtype=float), np.tile(figures, (len(F), 1))])
    return X, F["log2_roofline_floor_s"].to_numpy(dtype=float)


def _cross_gpu_input_count() -> int:
    """Inputs of the cross-GPU model: the shape features (as many for any spec) and the spec's figures."""
    from seer.hardware.gpus import load_gpu_specs

    return len(feature_names(next(iter(load_gpu_specs().values())))) + len(CROSS_GPU_SPEC_FIELDS)


@dataclass
class CrossGpuPredictor(Part):
    """The time of the algorithm PyTorch's ``cudnn.benchmark`` picks, under strict FP32, on any GPU
    with a spec: boosted trees over the shape features computed with the GPU's spec and the spec's
    own figures, learning log2(time / the layer's roofline floor) from every GPU with measurements.
    ``gpus`` are those it learnt from; ``intervals`` the log2 errors' bounds per level (percent),
    measured on GPUs left out of the fit; ``family`` the family of the algorithm that choice runs,
    from the same inputs and the cuDNN major version (:meth:`likely_family`)."""

    regressor: BoostedRegressor
    gpus: list[str]
    intervals: dict[str, list[float]]
    family: BoostedClassifier

    def predict(self, layers: pd.DataFrame, spec: GPUSpec) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """Predicted ms per layer, and per interval level its (low, high) bounds in ms."""
        return self._times(*cross_gpu_inputs(layers, spec))

    def likely_family(self, layers: pd.DataFrame, spec: GPUSpec, cudnn_major: int) -> tuple[np.ndarray, np.ndarray]:
        """Per layer, the likeliest family of the algorithm the choice runs under that cuDNN major
        version, and its probability."""
        return self._family(cross_gpu_inputs(layers, spec)[0], cudnn_major)

    def predict_with_family(self, layers: pd.DataFrame, spec: GPUSpec, cudnn_major: int) -> tuple:
        """:meth:`predict`'s ms and bounds, then :meth:`likely_family`'s families and probabilities,
        from one computation of the inputs."""
        X, floor = cross_gpu_inputs(layers, spec)
        return (*self._times(X, floor), *self._family(X, cudnn_major))

    def _times(self, X: np.ndarray, floor: np.ndarray) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        log2_s = self.regressor.predict(X) + floor
        ms = 2.0 ** log2_s * 1e3
        bounds = {int(level): np.stack([2.0 ** (log2_s + low) * 1e3, 2.0 ** (log2_s + high) * 1e3], axis=1)
                  for level, (low, high) in self.intervals.items()}
        return ms, bounds

    def _family(self, X: np.ndarray, cudnn_major: int) -> tuple[np.ndarray, np.ndarray]:
        proba = self.family.predict_proba(np.hstack([X, np.full((len(X), 1), float(cudnn_major))]))
        best = proba.argmax(axis=1)
        return np.asarray(self.family.classes, dtype=object)[best], proba[np.arange(len(best)), best]

    @classmethod
    def from_state(cls, state: dict) -> "CrossGpuPredictor":
        where = cls.__name__
        regressor = _require(state, "regressor", BoostedRegressor, where)
        if regressor.n_inputs != (expected := _cross_gpu_input_count()):
            raise StateError(f"{where}: its trees read {regressor.n_inputs} inputs, not the {expected} "
                             f"of the shape features and the spec's figures")
        gpus = _require(state, "gpus", list, where)
        if not gpus or not all(isinstance(g, str) for g in gpus):
            raise StateError(f"{where}: 'gpus' must name the GPUs it learnt from")
        intervals = _require(state, "intervals", dict, where)
        if not all(isinstance(k, str) and k.isdigit() and 0 < int(k) < 100 and isinstance(v, list) and len(v) == 2
                   and all(isinstance(b, (int, float)) and abs(b) < 64 for b in v) and v[0] <= 0 <= v[1]
                   for k, v in intervals.items()):
            raise StateError(f"{where}: intervals must give [low, high] log2 bounds around 0 per level")
        family = _require(state, "family", BoostedClassifier, where)
        if family.n_inputs != expected + 1 or not set(family.classes) <= set(FAMILIES):
            raise StateError(f"{where}: its family trees must read the {expected} inputs and the cuDNN major version, "
                             f"and name families of {FAMILIES}")
        return cls(regressor, list(gpus), {k: [float(b) for b in v] for k, v in intervals.items()}, family)

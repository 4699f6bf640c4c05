"""Times of cuDNN's algorithms learnt from cuDNN's own answers, for a GPU host to use.

On a GPU host cuDNN answers from descriptors alone whether each of its algorithms takes a
layer and how much workspace it asks for (:mod:`seer.gpu.answers`); the measurement tables
hold these answers for every measured run. :func:`fit_answer_times` fits, per cuDNN
algorithm the model times and per kernel path (zero or non-zero workspace, where the
training runs have both), a regressor of the time's ratio to the algorithm's baseline from
the shape features and every cuDNN algorithm's answer
(:class:`seer.predict.predictors.AnswerTimePredictor`), with the candidate that cross-validation
chose for the shape-only regressor of that algorithm and path. On the held-out networks
they lower cuDNN's algorithms' MAPE (``benchmarks/answer_inputs.py``, ``docs/predicting.md``).

Per algorithm, a validation split of the train layers also chooses the regressors' design
(:func:`choose_design`): the chosen candidate as it is or with four times finer trees, and
reading the transform algorithms' problem sizes or not
(:func:`seer.predict.features.transform_matrix`); the FFT and Winograd algorithms' errors were
the trees' fit, not which kernel runs (``benchmarks/answer_error.py``).

Where the runs' CUPTI traces name the kernel variant cuDNN launched inside an algorithm,
:func:`fit_variant_times` also fits a classifier of that variant and one regressor per
(path, variant) (:class:`seer.predict.predictors.VariantTimes`), and keeps them for an
algorithm only where a validation split of the train runs says they beat its single
regressor (``benchmarks/kernel_oracle.py``, design ``per_predicted_variant``, measured the idea).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import clone
from sklearn.ensemble import HistGradientBoostingClassifier

from seer.algorithms import algorithm_names
from seer.layers.shapes import layer_frame
from seer.predict.features import shape_features, transform_matrix
from seer.predict.predictors import (ALL_RUNS, RARE_VARIANTS, AlgorithmPredictor, AnswerTimePredictor, BoostedClassifier,
                                     VariantTimes, answer_inputs, answer_paths)
from seer.training.estimators import default_candidates, finer_trees, mape, to_part

#: The candidate of a path the shape-only model has no choice for.
DEFAULT_CANDIDATE = "boosted_trees"
#: Share of the train layers held out to decide, per algorithm, whether the variant mixture
#: is kept and at which classifier confidence (never the test sets).
VALIDATION_SHARE = 0.2
#: Top probabilities of the variant classifier tried as the mixture's threshold on validation.
THRESHOLDS = (0.0, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99)
#: The mixture is kept where it lowers the validation MAPE by at least this many points: a
#: smaller gain is within what refitting on other layers moves it, and each kept mixture
#: costs a classifier per prediction.
MIN_GAIN_POINTS = 0.2
#: Traced train runs a (path, variant) needs for a regressor of its own.
MIN_VARIANT_RUNS = 50
#: The regressor designs :func:`choose_design` weighs per algorithm: (trees, reads the
#: transform features); trees "chosen" is the candidate as given, "finer" :func:`finer_trees`
#: of it. The first is the default, which a design must beat by :data:`MIN_GAIN_POINTS`.
DESIGNS = (("chosen", False), ("chosen", True), ("finer", False), ("finer", True))


def fit_answer_times(predictor: AlgorithmPredictor, shapes: pd.DataFrame, times: pd.DataFrame,
                     workspaces: pd.DataFrame, choice: dict | None = None, candidates: dict | None = None,
                     min_runs: int = 20, variants: pd.DataFrame | None = None,
                     min_variant_runs: int = MIN_VARIANT_RUNS,
                     designs: tuple = DESIGNS) -> tuple[AnswerTimePredictor, dict, dict, dict]:
    """An :class:`AnswerTimePredictor` for ``predictor``'s cuDNN algorithms, the candidate it
    chose per algorithm and path, what it decided of the kernel variants per algorithm, and
    the design :func:`choose_design` chose per algorithm (what validation measured).

    ``shapes``, ``times`` and ``workspaces`` are training frames (a row per layer; a column per
    algorithm, NaN where the run did not go ahead), ``workspaces`` the bytes cuDNN asked for.
    ``choice`` gives per algorithm and path the candidate name the shape-only model chose (the
    card's ``regressor``); ``candidates`` the candidates by name (default:
    :func:`seer.training.estimators.default_candidates`). A path with fewer than ``min_runs``
    runs shares one regressor with the other. ``variants`` (like ``times``: the traced kernel
    variant of each run, missing where untraced) adds :func:`fit_variant_times` per algorithm
    (without it the third dict is empty). ``designs``: those :func:`choose_design` weighs (the
    first alone: no choice, nothing fitted to validate).
    """
    candidates = default_candidates() if candidates is None else candidates
    choice = choice or {}
    cudnn, F, answers, transforms = design_inputs(predictor, shapes, workspaces)
    with_transforms = np.hstack([answers, transforms])
    regressors, chosen, mixtures, decided, design_of, transform_inputs = {}, {}, {}, {}, {}, []
    for algo in cudnn:
        if algo not in predictor.regressors or algo not in times.columns:
            continue
        ms = times[algo].to_numpy(dtype=float)
        runs = np.isfinite(ms) & (ms > 0) & np.isfinite(workspaces[algo].to_numpy(dtype=float))
        if runs.sum() < min_runs:
            continue
        ratio = ms / predictor.baseline_ms(F, algo)
        paths = answer_paths(workspaces[algo].to_numpy(dtype=float))
        if min((runs & rows).sum() for rows in paths.values()) < min_runs:
            paths = {ALL_RUNS: np.ones(len(F), dtype=bool)}
        chosen[algo] = {}
        for path in paths:
            name = choice.get(algo, {}).get(path, DEFAULT_CANDIDATE)
            chosen[algo][path] = name if name in candidates else DEFAULT_CANDIDATE
        given = {p: candidates[n] for p, n in chosen[algo].items()}
        (trees, transforms), design_of[algo] = choose_design(answers, with_transforms, ratio, runs, paths, given,
                                                             designs)
        path_candidates = given if trees == "chosen" else {p: finer_trees(c) for p, c in given.items()}
        inputs = with_transforms if transforms else answers
        if transforms:
            transform_inputs.append(algo)
        regressors[algo] = {path: to_part(clone(path_candidates[path]).fit(inputs[runs & rows], ratio[runs & rows]))
                            for path, rows in paths.items()}
        if variants is not None and algo in variants.columns:
            of_run = variants[algo].to_numpy(dtype=object)
            traced = runs & pd.notna(of_run)
            mixture, decided[algo] = fit_variant_times(
                inputs, ratio, runs, traced, of_run, paths, path_candidates, min_variant_runs)
            if mixture is not None:
                mixtures[algo] = mixture
    return AnswerTimePredictor(cudnn, regressors, mixtures, transform_inputs), chosen, decided, design_of


def design_inputs(predictor: AlgorithmPredictor, shapes: pd.DataFrame,
                  workspaces: pd.DataFrame) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray]:
    """cuDNN's algorithms ``workspaces`` answers for, and per layer of ``shapes`` what the designs
    read: the shape features, those with every such algorithm's answer, and the transform features."""
    cudnn = [a for a in algorithm_names("cudnn") if a in workspaces.columns]
    F = shape_features(layer_frame(shapes), predictor.feature_spec).to_numpy()
    answers = np.hstack([F, answer_inputs(workspaces[cudnn].to_numpy(dtype=float))])
    return cudnn, F, answers, transform_matrix(shapes)[1]


def validation_rows(n_layers: int, seed: int = 0) -> np.ndarray:
    """The train layers (a mask) held out to decide between designs: :data:`VALIDATION_SHARE`
    of them, seeded."""
    return np.random.default_rng(seed).random(n_layers) < VALIDATION_SHARE


def choose_design(answers: np.ndarray, with_transforms: np.ndarray, ratio: np.ndarray, runs: np.ndarray,
                  paths: dict[str, np.ndarray], candidates: dict, designs: tuple = DESIGNS,
                  seed: int = 0) -> tuple[tuple[str, bool], dict]:
    """One algorithm's regressor design of ``designs`` (:data:`DESIGNS`), and what validation measured.

    Each design is fitted per kernel path (``paths``; ``candidates`` the regressor of each) on
    the layers :func:`validation_rows` keeps, from ``answers`` (shape features and cuDNN's
    answers) or ``with_transforms`` (and the transform features), and scored by MAPE of the
    time's ratio to the baseline (``ratio``) on the held-out layers' ``runs``. The lowest wins
    where it is at least :data:`MIN_GAIN_POINTS` below the first design's; else the first.
    """
    first = designs[0]
    held = validation_rows(len(ratio), seed)
    valid = runs & held
    if len(designs) == 1:
        return first, {"trees": first[0], "transform_inputs": first[1], "reason": "the only design weighed"}
    if not valid.any() or any(not (runs & rows & ~held).any() for rows in paths.values()):
        return first, {"trees": first[0], "transform_inputs": first[1],
                       "reason": "no validation run, or no run left to fit, on some kernel path"}
    errors = {}
    for trees, transforms in designs:
        inputs = with_transforms if transforms else answers
        predicted = np.empty(len(ratio))
        for path, rows in paths.items():
            candidate = candidates[path] if trees == "chosen" else finer_trees(candidates[path])
            fitted = clone(candidate).fit(inputs[runs & rows & ~held], ratio[runs & rows & ~held])
            predicted[valid & rows] = fitted.predict(inputs[valid & rows])
        errors[(trees, transforms)] = mape(ratio[valid], predicted[valid])
    best = min(errors, key=errors.get)
    if errors[best] > errors[first] - MIN_GAIN_POINTS:
        best = first
    return best, {"trees": best[0], "transform_inputs": best[1], "validation_runs": int(valid.sum()),
                  "validation_mape": {f"{t}{' + transforms' if x else ''}": round(e, 3)
                                      for (t, x), e in errors.items()}}


def variant_classifier() -> HistGradientBoostingClassifier:
    """The kernel-variant classifier: boosted trees as ``benchmarks/kernel_oracle.py``
    measured them, with fewer rounds (one tree per variant and round is stored and walked)."""
    return HistGradientBoostingClassifier(max_iter=100, max_leaf_nodes=31, early_stopping=False, random_state=0)


def fit_variant_mixture(inputs: np.ndarray, ratio: np.ndarray, traced: np.ndarray, of_run: np.ndarray,
                        paths: dict[str, np.ndarray], candidates: dict,
                        min_runs: int = MIN_VARIANT_RUNS) -> tuple[BoostedClassifier, dict] | None:
    """The variant classifier and the per-(path, variant) regressors of :class:`VariantTimes`,
    fitted on the ``traced`` rows (a variant with fewer than ``min_runs`` of them on a path
    has no regressor there, and one with none anywhere is :data:`RARE_VARIANTS` to the
    classifier); None where fewer than two classes are left (nothing to tell apart)."""
    fitted = {}
    for path, rows in paths.items():
        for variant in sorted(set(of_run[traced & rows])):
            members = traced & rows & (of_run == variant)
            if members.sum() >= min_runs:
                fitted.setdefault(path, {})[variant] = to_part(clone(candidates[path]).fit(inputs[members],
                                                                                          ratio[members]))
    own = {v for per_path in fitted.values() for v in per_path}
    labels = np.array([v if v in own else RARE_VARIANTS for v in of_run[traced]], dtype=object).astype(str)
    if len(set(labels)) < 2:
        return None
    classifier = to_part(variant_classifier().fit(inputs[traced], labels))
    return classifier, fitted


def fit_variant_times(inputs: np.ndarray, ratio: np.ndarray, runs: np.ndarray, traced: np.ndarray,
                      of_run: np.ndarray, paths: dict[str, np.ndarray], candidates: dict,
                      min_runs: int = MIN_VARIANT_RUNS, seed: int = 0) -> tuple[VariantTimes | None, dict]:
    """One algorithm's :class:`VariantTimes`, or None where validation says keep its single regressor.

    ``inputs`` and ``ratio`` (time over baseline) are per train layer, ``runs`` marks the
    layers the algorithm ran on, ``traced`` those whose run was traced, ``of_run`` the traced
    variant, ``paths`` the rows of each kernel path and ``candidates`` the regressor of each.
    The decision: :data:`VALIDATION_SHARE` of the layers (seeded) is held out; on the rest the
    single regressors and the mixture are fitted; the mixture's threshold is the one of
    :data:`THRESHOLDS` with the lowest MAPE on the held-out layers' runs (traced or not: a
    prediction cannot know), and the mixture is kept, refitted on every train run, where that
    MAPE is at least :data:`MIN_GAIN_POINTS` below the single regressors'. The dict says why.
    """
    held = validation_rows(len(inputs), seed)
    info: dict = {"traced_runs": int(traced.sum()), "variants": len(set(of_run[traced]))}
    fitted = fit_variant_mixture(inputs, ratio, traced & ~held, of_run, paths, candidates, min_runs)
    valid = runs & held
    if fitted is not None and any(not (runs & rows & ~held).any() for rows in paths.values()):
        fitted = None  # a path with no run left to fit its single regressor: nothing to compare with
    if fitted is None or not valid.any():
        return None, info | {"used": False, "reason": "fewer than two variants with enough runs"}
    single = np.empty(len(inputs))
    for path, rows in paths.items():
        regressor = clone(candidates[path]).fit(inputs[runs & rows & ~held], ratio[runs & rows & ~held])
        single[valid & rows] = regressor.predict(inputs[valid & rows])
    classifier, regressors = fitted
    row_paths = {p: rows[valid] for p, rows in paths.items()}

    def error(predicted: np.ndarray) -> float:
        return float(np.mean(np.abs(predicted / ratio[valid] - 1)) * 100)

    errors = {t: error(VariantTimes(classifier, t, regressors).ratios(inputs[valid], row_paths, single[valid]))
              for t in THRESHOLDS}
    best = min(errors, key=errors.get)
    info |= {"validation_runs": int(valid.sum()), "validation_mape_single": round(error(single[valid]), 3),
             "validation_mape_mixture": {str(t): round(e, 3) for t, e in errors.items()}, "threshold": best}
    if errors[best] > info["validation_mape_single"] - MIN_GAIN_POINTS:
        return None, info | {"used": False, "reason": f"validation gain under {MIN_GAIN_POINTS} points"}
    refit = fit_variant_mixture(inputs, ratio, traced, of_run, paths, candidates, min_runs)
    if refit is None:
        return None, info | {"used": False, "reason": "fewer than two variants with enough runs"}
    classifier, regressors = refit
    info |= {"used": True, "regressors": sum(len(v) for v in regressors.values()), "classes": len(classifier.classes)}
    return VariantTimes(classifier, float(best), regressors), info

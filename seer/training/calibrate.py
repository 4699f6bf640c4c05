"""Calibrate a trained model's intervals and near-best chance on held-out layers.

Split-conformal: the time models and the pick are fitted on the ``train`` split; their
errors are measured on the *calibration half* of Test-set-I (:func:`calibration_half`, a
seeded hash of the shape), layers no model saw; the other half of Test-set-I and all of
Test-set-II then judge the intervals (``seer evaluate``). Calibrating changes no time and
no pick, so every other figure of the evaluation stays a held-out one on all of Test-set-I.
The quantiles and the curve are :mod:`seer.predict.uncertainty`'s.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace

import numpy as np
import pandas as pd
from sklearn.isotonic import IsotonicRegression

from seer.dataset.views import algorithm_rows, policy_frames, recorded_runs, training_frames, values_by_algorithm
from seer.layers.shapes import layer_frame
from seer.predict.guard import guard_policy
from seer.predict.model import Model
from seer.predict.predictors import AlgorithmPredictor
from seer.predict.uncertainty import (GUARD_RULE, MIN_CALIBRATION_RUNS, NEAR_BEST, RARE_KIND_RULE,
                                      fit_guard_margins, fit_intervals, interval_kind, pick_margin)
from seer.schema import get_math_mode

#: The split whose calibration half calibrates the models.
CALIBRATION_SPLIT = "test1"


#: What decides a shape's side, as the model card records it.
CALIBRATION_HASH = "blake2b('calibration:' + shape_id), first byte < 128"


def calibration_half(shape_ids) -> np.ndarray:
    """Whether each shape of Test-set-I calibrates the models (about half do), by a seeded hash
    (:data:`CALIBRATION_HASH`): a shape stays on its side when the dataset grows."""
    def side(shape_id: str) -> bool:
        return hashlib.blake2b(f"calibration:{shape_id}".encode(), digest_size=8).digest()[0] < 128

    return np.fromiter((side(str(s)) for s in shape_ids), dtype=bool, count=len(shape_ids))


def near_best_curve(scores: np.ndarray, times: np.ndarray) -> dict[str, list[float]]:
    """The near-best curve: whether each layer's pick by ``scores`` (NaN: predicted not to run)
    measured (``times``, NaN: did not run) within NEAR_BEST of the fastest, fitted by isotonic
    regression on the pick's margin. Layers where one algorithm is predicted to run share the
    widest margin seen; an empty dict where no layer has a pick and a time."""
    best = np.nanmin(np.where(np.isfinite(times), times, np.nan), axis=1, initial=np.inf)
    picked = np.isfinite(scores).any(axis=1) & np.isfinite(best)
    if not picked.any():
        return {}
    chosen = times[np.flatnonzero(picked), np.nanargmin(scores[picked], axis=1)]
    near = (chosen <= best[picked] * (1 + NEAR_BEST)).astype(float)  # a pick that did not run is a miss
    margin = pick_margin(scores[picked])
    widest = float(np.max(margin[np.isfinite(margin)], initial=0.0))
    margin = np.where(np.isfinite(margin), margin, widest)
    curve = IsotonicRegression(y_min=0.0, y_max=1.0, increasing=True, out_of_bounds="clip").fit(margin, near)
    return {"margin": [float(v) for v in curve.X_thresholds_], "probability": [float(v) for v in curve.y_thresholds_]}


def calibrate_predictor(predictor: AlgorithmPredictor, shapes: pd.DataFrame, measured: pd.DataFrame,
                        complete: np.ndarray) -> AlgorithmPredictor:
    """``predictor`` with intervals and a near-best curve fitted on ``shapes`` and their
    ``measured`` times (one column per algorithm, NaN where a run did not succeed):
    intervals from every run that succeeded, the curve from the layers where every
    algorithm was recorded (``complete``), as the pick chooses among all of them."""
    frame = layer_frame(shapes)
    times, scores = predictor.predict_with_scores(frame)
    unmasked = predictor.predict_unmasked(frame)  # every run's time, as the interval bounds it
    m = measured.reindex(columns=predictor.algorithms).to_numpy(dtype=float)
    kinds = interval_kind(frame)
    intervals = {}
    for j, algo in enumerate(predictor.algorithms):
        ran = np.isfinite(m[:, j]) & (m[:, j] > 0) & np.isfinite(unmasked[:, j])
        if ran.any():
            intervals[algo] = fit_intervals(np.log(m[ran, j] / unmasked[ran, j]), kinds[ran])
    curve = near_best_curve(scores[complete], m[complete])
    return replace(predictor, intervals=intervals, near_best=curve)


def calibrate_policies(predictor: AlgorithmPredictor, shapes: pd.DataFrame, measured: pd.DataFrame) -> dict:
    """Intervals of PyTorch's policies' predicted times, fitted as the algorithms' are, on
    ``shapes`` and the policies' ``measured`` times (one column per policy)."""
    if not predictor.policies or shapes.empty:
        return {}
    frame = layer_frame(shapes)
    predicted = predictor.predict_policies(frame)
    kinds = interval_kind(frame)
    intervals = {}
    for j, policy in enumerate(predictor.policies):
        m = measured[policy].to_numpy(dtype=float)
        ran = np.isfinite(m) & (m > 0) & np.isfinite(predicted[:, j])
        if ran.any():
            intervals[policy] = fit_intervals(np.log(m[ran] / predicted[ran, j]), kinds[ran])
    return intervals


def guard_residuals(predictor: AlgorithmPredictor, policy: str, shapes: pd.DataFrame, measured: pd.DataFrame,
                    pytorch: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """Per layer of ``shapes`` where the pick (the predictor's fastest by its scores, among every
    algorithm it ranks) and PyTorch's ``policy`` both ran (``measured``: one column per algorithm;
    ``pytorch``: the policy's measured times, per layer) and both are predicted: the residual
    log(measured pick / measured PyTorch) - log(predicted pick / predicted PyTorch), and the
    layer's interval kind."""
    if shapes.empty or policy not in predictor.policies:
        return np.empty(0), np.empty(0, dtype=object)
    frame = layer_frame(shapes)
    times, scores = predictor.predict_with_scores(frame)
    predicted_pytorch = predictor.predict_policies(frame, [policy])[:, 0]
    has = np.isfinite(scores).any(axis=1)
    pick = np.where(has, np.argmin(np.where(np.isfinite(scores), scores, np.inf), axis=1), 0)
    rows = np.arange(len(frame))
    pick_ms = np.where(has, times[rows, pick], np.nan)
    m = measured.reindex(index=shapes.index, columns=predictor.algorithms).to_numpy(dtype=float)
    pick_measured = np.where(has, m[rows, pick], np.nan)
    pytorch_measured = pytorch.reindex(shapes.index).to_numpy(dtype=float)
    usable = has & np.isfinite(pick_ms) & np.isfinite(predicted_pytorch) & (pick_measured > 0) & (pytorch_measured > 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        residual = np.log(pick_measured / pytorch_measured) - np.log(pick_ms / predicted_pytorch)
    return residual[usable], interval_kind(frame)[usable]


def calibrate_guard(predictor: AlgorithmPredictor, table: pd.DataFrame, math: str, pass_: str) -> dict[str, float]:
    """The guard's margins of ``predictor`` (:func:`seer.predict.uncertainty.fit_guard_margins` at
    ``math``'s :attr:`~seer.schema.MathMode.guard_level`), from the calibration half's layers of
    ``table`` in ``math`` where the pick and PyTorch's default policy of ``pass_`` both ran; empty
    where there is none."""
    policy = guard_policy(pass_)
    layers, policies = policy_frames(table, math, CALIBRATION_SPLIT)
    if policy not in policies.columns or layers.empty:
        return {}
    layers = layers[calibration_half(layers.index)]
    # Every layer's runs, not only those with a record of every algorithm: the pick is judged
    # where it and PyTorch's choice ran, as the guard benchmark judges it.
    measured = values_by_algorithm(algorithm_rows(table, math, CALIBRATION_SPLIT), "time_ms")
    residual, kinds = guard_residuals(predictor, policy, layers, measured, policies[policy])
    return fit_guard_margins(residual, kinds, get_math_mode(math).guard_level)


def calibrate(model: Model, table: pd.DataFrame) -> Model:
    """``model`` with each math mode's predictor calibrated on the calibration half of
    Test-set-I of ``table`` (the measurements table); a math mode with no such layers is left as it is."""
    predictors, shapes_used, policy_shapes = dict(model.predictors), {}, {}
    for math, predictor in model.predictors.items():
        shapes, measured = training_frames(table, math, CALIBRATION_SPLIT, partial=True)
        half = calibration_half(shapes.index)
        if not half.any():
            continue
        complete = recorded_runs(table, math, CALIBRATION_SPLIT, measured).to_numpy(dtype=bool).all(axis=1)
        predictors[math] = calibrate_predictor(predictor, shapes[half], measured[half], complete[half])
        shapes_used[math] = int(half.sum())
        layers, policies = policy_frames(table, math, CALIBRATION_SPLIT)
        half = calibration_half(policies.index)
        policy_intervals = calibrate_policies(predictors[math], layers[half], policies[half])
        if policy_intervals:
            predictors[math] = replace(predictors[math], intervals=predictors[math].intervals | policy_intervals)
            policy_shapes[math] = int(half.sum())
        predictors[math] = replace(predictors[math], guard_margins=calibrate_guard(predictors[math], table, math,
                                                                                   model.pass_))
    card = dict(model.card) | {"calibration": {"split": CALIBRATION_SPLIT, "half": CALIBRATION_HASH,
                                               "shapes": shapes_used, "policy_shapes": policy_shapes,
                                               "min_kind_runs": MIN_CALIBRATION_RUNS,
                                               "rare_kinds": RARE_KIND_RULE,
                                               "guard": {"levels": {math: get_math_mode(math).guard_level
                                                                    for math in model.predictors},
                                                         "sided": "one", "rule": GUARD_RULE}}}
    return replace(model, card=card, predictors=predictors)

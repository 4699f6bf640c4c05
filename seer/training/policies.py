"""Learn the time of PyTorch's own choice, the policy seer's picks must beat.

PyTorch's engine is not a legacy algorithm, but on most layers it launches the kernels of
IMPLICIT_PRECOMP_GEMM (or PyTorch's own, on depthwise layers): so each policy's time is
learnt as a ratio to that algorithm's predicted time (ALGO_1's for the backward passes), from
the shape features and that prediction's own ratio to its baseline, on the ``train`` split's
runs of the policy. Boosted
trees on log ratios, as for the algorithms; few rounds, since the policies ran on fewer
layers than the algorithms.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import KFold, cross_val_predict

from seer.dataset.views import policy_frames
from seer.layers.shapes import layer_frame
from seer.predict.predictors import AlgorithmPredictor
from seer.predict.features import shape_features

#: The algorithm whose predicted time each policy's regressor scales, per pass: the forward's
#: implicit GEMM; the backward passes' ALGO_1 (implicit GEMM, deterministic, run on every layer).
POLICY_REFERENCES = {"fwd": "IMPLICIT_PRECOMP_GEMM", "bwd_data": "BWD_DATA_ALGO_1", "bwd_filter": "BWD_FILTER_ALGO_1"}
#: A policy needs runs on at least this many training layers to be modelled.
MIN_POLICY_LAYERS = 200


def policy_regressor() -> HistGradientBoostingRegressor:
    """The regressor of log(policy time / reference time)."""
    return HistGradientBoostingRegressor(max_iter=200, learning_rate=0.05, max_leaf_nodes=15, min_samples_leaf=10,
                                         l2_regularization=1.0, random_state=0)


def fit_policies(predictor: AlgorithmPredictor, table: pd.DataFrame, math: str) -> tuple[AlgorithmPredictor, dict]:
    """``predictor`` with a model of each of PyTorch's policies that ran on enough ``train``
    layers of ``math`` (:data:`MIN_POLICY_LAYERS`), and what the model card says of them
    (layers, cross-validated MAPE, and the reference's own MAPE as a prediction of the policy)."""
    from seer.training.estimators import log_time_regressor, to_part

    reference_algo = next((r for r in POLICY_REFERENCES.values() if r in predictor.regressors), None)
    if reference_algo is None:
        return predictor, {}
    layers, times = policy_frames(table, math, "train")
    F = shape_features(layer_frame(layers.reset_index(drop=True)), predictor.feature_spec).to_numpy()
    answers = predictor.workspace.answers(F) if predictor.workspace is not None else None
    predictor = replace(predictor, policy_reference=reference_algo)
    reference, inputs = predictor.policy_inputs(F, answers)
    policies, card = {}, {}
    for policy in times.columns:
        measured = times[policy].to_numpy()
        ran = np.isfinite(measured)
        if ran.sum() < MIN_POLICY_LAYERS:
            continue
        target = measured[ran] / reference[ran]
        estimator = log_time_regressor(policy_regressor())
        folds = KFold(5, shuffle=True, random_state=0)
        out_of_fold = cross_val_predict(estimator, inputs[ran], target, cv=folds)
        policies[policy] = to_part(estimator.fit(inputs[ran], target))
        card[policy] = {"layers": int(ran.sum()), "reference": reference_algo,
                        "cv_mape_percent": _mape(measured[ran], reference[ran] * out_of_fold),
                        "reference_alone_mape_percent": _mape(measured[ran], reference[ran])}
    if not policies:
        return replace(predictor, policy_reference=""), {}
    return replace(predictor, policies=policies), card


def _mape(measured: np.ndarray, predicted: np.ndarray) -> float:
    return round(float(np.mean(np.abs(predicted / measured - 1)) * 100), 2)

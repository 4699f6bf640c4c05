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
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import clone

from seer.algorithms import algorithm_names
from seer.layers.shapes import layer_frame
from seer.predict.features import shape_features
from seer.predict.predictors import ALL_RUNS, AlgorithmPredictor, AnswerTimePredictor, answer_inputs, answer_paths
from seer.training.estimators import default_candidates, to_part

#: The candidate of a path the shape-only model has no choice for.
DEFAULT_CANDIDATE = "boosted_trees"


def fit_answer_times(predictor: AlgorithmPredictor, shapes: pd.DataFrame, times: pd.DataFrame,
                     workspaces: pd.DataFrame, choice: dict | None = None, candidates: dict | None = None,
                     min_runs: int = 20) -> tuple[AnswerTimePredictor, dict]:
    """An :class:`AnswerTimePredictor` for ``predictor``'s cuDNN algorithms and what it chose.

    ``shapes``, ``times`` and ``workspaces`` are training frames (a row per layer; a column per
    algorithm, NaN where the run did not go ahead), ``workspaces`` the bytes cuDNN asked for.
    ``choice`` gives per algorithm and path the candidate name the shape-only model chose (the
    card's ``regressor``); ``candidates`` the candidates by name (default:
    :func:`seer.training.estimators.default_candidates`). A path with fewer than ``min_runs``
    runs shares one regressor with the other.
    """
    candidates = default_candidates() if candidates is None else candidates
    choice = choice or {}
    cudnn = [a for a in algorithm_names("cudnn") if a in workspaces.columns]
    F = shape_features(layer_frame(shapes), predictor.feature_spec).to_numpy()
    inputs = np.hstack([F, answer_inputs(workspaces[cudnn].to_numpy(dtype=float))])
    regressors, chosen = {}, {}
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
        regressors[algo], chosen[algo] = {}, {}
        for path, rows in paths.items():
            name = choice.get(algo, {}).get(path, DEFAULT_CANDIDATE)
            name = name if name in candidates else DEFAULT_CANDIDATE
            fitted = clone(candidates[name]).fit(inputs[runs & rows], ratio[runs & rows])
            regressors[algo][path], chosen[algo][path] = to_part(fitted), name
    return AnswerTimePredictor(cudnn, regressors), chosen

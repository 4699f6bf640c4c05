"""The guarded pick: leave PyTorch's own choice only where the gain is larger than the error.

Under default math PyTorch's choice is within about 1% of the fastest algorithm on most
layers, and a pick that the models favour by less than their error loses as often as it
wins. So seer recommends its pick only where the pick's time is surely shorter than
PyTorch's, elsewhere PyTorch's own choice (:data:`PYTORCH_CHOICE`). On one layer the two
predictions mostly err together, so the guard calibrates their ratio: the pick where
``log(pick_ms / pytorch_ms) + margin < 0``, ``margin`` the layer kind's one-sided
quantile of the ratio's error on the calibration layers at the math mode's level
(:attr:`seer.schema.MathMode.guard_level`: 90% under default math, 50% under strict FP32,
where PyTorch's choice is often far from the fastest;
:func:`seer.predict.uncertainty.fit_guard_margins`). A model calibrated
before the margins decides as before: the upper bound of the pick's :data:`GUARD_LEVEL`
interval below the lower bound of PyTorch's; without intervals the point times. Without a
model of PyTorch's choice the pick stands. ``benchmarks/guard.py`` measures the rule on the
held-out networks (``benchmarks/ratio_guard.py`` compared the two rules).
"""

from __future__ import annotations

import numpy as np

from seer.algorithms import algorithm_names
from seer.schema import PYTORCH_CHOICE

#: The interval level whose bounds must not overlap for seer's pick to replace PyTorch's, where the
#: model has no guard margins; also the level of the bounds the sparse kernels' guard compares.
GUARD_LEVEL = 80


def guard_policy(pass_: str = "fwd") -> str:
    """The policy whose predicted time the guard compares with: PyTorch's default (heuristic)
    mode of the pass, the first of its policies in the registry."""
    return algorithm_names("pytorch", pass_=pass_)[0]


#: The forward's guard policy.
GUARD_POLICY = guard_policy()


def recommended(best_algo, best_ms, best_high, pytorch_ms, pytorch_low, margin=None) -> np.ndarray:
    """Per layer: ``best_algo`` where it is surely faster than PyTorch's choice, else
    :data:`PYTORCH_CHOICE`; ``best_algo`` where PyTorch's time is not predicted (missing
    where there is no pick and no PyTorch time). Where the layer's guard ``margin`` is given
    (finite), surely faster means ``best_ms x e^margin < pytorch_ms``; else the pick's upper
    bound below PyTorch's lower bound, else (no bounds) the point times."""
    best_algo = np.asarray(best_algo, dtype=object)
    best_ms, best_high, pytorch_ms, pytorch_low = (np.asarray(v, dtype=float)
                                                   for v in (best_ms, best_high, pytorch_ms, pytorch_low))
    margin = np.full(len(best_ms), np.nan) if margin is None else np.asarray(margin, dtype=float)
    bounded = np.isfinite(best_high) & np.isfinite(pytorch_low)
    faster = np.where(bounded, best_high < pytorch_low, best_ms < pytorch_ms)
    with np.errstate(invalid="ignore", over="ignore"):
        by_ratio = best_ms * np.exp(margin) < pytorch_ms
    faster = np.where(np.isfinite(margin), by_ratio, faster)
    has_pick = np.array([isinstance(a, str) for a in best_algo], dtype=bool)
    out = np.where(has_pick & (faster | ~np.isfinite(pytorch_ms)), best_algo, PYTORCH_CHOICE)
    return np.where(has_pick | np.isfinite(pytorch_ms), out, None)

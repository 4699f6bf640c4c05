"""The guarded pick: leave PyTorch's own choice only where the gain is larger than the error.

Under default math PyTorch's choice is within about 1% of the fastest algorithm on most
layers, and a pick that the models favour by less than their error loses as often as it
wins. So seer recommends its pick only where the pick's time is surely shorter than
PyTorch's: the upper bound of the pick's :data:`GUARD_LEVEL` interval lies below the lower
bound of PyTorch's; elsewhere it recommends PyTorch's own choice (:data:`PYTORCH_CHOICE`).
Without intervals (a model trained before them) the point times decide; without a model
of PyTorch's choice the pick stands. ``benchmarks/guard.py`` measures the rule on the
held-out networks.
"""

from __future__ import annotations

import numpy as np

from seer.algorithms import algorithm_names
from seer.schema import PYTORCH_CHOICE

#: The interval level whose bounds must not overlap for seer's pick to replace PyTorch's.
GUARD_LEVEL = 80


def guard_policy(pass_: str = "fwd") -> str:
    """The policy whose predicted time the guard compares with: PyTorch's default (heuristic)
    mode of the pass, the first of its policies in the registry."""
    return algorithm_names("pytorch", pass_=pass_)[0]


#: The forward's guard policy.
GUARD_POLICY = guard_policy()


def recommended(best_algo, best_ms, best_high, pytorch_ms, pytorch_low) -> np.ndarray:
    """Per layer: ``best_algo`` where it is surely faster than PyTorch's choice, else
    :data:`PYTORCH_CHOICE`; ``best_algo`` where PyTorch's time is not predicted (missing
    where there is no pick and no PyTorch time)."""
    best_algo = np.asarray(best_algo, dtype=object)
    best_ms, best_high, pytorch_ms, pytorch_low = (np.asarray(v, dtype=float)
                                                   for v in (best_ms, best_high, pytorch_ms, pytorch_low))
    bounded = np.isfinite(best_high) & np.isfinite(pytorch_low)
    faster = np.where(bounded, best_high < pytorch_low, best_ms < pytorch_ms)
    has_pick = np.array([isinstance(a, str) for a in best_algo], dtype=bool)
    out = np.where(has_pick & (faster | ~np.isfinite(pytorch_ms)), best_algo, PYTORCH_CHOICE)
    return np.where(has_pick | np.isfinite(pytorch_ms), out, None)

"""How sure a prediction is: an interval on each time, and the chance that a pick is near the fastest.

Both are calibrated on layers the models never saw, the calibration half of Test-set-I
(:mod:`seer.training.calibrate`, run by ``seer train`` and ``seer calibrate``):

- **Intervals.** Per algorithm and :func:`interval_kind` of layer, the quantiles of the
  log ratio measured / predicted at each :data:`INTERVAL_LEVELS` level (split-conformal,
  with the finite-sample correction), so that a time's interval is
  ``[time x e^low, time x e^high]``. A kind with fewer than :data:`MIN_CALIBRATION_RUNS`
  runs of the algorithm takes, per level, the wider of the algorithm's quantiles over all kinds
  and its own (its extremes, from fewer runs than the level resolves): a kind the models rarely
  saw may err more than the common ones.
- **Near-best probability.** The share of calibration layers whose pick measured within 1%
  of the fastest, as an increasing function of the pick's margin (log of the runner-up's
  pick score over the pick's), fitted by isotonic regression and stored as the knots of a
  piecewise-linear curve.

``seer evaluate`` measures both on the held-out splits (``reports/<gpu>-evaluation.md``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from seer.layers.shapes import LayerTable, layer_kind_masks, table_rows
from seer.schema import INTERVAL_LEVELS

if TYPE_CHECKING:  # imported where used: seer predict computes on layer tables, without pandas
    import pandas as pd

#: A pick "near the fastest" measures within this fraction of the fastest algorithm's time:
#: where algorithms run the same kernel (IMPLICIT_GEMM, IMPLICIT_PRECOMP_GEMM and GEMM run one
#: grouped kernel on most depthwise layers), which of them measured fastest is timing noise.
NEAR_BEST = 0.01
#: Fewer runs of an algorithm on a kind of layer than this, and the kind's own quantiles are not
#: trusted alone (:data:`RARE_KIND_RULE`): 1/(n+1) of the tail is the finest a quantile of n runs resolves.
MIN_CALIBRATION_RUNS = 40
#: How a kind with fewer runs than that is bounded, as the model card records it.
RARE_KIND_RULE = "per level, the wider of the kind's own quantiles and those over every kind"
#: Each layer's one kind for intervals: the first of these it is (:data:`seer.layers.shapes.LAYER_KINDS`),
#: the rarer and harder kinds first; ``other`` where it is none (a 2D layer with unequal strides, say).
INTERVAL_KINDS: tuple[str, ...] = ("3D", "depthwise", "grouped", "dilated", "1xN", "non-square input", "square",
                                   "other")
#: Key of an algorithm's quantiles over every kind.
ALL_KINDS = "all"
#: The guard's rule with margins, as the model card records it (beside each math mode's level:
#: :attr:`seer.schema.MathMode.guard_level`).
GUARD_RULE = (f"the pick where log(pick_ms / pytorch_ms) + margin(kind) < 0; margin: the one-sided split-conformal "
              f"quantile, at the math mode's guard level, of log(measured pick / measured PyTorch) - "
              f"log(predicted pick / predicted PyTorch) on the calibration layers where both ran; a kind with "
              f"fewer than {MIN_CALIBRATION_RUNS} such layers takes the larger of its own and the all-kinds one")


def interval_kind(frame: pd.DataFrame | LayerTable) -> np.ndarray:
    """One :data:`INTERVAL_KINDS` name per layer of a layer frame (or layer table)."""
    flags = layer_kind_masks(frame)
    out = np.full(table_rows(frame), INTERVAL_KINDS[-1], dtype=object)
    for kind in reversed(INTERVAL_KINDS[:-1]):  # the first kind in the order wins
        out[flags[kind]] = kind
    return out


def _kind_positions(kinds: np.ndarray) -> np.ndarray:
    """Each of ``kinds``' position in :data:`INTERVAL_KINDS` (-1 for a name not there)."""
    position = {kind: i for i, kind in enumerate(INTERVAL_KINDS)}
    return np.fromiter((position.get(kind, -1) for kind in np.asarray(kinds, dtype=object).tolist()), dtype=np.intp,
                       count=len(kinds))


def conformal_quantiles(log_ratio: np.ndarray, levels: tuple[int, ...] = INTERVAL_LEVELS) -> list[list[float]]:
    """``[low, high]`` per level: the two-sided split-conformal quantiles of log(measured /
    predicted), each tail holding (1 - level) / 2, with the (n + 1) correction."""
    values = np.sort(np.asarray(log_ratio, dtype=float))
    n = len(values)
    out = []
    for level in levels:
        tail = (1 - level / 100) / 2
        upper = min(int(np.ceil((n + 1) * (1 - tail))), n) - 1
        lower = max(int(np.floor((n + 1) * tail)), 1) - 1
        out.append([float(values[lower]), float(values[upper])])
    return out


def fit_intervals(log_ratio: np.ndarray, kinds: np.ndarray) -> dict[str, list[list[float]]]:
    """One algorithm's quantiles (:func:`conformal_quantiles`) over all its runs (``all``) and per
    kind: its own with at least :data:`MIN_CALIBRATION_RUNS` runs, else per level the wider of
    ``all``'s and its own (a kind without runs takes ``all``'s); ``log_ratio`` and ``kinds`` per run."""
    log_ratio = np.asarray(log_ratio, dtype=float)
    overall = conformal_quantiles(log_ratio)
    out = {ALL_KINDS: overall}
    for kind in INTERVAL_KINDS:
        own = log_ratio[kinds == kind]
        if len(own) >= MIN_CALIBRATION_RUNS:
            out[kind] = conformal_quantiles(own)
        elif len(own):
            # Too few runs to trust the kind's own quantiles alone, yet the models may err more on a
            # kind they rarely saw: take the wider of both per level (from fewer runs than a level
            # resolves, its own are its extremes, which hold a new run with chance (n - 1) / (n + 1)).
            widened = [[min(a[0], b[0]), max(a[1], b[1])] for a, b in zip(overall, conformal_quantiles(own))]
            if widened != overall:
                out[kind] = widened
    return out


def one_sided_quantile(values: np.ndarray, level: int) -> float:
    """The split-conformal upper quantile of ``values``: a new value lies at or below it with
    chance >= ``level`` (the (n + 1) correction; the largest value where n is too small)."""
    values = np.sort(np.asarray(values, dtype=float))
    return float(values[min(int(np.ceil((len(values) + 1) * level / 100)), len(values)) - 1])


def fit_guard_margins(residual: np.ndarray, kinds: np.ndarray, level: int) -> dict[str, float]:
    """The guard's margins (:data:`GUARD_RULE`): per :data:`INTERVAL_KINDS` kind with layers and
    over all (:data:`ALL_KINDS`), the ``level`` :func:`one_sided_quantile` of ``residual`` (per layer, the
    log ratio measured pick / PyTorch less the predicted one); a kind with fewer than
    :data:`MIN_CALIBRATION_RUNS` layers takes the larger of its own and the all-kinds margin, as
    the intervals do. Empty where there is no layer."""
    residual, kinds = np.asarray(residual, dtype=float), np.asarray(kinds, dtype=object)
    if not len(residual):
        return {}
    overall = one_sided_quantile(residual, level)
    out = {ALL_KINDS: overall}
    for kind in INTERVAL_KINDS:
        own = residual[kinds == kind]
        if len(own):
            mine = one_sided_quantile(own, level)
            out[kind] = mine if len(own) >= MIN_CALIBRATION_RUNS else max(overall, mine)
    return out


def guard_margin(kinds: np.ndarray, margins: dict[str, float]) -> np.ndarray:
    """Per layer (``kinds``: each one's :func:`interval_kind`), its kind's guard margin, else the
    all-kinds one; NaN for every layer where ``margins`` is empty (a model calibrated before them)."""
    if not margins:
        return np.full(len(kinds), np.nan)
    table = np.array([margins.get(kind, margins[ALL_KINDS]) for kind in INTERVAL_KINDS], dtype=float)
    return table[_kind_positions(kinds)]


def check_guard_margins(margins, where: str) -> None:
    """Raise ValueError unless ``margins`` is empty or what :func:`fit_guard_margins` makes:
    finite floats (within e^50) per interval kind, with one for all kinds."""
    if margins == {}:
        return
    if not isinstance(margins, dict) or ALL_KINDS not in margins or not all(
            type(k) is str and k in {ALL_KINDS, *INTERVAL_KINDS} for k in margins):
        raise ValueError(f"{where}: the guard's margins must be given per layer kind, with one for all kinds")
    if not all(type(v) is float and np.isfinite(v) and abs(v) <= 50 for v in margins.values()):
        raise ValueError(f"{where}: the guard's margins must be finite log ratios within e^50")


def interval_bounds(times: np.ndarray, kinds: np.ndarray, algorithms: list[str],
                    intervals: dict[str, dict[str, list[list[float]]]]) -> np.ndarray:
    """Bounds of ``times`` (rows x algorithms, ms): an array (rows, algorithms, levels, 2), NaN
    where a time is missing or its algorithm has no quantiles."""
    out = np.full((*times.shape, len(INTERVAL_LEVELS), 2), np.nan)
    index = _kind_positions(kinds)  # each row's kind, the same for every algorithm
    for j, algo in enumerate(algorithms):
        by_kind = intervals.get(algo)
        if not by_kind:
            continue
        offsets = np.array([by_kind.get(kind, by_kind[ALL_KINDS]) for kind in INTERVAL_KINDS])  # kinds x levels x 2
        out[:, j] = times[:, j, None, None] * np.exp(offsets[index])
    return out


def pick_margin(scores: np.ndarray) -> np.ndarray:
    """Per row of pick scores (NaN: not run): log of the runner-up's score over the pick's;
    infinite where one algorithm runs, NaN where none does."""
    finite = np.where(np.isfinite(scores), scores, np.inf)
    two = np.sort(finite, axis=1)[:, :2] if scores.shape[1] >= 2 else np.c_[finite, np.full(len(finite), np.inf)]
    with np.errstate(invalid="ignore", divide="ignore"):
        margin = np.log(two[:, 1] / two[:, 0])
    return np.where(np.isfinite(two[:, 0]), margin, np.nan)


def near_best_probability(margin: np.ndarray, curve: dict[str, list[float]]) -> np.ndarray:
    """The calibrated chance that each pick is within :data:`NEAR_BEST` of the fastest, from
    its :func:`pick_margin` (NaN without a curve or a pick)."""
    if not curve:
        return np.full(len(margin), np.nan)
    knots, chance = np.asarray(curve["margin"], dtype=float), np.asarray(curve["probability"], dtype=float)
    return np.where(np.isnan(margin), np.nan, np.interp(np.where(np.isinf(margin), knots[-1], margin), knots, chance))


def check_intervals(intervals, algorithms: list[str], where: str) -> None:
    """Raise ValueError unless ``intervals`` is what :func:`fit_intervals` makes, per known algorithm."""
    if not isinstance(intervals, dict) or not set(intervals) <= set(algorithms):
        raise ValueError(f"{where}: intervals must be given per algorithm it times")
    for algo, by_kind in intervals.items():
        if not isinstance(by_kind, dict) or ALL_KINDS not in by_kind or not set(by_kind) <= {ALL_KINDS,
                                                                                          *INTERVAL_KINDS}:
            raise ValueError(f"{where}: {algo}'s intervals must be per layer kind, with one for all kinds")
        for pairs in by_kind.values():
            if not (isinstance(pairs, list) and len(pairs) == len(INTERVAL_LEVELS) and all(
                    isinstance(p, list) and len(p) == 2 and all(isinstance(v, float) and np.isfinite(v)
                                                                and abs(v) <= 50 for v in p) and p[0] <= p[1]
                    for p in pairs)):
                raise ValueError(f"{where}: {algo}'s intervals must be [low, high] log ratios per level, "
                                 f"low <= high, within e^50")
            if any(wide[0] > narrow[0] or wide[1] < narrow[1] for narrow, wide in zip(pairs, pairs[1:])):
                raise ValueError(f"{where}: {algo}'s intervals must widen with the level")


def check_near_best(curve, where: str) -> None:
    """Raise ValueError unless ``curve`` is empty or increasing knots with chances in [0, 1]."""
    if curve == {}:
        return
    if not isinstance(curve, dict) or set(curve) != {"margin", "probability"}:
        raise ValueError(f"{where}: the near-best curve must give margin and probability knots")
    knots, chance = curve["margin"], curve["probability"]
    if not (isinstance(knots, list) and isinstance(chance, list) and 1 <= len(knots) == len(chance) <= 10_000
            and all(isinstance(v, float) and np.isfinite(v) for v in knots + chance)):
        raise ValueError(f"{where}: the near-best curve must be up to 10,000 finite knots")
    if any(b < a for a, b in zip(knots, knots[1:])) or any(b < a for a, b in zip(chance, chance[1:])) or not all(
            0 <= p <= 1 for p in chance):
        raise ValueError(f"{where}: the near-best curve must rise, with chances in [0, 1]")

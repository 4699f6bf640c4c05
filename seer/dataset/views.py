"""Views of the tidy measurements table that training and scoring share: the rows that
stand for a math mode, and per-layer frames of one value per algorithm."""

from __future__ import annotations

import numpy as np
import pandas as pd

from seer.algorithms import ALGORITHMS, algorithm_names, get_algorithm, pass_of
from seer.layers.shapes import LAYER_COLUMNS

#: PyTorch's own choice, measured as policies beside the algorithms (seer/gpu/pytorch_policy.py),
#: of every pass: the forward's first.
POLICIES: list[str] = algorithm_names("pytorch", pass_=None)
#: Share of a split's shapes an algorithm must have been run on to be modelled.
MIN_COVERAGE = 0.95


def math_rows(table: pd.DataFrame, math: str) -> pd.DataFrame:
    """The rows that stand for ``math``: its own, and for an algorithm with one code path
    whatever the mode (:attr:`seer.algorithms.Algorithm.one_math`), that mode's rows."""
    one_math = table["algo"].map({a.name: a.one_math for a in ALGORITHMS if a.one_math})
    return table[(table["math"] == one_math).where(one_math.notna(), table["math"] == math)]


def training_frames(table: pd.DataFrame, math: str, split: str | None = "train",
                    value: str = "time_ms", partial: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Layers (the layer columns, indexed by shape_id) and one column per algorithm of
    ``value`` (the time, ``workspace_bytes``, or a text column such as the kernel path), NaN
    where the run did not succeed, of one split (None: every split; a census table has
    none) and math mode (:func:`math_rows`).

    The layers are those with a record of every algorithm run on MIN_COVERAGE of the split's
    layers. An algorithm run on fewer is left out, or with ``partial`` kept with NaN where
    it was not run too: :func:`recorded_runs` tells the two NaNs apart.
    """
    rows = algorithm_rows(table, math, split)
    return algorithm_frames(rows, pd.unique(rows["algo"]), value, partial)


def policy_frames(table: pd.DataFrame, math: str, split: str | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Layers (the layer columns, indexed by shape_id) and PyTorch's policies' measured times
    (one column per policy, NaN where the run did not succeed) of ``split`` (None: every
    split) and ``math``, for the layers where they ran."""
    rows = split_rows(table, math, split)
    rows = rows[rows["algo"].isin(POLICIES)]
    times = values_by_algorithm(rows, "time_ms").reindex(columns=policies_of(table))
    return layers_of(rows, times.index), times


def policies_of(table: pd.DataFrame) -> list[str]:
    """PyTorch's policies of the passes whose runs ``table`` holds, in registry order."""
    held = set(pd.unique(pass_of(table["algo"]).dropna()))
    return [p for p in POLICIES if get_algorithm(p).pass_ in held]


def algorithm_rows(table: pd.DataFrame, math: str, split: str | None) -> pd.DataFrame:
    """:func:`split_rows` of the algorithms only: PyTorch's choice is measured beside them,
    modelled apart and never picked."""
    rows = split_rows(table, math, split)
    return rows[~rows["algo"].isin(POLICIES)]


def layers_of(rows: pd.DataFrame, shape_ids) -> pd.DataFrame:
    """The layer columns of ``shape_ids`` (index: shape_id), from ``rows`` that hold them."""
    return rows.drop_duplicates("shape_id").set_index("shape_id").loc[shape_ids, list(LAYER_COLUMNS)]


def recorded_runs(table: pd.DataFrame, math: str, split: str | None, like: pd.DataFrame) -> pd.DataFrame:
    """Whether each (layer, algorithm) of ``like`` (a :func:`training_frames` frame) has a
    record, a failure included, in ``split`` and ``math``."""
    return recorded_like(split_rows(table, math, split), like)


def split_rows(table: pd.DataFrame, math: str, split: str | None) -> pd.DataFrame:
    rows = math_rows(table, math)
    return rows if split is None else rows[rows["split"] == split]


def values_by_algorithm(rows: pd.DataFrame, value: str) -> pd.DataFrame:
    """``value`` per layer (index) and algorithm (columns), NaN where the run did not succeed."""
    succeeded = rows[value].where(rows["status"] == "ok")
    if pd.api.types.is_numeric_dtype(rows[value]):
        succeeded = succeeded.astype(float)
    return rows.assign(**{value: succeeded}).pivot(index="shape_id", columns="algo", values=value)


def algorithm_frames(rows: pd.DataFrame, order, value: str, partial: bool) -> tuple[pd.DataFrame, pd.DataFrame]:
    """:func:`training_frames` of rows already of one split and math mode; ``order`` lists
    the algorithms in the order of the columns."""
    values = values_by_algorithm(rows, value)
    # A missing run is not a failed one, and the models would learn it as one: the layers
    # kept have a record (even a failure) of every algorithm of full coverage.
    recorded = _recorded(rows).reindex(index=values.index)
    present = [a for a in order if a in values.columns]
    full = [a for a in present if recorded[a].mean() >= MIN_COVERAGE]
    kept = [a for a in present if a in full or partial]
    values = values.loc[recorded[full].all(axis=1), kept]
    return layers_of(rows, values.index), values


def _recorded(rows: pd.DataFrame) -> pd.DataFrame:
    """Whether ``rows`` hold a record of each (layer, algorithm): ``pd.crosstab(shape_id,
    algo) > 0``, without counting (a crosstab of the whole table took seconds)."""
    shape, shapes = pd.factorize(rows["shape_id"], sort=True)
    algo, algos = pd.factorize(rows["algo"], sort=True)
    known = (shape >= 0) & (algo >= 0)
    seen = np.zeros((len(shapes), len(algos)), dtype=bool)
    seen[shape[known], algo[known]] = True
    return pd.DataFrame(seen, index=pd.Index(shapes, name="shape_id"), columns=pd.Index(algos, name="algo"))


def recorded_like(rows: pd.DataFrame, like: pd.DataFrame) -> pd.DataFrame:
    return _recorded(rows).reindex(index=like.index, columns=like.columns, fill_value=False).astype(bool)

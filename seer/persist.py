"""Compact storage of gradient-boosted tree ensembles inside seer's model files.

scikit-learn keeps a fitted ``HistGradientBoosting*`` as one ``TreePredictor`` object per
tree, each with three small arrays. skops writes every array as its own ``.npy`` entry of
the zip file and reads it back with a header parse: for the ~8,000 trees of one seer model
that was 24,000 entries, 24 MB and 6 s to load. :func:`pack` replaces each ensemble's
trees with one :class:`PackedTrees` (one array per node field, all trees end to end) just
before a dump, and :func:`unpack` rebuilds the ``TreePredictor`` lists right after a load.

The nodes' split gains, sample counts and depths are diagnostics that prediction never
reads; they are stored as zeros, which compress to nothing. Predictions are unchanged
(``tests/test_models.py`` compares them before and after a round trip).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

#: Node fields that prediction does not read: stored as zeros.
DIAGNOSTIC_FIELDS = ("gain", "count", "depth")


class PackedTrees:
    """All trees of one boosted ensemble, field by field (see the module docstring).

    ``rounds`` x ``per_round`` trees (one per class and boosting round, as
    ``_predictors`` holds them), ``nodes_per_tree`` their sizes, ``fields`` one 1-D array
    per node field, and the two categorical bitset tables with their rows per tree.
    """

    def __init__(self, predictors=None) -> None:
        if predictors is None:  # skops builds an empty instance, then sets its state
            return
        trees = [tree for round_ in predictors for tree in round_]
        self.rounds, self.per_round = len(predictors), (len(predictors[0]) if predictors else 0)
        self.nodes_per_tree = np.array([len(t.nodes) for t in trees], dtype=np.int64)
        nodes = np.concatenate([t.nodes for t in trees]) if trees else np.empty(0)
        self.dtype = [list(item) for item in nodes.dtype.descr]
        self.fields = {name: (np.zeros_like(nodes[name]) if name in DIAGNOSTIC_FIELDS else nodes[name].copy())
                       for name in nodes.dtype.names or ()}
        for name in ("binned_left_cat_bitsets", "raw_left_cat_bitsets"):
            tables = [getattr(t, name) for t in trees]
            setattr(self, f"{name}_rows", np.array([len(b) for b in tables], dtype=np.int64))
            setattr(self, name, np.concatenate(tables) if tables else np.empty((0, 8), dtype=np.uint32))

    def predictors(self) -> list[list]:
        """The ``_predictors`` lists of ``TreePredictor`` again."""
        from sklearn.ensemble._hist_gradient_boosting.predictor import TreePredictor

        nodes = np.empty(int(self.nodes_per_tree.sum()), dtype=[tuple(item) for item in self.dtype])
        for name, values in self.fields.items():
            nodes[name] = values
        node_ends = np.cumsum(self.nodes_per_tree)
        binned_ends = np.cumsum(self.binned_left_cat_bitsets_rows)
        raw_ends = np.cumsum(self.raw_left_cat_bitsets_rows)
        trees = [TreePredictor(nodes[node_end - n_nodes:node_end],
                               self.binned_left_cat_bitsets[b_end - n_b:b_end],
                               self.raw_left_cat_bitsets[r_end - n_r:r_end])
                 for n_nodes, node_end, n_b, b_end, n_r, r_end in zip(
                     self.nodes_per_tree, node_ends, self.binned_left_cat_bitsets_rows, binned_ends,
                     self.raw_left_cat_bitsets_rows, raw_ends)]
        return [trees[i * self.per_round:(i + 1) * self.per_round] for i in range(self.rounds)]


def _ensembles(obj: Any, seen: set[int] | None = None):
    """Every fitted boosted ensemble reachable from ``obj`` through estimators' attributes,
    dicts, lists and tuples."""
    from sklearn.base import BaseEstimator

    seen = set() if seen is None else seen
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    elif isinstance(obj, BaseEstimator):
        if hasattr(obj, "_predictors"):
            yield obj
        children = list(vars(obj).values())
    else:
        return
    for child in children:
        yield from _ensembles(child, seen)


def _swap(obj: Any, convert: Callable) -> list[tuple[Any, Any]]:
    swapped = []
    for ensemble in _ensembles(obj):
        before = ensemble._predictors
        ensemble._predictors = convert(before)
        swapped.append((ensemble, before))
    return swapped


def pack(obj: Any) -> list[tuple[Any, Any]]:
    """Pack every ensemble in ``obj`` in place; returns what :func:`restore` puts back."""
    return _swap(obj, lambda predictors: predictors if isinstance(predictors, PackedTrees)
                 else PackedTrees(predictors))


def restore(swapped: list[tuple[Any, Any]]) -> None:
    """Undo :func:`pack` on the objects it changed (the fitted model in memory stays whole)."""
    for ensemble, before in swapped:
        ensemble._predictors = before


def unpack(obj: Any) -> Any:
    """Rebuild the trees of every packed ensemble in ``obj`` (after a load); returns ``obj``."""
    _swap(obj, lambda packed: packed.predictors() if isinstance(packed, PackedTrees) else packed)
    return obj

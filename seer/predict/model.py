"""A trained model set and its predictions, as tidy frames.

:class:`Model` holds, per math mode, seer's predictor (:class:`seer.predict.predictors.AlgorithmPredictor`)
and optionally SEER's (the baseline), with the card that says how they were trained.
:meth:`Model.predict` gives one row per (layer, algorithm predicted to run), ranked by
the model's pick (rank 1 is the pick), with whether the layer lies outside the shapes
the model was trained on; a layer for which no algorithm is predicted to run keeps a
row of its own, with no algorithm. Algorithms predicted not to run get no row, so they
are never recommended. Load one with :func:`seer.load_model`.

:meth:`Model.predict_table` computes the same rows as a prediction table (:data:`PredictionTable`:
the columns as numpy arrays), without pandas, which takes a quarter of a second to import: ``seer
predict`` writes the tables, and :meth:`Model.predict` makes its frame from one.
"""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Mapping

import numpy as np

from seer.algorithms import select_algorithms
from seer.errors import InputError
from seer.layers.shapes import LAYER_COLUMNS, LayerTable, ShapeError, check_layer_frame, layer_columns, table_rows
from seer.predict.predictors import AlgorithmPredictor, AnswerTimePredictor, SeerFamilyPredictor
from seer.predict.guard import GUARD_LEVEL, GUARD_POLICY, guard_policy, recommended
from seer.predict.sparse import SparseTimeModel, with_sparse_rows
from seer.predict.uncertainty import interval_bounds, interval_kind
from seer.schema import INTERVAL_COLUMNS, INTERVAL_LEVELS, OBJECTIVES, PREDICTION_COLUMNS, PYTORCH_COLUMNS

if TYPE_CHECKING:  # imported where used: predict_table needs no pandas
    import pandas as pd

Layers = "pd.DataFrame | LayerTable | np.ndarray | Sequence[ConvShape]"
#: Predictions as columns (:meth:`Model.predict_table`): each name to a numpy array, one value per
#: row. Missing values are NaN in float columns, None in object ones (``algo``, ``recommended``),
#: and masked in ``rank`` (a masked int64 array), where a frame has pandas' missing value.
PredictionTable = dict[str, np.ndarray]
#: Columns of a prediction that hold names, missing where there is none: strings in a frame.
TEXT_COLUMNS = ("algo", "recommended")


@dataclass(repr=False)
class Model:
    """seer's trained models of one GPU.

    Attributes
    ----------
    gpu : str
        The GPU the models were trained for.
    card : dict
        The model card: training data and its SHA-256, choices made, library versions.
    predictors : dict of str to AlgorithmPredictor
        seer's model per math mode.
    baselines : dict of str to SeerFamilyPredictor
        SEER's model per math mode, where loaded.
    answer_times : dict of str to AnswerTimePredictor
        Per math mode, the times of cuDNN's algorithms from cuDNN's own answers, where loaded
        (``load_model(..., cudnn_answers=True)``): used when :meth:`predict` is given them.
    sparse : SparseTimeModel or None
        The sparse kernels' times (:mod:`seer.predict.sparse`), where the GPU has that model:
        used for layers whose frame gives a ``sparsity`` above 0.
    """

    gpu: str
    card: dict
    predictors: dict[str, AlgorithmPredictor]
    baselines: dict[str, SeerFamilyPredictor] = field(default_factory=dict)
    answer_times: dict[str, AnswerTimePredictor] = field(default_factory=dict)
    sparse: SparseTimeModel | None = None

    @property
    def maths(self) -> list[str]:
        return list(self.predictors)

    @property
    def pass_(self) -> str:
        """The convolution pass the models predict (:data:`seer.algorithms.PASSES`)."""
        return self.card.get("pass", "fwd")

    def __repr__(self) -> str:
        # A few lines, not the trees: what a user checks at a prompt.
        algorithms = {m: len(p.algorithms) for m, p in self.predictors.items()}
        of = "" if self.pass_ == "fwd" else f" ({self.pass_})"
        return (f"<seer Model for {self.gpu}{of}: math modes {', '.join(self.maths)}; algorithms per mode "
                f"{algorithms}; SEER's baseline {'loaded' if self.baselines else 'not loaded'}; "
                f"trained {self.card.get('trained_at', '?')}>")

    def predictor(self, math: str) -> AlgorithmPredictor:
        """seer's model of one math mode; InputError naming the available ones otherwise."""
        try:
            return self.predictors[math]
        except KeyError:
            raise InputError(f"the {self.gpu} model has no {math!r} math mode (it has {', '.join(self.maths)})",
                             field="math") from None

    def predict(self, layers: Layers, math: str = "default", algorithms: Sequence[str] | None = None,
                objective: str = "time", workspaces: pd.DataFrame | None = None,
                memo: PredictionMemo | None = None) -> pd.DataFrame:
        """Every algorithm's predicted time for each layer, ranked by the pick.

        ``layers``: a frame with the layer columns (``seer.read_layers``; optional ones may be
        missing) or SEER's eight, an array of SEER's eight, or a list of
        :class:`~seer.layers.shapes.ConvShape`; an impossible layer raises :class:`InputError`.
        Returns the columns ``layer`` (position in ``layers``) and :data:`seer.schema.PREDICTION_COLUMNS`, one row per
        (layer, algorithm predicted to run), rank 1 first; a layer with no algorithm
        predicted to run has one row whose ``algo``, ``predicted_ms`` and ``rank`` are
        missing. ``algorithms`` (names, or groups such as ``"cudnn"``: see
        :func:`seer.algorithms.select_algorithms`) limits the ranking to those; None ranks all.
        ``objective="energy"`` ranks by predicted energy per call, among the algorithms that
        have an energy model, instead of by time. ``workspaces``: cuDNN's own answers for
        ``layers``, asked on a GPU (:func:`seer.gpu.answers.cudnn_workspaces`), which replace
        the first stage's guesses of whether each algorithm runs; where the model has
        :attr:`answer_times` of ``math``, cuDNN's algorithms are then timed from the answers.
        ``memo``: the answers of layers an earlier call predicted with the same arguments
        (:class:`PredictionMemo`; ``seer predict`` keeps one across its chunks); a layer found
        there is not predicted again, and the new ones are added. Not used with ``workspaces``.
        Where ``layers`` is a frame with a ``sparsity`` column (the share of the input's values
        that are zero, in [0, 1); empty is 0) and the model has :attr:`sparse`, the layers above 0
        also get rows for seer's sparse kernels, and every row gets ``break_even_sparsity``
        (:func:`seer.predict.sparse.with_sparse_rows`); by energy, the kernels with a power model.
        A ``crowding`` column (:func:`seer.layers.sparsity.pixel_crowding`) gives the sparse
        kernels' times at it; beyond :attr:`seer.predict.sparse.SparseTimeModel.max_crowding` no
        sparse kernel is recommended.
        """
        return prediction_frame(self.predict_table(layers, math, algorithms, objective, workspaces, memo))

    def predict_table(self, layers: Layers, math: str = "default", algorithms: Sequence[str] | None = None,
                      objective: str = "time", workspaces: pd.DataFrame | None = None,
                      memo: PredictionMemo | None = None) -> PredictionTable:
        """:meth:`predict`'s rows as a prediction table (:data:`PredictionTable`); ``layers`` may
        also be a layer table (:func:`seer.layers.files.iter_layer_tables`). Needs no pandas but
        for ``workspaces`` and the sparse kernels' rows (a ``sparsity`` column, with :attr:`sparse`)."""
        if objective not in OBJECTIVES:
            raise InputError(f"unknown objective {objective!r}; choose one of: {', '.join(OBJECTIVES)}",
                             field="objective")
        predictor = self.predictor(math)
        if isinstance(layers, (str, os.PathLike)):  # a layer file's name: read as `seer predict` reads it
            from seer.layers.files import read_layers

            layers = read_layers(layers)
        try:
            frame = layer_columns(layers)
            check_layer_frame(frame)
        except (ShapeError, ValueError) as exc:  # a caller's frame, not a file: no line to name
            raise InputError(str(exc), field=getattr(exc, "field", None)) from None
        # Each distinct layer is predicted once (networks and sweeps repeat shapes), then
        # every row takes its layer's answers.
        first, inverse = distinct_layers(frame)
        distinct = {name: column[first] for name, column in frame.items()}
        if workspaces is not None:
            import pandas as pd

            workspaces = pd.DataFrame(workspaces).reset_index(drop=True)
            if len(workspaces) != table_rows(frame):
                raise ValueError(f"cuDNN answered for {len(workspaces)} layers, the model predicts {table_rows(frame)}")
            workspaces = workspaces.iloc[first].reset_index(drop=True)
            memo = None
        if memo is None:
            answers = self._layer_answers(distinct, math, algorithms, objective, workspaces)
        else:
            chosen = None if algorithms is None else tuple([algorithms] if isinstance(algorithms, str) else algorithms)
            answers = memo.answers(distinct, (self, math, chosen, objective),
                                   lambda new: self._layer_answers(new, math, algorithms, objective))
        times, scores, energies, bounds, near_best, pytorch, extrapolated = (values[inverse] for values in answers)
        out = ranked(frame, math, predictor.algorithms, times, scores, extrapolated, energies, bounds, near_best)
        out = with_pytorch(out, pytorch, guarded=objective == "time")
        sparsity = layer_sparsity(layers)
        if sparsity is not None and self.sparse is not None and self.pass_ == "fwd" and (
                objective == "time" or self.sparse.power):
            import pandas as pd

            from seer.output import prediction_columns

            kernels = None if algorithms is None else _algorithm_names(algorithms)
            out = prediction_columns(with_sparse_rows(prediction_frame(out), pd.DataFrame(frame), sparsity, self.sparse,
                                                      kernels, objective, layer_crowding(layers)))
        return out

    def _layer_answers(self, layers: LayerTable, math: str, algorithms: Sequence[str] | None, objective: str,
                       workspaces: pd.DataFrame | None = None) -> tuple[np.ndarray, ...]:
        """Per layer of ``layers`` (distinct, the layer columns): what :func:`ranked` and
        :func:`with_pytorch` take, as :data:`PredictionMemo.FIELDS` names them."""
        predictor = self.predictor(math)
        policy = guard_policy(self.pass_)
        guard = [policy] if policy in predictor.policies else []
        times, scores, energies, pytorch = predictor.predict_with_energy(
            layers, guard, workspaces, self.answer_times.get(math) if workspaces is not None else None)
        _check_answers(times, energies, predictor.algorithms, f"the {self.gpu} {math}-math model")
        reported = times
        if objective == "energy":
            if not predictor.power:
                raise InputError(f"the {self.gpu} {math}-math model has no energy model; retrain it from a "
                                 f"dataset with energy readings (seer collect --energy)", field="objective")
            times, scores = np.where(np.isfinite(energies), times, np.nan), energies
        if algorithms is not None:
            left_out = ~np.isin(predictor.algorithms, _algorithm_names(algorithms))
            times[:, left_out] = scores[:, left_out] = np.nan
        kinds = interval_kind(layers)  # for the bounds of the algorithms' times and of PyTorch's
        bounds, near_best = predictor.uncertainty(layers, reported, scores, kinds)
        if objective == "energy":
            near_best[:] = np.nan  # calibrated for picks by time
        pytorch = pytorch_times(predictor, kinds, pytorch[:, 0] if guard else None, policy)
        return times, scores, energies, bounds, near_best, pytorch, predictor.extrapolated(layers)

    def pick(self, layers: Layers, math: str = "default", algorithms: Sequence[str] | None = None,
             objective: str = "time", workspaces: pd.DataFrame | None = None) -> pd.DataFrame:
        """Per layer: the pick and its predicted time, the runner-up, and the extrapolation mark."""
        return best_per_layer(self.predict(layers, math, algorithms, objective, workspaces))


class PredictionMemo:
    """What :meth:`Model.predict` computed per distinct layer, kept for its next calls with the
    same model and arguments, so that a layer met again (a stream's later chunks repeat the
    shapes of its first) is not predicted again. Each layer's answers depend on that layer
    alone, so a remembered answer is the one predicting it again would give, bit for bit.
    Other arguments start the memo afresh. It keeps at most ``capacity`` layers (the first
    ones seen), about 1 KB each."""

    #: The per-layer answers kept, in :meth:`Model._layer_answers`' order.
    FIELDS = ("times", "scores", "energies", "bounds", "near_best", "pytorch", "extrapolated")

    def __init__(self, capacity: int = 1 << 16) -> None:
        self.capacity = capacity
        self._arguments: tuple | None = None
        self._position: dict[bytes, int] = {}  # a layer's columns, as bytes: its row in the arrays
        self._arrays: list[np.ndarray] = []

    def __len__(self) -> int:
        return len(self._position)

    def answers(self, layers: LayerTable, arguments: tuple, predict) -> list[np.ndarray]:
        """Per layer of ``layers`` (distinct, a layer table), its answers: remembered ones, and
        ``predict``'s (a function of a table of the layers not remembered) for the others, which it remembers.
        ``arguments`` (the model, then the arguments of the call) must be the same as last time's
        for the remembered answers to serve."""
        model, *rest = arguments
        if self._arguments is None or self._arguments[0] is not model or self._arguments[1:] != tuple(rest):
            self._arguments, self._position, self._arrays = (model, *rest), {}, []
        values = np.column_stack([np.asarray(layers[name], dtype=np.int64) for name in LAYER_COLUMNS])
        keys = values.view(np.dtype((np.void, values.dtype.itemsize * values.shape[1]))).ravel().tolist()
        position = np.fromiter((self._position.get(key, -1) for key in keys), dtype=np.int64, count=len(keys))
        new = np.flatnonzero(position < 0)
        if not len(new):
            return [array[position] for array in self._arrays]
        predicted = predict({name: column[new] for name, column in layers.items()})
        if len(new) == len(keys):
            out = list(predicted)
        else:
            known = position >= 0
            out = []
            for remembered, fresh in zip(self._arrays, predicted):
                values_ = np.empty((len(keys), *fresh.shape[1:]), dtype=fresh.dtype)
                values_[known], values_[new] = remembered[position[known]], fresh
                out.append(values_)
        self._remember([keys[i] for i in new], predicted)
        return out

    def _remember(self, keys: list[bytes], answers: Sequence[np.ndarray]) -> None:
        start = len(self._position)
        keep = min(len(keys), self.capacity - start)
        if keep <= 0:
            return
        if not self._arrays or start + keep > len(self._arrays[0]):
            # Grown by doubling, not made at full capacity: numpy backs large arrays with huge
            # pages, so even an untouched capacity would cost memory.
            size = min(self.capacity, max(start + keep, 2 * start))
            grown = [np.empty((size, *values.shape[1:]), dtype=values.dtype) for values in answers]
            for array, old in zip(grown, self._arrays):
                array[:start] = old[:start]
            self._arrays = grown
        for array, values in zip(self._arrays, answers):
            array[start:start + keep] = values[:keep]
        self._position.update(zip(keys[:keep], range(start, start + keep)))


def layer_crowding(layers: Layers) -> np.ndarray | None:
    """The ``crowding`` column of a layer frame as floats (empty: NaN, not measured), None where
    there is none; InputError for a value that is not a number from 0."""
    return _input_column(layers, "crowding", "a number from 0", lambda v: (v >= 0) & np.isfinite(v), np.nan)


def layer_sparsity(layers: Layers) -> np.ndarray | None:
    """The ``sparsity`` column of a layer frame as floats (empty: 0), None where there is none;
    InputError for a value outside [0, 1)."""
    return _input_column(layers, "sparsity", "a number in [0, 1)", lambda v: (v >= 0) & (v < 1), 0.0)


def _input_column(layers: Layers, column: str, rule: str, valid, empty: float) -> np.ndarray | None:
    """A column of a layer frame (or layer table) that describes the layer's input, as floats
    (``empty`` where a cell is empty), None where there is none; InputError naming the first cell
    not ``valid``."""
    if not hasattr(layers, "keys") or column not in layers:
        return None
    cells = layers[column]
    if isinstance(cells, np.ndarray) and cells.dtype == np.float64:  # a layer file's: numbers, or NaN where empty
        values = cells
        given = ~np.isnan(cells)
    else:
        import pandas as pd

        cells = pd.Series(cells).reset_index(drop=True)
        values = pd.to_numeric(cells.replace("", np.nan), errors="coerce").to_numpy(dtype=float)
        given = cells.notna().to_numpy() & (cells.astype(str).str.strip() != "").to_numpy()
    bad = given & ~valid(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise InputError(f"layer {i}: {column} must be {rule}, got {cells[i]!r}", field=column)
    return np.where(given, values, empty)


def _check_answers(times: np.ndarray, energies: np.ndarray, algorithms: list[str], model: str) -> None:
    """A time or energy is a positive number, or NaN for no answer; anything else comes from
    a model file that loaded but is not what training wrote, and is refused, not ranked."""
    for what, values in (("time", times), ("energy", energies)):
        bad = np.isinf(values) | (values <= 0)
        if bad.any():
            layer, j = np.argwhere(bad)[0]
            raise InputError(f"{model} predicts an impossible {what} ({values[layer, j]:.3g}) for {algorithms[j]} "
                             f"on layer {layer}; its model file may be damaged: retrain it or reinstall seer")


def _algorithm_names(algorithms: Sequence[str]) -> list[str]:
    """Names from names and groups; an unknown one is an InputError."""
    try:
        return select_algorithms(algorithms if isinstance(algorithms, str) else ",".join(algorithms))
    except KeyError as exc:
        raise InputError(exc.args[0], field="algo") from None


def distinct_layers(frame: pd.DataFrame | LayerTable) -> tuple[np.ndarray, np.ndarray]:
    """The rows of a layer frame (or layer table) where each distinct layer (by the layer
    columns) first appears, in order, and per row its layer's position among them."""
    values = np.column_stack([np.asarray(frame[name], dtype=np.int64) for name in LAYER_COLUMNS])
    rows = len(values)
    keys = values.view(np.dtype((np.void, values.itemsize * values.shape[1]))).ravel()  # a layer's bytes
    _, first, codes = np.unique(keys, return_index=True, return_inverse=True)
    if len(first) == rows:
        return np.arange(rows), np.arange(rows)  # nothing repeats
    # np.unique numbers the layers by their bytes: renumber them by first appearance.
    order = np.argsort(first, kind="stable")
    position = np.empty_like(order)
    position[order] = np.arange(len(order))
    return first[order], position[codes.ravel()]


def ranked(frame: LayerTable, math: str, algorithms: list[str], times: np.ndarray, scores: np.ndarray,
           extrapolated: np.ndarray, energies: np.ndarray | None = None, bounds: np.ndarray | None = None,
           near_best: np.ndarray | None = None) -> PredictionTable:
    """The prediction table of :meth:`Model.predict_table` (but the PyTorch columns) from the
    layers' columns (a layer table) and per-layer arrays of times,
    pick scores (NaN: predicted not to run), energies (NaN: no energy model), the times'
    bounds (layers, algorithms, levels, 2) and each pick's chance of being near the fastest."""
    runs = np.isfinite(times)
    # Algorithms by score, those that run first: a stable sort keeps the algorithms' order
    # on ties, as a first-come rank does. Row-major nonzero then walks (layer, rank).
    order = np.argsort(np.where(runs, scores, np.inf), axis=1, kind="stable")
    layer_of, position = np.nonzero(np.take_along_axis(runs, order, axis=1))
    slots = order[layer_of, position]
    # A layer with no algorithm predicted to run keeps one row, with no algorithm.
    none = np.flatnonzero(~runs.any(axis=1))
    rows = np.concatenate([layer_of, none])
    has = np.concatenate([np.ones(len(layer_of), dtype=bool), np.zeros(len(none), dtype=bool)])
    slots = np.concatenate([slots, np.zeros(len(none), dtype=slots.dtype)])
    rank = np.concatenate([position + 1, np.zeros(len(none), dtype=position.dtype)])
    sort = np.argsort(rows, kind="stable")
    rows, has, slots, rank = rows[sort], has[sort], slots[sort], rank[sort]
    nothing = np.full(len(rows), np.nan)
    out = {"layer": rows, **{name: np.asarray(frame[name])[rows] for name in LAYER_COLUMNS},
           "math": np.full(len(rows), math, dtype=object)}
    # Each name taken per row from the list (the extra last entry: no algorithm, missing).
    out["algo"] = np.array([*algorithms, None], dtype=object)[np.where(has, slots, -1)]
    out["predicted_ms"] = np.where(has, times[rows, slots], np.nan)
    for column, (level, end) in zip(INTERVAL_COLUMNS, itertools.product(range(len(INTERVAL_LEVELS)), range(2))):
        out[column] = np.where(has, bounds[rows, slots, level, end], np.nan) if bounds is not None else nothing
    out["predicted_mj"] = np.where(has, energies[rows, slots], np.nan) if energies is not None else nothing
    out["rank"] = np.ma.masked_array(rank.astype(np.int64), mask=~has)
    out["extrapolated"] = np.asarray(extrapolated[rows], dtype=bool)
    out["pick_near_best"] = near_best[rows] if near_best is not None else nothing
    return {name: out[name] for name in ("layer", *(c for c in PREDICTION_COLUMNS if c not in PYTORCH_COLUMNS))}


def pytorch_times(predictor, kinds: np.ndarray, ms: np.ndarray | None, policy: str = GUARD_POLICY) -> np.ndarray:
    """Per layer (``kinds``: each one's :func:`~seer.predict.uncertainty.interval_kind`): PyTorch's
    own choice's (``policy``'s) predicted time ``ms`` and its bounds (:data:`PYTORCH_COLUMNS` but
    ``recommended``), then the layer's guard margin (a last column that no output shows, NaN
    without margins), NaN where ``ms`` is None (a model without a model of it)."""
    out = np.full((len(kinds), 2 + 2 * len(INTERVAL_LEVELS)), np.nan)
    if ms is None or not len(kinds):
        return out
    bounds = interval_bounds(ms[:, None], kinds, [policy], predictor.intervals)[:, 0]
    out[:, 0], out[:, 1:-1] = ms, bounds.reshape(len(kinds), -1)
    out[:, -1] = predictor.guard_margin(kinds)
    return out


def with_pytorch(predictions: PredictionTable, pytorch: np.ndarray, guarded: bool = True) -> PredictionTable:
    """``predictions`` (:func:`ranked`'s table) with each layer's :data:`PYTORCH_COLUMNS`: PyTorch's
    predicted time and bounds (``pytorch``, one row per layer, as :func:`pytorch_times` gives
    them: its last column, the guard margin, decides but is not shown), and the guarded
    recommendation (:func:`seer.predict.guard.recommended`; the pick itself unless ``guarded``)."""
    layer = predictions["layer"]
    first = np.unique(layer, return_index=True)[1]  # the rank-1 row of each layer
    for k, column in enumerate(PYTORCH_COLUMNS[:-1]):
        predictions[column] = pytorch[layer, k]
    algo = predictions["algo"][first]
    high = predictions[f"predicted_ms_high{GUARD_LEVEL}"][first]
    low = PYTORCH_COLUMNS.index(f"pytorch_low{GUARD_LEVEL}")
    choice = recommended(algo, predictions["predicted_ms"][first], high, pytorch[layer[first], 0],
                         pytorch[layer[first], low], pytorch[layer[first], -1]) if guarded else algo
    per_layer = np.empty(len(pytorch), dtype=object)
    per_layer[layer[first]] = choice
    predictions["recommended"] = per_layer[layer]
    return predictions


def prediction_frame(table: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """A prediction table (:data:`PredictionTable`) as :meth:`Model.predict`'s frame: names as
    pandas' strings, ``rank`` as its nullable integers."""
    import pandas as pd

    columns = {}
    for name, values in table.items():
        if name in TEXT_COLUMNS:
            values = pd.array(values, dtype="string")
        elif np.ma.isMaskedArray(values):
            values = pd.arrays.IntegerArray(values.data, np.ma.getmaskarray(values).copy())
        columns[name] = values
    return pd.DataFrame(columns)


def recommended_rows(predictions: pd.DataFrame, picks: pd.DataFrame) -> pd.DataFrame:
    """Per layer of ``picks`` (:func:`best_per_layer` of ``predictions``), the prediction row of
    its ``recommended`` algorithm (its ``predicted_ms``, bounds, ...): the fastest's, but where a
    sparse kernel comes first without a sure gain, the dense pick's behind it
    (:mod:`seer.predict.sparse`); all missing where PyTorch's choice, or nothing, is recommended."""
    return predictions.drop_duplicates(["layer", "algo"]).set_index(["layer", "algo"]).reindex(
        list(zip(picks.index, picks["recommended"])))


def best_per_layer(predictions: pd.DataFrame) -> pd.DataFrame:
    """Per layer of :meth:`Model.predict`'s frame (every layer has a row there): the predicted
    fastest algorithm and its time, the runner-up (missing where there is none), the
    extrapolation mark, both times' bounds (``best_low80``, ..., ``runner_up_high95``) and the
    pick's chance of being near the fastest (``pick_near_best``)."""
    import pandas as pd

    first = predictions.drop_duplicates("layer").set_index("layer")
    second = predictions[predictions["rank"] == 2].set_index("layer")
    out = pd.DataFrame(index=first.index)
    out["best_algo"] = first["algo"]
    out["best_ms"] = first["predicted_ms"]
    out["best_mj"] = first["predicted_mj"]
    out["runner_up"] = second["algo"]
    out["runner_up_ms"] = second["predicted_ms"]
    out["runner_up_mj"] = second["predicted_mj"]
    out["extrapolated"] = first["extrapolated"].astype(bool)
    for column in INTERVAL_COLUMNS:
        bound = column.removeprefix("predicted_ms_")
        out[f"best_{bound}"] = first[column]
        out[f"runner_up_{bound}"] = second[column]
    out["pick_near_best"] = first["pick_near_best"]
    for column in PYTORCH_COLUMNS:
        out[column] = first[column]
    return out

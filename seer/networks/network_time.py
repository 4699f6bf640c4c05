"""A network's convolution time, layer by layer, under seer's picks, PyTorch's own choice and each fixed algorithm.

The input is a layer frame with how many times each layer runs (``calls``) and, where
known, the module that runs it (``name``): what :func:`seer.torch.conv_calls` returns, or
a layer CSV with such columns. A network's time under a policy is the sum over its layers
of calls x the predicted time of the algorithm the policy runs there: seer's picks; the
guarded picks (what ``recommended`` says: the pick where surely faster than PyTorch's own
choice, else PyTorch's); PyTorch's own choice (where the model predicts it). A fixed algorithm
that is predicted not to run on some layers is totalled over the layers where it runs,
and the rest are counted, never filled in.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from seer.errors import InputError
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.model import Model, best_per_layer, recommended_rows
from seer.schema import PYTORCH_CHOICE

#: Policy names in :attr:`NetworkPrediction.totals`: seer's own picks, and the guarded ones
#: (PyTorch's own choice, :data:`seer.schema.PYTORCH_CHOICE`, is the third).
SEER_PICKS = "seer"
SEER_GUARDED = "seer-guarded"
#: Columns of :attr:`NetworkPrediction.totals`.
TOTAL_COLUMNS = ("policy", "predicted_ms", "layers_run", "layers_not_run", "slower_than_seer_pct")


@dataclass
class NetworkPrediction:
    """Per-layer predictions of a network and its totals per policy.

    Attributes
    ----------
    predictions : pandas.DataFrame
        :meth:`seer.predict.model.Model.predict`'s tidy frame (one row per (layer, algorithm
        predicted to run), rank 1 the pick) with ``name`` and ``calls`` in front.
    picks : pandas.DataFrame
        One row per layer: ``name``, ``calls``, the layer columns, the pick, its time and
        the runner-up (:func:`seer.predict.model.best_per_layer`), and ``total_ms`` = calls x the
        pick's time.
    totals : pandas.DataFrame
        One row per policy (:data:`TOTAL_COLUMNS`): seer's picks first, then the guarded
        picks and PyTorch's own choice (where the model predicts it; the guarded picks only
        when ranking by time), then each algorithm fixed on every layer, by predicted time.
    math : str
    """

    predictions: pd.DataFrame
    picks: pd.DataFrame
    totals: pd.DataFrame
    math: str


def predict_network(model: Model, layers: pd.DataFrame, math: str = "default",
                    algorithms: Sequence[str] | None = None, objective: str = "time") -> NetworkPrediction:
    """Predict every layer of ``layers`` (a layer frame with ``calls``, and ``name`` if known),
    ranking ``algorithms`` (None: all) by ``objective`` (see :meth:`seer.predict.model.Model.predict`)."""
    calls, names = _calls_and_names(layers)
    predictions = model.predict(layers, math, algorithms, objective)
    predictions.insert(1, "name", names[predictions["layer"].to_numpy()])
    predictions.insert(2, "calls", calls[predictions["layer"].to_numpy()])
    best = best_per_layer(predictions)
    picks = predictions.drop_duplicates("layer").set_index("layer")[["name", "calls", *LAYER_COLUMNS]].join(best)
    picks["total_ms"] = picks["calls"] * picks["best_ms"]
    totals = _totals(predictions, picks, len(layers), guarded=objective == "time",
                     recommended_ms=recommended_rows(predictions, best)["predicted_ms"].to_numpy(dtype=float))
    return NetworkPrediction(predictions, picks.reset_index(drop=True), totals, math)


def with_sparsity(layers: pd.DataFrame, spec: str) -> pd.DataFrame:
    """``layers`` (a network's layer frame, with ``name``) with a ``sparsity`` column from
    ``spec``: one share of zeros in [0, 1) for every layer, or a CSV file with ``name`` and
    ``sparsity`` columns (what ``seer.torch.input_sparsity(model, batch).layers`` measures on
    real data, with its ``crowding`` column where the file has one), whose modules' layers take
    their value and the others 0 (dense). The file is read as a layer CSV is
    (:func:`seer.layers.files.read_module_inputs`). InputError, naming the file, line and field,
    for a value out of range, a module the network does not have, or a module given twice."""
    try:
        value = float(spec)
    except ValueError:
        value = None
    if value is not None:
        if not 0 <= value < 1:
            raise InputError(f"--sparsity must be a share of zeros in [0, 1) or a CSV file, got {spec!r}",
                             field="sparsity")
        return layers.assign(sparsity=value)
    from seer.layers.files import read_module_inputs

    given = read_module_inputs(spec)
    known = set(layers["name"].astype(str))
    seen: set[str] = set()
    for name, line in zip(given["name"], given["line"]):
        if name not in known:
            raise InputError(f"the network has no convolution module named {name!r}", path=spec, line=int(line),
                             field="name")
        if name in seen:
            raise InputError(f"{name!r} is given twice", path=spec, line=int(line), field="name")
        seen.add(name)
    names = layers["name"].astype(str)
    sparsity = dict(zip(given["name"], given["sparsity"]))
    out = layers.assign(sparsity=[sparsity.get(n, 0.0) for n in names])
    if "crowding" in given:  # as input_sparsity measures it; empty: not measured
        crowding = dict(zip(given["name"], given["crowding"]))
        out = out.assign(crowding=[crowding.get(n, np.nan) for n in names])
    return out


def _calls_and_names(layers: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per layer, how many times it runs (1 where not said) and its module's name (its
    position, from 1, where not known)."""
    calls = layers["calls"].to_numpy(dtype=np.int64) if "calls" in layers else np.ones(len(layers), dtype=np.int64)
    names = layers["name"].astype(str).to_numpy() if "name" in layers else np.arange(1, len(layers) + 1).astype(str)
    return calls, names


def _totals(predictions: pd.DataFrame, picks: pd.DataFrame, n_layers: int, guarded: bool,
            recommended_ms: np.ndarray) -> pd.DataFrame:
    """Per policy, the network's summed time; the guarded policy takes ``recommended_ms`` (each
    layer's recommended algorithm's own time) where it does not leave the layer to PyTorch."""
    rows = []
    picked = picks["best_ms"].notna()
    seer_ms = float(picks.loc[picked, "total_ms"].sum())
    rows.append((SEER_PICKS, seer_ms, int(picked.sum()), n_layers - int(picked.sum()), 0.0))
    pytorch = picks["pytorch_ms"].to_numpy(dtype=float)
    if np.isfinite(pytorch).any():
        to_pytorch = (picks["recommended"] == PYTORCH_CHOICE).fillna(False).to_numpy(dtype=bool)
        policies = [(PYTORCH_CHOICE, pytorch)]
        if guarded:
            policies.insert(0, (SEER_GUARDED, np.where(to_pytorch, pytorch, recommended_ms)))
        for policy, ms in policies:
            runs = np.isfinite(ms)
            total = float((picks["calls"].to_numpy()[runs] * ms[runs]).sum())
            seer_there = float(picks.loc[runs & picked.to_numpy(), "total_ms"].sum())
            rows.append((policy, total, int(runs.sum()), n_layers - int(runs.sum()),
                         (total / seer_there - 1) * 100 if seer_there else np.nan))
    leading = len(rows)  # seer's picks and PyTorch's choice come first; the fixed algorithms follow, sorted
    ran = predictions.dropna(subset=["algo"])
    for algo, runs in ran.groupby("algo", sort=False):
        total = float((runs["calls"] * runs["predicted_ms"]).sum())
        # Against seer's picks on the same layers, so that a partial total compares fairly.
        seer_there = float(picks.loc[runs["layer"].to_numpy(), "total_ms"].sum())
        rows.append((str(algo), total, len(runs), n_layers - len(runs), (total / seer_there - 1) * 100))
    fixed = pd.DataFrame(rows[leading:], columns=list(TOTAL_COLUMNS))
    fixed = fixed.sort_values(["layers_not_run", "predicted_ms"], kind="stable")
    return pd.concat([pd.DataFrame(rows[:leading], columns=list(TOTAL_COLUMNS)), fixed], ignore_index=True)


#: Columns of :attr:`NetworkStep.totals`.
STEP_TOTAL_COLUMNS = ("pass", "seer_ms", "pytorch_ms", "change_pct")


@dataclass
class NetworkStep:
    """A network's training step, predicted: per layer the step of
    :func:`seer.predict.step.training_step` with ``name`` and ``calls`` in front (``layers``),
    and per pass and for the whole step the total of calls x the recommended time and of
    calls x PyTorch's (``totals``, :data:`STEP_TOTAL_COLUMNS`; the step's row is ``step``)."""

    layers: pd.DataFrame
    totals: pd.DataFrame
    math: str


def predict_network_step(models: dict[str, Model], layers: pd.DataFrame, math: str = "default",
                         algorithms: dict | None = None) -> NetworkStep:
    """The training step of every layer of ``layers`` (a layer frame with ``calls``, and ``name``
    if known) under the models of every pass (:func:`seer.predict.persist.load_passes`)."""
    from seer.algorithms import PASSES
    from seer.predict.step import training_step

    calls, names = _calls_and_names(layers)
    step = training_step(models, layers.reset_index(drop=True), math, algorithms).reset_index(drop=True)
    own = [*LAYER_COLUMNS, *(["sparsity"] if "sparsity" in layers else [])]  # the share of zeros, where given
    out = pd.concat([pd.DataFrame({"name": names, "calls": calls}), layers[own].reset_index(drop=True), step],
                    axis=1)
    rows = []
    for pass_ in (*PASSES, "step"):
        seer_ms, pytorch_ms = (("step_ms", "pytorch_step_ms") if pass_ == "step"
                               else (f"{pass_}_ms", f"{pass_}_pytorch_ms"))
        seer_total = float((calls * out[seer_ms].to_numpy(dtype=float)).sum())
        pytorch_total = float((calls * out[pytorch_ms].to_numpy(dtype=float)).sum())
        rows.append((pass_, seer_total, pytorch_total,
                     (seer_total / pytorch_total - 1) * 100 if pytorch_total else np.nan))
    return NetworkStep(out, pd.DataFrame(rows, columns=list(STEP_TOTAL_COLUMNS)), math)

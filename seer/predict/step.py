"""The training step of each layer: the forward, backward-data and backward-filter passes,
each with its recommended algorithm and predicted time, beside PyTorch's own choice.

A training step runs every convolution three times: the forward (``fwd``), the input's
gradient (``bwd_data``, dgrad) and the filter's gradient (``bwd_filter``, wgrad), each with
its own algorithms and its own model (:func:`seer.load_model` with ``pass_=``). Per pass
the step takes what :meth:`seer.Model.predict` recommends (the pick where it is surely
faster than PyTorch's choice, else PyTorch's choice) and that choice's predicted time.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from seer.algorithms import PASSES
from seer.errors import InputError
from seer.predict.model import Layers, Model, best_per_layer, recommended_rows
from seer.schema import INTERVAL_LEVELS, PYTORCH_CHOICE

#: Per pass, the step's columns: the recommended algorithm (or PyTorch's choice), its
#: predicted time, and PyTorch's own choice's predicted time.
STEP_PASS_COLUMNS: tuple[str, ...] = tuple(f"{p}_{c}" for p in PASSES for c in ("algo", "ms", "pytorch_ms"))
#: The step's bounds: per level, the sums of the passes' bounds (as if the passes' errors
#: went the same way, which makes them wide rather than narrow).
STEP_BOUND_COLUMNS: tuple[str, ...] = tuple(f"step_ms_{b}{level}" for level in INTERVAL_LEVELS
                                            for b in ("low", "high"))
#: One row per layer of :func:`training_step`, after ``layer`` and the layer's columns.
STEP_COLUMNS: tuple[str, ...] = ("math", *STEP_PASS_COLUMNS, "step_ms", *STEP_BOUND_COLUMNS, "pytorch_step_ms",
                                 "extrapolated")


def training_step(models: Mapping[str, Model], layers: Layers, math: str = "default",
                  algorithms: Mapping[str, Sequence[str] | None] | None = None) -> pd.DataFrame:
    """Per layer, :data:`STEP_COLUMNS`: each pass's recommended algorithm and time, their sum
    (``step_ms``) with summed bounds, PyTorch's own step (``pytorch_step_ms``: its choice in
    every pass), and whether any pass extrapolates. ``models`` maps each of
    :data:`seer.algorithms.PASSES` to that pass's model of one GPU; ``algorithms`` limits a
    pass's ranking (as :meth:`seer.Model.predict`'s argument). A pass with no algorithm
    predicted to run, or no PyTorch time, leaves its sums missing."""
    missing = [p for p in PASSES if p not in models]
    if missing:
        raise InputError(f"a training step needs a model of every pass; missing: {', '.join(missing)}", field="pass")
    gpus = {models[p].gpu for p in PASSES}
    if len(gpus) > 1:
        raise InputError(f"the passes' models are of different GPUs ({', '.join(sorted(gpus))})", field="gpu")
    out = None
    step = pytorch_step = 0.0
    bounds = {column: 0.0 for column in STEP_BOUND_COLUMNS}
    extrapolated = False
    for pass_ in PASSES:
        if models[pass_].pass_ != pass_:
            raise InputError(f"the model given for {pass_} predicts {models[pass_].pass_}", field="pass")
        predictions = models[pass_].predict(layers, math, (algorithms or {}).get(pass_))
        picks = best_per_layer(predictions)
        if out is None:
            out = pd.DataFrame(index=picks.index)
        use_pytorch = picks["recommended"].to_numpy(dtype=object) == PYTORCH_CHOICE
        algo = picks["recommended"]
        chosen = recommended_rows(predictions, picks)  # its own time: not always the fastest's
        ms = np.where(use_pytorch, picks["pytorch_ms"], chosen["predicted_ms"])
        out[f"{pass_}_algo"], out[f"{pass_}_ms"], out[f"{pass_}_pytorch_ms"] = algo, ms, picks["pytorch_ms"]
        step = step + ms
        pytorch_step = pytorch_step + picks["pytorch_ms"].to_numpy(dtype=float)
        for column in STEP_BOUND_COLUMNS:
            bound = column.removeprefix("step_ms_")
            bounds[column] = bounds[column] + np.where(use_pytorch, picks[f"pytorch_{bound}"],
                                                       chosen[f"predicted_ms_{bound}"])
        extrapolated = extrapolated | picks["extrapolated"].to_numpy(dtype=bool)
    out.insert(0, "math", math)
    out["step_ms"] = step
    for column in STEP_BOUND_COLUMNS:
        out[column] = bounds[column]
    out["pytorch_step_ms"] = pytorch_step
    out["extrapolated"] = extrapolated
    return out[list(STEP_COLUMNS)]

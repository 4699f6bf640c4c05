"""Predictions for layer shapes from a trained model set, as one tidy frame.

One row per (layer, algorithm) predicted to run, with the predicted time, the rank among
the layer's algorithms (1 = the pick, the predicted fastest; the order is the model's pick
score, which weighs the predicted time with a classifier of the fastest algorithm, see
:meth:`seer.estimators.AlgorithmSelector.pick_scores`) and whether the layer lies outside
the shapes the model was trained on. Algorithms predicted not to run get no row, so they are
never recommended.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import pandas as pd

from seer.modeling import ModelSet
from seer.shapes import SEER_FIELDS, ConvShape

#: The columns of ``seer predict --out``, in order.
PREDICTION_COLUMNS = [*SEER_FIELDS, "math", "algo", "predicted_ms", "rank", "extrapolated"]


def shapes_frame(shapes: Sequence[ConvShape]) -> pd.DataFrame:
    """SEER's eight columns, one row per shape, in the given order."""
    return pd.DataFrame([[getattr(s, f) for f in SEER_FIELDS] for s in shapes], columns=list(SEER_FIELDS))


def predict_layers(models: ModelSet, shapes: Sequence[ConvShape] | pd.DataFrame, math: str) -> pd.DataFrame:
    """Long frame of predictions (``layer`` = position in ``shapes``, then PREDICTION_COLUMNS)."""
    if math not in models.selectors:
        raise ValueError(f"the model has no {math!r} math mode (it has {', '.join(models.selectors)})")
    selector = models.selectors[math]
    frame = shapes if isinstance(shapes, pd.DataFrame) else shapes_frame(shapes)
    frame = frame.reset_index(drop=True)
    times, scores = selector.predict_with_scores(frame)
    extrapolated = selector.extrapolated(frame)
    layer_idx, algo_idx = np.nonzero(np.isfinite(times))
    out = frame.iloc[layer_idx].reset_index(drop=True)
    out.insert(0, "layer", layer_idx)
    out["math"] = math
    out["algo"] = np.asarray(selector.algorithms_, dtype=object)[algo_idx]
    out["predicted_ms"] = times[layer_idx, algo_idx]
    out["_score"] = scores[layer_idx, algo_idx]
    out["rank"] = out.groupby("layer")["_score"].rank(method="first").astype(int)
    out["extrapolated"] = extrapolated[layer_idx]
    return out.sort_values(["layer", "rank"]).reset_index(drop=True)[["layer", *PREDICTION_COLUMNS]]


def best_per_layer(predictions: pd.DataFrame, n_layers: int) -> pd.DataFrame:
    """Per layer: predicted fastest algorithm and time, and the runner-up (NaN if none)."""
    first = predictions[predictions["rank"] == 1].set_index("layer")
    second = predictions[predictions["rank"] == 2].set_index("layer")
    out = pd.DataFrame(index=pd.RangeIndex(n_layers, name="layer"))
    out["best_algo"] = first["algo"]
    out["best_ms"] = first["predicted_ms"]
    out["runner_up"] = second["algo"]
    out["runner_up_ms"] = second["predicted_ms"]
    out["extrapolated"] = first["extrapolated"].reindex(out.index).fillna(False).astype(bool)
    return out

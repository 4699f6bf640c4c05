"""seer: predict the run time of every GPU convolution algorithm for a layer, and pick the fastest.

Data flows one way through its modules: shapes (:mod:`seer.layers.shapes`, :mod:`seer.layers.grids`,
:mod:`seer.layers.files`) -> measurements (:mod:`seer.collect`, on a GPU) -> the tidy tables
(:mod:`seer.dataset.build`) -> features (:mod:`seer.predict.features`) -> models (:mod:`seer.training.train`,
:mod:`seer.training.estimators`, :mod:`seer.predict.predictors`) -> predictions (:mod:`seer.predict.model`).

The API for predicting::

    import seer
    model = seer.load_model(gpu="h100")          # the shipped models, or see seer.predict.persist
    layers = seer.read_layers("layers.txt")      # SEER's format; "-" reads standard input
    predictions = model.predict(layers, math="fma")   # tidy: one row per (layer, algorithm)
    picks = model.pick(layers, math="fma")            # one row per layer
    step = seer.training_step(seer.load_passes("h200"), layers, math="fma")  # forward + dgrad + wgrad per layer

Errors a user can fix are :class:`SeerError` subclasses (:class:`InputError` for bad
input) whose message is one sentence naming the file, line and field.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.7.0"
__all__ = ["ConvShape", "InputError", "Model", "SeerError", "__version__", "load_model", "load_passes", "read_layers",
           "training_step"]

if TYPE_CHECKING:  # pragma: no cover
    from seer.errors import InputError, SeerError
    from seer.layers.files import read_layers
    from seer.layers.shapes import ConvShape
    from seer.predict.model import Model
    from seer.predict.persist import load_model, load_passes
    from seer.predict.step import training_step

# Imported on first use: `import seer` stays cheap for the collector and the CLI's other commands.
_LAZY = {"load_model": "seer.predict.persist", "load_passes": "seer.predict.persist",
         "training_step": "seer.predict.step", "read_layers": "seer.layers.files", "Model": "seer.predict.model",
         "ConvShape": "seer.layers.shapes", "InputError": "seer.errors", "SeerError": "seer.errors"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'seer' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

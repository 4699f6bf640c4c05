"""seer for PyTorch models (``pip install 'seer[torch]'``).

:func:`conv_calls` lists every convolution a model's forward pass runs, as seer's layer
frame, on the CPU and without weights; :func:`build_model` builds a torchvision model by
name, or any model from ``module:function``, on PyTorch's meta device. Predict their
times with :func:`seer.networks.network_time.predict_network`, or ``seer network`` on the command line.
:func:`input_sparsity` runs the model on a calibration batch and gives each convolution's
share of zero input values.

On a GPU, :func:`apply` runs seer's predicted-fastest cuDNN algorithm on every convolution
of a model (and seer's sparse kernel where a calibration batch shows enough zeros) and
:func:`force` one algorithm everywhere (:mod:`seer.torch.convolution`); :func:`compile` is
``torch.compile`` for such a model;
``seer profile-network`` measures the result.
"""

# ConvCalls and parse_input_shape need no torch (seer.layers.calls); exported here as before.
from seer.layers.calls import ConvCalls, parse_input_shape
from seer.torch.layers import build_model, conv_calls, input_sparsity

__all__ = ["ConvCalls", "apply", "build_model", "compile", "conv_calls", "force", "input_sparsity",
           "parse_input_shape", "restore"]


def __getattr__(name: str):
    # The GPU side is imported on first use: listing layers needs none of it.
    if name in ("apply", "compile", "force", "restore"):
        from seer.torch import convolution

        return getattr(convolution, name)
    raise AttributeError(f"module 'seer.torch' has no attribute {name!r}")

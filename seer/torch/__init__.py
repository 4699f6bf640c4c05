"""seer for PyTorch models (``pip install 'seer[torch]'``).

:func:`conv_calls` lists every convolution a model's forward pass runs, as seer's layer
frame, on the CPU and without weights; :func:`build_model` builds a torchvision model by
name, or any model from ``module:function``, on PyTorch's meta device. Predict their
times with :func:`seer.network_time.predict_network`, or ``seer network`` on the command line.
"""

from seer.torch.layers import ConvCalls, build_model, conv_calls, parse_input_shape

__all__ = ["ConvCalls", "build_model", "conv_calls", "parse_input_shape"]

"""PyTorch's own choice, run on the collector's tensors: the policy seer's picks must beat.

PyTorch does not run a legacy cuDNN algorithm: ``torch.nn.functional.conv*d`` asks cuDNN's
graph API for an engine (its heuristics, or trial runs under ``cudnn.benchmark``) and may
skip cuDNN altogether (its own depthwise kernels). So the policy is timed as a whole, on
the same tensors, stream and protocol as the algorithms, with PyTorch's flags set for the
run's math mode (strict FP32 is ``allow_tf32=False``) and its policy. The output comes from
PyTorch's caching allocator, as in a model; the check copies it into the poisoned output.
The backward policies call ``aten.convolution_backward`` for one gradient, as autograd does
when only that gradient is needed.
"""

from __future__ import annotations

from contextlib import contextmanager

import numpy as np

from seer.algorithms import get_algorithm
from seer.schema import get_math_mode


@contextmanager
def pytorch_flags(benchmark: bool, math: str):
    """PyTorch's cuDNN flags for one policy and math mode, restored afterwards."""
    import torch

    backends = torch.backends.cudnn
    saved = (backends.benchmark, backends.allow_tf32)
    backends.benchmark, backends.allow_tf32 = benchmark, get_math_mode(math).tensor_cores
    try:
        yield
    finally:
        backends.benchmark, backends.allow_tf32 = saved


class PytorchRun:
    """PyTorch's convolution of ``tensors`` (a :class:`seer.gpu.reference.ShapeTensors`) under
    policy ``algo`` (an algorithm of source ``pytorch``, of any pass) and math mode ``math``.

    ``forward()`` is one call, enqueued on CuPy's current stream; ``checked_forward()`` also
    copies the output into ``target.out`` (default: ``tensors.y``; a backward pass's
    :class:`seer.gpu.reference.Gradient`) for the float64 check. Made for the collector's
    worker, which runs one item at a time: PyTorch's flags are set for the policy and math
    mode when the run is made, and ``release()`` restores them and returns PyTorch's cached
    blocks (benchmark mode's trial workspaces among them).
    """

    def __init__(self, tensors, algo: str, math: str, target=None) -> None:
        import cupy as cp
        import torch
        import torch.nn.functional as F

        policy = get_algorithm(algo)
        if policy.source != "pytorch":
            raise ValueError(f"{algo} is not one of PyTorch's policies")
        self._torch = torch
        shape = tensors.shape
        inverse = tuple(int(i) for i in np.argsort(shape.layout_order(tensors.layout)))
        self._x = torch.from_dlpack(tensors.x).permute(inverse)
        self._w = torch.from_dlpack(tensors.w).permute(inverse)
        if policy.pass_ == "fwd":
            conv = {2: F.conv2d, 3: F.conv3d}[shape.dims]
            args = (None, shape.spatial_stride, shape.spatial_padding, shape.spatial_dilation, shape.groups)
            self._call = lambda: conv(self._x, self._w, *args)
            self._y = torch.from_dlpack(tensors.y).permute(inverse)
        else:  # NCHW only, as the gradients' checks
            dy = torch.from_dlpack(target.dy)
            mask = [policy.pass_ == "bwd_data", policy.pass_ == "bwd_filter", False]
            index = 0 if mask[0] else 1
            args = (None, list(shape.spatial_stride), list(shape.spatial_padding), list(shape.spatial_dilation),
                    False, [0] * shape.dims, shape.groups, mask)
            backward = torch.ops.aten.convolution_backward
            self._call = lambda: backward(dy, self._x, self._w, *args)[index]
            self._y = torch.from_dlpack(target.out)
        pointer = cp.cuda.get_current_stream().ptr
        # CuPy's default stream is the legacy default stream, which is also PyTorch's.
        stream = torch.cuda.ExternalStream(pointer) if pointer else torch.cuda.default_stream()
        self._flags = pytorch_flags(policy.name.startswith("PYTORCH_BENCHMARK"), math)
        self._stream = torch.cuda.stream(stream)
        self._flags.__enter__()
        self._stream.__enter__()
        self._out = None

    def forward(self) -> None:
        self._out = self._call()

    def checked_forward(self) -> None:
        self.forward()
        self._y.copy_(self._out)

    def release(self) -> None:
        self._out = None
        self._stream.__exit__(None, None, None)
        self._flags.__exit__(None, None, None)
        self._torch.cuda.empty_cache()

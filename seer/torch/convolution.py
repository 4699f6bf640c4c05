"""PyTorch convolutions that run a chosen algorithm, cuDNN's or seer's own (GPU hosts).

PyTorch lets cuDNN choose (its heuristics, or ``cudnn.benchmark``'s trial runs); it has no
way to ask for one algorithm. :class:`SeerConv1d`/``2d``/``3d`` are ``nn.Conv*`` modules
that call ``cudnnConvolutionForward`` themselves, through :mod:`seer.gpu.cudnn`, on the
module's own tensors, PyTorch's current stream and a workspace from PyTorch's caching
allocator; or, for seer's own kernels, launch them through CuPy on views of the same
tensors, on the same stream. Which algorithm runs is asked of the module's :class:`Choice`
for every layer it sees (input sizes may change between calls): :class:`Fixed` for one
algorithm everywhere, :class:`Predicted` for seer's predicted fastest.

Tensors may be contiguous NC[D]HW or channels-last (``torch.channels_last``/``_3d``, input
and weight alike): cuDNN gets descriptors of that layout, seer's implicit GEMMs run their
channels-last kernel, and the output keeps the input's layout.
Where the chosen algorithm cannot run (cuDNN does not support it for the layer, seer's
kernel plan refuses it, CuPy is missing, a tensor is not fp32, not on a GPU, or in neither
layout), PyTorch's own convolution runs instead and the module warns once per reason;
:attr:`SeerConv2d.fallbacks` keeps the reasons.
Gradients, where asked for, come from PyTorch's own ``torch.nn.grad`` functions.

:func:`apply` and :func:`force` swap every ``nn.Conv1d/2d/3d`` of a model (exact types: a
subclass may override ``forward``) for one of these, sharing the parameters, so
``state_dict`` keys stay the same; :func:`restore` swaps them back.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from seer.algorithms import Algorithm, get_algorithm, select_algorithms
from seer.errors import InputError
from seer.schema import get_math_mode
from seer.shapes import ConvShape, ShapeError
from seer.torch.layers import layer_of_call

#: What runs a layer where no algorithm is chosen, or the chosen one cannot run.
PYTORCH = "pytorch"

_FUNCTIONAL = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CHANNELS_LAST = {2: torch.channels_last, 3: torch.channels_last_3d}
_GRADIENTS = {1: (torch.nn.grad.conv1d_input, torch.nn.grad.conv1d_weight),
              2: (torch.nn.grad.conv2d_input, torch.nn.grad.conv2d_weight),
              3: (torch.nn.grad.conv3d_input, torch.nn.grad.conv3d_weight)}


# -- which algorithm ------------------------------------------------------------------------
class Choice:
    """Names the algorithm to run on a layer, or None for PyTorch's own convolution."""

    math: str = "default"

    def algorithm(self, layer: ConvShape) -> str | None:
        raise NotImplementedError

    def describe(self) -> str:
        return type(self).__name__


@dataclass
class Fixed(Choice):
    """One algorithm, cuDNN's or seer's own, on every layer (``seer.torch.force``)."""

    name: str
    math: str = "default"

    def __post_init__(self) -> None:
        algo = _algorithm(self.name)
        self.name = algo.name
        self.math = get_math_mode(self.math).name

    def algorithm(self, layer: ConvShape) -> str | None:
        return self.name

    def describe(self) -> str:
        return self.name


@dataclass
class Predicted(Choice):
    """seer's predicted-fastest algorithm per layer among ``algorithms`` (names or groups, as
    ``seer predict --algo``; cuDNN's by default), predicted once per distinct layer."""

    model: object  # seer.model.Model
    math: str = "default"
    picks: dict = field(default_factory=dict)
    algorithms: str = "cudnn"

    def __post_init__(self) -> None:
        self.math = get_math_mode(self.math).name
        try:
            self._ranked = select_algorithms(self.algorithms)
        except KeyError as exc:
            raise InputError(exc.args[0], field="algorithms") from None
        self._lock = threading.Lock()

    def prepare(self, layers: Iterable[ConvShape]) -> None:
        """Predict every layer not yet seen, in one call to the model."""
        from seer.model import best_per_layer

        with self._lock:
            new = sorted({layer for layer in layers if layer not in self.picks})
            if not new:
                return
            best = best_per_layer(self.model.predict(new, self.math, algorithms=self._ranked))["best_algo"]
            for layer, algo in zip(new, best.to_numpy()):
                # None where no algorithm is predicted to run.
                self.picks[layer] = algo if isinstance(algo, str) and algo in self._ranked else None

    def algorithm(self, layer: ConvShape) -> str | None:
        if layer not in self.picks:
            self.prepare([layer])
        return self.picks[layer]

    def describe(self) -> str:
        return "seer"


def _algorithm(name: str, source: str | None = None) -> Algorithm:
    try:
        algo = get_algorithm(name)
    except KeyError as exc:
        raise InputError(exc.args[0], field="algo") from None
    if source is not None and algo.source != source:
        raise InputError(f"{algo.name} is not a cuDNN algorithm", field="algo")
    return algo


# -- running one convolution through cuDNN --------------------------------------------------
class _Engine:
    """One cuDNN handle per device and thread, with the descriptors of every layer seen."""

    def __init__(self, device: torch.device) -> None:
        from seer.gpu import cudnn

        self._cudnn = cudnn
        with torch.cuda.device(device):
            self.handle = cudnn.Handle(torch.cuda.current_stream(device).cuda_stream)
        self.problems: dict[tuple[ConvShape, str, str], object] = {}
        self.workspace_bytes: dict[tuple[ConvShape, str, str, int], int] = {}

    def _problem(self, layer: ConvShape, math: str, layout: str):
        key = (layer, math, layout)
        if key not in self.problems:
            self.problems[key] = self._cudnn.ConvolutionProblem(self.handle, layer, math, layout)
        return self.problems[key]

    def forward(self, x: torch.Tensor, weight: torch.Tensor, layer: ConvShape, algo: int, math: str,
                layout: str) -> torch.Tensor:
        """cuDNN's forward convolution; raises CudnnError where the algorithm cannot run."""
        problem = self._problem(layer, math, layout)
        key = (layer, math, layout, algo)
        if key not in self.workspace_bytes:
            self.workspace_bytes[key] = problem.workspace_size(algo)
        size = self.workspace_bytes[key]
        self.handle.set_stream(torch.cuda.current_stream(x.device).cuda_stream)
        # From PyTorch's caching allocator: freed when this call returns, reused in stream order.
        workspace = torch.empty(size, dtype=torch.uint8, device=x.device) if size else None
        y = _empty(problem.y_dims, x, layout)
        problem.forward(algo, x.data_ptr(), weight.data_ptr(), y.data_ptr(),
                        workspace.data_ptr() if size else 0, size)
        return y


_engines = threading.local()


def _engine(device: torch.device) -> _Engine:
    engines = _engines.__dict__.setdefault("by_device", {})
    index = device.index if device.index is not None else torch.cuda.current_device()
    if index not in engines:
        engines[index] = _Engine(torch.device("cuda", index))
    return engines[index]


@dataclass(frozen=True)
class _Call:
    """The arguments of one convolution call besides its tensors."""

    dims: int
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int


def _layout(x: torch.Tensor, weight: torch.Tensor, dims: int) -> str | None:
    """The layout (:data:`seer.shapes.LAYOUTS`) both tensors are packed in, else None."""
    if x.is_contiguous() and weight.is_contiguous():
        return "nchw"
    channels_last = _CHANNELS_LAST.get(dims)
    if channels_last is not None and x.is_contiguous(memory_format=channels_last) \
            and weight.is_contiguous(memory_format=channels_last):
        return "nhwc"
    return None


def _empty(dims: Sequence[int], like: torch.Tensor, layout: str) -> torch.Tensor:
    """An output of NC[D]HW ``dims`` packed in ``layout``."""
    return torch.empty(dims, dtype=like.dtype, device=like.device,
                       memory_format=_CHANNELS_LAST[len(dims) - 2] if layout == "nhwc" else torch.contiguous_format)


def _as_cudnn(tensor: torch.Tensor, dims: int) -> torch.Tensor:
    # A 1D convolution is a 2D one of height 1, as PyTorch hands it to cuDNN.
    return tensor.unsqueeze(-2) if dims == 1 else tensor


class _Convolution(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, call: _Call, layer: ConvShape, algo: Algorithm, math: str, layout: str):
        y = _forward(x, weight, bias, call, layer, algo, math, layout)
        ctx.save_for_backward(x, weight)
        ctx.call, ctx.has_bias = call, bias is not None
        return y

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        call = ctx.call
        grad_input_fn, grad_weight_fn = _GRADIENTS[call.dims]
        args = (call.stride, call.padding, call.dilation, call.groups)
        grad_x = grad_input_fn(x.shape, weight, grad_y, *args) if ctx.needs_input_grad[0] else None
        grad_w = grad_weight_fn(x, weight.shape, grad_y, *args) if ctx.needs_input_grad[1] else None
        grad_b = grad_y.sum(dim=[0, *range(2, grad_y.dim())]) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return grad_x, grad_w, grad_b, None, None, None, None, None


def _own_forward(x: torch.Tensor, weight: torch.Tensor, layer: ConvShape, algo: str, layout: str) -> torch.Tensor:
    """One of seer's own kernels on PyTorch's tensors (CuPy views, no copies) and current stream."""
    import cupy as cp

    from seer.gpu import kernels

    y = _empty(layer.output_dims, x, layout)
    order = layer.layout_order(layout)
    with cp.cuda.Device(x.device.index), cp.cuda.ExternalStream(torch.cuda.current_stream(x.device).cuda_stream):
        # Views of the same memory, in its order (C order for CuPy); detached, since CuPy
        # refuses tensors that require grad.
        views = (cp.asarray(t.detach().permute(order)) for t in (x, weight, y))
        run, _ = kernels.forward(algo, layer, *views, layout=layout)
        run()
    return y


def _forward(x, weight, bias, call: _Call, layer: ConvShape, algo: Algorithm, math: str, layout: str) -> torch.Tensor:
    x, weight = _as_cudnn(x, call.dims), _as_cudnn(weight, call.dims)
    if algo.source == "cupy":
        y = _own_forward(x, weight, layer, algo.name, layout)
    else:
        y = _engine(x.device).forward(x, weight, layer, algo.enum, math, layout)
    if call.dims == 1:
        y = y.squeeze(-2)
    if bias is not None:
        y.add_(bias.view(1, -1, *([1] * call.dims)))
    return y


def _run(x, weight, bias, call: _Call, layer: ConvShape, algo: Algorithm, math: str, layout: str) -> torch.Tensor:
    if torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        return _Convolution.apply(x, weight, bias, call, layer, algo, math, layout)
    return _forward(x, weight, bias, call, layer, algo, math, layout)


def cudnn_convolution(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, *,
                      stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], groups: int,
                      algorithm: str, math: str = "default") -> torch.Tensor:
    """``F.conv{1,2,3}d`` run by the named cuDNN algorithm (no fallback: raises CudnnError
    where cuDNN cannot run it). Tensors must be fp32 on a GPU, both contiguous or both
    channels-last."""
    dims = weight.dim() - 2
    layout = _layout(x, weight, dims)
    if layout is None:
        raise InputError("input and weight are neither both contiguous NC[D]HW nor both channels-last",
                         field="input")
    call = _Call(dims, tuple(stride), tuple(padding), tuple(dilation), int(groups))
    layer = ConvShape(**layer_of_call({"input": x, "weight": weight, "stride": call.stride,
                                       "padding": call.padding, "dilation": call.dilation,
                                       "groups": call.groups}, dims))
    return _run(x, weight, bias, call, layer, _algorithm(algorithm, "cudnn"), get_math_mode(math).name, layout)


# -- the modules --------------------------------------------------------------------------
class _SeerConv:
    """What SeerConv1d/2d/3d add to their ``nn.Conv*`` base: the choice and the fallback.

    ``fallbacks`` counts the calls that PyTorch ran, by reason; ``last_algorithm`` is the
    algorithm of the last call (``"pytorch"`` where PyTorch's own convolution ran).
    """

    @classmethod
    def from_conv(cls, conv: nn.Module, choice: Choice, name: str = "", nvtx: bool = False):
        """A module of this class with ``conv``'s configuration and its very parameters;
        with ``nvtx``, each call is an NVTX range named ``seer:<name>:<algorithm>``."""
        new = _configured_like(cls, conv)
        new.seer_choice, new.seer_name, new.seer_nvtx = choice, name, nvtx
        new.fallbacks = {}
        new.last_algorithm = None
        new._plans = {}  # input shape -> _Plan; a choice is fixed per layer
        return new

    def to_conv(self) -> nn.Module:
        """The plain ``nn.Conv*`` module with this one's configuration and parameters."""
        return _configured_like(_BASES[type(self)], self)

    def _numeric_padding(self) -> tuple[int, ...] | None:
        """Padding per axis; None for 'same' padding that is uneven on some axis."""
        if not isinstance(self.padding, str):
            return tuple(self.padding)
        if self.padding == "valid":
            return (0,) * len(self.kernel_size)
        totals = [d * (k - 1) for d, k in zip(self.dilation, self.kernel_size)]
        return None if any(t % 2 for t in totals) else tuple(t // 2 for t in totals)

    def _unrunnable(self, x: torch.Tensor) -> str | None:
        if not x.is_cuda:
            return "the input is not on a GPU"
        if x.dtype != torch.float32 or self.weight.dtype != torch.float32:
            return f"seer runs fp32 tensors only, not {x.dtype}"
        if _layout(x, self.weight, len(self.kernel_size)) is None:
            return "input and weight are neither both contiguous NC[D]HW nor both channels-last"
        if self._numeric_padding() is None:
            return "'same' padding that pads one side more is left to PyTorch"
        return None

    def _fall_back(self, reason: str) -> None:
        if reason not in self.fallbacks:
            warnings.warn(f"seer: {self.seer_name or type(self).__name__}: {reason}; "
                          "PyTorch's own convolution runs instead", stacklevel=3)
        self.fallbacks[reason] = self.fallbacks.get(reason, 0) + 1

    def _plan(self, x: torch.Tensor, layout: str) -> "_Plan":
        """What runs an input of x's shape and layout (already padded by padding_mode)."""
        key = (tuple(x.shape), layout)
        if key not in self._plans:
            dims = len(self.kernel_size)
            padding = (0,) * dims if self.padding_mode != "zeros" else self._numeric_padding()
            try:
                layer = ConvShape(**layer_of_call({"input": x, "weight": self.weight, "stride": self.stride,
                                                   "padding": padding, "dilation": self.dilation,
                                                   "groups": self.groups}, dims))
            except ShapeError as exc:
                self._plans[key] = _Plan(padding, problem=f"not a layer seer describes ({exc})")
            else:
                name = self.seer_choice.algorithm(layer)
                algo = None if name is None else get_algorithm(name)
                refused = _refusal(algo, layer, layout)
                self._plans[key] = (_Plan(padding, layer, algo) if refused is None else
                                    _Plan(padding, problem=f"{algo.name} cannot run this layer ({refused})"))
        return self._plans[key]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        reason = self._unrunnable(x)
        if reason is not None:
            self._fall_back(reason)
            return self._pytorch(x)
        if self.padding_mode != "zeros":  # PyTorch pads the input itself, then convolves unpadded
            padding = self._numeric_padding()
            x = F.pad(x, [p for p in reversed(padding) for _ in range(2)], mode=self.padding_mode)
        layout = _layout(x, self.weight, len(self.kernel_size))
        if layout is None:  # padding_mode's padding changed the input's layout
            x = x.contiguous(memory_format=_CHANNELS_LAST[len(self.kernel_size)])
            layout = "nhwc"
        plan = self._plan(x, layout)
        if plan.problem is not None:
            self._fall_back(plan.problem)
            return self._pytorch(x, plan.padding)
        algo = plan.algorithm
        if algo is None:  # the choice leaves this layer to PyTorch
            return self._pytorch(x, plan.padding)
        if layout == "nhwc" and algo.source == "cupy" and any(t.data_ptr() % 16 for t in (x, self.weight)):
            self._fall_back(f"{algo.name} needs channels-last tensors on 16-byte boundaries")
            return self._pytorch(x, plan.padding)
        call = _Call(len(self.kernel_size), tuple(self.stride), plan.padding, tuple(self.dilation), self.groups)
        if self.seer_nvtx:
            torch.cuda.nvtx.range_push(f"seer:{self.seer_name}:{algo.name}")
        try:
            y = _run(x, self.weight, self.bias, call, plan.layer, algo, self.seer_choice.math, layout)
        except ImportError as exc:  # CuPy, which seer's own kernels need, is not installed
            self._fall_back(f"{algo.name} needs CuPy ({exc})")
            return self._pytorch(x, plan.padding)
        except Exception as exc:
            from seer.gpu.cudnn import CudnnError

            if not isinstance(exc, CudnnError):
                raise
            self._fall_back(f"{algo.name} cannot run this layer ({exc})")
            return self._pytorch(x, plan.padding)
        finally:
            if self.seer_nvtx:
                torch.cuda.nvtx.range_pop()
        self.last_algorithm = algo.name
        return y

    def _pytorch(self, x: torch.Tensor, padding=None) -> torch.Tensor:
        """PyTorch's own convolution; with ``padding``, x is already padded by padding_mode."""
        self.last_algorithm = PYTORCH
        if padding is None:
            return super().forward(x)
        return _FUNCTIONAL[len(self.kernel_size)](x, self.weight, self.bias, self.stride, padding,
                                                  self.dilation, self.groups)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, algorithm={self.seer_choice.describe()}, math={self.seer_choice.math}"


def _refusal(algo: Algorithm | None, layer: ConvShape, layout: str) -> str | None:
    """Why seer's own kernel ``algo`` cannot run ``layer`` in ``layout`` (its launch plan's
    rule), else None."""
    if algo is None or algo.source != "cupy":
        return None
    from seer.kernel_plans import unsupported_reason

    return unsupported_reason(algo.name, layer, layout)


@dataclass(frozen=True)
class _Plan:
    """How a seer convolution runs one input shape: the padding cuDNN gets, the layer and the
    algorithm (None: PyTorch's own), or the problem that leaves the input to PyTorch."""

    padding: tuple[int, ...]
    layer: ConvShape | None = None
    algorithm: object = None  # seer.algorithms.Algorithm
    problem: str | None = None


def _configured_like(cls, conv: nn.Module) -> nn.Module:
    """A ``cls`` module with ``conv``'s configuration, its very parameters and its mode."""
    new = cls(conv.in_channels, conv.out_channels, conv.kernel_size, stride=conv.stride, padding=conv.padding,
              dilation=conv.dilation, groups=conv.groups, bias=conv.bias is not None,
              padding_mode=conv.padding_mode, device="meta")
    new.weight, new.bias = conv.weight, conv.bias
    return new.train(conv.training)


class SeerConv1d(_SeerConv, nn.Conv1d):
    """``nn.Conv1d`` that runs the algorithm its choice names."""


class SeerConv2d(_SeerConv, nn.Conv2d):
    """``nn.Conv2d`` that runs the algorithm its choice names."""


class SeerConv3d(_SeerConv, nn.Conv3d):
    """``nn.Conv3d`` that runs the algorithm its choice names."""


#: Exact module types swapped, and what they become.
SWAPS = {nn.Conv1d: SeerConv1d, nn.Conv2d: SeerConv2d, nn.Conv3d: SeerConv3d}
_BASES = {seer: base for base, seer in SWAPS.items()}


# -- whole models -------------------------------------------------------------------------
def _swap(model: nn.Module, make) -> None:
    """Replace each child for which ``make(child, its full name)`` gives a module."""
    for parent_name, parent in list(model.named_modules()):
        for child_name, child in list(parent.named_children()):
            new = make(child, f"{parent_name}.{child_name}" if parent_name else child_name)
            if new is not None:
                setattr(parent, child_name, new)


def swap_in(model: nn.Module, choice: Choice, nvtx: bool = False) -> nn.Module:
    """Run what ``choice`` names on every ``nn.Conv1d/2d/3d`` of ``model`` (swapped in place; returned)."""
    if type(model) in SWAPS:
        raise InputError("give the model that holds the convolution, not the convolution itself", field="model")
    _swap(model, lambda m, name: SWAPS[type(m)].from_conv(m, choice, name, nvtx) if type(m) in SWAPS else None)
    return model


def force(model: nn.Module, algorithm: str, math: str = "default", nvtx: bool = False) -> nn.Module:
    """Run ``algorithm`` (cuDNN's, or one of seer's own kernels, which need CuPy) on every
    ``nn.Conv1d/2d/3d`` of ``model`` (swapped in place; returned)."""
    return swap_in(model, Fixed(algorithm, math), nvtx)


def apply(model: nn.Module, gpu: str = "h100", math: str = "default", *, input_shape: Sequence[int] | None = None,
          models_dir=None, seer_model=None, nvtx: bool = False, algorithms: str = "cudnn") -> nn.Module:
    """Run seer's predicted-fastest algorithm on every ``nn.Conv1d/2d/3d`` of ``model``.

    The pick is among ``algorithms``: cuDNN's by default (what PyTorch itself runs), or
    ``"all"`` to rank seer's own kernels too (they need CuPy). Each distinct layer is
    predicted when first seen; ``input_shape`` predicts the layers of that input in
    advance, in one call (on the CPU, from a meta-device pass).
    """
    if seer_model is None:
        from seer.persist import load_model

        seer_model = load_model(gpu, math=math, models_dir=models_dir)
    choice = Predicted(seer_model, math, algorithms=algorithms)
    if input_shape is not None:
        from seer.torch.layers import conv_calls

        calls = conv_calls(model, input_shape)
        choice.prepare(ConvShape.from_mapping(row) for row in calls.layers.to_dict("records"))
    return swap_in(model, choice, nvtx)


def restore(model: nn.Module) -> nn.Module:
    """Swap every seer convolution of ``model`` back to the plain PyTorch module."""
    _swap(model, lambda m, name: m.to_conv() if isinstance(m, _SeerConv) else None)
    return model


def seer_convolutions(model: nn.Module) -> dict[str, _SeerConv]:
    """The seer convolutions of ``model`` by module name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, _SeerConv)}

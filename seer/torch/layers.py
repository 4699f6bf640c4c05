"""The convolution layers a PyTorch model runs, as seer's layer frame, found without a GPU.

One forward pass runs on PyTorch's ``meta`` device (shapes only: no arithmetic, no weights
in memory) under a :class:`torch.overrides.TorchFunctionMode` that sees every call of
``torch.nn.functional.conv1d/2d/3d`` and ``conv_transpose*``, whether an ``nn.Conv*``
module or the model's own code makes it. Global module hooks keep the stack of modules
running, so each call is named after the innermost module that made it. What is recorded
is what reaches cuDNN:

- ``padding="same"``: the numeric padding; where the total is odd PyTorch pads the input
  by one more element on the far side first, so the layer has that larger input;
- a ``padding_mode`` other than zeros: PyTorch pads the input itself, then convolves it
  unpadded, and that is the layer recorded;
- a 1D convolution: PyTorch hands cuDNN a 2D convolution of height 1, recorded as such;
- transposed convolutions are listed as skipped, with the reason.

These rules are :func:`seer.layers.calls.conv_fields`, which :mod:`seer.networks.onnx_layers` follows too.
A model whose forward cannot run on ``meta`` (it reads tensor values) runs on the CPU
instead, on zeros (``device="auto"``).

:func:`input_sparsity` records the same calls during a real forward pass, on a batch the
user gives, and counts the zeros of each call's input: the sparsity that seer's sparse
convolutions (:mod:`seer.gpu.sparse_kernels`) can skip.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from contextlib import ExitStack, contextmanager

from seer.errors import InputError, import_failed, one_line
from seer.layers.calls import TRANSPOSED_REASON, CallLog, ConvCalls, conv_fields
from seer.layers.shapes import ShapeError
from seer.layers.sparsity import pixel_crowding

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.overrides import TorchFunctionMode
except Exception as exc:  # noqa: BLE001 - missing, or broken (a library it loads): one sentence either way
    raise import_failed("PyTorch", exc, "seer.torch needs it: pip install 'seer[torch]'") from None

#: Devices :func:`conv_calls` can run the forward on.
DEVICES = ("auto", "meta", "cpu")

# Positional parameters of the functional convolutions, in order.
_CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_TRANSPOSED_PARAMS = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")
_CONVOLUTIONS = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3}
_TRANSPOSED = {F.conv_transpose1d: 1, F.conv_transpose2d: 2, F.conv_transpose3d: 3}


def _tuple(value, dims: int) -> tuple[int, ...]:
    if isinstance(value, int):
        return (value,) * dims
    values = tuple(int(v) for v in value)
    return values * dims if len(values) == 1 else values


def _bound(args: tuple, kwargs: dict, names: Sequence[str]) -> dict:
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


def layer_of_call(call: dict, dims: int) -> dict[str, int]:
    """Layer fields of a functional convolution's arguments, as cuDNN gets them."""
    x, weight = call["input"], call["weight"]
    in_sizes = [int(v) for v in x.shape[-dims:]]
    kernel = [int(v) for v in weight.shape[2:]]
    stride = _tuple(call.get("stride", 1), dims)
    dilation = _tuple(call.get("dilation", 1), dims)
    padding = call.get("padding", 0)
    if isinstance(padding, str):
        if padding == "valid":
            begin = end = [0] * dims
        else:  # "same"; PyTorch refuses anything else before a kernel runs. An odd total: one more at the end.
            total = [d * (k - 1) for d, k in zip(dilation, kernel)]
            begin, end = [t // 2 for t in total], [t - t // 2 for t in total]
    else:
        begin = end = _tuple(padding, dims)
    batch = int(x.shape[0]) if x.dim() == dims + 2 else 1
    return conv_fields(batch, int(x.shape[-dims - 1]), int(weight.shape[0]), int(call.get("groups", 1)), in_sizes,
                       kernel, stride, dilation, begin, end)


#: The channels-last memory format of a convolution's tensors, by its spatial axes (1D has none).
CHANNELS_LAST = {2: torch.channels_last, 3: torch.channels_last_3d}


def _channels_last(x: torch.Tensor, dims: int) -> bool:
    """Whether ``x`` is packed channels-last (and not also NC[D]HW, as a tensor of one channel or pixel is)."""
    memory_format = CHANNELS_LAST.get(dims)
    return (memory_format is not None and x.dim() == dims + 2 and not x.is_contiguous()
            and x.is_contiguous(memory_format=memory_format))


class _Recorder(TorchFunctionMode):
    """Records every functional convolution, named by the innermost module running."""

    def __init__(self, names: dict[int, str]) -> None:
        super().__init__()
        self.names = names
        self.stack: list[str] = []
        self.log = CallLog()

    def push(self, module, args) -> None:
        self.stack.append(self.names.get(id(module), self.stack[-1] if self.stack else ""))

    def pop(self, module, args, output) -> None:
        if self.stack:
            self.stack.pop()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = self.stack[-1] if self.stack else ""
        if func in _CONVOLUTIONS:
            call, dims = _bound(args, kwargs, _CONV_PARAMS), _CONVOLUTIONS[func]
            self.log.record(name, func.__name__, layer_of_call(call, dims), _channels_last(call["input"], dims))
        elif func in _TRANSPOSED:
            x = _bound(args, kwargs, _TRANSPOSED_PARAMS)["input"]
            self.log.skip(name, func.__name__, TRANSPOSED_REASON, key=tuple(x.shape))
        return func(*args, **kwargs)


class _ZeroCounter(_Recorder):
    """A :class:`_Recorder` that also counts, per recorded row, the zero and all values of
    the inputs its calls were given, their pixels (an image's position, all channels) and the
    most non-zeros at one pixel."""

    def __init__(self, names: dict[int, str]) -> None:
        super().__init__(names)
        self.zeros: list[int] = []
        self.values: list[int] = []
        self.pixels: list[int] = []
        self.most: list[int] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = super().__torch_function__(func, types, args, kwargs)
        if func in _CONVOLUTIONS:
            x = _bound(args, kwargs or {}, _CONV_PARAMS)["input"]
            row = self.log.order[-1]
            if row == len(self.zeros):  # the log adds rows in order: this call's layer is new
                for counts in (self.zeros, self.values, self.pixels, self.most):
                    counts.append(0)
            # The mode is off inside its own handler, so counting is not recorded as a call.
            self.zeros[row] += int(torch.count_nonzero(x == 0))
            self.values[row] += x.numel()
            channels = 0 if x.dim() == _CONVOLUTIONS[func] + 1 else 1  # an unbatched input has no batch axis
            per_pixel = torch.count_nonzero(x, dim=channels)
            self.pixels[row] += per_pixel.numel()
            self.most[row] = max(self.most[row], int(per_pixel.max()) if per_pixel.numel() else 0)
        return out


@contextmanager
def _recording(model: nn.Module, recorder_type: type[_Recorder] | None = None):
    names = {id(module): name for name, module in model.named_modules(remove_duplicate=False)}
    recorder = (recorder_type or _Recorder)(names)
    with ExitStack() as stack:
        stack.enter_context(nn.modules.module.register_module_forward_pre_hook(recorder.push))
        stack.enter_context(nn.modules.module.register_module_forward_hook(recorder.pop, always_call=True))
        stack.enter_context(recorder)
        yield recorder


def _forward(model: nn.Module, input_shape: tuple[int, ...], device: str) -> _Recorder:
    """One forward pass on ``device`` with the model's own parameters and buffers replaced
    by empty tensors there (the model itself is not changed)."""
    state = {name: torch.empty_like(t, device=device) if device == "meta" else torch.zeros_like(t, device=device)
             for name, t in [*model.named_parameters(remove_duplicate=False),
                             *model.named_buffers(remove_duplicate=False)]}
    dtype = next((t.dtype for t in state.values() if t.is_floating_point()), torch.float32)
    x = torch.zeros(input_shape, device=device, dtype=dtype)
    with torch.no_grad(), warnings.catch_warnings(), _recording(model) as recorder:
        # PyTorch warns that an even 'same' kernel copies the input; the layer records that copy.
        warnings.filterwarnings("ignore", message="Using padding='same'")
        torch.func.functional_call(model, state, (x,), tie_weights=False, strict=False)
    return recorder


def conv_calls(model: nn.Module, input_shape: Sequence[int], device: str = "auto") -> ConvCalls:
    """The convolutions one forward pass of ``model`` on an input of ``input_shape`` runs.

    ``device``: ``"meta"`` (shapes only), ``"cpu"`` (zeros, for models that read tensor
    values), or ``"auto"``: meta, and the CPU where the meta pass fails. The model should
    be in the mode it will run in (``model.eval()`` for inference). Raises
    :class:`InputError` when the forward pass fails on every device tried.
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {', '.join(DEVICES)}, got {device!r}")
    shape = tuple(int(v) for v in input_shape)
    failures = []
    for where in (("meta", "cpu") if device == "auto" else (device,)):
        try:
            recorder = _forward(model, shape, where)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - the model's own code: one line per device
            failures.append(f"on {where}: {type(exc).__name__}: {one_line(exc)}")
            continue
        try:
            return recorder.log.result(where, shape)
        except ShapeError as exc:  # pragma: no cover - PyTorch refuses such a layer first
            raise InputError(exc.message, field=exc.field) from None
    raise InputError(f"the model's forward pass on an input of {'x'.join(map(str, shape))} failed "
                     + "; ".join(failures), field="input")


def input_sparsity(model: nn.Module, batch: "torch.Tensor") -> ConvCalls:
    """The convolutions of ``model``'s forward pass on ``batch``, each with the share of zero
    values in its input (column ``sparsity``, over every call of the layer and every image)
    and how crowded its non-zeros are on pixels (column ``crowding``,
    :func:`seer.layers.sparsity.pixel_crowding`: about 1 where they spread evenly, more where
    they pile on some pixels).

    The model runs as it is (its device, weights and mode: ``model.eval()`` for inference),
    without gradients, on ``batch``, a calibration batch of real inputs: the zeros a ReLU
    leaves depend on the weights and the data. Raises :class:`InputError` where the forward
    pass fails.
    """
    try:
        with torch.no_grad(), _recording(model, _ZeroCounter) as counter:
            model(batch)
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the model's own code: one line
        raise InputError(f"the model's forward pass on the calibration batch failed: {type(exc).__name__}: "
                         f"{one_line(exc)}", field="batch") from None
    try:
        calls = counter.log.result(str(batch.device.type), tuple(batch.shape))
    except ShapeError as exc:  # pragma: no cover - PyTorch refuses such a layer first
        raise InputError(exc.message, field=exc.field) from None
    zeros, values = (torch.tensor(v, dtype=torch.float64) for v in (counter.zeros, counter.values))
    calls.layers["sparsity"] = (zeros / values.clamp(min=1)).numpy()
    calls.layers["crowding"] = [pixel_crowding(most, v - z, pixels, channels) for most, v, z, pixels, channels in
                                zip(counter.most, counter.values, counter.zeros, counter.pixels,
                                    calls.layers["in_ch"])]
    return calls


def build_model(spec: str | Callable[[], object], device: str = "meta") -> nn.Module:
    """An ``nn.Module`` in eval mode, built on the meta device where it can be (no weights in memory),
    or on ``device`` with its initial weights.

    ``spec`` is ``module:function`` (a function taking no arguments that returns the
    module; the module is imported from the current folder or ``sys.path``), a torchvision model name (built
    with ``weights=None``, so nothing is downloaded), or such a function itself. A model
    whose constructor reads tensor values (torchvision's RegNets do) is built on the CPU.
    """
    if callable(spec):
        build, label = spec, getattr(spec, "__name__", "the model")
    elif ":" in spec:
        module_name, _, function_name = spec.partition(":")
        # From the current folder first, as `python -m` and uvicorn's module:app do.
        sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(module_name)
        except SystemExit as exc:  # a script's `sys.exit()` at import: never seer's own exit status
            raise InputError(f"cannot import {module_name!r}: it called sys.exit({exc.code!r}) while being "
                             "imported; guard its script part with `if __name__ == \"__main__\":`",
                             field="model") from None
        except Exception as exc:  # noqa: BLE001 - the user's module: a SyntaxError is their mistake too
            raise InputError(f"cannot import {module_name!r}: {type(exc).__name__}: {one_line(exc)}",
                             field="model") from None
        finally:
            sys.path.remove(os.getcwd())
        build, label = getattr(module, function_name, None), spec
        if not callable(build):
            raise InputError(f"{module_name!r} has no function {function_name!r}", field="model")
    else:
        build, label = _torchvision_builder(spec), spec
    model = None
    if device == "meta":
        try:
            with torch.device("meta"):
                model = build()
        except (Exception, SystemExit):  # noqa: BLE001 - a tensor's value read on meta, or the user's mistake: try the CPU
            model = None
    try:
        if model is None:
            with torch.device("cpu" if device == "meta" else device):
                model = build()
    except (Exception, SystemExit) as exc:  # noqa: BLE001 - the user's code: one line, not a traceback
        raise InputError(f"building {label!r} failed: {type(exc).__name__}: {one_line(exc)}", field="model") from None
    if not isinstance(model, nn.Module):
        raise InputError(f"{label!r} built a {type(model).__name__}, not a torch.nn.Module", field="model")
    return model.eval()


def _torchvision_builder(name: str) -> Callable[[], nn.Module]:
    try:
        from torchvision import models
    except ModuleNotFoundError:
        raise InputError(f"{name!r} is not module:function, and torchvision, which would know the name, is not "
                         "installed", field="model") from None
    except Exception as exc:  # noqa: BLE001 - e.g. a torchvision built for another torch
        raise import_failed("torchvision", exc, f"install the torchvision release made for torch "
                                                f"{torch.__version__} (see pytorch.org)") from None
    known = models.list_models()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else "; `python -c \"import torchvision; " \
            "print(torchvision.models.list_models())\"` lists them"
        raise InputError(f"torchvision has no model {name!r}{hint}", field="model")
    return lambda: models.get_model(name, weights=None)

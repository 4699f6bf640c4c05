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

A model whose forward cannot run on ``meta`` (it reads tensor values) runs on the CPU
instead, on zeros (``device="auto"``).
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import sys
import warnings
from collections.abc import Callable, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass

import numpy as np
import pandas as pd

from seer.errors import EnvironmentProblem, InputError
from seer.shapes import AXES, LAYER_FIELDS, PER_AXIS, ShapeError, check_layer_frame, layer_frame

try:
    import torch
    import torch.nn.functional as F
    from torch import nn
    from torch.overrides import TorchFunctionMode
except ImportError as exc:  # pragma: no cover - the torch extra is installed in CI
    raise EnvironmentProblem("seer.torch needs PyTorch: pip install 'seer[torch]'") from exc

#: Columns of :attr:`ConvCalls.layers` besides the layer's own.
CALL_COLUMNS = ("name", "call", "calls")
#: Columns of :attr:`ConvCalls.skipped`.
SKIPPED_COLUMNS = ("name", "call", "calls", "reason")
#: Devices :func:`conv_calls` can run the forward on.
DEVICES = ("auto", "meta", "cpu")

# Positional parameters of the functional convolutions, in order.
_CONV_PARAMS = ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
_TRANSPOSED_PARAMS = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation")
_CONVOLUTIONS = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3}
_TRANSPOSED = {F.conv_transpose1d: 1, F.conv_transpose2d: 2, F.conv_transpose3d: 3}


@dataclass
class ConvCalls:
    """The convolutions of one forward pass.

    Attributes
    ----------
    layers : pandas.DataFrame
        One row per distinct (module, layer), in the order first run: ``name`` (the
        module's name in ``named_modules``, ``""`` for the model itself), ``call`` (the
        functional call, e.g. ``conv2d``), ``calls`` (how many times it ran) and the
        layer columns (:data:`seer.shapes.LAYER_COLUMNS`).
    skipped : pandas.DataFrame
        Convolutions seer does not model, with the same first three columns and ``reason``.
    device : str
        Where the forward pass ran: ``"meta"`` or ``"cpu"``.
    order : numpy.ndarray
        The row of ``layers`` of each call, in the order the calls ran.
    """

    layers: pd.DataFrame
    skipped: pd.DataFrame
    device: str
    order: np.ndarray

    @property
    def total_calls(self) -> int:
        return int(self.layers["calls"].sum() + self.skipped["calls"].sum())

    def per_call(self) -> pd.DataFrame:
        """One row per call in forward order: ``name`` and the layer columns."""
        return self.layers.iloc[self.order].drop(columns=["call", "calls"]).reset_index(drop=True)


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
    batched = x.dim() == dims + 2
    in_sizes = [int(v) for v in x.shape[-dims:]]
    kernel = [int(v) for v in weight.shape[2:]]
    stride = list(_tuple(call.get("stride", 1), dims))
    dilation = list(_tuple(call.get("dilation", 1), dims))
    padding = call.get("padding", 0)
    if isinstance(padding, str):
        if padding == "valid":
            padding = [0] * dims
        else:  # "same"; PyTorch refuses anything else before a kernel runs
            total = [d * (k - 1) for d, k in zip(dilation, kernel)]
            padding = [t // 2 for t in total]
            in_sizes = [n + t % 2 for n, t in zip(in_sizes, total)]
    else:
        padding = list(_tuple(padding, dims))
    per_axis = dict(zip(("in", "kernel", "stride", "pad", "dilation"), (in_sizes, kernel, stride, padding, dilation)))
    if dims == 1:  # PyTorch hands cuDNN a 2D convolution of height 1 (an axis of size 1)
        per_axis = {quantity: [PER_AXIS[quantity]] + values for quantity, values in per_axis.items()}
    row = {"batch": int(x.shape[0]) if batched else 1, "in_ch": int(x.shape[-dims - 1]),
           "out_ch": int(weight.shape[0]), "groups": int(call.get("groups", 1)), "dims": 3 if dims == 3 else 2}
    axes = AXES if dims == 3 else AXES[1:]
    for quantity, values in per_axis.items():
        row |= {f"{quantity}_{a}": v for a, v in zip(axes, values)}
    return row


class _Recorder(TorchFunctionMode):
    """Records every functional convolution, named by the innermost module running."""

    def __init__(self, names: dict[int, str]) -> None:
        super().__init__()
        self.names = names
        self.stack: list[str] = []
        self.rows: list[dict] = []  # one per distinct (module, call, layer), in the order first run
        self.index: dict[tuple, int] = {}  # its key -> its row
        self.order: list[int] = []  # the row of every call, in the order run
        self.skipped: dict[tuple, dict] = {}

    def push(self, module, args) -> None:
        self.stack.append(self.names.get(id(module), self.stack[-1] if self.stack else ""))

    def pop(self, module, args, output) -> None:
        if self.stack:
            self.stack.pop()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = self.stack[-1] if self.stack else ""
        if func in _CONVOLUTIONS:
            dims = _CONVOLUTIONS[func]
            fields = layer_of_call(_bound(args, kwargs, _CONV_PARAMS), dims)
            key = (name, func.__name__, *(fields.get(f, 0) for f in LAYER_FIELDS))
            row = self.index.setdefault(key, len(self.rows))
            if row == len(self.rows):
                self.rows.append({"name": name, "call": func.__name__, **fields})
            self.order.append(row)
        elif func in _TRANSPOSED:
            x = _bound(args, kwargs, _TRANSPOSED_PARAMS)["input"]
            key = (name, func.__name__, tuple(x.shape))
            entry = self.skipped.setdefault(key, {
                "name": name, "call": func.__name__, "calls": 0,
                "reason": "transposed convolution: cuDNN runs it as a backward-data convolution, "
                          "which seer does not model"})
            entry["calls"] += 1
        return func(*args, **kwargs)


def _frames(recorder: _Recorder) -> tuple[pd.DataFrame, pd.DataFrame]:
    rows = recorder.rows
    calls = np.bincount(np.array(recorder.order, dtype=np.int64), minlength=len(rows))
    fields = pd.DataFrame(rows, columns=["name", "call", *LAYER_FIELDS]).assign(calls=calls) if rows else pd.DataFrame(
        np.zeros((0, len(LAYER_FIELDS)), dtype=np.int64), columns=list(LAYER_FIELDS))
    layers = layer_frame(fields[[f for f in LAYER_FIELDS if f in fields]])
    check_layer_frame(layers, where=lambda i: f"layer {rows[i]['name']!r}")
    for j, column in enumerate(CALL_COLUMNS):
        layers.insert(j, column, fields[column].to_numpy() if rows else np.array([], dtype=object))
    layers["calls"] = layers["calls"].astype(np.int64)
    skipped = pd.DataFrame(list(recorder.skipped.values()), columns=list(SKIPPED_COLUMNS))
    return layers, skipped


@contextmanager
def _recording(model: nn.Module):
    names = {id(module): name for name, module in model.named_modules(remove_duplicate=False)}
    recorder = _Recorder(names)
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
        except Exception as exc:  # noqa: BLE001 - the model's own code: reported in one line per device
            failures.append(f"on {where}: {type(exc).__name__}: {_one_line(exc)}")
            continue
        try:
            layers, skipped = _frames(recorder)
        except ShapeError as exc:  # pragma: no cover - PyTorch refuses such a layer first
            raise InputError(exc.message, field=exc.field) from None
        return ConvCalls(layers, skipped, where, np.array(recorder.order, dtype=np.int64))
    raise InputError(f"the model's forward pass on an input of {'x'.join(map(str, shape))} failed "
                     + "; ".join(failures), field="input")


def _one_line(exc: BaseException, limit: int = 300) -> str:
    return " ".join(str(exc).split())[:limit]


def parse_input_shape(text: str) -> tuple[int, ...]:
    """``"1x3x224x224"`` -> ``(1, 3, 224, 224)``: batch, channels and 2 or 3 spatial sizes."""
    if not re.fullmatch(r"\s*\d+(\s*[xX,]\s*\d+){3,4}\s*", text):
        raise InputError(f"expected NxCxHxW or NxCxDxHxW, e.g. 1x3x224x224, got {text!r}", field="input")
    shape = tuple(int(v) for v in re.split(r"\s*[xX,]\s*", text.strip()))
    if min(shape) < 1:
        raise InputError(f"every size must be positive, got {text!r}", field="input")
    return shape


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
        except Exception as exc:  # noqa: BLE001 - the user's module: a SyntaxError is their mistake too
            raise InputError(f"cannot import {module_name!r}: {type(exc).__name__}: {_one_line(exc)}",
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
        except Exception:  # noqa: BLE001 - reading a tensor's value on meta, or the user's own mistake: try the CPU
            model = None
    try:
        if model is None:
            with torch.device("cpu" if device == "meta" else device):
                model = build()
    except Exception as exc:  # noqa: BLE001 - the user's code: one line, not a traceback
        raise InputError(f"building {label!r} failed: {type(exc).__name__}: {_one_line(exc)}", field="model") from None
    if not isinstance(model, nn.Module):
        raise InputError(f"{label!r} built a {type(model).__name__}, not a torch.nn.Module", field="model")
    return model.eval()


def _torchvision_builder(name: str) -> Callable[[], nn.Module]:
    try:
        from torchvision import models
    except ImportError:
        raise InputError(f"{name!r} is not module:function, and torchvision, which would know the name, is not "
                         "installed", field="model") from None
    known = models.list_models()
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {' or '.join(close)}?" if close else "; `python -c \"import torchvision; " \
            "print(torchvision.models.list_models())\"` lists them"
        raise InputError(f"torchvision has no model {name!r}{hint}", field="model")
    return lambda: models.get_model(name, weights=None)

"""The convolution layers of an ONNX model, as seer's layer frame, found without running it.

The file is parsed (protobuf only: nothing in it runs, and weights kept in external files
are not read), model-local functions are inlined, and ONNX shape inference gives the
shape of every tensor. Each ``Conv`` node of the main graph is one call of the layer cuDNN
gets, by the rules the PyTorch path follows too (:func:`seer.layers.calls.conv_fields`), so that
a model and its export give the same layers:

- ``auto_pad`` ``SAME_UPPER``/``SAME_LOWER`` and explicit ``pads`` that differ between the
  two sides of an axis: the input is taken to be padded by the difference first, as
  PyTorch does for ``padding="same"`` (onnxruntime's CUDA provider instead pads both sides
  by the larger and crops the output: a slightly larger layer);
- a 1D convolution: a 2D one of height 1.

Listed as skipped, with the reason: ``ConvTranspose``, ``ConvInteger``, ``QLinearConv``,
``DeformConv`` and convolution operators of other domains (onnxruntime's ``FusedConv``,
...); ``Conv`` nodes inside the subgraphs of ``If``, ``Loop`` and ``Scan`` (how often they
run is known only when the model runs); ``Conv`` nodes whose shapes inference could not
work out (after an operator it has no shape rule for).

Needs the ``onnx`` package (``pip install 'seer[onnx]'``), and no PyTorch.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from pathlib import Path

from seer.errors import InputError, import_failed, one_line
from seer.layers.calls import TRANSPOSED_REASON, CallLog, ConvCalls, conv_fields
from seer.layers.files import QUOTED_CHARS
from seer.layers.shapes import ConvShape, ShapeError

try:
    import onnx
    import onnx.inliner
    import onnx.shape_inference
    from onnx import AttributeProto
except Exception as exc:  # noqa: BLE001 - missing, or broken: one sentence either way
    raise import_failed("onnx", exc, "reading ONNX models needs it: pip install 'seer[onnx]'") from None

#: The value of :attr:`seer.layers.calls.ConvCalls.device` for layers found by shape inference.
DEVICE = "onnx"

_STANDARD_DOMAINS = ("", "ai.onnx")
_QUANTIZED_REASON = "integer (quantized) convolution: seer models floating-point convolutions"
#: Standard operators that convolve but are not the forward convolution seer models.
_OTHER_CONVOLUTIONS = {
    "ConvTranspose": TRANSPOSED_REASON,
    "ConvInteger": _QUANTIZED_REASON,
    "QLinearConv": _QUANTIZED_REASON,
    "DeformConv": "deformable convolution: not a convolution cuDNN runs",
}
#: The attributes of Conv that seer reads, with the type the ONNX specification gives each.
_CONV_ATTRIBUTES = {"auto_pad": AttributeProto.STRING, "kernel_shape": AttributeProto.INTS,
                    "strides": AttributeProto.INTS, "dilations": AttributeProto.INTS, "pads": AttributeProto.INTS,
                    "group": AttributeProto.INT}
#: Values of ``auto_pad``; an empty one is NOTSET, as onnxruntime reads it.
_AUTO_PADS = (b"NOTSET", b"SAME_UPPER", b"SAME_LOWER", b"VALID", b"")


def onnx_conv_calls(path: str | Path, input_shape: Sequence[int] | None = None) -> ConvCalls:
    """The convolutions of the ONNX model in ``path``, on an input of ``input_shape``.

    ``input_shape`` replaces the shape of the model's first input (initializers aside);
    without it, that shape must be fixed in the file. Every other input's shape must be
    fixed in the file. Each node is one call; its ``name`` is the node's name, or its first
    output's where it has none. Raises :class:`InputError` (naming ``path``) for a file that
    is not a readable ONNX model, an input shape left open, failed shape inference, or a Conv
    node that breaks the ONNX specification in a way inference lets through (an attribute of
    the wrong type or value, a weight whose channels do not fit its input's).
    """
    model = _load(path)
    shape = _fix_inputs(model, path, None if input_shape is None else tuple(int(v) for v in input_shape))
    try:
        if model.functions:  # their Conv nodes are the graph's once inlined
            model = onnx.inliner.inline_local_functions(model)
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as exc:  # noqa: BLE001 - onnx's C++ errors have no common Python type
        raise InputError(f"ONNX shape inference failed: {one_line(exc)}", path=path) from None
    log = CallLog(channels_last=None)  # a graph has no strides
    shapes = _shapes(model.graph)
    for node in model.graph.node:
        reason = _not_modelled(node)
        if reason is None and node.op_type == "Conv":
            layer = _layer(node, shapes, path)
            if isinstance(layer, str):
                reason = layer
            else:
                log.record(_name(node), node.op_type, layer)
        if reason is not None:
            log.skip(_name(node), _text(node.op_type), reason, key=(reason,))
        for inner, holder in _subgraph_nodes(node):
            if _not_modelled(inner) or inner.op_type == "Conv" and inner.domain in _STANDARD_DOMAINS:
                reason = (f"inside the subgraph of {_text(holder.op_type)} {_name(holder)!r}: how often it runs is "
                          "known only when the model runs")
                log.skip(_name(inner), _text(inner.op_type), reason, key=(reason,))
    return log.result(DEVICE, shape)


def _name(node: onnx.NodeProto) -> str:
    return _text(node.name or (node.output[0] if node.output else ""))


def _text(value: str | bytes) -> str:
    """A string field of the file as text: protobuf hands one that is not valid UTF-8 over as bytes."""
    return value.decode("utf-8", "backslashreplace") if isinstance(value, bytes) else value


def _shown(value: object) -> str:
    """``repr`` of a name or value, cut to :data:`QUOTED_CHARS` characters: a message stays one
    short line whatever the file holds (repr escapes every line break)."""
    shown = repr(value)
    return shown if len(shown) <= QUOTED_CHARS else f"{shown[:QUOTED_CHARS]}..."


def _node_error(node: onnx.NodeProto, field: str, message: str, path: str | Path) -> InputError:
    return InputError(f"{_text(node.op_type)} node {_shown(_name(node))}: {message}", path=path, field=field)


def _load(path: str | Path) -> onnx.ModelProto:
    try:
        # Weights in external files are not needed: initializers' shapes are in the model file.
        model = onnx.load(str(path), load_external_data=False)
    except OSError as exc:
        raise InputError(f"cannot be read ({exc.strerror or one_line(exc)})", path=path) from None
    except Exception as exc:  # noqa: BLE001 - protobuf's DecodeError and kin: not a model
        raise InputError(f"not an ONNX model ({one_line(exc)})", path=path) from None
    if not model.HasField("graph"):  # an empty file parses as an empty model
        raise InputError("not an ONNX model: it holds no graph", path=path)
    return model


def _dims(value: onnx.ValueInfoProto) -> list[int | str | None] | None:
    """A tensor's sizes: an int where known, the symbol or None where not; None if no shape."""
    tensor = value.type.tensor_type
    if not value.type.HasField("tensor_type") or not tensor.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else d.dim_param or None for d in tensor.shape.dim]


def _sizes(dims: Sequence) -> str:
    """``1x3x?x?``; a symbol the file names (``N``) is kept, those inference makes up are not."""
    return "x".join("?" if d is None or str(d).startswith("unk__") else str(d) for d in dims)


def _fix_inputs(model: onnx.ModelProto, path: str | Path, shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """Set the first input's shape to ``shape`` and check that every input's shape is fixed;
    the first input's shape."""
    graph = model.graph
    initialized = {t.name for t in graph.initializer}  # older files list initializers as inputs too
    inputs = [value for value in graph.input if value.name not in initialized]
    if not inputs:
        raise InputError("the model has no inputs", path=path)
    first = inputs[0]
    if shape is not None:
        dims = _dims(first)
        if dims is not None and len(dims) != len(shape):
            raise InputError(f"--input {_sizes(shape)} has {len(shape)} sizes, but the model's input {first.name!r} "
                             f"has {len(dims)} ({_sizes(dims)})", path=path, field="input")
        if not first.type.HasField("tensor_type"):
            raise InputError(f"the model's input {first.name!r} is not a tensor", path=path, field="input")
        first.type.tensor_type.ClearField("shape")
        for size in shape:
            first.type.tensor_type.shape.dim.add().dim_value = size
        # Shapes the file records were inferred for the old input: inference works them out again.
        del graph.value_info[:]
        for output in graph.output:
            output.type.tensor_type.ClearField("shape")
    for position, value in enumerate(inputs):
        dims = _dims(value)
        if dims is None or not all(isinstance(d, int) and d > 0 for d in dims):
            shown = "no shape" if dims is None else f"sizes {_sizes(dims)}"
            if position == 0:
                raise InputError(f"the model's input {value.name!r} has {shown}, left open in the file: pass --input "
                                 "with every size, e.g. --input 1x3x224x224", path=path, field="input")
            raise InputError(f"the model's input {value.name!r} has {shown}, left open in the file; --input sets only "
                             f"the first input, {first.name!r}: seer needs the others fixed", path=path, field="input")
    return tuple(_dims(first))


def _shapes(graph: onnx.GraphProto) -> dict[str, list]:
    """Every tensor of the main graph whose shape is known: its sizes."""
    shapes = {t.name: [int(d) for d in t.dims] for t in graph.initializer}
    for value in (*graph.input, *graph.value_info, *graph.output):
        dims = _dims(value)
        if dims is not None:
            shapes[value.name] = dims
    return shapes


def _not_modelled(node: onnx.NodeProto) -> str | None:
    """Why seer does not model a convolution-like node; None for a Conv and for other operators."""
    if node.domain in _STANDARD_DOMAINS:
        return _OTHER_CONVOLUTIONS.get(node.op_type)
    op_type = _text(node.op_type).lower()
    if "conv" in op_type and "convert" not in op_type:  # FusedConv, NhwcConv, ...
        return f"operator of domain {_text(node.domain)!r}, not the standard ONNX Conv, which seer models"
    return None


def _subgraph_nodes(node: onnx.NodeProto) -> Iterator[tuple[onnx.NodeProto, onnx.NodeProto]]:
    """Every node in the subgraphs of ``node``, however deep, with the node that holds its graph."""
    for attribute in node.attribute:
        graphs = [attribute.g] if attribute.type == AttributeProto.GRAPH else \
            list(attribute.graphs) if attribute.type == AttributeProto.GRAPHS else []
        for graph in graphs:
            for inner in graph.node:
                yield inner, node
                yield from _subgraph_nodes(inner)


def _conv_attributes(node: onnx.NodeProto, path: str | Path) -> dict:
    """The Conv attributes seer reads, by name; InputError for one given twice or of the wrong type."""
    found = {}
    for attribute in node.attribute:
        name = attribute.name
        expected = _CONV_ATTRIBUTES.get(name)
        if expected is None:
            continue
        if name in found:  # which one inference and a runtime take is anyone's guess
            raise _node_error(node, name, "the attribute is given twice", path)
        if attribute.ref_attr_name:  # only a function's nodes may refer to its attributes
            raise _node_error(node, name, f"refers to an attribute {_shown(_text(attribute.ref_attr_name))} of a "
                                          "function, outside any function", path)
        if attribute.type != expected:
            got = AttributeProto.AttributeType.Name(attribute.type) \
                if attribute.type in AttributeProto.AttributeType.values() else str(attribute.type)
            raise _node_error(node, name, f"must be an attribute of type "
                                          f"{AttributeProto.AttributeType.Name(expected)}, got {got}", path)
        found[name] = onnx.helper.get_attribute_value(attribute)
    auto_pad = found.get("auto_pad", b"NOTSET")
    if auto_pad not in _AUTO_PADS:
        try:
            shown = _shown(auto_pad.decode())
        except UnicodeDecodeError:
            shown = _shown(auto_pad)
        raise _node_error(node, "auto_pad", f"must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got {shown}", path)
    return found


def _check_conv(node: onnx.NodeProto, x: list[int], weight: list | None, attributes: dict, path: str | Path) -> None:
    """InputError where a Conv node's attributes or weight break the ONNX specification."""
    dims = len(x) - 2
    group = attributes.get("group", 1)
    if group < 1:
        raise _node_error(node, "group", f"must be at least 1, got {group}", path)
    for name, count, low in (("kernel_shape", dims, 1), ("strides", dims, 1), ("dilations", dims, 1),
                             ("pads", 2 * dims, 0)):
        values = attributes.get(name)
        if values and (len(values) != count or min(values) < low):
            raise _node_error(node, name, f"must be {count} integers of at least {low}, for an input of "
                                          f"{_sizes(x)}, got {_shown(values)}", path)
    auto_pad, pads = attributes.get("auto_pad", b"NOTSET"), attributes.get("pads")
    if auto_pad not in (b"NOTSET", b"") and pads and not (auto_pad == b"VALID" and not any(pads)):
        # The specification allows only one; ONNX's shape inference takes the pads, onnxruntime auto_pad.
        raise _node_error(node, "pads", f"are given with auto_pad {auto_pad.decode()}: give only one of them", path)
    if weight is None:
        return
    weight_name = _shown(_text(node.input[1]))
    if len(weight) != len(x):
        raise _node_error(node, "weight", f"its weight {weight_name} has {len(weight)} dimensions "
                                          f"({_sizes(weight)}), its input {len(x)} ({_sizes(x)})", path)
    out_ch, in_ch, kernel = weight[0], weight[1], weight[2:]
    if isinstance(in_ch, int) and in_ch * group != x[1]:
        takes = f"{in_ch} input channels" if group == 1 else \
            f"{in_ch} input channels per group, {in_ch * group} in its {group} groups"
        raise _node_error(node, "weight", f"its weight {weight_name} ({_sizes(weight)}) takes {takes}, but its input "
                                          f"({_sizes(x)}) has {x[1]}", path)
    if isinstance(out_ch, int) and out_ch % group:
        raise _node_error(node, "group", f"its weight {weight_name} ({_sizes(weight)}) has {out_ch} output channels, "
                                         f"not a multiple of group {group}", path)
    given = attributes.get("kernel_shape")
    if given and all(isinstance(k, int) for k in kernel) and list(given) != list(kernel):
        raise _node_error(node, "kernel_shape", f"is {_sizes(given)}, but the kernel of its weight {weight_name} is "
                                                f"{_sizes(kernel)}", path)


def _layer(node: onnx.NodeProto, shapes: dict[str, list], path: str | Path) -> dict[str, int] | str:
    """The layer fields of a Conv node, or why it has none; InputError for a node that breaks
    the ONNX specification (:func:`_conv_attributes`, :func:`_check_conv`)."""
    x = shapes.get(node.input[0])
    weight = shapes.get(node.input[1]) if len(node.input) > 1 else None
    if x is None or not all(isinstance(d, int) and d > 0 for d in x):
        shown = "no shape" if x is None else _sizes(x)
        return f"ONNX shape inference could not work out its input's shape ({shown}); folding the model's " \
               "constants first may help"
    dims = len(x) - 2
    if not 1 <= dims <= 3:
        return f"a convolution of {dims} spatial dimensions: seer models 1D, 2D and 3D ones"
    attributes = _conv_attributes(node, path)
    _check_conv(node, x, weight, attributes, path)
    kernel = attributes.get("kernel_shape") or (weight[2:] if weight is not None else None)
    out_ch = weight[0] if weight is not None else None
    if out_ch is None or kernel is None or not all(isinstance(v, int) for v in (out_ch, *kernel)):
        return "ONNX shape inference could not work out its weight's shape"
    stride = attributes.get("strides") or [1] * dims
    dilation = attributes.get("dilations") or [1] * dims
    auto_pad = attributes.get("auto_pad", b"NOTSET").decode()
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        # The output is ceil(in / stride); an odd total goes at the end (UPPER) or the beginning (LOWER).
        total = [max(0, (math.ceil(n / s) - 1) * s + d * (k - 1) + 1 - n)
                 for n, k, s, d in zip(x[2:], kernel, stride, dilation)]
        small, large = [t // 2 for t in total], [t - t // 2 for t in total]
        begin, end = (small, large) if auto_pad == "SAME_UPPER" else (large, small)
    elif auto_pad == "VALID":
        begin = end = [0] * dims
    else:
        pads = attributes.get("pads") or [0] * (2 * dims)
        begin, end = pads[:dims], pads[dims:]
    fields = conv_fields(x[0], x[1], out_ch, attributes.get("group", 1), x[2:], kernel, stride, dilation, begin, end)
    try:
        ConvShape(**fields)
    except ShapeError as exc:  # a valid node seer cannot describe (a size beyond cuDNN's 32-bit fields)
        return f"not a valid convolution: {exc}"
    return fields

"""The convolution calls of a network, as seer's layer frame, whatever found them.

:func:`seer.torch.conv_calls` (a forward pass of a PyTorch model) and
:func:`seer.networks.onnx_layers.onnx_conv_calls` (an ONNX graph's Conv nodes) both return a
:class:`ConvCalls`, built here by a :class:`CallLog`. The rules that turn a convolution's
arguments into the layer cuDNN gets live here too (:func:`conv_fields`), so that a model
and its ONNX export give the same layers. Nothing here needs PyTorch or onnx.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from seer.errors import InputError
from seer.layers.shapes import AXES, LAYER_FIELDS, PER_AXIS, check_layer_frame, layer_frame

#: Columns of :attr:`ConvCalls.layers` besides the layer's own.
CALL_COLUMNS = ("name", "call", "calls")
#: Columns of :attr:`ConvCalls.skipped`.
SKIPPED_COLUMNS = ("name", "call", "calls", "reason")
#: Why a transposed convolution is skipped.
TRANSPOSED_REASON = ("transposed convolution: cuDNN runs it as a backward-data convolution, "
                     "which seer does not model")


@dataclass
class ConvCalls:
    """The convolutions of one forward pass.

    Attributes
    ----------
    layers : pandas.DataFrame
        One row per distinct (name, layer), in the order first run: ``name`` (the module's
        name in ``named_modules``, ``""`` for the model itself; an ONNX node's name),
        ``call`` (the functional call, e.g. ``conv2d``, or the ONNX operator), ``calls``
        (how many times it ran) and the layer columns (:data:`seer.layers.shapes.LAYER_COLUMNS`).
    skipped : pandas.DataFrame
        Convolutions seer does not model, with the same first three columns and ``reason``.
    device : str
        How the layers were found: a forward pass on ``"meta"`` or ``"cpu"``, or ``"onnx"``
        (shape inference of an ONNX graph).
    order : numpy.ndarray
        The row of ``layers`` of each call, in the order the calls ran.
    input_shape : tuple of int
        The shape of the model's (first) input.
    channels_last : numpy.ndarray or None
        Per row of ``layers``, whether a call got its input packed channels-last (the strides
        of ``torch.channels_last`` or ``channels_last_3d``, as after ConvNeXt's permutes), which
        PyTorch then runs in NHWC, where seer's models predict NC[D]HW times; None where not
        known (an ONNX graph has no strides).
    """

    layers: pd.DataFrame
    skipped: pd.DataFrame
    device: str
    order: np.ndarray
    input_shape: tuple[int, ...] = ()
    channels_last: np.ndarray | None = None

    @property
    def total_calls(self) -> int:
        return int(self.layers["calls"].sum() + self.skipped["calls"].sum())

    def per_call(self) -> pd.DataFrame:
        """One row per call in forward order: ``name`` and the layer columns."""
        return self.layers.iloc[self.order].drop(columns=["call", "calls"]).reset_index(drop=True)


def conv_fields(batch: int, in_ch: int, out_ch: int, groups: int, in_sizes: Sequence[int], kernel: Sequence[int],
                stride: Sequence[int], dilation: Sequence[int], pads_begin: Sequence[int],
                pads_end: Sequence[int]) -> dict[str, int]:
    """Layer fields of an N-D convolution (1, 2 or 3 spatial axes), as cuDNN gets it.

    cuDNN pads both sides of an axis alike. Where a padding is asymmetric the input is taken
    to be padded by the difference first, on the side that has more, as PyTorch does for
    ``padding="same"``: the layer is the larger input with the smaller padding, and its
    output size is unchanged. A 1D convolution is a 2D one of height 1, as PyTorch hands
    it to cuDNN.
    """
    in_sizes = [int(n) + abs(int(e) - int(b)) for n, b, e in zip(in_sizes, pads_begin, pads_end)]
    padding = [min(int(b), int(e)) for b, e in zip(pads_begin, pads_end)]
    per_axis = {"in": in_sizes, "kernel": [int(k) for k in kernel], "stride": [int(s) for s in stride],
                "pad": padding, "dilation": [int(d) for d in dilation]}
    dims = len(in_sizes)
    if dims == 1:  # an axis of size 1 in front
        per_axis = {quantity: [PER_AXIS[quantity]] + values for quantity, values in per_axis.items()}
    row = {"batch": int(batch), "in_ch": int(in_ch), "out_ch": int(out_ch), "groups": int(groups),
           "dims": 3 if dims == 3 else 2}
    axes = AXES if dims == 3 else AXES[1:]
    for quantity, values in per_axis.items():
        row |= {f"{quantity}_{a}": v for a, v in zip(axes, values)}
    return row


@dataclass
class CallLog:
    """Convolution calls as they are found, one :meth:`record` or :meth:`skip` per call."""

    rows: list[dict] = field(default_factory=list)  # one per distinct (name, call, layer), in the order first run
    index: dict[tuple, int] = field(default_factory=dict)  # its key -> its row
    order: list[int] = field(default_factory=list)  # the row of every call, in the order run
    skipped: dict[tuple, dict] = field(default_factory=dict)
    # Rows with a call whose input came channels-last; None where strides are not known (ONNX).
    channels_last: set[int] | None = field(default_factory=set)

    def record(self, name: str, call: str, fields: dict[str, int], channels_last: bool = False) -> None:
        """One call of a layer seer models (``fields`` from :func:`conv_fields`); ``channels_last``:
        its input came packed channels-last."""
        key = (name, call, *(fields.get(f, 0) for f in LAYER_FIELDS))
        row = self.index.setdefault(key, len(self.rows))
        if row == len(self.rows):
            self.rows.append({"name": name, "call": call, **fields})
        self.order.append(row)
        if channels_last and self.channels_last is not None:
            self.channels_last.add(row)

    def skip(self, name: str, call: str, reason: str, key: tuple = ()) -> None:
        """One call seer does not model; calls of the same (name, call, key) are counted together."""
        entry = self.skipped.setdefault((name, call, *key), {"name": name, "call": call, "calls": 0, "reason": reason})
        entry["calls"] += 1

    def result(self, device: str, input_shape: Sequence[int]) -> ConvCalls:
        """The calls as a :class:`ConvCalls`; :class:`~seer.layers.shapes.ShapeError` names an impossible layer."""
        rows = self.rows
        calls = np.bincount(np.array(self.order, dtype=np.int64), minlength=len(rows))
        fields = pd.DataFrame(rows, columns=["name", "call", *LAYER_FIELDS]).assign(calls=calls) if rows else \
            pd.DataFrame(np.zeros((0, len(LAYER_FIELDS)), dtype=np.int64), columns=list(LAYER_FIELDS))
        layers = layer_frame(fields[[f for f in LAYER_FIELDS if f in fields]])
        check_layer_frame(layers, where=lambda i: f"layer {rows[i]['name']!r}")
        for j, column in enumerate(CALL_COLUMNS):
            layers.insert(j, column, fields[column].to_numpy() if rows else np.array([], dtype=object))
        layers["calls"] = layers["calls"].astype(np.int64)
        skipped = pd.DataFrame(list(self.skipped.values()), columns=list(SKIPPED_COLUMNS))
        channels_last = None if self.channels_last is None else np.isin(np.arange(len(rows)),
                                                                         sorted(self.channels_last))
        return ConvCalls(layers, skipped, device, np.array(self.order, dtype=np.int64),
                         tuple(int(v) for v in input_shape), channels_last)


def parse_input_shape(text: str, any_rank: bool = False) -> tuple[int, ...]:
    """``"1x3x224x224"`` -> ``(1, 3, 224, 224)``: batch, channels and 2 or 3 spatial sizes, or
    with ``any_rank`` any number of sizes (an ONNX input's rank is checked against its graph)."""
    pattern = r"\s*\d+(\s*[xX,]\s*\d+)*\s*" if any_rank else r"\s*\d+(\s*[xX,]\s*\d+){3,4}\s*"
    if not re.fullmatch(pattern, text):
        expected = "sizes joined by x" if any_rank else "NxCxHxW or NxCxDxHxW"
        raise InputError(f"expected {expected}, e.g. 1x3x224x224, got {text!r}", field="input")
    shape = tuple(int(v) for v in re.split(r"\s*[xX,]\s*", text.strip()))
    if min(shape) < 1:
        raise InputError(f"every size must be positive, got {text!r}", field="input")
    return shape

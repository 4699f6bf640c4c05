"""Convolution layers: the first stage of seer's data flow.

A :class:`ConvShape` is one forward convolution of any kind seer handles: 2D or 3D, with
its own input size, kernel size, stride, padding and dilation per spatial axis, and a
group count (``groups == in_ch`` is depthwise). SEER's square 2D layer, the eight numbers
``batch in_ch in_width out_ch out_width kernel_width stride padding``, is the special case
(:meth:`ConvShape.seer`, :attr:`ConvShape.is_seer`).

Here are the output-size rule, the analytic work and traffic (:func:`direct_macs`,
:func:`tensor_elements`: the one place these formulas live, for one layer or a whole frame
of them), the layer kinds reports group by (:data:`LAYER_KINDS`), frames of layers
(:func:`layer_frame`, :func:`invalid_layer_rows`), and a stable ``shape_id`` used to key,
join and split measurements.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

if TYPE_CHECKING:  # pandas is imported by the frame helpers that use it: a collection worker needs
    import pandas as pd  # only ConvShape, and pandas is most of its start (0.2 of 0.5 CPU s)

#: A layer table: column names to equally long arrays, as a frame's columns but without pandas
#: (``seer predict`` reads, predicts and writes these; a frame works wherever one does).
LayerTable = Mapping[str, np.ndarray]

#: The eight integers of SEER's shape format, in file order.
SEER_FIELDS: tuple[str, ...] = (
    "batch", "in_ch", "in_width", "out_ch", "out_width", "kernel_width", "stride", "padding",
)
#: Spatial axes, outermost first; a 2D layer has only the last two.
AXES: tuple[str, ...] = ("d", "h", "w")
#: Per-axis quantities and the value an axis a layer does not have takes.
PER_AXIS: dict[str, int] = {"in": 1, "kernel": 1, "stride": 1, "pad": 0, "dilation": 1}
#: What defines a layer, in table order: the constructor's fields.
LAYER_FIELDS: tuple[str, ...] = (
    "batch", "in_ch", "out_ch", "groups", "dims",
    *(f"{q}_{a}" for q in PER_AXIS for a in AXES),
)
#: Output sizes, derived from the fields.
OUTPUT_FIELDS: tuple[str, ...] = ("out_d", "out_h", "out_w")
#: The layer columns of every tidy table and prediction.
LAYER_COLUMNS: tuple[str, ...] = (*LAYER_FIELDS, *OUTPUT_FIELDS)
#: Fields a layer file or frame may leave out, and their values then.
LAYER_DEFAULTS: dict[str, int] = {
    "groups": 1, **{f"{q}_{a}": v for q, v in PER_AXIS.items() for a in AXES if q not in ("in", "kernel")},
    "in_d": 1, "kernel_d": 1,
}

FP32_BYTES = 4
#: Memory layouts of a layer's tensors: ``nchw`` is NC[D]HW activations with KC[T]RS filters
#: (every measurement in seer's tables); ``nhwc`` is channels-last, N[D]HWC with K[T]RSC.
LAYOUTS: tuple[str, ...] = ("nchw", "nhwc")
#: Every field is at most this: cuDNN describes tensors with 32-bit ints.
MAX_FIELD = 2**31 - 1


class ShapeError(ValueError):
    """An impossible layer; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


# The formulas below take Python ints (exact, for one layer) or numpy arrays (a frame).
def conv_out_width(in_width, kernel_width, stride, padding, dilation=1):
    """Output size along one axis, as cuDNN and every framework compute it."""
    return (in_width + 2 * padding - dilation * (kernel_width - 1) - 1) // stride + 1


def direct_macs(batch, in_ch, out_ch, groups, kernel_volume, out_volume):
    """Multiply-accumulates of the direct algorithm: N*K*(C/G)*(kernel volume)*(output volume)."""
    return batch * out_ch * (in_ch // groups) * kernel_volume * out_volume


def tensor_elements(batch, in_ch, out_ch, groups, in_volume, kernel_volume, out_volume) -> tuple:
    """Elements of the input, the filter and the output."""
    return (batch * in_ch * in_volume, out_ch * (in_ch // groups) * kernel_volume, batch * out_ch * out_volume)


@dataclass(frozen=True, order=True)
class ConvShape:
    """One forward convolution: NC[D]HW input, K(C/G)[T]RS filter, cross-correlation.

    Parameters
    ----------
    batch, in_ch, out_ch : int
    groups : int, default=1
        Both channel counts must be multiples of it; ``groups == in_ch`` is depthwise.
    dims : int, default=0
        2 or 3 spatial dimensions; 0 means 3 if any depth field differs from its default.
    in_d, in_h, in_w, kernel_d, kernel_h, kernel_w, stride_*, pad_*, dilation_* : int
        Per spatial axis. A 2D layer leaves the ``_d`` fields at 1 (``pad_d`` at 0).

    Raises
    ------
    ShapeError
        If a size is not a positive integer, a padding is negative, a channel count is not
        a multiple of ``groups``, or the (dilated) filter does not fit the padded input.
    """

    batch: int
    in_ch: int
    out_ch: int
    groups: int = 1
    dims: int = 0
    in_d: int = 1
    in_h: int = 1
    in_w: int = 1
    kernel_d: int = 1
    kernel_h: int = 1
    kernel_w: int = 1
    stride_d: int = 1
    stride_h: int = 1
    stride_w: int = 1
    pad_d: int = 0
    pad_h: int = 0
    pad_w: int = 0
    dilation_d: int = 1
    dilation_h: int = 1
    dilation_w: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ShapeError(f.name, f"must be an integer, got {value!r}")
            object.__setattr__(self, f.name, int(value))
        if self.dims == 0:
            depth_default = all(getattr(self, f"{q}_d") == v for q, v in PER_AXIS.items())
            object.__setattr__(self, "dims", 2 if depth_default else 3)
        problem = _first_problem({f.name: getattr(self, f.name) for f in fields(self)})
        if problem:
            raise ShapeError(*problem)

    # -- construction ------------------------------------------------------------------
    @classmethod
    def seer(cls, batch: int, in_ch: int, in_width: int, out_ch: int, out_width: int, kernel_width: int,
             stride: int, padding: int) -> "ConvShape":
        """A layer from SEER's eight numbers (square 2D); ``out_width`` must follow from the rest.

        Mistakes are named by SEER's field names, checked in SEER's field order.
        """
        values = dict(zip(SEER_FIELDS, (batch, in_ch, in_width, out_ch, out_width, kernel_width, stride, padding)))
        for name, value in values.items():
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise ShapeError(name, f"must be an integer, got {value!r}")
            low = 0 if name == "padding" else 1
            if not low <= value <= MAX_FIELD:
                raise ShapeError(name, f"must be between {low} and {MAX_FIELD}, got {value}")
        if kernel_width > in_width + 2 * padding:
            raise ShapeError("kernel_width", f"{kernel_width} is wider than the padded input "
                                             f"({in_width} + 2*{padding})")
        expected = conv_out_width(in_width, kernel_width, stride, padding)
        if out_width != expected:
            raise ShapeError("out_width", f"is {out_width}, but in_width={in_width}, kernel_width={kernel_width}, "
                                          f"stride={stride}, padding={padding} give {expected}")
        return cls.square(batch, in_ch, in_width, out_ch, kernel_width, stride, padding)

    @classmethod
    def square(cls, batch: int, in_ch: int, in_width: int, out_ch: int, kernel_width: int, stride: int = 1,
               padding: int = 0, **more: int) -> "ConvShape":
        """A 2D layer with a square input and kernel, equal stride and padding on both axes."""
        return cls(batch=batch, in_ch=in_ch, out_ch=out_ch, in_h=in_width, in_w=in_width, kernel_h=kernel_width,
                   kernel_w=kernel_width, stride_h=stride, stride_w=stride, pad_h=padding, pad_w=padding, **more)

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> "ConvShape":
        """A layer from a dict or table row: seer's layer fields, or SEER's eight."""
        if "in_h" in row:
            return cls(**{name: int(row[name]) for name in LAYER_FIELDS if name in row and not _missing(row[name])})
        return cls.seer(*(int(row[name]) for name in SEER_FIELDS))

    # -- derived sizes -----------------------------------------------------------------
    @property
    def is_3d(self) -> bool:
        return self.dims == 3

    @property
    def is_depthwise(self) -> bool:
        """One group per input channel (``groups == in_ch > 1``), as :data:`LAYER_KINDS` says."""
        return self.groups > 1 and self.groups == self.in_ch

    @property
    def out_d(self) -> int:
        return conv_out_width(self.in_d, self.kernel_d, self.stride_d, self.pad_d, self.dilation_d)

    @property
    def out_h(self) -> int:
        return conv_out_width(self.in_h, self.kernel_h, self.stride_h, self.pad_h, self.dilation_h)

    @property
    def out_w(self) -> int:
        return conv_out_width(self.in_w, self.kernel_w, self.stride_w, self.pad_w, self.dilation_w)

    def _axis(self, quantity: str) -> tuple[int, ...]:
        """A per-axis quantity over the layer's spatial axes, outermost first."""
        axes = AXES if self.is_3d else AXES[1:]
        return tuple(getattr(self, f"{quantity}_{a}") for a in axes)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the direct algorithm (:func:`direct_macs`)."""
        return direct_macs(self.batch, self.in_ch, self.out_ch, self.groups, math.prod(self._axis("kernel")),
                           math.prod(self._axis("out")))

    @property
    def flops(self) -> int:
        """Analytic FLOPs of the direct algorithm, a multiply-add counted as two."""
        return 2 * self.macs

    @property
    def tensor_elements(self) -> tuple[int, int, int]:
        """Elements of the input, the filter and the output (:func:`tensor_elements`)."""
        return tensor_elements(self.batch, self.in_ch, self.out_ch, self.groups, math.prod(self._axis("in")),
                               math.prod(self._axis("kernel")), math.prod(self._axis("out")))

    @property
    def tensor_bytes(self) -> int:
        """Bytes of input, filter and output in fp32: the least DRAM traffic possible."""
        return FP32_BYTES * sum(self.tensor_elements)

    # -- cuDNN descriptors -------------------------------------------------------------
    @property
    def input_dims(self) -> tuple[int, ...]:
        """NCHW (NCDHW for 3D) dimensions of the input tensor."""
        return (self.batch, self.in_ch, *self._axis("in"))

    @property
    def filter_dims(self) -> tuple[int, ...]:
        """K, C/groups, then the kernel's spatial sizes: cuDNN's grouped filter layout."""
        return (self.out_ch, self.in_ch // self.groups, *self._axis("kernel"))

    @property
    def output_dims(self) -> tuple[int, ...]:
        """NKPQ (NKOPQ for 3D) dimensions of the output tensor."""
        return (self.batch, self.out_ch, *self._axis("out"))

    def layout_order(self, layout: str) -> tuple[int, ...]:
        """The axes of an NC[D]HW tensor (or KC[T]RS filter) in ``layout``'s memory order:
        ``x.transpose(order)`` is the tensor laid out so."""
        if layout not in LAYOUTS:
            raise ValueError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
        spatial = tuple(range(2, 2 + len(self._axis("in"))))
        return (0, 1, *spatial) if layout == "nchw" else (0, *spatial, 1)

    @property
    def spatial_padding(self) -> tuple[int, ...]:
        return self._axis("pad")

    @property
    def spatial_stride(self) -> tuple[int, ...]:
        return self._axis("stride")

    @property
    def spatial_dilation(self) -> tuple[int, ...]:
        return self._axis("dilation")

    # -- SEER's special case -----------------------------------------------------------
    @property
    def is_seer(self) -> bool:
        """Whether SEER's eight numbers describe the layer: square 2D, ungrouped, undilated."""
        return (self.dims == 2 and self.groups == 1 and self.in_h == self.in_w and self.kernel_h == self.kernel_w
                and self.stride_h == self.stride_w and self.pad_h == self.pad_w
                and self.dilation_h == self.dilation_w == 1)

    @property
    def seer_fields(self) -> dict[str, int]:
        """SEER's eight numbers; ValueError for a layer they cannot describe."""
        if not self.is_seer:
            raise ValueError(f"SEER's format cannot describe {self}")
        return dict(zip(SEER_FIELDS, (self.batch, self.in_ch, self.in_w, self.out_ch, self.out_w, self.kernel_w,
                                      self.stride_w, self.pad_w)))

    # -- identity and formats ----------------------------------------------------------
    @property
    def key(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in LAYER_FIELDS)

    @property
    def shape_id(self) -> str:
        """Stable 12-hex-digit id of the layer (same on every machine and run).

        A layer SEER's format describes keeps the id seer 0.2 gave it (its eight numbers
        and three depths of 1), so that measurements taken then still join.
        """
        if self.is_seer:
            text = "-".join(str(v) for v in (*self.seer_fields.values(), 1, 1, 1))
        else:
            text = "layer-" + "-".join(str(v) for v in self.key)
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    def as_dict(self) -> dict[str, int]:
        """Every layer column (:data:`LAYER_COLUMNS`), output sizes included."""
        return {name: getattr(self, name) for name in LAYER_COLUMNS}

    def to_seer_line(self) -> str:
        """The layer as one line of SEER's Test-set-II format."""
        return " ".join(str(v) for v in self.seer_fields.values())

    def __str__(self) -> str:
        return describe(self.as_dict())


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and np.isnan(value))


@dataclass(frozen=True)
class _Rule:
    """One rule a layer must keep: ``broken(v)`` on a layer's fields, Python ints for one layer
    or int64 arrays for a frame (the same expression serves both), and what to tell the user."""

    field: str
    broken: Callable[[Mapping[str, Any]], Any]
    message: Callable[[Mapping[str, int]], str]


def _range_rule(name: str) -> _Rule:
    if name == "dims":
        return _Rule(name, lambda v: (v["dims"] != 2) & (v["dims"] != 3), lambda v: f"must be 2 or 3, got {v['dims']}")
    low = 0 if name.startswith("pad_") else 1
    return _Rule(name, lambda v: (v[name] < low) | (v[name] > MAX_FIELD),
                 lambda v: f"must be between {low} and {MAX_FIELD}, got {v[name]}")


def _multiple_rule(name: str) -> _Rule:
    return _Rule(name, lambda v: v[name] % v["groups"] != 0,
                 lambda v: f"{v[name]} is not a multiple of groups={v['groups']}")


def _depth_rule(quantity: str, default: int) -> _Rule:
    return _Rule(f"{quantity}_d", lambda v: (v["dims"] == 2) & (v[f"{quantity}_d"] != default),
                 lambda v: f"is {v[f'{quantity}_d']}, but a 2D layer has no depth (leave it {default})")


def _span_rule(a: str) -> _Rule:
    def broken(v):
        too_big = v[f"dilation_{a}"] * (v[f"kernel_{a}"] - 1) + 1 > v[f"in_{a}"] + 2 * v[f"pad_{a}"]
        return too_big if a != "d" else (v["dims"] == 3) & too_big

    def message(v):
        dilated = f" dilated by {v[f'dilation_{a}']}" if v[f"dilation_{a}"] > 1 else ""
        return f"{v[f'kernel_{a}']}{dilated} is larger than the padded input ({v[f'in_{a}']} + 2*{v[f'pad_{a}']})"

    return _Rule(f"kernel_{a}", broken, message)


#: Every rule a layer must keep, in the order they are reported: each field in range, then
#: channels that groups divide, no depth on a 2D layer, a kernel that fits the padded input.
#: ConvShape reports the first a layer breaks; :func:`invalid_layer_rows` checks a frame at once.
LAYER_RULES: tuple[_Rule, ...] = (*(_range_rule(name) for name in LAYER_FIELDS),
                                  *(_multiple_rule(name) for name in ("in_ch", "out_ch")),
                                  *(_depth_rule(q, default) for q, default in PER_AXIS.items()),
                                  *(_span_rule(a) for a in AXES))
#: How many rules check ranges: the rules after them may assume every field is in range.
_RANGE_RULES = len(LAYER_FIELDS)


def _first_problem(v: Mapping[str, int]) -> tuple[str, str] | None:
    """(field, message) of the first rule a layer's fields break, or None."""
    for rule in LAYER_RULES:
        if rule.broken(v):
            return rule.field, rule.message(v)
    return None


def describe(layer: Mapping[str, int]) -> str:
    """A readable one-line description, e.g. ``32x128x56x56 -> 128, 3x3 s1 p1 g32``."""
    axes = AXES if int(layer["dims"]) == 3 else AXES[1:]

    def per_axis(quantity: str, sep: str = "x") -> str:
        values = [str(int(layer[f"{quantity}_{a}"])) for a in axes]
        return values[0] if len(set(values)) == 1 and quantity != "kernel" and quantity != "in" else sep.join(values)

    text = (f"{layer['batch']}x{layer['in_ch']}x{per_axis('in')} -> {layer['out_ch']}, "
            f"{per_axis('kernel')} s{per_axis('stride', ',')} p{per_axis('pad', ',')}")
    if any(int(layer[f"dilation_{a}"]) != 1 for a in axes):
        text += f" d{per_axis('dilation', ',')}"
    if int(layer["groups"]) != 1:
        text += f" g{layer['groups']}"
    return text


# -- layer kinds --------------------------------------------------------------------------
@dataclass(frozen=True)
class LayerKind:
    """A kind of layer that reports group by; a layer may be of several kinds."""

    name: str
    description: str
    test: Callable[[LayerTable], np.ndarray]


def _spatial_pairs_differ(frame: LayerTable, quantity: str) -> np.ndarray:
    return _column(frame, f"{quantity}_h") != _column(frame, f"{quantity}_w")


def _column(frame: LayerTable, name: str) -> np.ndarray:
    """A column of a layer frame, or of a layer table's arrays, as a numpy array."""
    return np.asarray(frame[name])


LAYER_KINDS: tuple[LayerKind, ...] = (
    LayerKind("square", "2D, square input and kernel, ungrouped, undilated (SEER's layers)",
              lambda f: is_seer_layer(f)),
    LayerKind("grouped", "1 < groups < in_ch",
              lambda f: (_column(f, "groups") > 1) & (_column(f, "groups") < _column(f, "in_ch"))),
    LayerKind("depthwise", "groups == in_ch > 1",
              lambda f: (_column(f, "groups") > 1) & (_column(f, "groups") == _column(f, "in_ch"))),
    LayerKind("1xN", "2D with a non-square kernel (1x7, 7x1, ...)",
              lambda f: (_column(f, "dims") == 2) & _spatial_pairs_differ(f, "kernel")),
    LayerKind("non-square input", "2D with in_h != in_w",
              lambda f: (_column(f, "dims") == 2) & _spatial_pairs_differ(f, "in")),
    LayerKind("dilated", "any dilation above 1",
              lambda f: np.any([_column(f, f"dilation_{a}") > 1 for a in AXES], axis=0)),
    LayerKind("3D", "three spatial dimensions", lambda f: _column(f, "dims") == 3),
)
LAYER_KIND_NAMES: tuple[str, ...] = tuple(k.name for k in LAYER_KINDS)


def layer_kind_flags(frame: pd.DataFrame) -> pd.DataFrame:
    """One boolean column per :data:`LAYER_KINDS` entry, one row per layer of a layer frame."""
    import pandas as pd

    return pd.DataFrame(layer_kind_masks(frame), index=frame.index)


def layer_kind_masks(frame: LayerTable) -> dict[str, np.ndarray]:
    """Per :data:`LAYER_KINDS` entry, which layers of a layer frame (or layer table) are of it."""
    return {k.name: np.asarray(k.test(frame), dtype=bool) for k in LAYER_KINDS}


# -- frames of layers ---------------------------------------------------------------------
def is_seer_layer(frame: LayerTable) -> np.ndarray:
    """Which rows of a layer frame (or layer table) SEER's eight numbers describe (:attr:`ConvShape.is_seer`)."""
    f = {name: _column(frame, name) for name in LAYER_COLUMNS}
    return ((f["dims"] == 2) & (f["groups"] == 1) & (f["in_h"] == f["in_w"]) & (f["kernel_h"] == f["kernel_w"])
            & (f["stride_h"] == f["stride_w"]) & (f["pad_h"] == f["pad_w"]) & (f["dilation_h"] == 1)
            & (f["dilation_w"] == 1))


def seer_frame(frame: pd.DataFrame) -> pd.DataFrame:
    """SEER's eight columns of a layer frame whose rows are all :func:`is_seer_layer`."""
    import pandas as pd

    if not is_seer_layer(frame).all():
        raise ValueError("SEER's eight numbers describe only square, ungrouped, undilated 2D layers")
    return pd.DataFrame({"batch": frame["batch"], "in_ch": frame["in_ch"], "in_width": frame["in_w"],
                         "out_ch": frame["out_ch"], "out_width": frame["out_w"], "kernel_width": frame["kernel_w"],
                         "stride": frame["stride_w"], "padding": frame["pad_w"]}, index=frame.index).astype(np.int64)


def layer_frame(layers: pd.DataFrame | LayerTable | np.ndarray | Sequence[ConvShape]) -> pd.DataFrame:
    """:func:`layer_columns` as a frame: every layer column, one row per layer, in order (a
    frame's index kept)."""
    import pandas as pd

    columns = layer_columns(layers)
    return pd.DataFrame(columns, index=layers.index if isinstance(layers, pd.DataFrame) else None)


def layer_columns(layers: pd.DataFrame | LayerTable | np.ndarray | Sequence[ConvShape]) -> dict[str, np.ndarray]:
    """Every layer column (:data:`LAYER_COLUMNS`) as an int64 array, one value per layer, in order.

    Takes a frame with seer's layer columns (optional fields may be missing and take their
    defaults; ``dims`` then follows from the depth fields) or with SEER's eight columns, the
    same as a layer table (a mapping of column names to arrays, what
    :func:`seer.layers.files.iter_layer_tables` reads), an array whose columns are SEER's
    eight, or a sequence of :class:`ConvShape`. An empty (NaN) optional field takes its
    default too. Output sizes are computed; the rows are not checked
    (:func:`invalid_layer_rows` does that), and ``ValueError`` names missing columns. Needs
    no pandas unless given a frame.
    """
    if not hasattr(layers, "keys"):  # not a frame nor a mapping of columns
        if len(layers) and isinstance(layers[0], ConvShape):
            rows = [s.as_dict() for s in layers]
            return {name: np.array([row[name] for row in rows], dtype=np.int64) for name in LAYER_COLUMNS}
        array = np.asarray(layers, dtype=np.int64)
        if not len(array):  # no layers: no rows, whatever the shape of nothing
            array = array.reshape(0, len(SEER_FIELDS))
        elif array.ndim != 2:
            array = array.reshape(len(layers), -1)
        if array.shape[1] != len(SEER_FIELDS):
            raise ValueError(f"an array of layers needs SEER's {len(SEER_FIELDS)} columns ({' '.join(SEER_FIELDS)}), "
                             f"got {array.shape[1]}")
        layers = {name: array[:, i] for i, name in enumerate(SEER_FIELDS)}
    if "in_h" not in layers and "in_width" in layers:
        missing = [f for f in SEER_FIELDS if f not in layers]
        if missing:
            raise ValueError(f"layer columns missing: {', '.join(missing)}")
        layers = _from_seer_columns(layers)
    required = [f for f in LAYER_FIELDS if f not in LAYER_DEFAULTS and f != "dims"]
    missing = [f for f in required if f not in layers]
    if missing:
        raise ValueError(f"layer columns missing: {', '.join(missing)}")
    rows = table_rows(layers)
    out = {}
    for name in LAYER_FIELDS:
        if name in layers:
            column = layers[name]
            empty = _empty_cells(column)
            if name == "dims" and empty.any():
                continue  # follows from the depth fields below, as if the column were missing
            if empty.any():
                # A frame built from rows of several kinds leaves an optional field empty
                # where a row did not give it: the default, as if the column were missing.
                if name not in LAYER_DEFAULTS:
                    raise ValueError(f"layer column {name} is empty in {int(empty.sum())} rows")
                column = np.where(empty, LAYER_DEFAULTS[name], np.asarray(column, dtype=object))
            out[name] = np.asarray(column, dtype=np.int64)
        elif name != "dims":
            out[name] = np.full(rows, LAYER_DEFAULTS[name], dtype=np.int64)
    if "dims" not in out:
        deep = np.zeros(rows, dtype=bool)
        for q, default in PER_AXIS.items():
            deep |= out[f"{q}_d"] != default
        out["dims"] = np.where(deep, 3, 2).astype(np.int64)
    with np.errstate(divide="ignore", invalid="ignore"):  # zero strides: rows the check flags
        for a in AXES:
            stride = np.maximum(out[f"stride_{a}"], 1)
            out[f"out_{a}"] = conv_out_width(out[f"in_{a}"], out[f"kernel_{a}"], stride, out[f"pad_{a}"],
                                             out[f"dilation_{a}"])
    return {name: out[name] for name in LAYER_COLUMNS}


def _from_seer_columns(table: LayerTable) -> dict:
    """A table of SEER's eight columns as seer's layer fields (the square axes given twice)."""
    given = {"batch": "batch", "in_ch": "in_ch", "out_ch": "out_ch", "in_h": "in_width", "in_w": "in_width",
             "kernel_h": "kernel_width", "kernel_w": "kernel_width", "stride_h": "stride", "stride_w": "stride",
             "pad_h": "padding", "pad_w": "padding"}
    return {name: table[seer] for name, seer in given.items()}


def _empty_cells(column) -> np.ndarray:
    """Which cells of a column (a frame's, or an array) are empty: NaN or None."""
    if hasattr(column, "isna"):
        return column.isna().to_numpy()
    values = np.asarray(column)
    if values.dtype.kind == "f":
        return np.isnan(values)
    if values.dtype == object:
        return np.array([v is None or v != v for v in values.tolist()], dtype=bool)
    return np.zeros(len(values), dtype=bool)


def table_rows(table: pd.DataFrame | LayerTable) -> int:
    """The rows of a frame or of a layer table (a mapping of columns, whose ``len`` counts columns)."""
    if hasattr(table, "columns"):
        return len(table)
    return len(next(iter(table.values()))) if len(table) else 0


def invalid_layer_rows(frame: pd.DataFrame) -> np.ndarray:
    """Which rows of a :func:`layer_frame` are not valid layers: :data:`LAYER_RULES` on the
    whole frame at once (a row is flagged exactly when ``ConvShape`` would raise)."""
    v = {name: np.asarray(frame[name], dtype=np.int64) for name in LAYER_FIELDS}
    bad = np.zeros(table_rows(frame), dtype=bool)
    for rule in LAYER_RULES[:_RANGE_RULES]:
        bad |= rule.broken(v)
    # Rows out of range are flagged already; clipped, they keep the other rules' sums inside
    # int64 and their divisions away from zero.
    clipped = {name: np.clip(v[name], 0, MAX_FIELD + 1) for name in LAYER_FIELDS}
    clipped["groups"] = np.maximum(clipped["groups"], 1)
    for rule in LAYER_RULES[_RANGE_RULES:]:
        bad |= rule.broken(clipped)
    return bad


def row_error(frame: pd.DataFrame, i: int) -> ShapeError:
    """The :class:`ShapeError` ``ConvShape`` raises for row ``i`` (0-based) of a layer frame,
    a row :func:`invalid_layer_rows` flagged."""
    try:
        ConvShape(**{name: int(np.asarray(frame[name])[i]) for name in LAYER_FIELDS})
    except ShapeError as exc:
        return exc
    raise AssertionError(f"row {i + 1} failed the vectorised check only")


def check_layer_frame(frame: pd.DataFrame, where: Callable[[int], str] = lambda i: f"layer {i + 1}") -> None:
    """ShapeError for the first invalid row of a layer frame, worded by :class:`ConvShape`."""
    bad = np.flatnonzero(invalid_layer_rows(frame))
    if len(bad):
        exc = row_error(frame, int(bad[0]))
        raise ShapeError(exc.field, f"{exc.message} ({where(int(bad[0]))})")


def frame_volumes(frame: pd.DataFrame) -> dict[str, np.ndarray]:
    """Input, kernel and output volumes (product over the spatial axes) per row, as floats."""
    return {q: np.prod([np.asarray(frame[f"{q}_{a}"], dtype=float) for a in AXES], axis=0)
            for q in ("in", "kernel", "out")}


def frame_tensor_bytes(frame: pd.DataFrame) -> np.ndarray:
    """Bytes of the FP32 input, filter and output together, per row of a layer frame, as floats."""
    vol = frame_volumes(frame)
    n, c, k, g = (np.asarray(frame[f], dtype=float) for f in ("batch", "in_ch", "out_ch", "groups"))
    return FP32_BYTES * sum(tensor_elements(n, c, k, g, vol["in"], vol["kernel"], vol["out"]))


def frame_flops(frame: pd.DataFrame) -> np.ndarray:
    """Analytic FLOPs (a multiply-add counts two) per row of a layer frame, as floats."""
    vol = frame_volumes(frame)
    return 2.0 * direct_macs(*(np.asarray(frame[f], dtype=float) for f in ("batch", "in_ch", "out_ch", "groups")),
                             vol["kernel"], vol["out"])

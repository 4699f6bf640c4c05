"""Convolution layer shapes: the first stage of seer's data flow.

A :class:`ConvShape` is one forward convolution in SEER's terms: square images and
square filters, ``batch in_ch in_width out_ch out_width kernel_width stride padding``.
Depth fields are present (all 1 for 2D) so that 3D convolutions need no schema change.
Here are the output-width rule, the analytic work and traffic (:func:`direct_macs`,
:func:`tensor_elements`: the one place these formulas live, for one shape or a whole
frame of them), the check of a frame of shapes (:func:`shape_frame`), and a stable
``shape_id`` used to key, join and split measurements.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, fields
from typing import Any, Mapping, Sequence

import numpy as np
import pandas as pd

#: The eight integers of SEER's shape format, in file order.
SEER_FIELDS: tuple[str, ...] = (
    "batch",
    "in_ch",
    "in_width",
    "out_ch",
    "out_width",
    "kernel_width",
    "stride",
    "padding",
)
#: All shape columns of seer's tidy tables (SEER's eight, then the 3D extension).
SHAPE_COLUMNS: tuple[str, ...] = SEER_FIELDS + ("in_depth", "kernel_depth", "out_depth")

FP32_BYTES = 4
#: Every shape field is at most this: cuDNN describes tensors with 32-bit ints.
MAX_FIELD = 2**31 - 1


class ShapeError(ValueError):
    """An impossible shape; ``field`` names the offending field."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


def conv_out_width(in_width: int, kernel_width: int, stride: int, padding: int) -> int:
    """Output width of a convolution (dilation 1), as cuDNN and every framework compute it."""
    return (in_width + 2 * padding - kernel_width) // stride + 1


# The formulas below take Python ints (exact, for one shape) or numpy arrays (a frame).
def direct_macs(batch, in_ch, out_ch, kernel_width, out_width, kernel_depth=1, out_depth=1):
    """Multiply-accumulates of the direct algorithm: N*K*C*R*S*P*Q (times the depths)."""
    return batch * out_ch * in_ch * kernel_width**2 * kernel_depth * out_width**2 * out_depth


def tensor_elements(batch, in_ch, in_width, out_ch, out_width, kernel_width, in_depth=1, kernel_depth=1,
                    out_depth=1) -> tuple:
    """Elements of the input, the filter and the output."""
    return (batch * in_ch * in_width**2 * in_depth,
            out_ch * in_ch * kernel_width**2 * kernel_depth,
            batch * out_ch * out_width**2 * out_depth)


@dataclass(frozen=True, order=True)
class ConvShape:
    """One forward convolution: NCHW input, KCRS filter, square images and filters.

    Parameters
    ----------
    batch, in_ch, in_width, out_ch, out_width, kernel_width, stride, padding : int
        SEER's eight fields. ``out_width`` must equal
        ``(in_width + 2*padding - kernel_width) // stride + 1``.
    in_depth, kernel_depth : int, default=1
        Depth of a 3D input and filter; both 1 for 2D. A 3D convolution uses the same
        stride and padding along depth as along width.

    Raises
    ------
    ShapeError
        If a size is not a positive integer, padding is negative, the filter does not fit
        the padded input, or ``out_width`` does not follow from the other fields.
    """

    batch: int
    in_ch: int
    in_width: int
    out_ch: int
    out_width: int
    kernel_width: int
    stride: int
    padding: int
    in_depth: int = 1
    kernel_depth: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ShapeError(f.name, f"must be an integer, got {value!r}")
            low = 0 if f.name == "padding" else 1
            if not low <= value <= MAX_FIELD:
                raise ShapeError(f.name, f"must be between {low} and {MAX_FIELD}, got {value}")
        if self.kernel_width > self.in_width + 2 * self.padding:
            raise ShapeError(
                "kernel_width",
                f"{self.kernel_width} is wider than the padded input "
                f"({self.in_width} + 2*{self.padding})",
            )
        expected = conv_out_width(self.in_width, self.kernel_width, self.stride, self.padding)
        if self.out_width != expected:
            raise ShapeError(
                "out_width",
                f"is {self.out_width}, but in_width={self.in_width}, kernel_width="
                f"{self.kernel_width}, stride={self.stride}, padding={self.padding} "
                f"give {expected}",
            )
        if self.is_3d and self.kernel_depth > self.in_depth + 2 * self.padding:
            raise ShapeError("kernel_depth", "is deeper than the padded input")

    # -- construction ------------------------------------------------------------------
    @classmethod
    def from_layer(
        cls,
        batch: int,
        in_ch: int,
        in_width: int,
        out_ch: int,
        kernel_width: int,
        stride: int = 1,
        padding: int = 0,
        *,
        in_depth: int = 1,
        kernel_depth: int = 1,
    ) -> "ConvShape":
        """Build a shape from a layer definition, deriving ``out_width``."""
        out_width = conv_out_width(in_width, kernel_width, stride, padding)
        return cls(batch, in_ch, in_width, out_ch, out_width, kernel_width, stride, padding,
                   in_depth, kernel_depth)

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any]) -> "ConvShape":
        """Build a shape from a dict or a table row holding (at least) SEER's eight fields."""
        values = {name: int(row[name]) for name in SEER_FIELDS}
        for name in ("in_depth", "kernel_depth"):
            if name in row and row[name] is not None:
                values[name] = int(row[name])
        return cls(**values)

    # -- derived sizes -----------------------------------------------------------------
    @property
    def is_3d(self) -> bool:
        return self.in_depth > 1 or self.kernel_depth > 1

    @property
    def out_depth(self) -> int:
        if not self.is_3d:
            return 1
        return conv_out_width(self.in_depth, self.kernel_depth, self.stride, self.padding)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the direct algorithm (:func:`direct_macs`)."""
        return direct_macs(self.batch, self.in_ch, self.out_ch, self.kernel_width, self.out_width,
                           self.kernel_depth, self.out_depth)

    @property
    def flops(self) -> int:
        """Analytic FLOPs of the direct algorithm, a multiply-add counted as two."""
        return 2 * self.macs

    @property
    def tensor_elements(self) -> tuple[int, int, int]:
        """Elements of the input, the filter and the output (:func:`tensor_elements`)."""
        return tensor_elements(self.batch, self.in_ch, self.in_width, self.out_ch, self.out_width,
                               self.kernel_width, self.in_depth, self.kernel_depth, self.out_depth)

    @property
    def tensor_bytes(self) -> int:
        """Bytes of input, filter and output in fp32: the least DRAM traffic possible."""
        return FP32_BYTES * sum(self.tensor_elements)

    # -- cuDNN descriptors -------------------------------------------------------------
    @property
    def input_dims(self) -> tuple[int, ...]:
        """NCHW (NCDHW for 3D) dimensions of the input tensor."""
        depth = (self.in_depth,) if self.is_3d else ()
        return (self.batch, self.in_ch, *depth, self.in_width, self.in_width)

    @property
    def filter_dims(self) -> tuple[int, ...]:
        """KCRS (KCTRS for 3D) dimensions of the filter."""
        depth = (self.kernel_depth,) if self.is_3d else ()
        return (self.out_ch, self.in_ch, *depth, self.kernel_width, self.kernel_width)

    @property
    def output_dims(self) -> tuple[int, ...]:
        """NKPQ (NKOPQ for 3D) dimensions of the output tensor."""
        depth = (self.out_depth,) if self.is_3d else ()
        return (self.batch, self.out_ch, *depth, self.out_width, self.out_width)

    @property
    def spatial_padding(self) -> tuple[int, ...]:
        """Padding per spatial dimension, as cuDNN's descriptors take it."""
        return (self.padding,) * (3 if self.is_3d else 2)

    @property
    def spatial_stride(self) -> tuple[int, ...]:
        """Stride per spatial dimension, as cuDNN's descriptors take it."""
        return (self.stride,) * (3 if self.is_3d else 2)

    # -- identity and formats ----------------------------------------------------------
    @property
    def key(self) -> tuple[int, ...]:
        return tuple(getattr(self, name) for name in SHAPE_COLUMNS)

    @property
    def shape_id(self) -> str:
        """Stable 12-hex-digit id of the shape (same on every machine and run)."""
        text = "-".join(str(v) for v in self.key)
        return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()

    def as_dict(self) -> dict[str, int]:
        """All shape columns, ``out_depth`` included."""
        d = asdict(self)
        d["out_depth"] = self.out_depth
        return {name: d[name] for name in SHAPE_COLUMNS}

    def to_seer_line(self) -> str:
        """The shape as one line of SEER's Test-set-II format."""
        return " ".join(str(getattr(self, name)) for name in SEER_FIELDS)

    def __str__(self) -> str:
        text = (
            f"N{self.batch} C{self.in_ch} {self.in_width}px -> K{self.out_ch} "
            f"{self.out_width}px, {self.kernel_width}x{self.kernel_width}/s{self.stride}"
            f"/p{self.padding}"
        )
        if self.is_3d:
            text += f", depth {self.in_depth}->{self.out_depth} k{self.kernel_depth}"
        return text


# -- frames of shapes ---------------------------------------------------------------------
def shape_frame(shapes: pd.DataFrame | np.ndarray | Sequence[ConvShape]) -> pd.DataFrame:
    """SEER's eight columns as int64, one row per shape, in the given order.

    Takes a frame holding (at least) those columns, an array whose first eight columns are
    them, or a sequence of :class:`ConvShape`; ``ValueError`` names missing columns.
    """
    if isinstance(shapes, pd.DataFrame):
        missing = [f for f in SEER_FIELDS if f not in shapes.columns]
        if missing:
            raise ValueError(f"shape columns missing: {', '.join(missing)}")
        return shapes[list(SEER_FIELDS)].astype(np.int64)
    if len(shapes) and isinstance(shapes[0], ConvShape):
        return pd.DataFrame([[getattr(s, f) for f in SEER_FIELDS] for s in shapes], columns=list(SEER_FIELDS),
                            dtype=np.int64)
    array = np.asarray(shapes, dtype=np.int64).reshape(len(shapes), -1)
    if array.shape[1] < len(SEER_FIELDS):
        raise ValueError(f"shapes need {len(SEER_FIELDS)} columns ({' '.join(SEER_FIELDS)}), got {array.shape[1]}")
    return pd.DataFrame(array[:, : len(SEER_FIELDS)], columns=list(SEER_FIELDS))


def frame_flops(shapes: pd.DataFrame) -> np.ndarray:
    """Analytic FLOPs (a multiply-add counts two) per row of a shape frame, as floats."""
    columns = {f: shapes[f].to_numpy(dtype=float) for f in ("batch", "in_ch", "out_ch", "kernel_width", "out_width")}
    return 2.0 * direct_macs(**columns)

"""seer's own kernels as plans: which layers each takes, and the kernel, tile and launch it
runs there, decided on the CPU from the shape alone (:mod:`seer.gpu.kernels` compiles and
runs them).

The implicit GEMM's tile is chosen per layer from :data:`TILE_ORDER` (:func:`plan`); the
tile is the variant, and it is in the kernel's name, which :data:`seer.algorithms.KERNEL_RULES`
reads. :func:`unsupported_reason` is the exact support rule the models use for these
algorithms, and :func:`tap_table` the per-layer table of filter taps the implicit GEMM reads.
The implicit GEMMs also run channels-last tensors (``layout="nhwc"``, a kernel of its own);
seer's tables and models are NC[D]HW throughout.
"""

from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING

import numpy as np

from seer.algorithms import classify_kernel
from seer.hardware.gpus import get_gpu_spec
from seer.layers.shapes import LAYOUTS, ConvShape, LayerTable, frame_volumes, table_rows, tensor_elements

if TYPE_CHECKING:  # imported where used: seer predict computes on layer tables, without pandas
    import pandas as pd

#: Largest element count of any tensor: the kernels index within a tensor in 32 bits.
MAX_ELEMENTS = 2**31 - 1
#: The GPU whose SMs :func:`plan` sizes launches for when not told, its count read from the GPU
#: table at first use (not at import: ``seer predict`` reads no GPU table); :func:`forward`
#: tells it the current GPU's.
DEFAULT_SMS_GPU = "h100"

@dataclass(frozen=True)
class Tile:
    """An implicit-GEMM block tile: BM output positions x BN output channels, BK deep; each
    thread holds TM x TN outputs; MINB blocks per SM must fit in the registers; STAGES
    slices of the reduction are in flight."""

    bm: int
    bn: int
    bk: int
    tm: int
    tn: int
    minb: int
    stages: int

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    def kernel(self, split: bool, layout: str = "nchw") -> str:
        name = "seer_implicit_gemm" if layout == "nchw" else "seer_implicit_gemm_nhwc"
        return (f"{name}<{self.bm}, {self.bn}, {self.bk}, {self.tm}, {self.tn}, {int(split)}, "
                f"{self.minb}, {self.stages}>")


#: Every tile compiled, by name; :func:`plan` picks one per layer (``tile=`` overrides it).
#: All are BK = 8 deep, the depth :func:`tap_table` pads the reduction to.
GEMM_TILES = {t_name: Tile(*t_fields) for t_name, t_fields in {
    "256x64_8x8": (256, 64, 8, 8, 8, 2, 3),
    "128x128_8x8": (128, 128, 8, 8, 8, 2, 3),
    "128x128_8x8_s4": (128, 128, 8, 8, 8, 2, 4),
    "128x128_8x8_b1": (128, 128, 8, 8, 8, 1, 3),
    "128x64_8x8": (128, 64, 8, 8, 8, 2, 3),
    "64x64_8x4": (64, 64, 8, 8, 4, 2, 3),
    "64x64_4x4": (64, 64, 8, 4, 4, 2, 3),
    "256x32_8x4": (256, 32, 8, 8, 4, 2, 3),
    "128x32_8x4": (128, 32, 8, 8, 4, 2, 3),
    "64x32_4x4": (64, 32, 8, 4, 4, 2, 3),
}.items()}
#: The tiles :func:`plan` picks from, from the most outputs per block to the fewest. A layer
#: gets the first whose channel width its channels fill and that makes at least
#: :data:`MIN_BLOCKS_PER_SM` blocks per SM, else the last that its channels fill. The order
#: and the thresholds come from timing every tile on CosmoFlow's, the 3D U-Net's and the
#: networks grid's layers on the H100 (benchmarks/kernel_tiles.py, which also scores this rule).
TILE_ORDER = ("256x64_8x8", "128x64_8x8", "64x64_4x4", "64x32_4x4")
MIN_BLOCKS_PER_SM = {"SEER_IMPLICIT_GEMM": 1.5, "SEER_IMPLICIT_GEMM_SPLITK": 1.0}
#: seer's implicit GEMMs: the algorithms whose tiles :data:`MIN_BLOCKS_PER_SM` chooses.
IMPLICIT_GEMMS = tuple(MIN_BLOCKS_PER_SM)
#: Algorithms whose every plan splits the reduction, its slices adding into an output zeroed
#: before each call (:func:`plan` makes at least two).
SPLITS_ALWAYS = ("SEER_IMPLICIT_GEMM_SPLITK",)
#: Channels of one filter tap that a slice of the channels-last implicit GEMM holds (its BK).
CHANNELS_LAST_SLICE = 8
#: Output channels per thread of the direct kernel.
DIRECT_CHANNELS = (1, 4, 8)
#: Output columns per thread of the channels-last direct kernel, which reads each filter value
#: once for all of them (its NC[D]HW twin takes one), by tile name (``tile=`` of :func:`plan`).
#: :func:`plan` takes the most that still make :data:`DIRECT_MIN_BLOCKS_PER_SM` blocks per SM.
DIRECT_TILES = {"p8": 8, "p4": 4, "p2": 2, "p1": 1}
DIRECT_COLUMNS = tuple(DIRECT_TILES.values())
DIRECT_MIN_BLOCKS_PER_SM = 2
THREADS_DIRECT = 256


@dataclass(frozen=True)
class Plan:
    """How one of seer's algorithms runs one layer: the kernel, its launch, its variant."""

    algo: str
    kernel: str  # the template instance, as CUDA names it
    grid: tuple[int, int, int]
    block: int
    splits: int = 1
    tiles_per_split: int = 0

    @property
    def variant(self) -> str:
        """The tile, read from the kernel's name by the kernel rules, as for cuDNN's kernels."""
        return classify_kernel(self.kernel).variant


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _refusals(algo: str, largest_tensor, k_tiles) -> tuple:
    """(refused, why) per rule: for one layer (numbers) or a whole frame (arrays)."""
    return ((largest_tensor > MAX_ELEMENTS, f"a tensor has more than {MAX_ELEMENTS} elements (32-bit indexing)"),
            (algo == "SEER_IMPLICIT_GEMM_SPLITK" and k_tiles < 4,
             "the reduction (input channels per group x filter taps) is under 4 slices of 8: nothing to split"))


def unsupported_reason(algo: str, shape: ConvShape, layout: str = "nchw") -> str | None:
    """Why ``algo`` cannot run ``shape`` with tensors in ``layout`` (None if it can);
    decided without a GPU."""
    for refused, why in _refusals(algo, max(shape.tensor_elements), _k_tiles(shape)):
        if refused:
            return why
    if layout not in LAYOUTS:
        return f"layout {layout!r} is not one of {', '.join(LAYOUTS)}"
    if layout == "nhwc" and algo != "SEER_DIRECT":
        if (shape.in_ch // shape.groups) % CHANNELS_LAST_SLICE:
            return (f"channels-last needs input channels per group a multiple of {CHANNELS_LAST_SLICE} "
                    "(a slice of the reduction is that many channels of one filter tap)")
    return None


def aligned_bytes(algo: str, layout: str) -> int:
    """Bytes that the input's and the filter's addresses must be a multiple of for ``algo`` in
    ``layout`` (0: any fp32 address): the channels-last implicit GEMM copies 16 bytes at a time."""
    return 16 if layout == "nhwc" and algo in IMPLICIT_GEMMS else 0


def runs_layers(algo: str, layers: pd.DataFrame | LayerTable) -> np.ndarray:
    """Whether ``algo`` runs each layer of a layer frame (:func:`seer.layers.shapes.layer_frame`):
    :func:`unsupported_reason`'s rules, over the whole frame at once."""
    vol = frame_volumes(layers)
    columns = (np.asarray(layers[c], dtype=float) for c in ("batch", "in_ch", "out_ch", "groups"))
    largest = np.max(tensor_elements(*columns, vol["in"], vol["kernel"], vol["out"]), axis=0)
    k_tiles = _slices(np.asarray(layers["in_ch"], dtype=float) // np.asarray(layers["groups"], dtype=float)
                      * vol["kernel"])
    runs = np.ones(table_rows(layers), dtype=bool)
    for refused, _ in _refusals(algo, largest, k_tiles):
        runs &= ~np.asarray(refused, dtype=bool)
    return runs


def _blocks(shape: ConvShape, tile: Tile) -> int:
    """Blocks of one reduction slice: position tiles x channel tiles x groups."""
    positions = shape.batch * shape.out_d * shape.out_h * shape.out_w
    return _ceil(positions, tile.bm) * _ceil(shape.out_ch // shape.groups, tile.bn) * shape.groups


def _k_tiles(shape: ConvShape) -> int:
    return _slices(shape.in_ch // shape.groups * shape.kernel_d * shape.kernel_h * shape.kernel_w)


def _slices(reduction):
    """Slices of 8 of the reduction (input channels per group x filter taps)."""
    return _ceil(reduction, 8)


def plan(algo: str, shape: ConvShape, tile: str | None = None, sms: int | None = None,
         layout: str = "nchw") -> Plan:
    """The kernel and launch of ``algo`` for ``shape`` (which it must support) on a GPU of
    ``sms`` SMs (None: :data:`DEFAULT_SMS_GPU`'s), tensors in ``layout``; ``tile``, a name of
    :data:`GEMM_TILES`, overrides the implicit GEMM's choice (the same in both layouts), and one
    of :data:`DIRECT_TILES` the channels-last direct kernel's."""
    if sms is None:
        sms = get_gpu_spec(DEFAULT_SMS_GPU).sm_count
    reason = unsupported_reason(algo, shape, layout)
    if reason:
        raise ValueError(f"{algo} does not run {shape}: {reason}")
    k_per_group = shape.out_ch // shape.groups
    positions = shape.batch * shape.out_d * shape.out_h * shape.out_w
    if algo == "SEER_DIRECT":
        kpt = 1 if k_per_group == 1 else 4 if k_per_group <= 8 else 8
        channel_blocks = shape.groups * _ceil(k_per_group, kpt)
        if layout == "nchw":
            blocks = _ceil(channel_blocks * positions, THREADS_DIRECT)
            return Plan(algo, f"seer_direct_conv<{kpt}>", (blocks, 1, 1), THREADS_DIRECT)
        rows = positions // shape.out_w

        def blocks_of(ppt: int) -> int:  # a thread per ppt columns of a row, per channel block
            return _ceil(channel_blocks * rows * _ceil(shape.out_w, ppt), THREADS_DIRECT)

        if tile is not None:
            ppt = DIRECT_TILES[tile]
        else:
            fills = [ppt for ppt in DIRECT_COLUMNS if blocks_of(ppt) >= DIRECT_MIN_BLOCKS_PER_SM * sms]
            ppt = fills[0] if fills else DIRECT_COLUMNS[-1]
        return Plan(algo, f"seer_direct_conv_nhwc<{kpt}, {ppt}>", (blocks_of(ppt), 1, 1), THREADS_DIRECT)
    if algo not in IMPLICIT_GEMMS:
        raise KeyError(f"{algo} is not one of seer's kernels")
    if tile is None:
        width = 32 if k_per_group <= 32 else 64 if k_per_group <= 64 else 128
        fitting = [name for name in TILE_ORDER if GEMM_TILES[name].bn <= width]
        enough = MIN_BLOCKS_PER_SM[algo] * sms
        tile = next((name for name in fitting if _blocks(shape, GEMM_TILES[name]) >= enough), fitting[-1])
    t = GEMM_TILES[tile]
    blocks = _blocks(shape, t)
    k_tiles = _k_tiles(shape)
    splits, per_split = 1, k_tiles
    split = algo == "SEER_IMPLICIT_GEMM_SPLITK"
    if split:
        # Two blocks per SM, each slice at least two tiles deep.
        splits = max(2, min(_ceil(2 * sms, blocks), k_tiles // 2))
        per_split = _ceil(k_tiles, splits)
        splits = _ceil(k_tiles, per_split)
    return Plan(algo, t.kernel(split, layout), (_ceil(positions, t.bm), _ceil(k_per_group, t.bn), shape.groups * splits),
                t.threads, splits, per_split)


#: A tap that fails every bounds check: the padding of the table to whole slices reads zeros.
_NO_TAP = 1 << 29


def tap_table(shape: ConvShape, layout: str = "nchw"):
    """The filter taps the implicit GEMM reads, as int32 x 4 (the kernel's ``int4``): the
    input offset from an output position's corner, and the depth, row and column steps
    that the bounds checks add. NC[D]HW: one per reduction index (input channel of the
    group, filter tap), padded to whole slices of 8. Channels-last: one per slice of 8
    channels of one tap, the offset including the slice's first channel."""
    cg, hw = shape.in_ch // shape.groups, shape.in_h * shape.in_w
    if layout == "nhwc":
        first = np.arange(0, cg * shape.kernel_d * shape.kernel_h * shape.kernel_w, CHANNELS_LAST_SLICE)
        tap, c = np.divmod(first, cg)
        t, rest = np.divmod(tap, shape.kernel_h * shape.kernel_w)
        r, s = np.divmod(rest, shape.kernel_w)
        dt, dr, ds = t * shape.dilation_d, r * shape.dilation_h, s * shape.dilation_w
        offset = ((dt * shape.in_h + dr) * shape.in_w + ds) * shape.in_ch + c
        return np.stack([offset, dt, dr, ds], axis=-1).astype(np.int32)
    c, t, r, s = np.meshgrid(np.arange(cg), np.arange(shape.kernel_d),
                             np.arange(shape.kernel_h), np.arange(shape.kernel_w), indexing="ij")
    dt, dr, ds = t * shape.dilation_d, r * shape.dilation_h, s * shape.dilation_w
    offset = c * shape.in_d * hw + dt * hw + dr * shape.in_w + ds
    taps = np.stack([offset, dt, dr, ds], axis=-1).reshape(-1, 4)
    padded = np.full((_k_tiles(shape) * 8, 4), _NO_TAP, dtype=np.int32)
    padded[: len(taps)] = taps
    return padded

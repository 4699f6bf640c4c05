"""Grids of layer shapes to measure.

Named grids:

``seer``
    SEER's generated ranges (batch, channels, width, kernel 1/3/5/7, stride, padding),
    sampled reproducibly: the full cartesian product is filtered to shapes that are
    possible and bounded in work and memory, then a seeded sample is drawn per
    (kernel, stride) stratum so every kernel size and stride is well covered.
``random``
    Shapes drawn at random (seeded) beyond SEER's power-of-two ranges: any width from 4 to
    320, channel counts that are multiples of 8 or arbitrary, batches that are not powers
    of two. Real layers have sizes like these (Inception's 35x35 maps with 288 channels,
    YOLO's 255 output channels), and tile quantisation makes time a jagged function of
    them, so a model trained on powers of two alone extrapolates badly between them.
    Shapes of the other grids, Test-set-II's included, are left out.
``random-extra``
    4,000 more shapes drawn like ``random`` (another seed), in no other grid.
``census``
    Shapes that are only asked about, never run (``seer collect --census``): cuDNN's answers
    on support and workspace, the labels of the models' first stage. Drawn like ``random``
    (and, for 30% of them, from SEER's value sets), up to 8 times more work, and none of
    them a shape of a timed grid, so that the first stage's answers on timed shapes are as
    good as on new ones.
``networks``
    The convolution layers of ResNet-50/152, VGG-16, DenseNet-121, AlexNet and GoogLeNet
    at several batch sizes (the training networks).
``test-set-ii``
    Layers of other networks (see :data:`seer.layers.known_networks.TEST_SET_II_NETWORKS`) that are not
    in the two grids above: the held-out Test-set-II.
``sparse-seed``
    The layers of the cuSNN seed's sparse experiments: DenseNet-121/169/201 and
    ResNet-101/152 at 224x224, batches 1, 2, 4 and 8 (timed on sparse inputs).
``quick``
    Twenty small shapes for tests and smoke runs.

Any other grid name is read as a layer file in SEER's Test-set-II format (see
:mod:`seer.layers.files`, which reads and writes that format; its ConvShape-list functions are
imported here for older callers).
"""

from __future__ import annotations

import functools
import itertools
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator, Sequence

import numpy as np

if TYPE_CHECKING:  # annotations only: grids need no pandas to draw
    import pandas as pd

from seer.errors import InputError
from seer.layers import known_networks as networks
from seer.layers.files import read_layers
# Imported back for callers that read and write layer files through this module.
from seer.layers.files import format_shapes, parse_shapes, read_shapes_file, write_shapes_file  # noqa: F401
from seer.layers.shapes import FP32_BYTES, ConvShape, ShapeError, conv_out_width, direct_macs, tensor_elements


@dataclass(frozen=True)
class GridShape:
    """A shape and the grid it came from (the grid decides the dataset split)."""

    shape: ConvShape
    grid: str


# -- SEER's ranges ------------------------------------------------------------------------
SEER_BATCHES = (1, 8, 16, 32, 64, 128)
SEER_CHANNELS = (3, 16, 32, 64, 128, 256, 512, 1024)
SEER_WIDTHS = (7, 10, 14, 16, 28, 32, 40, 56, 64, 80, 112, 128, 160, 224)
SEER_KERNELS = (1, 3, 5, 7)
#: SEER sampled strides 1-4 alike; real networks (and FFT/Winograd, which need stride 1)
#: are mostly stride 1, so the sample gives stride 1 half of the shapes.
SEER_STRIDE_WEIGHTS = {1: 0.5, 2: 0.3, 3: 0.1, 4: 0.1}
#: Bounds that keep one measurement short and the tensors well inside GPU memory. SEER
#: filtered its grid by run time (1 ms to 1 s on a Titan Xp); seer bounds the analytic
#: work instead, which needs no GPU to evaluate.
SEER_MAX_FLOPS = 5e10
SEER_MAX_TENSOR_BYTES = 2 * 2**30
SEER_DEFAULT_SIZE = 1200
NETWORK_BATCHES = (1, 8, 32)


@functools.cache
def _seer_candidates() -> tuple[ConvShape, ...]:
    out = []
    for batch, in_ch, width, out_ch, kernel, stride in itertools.product(
        SEER_BATCHES, SEER_CHANNELS, SEER_WIDTHS, SEER_CHANNELS, SEER_KERNELS, SEER_STRIDE_WEIGHTS
    ):
        for padding in sorted({0, kernel // 2}):
            if kernel > width + 2 * padding:
                continue
            out_width = conv_out_width(width, kernel, stride, padding)
            # The bounds first, in plain arithmetic: most candidates fall outside them.
            flops = 2 * direct_macs(batch, in_ch, out_ch, 1, kernel * kernel, out_width * out_width)
            elements = tensor_elements(batch, in_ch, out_ch, 1, width * width, kernel * kernel, out_width * out_width)
            if flops <= SEER_MAX_FLOPS and FP32_BYTES * sum(elements) <= SEER_MAX_TENSOR_BYTES:
                out.append(ConvShape.seer(batch, in_ch, width, out_ch, out_width, kernel, stride, padding))
    return tuple(out)


def seer_grid(size: int = SEER_DEFAULT_SIZE, seed: int = 0) -> list[ConvShape]:
    """A reproducible sample of ``size`` shapes from SEER's ranges (see module docstring)."""
    candidates = _seer_candidates()
    rng = np.random.default_rng(seed)
    strata: dict[tuple[int, int], list[ConvShape]] = {}
    for shape in candidates:
        strata.setdefault((shape.kernel_w, shape.stride_w), []).append(shape)
    chosen: list[ConvShape] = []
    for (kernel, stride), members in sorted(strata.items()):
        share = SEER_STRIDE_WEIGHTS[stride] / len(SEER_KERNELS)
        take = min(len(members), int(round(size * share)))
        picks = rng.choice(len(members), size=take, replace=False)
        chosen.extend(members[i] for i in sorted(picks))
    return chosen


def seer_extra_grid(size: int = 1800, seed: int = 1) -> list[ConvShape]:
    """A second sample of SEER's ranges (another seed), less the shapes of :func:`seer_grid`:
    more training shapes for models that predict from the shape alone."""
    first = set(seer_grid())
    return [s for s in seer_grid(size, seed) if s not in first]


#: Distributions of the random grid: kernel sizes and strides as common in real networks.
RANDOM_KERNEL_WEIGHTS = {1: 0.35, 3: 0.4, 5: 0.13, 7: 0.12}
RANDOM_STRIDE_WEIGHTS = {1: 0.65, 2: 0.3, 3: 0.025, 4: 0.025}
RANDOM_DEFAULT_SIZE = 8000


def _random_channels(rng: np.random.Generator) -> int:
    """Log-uniform over 8..2048; mostly multiples of 8 (as networks have), sometimes not."""
    if rng.random() < 0.05:
        return 3
    value = float(np.exp(rng.uniform(np.log(8), np.log(2048))))
    multiple = rng.choice((16, 8, 1), p=(0.5, 0.35, 0.15))
    return max(int(multiple), int(round(value / multiple)) * int(multiple))


def random_grid(size: int = RANDOM_DEFAULT_SIZE, seed: int = 2) -> list[ConvShape]:
    """``size`` seeded random shapes, in random order (see module docstring).

    The order is the draw order, so a collection stopped early has measured a random
    subset rather than one corner of the space.
    """
    excluded = _shapes_of(seer_grid, seer_extra_grid, networks_grid, test_set_ii_grid)
    return _draw_shapes(np.random.default_rng(seed), size, excluded, SEER_MAX_FLOPS, SEER_MAX_TENSOR_BYTES)


RANDOM_EXTRA_DEFAULT_SIZE = 4000


def random_extra_grid(size: int = RANDOM_EXTRA_DEFAULT_SIZE, seed: int = 4) -> list[ConvShape]:
    """More shapes drawn as ``random`` draws them (another seed), none of them in another grid,
    the census included: more training shapes for the time models."""
    excluded = _shapes_of(seer_grid, seer_extra_grid, networks_grid, test_set_ii_grid, random_grid, census_grid)
    return _draw_shapes(np.random.default_rng(seed), size, excluded, SEER_MAX_FLOPS, SEER_MAX_TENSOR_BYTES)


#: The census asks about larger layers than are timed: asking costs nothing, and the first
#: stage then knows cuDNN's answers where the time models extrapolate.
CENSUS_MAX_FLOPS = 8 * SEER_MAX_FLOPS
CENSUS_MAX_TENSOR_BYTES = 8 * SEER_MAX_TENSOR_BYTES
CENSUS_DEFAULT_SIZE = 60000
#: Share of census shapes drawn from SEER's value sets (powers of two) rather than at random.
CENSUS_SEER_SHARE = 0.3


def census_grid(size: int = CENSUS_DEFAULT_SIZE, seed: int = 3) -> list[ConvShape]:
    """``size`` seeded shapes to ask cuDNN about, none of them in a timed grid (module docstring)."""
    excluded = _shapes_of(seer_grid, seer_extra_grid, networks_grid, test_set_ii_grid, random_grid)
    return _draw_shapes(np.random.default_rng(seed), size, excluded, CENSUS_MAX_FLOPS,
                        CENSUS_MAX_TENSOR_BYTES, seer_share=CENSUS_SEER_SHARE)


_DEFAULT_GRIDS: dict = {}


def _shapes_of(*grids) -> set[ConvShape]:
    """Every shape of the given grid functions (at their default sizes), each computed once
    per process: grids exclude one another's shapes, and drawing them is not free."""
    for grid in grids:
        if grid not in _DEFAULT_GRIDS:
            _DEFAULT_GRIDS[grid] = frozenset(grid())
    return set().union(*(_DEFAULT_GRIDS[grid] for grid in grids))


def _square_shape(rng: np.random.Generator, seer_share: float = 0.0) -> ConvShape | None:
    """One random square layer, ``random``'s distributions or, with probability
    ``seer_share``, SEER's value sets; None if its kernel does not fit."""
    kernels, kernel_p = zip(*RANDOM_KERNEL_WEIGHTS.items())
    strides, stride_p = zip(*RANDOM_STRIDE_WEIGHTS.items())
    seer_strides, seer_stride_p = zip(*SEER_STRIDE_WEIGHTS.items())
    if seer_share and rng.random() < seer_share:
        batch = int(rng.choice(SEER_BATCHES))
        width = int(rng.choice(SEER_WIDTHS))
        kernel = int(rng.choice(SEER_KERNELS))
        stride = int(rng.choice(seer_strides, p=seer_stride_p))
        padding = kernel // 2 if rng.random() < 0.5 else 0
        in_ch, out_ch = int(rng.choice(SEER_CHANNELS)), int(rng.choice(SEER_CHANNELS))
    else:
        batch = int(rng.choice(SEER_BATCHES[:-1])) if rng.random() < 0.7 else int(rng.integers(1, 65))
        width = int(round(float(np.exp(rng.uniform(np.log(4), np.log(320))))))
        kernel = int(rng.choice(kernels, p=kernel_p))
        stride = int(rng.choice(strides, p=stride_p))
        padding = kernel // 2 if rng.random() < 0.65 else 0
        in_ch, out_ch = _random_channels(rng), _random_channels(rng)
    if kernel > width + 2 * padding:
        return None
    return ConvShape.seer(batch, in_ch, width, out_ch, conv_out_width(width, kernel, stride, padding),
                          kernel, stride, padding)


def _draw_shapes(rng: np.random.Generator, size: int, excluded: set[ConvShape], max_flops: float,
                 max_tensor_bytes: float, seer_share: float = 0.0) -> list[ConvShape]:
    """Distinct random square shapes in draw order (:func:`_square_shape`), within the bounds
    and not in ``excluded``."""
    return _draw(lambda r: _square_shape(r, seer_share), rng, size, excluded, max_flops, max_tensor_bytes)


def quick_grid() -> list[ConvShape]:
    """Twenty small shapes: every kernel size, strides 1 and 2, both paddings."""
    shapes = []
    for i, (kernel, stride, padding_same) in enumerate(
        itertools.product(SEER_KERNELS, (1, 2), (False, True))
    ):
        batch = (1, 4, 8, 16)[i % 4]
        in_ch, out_ch = ((16, 32), (32, 64), (64, 64), (128, 64))[i % 4]
        width = (14, 28, 32, 56)[(i // 2) % 4]
        padding = kernel // 2 if padding_same else 0
        shapes.append(ConvShape.square(batch, in_ch, width, out_ch, kernel, stride, padding))
    # A few real-network layers, so the quick grid includes TF32-friendly channel counts.
    shapes.append(ConvShape.square(8, 64, 56, 64, 3, 1, 1))
    shapes.append(ConvShape.square(8, 256, 14, 256, 3, 1, 1))
    shapes.append(ConvShape.square(1, 3, 224, 64, 7, 2, 3))
    shapes.append(ConvShape.square(32, 512, 7, 2048, 1, 1, 0))
    return shapes


def networks_grid(batches: Sequence[int] = NETWORK_BATCHES,
                  names: Sequence[str] | None = None) -> list[ConvShape]:
    """Unique conv-layer shapes of networks (default: the training networks) at these batches."""
    names = networks.TRAINING_NETWORKS if names is None else names
    layers = [layer for batch in batches for name in names
              for layer in networks.network_layers(name, batch)]
    return networks.unique_shapes(layers)


#: The batches of the cuSNN seed's per-layer table.
SPARSE_SEED_BATCHES = (1, 2, 4, 8)


def sparse_seed_grid(batches: Sequence[int] = SPARSE_SEED_BATCHES) -> list[ConvShape]:
    """Unique layer shapes of the cuSNN seed's networks (DenseNet-121/169/201, ResNet-101/152,
    224x224) at its batches: the layers its sparse experiments time (``--sparsity``)."""
    return networks_grid(batches, networks.SPARSE_SEED_NETWORKS)


def network_shapes_of_test_set_ii(
        batches: Sequence[int] = NETWORK_BATCHES) -> Iterator[tuple[str, int, list[ConvShape]]]:
    """Each Test-set-II network at each batch, with its layers' shapes in the order it runs
    them (a repeated shape once per layer): what a network's totals sum over."""
    for network in networks.TEST_SET_II_NETWORKS:
        for batch in batches:
            yield network, batch, [layer.shape for layer in networks.network_layers(network, batch)]


def test_set_ii_grid(batches: Sequence[int] = NETWORK_BATCHES) -> list[ConvShape]:
    """Unique layer shapes of the Test-set-II networks that no training grid contains."""
    training = set(seer_grid()) | set(networks_grid(batches))
    return [s for s in networks_grid(batches, networks.TEST_SET_II_NETWORKS) if s not in training]


# -- every layer kind ---------------------------------------------------------------------
#: Bounds of the general and 3D grids: as SEER's, in work and memory.
GENERAL_MAX_FLOPS = SEER_MAX_FLOPS
GENERAL_DEFAULT_SIZE = 12000
GRID_3D_DEFAULT_SIZE = 3000
#: 3D layers are bounded tighter: cuDNN's FFT_TILING ran a 50 GFLOP 3D layer for a second.
GRID_3D_MAX_FLOPS = SEER_MAX_FLOPS / 10
#: Shares of the general grid's layer kinds (a layer may also be dilated, 1xN or non-square).
GENERAL_KIND_WEIGHTS = {"plain": 0.5, "depthwise": 0.3, "grouped": 0.2}
#: Width over height of non-square inputs, as networks have them (detection 800x1216,
#: video 16:9, segmentation crops, spectrograms); reciprocals too.
ASPECT_RATIOS = (4 / 3, 3 / 2, 16 / 9, 2.0, 3.0, 4.0, 8.0)
#: Non-square kernels: factorised (Inception, separable) and a few odd ones.
FACTORISED_KERNELS = ((1, 3), (3, 1), (1, 5), (5, 1), (1, 7), (7, 1), (3, 5), (5, 3), (1, 2), (2, 2))
NETWORKS_DIR = Path(__file__).resolve().parents[1] / "data" / "networks"
#: Batch sizes of the general networks grids, 2D and 3D.
GENERAL_NETWORK_BATCHES = (1, 8, 32)
NETWORK_BATCHES_3D = (1, 4)
#: Network layers beyond this are left out: one call would take tens of milliseconds or more.
NETWORK_MAX_FLOPS = 4 * SEER_MAX_FLOPS


def _general_2d(rng: np.random.Generator) -> ConvShape | None:
    """One random 2D layer of any kind (see :func:`general_grid`), or None if impossible."""
    batch = int(rng.choice(SEER_BATCHES[:-1])) if rng.random() < 0.7 else int(rng.integers(1, 65))
    height = int(round(float(np.exp(rng.uniform(np.log(4), np.log(320))))))
    width = height
    if rng.random() < 0.4:
        ratio = float(rng.choice(ASPECT_RATIOS)) * float(np.exp(rng.normal(0, 0.05)))
        width = max(1, int(round(height * (ratio if rng.random() < 0.6 else 1 / ratio))))
    if rng.random() < 0.2:
        kh, kw = (int(v) for v in FACTORISED_KERNELS[rng.integers(len(FACTORISED_KERNELS))])
    else:
        kh = kw = int(rng.choice(tuple(RANDOM_KERNEL_WEIGHTS), p=tuple(RANDOM_KERNEL_WEIGHTS.values())))
    strides, stride_p = zip(*RANDOM_STRIDE_WEIGHTS.items())
    sh = sw = int(rng.choice(strides, p=stride_p))
    if rng.random() < 0.05:
        sw = int(rng.choice(strides))
    dh = dw = 1
    if rng.random() < 0.15:
        dh = dw = int(rng.choice((2, 3, 4), p=(0.5, 0.25, 0.25)))
        if rng.random() < 0.2:
            dw = int(rng.choice((1, 2, 3, 4)))
    same = rng.random() < 0.7
    ph, pw = ((dh * (kh - 1) // 2, dw * (kw - 1) // 2) if same
              else (int(rng.integers(0, kh // 2 + 1)), int(rng.integers(0, kw // 2 + 1))))
    kind = rng.choice(tuple(GENERAL_KIND_WEIGHTS), p=tuple(GENERAL_KIND_WEIGHTS.values()))
    if kind == "depthwise":
        groups = in_ch = _random_channels(rng)
        out_ch = in_ch * int(rng.choice((1, 2, 4), p=(0.85, 0.1, 0.05)))
    elif kind == "grouped":
        groups = int(rng.choice((2, 4, 8, 16, 32, 64)))
        per_group = int(rng.choice((2, 4, 8, 16, 24, 32, 48, 64, 128)))
        in_ch = groups * per_group
        out_ch = groups * max(1, int(round(per_group * float(rng.choice((0.5, 1, 1, 2))))))
    else:
        groups, in_ch, out_ch = 1, _random_channels(rng), _random_channels(rng)
    try:
        return ConvShape(batch, in_ch, out_ch, groups, 2, 1, height, width, 1, kh, kw, 1, sh, sw, 0, ph, pw, 1, dh, dw)
    except ShapeError:
        return None


def _general_3d(rng: np.random.Generator) -> ConvShape | None:
    """One random 3D layer (see :func:`grid_3d`), or None if impossible."""
    batch = int(rng.choice((1, 2, 4, 8, 16), p=(0.3, 0.25, 0.2, 0.15, 0.1)))
    if rng.random() < 0.5:  # volumes: CosmoFlow, 3D U-Nets (cubes)
        d = h = w = int(round(float(np.exp(rng.uniform(np.log(4), np.log(160))))))
    else:  # video: few frames, larger images
        d = int(rng.choice((4, 8, 16, 32)))
        h = int(round(float(np.exp(rng.uniform(np.log(7), np.log(224))))))
        w = h if rng.random() < 0.7 else int(round(h * 4 / 3))
    shape = rng.random()
    if shape < 0.6:
        kd = kh = kw = int(rng.choice((1, 3, 5, 7), p=(0.25, 0.6, 0.1, 0.05)))
    else:
        kd, kh, kw = ((1, 3, 3), (3, 1, 1), (3, 3, 3), (1, 7, 7), (3, 7, 7), (5, 1, 1), (1, 5, 5))[rng.integers(7)]
    stride = int(rng.choice((1, 2), p=(0.75, 0.25)))
    sd, sh, sw = stride, stride, stride
    if rng.random() < 0.15:
        sd = 1
    dil = int(rng.choice((1, 2), p=(0.95, 0.05)))
    same = rng.random() < 0.7
    pads = [dil * (k - 1) // 2 if same else 0 for k in (kd, kh, kw)]
    kind = rng.random()
    if kind < 0.1:
        groups = in_ch = _random_channels(rng) if rng.random() < 0.8 else int(rng.choice((16, 32, 64)))
        out_ch = in_ch
    elif kind < 0.15:
        groups = int(rng.choice((2, 4, 8, 32)))
        in_ch, out_ch = groups * int(rng.choice((4, 8, 16))), groups * int(rng.choice((4, 8, 16)))
    else:
        groups = 1
        in_ch = int(rng.choice((1, 2, 3, 4))) if rng.random() < 0.1 else _random_channels(rng) // 2 or 1
        out_ch = max(1, _random_channels(rng) // 2)
    try:
        return ConvShape(batch, in_ch, out_ch, groups, 3, d, h, w, kd, kh, kw, sd, sh, sw, *pads, dil, dil, dil)
    except ShapeError:
        return None


def _draw(draw_one, rng: np.random.Generator, size: int, excluded: set[ConvShape], max_flops: float,
          max_tensor_bytes: float) -> list[ConvShape]:
    """Distinct layers from ``draw_one(rng)`` (None: impossible, drawn again) in draw order,
    within the bounds and not in ``excluded``."""
    chosen: dict[ConvShape, None] = {}
    while len(chosen) < size:
        shape = draw_one(rng)
        if (shape is not None and shape.flops <= max_flops and shape.tensor_bytes <= max_tensor_bytes
                and shape not in excluded):
            chosen.setdefault(shape)
    return list(chosen)


def general_grid(size: int = GENERAL_DEFAULT_SIZE, seed: int = 5) -> list[ConvShape]:
    """``size`` seeded random 2D layers of every kind, in draw order.

    Half plain, 30% depthwise (channel multiplier 1, 2 or 4), 20% grouped (2 to 64 groups
    of 2 to 128 channels); kernels as ``random`` draws them or factorised (1xN, Nx1,
    :data:`FACTORISED_KERNELS`, 20%); 15% dilated (2 to 4, now and then per axis); 40% of
    inputs non-square with the aspect ratios of :data:`ASPECT_RATIOS`; strides 1 to 4, per
    axis now and then. None is a layer of the networks grids or of Test-set-II.
    """
    excluded = _shapes_of(networks_general_grid, test_set_ii_general_grid)
    return _draw(_general_2d, np.random.default_rng(seed), size, excluded, GENERAL_MAX_FLOPS, SEER_MAX_TENSOR_BYTES)


def grid_3d(size: int = GRID_3D_DEFAULT_SIZE, seed: int = 6) -> list[ConvShape]:
    """``size`` seeded random 3D layers, in draw order: volumes (cubes, as CosmoFlow and 3D
    U-Nets have) and video clips (4 to 32 frames); kernels 1 to 7, cubic or factorised
    (1x3x3, 3x1x1, 3x7x7, ...); batch 1 to 16; some strided, grouped, depthwise or dilated."""
    excluded = _shapes_of(networks_general_grid, test_set_ii_general_grid)
    return _draw(_general_3d, np.random.default_rng(seed), size, excluded, GRID_3D_MAX_FLOPS, SEER_MAX_TENSOR_BYTES)


CENSUS_GENERAL_DEFAULT_SIZE = 40000


def census_general_grid(size: int = CENSUS_GENERAL_DEFAULT_SIZE, seed: int = 7) -> list[ConvShape]:
    """Layers of every kind to ask cuDNN about (4 in 5 drawn as ``general``, 1 in 5 as ``3d``),
    up to 8 times more work than the timed grids and none of them in one."""
    excluded = _shapes_of(general_grid, grid_3d, networks_general_grid, test_set_ii_general_grid)
    rng = np.random.default_rng(seed)
    return _draw(lambda r: _general_3d(r) if r.random() < 0.2 else _general_2d(r), rng, size, excluded,
                 CENSUS_MAX_FLOPS, CENSUS_MAX_TENSOR_BYTES)


def network_tables(role: str | None = None) -> dict[str, pd.DataFrame]:
    """The captured layer tables of real networks (``seer/data/networks``), by network name;
    ``role``: ``train`` or ``test`` (held out), None for all. See ``networks.json`` there."""

    index = json.loads((NETWORKS_DIR / "networks.json").read_text())
    return {entry["file"].removesuffix(".csv"): read_layers(NETWORKS_DIR / entry["file"])
            for entry in index["files"] if role is None or entry["role"] == role}


def _network_layers(role: str) -> list[ConvShape]:
    from seer.layers.files import frame_shapes

    shapes: dict[ConvShape, None] = {}
    for frame in network_tables(role).values():
        batches = NETWORK_BATCHES_3D if (frame["dims"] == 3).any() else GENERAL_NETWORK_BATCHES
        for batch in batches:
            for shape in frame_shapes(frame.assign(batch=batch)):
                if shape.tensor_bytes <= SEER_MAX_TENSOR_BYTES and shape.flops <= NETWORK_MAX_FLOPS:
                    shapes.setdefault(shape)
    return list(shapes)


def networks_general_grid() -> list[ConvShape]:
    """Unique layers of the training networks of ``seer/data/networks`` (role ``train``), at
    batches 1, 8 and 32 (3D networks 1 and 4), within SEER's memory bound and
    :data:`NETWORK_MAX_FLOPS`."""
    return _network_layers("train")


def test_set_ii_general_grid() -> list[ConvShape]:
    """Unique layers of the held-out networks (role ``test``) that no training grid has:
    Test-set-II of every layer kind (its square layers included)."""
    training = _shapes_of(networks_general_grid, seer_grid, networks_grid)
    return [s for s in _network_layers("test") if s not in training]


def quick_general_grid() -> list[ConvShape]:
    """Twelve small layers, one or two of each kind: for tests and smoke runs."""
    return [
        ConvShape(8, 32, 32, groups=32, in_h=28, in_w=28, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
        ConvShape(4, 64, 64, groups=64, in_h=14, in_w=14, kernel_h=5, kernel_w=5, stride_h=2, stride_w=2,
                  pad_h=2, pad_w=2),
        ConvShape(8, 64, 128, groups=8, in_h=28, in_w=28, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
        ConvShape(4, 128, 128, groups=32, in_h=14, in_w=14, kernel_h=3, kernel_w=3, stride_h=2, stride_w=2,
                  pad_h=1, pad_w=1),
        ConvShape(4, 64, 64, in_h=17, in_w=17, kernel_h=1, kernel_w=7, pad_w=3),
        ConvShape(4, 64, 64, in_h=17, in_w=17, kernel_h=7, kernel_w=1, pad_h=3),
        ConvShape(2, 32, 32, in_h=24, in_w=40, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
        ConvShape(2, 64, 64, in_h=32, in_w=32, kernel_h=3, kernel_w=3, pad_h=2, pad_w=2, dilation_h=2,
                  dilation_w=2),
        ConvShape(2, 16, 32, in_d=16, in_h=32, in_w=32, kernel_d=3, kernel_h=3, kernel_w=3, pad_d=1, pad_h=1,
                  pad_w=1),
        ConvShape(1, 4, 16, in_d=32, in_h=32, in_w=32, kernel_d=3, kernel_h=3, kernel_w=3, stride_d=2,
                  stride_h=2, stride_w=2, pad_d=1, pad_h=1, pad_w=1),
        ConvShape(2, 32, 32, in_d=8, in_h=28, in_w=28, kernel_d=1, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
        ConvShape(2, 32, 32, groups=32, in_d=8, in_h=14, in_w=14, kernel_d=3, kernel_h=3, kernel_w=3, pad_d=1,
                  pad_h=1, pad_w=1),
    ]


NAMED_GRIDS = {
    "seer": seer_grid,
    "seer-extra": seer_extra_grid,
    "random": random_grid,
    "random-extra": random_extra_grid,
    "census": census_grid,
    "networks": networks_grid,
    "test-set-ii": test_set_ii_grid,
    "sparse-seed": sparse_seed_grid,
    "quick": quick_grid,
    "general": general_grid,
    "3d": grid_3d,
    "census-general": census_general_grid,
    "networks-general": networks_general_grid,
    "test-set-ii-general": test_set_ii_general_grid,
    "quick-general": quick_general_grid,
}


#: ``--kinds`` name for every layer kind but SEER's square one.
GENERAL_KINDS = "general"


def parse_kinds(text: str) -> tuple[str, ...]:
    """Layer kind names from ``--kinds`` (comma-separated :data:`seer.layers.shapes.LAYER_KIND_NAMES`,
    or ``general`` for all but square)."""
    from seer.layers.shapes import LAYER_KIND_NAMES

    kinds: list[str] = []
    for name in (n.strip() for n in text.split(",") if n.strip()):
        if name == GENERAL_KINDS:
            kinds += [k for k in LAYER_KIND_NAMES if k != "square"]
        elif name in LAYER_KIND_NAMES:
            kinds.append(name)
        else:
            raise InputError(f"unknown layer kind {name!r}; kinds are {', '.join(LAYER_KIND_NAMES)} "
                             f"or {GENERAL_KINDS}")
    return tuple(dict.fromkeys(kinds))


def of_kinds(shapes: Sequence[GridShape], kinds: Sequence[str]) -> list[GridShape]:
    """The shapes of any of these layer kinds (:data:`seer.layers.shapes.LAYER_KINDS`), in order."""
    from seer.layers.shapes import layer_frame, layer_kind_flags

    if not shapes:
        return []
    flags = layer_kind_flags(layer_frame([s.shape for s in shapes]))[list(kinds)].any(axis=1).to_numpy()
    return [s for s, keep in zip(shapes, flags) if keep]


def resolve_grids(spec: str | Sequence[str]) -> list[GridShape]:
    """Shapes of one or more grids (comma-separated names or shape files), deduplicated.

    A shape in several grids is kept once, with the first grid's name.
    """
    names = [s.strip() for s in spec.split(",")] if isinstance(spec, str) else list(spec)
    seen: dict[ConvShape, str] = {}
    for name in names:
        if not name:
            continue
        if name.lower() in NAMED_GRIDS:
            label, shapes = name.lower(), NAMED_GRIDS[name.lower()]()
        else:
            path = Path(name)
            if not path.exists():
                raise InputError(
                    f"no such grid or file; named grids are {', '.join(NAMED_GRIDS)}", path=name)
            label, shapes = f"file:{path.stem}", read_shapes_file(path)
        for shape in shapes:
            seen.setdefault(shape, label)
    return [GridShape(shape, grid) for shape, grid in seen.items()]

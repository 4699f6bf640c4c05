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
    Layers of other networks (see :data:`seer.networks.TEST_SET_II_NETWORKS`) that are not
    in the two grids above: the held-out Test-set-II.
``quick``
    Twenty small shapes for tests and smoke runs.

Any other grid name is read as a layer file in SEER's Test-set-II format (see
:mod:`seer.layers`, which reads and writes that format; its ConvShape-list functions are
imported here for older callers).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from seer.errors import InputError
# Imported back for callers that read and write layer files through this module.
from seer.layers import format_shapes, parse_shapes, read_shapes_file, write_shapes_file  # noqa: F401
from seer.shapes import ConvShape, conv_out_width


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


def _seer_candidates() -> list[ConvShape]:
    out = []
    for batch, in_ch, width, out_ch, kernel, stride in itertools.product(
        SEER_BATCHES, SEER_CHANNELS, SEER_WIDTHS, SEER_CHANNELS, SEER_KERNELS, SEER_STRIDE_WEIGHTS
    ):
        for padding in sorted({0, kernel // 2}):
            if kernel > width + 2 * padding:
                continue
            shape = ConvShape(batch, in_ch, width, out_ch,
                              conv_out_width(width, kernel, stride, padding), kernel, stride, padding)
            if shape.flops <= SEER_MAX_FLOPS and shape.tensor_bytes <= SEER_MAX_TENSOR_BYTES:
                out.append(shape)
    return out


def seer_grid(size: int = SEER_DEFAULT_SIZE, seed: int = 0) -> list[ConvShape]:
    """A reproducible sample of ``size`` shapes from SEER's ranges (see module docstring)."""
    candidates = _seer_candidates()
    rng = np.random.default_rng(seed)
    strata: dict[tuple[int, int], list[ConvShape]] = {}
    for shape in candidates:
        strata.setdefault((shape.kernel_width, shape.stride), []).append(shape)
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


def _shapes_of(*grids) -> set[ConvShape]:
    """Every shape of the given grid functions (at their default sizes)."""
    return set().union(*(grid() for grid in grids))


def _draw_shapes(rng: np.random.Generator, size: int, excluded: set[ConvShape], max_flops: float,
                 max_tensor_bytes: float, seer_share: float = 0.0) -> list[ConvShape]:
    """Distinct random shapes in draw order: ``random``'s distributions, or with probability
    ``seer_share`` SEER's value sets; possible, within the bounds and not in ``excluded``."""
    kernels, kernel_p = zip(*RANDOM_KERNEL_WEIGHTS.items())
    strides, stride_p = zip(*RANDOM_STRIDE_WEIGHTS.items())
    seer_strides, seer_stride_p = zip(*SEER_STRIDE_WEIGHTS.items())
    chosen: dict[ConvShape, None] = {}
    while len(chosen) < size:
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
            continue
        shape = ConvShape(batch, in_ch, width, out_ch, conv_out_width(width, kernel, stride, padding),
                          kernel, stride, padding)
        if shape.flops <= max_flops and shape.tensor_bytes <= max_tensor_bytes and shape not in excluded:
            chosen.setdefault(shape)
    return list(chosen)


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
        shapes.append(ConvShape.from_layer(batch, in_ch, width, out_ch, kernel, stride, padding))
    # A few real-network layers, so the quick grid includes TF32-friendly channel counts.
    shapes.append(ConvShape.from_layer(8, 64, 56, 64, 3, 1, 1))
    shapes.append(ConvShape.from_layer(8, 256, 14, 256, 3, 1, 1))
    shapes.append(ConvShape.from_layer(1, 3, 224, 64, 7, 2, 3))
    shapes.append(ConvShape.from_layer(32, 512, 7, 2048, 1, 1, 0))
    return shapes


def networks_grid(batches: Sequence[int] = NETWORK_BATCHES,
                  names: Sequence[str] | None = None) -> list[ConvShape]:
    """Unique conv-layer shapes of networks (default: the training networks) at these batches."""
    from seer import networks

    names = networks.TRAINING_NETWORKS if names is None else names
    layers = [layer for batch in batches for name in names
              for layer in networks.network_layers(name, batch)]
    return networks.unique_shapes(layers)


def test_set_ii_grid(batches: Sequence[int] = NETWORK_BATCHES) -> list[ConvShape]:
    """Unique layer shapes of the Test-set-II networks that no training grid contains."""
    from seer.networks import TEST_SET_II_NETWORKS

    training = set(seer_grid()) | set(networks_grid(batches))
    return [s for s in networks_grid(batches, TEST_SET_II_NETWORKS) if s not in training]


NAMED_GRIDS = {
    "seer": seer_grid,
    "seer-extra": seer_extra_grid,
    "random": random_grid,
    "random-extra": random_extra_grid,
    "census": census_grid,
    "networks": networks_grid,
    "test-set-ii": test_set_ii_grid,
    "quick": quick_grid,
}


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

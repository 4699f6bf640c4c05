"""Inputs with a given share of zeros, as ReLU leaves them in a network's feature maps.

A layer's ``sparsity`` is the fraction of its input's values that are zero. Two patterns
are made, with NumPy or CuPy alike (``xp``):

``uniform``
    independent zeros: each value of a random normal tensor is zero with probability
    ``sparsity`` (the fraction made is recorded, not assumed);
``relu``
    zeros in patches, as a rectified feature map has them: a random normal field per
    (image, channel), smoothed over the spatial axes with a Gaussian of
    :data:`RELU_CORRELATION_PIXELS`, shifted so that a ``sparsity`` share of it lies below
    zero, then rectified (``max(field, 0)``).
``crowded``
    as ``relu``, but a share of each field (drawn per input from its seed, in
    :data:`CROWDED_SHARED_RANGE`) is one field shared by all channels of the image: a pixel
    active in one channel tends to be active in many, as in a network's activations.

In ``uniform`` and ``relu``, whether a value is zero does not depend on the other channels at
its pixel, so the non-zeros spread evenly over pixels. :func:`pixel_crowding` says how much
more crowded an input's non-zeros are than such even ones: about 1 for those two, more for
``crowded`` (a few to tens, growing with the share of zeros).
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import numpy as np

PATTERNS = ("uniform", "relu", "crowded")
#: The sparsity levels ``seer collect --sparsity default`` measures: dense, then the levels at
#: which seer's sparse kernels start to beat cuDNN (docs/sparse.md, 0.9 to 0.99).
DEFAULT_LEVELS: tuple[float, ...] = (0.0, 0.5, 0.7, 0.8, 0.9, 0.95, 0.99)
#: The keyword ``--sparsity`` takes for :data:`DEFAULT_LEVELS`.
DEFAULT_KEYWORD = "default"
#: The pattern a sparse shape is made in unless told (zeros in patches, as after a ReLU).
DEFAULT_PATTERN = "relu"
#: The standard deviation, in pixels, of the Gaussian that smooths a ``relu`` field: zeros
#: then come in patches a few pixels wide, as in the early layers of an image network.
RELU_CORRELATION_PIXELS = 2.0
#: The share of a ``crowded`` field's variance that all channels of its image share: drawn
#: per input, uniformly in this range, so that a collection spans a range of crowding.
CROWDED_SHARED_RANGE = (0.3, 0.9)


def check_sparsity(sparsity: float) -> float:
    """``sparsity`` as a float in [0, 1); ValueError otherwise (1 would leave nothing to convolve)."""
    value = float(sparsity)
    if not 0.0 <= value < 1.0:
        raise ValueError(f"sparsity must lie in [0, 1), got {sparsity!r}")
    return value


def parse_levels(text: str) -> tuple[float, ...]:
    """Sparsity levels from ``--sparsity``'s text: comma-separated numbers in [0, 1) (``0`` is
    the dense layer), or ``default`` (:data:`DEFAULT_LEVELS`), in the order given, each once;
    ValueError names the first bad item."""
    levels: list[float] = []
    for item in (t.strip() for t in text.split(",") if t.strip()):
        if item.lower() == DEFAULT_KEYWORD:
            levels += DEFAULT_LEVELS
            continue
        try:
            levels.append(check_sparsity(item))
        except ValueError:
            raise ValueError(f"sparsity {item!r}: need numbers in [0, 1) (0: dense), or {DEFAULT_KEYWORD} "
                             f"for {','.join(f'{v:g}' for v in DEFAULT_LEVELS)}") from None
    if not levels:
        raise ValueError("no sparsity level given")
    return tuple(dict.fromkeys(levels))


def parse_patterns(text: str) -> tuple[str, ...]:
    """Patterns from ``--sparsity-pattern``'s text: comma-separated names of :data:`PATTERNS`,
    each once; ValueError names an unknown one."""
    patterns = [t.strip().lower() for t in text.split(",") if t.strip()]
    bad = [p for p in patterns if p not in PATTERNS]
    if bad or not patterns:
        raise ValueError(f"unknown sparsity pattern {', '.join(bad) or repr(text)}; choose from {', '.join(PATTERNS)}")
    return tuple(dict.fromkeys(patterns))


def sparse_shape_id(dense_shape_id: str, sparsity: float, pattern: str) -> str:
    """The stable 12-hex-digit id of a layer measured on inputs of ``sparsity`` in ``pattern``.

    A hash of the dense layer's id, the level (printed with up to six significant digits, so
    that 0.9 and 0.90 are one level) and the pattern: the same on every machine and run. The
    dense layer (sparsity 0) keeps its own id, so that nothing measured dense changes key.
    """
    sparsity = check_sparsity(sparsity)
    if sparsity == 0:
        return dense_shape_id
    if pattern not in PATTERNS:
        raise ValueError(f"unknown sparsity pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    text = f"{dense_shape_id}-sparse-{sparsity:.6g}-{pattern}"
    return hashlib.blake2b(text.encode(), digest_size=6).hexdigest()


def sparse_input(shape: Sequence[int], sparsity: float, pattern: str = "uniform", seed: int = 0,
                 xp: Any = np) -> Any:
    """A float32 tensor of ``shape`` (N, C, spatial...) whose share of zeros is about
    ``sparsity``, in ``pattern`` (:data:`PATTERNS`), on ``xp``'s device (NumPy or CuPy)."""
    sparsity = check_sparsity(sparsity)
    if pattern not in PATTERNS:
        raise ValueError(f"unknown sparsity pattern {pattern!r}; choose one of {', '.join(PATTERNS)}")
    if len(shape) < 3:
        raise ValueError(f"an input is (N, C, spatial...), got shape {tuple(shape)}")
    rng = xp.random.default_rng(seed)
    if pattern == "uniform":
        x = rng.standard_normal(tuple(shape), dtype=xp.float32)
        if sparsity:
            x[rng.random(tuple(shape), dtype=xp.float32) < sparsity] = 0
        return x
    field = _smoothed(rng.standard_normal(tuple(shape), dtype=xp.float32), RELU_CORRELATION_PIXELS, xp)
    if pattern == "crowded":
        low, high = CROWDED_SHARED_RANGE
        shared_share = low + (high - low) * float(rng.random())
        shared = _smoothed(rng.standard_normal((shape[0], 1, *shape[2:]), dtype=xp.float32),
                           RELU_CORRELATION_PIXELS, xp)
        # Scaled by Python floats, which NumPy and CuPy arrays take alike.
        field = ((1 - shared_share) ** 0.5 * field + shared_share ** 0.5 * shared).astype(xp.float32)
    # Per (image, channel), shift the field so that the asked share lies below zero.
    flat = field.reshape(shape[0] * shape[1], -1)
    cut = xp.quantile(flat, sparsity, axis=1, keepdims=True) if sparsity else flat.min(axis=1, keepdims=True) - 1
    return xp.maximum(flat - cut.astype(xp.float32), 0).reshape(tuple(shape)).astype(xp.float32)


def zero_fraction(x: Any) -> float:
    """The share of ``x``'s values that are zero."""
    return float((x == 0).sum()) / x.size


def _smoothed(noise: Any, sigma: float, xp: Any) -> Any:
    """``noise`` convolved with a Gaussian of ``sigma`` pixels over its spatial axes
    (periodic, through the FFT), scaled back to unit variance."""
    axes = tuple(range(2, noise.ndim))
    spectrum = xp.fft.rfftn(noise, axes=axes)
    gain = None
    for i, axis in enumerate(axes):
        size = noise.shape[axis]
        freq = xp.fft.rfftfreq(size) if i == len(axes) - 1 else xp.fft.fftfreq(size)
        g = xp.exp(-2 * (np.pi * sigma * freq) ** 2).astype(xp.float32)
        view = [1] * noise.ndim
        view[axis] = g.shape[0]
        g = g.reshape(view)
        gain = g if gain is None else gain * g
    out = xp.fft.irfftn(spectrum * gain, s=[noise.shape[a] for a in axes], axes=axes).astype(xp.float32)
    std = out.std()
    return out / std if std > 0 else out


def even_crowding(pixels: int, channels: int, nonzero_share: float, draws: int = 8) -> float:
    """The most non-zeros at one pixel over the mean, where each of ``channels`` values at each
    of ``pixels`` pixels is non-zero on its own with probability ``nonzero_share``: the mean of
    ``draws`` seeded draws of binomial counts (so the same arguments give the same answer);
    fewer for millions of pixels, whose maximum varies little from draw to draw."""
    rng = np.random.default_rng(0)
    ratios = []
    for _ in range(max(2, min(draws, 4_000_000 // max(int(pixels), 1)))):
        counts = rng.binomial(channels, nonzero_share, size=max(int(pixels), 1))
        mean = counts.mean()
        ratios.append(counts.max() / mean if mean > 0 else 1.0)
    return float(np.mean(ratios))


def input_crowding(x: Any) -> float:
    """:func:`pixel_crowding` of an (N, C, spatial...) array, NumPy's or CuPy's."""
    per_pixel = (x != 0).sum(axis=1)
    return pixel_crowding(float(per_pixel.max()), float(per_pixel.sum()), int(per_pixel.size), int(x.shape[1]))


def pixel_crowding(most: float, nonzeros: float, pixels: int, channels: int) -> float:
    """How crowded an input's non-zeros are on its pixels (a pixel: one image's one position,
    all ``channels`` values there): the most non-zeros at one pixel (``most``) over the mean
    (``nonzeros`` / ``pixels``), divided by what even non-zeros give (:func:`even_crowding`).
    About 1 for the collector's inputs; NaN for an input without non-zeros."""
    if nonzeros <= 0 or pixels <= 0:
        return float("nan")
    share = nonzeros / (pixels * channels)
    return float(most / (nonzeros / pixels) / even_crowding(pixels, channels, min(share, 1.0)))

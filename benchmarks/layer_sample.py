"""The layers the kernel benchmarks time (kernel_tiles.py, channels_last.py): every 3D layer
of the given grids or layer files, and ``sample`` of their 2D layers drawn evenly in grid
order."""

from __future__ import annotations

import numpy as np

from seer.layers.grids import resolve_grids
from seer.layers.shapes import ConvShape


def every_3d_and_sampled_2d(layers: str, sample: int) -> list[ConvShape]:
    """``layers``: grids or layer files, comma-separated."""
    shapes = [s.shape for s in resolve_grids(layers)]
    three_d = [s for s in shapes if s.dims == 3]
    two_d = [s for s in shapes if s.dims == 2]
    picks = np.linspace(0, len(two_d) - 1, min(sample, len(two_d))).round().astype(int) if two_d else []
    return three_d + [two_d[i] for i in dict.fromkeys(picks)]

"""Which implicit-GEMM tile of seer's own kernel is fastest, per layer? Measured on a GPU.

    python benchmarks/kernel_tiles.py --layers seer/data/networks/cosmoflow.csv,networks --sample 40 \
        --out benchmarks/results/h100-kernel-tiles.csv

For each layer (every layer of the 3D files, and ``--sample`` layers drawn evenly from the
other grids), every tile of :data:`seer.hardware.kernel_plans.GEMM_TILES` that fits is checked
against the float64 reference and timed as the collector times (bursts behind a spinning
kernel, median), without and with the split reduction. The table says which tile
:func:`seer.hardware.kernel_plans.plan` should pick; the choice it makes is marked, and scored
against each layer's fastest tile (printed last).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from layer_sample import every_3d_and_sampled_2d
from seer.layers.shapes import LAYER_COLUMNS


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", required=True, help="grids or layer files, comma-separated")
    parser.add_argument("--sample", type=int, default=40, help="2D layers drawn evenly from the grids")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    import cupy as cp

    from seer.collect.records import steadiest
    from seer.gpu import kernels
    from seer.gpu.reference import ShapeTensors
    from seer.gpu.timing import BurstTimer
    from seer.hardware import kernel_plans

    shapes = every_3d_and_sampled_2d(args.layers, args.sample)
    timer = BurstTimer()
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    for number, shape in enumerate(shapes, 1):
        tensors = ShapeTensors(shape, seed=number)
        for algo in ("SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM_SPLITK"):
            if kernel_plans.unsupported_reason(algo, shape):
                continue
            chosen = kernel_plans.plan(algo, shape, sms=sms).kernel
            for tile in kernel_plans.GEMM_TILES:
                forward, plan = kernels.forward(algo, shape, tensors.x, tensors.w, tensors.y, tile=tile)
                tensors.poison_output()
                forward()
                error = tensors.relative_error()
                estimate = timer.estimate_ms(forward)
                (times, _, _), _ = steadiest(lambda: timer.measure(forward, estimate, budget_ms=10.0))
                rows.append({**{c: getattr(shape, c) for c in LAYER_COLUMNS}, "algo": algo, "tile": tile,
                             "splits": plan.splits, "time_ms": float(np.median(times)), "rel_error": error,
                             "tflops": shape.flops / (np.median(times) * 1e-3) / 1e12,
                             "planned": plan.kernel == chosen})
        # Written after every layer: a run stopped early keeps the layers done.
        frame = pd.DataFrame(rows)
        frame.to_csv(args.out, index=False, float_format="%.6g")
        print(f"{number}/{len(shapes)} {shape}", file=sys.stderr, flush=True)
    print(plan_score(frame).to_string())
    return 0


def plan_score(frame: pd.DataFrame) -> pd.DataFrame:
    """Per algorithm, how the planned tile's time compares with each layer's fastest tile:
    the geometric mean and the worst of planned / fastest, and the share within 5%."""
    layer = [c for c in LAYER_COLUMNS if c in frame.columns]
    fastest = frame.groupby([*layer, "algo"])["time_ms"].transform("min")
    planned = frame[frame["planned"]].assign(ratio=lambda f: f["time_ms"] / fastest[f.index])
    return planned.groupby("algo")["ratio"].agg(
        layers="size", geomean=lambda r: float(np.exp(np.log(r).mean())), worst="max",
        within_5pct=lambda r: float((r <= 1.05).mean()))


if __name__ == "__main__":
    sys.exit(main())

"""Every algorithm's time per call, burst by burst: the spread behind the collector's median
(seed 000's violins). Measured on a GPU; ``--plot-only`` redraws on a CPU.

    python benchmarks/repeated_timings.py --layers seer/data/networks/cosmoflow.csv,seer/data/networks/unet3d.csv \
        --math fma --bursts 40 --out benchmarks/results/h100-repeated-timings

Per layer and algorithm that runs (cuDNN's and seer's own), after the float64 check,
``--bursts`` bursts timed as the collector times them (behind a spinning kernel, each of at
least 1 ms of back-to-back calls). Writes ``bursts.csv``, one row per burst (its time per
call), and ``violins-MATH.png``: a panel per layer, a violin per algorithm of each burst's
deviation from that algorithm's median.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from seer.algorithms import algorithm_names, get_algorithm
from seer.layers.grids import resolve_grids
from seer.layers.shapes import LAYER_COLUMNS, describe
from seer.schema import get_math_mode

#: Workspace an algorithm may ask for, as ``seer collect``'s default cap.
WORKSPACE_CAP = 8 << 30


def measure(shapes, math: str, bursts: int, table: Path) -> pd.DataFrame:
    """One row per timed burst of every algorithm that runs each shape correctly, written
    to ``table`` after each layer (a run stopped early keeps the layers done)."""
    import cupy as cp

    from seer.gpu import cudnn
    from seer.gpu.reference import ShapeTensors
    from seer.gpu.timing import BurstTimer
    from seer.gpu.worker import prepare_run

    timer = BurstTimer()
    tolerance = get_math_mode(math).tolerance
    handle = cudnn.Handle(stream=cp.cuda.get_current_stream().ptr)
    rows = []
    for number, shape in enumerate(shapes, 1):
        tensors = ShapeTensors(shape, seed=number)
        with cudnn.ConvolutionProblem(handle, shape, math) as problem:
            for algo in algorithm_names():
                if get_algorithm(algo).one_math not in (None, math):
                    continue
                try:
                    forward, workspace, _ = prepare_run(problem, tensors, algo, WORKSPACE_CAP)
                    tensors.poison_output()
                    forward()
                    cp.cuda.Device().synchronize()
                except Exception as exc:  # not supported, out of memory: this algorithm does not run here
                    print(f"  {algo}: {getattr(exc, 'status', type(exc).__name__)}", file=sys.stderr)
                    continue
                error = tensors.relative_error()
                if not error <= tolerance:
                    print(f"  {algo}: wrong result ({error:.3g})", file=sys.stderr)
                    continue
                estimate = timer.estimate_ms(forward)
                times, plan, _ = timer.measure(forward, estimate, budget_ms=0.0, min_reps=bursts, max_reps=bursts)
                fields = {c: getattr(shape, c) for c in LAYER_COLUMNS}
                rows += [{**fields, "layer": describe(fields), "math": math, "algo": algo, "burst": i,
                          "calls": plan.burst, "time_ms": float(t)} for i, t in enumerate(times)]
                del workspace
        del tensors
        cp.get_default_memory_pool().free_all_blocks()
        pd.DataFrame(rows).to_csv(table, index=False, float_format="%.6g")
        print(f"{number}/{len(shapes)} {describe(shape.as_dict())}", file=sys.stderr, flush=True)
    handle.close()
    return pd.DataFrame(rows)


def plot(frame: pd.DataFrame, path: Path) -> None:
    """A panel per layer: a violin of the per-call time of every burst, per algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = list(dict.fromkeys(frame["layer"]))
    columns = 4
    rows_ = -(-len(layers) // columns)
    fig, axes = plt.subplots(rows_, columns, figsize=(4.2 * columns, 3.2 * rows_), squeeze=False)
    for ax, layer in zip(axes.flat, layers):
        sub = frame[frame["layer"] == layer]
        algos = list(dict.fromkeys(sub["algo"]))
        times = [sub.loc[sub["algo"] == a, "time_ms"].to_numpy() for a in algos]
        # Each burst against its algorithm's median: the algorithms' times differ by orders
        # of magnitude, their spreads by fractions of a percent.
        ax.violinplot([100 * (t / np.median(t) - 1) for t in times], showmedians=True)
        ax.set_xticks(range(1, len(algos) + 1),
                      [f"{_short(a)}\n{np.median(t):.3g} ms" for a, t in zip(algos, times)], fontsize=5)
        ax.set_ylabel("% from the median", fontsize=7)
        ax.set_title(layer, fontsize=7)
        ax.tick_params(axis="y", labelsize=6)
    for ax in list(axes.flat)[len(layers):]:
        ax.axis("off")
    math = frame["math"].iloc[0]
    fig.suptitle(f"every timed burst's time per call against its algorithm's median, {math} math "
                 f"(the median time under each name)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _short(algo: str) -> str:
    return algo.replace("SEER_", "S_").replace("IMPLICIT_", "I").replace("PRECOMP_", "P").replace("WINOGRAD", "WINO")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", required=True, help="grids or layer files, comma-separated")
    parser.add_argument("--math", default="fma", help="fma or default")
    parser.add_argument("--bursts", type=int, default=40, help="timed bursts per layer and algorithm")
    parser.add_argument("--out", type=Path, required=True, help="folder for bursts.csv and the plot")
    parser.add_argument("--plot-only", action="store_true", help="redraw the plot from OUT/bursts.csv")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    table = args.out / "bursts.csv"
    if args.plot_only:
        frame = pd.read_csv(table)
    else:
        frame = measure([s.shape for s in resolve_grids(args.layers)], args.math, args.bursts, table)
    spread = frame.groupby(["layer", "algo"])["time_ms"].agg(
        median="median", iqr_pct=lambda t: 100 * (np.percentile(t, 75) - np.percentile(t, 25)) / np.median(t),
        range_pct=lambda t: 100 * (t.max() - t.min()) / np.median(t))
    print(spread.describe().to_string())
    plot(frame, args.out / f"violins-{args.math}.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())

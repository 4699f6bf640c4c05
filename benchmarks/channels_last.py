"""Does channels-last pay? cuDNN's algorithms and seer's implicit GEMMs on the same layers,
NC[D]HW against channels-last (N[D]HWC). Measured on a GPU; ``--summary-only`` on a CPU.

    python benchmarks/channels_last.py --layers seer/data/networks/cosmoflow.csv,seer/data/networks/unet3d.csv,networks \
        --sample 40 --math fma --out benchmarks/results/h100-channels-last.csv

For each layer (every layer of the 3D files, and ``--sample`` layers drawn evenly from the
other grids) and each layout, every algorithm is checked against the float64 reference
and timed as the collector times (bursts behind a spinning kernel, median); one that
cannot run records its status. The table is written after every layer. The summary
compares, per layer class, each algorithm's channels-last time with its NC[D]HW time, the
fastest of cuDNN's and of seer's in each layout, and seer's channels-last kernels with
cuDNN's fastest NC[D]HW algorithm; the plot (beside the table, ``.png``) shows each layer's
channels-last / NC[D]HW time against its NC[D]HW time.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from layer_sample import every_3d_and_sampled_2d
from seer.algorithms import algorithm_names, get_algorithm
from seer.layers.shapes import LAYER_COLUMNS, LAYOUTS, describe
from seer.schema import get_math_mode

#: Workspace an algorithm may ask for, as ``seer collect``'s default cap.
WORKSPACE_CAP = 8 << 30
#: seer's kernels that run channels-last (SEER_DIRECT is NC[D]HW only).
SEER_ALGOS = ("SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM_SPLITK")


def measure(shapes, math: str, out: Path) -> pd.DataFrame:
    """One row per (layer, layout, algorithm): status, median time, error."""
    import cupy as cp

    from seer.collect.records import steadiest
    from seer.gpu import cudnn
    from seer.gpu.reference import ShapeTensors
    from seer.gpu.timing import BurstTimer
    from seer.gpu.worker import ItemFailed, prepare_run

    timer = BurstTimer()
    tolerance = get_math_mode(math).tolerance
    algos = [a for a in algorithm_names("cudnn") if get_algorithm(a).one_math in (None, math)] + list(SEER_ALGOS)
    handle = cudnn.Handle(stream=cp.cuda.get_current_stream().ptr)
    rows = []
    for number, shape in enumerate(shapes, 1):
        fields = {c: getattr(shape, c) for c in LAYER_COLUMNS}
        for layout in LAYOUTS:
            tensors = ShapeTensors(shape, seed=number, layout=layout)
            with cudnn.ConvolutionProblem(handle, shape, math, layout) as problem:
                for algo in algos:
                    row = {**fields, "layer": describe(fields), "dims": shape.dims, "math": math, "layout": layout,
                           "algo": algo, "status": "ok", "time_ms": np.nan, "rel_error": np.nan, "detail": ""}
                    try:
                        forward, workspace, _ = prepare_run(problem, tensors, algo, WORKSPACE_CAP)
                        tensors.poison_output()
                        forward()
                        cp.cuda.Device().synchronize()
                        row["rel_error"] = tensors.relative_error()
                        if not row["rel_error"] <= tolerance:
                            row["status"] = "wrong_result"
                        else:
                            estimate = timer.estimate_ms(forward)
                            (times, _, _), _ = steadiest(lambda: timer.measure(forward, estimate, budget_ms=10.0))
                            row["time_ms"] = float(np.median(times))
                        del workspace
                    except ItemFailed as exc:
                        row["status"], row["detail"] = exc.status, exc.detail
                    except cp.cuda.memory.OutOfMemoryError as exc:
                        row["status"], row["detail"] = "oom", str(exc)
                    rows.append(row)
            del tensors
            cp.get_default_memory_pool().free_all_blocks()
        # Written after every layer: a run stopped early keeps the layers done.
        pd.DataFrame(rows).to_csv(out, index=False, float_format="%.6g")
        print(f"{number}/{len(shapes)} {describe(fields)}", file=sys.stderr, flush=True)
    handle.close()
    return pd.DataFrame(rows)


def _geomean(ratios: pd.Series) -> float:
    return float(np.exp(np.log(ratios).mean()))


def _layer_class(frame: pd.DataFrame) -> pd.Series:
    """2D or 3D, and pointwise (1x1 filters) or not."""
    pointwise = (frame["kernel_d"] * frame["kernel_h"] * frame["kernel_w"]) == 1
    return frame["dims"].astype(str) + "D " + np.where(pointwise, "1x1", "larger filters")


def summary(frame: pd.DataFrame) -> pd.DataFrame:
    """Per layer class (2D or 3D, 1x1 filters or larger; and all) and comparison: layers
    compared, the median and geometric mean of the ratio of times, and the share of layers
    where the first is faster."""
    ok = frame[frame["status"] == "ok"].assign(layer_class=_layer_class)
    times = ok.pivot_table(index=["layer_class", "layer"], columns=["layout", "algo"], values="time_ms")
    cudnn_algos = [a for a in algorithm_names("cudnn") if a in set(ok["algo"])]
    seer_algos = [a for a in SEER_ALGOS if a in set(ok["algo"])]

    def fastest(layout: str, algos: list[str]) -> pd.Series:
        cols = [(layout, a) for a in algos if (layout, a) in times.columns]
        return times[cols].min(axis=1, skipna=True) if cols else pd.Series(np.nan, index=times.index)

    comparisons = {f"{a}: nhwc / nchw": (times.get(("nhwc", a)), times.get(("nchw", a)))
                   for a in [*cudnn_algos, *seer_algos]}
    comparisons["cuDNN's fastest: nhwc / nchw"] = (fastest("nhwc", cudnn_algos), fastest("nchw", cudnn_algos))
    comparisons["seer's fastest: nhwc / nchw"] = (fastest("nhwc", seer_algos), fastest("nchw", seer_algos))
    comparisons["seer's fastest nhwc / cuDNN's fastest nchw"] = (fastest("nhwc", seer_algos),
                                                                 fastest("nchw", cudnn_algos))
    comparisons["seer's fastest nhwc / cuDNN's fastest nhwc"] = (fastest("nhwc", seer_algos),
                                                                 fastest("nhwc", cudnn_algos))
    comparisons["seer's fastest nchw / cuDNN's fastest nchw"] = (fastest("nchw", seer_algos),
                                                                 fastest("nchw", cudnn_algos))
    rows = []
    for name, (a, b) in comparisons.items():
        if a is None or b is None:
            continue
        ratio = (a / b).dropna()
        groups = [*ratio.groupby(level="layer_class"),
                  *((f"{d} all", r) for d, r in ratio.groupby(lambda key: key[0][:2]))]
        for layers, r in groups:
            rows.append({"layers": layers, "comparison": name, "compared": len(r), "median": float(r.median()),
                         "geomean": _geomean(r), "faster_share": float((r < 1).mean())})
    return pd.DataFrame(rows).sort_values(["comparison", "layers"], kind="stable")


def plot(frame: pd.DataFrame, path: Path) -> None:
    """Per layer class (2D, 3D), each layer's channels-last / NC[D]HW time against its NC[D]HW
    time: seer's two implicit GEMMs and cuDNN's fastest algorithm."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ok = frame[frame["status"] == "ok"]
    times = ok.pivot_table(index=["dims", "layer"], columns=["layout", "algo"], values="time_ms")
    cudnn_algos = [a for a in algorithm_names("cudnn") if a in set(ok["algo"])]
    series = {a: (times.get(("nchw", a)), times.get(("nhwc", a))) for a in SEER_ALGOS}
    series["cuDNN's fastest"] = tuple(times[[(layout, a) for a in cudnn_algos if (layout, a) in times.columns]]
                                      .min(axis=1) for layout in ("nchw", "nhwc"))
    dims = sorted(times.index.get_level_values("dims").unique())
    fig, axes = plt.subplots(1, len(dims), figsize=(6 * len(dims), 4.2), squeeze=False)
    for ax, d in zip(axes[0], dims):
        for (name, (nchw, nhwc)), marker in zip(series.items(), "o^s"):
            if nchw is None or nhwc is None:
                continue
            both = pd.concat([nchw.xs(d, level="dims"), nhwc.xs(d, level="dims")], axis=1).dropna()
            ax.scatter(both.iloc[:, 0], both.iloc[:, 1] / both.iloc[:, 0], marker=marker, s=22, alpha=0.75,
                       label=f"{name} (median {np.median(both.iloc[:, 1] / both.iloc[:, 0]):.2f})")
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("NC[D]HW time per call (ms)")
        ax.set_ylabel("channels-last time / NC[D]HW time")
        ax.set_title(f"{d}D layers: below 1, channels-last is faster")
        ax.legend(fontsize=8)
    fig.suptitle(f"channels-last against NC[D]HW, {ok['math'].iloc[0]} math, each algorithm in both layouts")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", required=True, help="grids or layer files, comma-separated")
    parser.add_argument("--sample", type=int, default=40, help="2D layers drawn evenly from the grids")
    parser.add_argument("--math", default="fma", help="fma or default")
    parser.add_argument("--out", type=Path, required=True, help="the table (CSV); the summary goes beside it")
    parser.add_argument("--summary-only", action="store_true", help="summarise OUT without a GPU")
    args = parser.parse_args(argv)
    if args.summary_only:
        frame = pd.read_csv(args.out)
    else:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        frame = measure(every_3d_and_sampled_2d(args.layers, args.sample), args.math, args.out)
    plot(frame, args.out.with_suffix(".png"))
    table = summary(frame)
    table.to_csv(args.out.with_name(args.out.stem + "-summary.csv"), index=False, float_format="%.4g")
    print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""seer's own kernels against cuDNN's, from a GPU's dataset: speed per layer class, the
checks, achieved FLOP/s, and energy per call with the time-versus-energy picks.

    python benchmarks/own_kernels.py --gpu h100 --out benchmarks/results/h100-own-kernels

Reads ``data/GPU/measurements/`` (what ``seer collect`` timed, ``--energy`` included)
and ``data/GPU/ceilings.json``; writes ``summary.json``, ``layers.csv`` (one row per layer
and math: each algorithm's time, the fastest of cuDNN's and of seer's) and plots: every
algorithm's time on each 3D layer (as seed 000 draws them) and the speed ratio over layers.
Speed counts the layers of real networks (``--grids``, and CosmoFlow's and the 3D U-Net's)
where seer's kernels ran; energy every layer with readings.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from seer.algorithms import algorithm_names
from seer.dataset.build import read_measurements
from seer.dataset.views import math_rows
from seer.hardware.gpus import get_gpu_spec
from seer.layers.grids import resolve_grids
from seer.layers.shapes import LAYER_COLUMNS, describe
from seer.reporting.roofline import read_ceilings

OWN = algorithm_names("cupy")
CUDNN = algorithm_names("cudnn")


#: Grids of real networks' layers: the speed figures' layers (with CosmoFlow's and the U-Net's).
NETWORK_GRIDS = ("networks", "networks-general", "test-set-ii", "test-set-ii-general")
#: The 3D layers the issue names: CosmoFlow's and the 3D U-Net's, at the batch of their files.
FOCUS_3D = "seer/data/networks/cosmoflow.csv,seer/data/networks/unet3d.csv"


def layer_class(row: pd.Series, focus: set[str]) -> str:
    """CosmoFlow and the 3D U-Net, other 3D layers, depthwise and grouped 2D layers, or the
    2D filter size (stride 2 apart)."""
    if row["dims"] == 3:
        return "3D CosmoFlow, 3D U-Net" if row["shape_id"] in focus else "3D other"
    if row["groups"] > 1:
        return "2D depthwise" if row["groups"] == row["in_ch"] else "2D grouped"
    kind = f"2D {row['kernel_h']}x{row['kernel_w']}"
    return kind + (" stride 2" if row["stride_h"] > 1 else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--grids", default=",".join(NETWORK_GRIDS),
                        help="grids whose layers the speed figures count (default: the network grids)")
    args = parser.parse_args(argv)
    spec = get_gpu_spec(args.gpu)
    dataset = args.data_dir / spec.name
    runs = read_measurements(dataset / "measurements")
    ceilings = read_ceilings(dataset)["measured"]
    focus = {s.shape.shape_id for s in resolve_grids(FOCUS_3D)}
    energy = energy_summary(runs[runs["status"] == "ok"])
    own_shapes = set(runs.loc[runs["algo"].isin(OWN), "shape_id"])
    counted = runs["grid"].isin(args.grids.split(",")) | runs["shape_id"].isin(focus)
    runs = runs[runs["shape_id"].isin(own_shapes) & counted]
    ok = runs[runs["status"] == "ok"]
    # seer's kernels run one way under either math mode: their fma runs stand for both.
    ok = pd.concat([math_rows(ok, math).assign(math=math) for math in sorted(ok["math"].unique())])

    times = ok.pivot_table(index=["shape_id", "math"], columns="algo", values="time_ms")
    layers = runs.drop_duplicates("shape_id").set_index("shape_id")[list(LAYER_COLUMNS)]
    cudnn = [a for a in CUDNN if a in times.columns]
    # Layers where both sides have a successful run (cuDNN's were not all timed under both maths).
    times = times[times[cudnn].notna().any(axis=1) & times[OWN].notna().any(axis=1)]
    table = times.reset_index().join(layers, on="shape_id")
    table["cudnn_best_ms"] = table[cudnn].min(axis=1)
    table["cudnn_best"] = table[cudnn].idxmin(axis=1)
    table["own_best_ms"] = table[OWN].min(axis=1)
    table["own_best"] = table[OWN].idxmin(axis=1)
    table["ratio"] = table["own_best_ms"] / table["cudnn_best_ms"]
    table["class"] = table.apply(layer_class, axis=1, focus=focus)
    flops = runs.drop_duplicates("shape_id").set_index("shape_id")["flops_analytic"]
    table["own_tflops"] = flops.reindex(table["shape_id"]).to_numpy() / (table["own_best_ms"] * 1e-3) / 1e12

    summary: dict = {"gpu": spec.name, "layers": int(table["shape_id"].nunique()), "ceilings": ceilings, "speed": {}}
    for (math, cls), group in table.groupby(["math", "class"]):
        summary["speed"].setdefault(math, {})[cls] = {
            "layers": len(group), "median_ratio": float(group["ratio"].median()),
            "faster_than_every_cudnn": int((group["ratio"] < 1).sum()),
            "own_best_counts": group["own_best"].value_counts().to_dict(),
            "own_tflops_max": float(group["own_tflops"].max())}
    for math, group in table.groupby("math"):
        for dims, sub in group.groupby("dims"):
            summary["speed"][math][f"all {dims}D"] = {"layers": len(sub), "median_ratio": float(sub["ratio"].median()),
                                                   "faster_than_every_cudnn": int((sub["ratio"] < 1).sum())}
    checks = runs[runs["algo"].isin(OWN)]
    summary["checks"] = {a: {"runs": int((checks["algo"] == a).sum()),
                             "statuses": checks.loc[checks["algo"] == a, "status"].value_counts().to_dict(),
                             "max_rel_error": float(checks.loc[checks["algo"] == a, "rel_error"].max())}
                         for a in OWN}
    summary["energy"] = energy
    args.out.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.out / "layers.csv", index=False, float_format="%.6g")
    (args.out / "summary.json").write_text(json.dumps(summary, indent=1, default=float))
    plot_3d_runtimes(table[table["shape_id"].isin(focus) & (table["math"] == "fma")], args.out / "3d-runtimes-fma.png")
    plot_ratios(table, args.out / "ratios.png")
    print(json.dumps(summary, indent=1, default=float))
    return 0


def energy_summary(ok: pd.DataFrame) -> dict:
    """Per algorithm: energy per call and power; per layer: where the fastest algorithm and the
    one of least energy differ, and by how much."""
    with_energy = ok[ok["energy_mj"].notna()]
    if with_energy.empty:
        return {}
    per_algo = with_energy.groupby(["math", "algo"]).agg(runs=("energy_mj", "size"),
                                                         median_power_w=("power_w", "median"),
                                                         median_energy_mj=("energy_mj", "median"))
    picks = []
    for (shape_id, math), group in with_energy.groupby(["shape_id", "math"]):
        fastest = group.loc[group["time_ms"].idxmin()]
        frugal = group.loc[group["energy_mj"].idxmin()]
        picks.append({"shape_id": shape_id, "math": math, "layer": describe(fastest),
                      "fastest": fastest["algo"], "least_energy": frugal["algo"],
                      "energy_saved_pct": 100 * (1 - frugal["energy_mj"] / fastest["energy_mj"]),
                      "time_lost_pct": 100 * (frugal["time_ms"] / fastest["time_ms"] - 1)})
    picks = pd.DataFrame(picks)
    differ = picks[picks["fastest"] != picks["least_energy"]]
    return {"per_algorithm": {f"{m} {a}": row for (m, a), row in per_algo.to_dict("index").items()},
            "layers": len(picks), "picks_differ": differ.to_dict("records")}


def plot_3d_runtimes(table: pd.DataFrame, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if table.empty:
        return
    algos = [a for a in (*CUDNN, *OWN) if a in table.columns and table[a].notna().any()]
    table = table.sort_values("cudnn_best_ms")
    fig, ax = plt.subplots(figsize=(13, 5), constrained_layout=True)
    width = 0.8 / len(algos)
    x = np.arange(len(table))
    for i, algo in enumerate(algos):
        ax.bar(x + i * width, table[algo], width, label=algo, hatch="//" if algo in OWN else None)
    ax.set_yscale("log")
    ax.set_xticks(x + 0.4, [describe(r) for _, r in table.iterrows()], rotation=60, ha="right", fontsize=7)
    ax.set(ylabel="ms per call (median of bursts)", title="3D layers (CosmoFlow, 3D U-Net), batch 1, fma math")
    ax.legend(fontsize=7, ncol=3)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_ratios(table: pd.DataFrame, path: Path, max_lines: int = 12) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # One line per class for the largest classes; the grids' many small filter classes pooled.
    sizes = table.drop_duplicates("shape_id")["class"].value_counts()
    kept = set(sizes.index[:max_lines - 1]) if len(sizes) > max_lines else set(sizes.index)
    pooled = f"other ({len(sizes) - len(kept)} classes)"
    line_class = table["class"].where(table["class"].isin(kept), pooled)
    colors = dict(zip(sorted(line_class.unique()), plt.get_cmap("tab20").colors))
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5), constrained_layout=True, sharey=True)
    for ax, (math, group) in zip(axes, table.groupby("math")):
        for cls, sub in group.groupby(line_class[group.index]):
            ax.plot(np.sort(sub["ratio"]), np.linspace(0, 1, len(sub)), color=colors[cls], label=f"{cls} ({len(sub)})")
        ax.axvline(1, color="k", lw=0.8)
        ax.set(xscale="log", xlabel="seer's fastest kernel / cuDNN's fastest algorithm", title=f"{math} math")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of layers")
    axes[1].legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

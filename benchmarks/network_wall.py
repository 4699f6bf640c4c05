"""What a user of ``seer.torch.apply`` sees on whole networks: seer's picks against PyTorch's
own choice, in plain wall time per forward pass (eager, captured in a CUDA graph, and under
``torch.compile(mode="reduce-overhead")`` where profiled with ``--compiled``), from the
``overall.csv`` of ``seer profile-network``; or per training step, from its ``steps.csv``
(``--training``), with the GPU time of the step's convolutions pass by pass where its layers
were timed.

    python benchmarks/network_wall.py benchmarks/results/h100-network-wall/overall.csv \
        --out benchmarks/results/h100-network-wall/summary.md

For each (network, batch, math): eager and CUDA-graph ms per pass under seer, PyTorch's
default (heuristic) and ``cudnn.benchmark``; seer's ratio to the better of PyTorch's two;
and, where recorded, the spread of the timed windows (the largest interquartile range over
median of the three policies), the noise a ratio must exceed to mean anything; and, as a
second measure of noise, the cases where PyTorch's two policies differ by more than 1%.
The summary scores the targets of the fast runtime path: no case more than 1% slower than
PyTorch's better policy, and at least 15% faster on the median network at batch 32 under
strict FP32 (fma).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from training_step import STEP_ERROR_TARGET_PCT  # noqa: E402  (the issue's target, as that benchmark scores it)

from seer.algorithms import PASS_NAMES, PASSES  # noqa: E402

PYTORCH = ("heuristic", "benchmark")


def holds_steps(records: pd.DataFrame) -> bool:
    """Whether ``records`` are training steps (steps.csv of profile-network --training, whose
    picks are of three passes), not forward passes (overall.csv)."""
    return "bwd_data_picks" in records.columns


def comparison(overall: pd.DataFrame, column: str, seer: str = "seer") -> pd.DataFrame:
    """One row per (network, batch, math): ``column`` under each policy, and the ratio of seer's
    policy ``seer`` (``seer``, or ``seer-graph`` guarded for CUDA graphs) to the better of
    PyTorch's policies."""
    ok = overall[overall["status"] == "ok"]
    index = ["network", "batch", "math"]
    table = ok.pivot_table(index=index, columns="policy", values=column, aggfunc="last")
    # A run may have timed one of PyTorch's policies only: its best is then that one.
    table = table.reindex(columns=sorted({*table.columns, *PYTORCH})).dropna(subset=[seer])
    table = table[table[list(PYTORCH)].notna().any(axis=1)]
    table["seer"] = table[seer]
    table["pytorch_best"] = table[list(PYTORCH)].min(axis=1)
    table["seer_ratio"] = table["seer"] / table["pytorch_best"]
    spread_column = column.replace("_ms", "_spread")
    if spread_column in ok.columns and ok[spread_column].notna().any():
        # The largest interquartile range of the three policies' windows, over their median.
        spreads = ok.pivot_table(index=index, columns="policy", values=spread_column, aggfunc="last")
        spreads = spreads.reindex(columns=sorted({*spreads.columns, *PYTORCH}))
        table["spread"] = spreads[[seer, *PYTORCH]].max(axis=1).reindex(table.index)
    if not holds_steps(ok) and "fwd_picks" in ok.columns and ok.loc[ok["policy"] == seer, "fwd_picks"].notna().any():
        # Calls of a forward pass that ran a seer pick; none: seer's model was PyTorch's own, and its ratio is noise.
        rows = ok[ok["policy"] == seer].copy()
        if "confirmed_wall_ms" in rows:
            # Records from before fwd_picks was kept: profile-network confirms (times) every set of picks an
            # eager pass was weighed for, so a weighed pass with none confirmed took none.
            took_none = rows["fwd_picks"].isna() & rows["weighed_wall_ms"].notna() & rows["confirmed_wall_ms"].isna()
            rows.loc[took_none, "fwd_picks"] = 0
        table["seer_picks"] = rows.set_index(index)["fwd_picks"].groupby(level=index).last().reindex(table.index)
    return table.reset_index()


def summary(table: pd.DataFrame) -> dict:
    b32_fma = table[(table["batch"] == table["batch"].max()) & (table["math"] == "fma")]
    slower = table["seer_ratio"] > 1.01
    beyond = slower & (table["seer_ratio"] - 1 > table["spread"]) if "spread" in table else slower
    return {"cases": int(len(table)),
            "slower_than_1pct": int(slower.sum()),
            "slower_beyond_spread": int(beyond.sum()),
            "worst_ratio": float(table["seer_ratio"].max()),
            "median_ratio": float(table["seer_ratio"].median()),
            "median_ratio_largest_batch_fma": float(b32_fma["seer_ratio"].median()) if len(b32_fma) else np.nan,
            "networks_largest_batch_fma": int(len(b32_fma)),
            # The noise floor: PyTorch's two policies against each other (the same kernels on most layers).
            "pytorch_apart_1pct": int((abs(table["heuristic"] / table["benchmark"] - 1) > 0.01).sum()),
            **({"cases_with_picks": int((table["seer_picks"] > 0).sum()),
                "slower_with_picks": int((slower & (table["seer_picks"] > 0)).sum())}
               if "seer_picks" in table and table["seer_picks"].notna().all() else {})}


def markdown(table: pd.DataFrame, title: str) -> str:
    spread, picks = "spread" in table, "seer_picks" in table
    lines = [f"### {title}", "", "| network | batch | math | seer ms | heuristic ms | benchmark ms | seer / best |"
             + (" spread |" if spread else "") + (" picks |" if picks else ""),
             "|---|---|---|---|---|---|---|" + ("---|" if spread else "") + ("---|" if picks else "")]
    for r in table.sort_values(["math", "batch", "network"]).itertuples(index=False):
        lines.append(f"| {r.network} | {r.batch} | {r.math} | {r.seer:.2f} | {r.heuristic:.2f} | {r.benchmark:.2f} "
                     f"| {r.seer_ratio:.3f} |" + (f" {r.spread:.3f} |" if spread else "")
                     + (f" {r.seer_picks:.0f} |" if picks else ""))
    s = summary(table)
    lines += ["", f"{s['cases']} cases; seer more than 1% slower than PyTorch's better policy in "
                  f"{s['slower_than_1pct']} (by more than the spread of the windows: {s['slower_beyond_spread']}; "
                  f"worst {s['worst_ratio']:.3f}); median ratio {s['median_ratio']:.3f}; "
                  f"largest batch, fma: median {s['median_ratio_largest_batch_fma']:.3f} over "
                  f"{s['networks_largest_batch_fma']} networks. PyTorch's two policies are more than 1% apart "
                  f"in {s['pytorch_apart_1pct']}."
              + (f" seer ran any pick in {s['cases_with_picks']} cases, more than 1% slower in "
                 f"{s['slower_with_picks']} of them; in the others seer's model was PyTorch's own, so their "
                 "ratios are noise." if "cases_with_picks" in s else ""), ""]
    return "\n".join(lines)




def step_passes(steps: pd.DataFrame) -> str:
    """Per (network, batch, math), from the steps' per-pass sums of their layers' burst-timed GPU
    time: seer's over PyTorch's better policy in each pass and in all (the better policy of the
    whole step's sum), and seer's and PyTorch's default's predicted sums against the measured."""
    ok = steps[(steps["status"] == "ok") & steps["conv_ms"].notna()]
    lines = ["### GPU time of the step's convolutions, pass by pass: seer / PyTorch's better policy", "",
             "Each distinct convolution's forward, dgrad and wgrad timed in bursts behind a spinning kernel (host "
             "cost hidden) on the input it got in the step, times its calls, summed; `predicted`: seer's models' "
             "sum for the same algorithms (PyTorch's default choice modelled as a policy), and its error against the "
             "measured sum.", "",
             "| network | batch | math | " + " | ".join(PASS_NAMES[p] for p in PASSES)
             + " | step | seer ms | PyTorch's better ms | predicted seer | predicted heuristic |",
             "|---|---|---|" + "---|" * (len(PASSES) + 5)]
    errors = []
    for (network, batch, math), group in ok.groupby(["network", "batch", "math"], sort=True):
        by = group.set_index("policy")
        if "seer" not in by.index or not set(PYTORCH) & set(by.index):
            continue
        best = by.loc[[p for p in PYTORCH if p in by.index], "conv_ms"].idxmin()
        ratios = [by.loc["seer", f"{p}_conv_ms"] / by.loc[best, f"{p}_conv_ms"] for p in PASSES]
        cells = []
        for policy in ("seer", "heuristic"):
            if policy in by.index and pd.notna(by.loc[policy].get("predicted_conv_ms")):
                error = (by.loc[policy, "predicted_conv_ms"] / by.loc[policy, "conv_ms"] - 1) * 100
                errors.append(abs(error))
                cells.append(f"{error:+.1f}%")
            else:
                cells.append("-")
        lines.append(f"| {network} | {batch} | {math} | " + " | ".join(f"{r:.3f}" for r in ratios)
                     + f" | **{by.loc['seer', 'conv_ms'] / by.loc[best, 'conv_ms']:.3f}** | "
                     f"{by.loc['seer', 'conv_ms']:.2f} | {by.loc[best, 'conv_ms']:.2f} ({best}) | " + " | ".join(cells)
                     + " |")
    if errors:
        lines += ["", f"Predicted step convolution time within {STEP_ERROR_TARGET_PCT:.0f}% of the measured in "
                      f"{sum(e <= STEP_ERROR_TARGET_PCT for e in errors)} of {len(errors)} (network, math, policy); "
                      f"median absolute error {np.median(errors):.1f}%, worst {max(errors):.1f}%."]
    return "\n".join(lines + [""])


def run_with(overall: pd.DataFrame, policy: str) -> pd.DataFrame:
    """The rows of the first file that holds ``policy``: ratios compare policies timed in turn."""
    return overall[overall["run"] == overall.loc[overall["policy"] == policy, "run"].min()]


def compiled_how(run: pd.DataFrame) -> str:
    """How a run compiled seer's and PyTorch's policies, where it says (profiles before 0.8.1 do not)."""
    if "layout_optimization" not in run or run["layout_optimization"].isna().all():
        return ""
    on = run.groupby(run["policy"].isin(PYTORCH))["layout_optimization"].agg(lambda v: bool(v.dropna().all()))
    words = {True: "inductor's layout optimisation on", False: "layout optimisation off"}
    return f"; seer's compiled with {words[on.get(False, True)]}, PyTorch's with {words[on.get(True, True)]}"


def layout_control(overall: pd.DataFrame) -> pd.DataFrame | None:
    """seer-graph's compiled times against PyTorch's policies of another run that compiled them
    with inductor's layout optimisation off, where the files hold such a run; else None."""
    if "layout_optimization" not in overall:
        return None
    seer_run = run_with(overall, "seer-graph")
    off = overall[overall["policy"].isin(PYTORCH) & (overall["layout_optimization"] == False)  # noqa: E712
                  & (overall["run"] != seer_run["run"].iloc[0])]
    if off.empty:
        return None
    table = comparison(pd.concat([seer_run[seer_run["policy"] == "seer-graph"], off]), "compiled_ms", seer="seer-graph")
    return table if len(table) else None


def ceiling(overall: pd.DataFrame) -> str:
    """Why the eager gain stops where it does, at the largest batch under fma: the GPU time of the
    picks guarded for CUDA graphs (every pick the models make, no host cost counted) over PyTorch's
    better policy, which bounds what any eager guard can gain; and PyTorch's eager time over its GPU
    time, above 1 where the host, not the GPU, sets the pass's time."""
    # Each ratio against PyTorch's policies of its own run, timed in turn with it.
    gpu = comparison(run_with(overall, "seer-graph"), "forward_ms", seer="seer-graph")
    eager_run = run_with(overall, "seer")
    eager, eager_gpu = comparison(eager_run, "eager_ms"), comparison(eager_run, "forward_ms")
    gpu, eager, eager_gpu = (t.set_index(["network", "batch", "math"]) for t in (gpu, eager, eager_gpu))
    table = pd.DataFrame({"picks_gpu_ratio": gpu["seer_ratio"], "seer_eager_ratio": eager["seer_ratio"],
                          "pytorch_host_excess": eager["pytorch_best"] / eager_gpu["pytorch_best"]}).dropna().reset_index()
    table = table[(table["batch"] == table["batch"].max()) & (table["math"] == "fma")]
    lines = ["### What the picks could gain: largest batch, fma", "",
             "| network | GPU time, all picks / PyTorch's best | eager, seer / PyTorch's best "
             "| PyTorch eager / PyTorch GPU time |", "|---|---|---|---|"]
    for r in table.sort_values("picks_gpu_ratio").itertuples(index=False):
        lines.append(f"| {r.network} | {r.picks_gpu_ratio:.3f} | {r.seer_eager_ratio:.3f} | {r.pytorch_host_excess:.3f} |")
    won = int((table["picks_gpu_ratio"] <= 0.85).sum())
    lines += ["", f"{len(table)} networks: median GPU-time ratio of every pick {table['picks_gpu_ratio'].median():.3f} "
                  f"({won} networks at 15% or more); median eager ratio {table['seer_eager_ratio'].median():.3f}.", ""]
    return "\n".join(lines)


def bar_panels(frame: pd.DataFrame, bars: dict[str, str], path: Path, xlabel: str, xlim: tuple[float, float],
               marks: tuple[tuple[float, dict], ...] = ((1.0, {}),), errors: dict[str, str] | None = None,
               legend: str = "lower right") -> None:
    """One panel per (batch, math) of ``frame``: per network, a horizontal bar for each of ``bars``
    (legend label -> column), a vertical line at each of ``marks`` (x, line style beside black),
    and, for the bars named in ``errors``, that column as an error bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = sorted(frame.groupby(["batch", "math"]).groups)
    # One row per network in every panel (the panels share their y axis), empty where a panel lacks it.
    networks = sorted(set(frame["network"]))
    row = {name: i for i, name in enumerate(networks)}
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 5.5), sharey=True, constrained_layout=True)
    offsets = (-0.2, 0.2)
    for ax, (batch, math) in zip(np.atleast_1d(axes), panels):
        part = frame[(frame["batch"] == batch) & (frame["math"] == math)]
        y = part["network"].map(row).to_numpy()
        for offset, (label, column) in zip(offsets, bars.items()):
            error = (errors or {}).get(label)
            extra = {"xerr": part[error] if error in part else None, "error_kw": {"lw": 0.8}} if error else {}
            ax.barh(y + offset, part[column], height=0.4, label=label, **extra)
        for x, style in marks:
            ax.axvline(x, **{"color": "k", "lw": 0.8, **style})
        ax.set(title=f"batch {batch}, {math}", yticks=np.arange(len(networks)), yticklabels=networks, xlim=xlim)
        ax.grid(axis="x", alpha=0.3)
    np.atleast_1d(axes)[0].legend(loc=legend, fontsize=8)
    fig.supxlabel(xlabel, fontsize=10)  # once: each panel's own would run into its neighbour's
    fig.savefig(path, dpi=100)
    plt.close(fig)


def plot(overall: pd.DataFrame, path: Path, unit: str = "pass") -> None:
    """seer's time over PyTorch's better policy per network, eager and captured in a CUDA graph,
    with the spread of the eager windows as an error bar (:func:`bar_panels`)."""
    eager, graph = comparison(overall, "eager_ms"), comparison(overall, "graph_ms")
    keys = ["network", "batch", "math"]
    both = eager.merge(graph[[*keys, "seer_ratio"]], on=keys, suffixes=("_eager", "_graph"))
    bar_panels(both, {"eager": "seer_ratio_eager", "CUDA graph": "seer_ratio_graph"}, path,
               f"seer / PyTorch's better policy (wall time per {unit})", (0.5, 1.5), errors={"eager": "spread"})


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overall", type=Path, nargs="+", help="overall.csv files of seer profile-network")
    parser.add_argument("--out", type=Path, help="markdown summary (default: print)")
    parser.add_argument("--plot", type=Path, help="PNG: seer / PyTorch's best per network, eager and CUDA graph")
    args = parser.parse_args(argv)
    overall = pd.concat([pd.read_csv(p).assign(run=i) for i, p in enumerate(args.overall)], ignore_index=True)
    parts = []
    policies = set(overall["policy"])

    unit = "training step" if holds_steps(overall) else "pass"
    for column, title in (("eager_ms", f"Eager: plain wall time per {unit}, back to back"),
                          ("graph_ms", "Captured in a CUDA graph: wall time per replay"),
                          ("forward_ms", "GPU time per pass (bursts behind a spinning kernel; host cost hidden)"),
                          ("conv_ms", "GPU time of the step's convolutions (each layer's three passes in bursts "
                                      "behind a spinning kernel, host cost hidden, times its calls)")):
        if "seer" in policies and column in overall.columns and overall[column].notna().any():
            parts.append(markdown(comparison(run_with(overall, "seer"), column), title))
    if "seer-all" in policies and overall["eager_ms"].notna().any():
        parts.append(markdown(comparison(run_with(overall, "seer-all"), "eager_ms", seer="seer-all"),
                              f"Eager, seer's picks among every algorithm, its own kernels too (seer-all), per {unit}"))
    if "seer-graph" in policies and overall["graph_ms"].notna().any():
        parts.append(markdown(comparison(run_with(overall, "seer-graph"), "graph_ms", seer="seer-graph"),
                              f"Captured in a CUDA graph, seer's picks guarded for CUDA graphs (seer-graph), per {unit}"))
    if "seer-graph" in policies and "compiled_ms" in overall and overall["compiled_ms"].notna().any():
        modes = overall["compile_mode"].dropna().unique() if "compile_mode" in overall else []
        mode = "', '".join(sorted(modes)) or "reduce-overhead"  # profiles before 0.8.1 timed that mode alone
        for seer in ("seer-graph", "seer") if "seer" in policies else ("seer-graph",):
            run = run_with(overall, seer)
            parts.append(markdown(comparison(run, "compiled_ms", seer=seer),
                                  f"Under torch.compile(mode='{mode}'), seer's picks "
                                  + ("guarded for CUDA graphs (seer-graph)" if seer == "seer-graph"
                                     else "weighed for an eager pass (seer)") + f"{compiled_how(run)}, "
                                  f"wall time per {unit}"))
        control = layout_control(overall)
        if control is not None:
            parts.append(markdown(control, "Under torch.compile, seer-graph (the first file) against PyTorch's "
                                           "policies compiled with inductor's layout optimisation off too (the "
                                           f"second file: another run), wall time per {unit}"))
    if {"seer", "seer-graph"} <= policies and "forward_ms" in overall and overall["forward_ms"].notna().any():
        parts.append(ceiling(overall))
    if holds_steps(overall) and "seer" in policies and "conv_ms" in overall and overall["conv_ms"].notna().any():
        parts.append(step_passes(run_with(overall, "seer")))
    text = "\n".join(parts)
    if args.plot and "seer" in policies:
        plot(run_with(overall, "seer"), args.plot, unit)
    if args.out:
        args.out.write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

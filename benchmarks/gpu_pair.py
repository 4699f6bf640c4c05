"""Two measured GPUs side by side: does a layer's fastest forward algorithm, or a GPU's model, carry over?

    python benchmarks/gpu_pair.py --gpus h100,h200 --out benchmarks/results/h100-h200-pair

On the layers both GPUs timed with every cuDNN forward algorithm (the collector's protocol, fp32
NC[D]HW): how often the fastest algorithm is the same, what the second GPU loses by running the
first one's fastest, and the ratio of their times by arithmetic intensity (FLOPs per byte of
input, filter and output). Then the models: on the second GPU's held-out layers (Test-set-II),
the first GPU's shipped model picking for the second against the second's own model, and each
model's time error there, pooled and per algorithm; beside them, the first GPU's model on the
first GPU's own held-out layers, the error it carries over from. Writes ``gpu-pair.json`` and ``.md``.
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
from seer.layers.shapes import LAYER_COLUMNS, frame_flops, frame_tensor_bytes
from seer.predict.persist import load_model
from seer.reporting.scoring import chosen_times, selection_metrics
from seer.schema import DatasetDir

MATHS = ("fma", "default")
#: Arithmetic intensity buckets (FLOPs per byte of the three tensors).
INTENSITY_EDGES = (0, 10, 50, 200, np.inf)


def intensity(layers: pd.DataFrame) -> pd.Series:
    """FLOPs per byte of input, filter and output (fp32) of each layer."""
    return pd.Series(frame_flops(layers) / frame_tensor_bytes(layers), index=layers.index)


def wide_times(table: pd.DataFrame, math: str, algos: list[str]) -> pd.DataFrame:
    """Per layer timed with every one of ``algos`` (each ``ok`` or refused): the times, NaN where refused."""
    rows = math_rows(table, math)  # seer's kernels, one code path, ran under fma alone
    rows = rows[rows["algo"].isin(algos)]
    complete = rows.groupby("shape_id")["algo"].nunique() == len(algos)
    rows = rows[rows["shape_id"].isin(complete[complete].index)]
    ok = rows[rows["status"] == "ok"]
    wide = ok.pivot_table(index="shape_id", columns="algo", values="time_ms").reindex(columns=algos)
    return wide[wide.notna().any(axis=1)]


def measured(first: pd.DataFrame, second: pd.DataFrame, layers: pd.DataFrame, names: tuple[str, str]) -> dict:
    out = {}
    for math in MATHS:
        for group in ("cudnn", "all"):
            if group == "all" and math != "fma":
                continue  # seer's kernels run under strict FP32 only
            algos = algorithm_names(group if group == "cudnn" else None)
            algos = [a for a in algos if not a.startswith("PYTORCH")]
            a, b = wide_times(first, math, algos), wide_times(second, math, algos)
            shared = a.index.intersection(b.index)
            a, b = a.loc[shared], b.loc[shared]
            if not len(shared):
                continue
            best_a, best_b = a.idxmin(axis=1), b.idxmin(axis=1)
            fastest_b = b.min(axis=1)
            # the second GPU running the first's fastest (NaN where it refuses it there)
            carried = pd.Series(chosen_times(b, best_a), index=b.index)
            runs = carried.notna()
            scores = selection_metrics(b, best_a)
            ratio = b.min(axis=1) / a.min(axis=1)
            buckets = pd.cut(intensity(layers.loc[shared]), INTENSITY_EDGES, right=False)
            by_bucket = {str(k): {"layers": int(len(v)), "median_ratio": float(v.median())}
                         for k, v in ratio.groupby(buckets, observed=True)}
            per_algo = {algo: {"layers": int((a[algo].notna() & b[algo].notna()).sum()),
                               "median_ratio": float((b[algo] / a[algo]).median())}
                        for algo in algos if (a[algo].notna() & b[algo].notna()).sum() >= 20}
            out[f"{math}/{group}"] = {
                "layers": int(len(shared)),
                "same_fastest_percent": float(100 * (best_a == best_b).mean()),
                "carried_pick_runs_percent": float(100 * runs.mean()),
                "carried_pick_mean_regret_percent": scores["mean_regret_pct"],
                "carried_pick_p95_regret_percent": scores["p95_regret_pct"],
                "carried_pick_total_ratio": float(carried[runs].sum() / fastest_b[runs].sum()),
                "fastest_time_ratio_median": float(ratio.median()),
                "fastest_time_ratio_by_intensity": by_bucket,
                "time_ratio_per_algorithm": per_algo}
    return out


def scored(model, math: str, wide: pd.DataFrame, layers: pd.DataFrame) -> dict:
    """``model``'s picks among cuDNN's algorithms on the layers of ``wide`` (measured ms per layer
    and algorithm) and its time error, pooled and per algorithm."""
    shapes = layers.loc[wide.index, list(LAYER_COLUMNS)].reset_index(drop=True)
    fastest = wide.min(axis=1).to_numpy()
    predictions = model.predict(shapes, math, algorithms="cudnn")
    picks = predictions.drop_duplicates("layer").set_index("layer")["algo"].reindex(range(len(wide)))
    picks.index = wide.index
    took = chosen_times(wide, picks)
    ran = np.isfinite(took)
    scores = selection_metrics(wide, picks)
    ranked = predictions.dropna(subset=["algo"])
    truth = wide.to_numpy()[ranked["layer"].to_numpy(), wide.columns.get_indexer(ranked["algo"].to_numpy())]
    known = np.isfinite(truth)
    ape = pd.Series(np.abs(ranked["predicted_ms"].to_numpy()[known] / truth[known] - 1))
    per_algorithm = ape.groupby(ranked["algo"].to_numpy()[known]).mean() * 100
    return {"layers": int(len(wide)), "top1_percent": scores["top1_pct"], "picks_not_run": scores["picks_not_run"],
            "mean_regret_percent": scores["mean_regret_pct"], "total_ratio": float(took[ran].sum() / fastest[ran].sum()),
            "time_mape_percent": float(100 * ape.mean()), "time_median_ape_percent": float(100 * ape.median()),
            "time_mape_percent_per_algorithm": {str(a): float(v) for a, v in per_algorithm.items()}}


def models(first: pd.DataFrame, second: pd.DataFrame, layers: pd.DataFrame, names: tuple[str, str],
           models_dir: Path | None, candidates: dict[str, Path]) -> dict:
    """The first GPU's model, the second's shipped one and other ``candidates`` of the second's
    (label: models directory), picking (cuDNN's algorithms) for the second's Test-set-II; and,
    under ``own``, the first GPU's model on the first GPU's Test-set-II."""
    out = {}
    algos = algorithm_names("cudnn")
    for math in MATHS:
        wide = wide_times(second[second["split"] == "test2"], math, algos)
        if wide.empty:
            continue
        out[math] = {"layers": int(len(wide))}
        sets = {f"{gpu} model": (gpu, models_dir) for gpu in names} | {
            label: (names[1], folder) for label, folder in candidates.items()}
        for label, (gpu, folder) in sets.items():
            out[math][label] = scored(load_model(gpu, math=math, models_dir=folder), math, wide, layers)
        own = wide_times(first[first["split"] == "test2"], math, algos)
        out[math]["own"] = scored(load_model(names[0], math=math, models_dir=models_dir), math, own, layers)
    return out


def markdown(results: dict) -> str:
    a, b = results["gpus"]
    lines = [f"# {a} and {b}: what carries over from one GPU to the other", "",
             f"Measured on both with the collector's protocol (burst timing behind a spinning kernel), fp32 NC[D]HW; "
             f"`{results['command']}`. Data: `data/{a}/`, `data/{b}/` ({results['provenance']}).", "",
             "## Measured: the layers both GPUs timed with every algorithm", "",
             f"`same fastest`: the fastest algorithm is the same on both. `{b} running {a}'s fastest`: the time on "
             f"{b} of the algorithm fastest on {a}, over {b}'s fastest (where {b} runs it). `{b}/{a}`: ratio of the "
             "fastest times.", "",
             f"| math | algorithms | layers | same fastest | {b} runs it | mean regret | p95 regret | total / fastest "
             f"| {b}/{a} fastest, median |", "|---|---|---|---|---|---|---|---|---|"]
    for key, r in results["measured"].items():
        math, group = key.split("/")
        lines.append(f"| {math} | {group} | {r['layers']} | {r['same_fastest_percent']:.1f}% | "
                     f"{r['carried_pick_runs_percent']:.1f}% | {r['carried_pick_mean_regret_percent']:.2f}% | "
                     f"{r['carried_pick_p95_regret_percent']:.1f}% | {r['carried_pick_total_ratio']:.4f} | "
                     f"{r['fastest_time_ratio_median']:.3f} |")
    lines += ["", f"{b}/{a} ratio of the fastest times by arithmetic intensity (FLOPs per byte of the three fp32 "
                  "tensors), and per algorithm (median over the layers where both ran it):", ""]
    for key, r in results["measured"].items():
        buckets = ", ".join(f"{k}: {v['median_ratio']:.3f} ({v['layers']})"
                            for k, v in r["fastest_time_ratio_by_intensity"].items())
        algos = ", ".join(f"{k} {v['median_ratio']:.3f}" for k, v in r["time_ratio_per_algorithm"].items())
        lines += [f"- {key}: by intensity {buckets}", f"  - per algorithm: {algos}"]
    lines += ["", f"## Models: picking for {b}'s held-out layers (Test-set-II) among cuDNN's algorithms", "",
              f"{a}'s shipped model, used as if it were {b}'s, against {b}'s shipped one (and others given with "
              f"`--candidate`). Time error: every ranked "
              f"algorithm's predicted time against its time measured on {b}.", "",
              "| math | model | layers | top-1 | mean regret | total / fastest | picks not run | time MAPE | "
              "median APE |", "|---|---|---|---|---|---|---|---|---|"]
    for math, r in results["models"].items():
        for name, v in r.items():
            if name in ("layers", "own"):
                continue
            lines.append(f"| {math} | {name} | {r['layers']} | {v['top1_percent']:.1f}% | "
                         f"{v['mean_regret_percent']:.2f}% | {v['total_ratio']:.4f} | {v['picks_not_run']} | "
                         f"{v['time_mape_percent']:.1f}% | {v['time_median_ape_percent']:.1f}% |")
    lines += ["", f"## {a}'s model on {b} against {a}'s model on {a}: what carrying it over costs", "",
              f"Time MAPE per cuDNN algorithm: {a}'s shipped model on {b}'s Test-set-II (above) and on {a}'s own "
              f"Test-set-II, where its error was measured; and the picks' mean regret on each.", "",
              f"| math | algorithm | on {b} | on {a} | points more |", "|---|---|---|---|---|"]
    for math, r in results["models"].items():
        there, own = r[f"{a} model"], r["own"]
        for algo, mape in there["time_mape_percent_per_algorithm"].items():
            home = own["time_mape_percent_per_algorithm"].get(algo, float("nan"))
            lines.append(f"| {math} | {algo} | {mape:.1f}% | {home:.1f}% | {mape - home:+.1f} |")
        lines.append(f"| {math} | all, pooled ({there['layers']} and {own['layers']} layers) | "
                     f"{there['time_mape_percent']:.1f}% | {own['time_mape_percent']:.1f}% | "
                     f"{there['time_mape_percent'] - own['time_mape_percent']:+.1f} |")
        lines.append(f"| {math} | the picks' mean regret | {there['mean_regret_percent']:.2f}% | "
                     f"{own['mean_regret_percent']:.2f}% | {there['mean_regret_percent'] - own['mean_regret_percent']:+.2f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", default="h100,h200", help="two measured GPUs, comma-separated")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument("--candidate", action="append", default=[], metavar="LABEL=DIR",
                        help="also score the second GPU's model in models directory DIR, labelled LABEL")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    names = tuple(g.strip() for g in args.gpus.split(","))
    if len(names) != 2:
        parser.error("--gpus takes two GPUs")
    columns = ["shape_id", "split", "math", "algo", "status", "time_ms", *LAYER_COLUMNS]
    tables = [read_measurements(DatasetDir(args.data_dir / g).measurements, columns, passes=("fwd",)) for g in names]
    layers = pd.concat(tables).drop_duplicates("shape_id").set_index("shape_id")
    provenance = []
    for g in names:
        p = json.loads((args.data_dir / g / "provenance.json").read_text())
        device, cudnn = p["gpu"]["device_name"], p["software"]["cudnn_version"]
        provenance.append(f"{', '.join(device)}, cuDNN {', '.join(cudnn)}")
    results = {"gpus": list(names), "command": "python benchmarks/gpu_pair.py " + " ".join(argv or sys.argv[1:]),
               "provenance": "; ".join(provenance),
               "measured": measured(*tables, layers, names),
               "models": models(*tables, layers, names, args.models_dir,
                                dict(c.split("=", 1) for c in args.candidate))}
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu-pair.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "gpu-pair.md").write_text(markdown(results))
    print(markdown(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())

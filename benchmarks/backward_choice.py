"""How much PyTorch's own backward choice leaves on the table: measured, per pass and math mode.

    python benchmarks/backward_choice.py --gpu h200 --out benchmarks/results/h200-backward-choice

For every layer of a GPU's dataset where PyTorch's dgrad (``PYTORCH_BWD_DATA``) or wgrad
(``PYTORCH_BWD_FILTER``) ran, per math mode and group of grids (the held-out networks of
Test-set-II, the training networks, the random grids): the measured time of PyTorch's default
choice, of ``cudnn.benchmark``, of cuDNN's v7 heuristic's first choice among the legacy
algorithms, and of the fastest legacy algorithm (the oracle). Reports the totals over the
layers and the per-layer ratios to the fastest (mean, geometric mean, 90th percentile), and
how often each algorithm is the fastest. Writes ``backward-choice.json`` and ``.md``.
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
from seer.schema import DatasetDir

GROUPS = {"held-out networks (Test-set-II)": ("test-set-ii", "test-set-ii-general"),
          "training networks": ("networks", "networks-general"),
          "random grids": ("random", "random-extra")}
POLICY = {"bwd_data": ("PYTORCH_BWD_DATA", "PYTORCH_BENCHMARK_BWD_DATA"),
          "bwd_filter": ("PYTORCH_BWD_FILTER", "PYTORCH_BENCHMARK_BWD_FILTER")}


def summary(table: pd.DataFrame, pass_: str, math: str, grids) -> dict | None:
    rows = table[(table["pass"] == pass_) & (table["math"] == math) & table["grid"].isin(grids)]
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        return None
    wide = ok.pivot_table(index="shape_id", columns="algo", values="time_ms")
    default, benchmark = POLICY[pass_]
    legacy = [a for a in algorithm_names("cudnn", pass_=pass_) if a in wide.columns]
    wide = wide[wide[default].notna() & wide[legacy].notna().any(axis=1)]
    fastest = wide[legacy].min(axis=1)
    heuristic = ok[(ok["heuristic_rank"] == 1) & ok["algo"].isin(legacy)].drop_duplicates("shape_id")
    heuristic = heuristic.set_index("shape_id")["time_ms"].reindex(wide.index)
    out = {"layers": int(len(wide)), "total_ms": {"fastest legacy algorithm": float(fastest.sum())}}

    def ratios(name: str, times: pd.Series) -> None:
        known = times.notna()
        ratio = (times[known] / fastest[known]).to_numpy()
        out["total_ms"][name] = float(times[known].sum())
        out.setdefault("vs_fastest", {})[name] = {
            "layers": int(known.sum()), "total_ratio": float(times[known].sum() / fastest[known].sum()),
            "mean_percent": float(100 * (ratio.mean() - 1)), "geomean_percent": float(100 * (np.exp(np.log(ratio).mean()) - 1)),
            "p90_percent": float(100 * (np.percentile(ratio, 90) - 1)),
            "within_1_percent": float(np.mean(ratio <= 1.01))}

    ratios("PyTorch default", wide[default])
    if benchmark in wide.columns:
        ratios("PyTorch cudnn.benchmark", wide[benchmark])
    ratios("cuDNN heuristic (v7 first)", heuristic)
    out["fastest_counts"] = {a: int(n) for a, n in wide[legacy].idxmin(axis=1).value_counts().items()}
    return out


def markdown(results: dict, gpu: str) -> str:
    lines = [f"# PyTorch's backward choice against the fastest legacy algorithm ({gpu})", "",
             "Measured times (burst timing behind a spinning kernel, the collector's protocol); ratio to the "
             "fastest legacy cuDNN algorithm of the pass per layer. `python benchmarks/backward_choice.py "
             f"--gpu {gpu}`.", ""]
    for group, by_pass in results.items():
        lines += [f"## {group}", "", "| pass | math | layers | policy | total / fastest | mean | geomean | p90 | "
                  "within 1% |", "|---|---|---|---|---|---|---|---|---|"]
        for key, r in by_pass.items():
            pass_, math = key.split("/")
            for name, v in r["vs_fastest"].items():
                lines.append(f"| {pass_} | {math} | {v['layers']} | {name} | {v['total_ratio']:.3f} | "
                             f"{v['mean_percent']:+.1f}% | {v['geomean_percent']:+.1f}% | {v['p90_percent']:+.1f}% | "
                             f"{100 * v['within_1_percent']:.0f}% |")
        lines.append("")
        lines += ["Fastest legacy algorithm, layers per algorithm:", ""]
        for key, r in by_pass.items():
            lines.append(f"- {key}: " + ", ".join(f"{a} {n}" for a, n in r["fastest_counts"].items()))
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", required=True)
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    table = read_measurements(DatasetDir(args.data_dir / args.gpu).measurements,
                              ["shape_id", "grid", "math", "algo", "pass", "status", "time_ms", "heuristic_rank"],
                              passes=("bwd_data", "bwd_filter"))
    results = {}
    for group, grids in GROUPS.items():
        by_pass = {f"{p}/{m}": r for p in POLICY for m in ("fma", "default")
                   if (r := summary(table, p, m, grids)) is not None}
        if by_pass:
            results[group] = by_pass
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "backward-choice.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "backward-choice.md").write_text(markdown(results, args.gpu) + "\n")
    print(markdown(results, args.gpu))
    return 0


if __name__ == "__main__":
    sys.exit(main())

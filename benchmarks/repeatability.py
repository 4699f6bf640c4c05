"""How well does one measurement of a layer predict another? Test-set-II timed twice.

    python benchmarks/repeatability.py --gpu h100 --again benchmarks/data/h100-again \
        --report benchmarks/results/h100-repeatability.json

``--again`` is a dataset directory that a later session filled from scratch with
``seer collect --gpu h100 --data-dir ROOT --grid test-set-ii,test-set-ii-general``, on
whatever machine the device lent then. Its runs are matched with the shipped dataset's
runs of the same layers, and the first measurement is scored as if it were a model
predicting the second: per algorithm the relative difference of the times (the MAPE a
perfect model of the first session would score on the second), whether cuDNN asked for
the same workspace and ran the same main kernel, and per part of Test-set-II how often the
fastest algorithm of the first session is the fastest of the second (top-1) and what
picking it costs there (regret). These are floors under what any model can reach
against measurements, whatever its accuracy. Where the runs were traced, it also splits
the differences by how much of a call's time its kernels leave the GPU idle (the gaps
between launches), and compares the kernels' own traced time between the sessions.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from seer.collect.store import RunStore
from seer.dataset.build import measurements_table, read_measurements
from seer.hardware.gpus import get_gpu_spec
from seer.layers.shapes import layer_frame, layer_kind_flags
from seer.reporting.scoring import selection_metrics
from seer.schema import RUN_KEY

#: Test-set-II's parts, by the grid that first timed each layer.
PARTS = {"test-set-ii": "SEER's 300 square layers", "test-set-ii-general": "held-out networks, every kind"}


def second_session(dataset_dir: Path, gpu: str) -> pd.DataFrame:
    """The runs table of ``dataset_dir``, as ``seer parse`` builds it, in the columns compared here."""
    runs = measurements_table(RunStore(dataset_dir), get_gpu_spec(gpu))
    if runs.empty:
        raise SystemExit(f"{dataset_dir}: no timing records")
    return runs[[*RUN_KEY, "status", "time_ms", "workspace_bytes", "trace_variant", "trace_time_ms",
                 "trace_n_kernels", "sm_clock_mhz"]]


def difference_pct(first: pd.Series, again: pd.Series) -> pd.Series:
    """How far the second session's time is from the first's, in percent of the first."""
    return (again / first - 1).abs() * 100


def both_ok(pairs: pd.DataFrame) -> pd.DataFrame:
    """The runs that succeeded in both sessions, with their time ``difference`` in percent."""
    ok = pairs[(pairs["status_first"] == "ok") & (pairs["status_again"] == "ok")].copy()
    ok["difference"] = difference_pct(ok["time_ms_first"], ok["time_ms_again"])
    return ok


def time_agreement(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per part, math and algorithm: how the two sessions' times, workspaces and kernels agree."""
    ok = both_ok(pairs)
    traced = ok["trace_variant_first"].notna() & ok["trace_variant_again"].notna()
    ok["same_kernel"] = np.where(traced, ok["trace_variant_first"] == ok["trace_variant_again"], np.nan)
    ok["same_workspace"] = ok["workspace_bytes_first"] == ok["workspace_bytes_again"]
    by = ok.groupby(["part", "math", "algo"])
    return pd.DataFrame({
        "runs": by.size(),
        "mape_pct": by["difference"].mean(),
        "median_difference_pct": by["difference"].median(),
        "over_10pct_pct": by["difference"].apply(lambda d: (d > 10).mean() * 100),
        "same_workspace_pct": by["same_workspace"].mean() * 100,
        "same_main_kernel_pct": by["same_kernel"].mean() * 100,
    }).round(2).reset_index()


#: Bins of the share of a call's time that its traced kernels leave idle, in percent.
GAP_BINS = (0, 5, 20, 40, 100)


def gap_agreement(pairs: pd.DataFrame) -> pd.DataFrame:
    """Per algorithm and bin of the first session's idle share (1 - kernel time / call time):
    how the two sessions' call times differ, against how the traced kernel times do."""
    ok = both_ok(pairs)
    ok = ok[ok["trace_time_ms_first"].notna() & ok["trace_time_ms_again"].notna()].copy()
    ok["kernel_difference"] = difference_pct(ok["trace_time_ms_first"], ok["trace_time_ms_again"])
    idle = (1 - ok["trace_time_ms_first"] / ok["time_ms_first"]).clip(lower=0) * 100
    ok["idle_pct"] = pd.cut(idle, GAP_BINS, include_lowest=True, right=False)
    by = ok.groupby(["algo", "idle_pct"], observed=True)
    table = pd.DataFrame({
        "runs": by.size(),
        "time_mape_pct": by["difference"].mean(),
        "kernel_time_mape_pct": by["kernel_difference"].mean(),
        "median_kernels_per_call": by["trace_n_kernels_first"].median(),
        "median_time_ms": by["time_ms_first"].median(),
    }).round(3).reset_index()
    return table.assign(idle_pct=table["idle_pct"].astype(str))


def selection_agreement(pairs: pd.DataFrame, first: pd.DataFrame) -> pd.DataFrame:
    """Per part, math and layer kind: the first session's fastest algorithm judged on the second's times."""
    both = both_ok(pairs)
    rows = []
    for (part, math), runs in both.groupby(["part", "math"]):
        first_times = runs.pivot(index="shape_id", columns="algo", values="time_ms_first")
        again_times = runs.pivot(index="shape_id", columns="algo", values="time_ms_again")
        # Only layers whose every algorithm ran both times: a pick must be scorable.
        ran = first[(first["math"] == math) & (first["status"] == "ok")].groupby("shape_id").size()
        complete = first_times.notna().sum(axis=1) == ran.reindex(first_times.index)
        first_times, again_times = first_times[complete], again_times[complete]
        picks = first_times.idxmin(axis=1)
        layers = layer_frame(first.drop_duplicates("shape_id").set_index("shape_id").loc[first_times.index])
        kinds = layer_kind_flags(layers).set_axis(first_times.index)
        groups = {"all": np.ones(len(picks), dtype=bool), **{k: kinds[k].to_numpy() for k in kinds if kinds[k].any()}}
        for kind, member in groups.items():
            rows.append({"part": part, "math": math, "kind": kind}
                        | selection_metrics(again_times[member], picks[member]))
    return pd.DataFrame(rows).round(2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--again", type=Path, required=True, help="dataset directory of the second session")
    parser.add_argument("--report", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)

    first = read_measurements(args.data_dir / args.gpu / "measurements")
    first = first[first["grid"].isin(PARTS)]
    again = second_session(args.again, args.gpu)
    pairs = first.merge(again, on=list(RUN_KEY), suffixes=("_first", "_again"))
    pairs["part"] = pairs["grid"].map(PARTS)
    statuses = pd.crosstab(pairs["status_first"], pairs["status_again"])
    times, selection = time_agreement(pairs), selection_agreement(pairs, first)
    gaps = gap_agreement(pairs)
    clocks = {"first": float(pairs["sm_clock_mhz_first"].median()), "again": float(pairs["sm_clock_mhz_again"].median())}
    with pd.option_context("display.width", 200, "display.max_rows", 200):
        print(f"{len(pairs)} runs of {pairs['shape_id'].nunique()} layers timed in both sessions; "
              f"median SM clock {clocks['first']:.0f} and {clocks['again']:.0f} MHz")
        print("status (rows: first session, columns: again)\n" + statuses.to_string())
        print(times.to_string(index=False))
        print("by idle share of the first session's call (traced runs)\n" + gaps.to_string(index=False))
        print(selection.to_string(index=False))
    if args.report:
        report = {"gpu": args.gpu, "command": "python benchmarks/repeatability.py " + " ".join(argv or sys.argv[1:]),
                  "runs": len(pairs), "layers": int(pairs["shape_id"].nunique()), "median_sm_clock_mhz": clocks,
                  "statuses": {f"{a} -> {b}": int(statuses.at[a, b]) for a in statuses.index for b in statuses.columns
                               if statuses.at[a, b]},
                  "times": times.to_dict(orient="records"), "idle_share": gaps.to_dict(orient="records"),
                  "selection": selection.to_dict(orient="records")}
        tmp = args.report.with_suffix(".tmp")
        tmp.write_text(json.dumps(report, indent=2) + "\n")
        tmp.replace(args.report)
    return 0


if __name__ == "__main__":
    sys.exit(main())

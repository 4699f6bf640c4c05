"""Does one GPU's sparse model carry over to another GPU? (CPU)

    python benchmarks/sparse_transfer.py --gpu h100 --model-gpu h200 --out benchmarks/results/h100-sparse-transfer

On ``--gpu``'s sparse measurements (``data/<gpu>/sparse_measurements``), each ``ok`` run of seer's
sparse kernels is predicted by ``--model-gpu``'s shipped sparse model (``models/<model-gpu>/sparse.json``)
at its share of zeros and measured crowding, and compared with the time ``--model-gpu`` itself
measured for the same run (same layer, level, pattern and kernel), where it did. Per kernel and
pattern: runs, the model's mean absolute percentage error and bias (median of measured / predicted),
the share inside its 80% interval, and the median time ratio of the two GPUs. Then the sparse-or-dense
decision per (layer, level, pattern), where ``--gpu`` also timed cuDNN's algorithms on the layer: the
best sparse kernel by prediction against the best cuDNN time measured on ``--gpu``, right where it
agrees with the measured best sparse kernel against that same time.
Writes ``summary.md`` and ``runs.csv``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from seer.algorithms import algorithm_names
from seer.dataset.build import read_sparse_measurements
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.guard import GUARD_LEVEL
from seer.predict.sparse import load_sparse_model, run_crowding, sparse_training_rows
from seer.schema import INTERVAL_LEVELS
from sparse_seed import markdown_table

KEY = ["dense_shape_id", "sparsity", "sparsity_pattern", "algo", "math"]


def predicted_runs(rows: pd.DataFrame, model) -> pd.DataFrame:
    """``rows`` (sparse kernels' ok runs) with the model's time and 80% interval for each."""
    crowding = run_crowding(rows)
    times = model.times(rows[list(LAYER_COLUMNS)], rows["sparsity"].to_numpy(), crowding)
    bounds = model.bounds(times, crowding)
    column = np.array([model.kernels.index(a) for a in rows["algo"]])
    level = list(INTERVAL_LEVELS).index(GUARD_LEVEL)
    at = np.arange(len(rows))
    return rows.assign(predicted_ms=times[at, column], low=bounds[at, column, level, 0],
                       high=bounds[at, column, level, 1])


def kernel_table(runs: pd.DataFrame) -> pd.DataFrame:
    out = []
    for (algo, pattern), group in runs.groupby(["algo", "sparsity_pattern"]):
        y, p = group["time_ms"].to_numpy(), group["predicted_ms"].to_numpy()
        other = group["other_gpu_ms"].dropna()
        out.append({"kernel": algo, "pattern": pattern, "runs": len(group),
                    "mape_percent": round(100 * float(np.mean(np.abs(p / y - 1))), 1),
                    "measured_over_predicted": round(float(np.median(y / p)), 3),
                    "inside_80_percent": round(float(np.mean((y >= group["low"]) & (y <= group["high"]))), 3),
                    "this_gpu_over_model_gpu_time": round(float(np.median(group.loc[other.index, "time_ms"] / other)), 3)
                    if len(other) else None})
    return pd.DataFrame(out)


def decisions(table: pd.DataFrame, runs: pd.DataFrame) -> dict:
    """Predicted against measured sparse-or-dense, against this GPU's measured best cuDNN time."""
    ok = table[(table["status"] == "ok") & (table["time_ms"] > 0)]
    cudnn = ok[ok["algo"].isin(algorithm_names("cudnn"))].groupby("dense_shape_id")["time_ms"].min()
    per_case = runs.groupby(["dense_shape_id", "sparsity", "sparsity_pattern"]).agg(
        measured=("time_ms", "min"), predicted=("predicted_ms", "min")).reset_index()
    per_case = per_case.join(cudnn.rename("cudnn_ms"), on="dense_shape_id").dropna(subset=["cudnn_ms"])
    measured = per_case["measured"] < per_case["cudnn_ms"]
    predicted = per_case["predicted"] < per_case["cudnn_ms"]
    return {"cases": int(len(per_case)), "sparse_wins_measured": int(measured.sum()),
            "sparse_wins_predicted": int(predicted.sum()), "agree": int((measured == predicted).sum())}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--model-gpu", default="h200")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--models-dir", type=Path, default=Path("models"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    table = read_sparse_measurements(args.data_dir / args.gpu / "sparse_measurements")
    model = load_sparse_model(args.models_dir / args.model_gpu)
    if model is None:
        raise SystemExit(f"no sparse model for {args.model_gpu}")
    runs = predicted_runs(sparse_training_rows(table), model)
    theirs = sparse_training_rows(read_sparse_measurements(args.data_dir / args.model_gpu / "sparse_measurements"))
    runs = runs.merge(theirs[KEY + ["time_ms"]].rename(columns={"time_ms": "other_gpu_ms"}), on=KEY, how="left")
    kernels = kernel_table(runs)
    decided = decisions(table, runs)
    args.out.mkdir(parents=True, exist_ok=True)
    columns = [*KEY, "input_crowding", "time_ms", "predicted_ms", "low", "high", "other_gpu_ms"]
    runs[columns].round(5).to_csv(args.out / "runs.csv", index=False)
    lines = [f"# {args.model_gpu}'s sparse model on the {args.gpu}'s sparse runs", "",
             f"`python benchmarks/sparse_transfer.py {' '.join(argv if argv is not None else sys.argv[1:])}` (CPU)", "",
             *markdown_table(kernels), "",
             f"Sparse or dense, on {decided['cases']} (layer, level, pattern) cases with the {args.gpu}'s cuDNN "
             f"times: the best sparse kernel is measured faster than the best cuDNN algorithm on "
             f"{decided['sparse_wins_measured']}, predicted faster on {decided['sparse_wins_predicted']}; "
             f"prediction and measurement agree on {decided['agree']}.", ""]
    (args.out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

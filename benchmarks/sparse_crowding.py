"""How crowded non-zeros slow seer's sparse kernels, and how well the sparse model predicts it (CPU).

    python benchmarks/sparse_crowding.py --gpu h200 \\
        --picks benchmarks/results/h200-sparse-network-graphs/after-fix-0.99/picks.csv \\
        --out benchmarks/results/h200-sparse-crowding

1. **Measured**: on the ``sparse-seed`` grid, each run on a ``crowded`` input (non-zeros piled on
   some pixels) against the same layer, algorithm and share of zeros on a ``relu`` input (spread
   evenly): the median ratio of their times per algorithm and band of crowding (``input_crowding``).
   cuDNN's dense algorithms are the control: their time does not depend on the zeros.
2. **Held out, whole networks**: ``--picks`` (``benchmarks/sparse_network.py --check-picks``'s
   ``picks.csv``: convolutions of real networks that ran ``gather``, each timed alone on its own
   input, whose crowding was measured) against the GPU's shipped sparse model, which never saw
   these inputs: ``gather``'s predicted time at the measured crowding, and at even crowding (what a
   model blind to crowding predicts), against the measured one; and the guarded choice
   (``seer.predict.sparse.with_sparse_rows``' rule: the upper bound of ``gather``'s 80% interval
   below the lower bound of the dense choice's, which ``picks.csv`` holds) against the measured
   outcome (``gather`` faster than the dense choice on its own input).
Writes ``summary.md``, ``ratios.csv`` and ``picks-check.csv``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

from seer.dataset.build import read_sparse_measurements
from seer.layers.shapes import ConvShape, layer_frame
from seer.predict.guard import GUARD_LEVEL
from seer.predict.sparse import load_sparse_model
from seer.schema import INTERVAL_LEVELS
from sparse_seed import markdown_table

#: Bands of crowding (the most non-zeros at a pixel over what even spreading gives).
CROWDING_BANDS = (0.0, 1.5, 3.0, 5.0, 8.0, 12.0, 20.0, 50.0)
KEY = ["dense_shape_id", "sparsity", "algo", "math"]


def ratios(table: pd.DataFrame) -> pd.DataFrame:
    """Per algorithm and band of crowding: runs, and the median and quartiles of the crowded run's
    time over the relu run's (same layer, level, algorithm and math)."""
    ok = table[(table["status"] == "ok") & (table["time_ms"] > 0) & (table["grid"] == "sparse-seed")]
    crowded = ok[ok["sparsity_pattern"] == "crowded"]
    even = ok[ok["sparsity_pattern"] == "relu"]
    pairs = crowded.merge(even[[*KEY, "time_ms"]], on=KEY, suffixes=("", "_relu"))
    pairs["ratio"] = pairs["time_ms"] / pairs["time_ms_relu"]
    pairs["crowding"] = pd.cut(pairs["input_crowding"], list(CROWDING_BANDS))
    out = pairs.groupby(["algo", "crowding"], observed=True)["ratio"].describe(percentiles=[0.25, 0.5, 0.75])
    return out[["count", "25%", "50%", "75%"]].rename(columns={"count": "runs"}).reset_index()


def check_picks(picks: pd.DataFrame, gpu: str) -> pd.DataFrame:
    """``picks`` with the shipped sparse model's ``gather`` time at each input's crowding and at
    even crowding, its 80% upper bound, and whether the guard takes it."""
    model = load_sparse_model(Path("models") / gpu)
    if model is None:
        raise SystemExit(f"no sparse model for {gpu}")
    shapes = [ConvShape.square(int(r.batch), int(r.in_ch), int(r.in_h), int(r.out_ch), int(r.kernel_h),
                               stride=int(r.stride_h), padding=int(r.pad_h), groups=int(r.groups))
              for r in picks.itertuples()]
    frame, sparsity = layer_frame(shapes), picks["sparsity"].to_numpy(dtype=float)
    j = model.kernels.index("SEER_SPARSE_GATHER")
    at_crowding = model.times(frame, sparsity, picks["crowding"].to_numpy(dtype=float))
    level = list(INTERVAL_LEVELS).index(GUARD_LEVEL)
    out = picks.assign(predicted_ms=at_crowding[:, j],
                       predicted_even_ms=model.times(frame, sparsity)[:, j],
                       predicted_high=model.bounds(at_crowding, picks["crowding"].to_numpy(dtype=float))[:, j, level, 1])
    out["gather_won"] = out["sparse_ms"] < out["dense_ms"]
    out["guard_takes"] = (out["predicted_high"] < out["predicted_dense_low"]) & \
        (out["crowding"] <= model.max_crowding)
    out["point_takes"] = out["predicted_ms"] < out["predicted_dense_ms"]
    return out


def _outcomes(checked: pd.DataFrame, taken: str) -> str:
    won, took = checked["gather_won"], checked[taken]
    return (f"{int((took & won).sum())} taken and won, {int((took & ~won).sum())} taken and lost, "
            f"{int((~took & won).sum())} left to the dense choice that gather would have won, "
            f"{int((~took & ~won).sum())} left that it would have lost")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--picks", type=Path, nargs="+", required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)

    table = read_sparse_measurements(args.data_dir / args.gpu / "sparse_measurements")
    by_band = ratios(table)
    picks = pd.concat([pd.read_csv(p) for p in args.picks], ignore_index=True)
    checked = check_picks(picks, args.gpu)
    args.out.mkdir(parents=True, exist_ok=True)
    by_band.round(3).to_csv(args.out / "ratios.csv", index=False)
    columns = ["network", "batch", "module", "sparsity", "crowding", "sparse_ms", "dense_ms", "predicted_ms",
               "predicted_even_ms", "predicted_high", "predicted_dense_low", "gather_won", "guard_takes"]
    checked[columns].round(5).to_csv(args.out / "picks-check.csv", index=False)

    ape = lambda column: 100 * float(np.mean(np.abs(checked[column] / checked["sparse_ms"] - 1)))  # noqa: E731
    wide = by_band.pivot(index="crowding", columns="algo", values="50%").round(2).reset_index()
    wide["crowding"] = wide["crowding"].astype(str)
    lines = ["# Crowded non-zeros and seer's sparse kernels", "",
             f"Command: `python benchmarks/sparse_crowding.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
             "", "## Measured: crowded over evenly spread inputs (median time ratio, same layer and share of zeros)",
             "", *markdown_table(wide), "",
             f"## Held out: {len(checked)} convolutions of real networks that ran gather, timed alone on their own input",
             "", f"- gather's time, mean absolute error: {ape('predicted_ms'):.1f}% at the measured crowding, "
                 f"{ape('predicted_even_ms'):.1f}% taken as even.",
             f"- the guarded choice: {_outcomes(checked, 'guard_takes')}.",
             f"- by the predicted times alone (unguarded): {_outcomes(checked, 'point_takes')}.", ""]
    (args.out / "summary.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())

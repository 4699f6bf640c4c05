"""The guarded pick on the held-out networks: total convolution time per math mode and layer kind.

    python benchmarks/guard.py --gpu h100 --out benchmarks/results/h100-guard
    python benchmarks/guard.py --gpu h200 --pass bwd_data --out benchmarks/results/h200-bwd_data-guard

On every layer of Test-set-II (the held-out real networks, square and of every kind) with
a measured time of PyTorch's own choice, and per math mode, it totals the measured time of:
seer's recommendation (:mod:`seer.predict.guard`: its pick where surely faster, else
PyTorch's choice), seer's pick alone (unguarded), PyTorch's default (heuristic) mode,
``cudnn.benchmark``, cuDNN's heuristic (the legacy v7 ranking's first algorithm), and the
oracle (the fastest algorithm or PyTorch's choice, whichever measured shorter). Once with
every algorithm seer ranks, once with cuDNN's only (what stock PyTorch can run). A pick that
did not run on a layer counts PyTorch's time there (seer.torch falls back to it). The target
of the issue on trust: seer's recommendation never totals more than 0.5% above PyTorch's
default, per math mode and layer kind. Writes ``guard.json`` and ``guard.md``. With
``--pass``, the same for a backward pass: its algorithms, PyTorch's dgrad or wgrad, and cuDNN's
heuristic of that pass.
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
from seer.dataset.views import POLICIES, layers_of
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.guard import PYTORCH_CHOICE
from seer.predict.persist import load_model
from seer.predict.uncertainty import interval_kind
from seer.reporting.scoring import chosen_times
from seer.schema import DatasetDir

HELD_OUT = "test2"
TARGET = 1.005
POLICY_COLUMNS = ("seer", "seer_unguarded", "pytorch", "pytorch_benchmark", "cudnn_heuristic", "oracle")


def measured_times(table: pd.DataFrame, math: str, policies: list[str],
                   split: str | None = HELD_OUT) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """Layers (index: shape_id), measured time per algorithm and policy, and the heuristic's
    first choice's time, for the layers of ``split`` (None: every layer) and ``math`` where
    PyTorch's choice (the first of ``policies``, those of the table's pass) ran."""
    rows = table[(table["math"] == math) | table["algo"].str.startswith("SEER")]
    if split is not None:
        rows = rows[rows["split"] == split]
    ok = rows[rows["status"] == "ok"]
    wide = ok.pivot_table(index="shape_id", columns="algo", values="time_ms")
    wide = wide[wide[policies[0]].notna()]
    heuristic = ok[(ok["heuristic_rank"] == 1) & (ok["math"] == math)].drop_duplicates("shape_id")
    return layers_of(rows, wide.index), wide, heuristic.set_index("shape_id")["time_ms"].reindex(wide.index)


def per_layer(model, math: str, algorithms: str | None, layers: pd.DataFrame, wide: pd.DataFrame,
              heuristic: pd.Series, policies: list[str]) -> pd.DataFrame:
    """Measured time per layer under each of :data:`POLICY_COLUMNS`."""
    picks = model.pick(layers.reset_index(drop=True), math=math, algorithms=algorithms)
    pytorch = wide[policies[0]].to_numpy()

    def measured(names) -> np.ndarray:
        got = chosen_times(wide, names)
        return np.where(np.isfinite(got), got, pytorch)  # a pick that did not run falls back to PyTorch

    choice = picks["recommended"].astype(object).where(picks["recommended"].notna(), None).to_numpy()
    ranked = [a for a in wide.columns if a not in POLICIES and (algorithms is None or not a.startswith("SEER"))]
    out = pd.DataFrame({
        "seer": np.where(choice == PYTORCH_CHOICE, pytorch, measured(choice)),
        "seer_unguarded": measured(picks["best_algo"].astype(object).where(picks["best_algo"].notna(), None)),
        "pytorch": pytorch, "pytorch_benchmark": wide[policies[1]].to_numpy(),
        "cudnn_heuristic": heuristic.fillna(wide[policies[0]]).to_numpy(),
        "oracle": np.fmin(wide[ranked].min(axis=1).to_numpy(), pytorch),
        "kind": interval_kind(layers.reset_index(drop=True)), "left_pytorch": choice != PYTORCH_CHOICE},
        index=layers.index)
    return out


def summary(frames: dict[tuple[str, str], pd.DataFrame]) -> pd.DataFrame:
    """Totals (ms) per (math, algorithms, kind), ratios to PyTorch's default, and the target."""
    rows = []
    for (math, algorithms), frame in frames.items():
        for kind, members in [("all", frame), *frame.groupby("kind")]:
            totals = {c: float(members[c].sum()) for c in POLICY_COLUMNS}
            rows.append({"math": math, "algorithms": algorithms, "kind": kind, "layers": len(members),
                         "left_pytorch": int(members["left_pytorch"].sum()),
                         **{f"{c}_ms": round(v, 4) for c, v in totals.items()},
                         **{f"{c}_vs_pytorch": round(v / totals["pytorch"], 4) for c, v in totals.items()
                            if c != "pytorch"},
                         "meets_target": totals["seer"] <= TARGET * totals["pytorch"]})
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, header: str) -> str:
    lines = [header, "", "| math | algorithms | kind | layers | left PyTorch | seer | seer unguarded | PyTorch ms | "
             "cudnn.benchmark | cuDNN heuristic | oracle | within 0.5% |", "|" + "---|" * 12]
    for r in table.itertuples():
        lines.append(f"| {r.math} | {r.algorithms} | {r.kind} | {r.layers} | {r.left_pytorch} | "
                     f"{r.seer_vs_pytorch:.4f} | {r.seer_unguarded_vs_pytorch:.4f} | {r.pytorch_ms:.3f} | "
                     f"{r.pytorch_benchmark_vs_pytorch:.4f} | {r.cudnn_heuristic_vs_pytorch:.4f} | "
                     f"{r.oracle_vs_pytorch:.4f} | {'yes' if r.meets_target else 'NO'} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, required=True, help="folder for guard.json and guard.md")
    parser.add_argument("--pass", dest="pass_", default="fwd", choices=("fwd", "bwd_data", "bwd_filter"))
    args = parser.parse_args(argv)
    model = load_model(args.gpu, pass_=args.pass_)
    table = read_measurements(DatasetDir(args.data_dir / args.gpu).measurements,
                              [*LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms",
                               "heuristic_rank"], passes=(args.pass_,))
    policies = algorithm_names("pytorch", pass_=args.pass_)
    own = algorithm_names("cupy", pass_=args.pass_)
    frames = {}
    for math in model.maths:
        layers, wide, heuristic = measured_times(table, math, policies)
        for name, algorithms in (("all", None), ("cudnn", "cudnn")) if own else (("cudnn", None),):
            frames[(math, name)] = per_layer(model, math, algorithms, layers, wide, heuristic, policies)
    result = summary(frames)
    args.out.mkdir(parents=True, exist_ok=True)
    of = "" if args.pass_ == "fwd" else f" --pass {args.pass_}"
    header = (f"Measured total convolution time{' of the ' + args.pass_ + ' pass' if of else ''} on the held-out "
              f"networks (Test-set-II, {args.gpu}), as a ratio to PyTorch's default; `python benchmarks/guard.py "
              f"--gpu {args.gpu}{of} --out {args.out}`. 'left PyTorch': layers where seer recommends its pick over "
              f"PyTorch's choice.")
    (args.out / "guard.md").write_text(markdown(result, header))
    (args.out / "guard.json").write_text(json.dumps({"gpu": args.gpu, "pass": args.pass_, "target": TARGET,
                                                     "card_trained_at": model.card.get("trained_at"),
                                                     "rows": result.to_dict(orient="records")}, indent=1) + "\n")
    failed = result[~result["meets_target"]]
    print(markdown(result, header))
    print(f"{len(result) - len(failed)} of {len(result)} (math, algorithms, kind) totals within 0.5% of PyTorch's",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())

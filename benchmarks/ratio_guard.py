"""A guard calibrated on the ratio of the pick's time to PyTorch's (now seer's), against the interval guard.

    python benchmarks/ratio_guard.py --runs h100:fwd h200:fwd h200:bwd_data h200:bwd_filter \\
        --out benchmarks/results/ratio-guard-levels

The interval guard (:mod:`seer.predict.guard` before the ratio rule, and still for models calibrated
before the margins) takes seer's pick where the upper bound of the pick's 80% interval lies below the
lower bound of PyTorch's. The two intervals are calibrated apart,
as if the two predictions erred independently; on one layer they mostly err together (same
shape, same features), so the rule asks for more than it needs. The alternative measured here
calibrates the ratio itself: on the calibration half of Test-set-I (the layers that calibrate
the shipped intervals), the residual ``log(measured pick / measured PyTorch) - log(predicted
pick / predicted PyTorch)`` on layers where both ran; its one-sided split-conformal quantile at
LEVEL per layer kind (a kind with fewer than :data:`MIN_CALIBRATION_RUNS` layers takes the larger
of its own and the all-kinds quantile, as the intervals do); the pick is taken where
``log(predicted pick / predicted PyTorch) + quantile < 0``. Both are then scored on Test-set-II
as ``benchmarks/guard.py`` scores the guard (a pick that did not run counts PyTorch's time).

The ratio rule is seer's guard, at 90% under default math and 50% under strict FP32 (the math
mode's :attr:`~seer.schema.MathMode.guard_level`): ``seer calibrate`` fits the margins
(:func:`seer.predict.uncertainty.fit_guard_margins`, the functions used here) and
:func:`seer.predict.guard.recommended` decides by them. The ``today`` column stays the interval
rule (computed here from the predictions' bounds, not read from ``recommended``), so the committed
comparison reproduces with the recalibrated models.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from guard import TARGET, measured_times  # noqa: E402  (the guard benchmark's own reading of the runs)

from seer.algorithms import algorithm_names  # noqa: E402
from seer.dataset.build import read_measurements  # noqa: E402
from seer.layers.shapes import LAYER_COLUMNS  # noqa: E402
from seer.predict.guard import GUARD_LEVEL, PYTORCH_CHOICE, recommended  # noqa: E402
from seer.predict.persist import load_model  # noqa: E402
from seer.predict.uncertainty import ALL_KINDS, fit_guard_margins, guard_margin, interval_kind  # noqa: E402
from seer.reporting.scoring import chosen_times  # noqa: E402
from seer.schema import DatasetDir  # noqa: E402
from seer.training.calibrate import CALIBRATION_SPLIT, calibration_half  # noqa: E402

LEVELS = (50, 80, 90)


def layer_frame_of(model, table: pd.DataFrame, math: str, algorithms: str | None, policies: list[str]) -> pd.DataFrame:
    """Per layer of ``table`` (already one split, relabelled held-out) with PyTorch's choice measured:
    kind, pick, predicted and measured times of the pick and of PyTorch's choice, today's choice."""
    layers, wide, _ = measured_times(table, math, policies)
    picks = model.pick(layers.reset_index(drop=True), math=math, algorithms=algorithms)
    pytorch = wide[policies[0]].to_numpy()
    best = picks["best_algo"].astype(object).where(picks["best_algo"].notna(), None).to_numpy()
    measured = chosen_times(wide, best)
    # The interval rule (no margin), whatever rule the model's own recommendation follows.
    today = recommended(best, picks["best_ms"], picks[f"best_high{GUARD_LEVEL}"], picks["pytorch_ms"],
                        picks[f"pytorch_low{GUARD_LEVEL}"])
    return pd.DataFrame({"kind": interval_kind(layers.reset_index(drop=True)), "pick": best,
                         "pick_ms": picks["best_ms"].to_numpy(dtype=float),
                         "pytorch_ms": picks["pytorch_ms"].to_numpy(dtype=float),
                         "pick_measured": np.where(np.isfinite(measured), measured, pytorch),
                         "pick_ran": np.isfinite(measured), "pytorch_measured": pytorch,
                         "today": today != PYTORCH_CHOICE}, index=layers.index)


def score(model, table: pd.DataFrame, math: str, algorithms: str | None, policies: list[str]) -> list[dict]:
    """Totals per kind on Test-set-II of today's guard, the ratio guard per level, the pick alone."""
    calibration = table[table["split"] == CALIBRATION_SPLIT].assign(split="test2")
    calibration = calibration[calibration_half(calibration["shape_id"].to_numpy())]
    cal = layer_frame_of(model, calibration, math, algorithms, policies)
    usable = (cal["pick_ran"] & np.isfinite(cal["pick_ms"]) & np.isfinite(cal["pytorch_ms"])).to_numpy()
    residual = (np.log(cal["pick_measured"] / cal["pytorch_measured"])
                - np.log(cal["pick_ms"] / cal["pytorch_ms"])).to_numpy()[usable]
    held = layer_frame_of(model, table[table["split"] == "test2"], math, algorithms, policies)
    predicted = np.log(held["pick_ms"] / held["pytorch_ms"]).to_numpy()
    columns = {"today": held["today"].to_numpy(), "unguarded": np.ones(len(held), dtype=bool)}
    margins = {}
    for level in LEVELS:
        margins[level] = fit_guard_margins(residual, cal["kind"].to_numpy()[usable], level)
        margin = guard_margin(held["kind"].to_numpy(), margins[level])
        columns[f"ratio{level}"] = np.isfinite(predicted) & (predicted + margin < 0)
    rows = []
    for kind, members in [("all", np.ones(len(held), dtype=bool)), *((k, (held["kind"] == k).to_numpy())
                                                                     for k in sorted(held["kind"].unique()))]:
        pytorch = float(held["pytorch_measured"][members].sum())
        row = {"math": math, "algorithms": algorithms or "all", "kind": kind, "layers": int(members.sum()),
               "calibration_layers": int(usable.sum() if kind == "all" else (usable & (cal["kind"] == kind)).sum()),
               "pytorch_ms": round(pytorch, 4)}
        for name, take in columns.items():
            total = np.where(take, held["pick_measured"], held["pytorch_measured"])[members].sum()
            row[f"{name}_vs_pytorch"] = round(float(total) / pytorch, 4)
            row[f"{name}_takes"] = int((take & members & held["pick_ran"].to_numpy()).sum())
        for level in LEVELS:
            row[f"ratio{level}_margin"] = round(margins[level].get(kind, margins[level][ALL_KINDS]), 4)
        rows.append(row)
    return rows


def markdown(rows: pd.DataFrame, command: str) -> str:
    lines = ["# A guard calibrated on the ratio pick / PyTorch, against today's guard", "",
             f"`{command}`. Measured totals on Test-set-II as a share of PyTorch's own choice (target: at most "
             f"{TARGET}); in brackets, layers that leave PyTorch's choice. "
             + ", ".join(f"`ratio{level}`" for level in LEVELS) + ": the pick where the predicted log ratio plus "
             "the kind's one-sided conformal quantile (" + ", ".join(f"{level}%" for level in LEVELS) + ") of the "
             "calibration layers' residual is below 0. `today`: the interval rule. The math mode's own level "
             "(`MathMode.guard_level`) is seer's guard. `margin`: each level's quantile (log).", "",
             "| GPU | pass | math | algorithms | kind | layers | today | "
             + " | ".join(f"ratio{level}" for level in LEVELS) + " | unguarded | "
             + " | ".join(f"margin{level}" for level in LEVELS) + " |",
             "|" + "---|" * (8 + 2 * len(LEVELS))]
    for r in rows.itertuples():
        cells = [f"{getattr(r, f'{n}_vs_pytorch'):.4f} ({getattr(r, f'{n}_takes')})"
                 for n in ("today", *(f"ratio{level}" for level in LEVELS), "unguarded")]
        margins = [f"{getattr(r, f'ratio{level}_margin'):.3f}" for level in LEVELS]
        lines.append(f"| {r.gpu} | {r.pass_} | {r.math} | {r.algorithms} | {r.kind} | {r.layers} | "
                     + " | ".join(cells + margins) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", default=["h100:fwd", "h200:fwd", "h200:bwd_data", "h200:bwd_filter"],
                        help="GPU:PASS pairs")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, required=True, help="folder for ratio-guard.json and ratio-guard.md")
    args = parser.parse_args(argv)
    rows = []
    for run in args.runs:
        gpu, pass_ = run.split(":")
        model = load_model(gpu, pass_=pass_)
        table = read_measurements(DatasetDir(args.data_dir / gpu).measurements,
                                  [*LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms",
                                   "heuristic_rank"], passes=(pass_,))
        policies = algorithm_names("pytorch", pass_=pass_)
        sets = ((None, "cudnn") if algorithm_names("cupy", pass_=pass_) else (None,))
        for math in model.maths:
            for algorithms in sets:
                rows += [{"gpu": gpu, "pass_": pass_} | r for r in score(model, table, math, algorithms, policies)]
                print(f"{gpu} {pass_} {math} {algorithms or 'all'} done", file=sys.stderr)
    frame = pd.DataFrame(rows)
    command = "python benchmarks/ratio_guard.py --runs " + " ".join(args.runs) + f" --out {args.out}"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ratio-guard.md").write_text(markdown(frame, command))
    (args.out / "ratio-guard.json").write_text(json.dumps({"command": command, "levels": list(LEVELS),
                                                           "target": TARGET, "rows": frame.to_dict(orient="records")},
                                                          indent=1) + "\n")
    print(markdown(frame, command))
    return 0


if __name__ == "__main__":
    sys.exit(main())

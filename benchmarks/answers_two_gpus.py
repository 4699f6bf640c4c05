"""Times learnt from cuDNN's answers, fitted on one GPU's train runs or on two GPUs' together: does the second help?

    python benchmarks/answers_two_gpus.py --gpu h100 --with h200 --out benchmarks/results/h100-answers-two-gpus

Per cuDNN algorithm, one regressor of the time's ratio to the algorithm's baseline (the first GPU's shipped
model: its features and baseline) from the shape features, every cuDNN algorithm's workspace answer and the
transform features, with the finer trees of ``seer.training.estimators.finer_trees``: once on the first GPU's
train runs, once on both GPUs' (a column says which GPU; the second GPU's times over the first's baseline).
Scored on the first GPU's Test-set-II runs. One regressor per algorithm, no kernel path or variant: a
comparison of data, not the shipped design. Writes ``answers-two-gpus.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import clone

sys.path.insert(0, str(Path(__file__).parent))
from cudnn_answers import held_out  # noqa: E402

from seer.layers.shapes import LAYER_COLUMNS  # noqa: E402
from seer.predict.persist import load_model  # noqa: E402
from seer.schema import DatasetDir  # noqa: E402
from seer.training.answers import design_inputs  # noqa: E402
from seer.training.estimators import default_candidates, finer_trees  # noqa: E402
from seer.training.train import training_inputs  # noqa: E402

ALGORITHMS = ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "FFT", "FFT_TILING", "WINOGRAD_NONFUSED")
COLUMNS = [*LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms", "workspace_bytes"]


def design(predictor, frames, columns, gpu_flag: int) -> tuple[np.ndarray, np.ndarray]:
    """The shape features and the regressors' inputs of every layer of ``frames`` (layers, times,
    workspaces), the same for every algorithm."""
    shapes, _, workspaces = frames
    _, F, answers, transforms = design_inputs(predictor, shapes, workspaces.reindex(columns=columns))
    return F, np.hstack([answers, transforms, np.full((len(F), 1), gpu_flag)])


def inputs(predictor, frames, designed, algo: str) -> tuple[np.ndarray, np.ndarray]:
    """Regressor inputs and time ratios of the runs of ``algo`` in ``frames``, of ``designed`` (:func:`design`)."""
    _, times, workspaces = frames
    F, X = designed
    ms = times[algo].to_numpy(dtype=float) if algo in times else np.full(len(F), np.nan)
    ran = np.isfinite(ms) & (ms > 0) & np.isfinite(workspaces.reindex(columns=[algo])[algo].to_numpy(dtype=float))
    return X[ran], ms[ran] / predictor.baseline_ms(F, algo)[ran]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100", help="the GPU scored (its model, its Test-set-II)")
    parser.add_argument("--with", dest="other", default="h200", help="the GPU whose train runs are added")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    tables = {g: pd.read_parquet(DatasetDir(args.data_dir / g).measurements, columns=COLUMNS)
              for g in (args.gpu, args.other)}
    trees = finer_trees(default_candidates()["boosted_trees"])
    rows = []
    for math in ("fma", "default"):
        predictor = load_model(args.gpu, math=math).predictors[math]
        train = {}
        for g, table in tables.items():
            given = training_inputs(table, pd.DataFrame(), math)
            train[g] = (given.shapes, given.times, given.workspaces)
        test = tuple(f.reset_index(drop=True) for f in held_out(tables[args.gpu], math, "test2"))
        columns = train[args.gpu][2].columns
        designed = {"first": design(predictor, train[args.gpu], columns, 0),
                    "added": design(predictor, train[args.other], columns, 1), "test": design(predictor, test, columns, 0)}
        for algo in ALGORITHMS:
            X1, y1 = inputs(predictor, train[args.gpu], designed["first"], algo)
            X2, y2 = inputs(predictor, train[args.other], designed["added"], algo)
            Xt, yt = inputs(predictor, test, designed["test"], algo)
            if len(yt) < 20:
                continue
            one = clone(trees).fit(X1, y1).predict(Xt)
            both = clone(trees).fit(np.vstack([X1, X2]), np.concatenate([y1, y2])).predict(Xt)
            rows.append({"math": math, "algorithm": algo, "test_runs": int(len(yt)), "train_runs": int(len(y1)),
                         "added_runs": int(len(y2)),
                         f"mape_{args.gpu}_only": float(100 * np.mean(np.abs(one / yt - 1))),
                         f"mape_{args.gpu}_and_{args.other}": float(100 * np.mean(np.abs(both / yt - 1)))})
    command = "python benchmarks/answers_two_gpus.py " + " ".join(argv or sys.argv[1:])
    keys = list(rows[0])
    lines = [f"Time MAPE % on {args.gpu}'s Test-set-II, answer-time regressors fitted on {args.gpu}'s train runs alone "
             f"and with {args.other}'s added; `{command}`", "", "| " + " | ".join(keys) + " |", "|---" * len(keys) + "|"]
    lines += ["| " + " | ".join(f"{r[k]:.2f}" if isinstance(r[k], float) else str(r[k]) for k in keys) + " |" for r in rows]
    text = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "answers-two-gpus.json").write_text(json.dumps({"command": command, "rows": rows}, indent=1) + "\n")
    (args.out / "answers-two-gpus.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""wgrad's kernel paths: variants of the backward-filter models, judged out of fold on the train split.

    python benchmarks/wgrad_paths.py --variant known --models-dir /tmp/wg-models/base
    python benchmarks/wgrad_paths.py --variant mixed --path-l2 10 --models-dir /tmp/wg-models/mixed-l2
    python benchmarks/wgrad_paths.py --score-only --models-dir /tmp/wg-models/mixed-l2   # a trained one

Trains ``seer train --gpu h200 --pass bwd_filter``'s design (both math modes, the compact trees)
with one change, into ``--models-dir`` (never the shipped ``models/``), and prints what decides:
per math mode the pick's out-of-fold mean regret on the train split (``pick_cv_regret_percent`` at
the weight cross-validation chose) and each algorithm's best CV MAPE. Then, as the check only,
the unguarded pick's mean regret and top-1 on Test-set-I and Test-set-II (every layer with a
measured wgrad; a pick of an algorithm not measured on a layer is left out and counted).

``--variant``: what the time regressors of an algorithm with a kernel-path classifier learn and
are given (:data:`seer.training.estimators.KERNEL_PATH_INPUTS`): ``known`` (the shipped design:
each traced run's own path, and in prediction the classifier's probabilities), ``guessed`` (the
classifier's out-of-fold probabilities in both), ``mixed`` (their own path, and in prediction
once per path, mixed by the probabilities: :func:`seer.predict.predictors.path_mixture`).
``--path-l2``: L2 regularisation of the first stage's classifiers of whether an algorithm's
workspace is non-zero (its kernel path; 0 shipped). ``--kernel-paths``: as ``seer train``.
Takes about 15-18 minutes a variant on the 2-core machine (``OMP_NUM_THREADS=1``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from seer.dataset.build import read_measurements  # noqa: E402
from seer.dataset.views import math_rows  # noqa: E402
from seer.hardware.gpus import get_gpu_spec  # noqa: E402
from seer.layers.shapes import LAYER_COLUMNS  # noqa: E402
from seer.predict import persist  # noqa: E402
from seer.predict.model import best_per_layer  # noqa: E402
from seer.schema import DatasetDir  # noqa: E402
from seer.training import train as training  # noqa: E402
from seer.training.estimators import CANDIDATE_SETS, KERNEL_PATH_INPUTS, AlgorithmSelector, WorkspaceModel  # noqa: E402

PASS = "bwd_filter"


def fit(models_dir: Path, variant: str, path_l2: float, kernel_paths: int) -> None:
    spec = get_gpu_spec("h200")
    selector = AlgorithmSelector(candidates=CANDIDATE_SETS["compact"](), max_kernel_paths=kernel_paths,
                                 kernel_path_inputs=variant, workspace_model=WorkspaceModel(path_l2=path_l2))
    start = time.time()
    model = training.train(REPO / "data" / "h200", spec, selector=selector, pass_=PASS,
                           progress=lambda done, steps, text: print(f"[{time.time() - start:5.0f} s] {done}/{steps} "
                                                                     f"{text}", file=sys.stderr, flush=True))
    persist.save(model, persist.model_dir(models_dir, spec.name, PASS))


def out_of_fold(models_dir: Path) -> None:
    card = json.loads((persist.model_dir(models_dir, "h200", PASS) / persist.CARD_FILE).read_text())
    for math, info in card["maths"].items():
        weight = info["pick_weight"]
        print(f"{math}: out-of-fold pick regret {info['pick_cv_regret_percent'][str(weight)]}% (weight {weight}); "
              f"kernel paths for {', '.join(sorted(info['kernel_paths'])) or 'none'}")
        print("  best CV MAPE %: " + "; ".join(
            f"{a.removeprefix('BWD_FILTER_')} " + "/".join(f"{min(v.values()):.2f}" for v in paths.values())
            for a, paths in info["cv_mape_percent"].items()))


def held_out(models_dir: Path) -> None:
    table = read_measurements(DatasetDir(REPO / "data" / "h200").measurements,
                              ["shape_id", "split", "math", "algo", "pass", "status", "time_ms", *LAYER_COLUMNS])
    table = table[table["pass"] == PASS]
    for math in ("fma", "default"):
        model = persist.load_model("h200", math=math, models_dir=models_dir, pass_=PASS)
        for split in ("test1", "test2"):
            rows = math_rows(table, math)
            rows = rows[rows["split"] == split]
            times = rows[rows["status"] == "ok"].pivot_table(index="shape_id", columns="algo", values="time_ms")
            times = times[[a for a in times.columns if not a.startswith("PYTORCH")]].dropna(how="all")
            layers = rows.drop_duplicates("shape_id").set_index("shape_id").loc[times.index, list(LAYER_COLUMNS)]
            picks = best_per_layer(model.predict(layers.reset_index(drop=True), math))["best_algo"].to_numpy(object)
            took = np.array([times.iloc[i].get(a, np.nan) for i, a in enumerate(picks)])
            regret = took / times.min(axis=1).to_numpy() - 1
            print(f"{math} {split}: {len(times)} layers, mean regret {100 * np.nanmean(regret):.2f}%, "
                  f"top-1 {100 * np.nanmean(regret < 1e-9):.1f}%, picks not measured {int(np.isnan(regret).sum())}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models-dir", type=Path, required=True)
    parser.add_argument("--variant", choices=KERNEL_PATH_INPUTS, default="known")
    parser.add_argument("--path-l2", type=float, default=0.0)
    parser.add_argument("--kernel-paths", type=int, default=training.DEFAULT_KERNEL_PATHS[PASS])
    parser.add_argument("--score-only", action="store_true", help="score a trained models directory")
    args = parser.parse_args()
    if args.models_dir.resolve() == (REPO / "models").resolve():
        parser.error("train variants into a scratch folder, not the shipped models/")
    if not args.score_only:
        fit(args.models_dir, args.variant, args.path_l2, args.kernel_paths)
    out_of_fold(args.models_dir)
    held_out(args.models_dir)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""How much would knowing cuDNN's kernel path help the time models? Measured on the traced runs.

    python benchmarks/kernel_paths.py --gpu h100 --path variant --report benchmarks/results/h100-kernel-paths.json

Every timed run of the layers of every kind carries a CUPTI trace, and so a kernel path:
the variant of its main kernel (``--path variant``, e.g. the tile size) or only that
kernel's family (``--path family``), both by the kernel rules. Per (math, algorithm), on the traced
runs of the training split, this fits one regressor of log time on the shape features
and measures its MAPE on the held-out splits (Test-set-I and Test-set-II) three ways:

``shape``
    shape features only (what the shipped models see);
``oracle_path``
    plus the run's true kernel path: the best a path-aware model could do;
``predicted_path``
    plus the path predicted by a classifier fitted on the training runs (a two-stage
    model, as SEER picks a variant first).

All three use the same scikit-learn gradient boosting with the same settings, so the
difference is what the path adds, not a comparison with the shipped models' own MAPE.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from seer.algorithms import classify_kernel
from seer.dataset.build import read_measurements
from seer.hardware.gpus import get_gpu_spec
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.features import shape_features
from seer.training.estimators import mape

#: Fewer training runs than this for a (math, algorithm) and it is not reported.
MIN_TRAIN_RUNS = 100


def _regressor() -> HistGradientBoostingRegressor:
    return HistGradientBoostingRegressor(max_iter=300, learning_rate=0.1, max_leaf_nodes=31, random_state=0)


def _with_path(features: pd.DataFrame, paths: np.ndarray, vocabulary: list[str]) -> pd.DataFrame:
    onehot = pd.DataFrame({f"path={p}": (paths == p).astype(float) for p in vocabulary}, index=features.index)
    return pd.concat([features, onehot], axis=1)


def kernel_paths(runs: pd.DataFrame, level: str) -> pd.Series:
    """Each traced run's path: its main kernel's variant, or its family."""
    if level == "variant":
        return runs["trace_variant"].astype(str)
    families = {name: classify_kernel(name).family for name in runs["trace_main_kernel"].unique()}
    return runs["trace_main_kernel"].map(families).astype(str)


def evaluate_pair(train: pd.DataFrame, test: pd.DataFrame, spec) -> dict:
    """MAPE on ``test`` of the three variants, and the path classifier's accuracy."""
    x_train, x_test = shape_features(train[list(LAYER_COLUMNS)], spec), shape_features(test[list(LAYER_COLUMNS)], spec)
    y_train = np.log(train["time_ms"].to_numpy())
    path_train, path_test = train["path"].to_numpy(str), test["path"].to_numpy(str)
    vocabulary = sorted(set(path_train))
    result = {"train_runs": len(train), "test_runs": len(test), "paths": len(vocabulary),
              "test_paths_unseen": int((~np.isin(path_test, vocabulary)).sum())}
    measured = test["time_ms"].to_numpy()
    shape_model = _regressor().fit(x_train, y_train)
    result["mape_shape"] = mape(measured, np.exp(shape_model.predict(x_test)))
    path_model = _regressor().fit(_with_path(x_train, path_train, vocabulary), y_train)
    result["mape_oracle_path"] = mape(measured, np.exp(path_model.predict(_with_path(x_test, path_test, vocabulary))))
    if len(vocabulary) > 1:
        # At scikit-learn's default learning rate (0.1) the multinomial fit diverged on fma
        # IMPLICIT_GEMM's runs (right for 45% of its own training runs, against 100% on the
        # same paths under default math); at 0.05 it does not.
        classifier = HistGradientBoostingClassifier(max_iter=200, learning_rate=0.05,
                                                    random_state=0).fit(x_train, path_train)
        predicted = classifier.predict(x_test)
        result["path_accuracy"] = float((predicted == path_test).mean())
    else:
        predicted = np.full(len(test), vocabulary[0])
        result["path_accuracy"] = float((predicted == path_test).mean())
    result["mape_predicted_path"] = mape(measured, np.exp(path_model.predict(_with_path(x_test, predicted, vocabulary))))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--path", choices=("variant", "family"), default="variant",
                        help="what a kernel path is: the main kernel's variant or its family (default variant)")
    parser.add_argument("--report", type=Path, help="write the results here as JSON")
    args = parser.parse_args(argv)
    spec = get_gpu_spec(args.gpu)
    table = read_measurements(args.data_dir / spec.name / "measurements")
    runs = table[(table["status"] == "ok") & (table["trace_status"] == "ok") & table["trace_variant"].notna()]
    runs = runs.assign(path=kernel_paths(runs, args.path))
    started = time.perf_counter()
    results = []
    for (math, algo), pair in runs.groupby(["math", "algo"]):
        train, test = pair[pair["split"] == "train"], pair[pair["split"] != "train"]
        if len(train) < MIN_TRAIN_RUNS or test.empty:
            continue
        row = {"math": math, "algo": algo} | evaluate_pair(train, test, spec)
        results.append(row)
        print(f"{math:8s} {algo:22s} paths {row['paths']:3d}  path accuracy {row['path_accuracy']:.3f}  MAPE shape "
              f"{row['mape_shape']:6.2f}%  oracle path {row['mape_oracle_path']:6.2f}%  predicted path "
              f"{row['mape_predicted_path']:6.2f}%", file=sys.stderr)
    report = {"gpu": spec.name, "command": "python benchmarks/kernel_paths.py " + " ".join(argv or sys.argv[1:]),
              "path": args.path, "runs": len(runs), "seconds": round(time.perf_counter() - started, 1), "pairs": results}
    if args.report:
        args.report.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

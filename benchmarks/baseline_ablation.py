"""What the roofline baseline buys: the shipped model design with and without it.

    python benchmarks/baseline_ablation.py --gpu h100 --math fma --report benchmarks/results/h100-baseline-ablation.json

Fits :class:`seer.estimators.AlgorithmSelector` (default candidates, 5-fold CV) on the
training split twice, ``baseline="roofline"`` and ``baseline="none"``, and reports each
algorithm's MAPE on Test-set-I, on Test-set-II, and on the Test-set-II layers with more
FLOPs than any training layer (where trees on time alone can only guess the largest
training time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from seer.dataset import load_measurements
from seer.estimators import AlgorithmSelector, mape
from seer.features import log2_flops
from seer.modeling import training_frames


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h100")
    p.add_argument("--math", default="fma")
    p.add_argument("--data-dir", type=Path, default=Path("data"))
    p.add_argument("--report", type=Path)
    args = p.parse_args(argv)
    table = load_measurements(args.data_dir / args.gpu / "measurements.csv.gz")
    train_shapes, train_times = training_frames(table, args.math, "train")
    tests = {split: training_frames(table, args.math, split) for split in ("test1", "test2")}
    largest = 2.0 ** log2_flops(train_shapes).max()
    result = {"gpu": args.gpu, "math": args.math, "training_shapes": len(train_shapes),
              "largest_training_gflops": round(largest / 1e9, 1), "mape_percent": {}}
    for baseline in ("roofline", "none"):
        started = time.perf_counter()
        selector = AlgorithmSelector(gpu=args.gpu, baseline=baseline).fit(train_shapes, train_times)
        scores = {}
        for split, (shapes, times) in tests.items():
            predicted = pd.DataFrame(selector.predict_unmasked(shapes), index=shapes.index,
                                     columns=selector.algorithms_)
            subsets = {split: np.ones(len(shapes), bool)}
            if split == "test2":
                subsets["test2_beyond_training_flops"] = 2.0 ** log2_flops(shapes) > largest
            for name, rows in subsets.items():
                for algo in selector.regressors_:
                    ran = times[algo].notna().to_numpy() & rows
                    if ran.any():
                        scores.setdefault(name, {})[algo] = round(mape(times.loc[ran, algo], predicted.loc[ran, algo]), 2)
                scores[name]["layers"] = int(rows.sum())
        result["mape_percent"][baseline] = scores
        result.setdefault("fit_seconds", {})[baseline] = round(time.perf_counter() - started, 1)
        print(f"baseline={baseline}: {json.dumps(scores)}", file=sys.stderr, flush=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run())

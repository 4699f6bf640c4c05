"""What each part of the shipped design buys: the first stage (census or not) and the roofline baseline.

    python benchmarks/ablation.py --gpu h100 --math fma --report benchmarks/results/h100-ablation.json

Fits :class:`seer.estimators.AlgorithmSelector` (default candidates, 5-fold CV) on the
training split four times, with what ``seer train`` gives it and with one part taken away:

``shipped``
    the first stage learned from the census, the roofline baseline;
``no_census``
    the first stage learned from the training runs' own workspaces (out of fold);
``no_first_stage``
    no workspace answers at all: one regressor per algorithm on shape features;
``no_roofline``
    as shipped, but the regressors predict time itself rather than its ratio to the
    roofline baseline.

It reports each algorithm's MAPE on Test-set-I, on Test-set-II and on the Test-set-II
layers with more FLOPs than any training layer, and how often the support decision is right.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from seer.collect.store import RunStore
from seer.dataset import census_table, load_measurements
from seer.estimators import AlgorithmSelector, mape
from seer.features import log2_flops
from seer.modeling import training_frames, training_inputs

VARIANTS = ("shipped", "no_census", "no_first_stage", "no_roofline")


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h100")
    p.add_argument("--math", default="fma")
    p.add_argument("--data-dir", type=Path, default=Path("data"))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--report", type=Path)
    args = p.parse_args(argv)
    dataset = args.data_dir / args.gpu
    table = load_measurements(dataset / "measurements.csv.gz")
    shapes, times, workspaces, census = training_inputs(table, census_table(RunStore(dataset)), args.math)
    tests = {split: training_frames(table, args.math, split) for split in ("test1", "test2")}
    largest = 2.0 ** log2_flops(shapes).max()
    result = {"gpu": args.gpu, "math": args.math, "training_shapes": len(shapes),
              "census_shapes": len(census[0]) if census else 0,
              "largest_training_gflops": round(largest / 1e9, 1), "mape_percent": {}, "support_accuracy_percent": {}}
    for variant in args.variants.split(","):
        inputs = {"shipped": (workspaces, census), "no_census": (workspaces, None),
                  "no_first_stage": (None, None), "no_roofline": (workspaces, census)}[variant]
        baseline = "none" if variant == "no_roofline" else "roofline"
        started = time.perf_counter()
        selector = AlgorithmSelector(gpu=args.gpu, baseline=baseline).fit(shapes, times, *inputs)
        scores, support = {}, {}
        for split, (test_shapes, test_times) in tests.items():
            predicted = pd.DataFrame(selector.predict_unmasked(test_shapes), index=test_shapes.index,
                                     columns=selector.algorithms_)
            ran_any = test_times[selector.algorithms_].notna().to_numpy()
            support[split] = round(float(((selector.predict_support(test_shapes) >= 0.5) == ran_any).mean() * 100), 3)
            subsets = {split: np.ones(len(test_shapes), bool)}
            if split == "test2":
                subsets["test2_beyond_training_flops"] = 2.0 ** log2_flops(test_shapes) > largest
            for name, rows in subsets.items():
                for algo in selector.regressors_:
                    ran = test_times[algo].notna().to_numpy() & rows
                    if ran.any():
                        scores.setdefault(name, {})[algo] = round(
                            mape(test_times.loc[ran, algo], predicted.loc[ran, algo]), 2)
                scores[name]["layers"] = int(rows.sum())
        result["mape_percent"][variant] = scores
        result["support_accuracy_percent"][variant] = support
        result.setdefault("fit_seconds", {})[variant] = round(time.perf_counter() - started, 1)
        print(f"{variant}: {json.dumps(scores)} support {support}", file=sys.stderr, flush=True)
    text = json.dumps(result, indent=2)
    print(text)
    if args.report:
        args.report.parent.mkdir(parents=True, exist_ok=True)
        args.report.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run())

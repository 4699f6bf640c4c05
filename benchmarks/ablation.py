"""What each part of the design buys: first stage, roofline baseline, tree budget, kernel paths.

    python benchmarks/ablation.py --gpu h100 --math fma --report benchmarks/results/h100-ablation.json

Fits :class:`seer.training.estimators.AlgorithmSelector` (default candidates, 5-fold CV) on the
training split once per variant: with what ``seer train`` gives it and with one part taken away:

``shipped``
    the first stage learned from the census, the roofline baseline;
``kernel_path``
    as shipped, plus kernel-path classifiers learned from the traces
    (``seer train --kernel-paths 6``);
``no_census``
    the first stage learned from the training runs' own workspaces (out of fold);
``no_first_stage``
    no workspace answers at all: one regressor per algorithm on shape features;
``no_roofline``
    as shipped, but the regressors predict time itself rather than its ratio to the
    roofline baseline;
``accurate_trees``
    as shipped, but with four times the boosted trees (``seer train --trees accurate``).

It reports each algorithm's MAPE on Test-set-I, on Test-set-II and on the Test-set-II
layers with more FLOPs than any training layer, how often the support decision is right,
and the pick's top-1 accuracy and mean regret.

Variants can run as separate processes (``--variants shipped --report a.json``, ...) and
their reports be combined afterwards with ``--merge a.json b.json ... --report all.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from seer.dataset.build import read_census, read_measurements
from seer.dataset.views import training_frames
from seer.hardware.gpus import get_gpu_spec
from seer.predict.features import log2_flops
from seer.reporting.scoring import selection_metrics
from seer.training.estimators import AlgorithmSelector, accurate_candidates, default_candidates, mape
from seer.training.train import training_inputs

VARIANTS = ("shipped", "kernel_path", "no_census", "no_first_stage", "no_roofline", "accurate_trees")
#: Per-variant figures of a report, each a dict by variant name.
PER_VARIANT = ("mape_percent", "support_accuracy_percent", "selection", "fit_seconds")


def merge(reports: list[Path]) -> dict:
    """One report from several of the same GPU, math mode and data (variants run apart)."""
    merged: dict = {}
    for path in reports:
        report = json.loads(path.read_text())
        shared = {k: v for k, v in report.items() if k not in PER_VARIANT}
        if merged and shared != {k: v for k, v in merged.items() if k not in PER_VARIANT}:
            raise SystemExit(f"{path}: not the same GPU, math mode or data as the reports before it")
        merged |= shared
        for key in PER_VARIANT:
            merged.setdefault(key, {}).update(report.get(key, {}))
    return merged


def run(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu", default="h100")
    p.add_argument("--math", default="fma")
    p.add_argument("--data-dir", type=Path, default=Path("data"))
    p.add_argument("--variants", default=",".join(VARIANTS))
    p.add_argument("--report", type=Path)
    p.add_argument("--merge", type=Path, nargs="+", help="combine these reports (run nothing)")
    args = p.parse_args(argv)
    if args.merge:
        return _write(merge(args.merge), args.report)
    dataset = args.data_dir / args.gpu
    table = read_measurements(dataset / "measurements")
    inputs = training_inputs(table, read_census(dataset / "census", passes=("fwd",)), args.math)
    full = [a for a in inputs.times.columns if inputs.recorded[a].all()]  # cuDNN's: seer's kernels ran on part
    shapes, census = inputs.shapes, inputs.census
    times, workspaces = inputs.times[full], inputs.workspaces[full]
    paths = inputs.paths[full] if inputs.paths is not None else None
    tests = {split: training_frames(table, args.math, split) for split in ("test1", "test2")}
    largest = 2.0 ** log2_flops(shapes).max()
    result = {"gpu": args.gpu, "math": args.math, "training_shapes": len(shapes),
              "census_shapes": len(census[0]) if census else 0,
              "largest_training_gflops": round(largest / 1e9, 1), "mape_percent": {}, "support_accuracy_percent": {}}
    for variant in args.variants.split(","):
        inputs = {"shipped": (workspaces, census, paths), "kernel_path": (workspaces, census, paths),
                  "no_census": (workspaces, None, paths), "no_first_stage": (None, None, paths),
                  "no_roofline": (workspaces, census, paths), "accurate_trees": (workspaces, census, paths)}[variant]
        baseline = "none" if variant == "no_roofline" else "roofline"
        candidates = accurate_candidates() if variant == "accurate_trees" else default_candidates()
        started = time.perf_counter()
        selector = AlgorithmSelector(gpu=get_gpu_spec(args.gpu), baseline=baseline, candidates=candidates,
                                     max_kernel_paths=6 if variant == "kernel_path" else 0).fit(shapes, times, *inputs)
        scores, support, selection = {}, {}, {}
        for split, (test_shapes, test_times) in tests.items():
            predicted = pd.DataFrame(selector.predict_unmasked(test_shapes), index=test_shapes.index,
                                     columns=selector.algorithms_)
            ran_any = test_times[selector.algorithms_].notna().to_numpy()
            support[split] = round(float(((selector.predict_support(test_shapes) >= 0.5) == ran_any).mean() * 100), 3)
            picks = pd.Series(selector.select(test_shapes), index=test_shapes.index)
            selection[split] = {k: round(v, 2) for k, v in selection_metrics(test_times, picks).items()
                                if k in ("top1_pct", "mean_regret_pct")}
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
        result.setdefault("selection", {})[variant] = selection
        result.setdefault("fit_seconds", {})[variant] = round(time.perf_counter() - started, 1)
        print(f"{variant}: {json.dumps(scores)} support {support} selection {selection}", file=sys.stderr, flush=True)
    return _write(result, args.report)


def _write(result: dict, report: Path | None) -> int:
    text = json.dumps(result, indent=2)
    print(text)
    if report:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(run())

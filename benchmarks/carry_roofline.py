"""A model carried to another GPU with none of that GPU's runs: does the physics of its baseline carry it?

    python benchmarks/carry_roofline.py --source h100 --target h200 --out benchmarks/results/h100-to-h200-roofline

Each time regressor predicts a ratio to a baseline: the algorithm's fixed cost plus the roofline floor
(FLOPs at the FP32 peak plus tensor bytes at DRAM bandwidth) of the GPU it learnt on. Carried as it is, the
source GPU's model predicts the target's times with the source's floor. Here the same ratios multiply the
target's floor instead (its spec: `seer gpus`), the features the trees read left as in training. On the
target's held-out layers (Test-set-II), each algorithm's time MAPE both ways, beside the source model's own
MAPE on the source's Test-set-II (what it would carry at best). Writes ``carry-roofline.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).parent))
from gpu_pair import MATHS, wide_times  # noqa: E402

from seer.algorithms import algorithm_names  # noqa: E402
from seer.dataset.build import read_measurements  # noqa: E402
from seer.hardware.gpus import get_gpu_spec  # noqa: E402
from seer.layers.shapes import LAYER_COLUMNS  # noqa: E402
from seer.predict.features import feature_matrix  # noqa: E402
from seer.predict.persist import load_model  # noqa: E402
from seer.predict.predictors import baseline_ms  # noqa: E402
from seer.schema import DatasetDir  # noqa: E402


def errors(model, math: str, wide: pd.DataFrame, layers: pd.DataFrame, floor_spec=None) -> dict:
    """Time MAPE % per algorithm and pooled of ``model`` on the layers of ``wide``; with ``floor_spec``,
    each time rescaled from the model's own baseline to one with that GPU's roofline floor."""
    shapes = layers.loc[wide.index, list(LAYER_COLUMNS)].reset_index(drop=True)
    ranked = model.predict(shapes, math, algorithms="cudnn").dropna(subset=["algo"])
    rows, algos = ranked["layer"].to_numpy(), ranked["algo"].to_numpy()
    predicted = ranked["predicted_ms"].to_numpy().copy()
    if floor_spec is not None:
        predictor = model.predictors[math]
        column = predictor.features.index("log2_roofline_floor_s")
        own = feature_matrix(shapes, predictor.feature_spec)[1][:, column]
        other = feature_matrix(shapes, floor_spec)[1][:, column]
        for algo in np.unique(algos):
            at = algos == algo
            fixed = predictor.fixed_cost_ms.get(algo, 0.0)
            predicted[at] *= (baseline_ms(other[rows[at]], fixed, predictor.baseline)
                              / baseline_ms(own[rows[at]], fixed, predictor.baseline))
    truth = wide.to_numpy()[rows, wide.columns.get_indexer(algos)]
    known = np.isfinite(truth)
    ape = pd.Series(np.abs(predicted[known] / truth[known] - 1))
    return {"pooled": float(100 * ape.mean()),
            **{str(a): float(v) for a, v in (ape.groupby(algos[known]).mean() * 100).items()}}


def markdown(results: dict) -> str:
    lines = [f"Time MAPE % on Test-set-II, cuDNN's algorithms; `{results['command']}`", ""]
    for math, rows in results["maths"].items():
        algos = list(rows["source model on the source"])
        lines += [f"**{math}**", "", "| model | " + " | ".join(algos) + " |", "|---|" + "---|" * len(algos)]
        for label, values in rows.items():
            lines.append(f"| {label} | " + " | ".join(f"{values[a]:.1f}" for a in algos) + " |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default="h100")
    parser.add_argument("--target", default="h200")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--models-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    columns = ["shape_id", "split", "math", "algo", "status", "time_ms", *LAYER_COLUMNS]
    tables = {g: read_measurements(DatasetDir(args.data_dir / g).measurements, columns, passes=("fwd",))
              for g in (args.source, args.target)}
    layers = pd.concat(tables.values()).drop_duplicates("shape_id").set_index("shape_id")
    algos = algorithm_names("cudnn")
    results = {"command": "python benchmarks/carry_roofline.py " + " ".join(argv or sys.argv[1:]), "maths": {}}
    for math in MATHS:
        model = load_model(args.source, math=math, models_dir=args.models_dir)
        held_out = {g: wide_times(t[t["split"] == "test2"], math, algos) for g, t in tables.items()}
        results["maths"][math] = {
            "source model on the source": errors(model, math, held_out[args.source], layers),
            "carried as it is": errors(model, math, held_out[args.target], layers),
            "carried, the target's roofline floor": errors(model, math, held_out[args.target], layers,
                                                           get_gpu_spec(args.target))}
    text = markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "carry-roofline.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "carry-roofline.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

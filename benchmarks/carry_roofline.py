"""A model carried to another GPU with none of that GPU's runs: does the physics of its baseline carry it?

    python benchmarks/carry_roofline.py --source h100 --target h200 --out benchmarks/results/h100-to-h200-roofline

Each time regressor predicts a ratio to a baseline: the algorithm's fixed cost plus the roofline floor
(FLOPs at the FP32 peak plus tensor bytes at DRAM bandwidth) of the GPU it learnt on. Carried as it is, the
source GPU's model predicts the target's times with the source's floor. Here the same ratios multiply the
target's floor instead (its spec: `seer gpus`), the features the trees read left as in training. On the
target's held-out layers (Test-set-II), each algorithm's time MAPE both ways, beside the source model's own
MAPE on the source's Test-set-II (what it would carry at best).

A third way scales each carried time by the share of it the source spends moving DRAM bytes, as the
source's ncu profiles show it: a regressor per (math, algorithm) of that share, (DRAM bytes read and
written) / (ncu time x the source's bandwidth), fitted on the source's profiled train runs from the shape
features, predicts it per held-out layer, and that share of the time shrinks by the ratio of the two
GPUs' bandwidths (Amdahl's rule; nothing of the target's runs is used). Writes ``carry-roofline.json`` and ``.md``.
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


def carried(model, math: str, shapes: pd.DataFrame, floor_spec=None, dram=None) -> tuple[list, np.ndarray, np.ndarray]:
    """cuDNN's algorithms, and ``model``'s predicted times and pick scores for ``shapes`` (rows, algorithms);
    with ``floor_spec``, each rescaled from the model's own baseline to one with that GPU's roofline floor;
    with ``dram`` (``(shares, bandwidth ratio)``: :func:`dram_shares`' regressors, target over source), each
    one's predicted DRAM share shrunk by that ratio. Times and scores scale alike, so the pick follows."""
    predictor = model.predictors[math]
    algos = [a for a in predictor.algorithms if a in algorithm_names("cudnn")]
    columns = [predictor.algorithms.index(a) for a in algos]
    times, scores = (values[:, columns] for values in predictor.predict_with_scores(shapes))
    scale = np.ones_like(times)
    features = feature_matrix(shapes, predictor.feature_spec)[1]
    if floor_spec is not None:
        column = predictor.features.index("log2_roofline_floor_s")
        own, other = features[:, column], feature_matrix(shapes, floor_spec)[1][:, column]
        for j, algo in enumerate(algos):
            fixed = predictor.fixed_cost_ms.get(algo, 0.0)
            scale[:, j] *= baseline_ms(other, fixed, predictor.baseline) / baseline_ms(own, fixed, predictor.baseline)
    if dram is not None:
        shares, ratio = dram
        for j, algo in enumerate(algos):
            if algo in shares:
                scale[:, j] *= 1.0 - np.clip(shares[algo].predict(features), 0.0, 1.0) * (1.0 - 1.0 / ratio)
    return algos, times * scale, scores * scale


def errors(model, math: str, wide: pd.DataFrame, layers: pd.DataFrame, floor_spec=None, dram=None) -> dict:
    """Time MAPE % per algorithm and pooled of ``model`` (:func:`carried`) on the layers of ``wide``, and
    its pick's mean regret % against the fastest measured of cuDNN's algorithms (``pick_regret``; a pick
    that did not run is left out and counted, ``picks_not_run``)."""
    shapes = layers.loc[wide.index, list(LAYER_COLUMNS)].reset_index(drop=True)
    algos, times, scores = carried(model, math, shapes, floor_spec, dram)
    truth = wide.reindex(columns=algos).to_numpy()
    known = np.isfinite(truth) & np.isfinite(times)
    ape = pd.Series(np.abs(times[known] / truth[known] - 1))
    named = np.broadcast_to(np.array(algos), times.shape)[known]
    ranked = np.isfinite(scores).any(axis=1)
    pick = np.argmin(np.where(np.isfinite(scores), scores, np.inf), axis=1)
    took = truth[np.arange(len(truth)), pick]
    regret = took / np.nanmin(truth, axis=1) - 1
    ran = ranked & np.isfinite(regret)
    return {"pooled": float(100 * ape.mean()),
            **{str(a): float(v) for a, v in (ape.groupby(named).mean() * 100).items()},
            "pick_regret": float(100 * regret[ran].mean()), "picks_not_run": int((ranked & ~ran).sum())}


def dram_shares(runs: pd.DataFrame, layers: pd.DataFrame, spec, math: str) -> dict:
    """Per algorithm, a regressor of the share of a run's time spent moving DRAM bytes at ``spec``'s
    bandwidth, from the shape features, fitted on the profiled train runs of ``runs`` under ``math``."""
    from sklearn.ensemble import HistGradientBoostingRegressor

    runs = runs[(runs["split"] == "train") & (runs["math"] == math) & (runs["status"] == "ok")
                & (runs["profile_status"] == "ok") & (runs["ncu_time_ms"] > 0)]
    out = {}
    for algo, group in runs.groupby("algo"):
        share = ((group["dram_read_bytes"] + group["dram_write_bytes"])
                 / (group["ncu_time_ms"] * 1e-3 * spec.memory_bandwidth_gbs * 1e9)).clip(0.0, 1.0)
        features = feature_matrix(layers.loc[group["shape_id"], list(LAYER_COLUMNS)].reset_index(drop=True), spec)[1]
        out[algo] = HistGradientBoostingRegressor(random_state=0).fit(features, share.to_numpy())
    return out


def markdown(results: dict) -> str:
    title = (f"Time MAPE % on Test-set-II, cuDNN's algorithms, and the pick's mean regret % among them (a pick "
             f"that did not run left out: `picks_not_run`); `{results['command']}`")
    lines = [title, ""]
    for math, rows in results["maths"].items():
        algos = list(rows["source model on the source"])
        lines += [f"**{math}**", "", "| model | " + " | ".join(algos) + " |", "|---|" + "---|" * len(algos)]
        for label, values in rows.items():
            lines.append(f"| {label} | " + " | ".join(
                str(values[a]) if a == "picks_not_run" else f"{values[a]:.2f}" if a == "pick_regret"
                else f"{values[a]:.1f}" for a in algos) + " |")
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
    profile_columns = ["profile_status", "ncu_time_ms", "dram_read_bytes", "dram_write_bytes"]  # the source's
    tables = {g: read_measurements(DatasetDir(args.data_dir / g).measurements,
                                   [*columns, *profile_columns] if g == args.source else columns, passes=("fwd",))
              for g in (args.source, args.target)}
    layers = pd.concat(tables.values()).drop_duplicates("shape_id").set_index("shape_id")
    source_spec, target_spec = get_gpu_spec(args.source), get_gpu_spec(args.target)
    bandwidth = target_spec.memory_bandwidth_gbs / source_spec.memory_bandwidth_gbs
    algos = algorithm_names("cudnn")
    results = {"command": "python benchmarks/carry_roofline.py " + " ".join(argv or sys.argv[1:]), "maths": {}}
    for math in MATHS:
        model = load_model(args.source, math=math, models_dir=args.models_dir)
        held_out = {g: wide_times(t[t["split"] == "test2"], math, algos) for g, t in tables.items()}
        results["maths"][math] = {
            "source model on the source": errors(model, math, held_out[args.source], layers),
            "carried as it is": errors(model, math, held_out[args.target], layers),
            "carried, the target's roofline floor": errors(model, math, held_out[args.target], layers, target_spec),
            "carried, the source's DRAM share (ncu) at the target's bandwidth": errors(
                model, math, held_out[args.target], layers,
                dram=(dram_shares(tables[args.source], layers, model.predictors[math].feature_spec, math), bandwidth))}
    text = markdown(results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "carry-roofline.json").write_text(json.dumps(results, indent=2) + "\n")
    (args.out / "carry-roofline.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Time regressors that learn from cuDNN's exact answers: which inputs sharpen them, measured.

    OMP_NUM_THREADS=1 python benchmarks/answer_inputs.py --gpu h100 --out benchmarks/results/h100-answer-inputs.json

On a GPU host cuDNN answers from descriptors alone (no kernel runs) whether each of its
algorithms takes a layer and how much workspace it asks for; the workspace settles the
kernel path inside an algorithm (GEMM's im2col buffer or its direct fallback, FFT's tile
size). The measurement tables hold these answers for every measured layer, so regressors
can learn from them. This script fits, per math mode and cuDNN algorithm, one boosted-tree
regressor of log(time / baseline) on the train split for each input design, the shipped
model's settings and baseline, and scores it on Test-set-I and Test-set-II:

- ``shape``: the shape features alone (the control: the same fit without answers);
- ``own``: and the algorithm's own workspace (log2(1 + bytes));
- ``all``: and every cuDNN algorithm's answer (log2(1 + bytes), -1 where cuDNN refuses it);
- ``all+rank``: and cuDNN's v7 heuristic rank of each (also descriptors only; -1 where absent);
- ``all+relative``: ``all`` and each answer over the layer's tensor bytes (log2 of the ratio):
  the same answers on the scale trees split best, the kernel path as a buffer per tensor byte.

``--fit`` chooses how each design is fitted: ``mean`` (the shipped candidate ``boosted_trees``),
``median`` (``boosted_trees_median``), ``paths`` (``mean``, one regressor per exact kernel
path where the algorithm's workspace is zero on some runs and not on others, as the shipped
model splits by its guessed path) or ``dense`` (``mean`` with every feature at every split).

Besides the shipped model's own predictions (``shipped``, from the shape alone; its times
do not change with cuDNN's runs answer), it reports the pick's top-1 rate and mean regret
when each design's times replace the cuDNN algorithms' (seer's own kernels keep the shipped
model's times; an algorithm cuDNN refuses gets none): the fastest predicted time wins.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.base import clone

from seer.algorithms import algorithm_names
from seer.dataset.views import algorithm_rows, layers_of, values_by_algorithm
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.features import shape_features
from seer.predict.persist import load_model
from seer.predict.predictors import baseline_ms
from seer.schema import DatasetDir
from seer.training.estimators import FIXED_COST_QUANTILE, default_candidates

DESIGNS = ("shape", "own", "all", "all+rank", "all+relative")
SPLITS = {"Test-set-I": "test1", "Test-set-II": "test2"}
CUDNN = tuple(algorithm_names("cudnn"))
NOT_ANSWERED = -1.0


def split_frames(table: pd.DataFrame, math: str, split: str) -> dict[str, pd.DataFrame]:
    """Layers, times, workspaces and heuristic ranks (layers x algorithms, NaN where the run
    did not go ahead) of one split and math mode."""
    rows = algorithm_rows(table, math, split)
    times = values_by_algorithm(rows, "time_ms")
    cudnn = rows[rows["algo"].isin(CUDNN)]
    return {"layers": layers_of(rows, times.index), "times": times,
            "workspaces": values_by_algorithm(cudnn, "workspace_bytes").reindex(index=times.index, columns=CUDNN),
            "ranks": values_by_algorithm(cudnn, "heuristic_rank").reindex(index=times.index, columns=CUDNN)}


def answer_inputs(frames: dict, design: str, algo: str, F: np.ndarray | None = None,
                  names: list[str] | None = None) -> np.ndarray:
    """The answer columns of ``design`` for ``algo``'s regressor (none for ``shape``)."""
    size = np.log2(1 + frames["workspaces"].to_numpy(dtype=float))
    if design == "all+relative":
        tensor = np.log2(sum(2.0 ** F[:, names.index(f"log2_{t}_bytes")] for t in ("input", "filter", "output")))
        relative = np.where(np.isfinite(size), size - tensor[:, None], NOT_ANSWERED - 64)
        return np.hstack([np.where(np.isfinite(size), size, NOT_ANSWERED), relative])
    size = np.where(np.isfinite(size), size, NOT_ANSWERED)
    if design == "shape":
        return np.empty((len(size), 0))
    if design == "own":
        return size[:, [CUDNN.index(algo)]]
    if design == "all":
        return size
    rank = frames["ranks"].to_numpy(dtype=float)
    return np.hstack([size, np.where(np.isfinite(rank), rank, NOT_ANSWERED)])


def fit_and_score(model, table: pd.DataFrame, math: str, designs, fit: str = "mean") -> tuple[list[dict], list[dict]]:
    spec = model.predictors[math].feature_spec
    frames = {name: split_frames(table, math, split) for name, split in {"train": "train", **SPLITS}.items()}
    features = {name: shape_features(f["layers"], spec).to_numpy() for name, f in frames.items()}
    roofline = {name: F[:, list(model.predictors[math].features).index("log2_roofline_floor_s")]
                for name, F in features.items()}
    names = list(model.predictors[math].features)
    algos = [a for a in CUDNN if a in model.predictors[math].regressors and a in frames["train"]["times"]]
    predicted = {name: {d: {} for d in designs} for name in SPLITS}
    for algo in algos:
        times = frames["train"]["times"][algo].to_numpy(dtype=float)
        runs = np.isfinite(times) & (times > 0)
        fixed = float(np.quantile(times[runs], FIXED_COST_QUANTILE))
        ratio = times / baseline_ms(roofline["train"], fixed, "roofline")
        for design in designs:
            inputs = {name: np.hstack([features[name], answer_inputs(frames[name], design, algo, features[name], names)])
                      for name in frames}
            paths = {name: kernel_paths(frames[name]["workspaces"][algo].to_numpy(dtype=float), fit)
                     for name in frames}
            started = time.perf_counter()
            fitted = fit_paths(inputs["train"], ratio, runs, paths["train"], fit)
            print(f"{math} {algo} {design} {fit}: fitted {len(fitted)} in {time.perf_counter() - started:.1f} s",
                  flush=True)
            for name in SPLITS:
                ms = predict_paths(fitted, inputs[name], paths[name]) * baseline_ms(roofline[name], fixed, "roofline")
                refused = ~np.isfinite(frames[name]["workspaces"][algo].to_numpy(dtype=float))
                predicted[name][design][algo] = np.where(refused, np.nan, ms)
    errors, picks = [], []
    for name in SPLITS:
        f = frames[name]
        layers = f["layers"].reset_index(drop=True)
        answers = f["workspaces"].reset_index(drop=True)
        shipped = model.predict(layers, math, workspaces=answers)
        shipped_times = shipped.pivot_table(index="layer", columns="algo", values="predicted_ms").reindex(
            index=range(len(layers)), columns=f["times"].columns)
        shipped_pick = model.pick(layers, math, workspaces=answers)["best_algo"]
        measured = f["times"]
        ways = {"shipped": shipped_times, **{d: shipped_times.copy() for d in designs}}
        for design in designs:
            for algo, ms in predicted[name][design].items():
                ways[design][algo] = ms
        for algo in algos:
            ran = np.isfinite(measured[algo].to_numpy(dtype=float))
            row = {"math": math, "split": name, "algo": algo, "runs": int(ran.sum())}
            for way, wide in ways.items():
                got = wide[algo].to_numpy(dtype=float)[ran]
                error = np.abs(got / measured[algo].to_numpy(dtype=float)[ran] - 1) * 100
                row[f"mape_{way}"] = round(float(np.nanmean(error)), 2)
                row[f"median_ape_{way}"] = round(float(np.nanmedian(error)), 2)
                row[f"unpredicted_{way}"] = int(np.isnan(error).sum())
            errors.append(row)
        pooled = {"math": math, "split": name, "algo": "cuDNN's, pooled",
                  "runs": int(np.isfinite(measured[algos].to_numpy(dtype=float)).sum())}
        for way, wide in ways.items():
            m, p = measured[algos].to_numpy(dtype=float), wide[algos].to_numpy(dtype=float)
            error = np.abs(p / m - 1)[np.isfinite(m)] * 100
            pooled[f"mape_{way}"] = round(float(np.nanmean(error)), 2)
            pooled[f"median_ape_{way}"] = round(float(np.nanmedian(error)), 2)
            pooled[f"unpredicted_{way}"] = int(np.isnan(error).sum())
        errors.append(pooled)
        for among, columns in (("all", list(measured.columns)), ("cudnn", [a for a in measured.columns if a in CUDNN])):
            row = {"math": math, "split": name, "among": among, "layers": len(layers)}
            shipped_choice = shipped_pick.reindex(range(len(layers))).astype(object).to_numpy()
            if among == "cudnn":
                shipped_choice = model.pick(layers, math, algorithms="cudnn", workspaces=answers)["best_algo"].reindex(
                    range(len(layers))).astype(object).to_numpy()
            row["top1_shipped_pick"], row["regret_pct_shipped_pick"] = pick_quality(shipped_choice, measured, columns)
            for way, wide in ways.items():
                choice = fastest_predicted(wide[columns])
                row[f"top1_{way}"], row[f"regret_pct_{way}"] = pick_quality(choice, measured, columns)
                worst = worst_picks(choice, measured, columns, wide)
                if worst:
                    print(f"{math} {name} among {among}, {way}: worst picks {worst}")
            picks.append(row)
    return errors, picks


#: A kernel path with fewer train runs than this borrows another path's regressor.
MIN_PATH_RUNS = 20


def fit_paths(X: np.ndarray, y: np.ndarray, rows: np.ndarray, paths: dict[str, np.ndarray],
              fit: str = "paths") -> dict:
    """A regressor per kernel path (:func:`kernel_paths`), fitted on ``rows`` of that path."""
    return {p: clone(regressor(fit)).fit(X[rows & m], y[rows & m])
            for p, m in paths.items() if (rows & m).sum() >= MIN_PATH_RUNS}


def predict_paths(fitted: dict, X: np.ndarray, paths: dict[str, np.ndarray]) -> np.ndarray:
    """Each row by its path's regressor, or the first fitted one where its path has none (NaN
    where none was fitted)."""
    out = np.full(len(X), np.nan)
    for p, members in paths.items():
        if members.any() and fitted:
            out[members] = fitted[p if p in fitted else next(iter(fitted))].predict(X[members])
    return out


def regressor(fit: str):
    """The regressor each design is fitted with (``--fit``)."""
    candidates = default_candidates()
    if fit == "median":
        return candidates["boosted_trees_median"]
    out = clone(candidates["boosted_trees"])
    if fit == "dense":
        out.regressor.set_params(max_features=1.0)
    return out


def kernel_paths(workspace: np.ndarray, fit: str) -> dict[str, np.ndarray]:
    """Rows per kernel path: with ``fit="paths"``, by whether cuDNN's workspace is zero."""
    if fit != "paths":
        return {"all": np.ones(len(workspace), dtype=bool)}
    return {"workspace": workspace > 0, "no_workspace": ~(workspace > 0)}


def fastest_predicted(wide: pd.DataFrame) -> np.ndarray:
    values = wide.to_numpy(dtype=float)
    best = np.where(np.isfinite(values), values, np.inf).argmin(axis=1)
    out = np.asarray(wide.columns, dtype=object)[best]
    out[~np.isfinite(values).any(axis=1)] = None
    return out


def worst_picks(picks, times: pd.DataFrame, columns: list[str], predicted: pd.DataFrame, n: int = 2) -> list:
    """The ``n`` picks of the largest regret over 100%: (layer, pick, its regret %, predicted ms,
    measured ms, the fastest algorithm)."""
    measured = times[columns].to_numpy(dtype=float)
    fastest = np.nanmin(measured, axis=1)
    index = {a: k for k, a in enumerate(columns)}
    got = np.array([measured[i, index[a]] if a in index else np.nan for i, a in enumerate(picks)])
    regret = got / fastest - 1
    out = []
    for i in np.argsort(-np.nan_to_num(regret, nan=-1))[:n]:
        if regret[i] > 1:
            out.append((int(i), picks[i], round(float(regret[i]) * 100), round(float(predicted[picks[i]].iloc[i]), 4),
                        round(float(got[i]), 4), columns[int(np.nanargmin(measured[i]))]))
    return out


def pick_quality(picks: np.ndarray, times: pd.DataFrame, columns: list[str]) -> tuple[float, float]:
    """Top-1 rate and mean regret (%) of ``picks`` against the fastest measured of ``columns``;
    a pick that did not run counts as the slowest."""
    measured = times[columns].to_numpy(dtype=float)
    fastest = np.nanmin(measured, axis=1)
    index = {a: k for k, a in enumerate(columns)}
    got = np.array([measured[i, index[a]] if a in index else np.nan for i, a in enumerate(picks)])
    got = np.where(np.isfinite(got), got, np.nanmax(measured, axis=1))
    return round(float(np.mean(got <= fastest)), 4), round(float(np.mean(got / fastest - 1) * 100), 3)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="h100")
    parser.add_argument("--data-dir", type=Path, default=Path("data"))
    parser.add_argument("--designs", default=",".join(DESIGNS))
    parser.add_argument("--fit", default="mean", choices=("mean", "median", "paths", "dense"))
    parser.add_argument("--maths", default=None, help="comma-separated; default: the model's")
    parser.add_argument("--out", type=Path, required=True, help="results JSON")
    args = parser.parse_args(argv)
    model = load_model(args.gpu)
    table = pd.read_parquet(DatasetDir(args.data_dir / args.gpu).measurements,
                            columns=[*LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms",
                                     "workspace_bytes", "heuristic_rank"])
    designs = args.designs.split(",")
    errors, picks = [], []
    for math in (args.maths.split(",") if args.maths else model.maths):
        e, p = fit_and_score(model, table, math, designs, args.fit)
        errors += e
        picks += p
    with pd.option_context("display.width", 250, "display.max_columns", 40):
        frame = pd.DataFrame(errors)
        print(frame[["math", "split", "algo", "runs", *(f"mape_{w}" for w in ("shipped", *designs))]].to_string())
        frame = pd.DataFrame(picks)
        print(frame.to_string())
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"gpu": args.gpu, "card_trained_at": model.card.get("trained_at"),
                                    "designs": designs, "fit": args.fit, "time_mape": errors, "picks": picks}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

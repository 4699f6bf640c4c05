"""The cross-GPU model: the time of PyTorch's ``cudnn.benchmark`` choice on GPUs never measured.

Every GPU with measurements of that one quantity, strict FP32, fp32 NCHW, teaches it: seer's own
(``PYTORCH_BENCHMARK`` under ``fma`` in ``data/<gpu>/``: every layer kind, burst timing) and the
public rows of NeuSight's training data (``data/external/neusight-conv/``: V100, T4, P100, P4;
3x3 stride-1 layers; cuDNN 8.9.2; single-call timing, which overstates kernels shorter than a few
tens of microseconds). Each row keeps its ``source`` and ``timing``. Boosted trees learn
log2(time / roofline floor) from the shape features computed with each GPU's spec and the spec's
figures (:class:`seer.predict.predictors.CrossGpuPredictor`). Its error on a GPU it never saw is
measured by leaving each GPU out in turn; the intervals are the quantiles of those errors.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingRegressor

from seer.dataset.build import read_measurements
from seer.errors import InputError
from seer.hardware.gpus import get_gpu_spec
from seer.layers.shapes import LAYER_COLUMNS, layer_frame
from seer.predict.persist import CROSS_GPU_CARD, CROSS_GPU_FILE, sha256, write_model_file
from seer.predict.predictors import CrossGpuPredictor, cross_gpu_inputs
from seer.schema import DatasetDir, INTERVAL_LEVELS

#: NeuSight's files and seer's spec of each board.
PUBLIC_FILES = {"v100.csv.xz": "v100-pcie", "t4.csv.xz": "t4", "p100.csv.xz": "p100", "p4.csv.xz": "p4"}
#: The policy whose time it learns (the algorithm cuDNN's benchmark mode picks), and its math mode.
POLICY, MATH = "PYTORCH_BENCHMARK", "fma"


def regressor() -> HistGradientBoostingRegressor:
    return HistGradientBoostingRegressor(max_iter=400, learning_rate=0.05, max_leaf_nodes=31, random_state=0)


def public_times(folder: Path) -> pd.DataFrame:
    """NeuSight's rows as layers (3x3, stride 1, padding 1) with ``gpu``, ``time_ms``, ``source``,
    ``timing`` and ``cudnn_version``."""
    frames = []
    for name, gpu in PUBLIC_FILES.items():
        path = folder / name
        if not path.exists():
            raise InputError("missing: the public timings of the cross-GPU model", path=path)
        raw = pd.read_csv(path)
        raw = raw[(raw["Kernel_Szie"] == 3) & (raw["Stride"] == 1) & (raw["Padding"] == 1)]
        layers = layer_frame(pd.DataFrame({
            "batch": raw["B"], "in_ch": raw["Input_Channel"], "out_ch": raw["Output_Channel"],
            "in_h": raw["Input_Size"], "in_w": raw["Input_Size"], "kernel_h": 3, "kernel_w": 3, "pad_h": 1,
            "pad_w": 1}))
        frames.append(layers.assign(gpu=gpu, time_ms=raw["Latency"].to_numpy(dtype=float), source="neusight",
                                    timing="single-call", cudnn_version="8.9.2"))
    return pd.concat(frames, ignore_index=True)


def seer_times(data_root: Path) -> pd.DataFrame:
    """seer's ``PYTORCH_BENCHMARK`` runs under ``fma`` of every GPU dataset under ``data_root``."""
    frames = []
    for folder in sorted(p for p in data_root.iterdir() if (p / "measurements").is_dir()):
        runs = read_measurements(DatasetDir(folder).measurements,
                                 [*LAYER_COLUMNS, "gpu", "algo", "math", "status", "time_ms", "cudnn_version"],
                                 passes=("fwd",))
        ok = runs[(runs["algo"] == POLICY) & (runs["math"] == MATH) & (runs["status"] == "ok")]
        if len(ok):
            frames.append(ok.drop(columns=["algo", "math", "status"]).assign(source="seer", timing="burst"))
    if not frames:
        raise InputError(f"no {POLICY} runs under {MATH} math in any dataset", path=data_root)
    out = pd.concat(frames, ignore_index=True)
    out["gpu"] = out["gpu"].astype(str)
    return out


def training_rows(data_root: Path, public: Path) -> pd.DataFrame:
    """Every GPU's rows: seer's and the public ones, each saying its source."""
    return pd.concat([seer_times(data_root), public_times(public)], ignore_index=True)


def _inputs(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Each row's model inputs and roofline floor, computed with its own GPU's spec (``rows``
    indexed 0..n-1)."""
    X, floor = None, np.empty(len(rows))
    for gpu, members in rows.groupby("gpu", sort=False):
        x, f = cross_gpu_inputs(members[list(LAYER_COLUMNS)], get_gpu_spec(str(gpu)))
        if X is None:
            X = np.empty((len(rows), x.shape[1]))
        X[members.index], floor[members.index] = x, f
    return X, floor


def fit(rows: pd.DataFrame) -> tuple[CrossGpuPredictor, dict]:
    """The model fitted on every row, and what its card says: per GPU left out of the fit, the
    MAPE of its times predicted from the others; the intervals from those errors."""
    from seer.training.estimators import to_part

    rows = rows.reset_index(drop=True)
    X, floor = _inputs(rows)
    y = np.log2(rows["time_ms"].to_numpy(dtype=float) / 1e3) - floor
    gpus = list(pd.unique(rows["gpu"]))
    errors, per_gpu = [], {}
    for gpu in gpus:
        held = (rows["gpu"] == gpu).to_numpy()
        predicted = regressor().fit(X[~held], y[~held]).predict(X[held])
        error = predicted - y[held]  # log2(predicted / measured)
        errors.append(error)
        ape = np.abs(2.0 ** error - 1)
        per_gpu[gpu] = {"rows": int(held.sum()), "source": str(rows.loc[held, "source"].iloc[0]),
                        "timing": str(rows.loc[held, "timing"].iloc[0]),
                        "cudnn": sorted(map(str, pd.unique(rows.loc[held, "cudnn_version"]))),
                        "left_out_mape_percent": round(float(ape.mean() * 100), 2),
                        "left_out_median_ape_percent": round(float(np.median(ape) * 100), 2)}
    # Each GPU weighs the same in the intervals, whatever its number of rows.
    pooled = np.concatenate(errors)
    weights = np.concatenate([np.full(len(e), 1 / len(e)) for e in errors])
    intervals = {}
    for level in INTERVAL_LEVELS:
        tail = (1 - level / 100) / 2
        # The predicted time's bounds: measured = predicted / 2**error.
        low, high = _weighted_quantile(-pooled, weights, [tail, 1 - tail])
        intervals[str(level)] = [min(float(low), 0.0), max(float(high), 0.0)]
    model = CrossGpuPredictor(to_part(regressor().fit(X, y)), [str(g) for g in gpus], intervals)
    return model, {"policy": POLICY, "math": MATH, "gpus": per_gpu, "interval_log2_bounds": intervals}


def _weighted_quantile(values: np.ndarray, weights: np.ndarray, quantiles) -> np.ndarray:
    order = np.argsort(values)
    cumulative = np.cumsum(weights[order]) / weights.sum()
    return np.interp(quantiles, cumulative, values[order])


def train_cross_gpu(data_root: Path, public: Path, models_root: Path) -> Path:
    """Fit the cross-GPU model and write its file and card into ``models_root``; the card's path."""
    rows = training_rows(data_root, public)
    model, card = fit(rows)
    models_root.mkdir(parents=True, exist_ok=True)
    path = models_root / CROSS_GPU_FILE
    write_model_file(model, path)
    card |= {"trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), "model_file": CROSS_GPU_FILE,
             "sha256": sha256(path), "rows": int(len(rows)),
             "sources": {"seer": "data/<gpu>/measurements (PYTORCH_BENCHMARK, fma)",
                         "neusight": "data/external/neusight-conv (MIT licence; SOURCE.md)"}}
    tmp = models_root / f".{CROSS_GPU_CARD}.tmp"
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    tmp.replace(models_root / CROSS_GPU_CARD)
    return models_root / CROSS_GPU_CARD

"""The cross-GPU model: the time of PyTorch's ``cudnn.benchmark`` choice on GPUs never measured.

Every GPU with measurements of that one quantity, strict FP32, fp32 NCHW, teaches it: seer's own
(``PYTORCH_BENCHMARK`` under ``fma`` in ``data/<gpu>/``: every layer kind, burst timing) and the
public rows of NeuSight's training data (``data/external/neusight-conv/``: V100, T4, P100, P4;
3x3 stride-1 layers; cuDNN 8.9.2; single-call timing, which overstates kernels shorter than a few
tens of microseconds). Each row keeps its ``source`` and ``timing``. Boosted trees learn
log2(time / roofline floor) from the shape features computed with each GPU's spec and the spec's
figures (:class:`seer.predict.predictors.CrossGpuPredictor`). Its error on a GPU it never saw is
measured by leaving each GPU out in turn; the intervals are the quantiles of those errors.

Beside the time, the family of the algorithm that choice runs (implicit GEMM, Winograd, FFT, ...,
:func:`seer.algorithms.kernels_family` of the kernels it ran: CUPTI's traces for seer's rows, the
kernels each public row lists): boosted trees over the same inputs and the cuDNN major version,
which decides the family more than the GPU does (``benchmarks/results/chosen-family/``). Its
agreement on a GPU left out is measured the same way, beside always guessing the commonest family
of the other GPUs with that cuDNN version.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from seer.algorithms import kernels_family
from seer.dataset.build import read_measurements
from seer.dataset.tables import read_parts
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


def classifier() -> HistGradientBoostingClassifier:
    return HistGradientBoostingClassifier(max_iter=200, learning_rate=0.1, max_leaf_nodes=31, random_state=0)


def cudnn_major(versions: pd.Series) -> np.ndarray:
    """The major number of each cuDNN version string (``"9.19.0"`` -> 9)."""
    return versions.astype(str).str.split(".").str[0].astype(int).to_numpy()


def public_times(folder: Path) -> pd.DataFrame:
    """NeuSight's rows as layers (3x3, stride 1, padding 1) with ``gpu``, ``time_ms``, ``source``,
    ``timing``, ``cudnn_version`` and ``family`` (from the kernels the row lists)."""
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
                                    timing="single-call", cudnn_version="8.9.2",
                                    family=raw["Kernels"].fillna("").map(lambda k: kernels_family(k.split(";")))
                                    .to_numpy()))
    return pd.concat(frames, ignore_index=True)


def seer_times(data_root: Path) -> pd.DataFrame:
    """seer's ``PYTORCH_BENCHMARK`` runs under ``fma`` of every GPU dataset under ``data_root``, with the
    ``family`` of the kernels CUPTI traced for each (missing where the run was not traced)."""
    frames = []
    for folder in sorted(p for p in data_root.iterdir() if (p / "measurements").is_dir()):
        dataset = DatasetDir(folder)
        runs = read_measurements(dataset.measurements, [*LAYER_COLUMNS, "shape_id", "gpu", "algo", "math", "status",
                                                        "time_ms", "cudnn_version"], passes=("fwd",))
        ok = runs[(runs["algo"] == POLICY) & (runs["math"] == MATH) & (runs["status"] == "ok")]
        if len(ok):
            traced = read_parts(dataset.traced_kernels, columns=["shape_id", "math", "algo", "kernel_name"])
            traced = traced[(traced["algo"] == POLICY) & (traced["math"] == MATH)]
            families = traced.groupby("shape_id")["kernel_name"].agg(list).map(kernels_family)
            frames.append(ok.drop(columns=["algo", "math", "status"])
                          .assign(source="seer", timing="burst", family=ok["shape_id"].map(families).to_numpy())
                          .drop(columns="shape_id"))
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
    family, family_card = _fit_family(rows, X, per_gpu)
    model = CrossGpuPredictor(to_part(regressor().fit(X, y)), [str(g) for g in gpus], intervals, to_part(family))
    return model, {"policy": POLICY, "math": MATH, "gpus": per_gpu, "interval_log2_bounds": intervals,
                   "family": family_card}


def _fit_family(rows: pd.DataFrame, X: np.ndarray, per_gpu: dict) -> tuple[HistGradientBoostingClassifier, dict]:
    """The family classifier fitted on every row with a family; per GPU left out (into ``per_gpu``)
    its agreement with the measured families, and that of always guessing the commonest family of
    the other GPUs with the same cuDNN major version."""
    known, family = rows["family"].notna().to_numpy(), rows["family"].to_numpy(dtype=object)
    major = cudnn_major(rows["cudnn_version"])
    inputs = np.hstack([X, major[:, None]])
    for gpu in per_gpu:
        held = (rows["gpu"] == gpu).to_numpy() & known
        train = known & (rows["gpu"] != gpu).to_numpy()
        if not held.any():
            continue
        predicted = classifier().fit(inputs[train], family[train].astype(str)).predict(inputs[held])
        same_major = train & (major == major[held][0])
        commonest = pd.Series(family[same_major if same_major.any() else train]).mode()[0]
        per_gpu[gpu] |= {"family_rows": int(held.sum()),
                         "left_out_family_agreement_percent": round(float(np.mean(predicted == family[held]) * 100), 1),
                         "commonest_family_agreement_percent": round(float(np.mean(family[held] == commonest) * 100), 1)}
    model = classifier().fit(inputs[known], family[known].astype(str))
    shares = {str(m): {str(k): round(float(v) * 100, 1) for k, v in
                       pd.Series(family[known & (major == m)]).value_counts(normalize=True).items()}
              for m in sorted(set(major[known]))}
    return model, {"rows": int(known.sum()), "cudnn_majors": sorted(int(m) for m in set(major[known])),
                   "percent_by_cudnn_major": shares}


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

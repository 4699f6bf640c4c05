"""A GPU with few measurements borrows a measured GPU's forward model.

On two GPUs of one architecture and cuDNN version the algorithms run the same kernels, and
their times differ by a few percent (``benchmarks/gpu_pair.py``: the H200 and the H100), so
trees learnt from tens of thousands of layers on one predict the other better than trees
learnt from a thousand or two on the other itself. :func:`transfer` keeps the source model's
first stage, time regressors and pick classifier, with the features computed as in its
training (the source GPU's figures), and fits on the target GPU's own runs what differs: a
time scale per algorithm (the median ratio of measured to predicted time on the train
split), the models of PyTorch's own choice, and the intervals (:mod:`seer.training.calibrate`).
SEER's model, the baseline, is the target GPU's own: fitted on its ncu-profiled training runs,
as :func:`seer.training.train.train` fits it, where it has any.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

from seer.dataset.build import parsed_measurements
from seer.dataset.views import training_frames
from seer.errors import InputError
from seer.hardware.gpus import GPUSpec
from seer.predict.model import Model
from seer.predict.predictors import AlgorithmPredictor
from seer.schema import DatasetDir
from seer.training.calibrate import calibrate
from seer.training.train import (TRAINING_COLUMNS, card_path, data_digest, seer_baseline, seer_baseline_card,
                                 train_policies)

#: An algorithm's time scale needs this many training runs on the target GPU; below, it keeps 1.
MIN_SCALE_RUNS = 30


def time_scales(predictor: AlgorithmPredictor, table: pd.DataFrame, math: str) -> tuple[dict, dict, int]:
    """Per algorithm, the median of measured / predicted time over the train split's runs of
    ``math`` (where at least :data:`MIN_SCALE_RUNS` ran), what the card says of each, and
    the number of training layers they come from."""
    shapes, measured = training_frames(table, math, "train", partial=True)
    if shapes.empty:
        return {}, {}, 0
    predicted = predictor.predict_unmasked(shapes.reset_index(drop=True))
    scales, card = {}, {}
    for j, algo in enumerate(predictor.algorithms):
        if algo not in measured.columns or algo not in predictor.regressors:
            continue
        m, p = measured[algo].to_numpy(dtype=float), predicted[:, j]
        ran = np.isfinite(m) & (m > 0) & np.isfinite(p) & (p > 0)
        if ran.sum() < MIN_SCALE_RUNS:
            continue
        log_ratio = np.log(m[ran] / p[ran])
        scales[algo] = float(np.clip(np.exp(np.median(log_ratio)), 0.1, 10))
        card[algo] = {"runs": int(ran.sum()), "scale": round(scales[algo], 4),
                      "mape_percent_before": round(float(np.mean(np.abs(np.exp(log_ratio) - 1)) * 100), 2),
                      "mape_percent_after": round(float(np.mean(np.abs(np.exp(log_ratio) / scales[algo] - 1)) * 100),
                                                  2)}
    return scales, card, len(shapes)


def transfer(source: Model, dataset_dir: Path, spec: GPUSpec, maths: Sequence[str] | None = None) -> Model:
    """``source``'s forward model carried over to ``spec``'s GPU, fitted to the runs of
    ``dataset_dir`` (that GPU's dataset) as the module says; SEER's baseline is fitted on that
    GPU's profiled runs, not carried."""
    if source.pass_ != "fwd":
        raise InputError(f"only a forward model can be carried over; this one predicts {source.pass_}", field="pass")
    if source.gpu == spec.name:
        raise InputError(f"the model is already {spec.name}'s", field="gpu")
    files = DatasetDir(dataset_dir)
    table = parsed_measurements(files, spec.name, TRAINING_COLUMNS, passes=("fwd",))
    maths = list(source.predictors) if maths is None else list(maths)
    predictors, baselines, per_math = {}, {}, {}
    for math in maths:
        original = source.predictor(math)
        carried = replace(original, spec=spec, source_spec=original.feature_spec, time_scale={}, intervals={},
                          near_best={}, policies={}, policy_reference="", guard_margins={})
        scales, info, shapes = time_scales(carried, table, math)
        if not info:
            raise InputError(f"no {math}-math runs of {source.gpu}'s algorithms in the train split",
                             path=files.measurements)
        predictors[math] = replace(carried, time_scale=scales)
        per_math[math] = dict(source.card["maths"].get(math, {}), time_scale=info, scale_shapes=shapes)
        per_math[math].pop("policies", None)
        family = seer_baseline(table, math, spec)
        per_math[math].update(seer_baseline_card(family))
        if family is not None:
            baselines[math] = family.predictor_
    card = {
        "gpu": spec.name, "pass": "fwd", "format_version": source.card.get("format_version"),
        "families": ["ours", "seer"] if baselines else ["ours"], "trees": source.card.get("trees"),
        "max_kernel_paths": source.card.get("max_kernel_paths"),
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "transferred_from": {"gpu": source.gpu, "trained_at": source.card.get("trained_at"),
                             "training_data": source.card.get("training_data")},
        "training_data": {"file": card_path(files.measurements), "sha256": data_digest(files.measurements),
                          "split": "train", "fitted": "time scales, PyTorch's own choice, intervals"},
        "features": source.card.get("features"), "training_ranges": source.card.get("training_ranges"),
        "maths": per_math, "versions": source.card.get("versions"),
    }
    return calibrate(train_policies(Model(spec.name, card, predictors, baselines), table), table)

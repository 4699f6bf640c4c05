"""Train a GPU's model set from its dataset: the tidy tables in, a :class:`seer.predict.model.Model` out.

Per math mode, seer's :class:`seer.training.estimators.AlgorithmSelector` and SEER's
:class:`seer.training.seer_baseline.SeerFamily` are fitted on the ``train`` split of
``data/<gpu>/measurements/`` (Test-set-I and Test-set-II stay unseen); seer's first
stage learns from the dataset's census table (``census/``, written by ``seer parse``)
where it holds answers of the pass trained. The models are then calibrated on half of Test-set-I
(:mod:`seer.training.calibrate`). The card records the data's SHA-256, the choices
cross-validation made, the calibration and the library versions.
"""

from __future__ import annotations

import platform
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, NamedTuple, Sequence

import numpy as np
import pandas as pd
import sklearn
from sklearn.base import clone

import seer
from seer.dataset.build import parsed_measurements, read_census
from seer.dataset.tables import digest
from seer.dataset.views import (POLICIES, algorithm_frames, algorithm_rows, recorded_like, training_frames,
                                values_by_algorithm)
from seer.errors import InputError
from seer.hardware.gpus import GPUSpec
from seer.layers.shapes import LAYER_COLUMNS, is_seer_layer, layer_kind_flags
from seer.predict.model import Model
from seer.predict.persist import FORMAT_VERSION, sha256
from seer.algorithms import PASSES
from seer.schema import MATH_MODE_NAMES, DatasetDir
from seer.training.answers import fit_answer_times
from seer.training.calibrate import calibrate
from seer.training.estimators import CANDIDATE_SETS, AlgorithmSelector
from seer.training.policies import fit_policies
from seer.training.seer_baseline import PROFILE_COLUMNS, SeerFamily

#: Measurement columns training reads.
TRAINING_COLUMNS = (*LAYER_COLUMNS, "shape_id", "math", "algo", "status", "time_ms", "workspace_bytes", "power_w", "split",
                    "profile_status", "trace_variant", *PROFILE_COLUMNS)
#: The column that names a run's kernel path: its traced main kernel's variant.
KERNEL_PATH_COLUMN = "trace_variant"
#: Called with (steps done, steps in all, what comes next).
Progress = Callable[[int, int, str], None]
class TrainingInputs(NamedTuple):
    """What :meth:`AlgorithmSelector.fit` takes for one math mode: shapes, times and
    workspaces of the split's runs (algorithms run on part of the layers included), the
    census as (shapes, workspaces) (None if empty), the runs' traced kernel paths (None
    without the column), which runs were recorded, and the average power of the runs with
    an energy reading (None without the column)."""

    shapes: pd.DataFrame
    times: pd.DataFrame
    workspaces: pd.DataFrame
    census: tuple[pd.DataFrame, pd.DataFrame] | None
    paths: pd.DataFrame | None
    recorded: pd.DataFrame
    power: pd.DataFrame | None

    def fit_arguments(self) -> dict:
        """The keyword arguments of :meth:`AlgorithmSelector.fit`."""
        return {"X": self.shapes, "Y": self.times, "W": self.workspaces, "census": self.census,
                "paths": self.paths, "recorded": self.recorded, "power": self.power}


def training_inputs(table: pd.DataFrame, census: pd.DataFrame, math: str, split: str = "train") -> TrainingInputs:
    """:class:`TrainingInputs` of one split and math mode."""
    rows = algorithm_rows(table, math, split)
    shapes, times = algorithm_frames(rows, pd.unique(rows["algo"]), "time_ms", partial=True)

    def like_times(value: str) -> pd.DataFrame:
        return values_by_algorithm(rows, value).reindex(index=times.index, columns=times.columns)

    asked = None
    if not census.empty:
        census_shapes, census_workspaces = training_frames(census, math, split=None, value="workspace_bytes")
        asked = (census_shapes, census_workspaces.reindex(columns=times.columns))
    paths = like_times(KERNEL_PATH_COLUMN) if KERNEL_PATH_COLUMN in table.columns else None
    power = like_times("power_w") if "power_w" in table.columns else None
    return TrainingInputs(shapes, times, like_times("workspace_bytes"), asked, paths, recorded_like(rows, times), power)


#: Per pass, how many kernel paths its time regressors may learn (``seer train --kernel-paths``)
#: by default. cuDNN's wgrad algorithms switch kernels inside one algorithm where the shape does
#: not show it (ALGO_0 runs a grouped direct kernel on some ungrouped 1x1 layers): there the
#: paths lowered the pick's out-of-fold regret on the H200's train split under strict FP32. For
#: dgrad they raised it, and on the H100's forward data they did not lower the held-out error,
#: so there they stay off (docs/backward.md has the figures).
DEFAULT_KERNEL_PATHS = {"fwd": 0, "bwd_data": 0, "bwd_filter": 3}


#: Training shapes of a layer kind above which a census without that kind does not teach the first stage.
MIN_UNCOVERED_SHAPES = 20


def kinds_the_census_lacks(census: pd.DataFrame, training: pd.DataFrame) -> list[str]:
    """The layer kinds (:data:`seer.layers.shapes.LAYER_KINDS`) of which the training runs hold at
    least :data:`MIN_UNCOVERED_SHAPES` shapes and the census none: a first stage learnt from that
    census guesses those kinds' support and workspace (the H200's census of square layers sent
    depthwise IMPLICIT_PRECOMP_GEMM down its workspace path, 18-30x too slow:
    benchmarks/results/h100-h200-pair-21998/)."""
    if census.empty or training.empty:
        return []

    def counts(frame: pd.DataFrame) -> pd.Series:
        return layer_kind_flags(frame.drop_duplicates("shape_id")).sum()

    trained, asked = counts(training), counts(census)
    return [kind for kind in trained.index if trained[kind] >= MIN_UNCOVERED_SHAPES and asked[kind] == 0]


def train(dataset_dir: Path, spec: GPUSpec, maths: Sequence[str] = MATH_MODE_NAMES,
          selector: AlgorithmSelector | None = None, progress: Progress | None = None, use_census: bool | None = None,
          trees: str = "compact", kernel_paths: int | None = None, pass_: str = "fwd") -> Model:
    """Fit one selector and one SEER model per math mode on the dataset's train split, for
    the algorithms of one pass (:data:`seer.algorithms.PASSES`).

    seer's first stage learns from the dataset's census table where there is one (and
    ``use_census``), else from the training runs' own answers. ``trees`` names the time
    regressors' candidate set (:data:`seer.training.estimators.CANDIDATE_SETS`) and
    ``kernel_paths`` its ``max_kernel_paths``, both of the default selector; a given
    ``selector`` keeps its own. The first stage learns from the census's answers of
    ``pass_`` (``seer collect --census --algo backward`` asks the backward passes'), where
    it has any. ``use_census`` None: the census for the forward (unless it lacks a layer kind
    the training runs hold: :func:`kinds_the_census_lacks`), the training runs for a
    backward pass (on the H200, backward models whose first stage learnt from the census
    admitted algorithms whose times they had never learnt, and picked some up to 1,000x slower
    than the fastest: docs/backward.md). ``kernel_paths`` None: the pass's
    :data:`DEFAULT_KERNEL_PATHS`. SEER's model is the forward's: a backward pass's model has no
    baseline.
    """
    chosen_by_default = use_census is None
    if use_census is None:
        use_census = pass_ == "fwd"
    if pass_ not in PASSES:
        raise InputError(f"unknown pass {pass_!r}; choose one of: {', '.join(PASSES)}", field="pass")
    if trees not in CANDIDATE_SETS:
        raise InputError(f"unknown tree set {trees!r}; choose one of: {', '.join(CANDIDATE_SETS)}")
    if kernel_paths is None:
        kernel_paths = DEFAULT_KERNEL_PATHS[pass_]
    if kernel_paths < 0:
        raise InputError(f"kernel paths must be 0 or more, got {kernel_paths}")
    files = DatasetDir(dataset_dir)
    measurements = files.measurements
    table = parsed_measurements(files, spec.name, TRAINING_COLUMNS, passes=(pass_,))
    census_path = files.census
    # The census answers of this pass only: its algorithms are the time models' columns.
    census = (read_census(census_path, passes=(pass_,)) if use_census and census_path.exists()
              else pd.DataFrame())
    uncovered = kinds_the_census_lacks(census, table[table["split"] == "train"]) if chosen_by_default else []
    if uncovered:  # its first stage would guess those kinds' support and workspace: learn them from the runs
        census = pd.DataFrame()
    first_stage_note = (f"the census holds no {', '.join(uncovered)} layer, which the training runs hold"
                        if uncovered else None)
    template = selector if selector is not None else AlgorithmSelector(candidates=CANDIDATE_SETS[trees](),
                                                                       max_kernel_paths=kernel_paths)
    predictors, baselines, per_math = {}, {}, {}
    n_algos = table.loc[~table["algo"].isin(POLICIES), "algo"].nunique()
    per_math_steps = 2 * n_algos + 2  # first stage and time per algorithm, the pick, SEER's model (or none)
    total = per_math_steps * len(maths)
    for index, math in enumerate(maths):
        inputs = training_inputs(table, census, math)
        shapes, asked, recorded, power = inputs.shapes, inputs.census, inputs.recorded, inputs.power
        if shapes.empty:
            raise InputError(f"no {math}-math rows in the train split", path=measurements)
        offset = index * per_math_steps

        def step(done: int, steps: int, text: str, offset=offset, math=math) -> None:
            if progress and done < steps:
                progress(offset + done, total, f"{math} math, {text}")

        fitted = clone(template).set_params(gpu=spec).fit(**inputs.fit_arguments(), progress=step)
        predictors[math] = fitted.predictor_
        step(per_math_steps - 1, per_math_steps, "SEER's model")  # the selector took the steps before
        family = seer_baseline(table, math, spec) if pass_ == "fwd" else None
        if family is not None:
            baselines[math] = family.predictor_
        per_math[math] = {"shapes": len(shapes), "algorithms": fitted.algorithms_,
                          "support": {a: s if isinstance(s, str) else "classifier" for a, s in fitted.supports_.items()},
                          "first_stage": ("census" if asked else "training runs (out of fold)"),
                          **({"first_stage_note": first_stage_note} if first_stage_note else {}),
                          "census_shapes": len(asked[0]) if asked else 0,
                          "regressor": fitted.choice_, "cv_mape_percent": fitted.cv_mape_,
                          "kernel_paths": {a: [str(c) for c in k.classes_]
                                           for a, k in fitted.kernel_path_classifiers_.items()},
                          "recorded_shapes": {a: int(n) for a, n in recorded.sum().items() if n < len(recorded)},
                          "power_models": {a: {"runs": int(power[a].notna().sum()), "cv_mape_percent": m}
                                           for a, m in fitted.power_cv_mape_.items()},
                          "pick_shapes": int(recorded.all(axis=1).sum()),
                          "pick_weight": fitted.pick_weight_,
                          "pick_cv_regret_percent": {str(w): r for w, r in fitted.pick_cv_regret_.items()},
                          **(seer_baseline_card(family) if pass_ == "fwd" else {"seer_baseline_algorithms": []})}
    if progress:
        progress(total, total, "done")

    first = next(iter(predictors.values()))
    card = {
        "gpu": spec.name, "pass": pass_, "format_version": FORMAT_VERSION,
        "families": ["ours", "seer"] if baselines else ["ours"],
        "trees": trees if selector is None else "given",
        "max_kernel_paths": template.max_kernel_paths,
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "training_data": {"file": card_path(measurements), "sha256": data_digest(measurements), "split": "train",
                          **({"census": card_path(census_path), "census_sha256": data_digest(census_path)}
                             if not census.empty else {})},
        "features": first.features,
        "training_ranges": first.training_ranges,
        "maths": per_math,
        "versions": {"seer": seer.__version__, "scikit-learn": sklearn.__version__, "numpy": np.__version__,
                     "pandas": pd.__version__, "python": platform.python_version()},
    }
    model = Model(spec.name, card, predictors, baselines)
    if pass_ == "fwd":  # cuDNN's answers are asked of the forward's algorithms
        model = train_answer_times(model, table, dataset_dir, template.candidates)
    return calibrate(train_policies(model, table), table)


def train_answer_times(model: Model, table: pd.DataFrame, dataset_dir: Path, candidates: dict | None = None) -> Model:
    """``model`` with each math mode's times from cuDNN's own answers fitted anew on the train
    split of ``table`` (:func:`seer.training.answers.fit_answer_times`), each regressor the
    candidate (of ``candidates``, default the compact set) the shape-only model chose for
    its algorithm and path, as it is or with finer trees, reading the transform features or
    not, as a validation split chooses, and each algorithm's kernel-variant mixture where the
    train runs' traces have variants and a validation split keeps it. The card's
    ``cudnn_answers`` says from what and with which."""
    answer_times, maths = {}, {}
    for math, predictor in model.predictors.items():
        inputs = training_inputs(table, pd.DataFrame(), math)
        choice = model.card.get("maths", {}).get(math, {}).get("regressor", {})
        answer_times[math], chosen, variants, designs = fit_answer_times(
            predictor, inputs.shapes, inputs.times, inputs.workspaces, choice, candidates, variants=inputs.paths)
        maths[math] = {"shapes": len(inputs.shapes), "regressor": chosen, "designs": designs, "variants": variants}
    measurements = DatasetDir(dataset_dir).measurements
    card = dict(model.card) | {"cudnn_answers": {
        "inputs": "shape features; per cuDNN algorithm log2(1 + workspace bytes), -1 where cuDNN refuses it",
        "designs": "per algorithm, the regressors' trees (the chosen candidate, or four times finer) and whether they "
                   "also read the transform features, chosen on a validation split of the train layers",
        "variants": f"{KERNEL_PATH_COLUMN} of the traced train runs; per algorithm, a mixture kept where it lowers "
                    "the MAPE on a validation split of the train layers",
        "training_data": {"file": card_path(measurements), "sha256": data_digest(measurements), "split": "train"},
        "maths": maths}}  # no date of its own: a refit on unchanged data changes no file
    return replace(model, card=card, answer_times=answer_times)


def seer_baseline(table: pd.DataFrame, math: str, spec: GPUSpec) -> SeerFamily | None:
    """SEER's model fitted on the train split's square 2D layers of ``math`` (SEER's inputs exist
    for those only), or None where no run of them was profiled under ncu: all but the FFTs
    learn from profiles, and without them it would be an FFT-only model, not SEER's."""
    rows = table[(table["split"] == "train") & (table["math"] == math)]
    rows = rows[is_seer_layer(rows)]
    if not (rows["profile_status"] == "ok").any():
        return None
    return SeerFamily(gpu=spec).fit(rows)


def seer_baseline_card(family: SeerFamily | None) -> dict:
    """What a forward model's card says of SEER's baseline for one math mode."""
    if family is None:
        return {"seer_baseline_algorithms": [], "seer_baseline": "not fitted: no training run was profiled under ncu"}
    return {"seer_baseline_algorithms": family.algorithms_}


def train_policies(model: Model, table: pd.DataFrame) -> Model:
    """``model`` with each math mode's model of PyTorch's own choice fitted anew on the train
    split of ``table`` (:func:`seer.training.policies.fit_policies`); the algorithms' models
    stay as they are. The card says, per math mode, on how many layers and how well."""
    predictors, maths = dict(model.predictors), {m: dict(info) for m, info in model.card.get("maths", {}).items()}
    for math, predictor in model.predictors.items():
        predictors[math], info = fit_policies(predictor, table, math)
        maths.setdefault(math, {})["policies"] = info
    return replace(model, predictors=predictors, card=dict(model.card) | {"maths": maths})


def data_digest(path: Path) -> str:
    """A table folder's digest over its parts, or a file's SHA-256."""
    return digest(path) if path.is_dir() else sha256(path)


def card_path(path: Path) -> str:
    """A path as the card records it: relative to the working directory where it lies below it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)

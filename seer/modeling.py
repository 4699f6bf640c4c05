"""Train per-algorithm models from a dataset, and save and load them safely.

A model set is, per math mode, one :class:`seer.estimators.AlgorithmSelector` (seer's own
model) and one :class:`seer.seer_baseline.SeerFamily` (SEER's model, the baseline), fitted
on the ``train`` split of ``data/<gpu>/measurements.csv.gz`` (Test-set-I and Test-set-II
stay unseen); seer's first stage learns from the dataset's census where it has one. Each
(family, math mode) is saved in its own skops file, whose loader builds objects only from an
allow-list of types, so loading a file cannot run code; a JSON card beside them records the
features, the training data's SHA-256, library versions, the choices cross-validation made
and each file's SHA-256, which a load checks first (a tampered file is refused).
"""

from __future__ import annotations

import hashlib
import json
import platform
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Sequence

import numpy as np
import pandas as pd

import seer
from seer import persist
from seer.collect.store import RunStore
from seer.dataset import census_table
from seer.errors import InputError
from seer.gpus import get_gpu_spec
from seer.estimators import CANDIDATE_SETS, AlgorithmSelector
from seer.seer_baseline import SeerFamily
from seer.shapes import SEER_FIELDS

MODEL_SUFFIX = ".skops"
CARD_FILE = "model.json"
#: Model families: seer's own and SEER's (the baseline).
FAMILIES = ("ours", "seer")
#: Types a model file may contain besides scikit-learn's and NumPy's own.
SEER_TYPES = ("seer.estimators.AlgorithmSelector", "seer.estimators.WorkspaceModel", "seer.features.ShapeFeatures",
              "seer.persist.PackedTrees",
              "seer.seer_baseline.SeerFamily", "seer.seer_baseline.SeerAlgorithmModel")
_TRUSTED_PREFIXES = ("sklearn.", "numpy.")
#: scikit-learn types in seer's models that skops does not trust by default.
_KNOWN_SKLEARN_TYPES = ("sklearn.ensemble._hist_gradient_boosting.predictor.TreePredictor",
                        "sklearn.tree._tree.Tree")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def training_frames(table: pd.DataFrame, math: str, split: str | None = "train",
                    value: str = "time_ms") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Shapes (SEER's eight columns, indexed by shape_id) and one column per algorithm of
    ``value`` (the time, or ``workspace_bytes``), NaN where the run did not succeed, of one
    split (None: every split; a census table has none) and math mode."""
    rows = table[table["math"] == math]
    if split is not None:
        rows = rows[rows["split"] == split]
    values = rows.assign(**{value: rows[value].where(rows["status"] == "ok").astype(float)}).pivot(
        index="shape_id", columns="algo", values=value)
    algos = [a for a in pd.unique(table["algo"]) if a in values.columns]
    shapes = rows.drop_duplicates("shape_id").set_index("shape_id").loc[values.index, list(SEER_FIELDS)]
    return shapes, values[algos]


def training_inputs(table: pd.DataFrame, census: pd.DataFrame, math: str, split: str = "train"):
    """What :meth:`AlgorithmSelector.fit` takes for one math mode: shapes, times and
    workspaces of the split's runs, and the census as (shapes, workspaces), None if empty."""
    shapes, times = training_frames(table, math, split)
    workspaces = training_frames(table, math, split, value="workspace_bytes")[1].reindex(
        index=times.index, columns=times.columns)
    asked = None
    if not census.empty:
        census_shapes, census_workspaces = training_frames(census, math, split=None, value="workspace_bytes")
        asked = (census_shapes, census_workspaces.reindex(columns=times.columns))
    return shapes, times, workspaces, asked


@dataclass
class ModelSet:
    """Fitted models per math mode (seer's own and SEER's), with their card."""

    selectors: dict[str, AlgorithmSelector]
    card: dict
    baselines: dict[str, SeerFamily] = field(default_factory=dict)

    @property
    def gpu(self) -> str:
        return self.card["gpu"]


def train(dataset_dir: Path, gpu: str, maths=("fma", "default"), selector: AlgorithmSelector | None = None,
          progress=None, use_census: bool = True, trees: str = "compact") -> ModelSet:
    """Fit one selector per math mode on the dataset's train split; its first stage on the
    dataset's census where there is one (``use_census``), else on the training runs.

    ``trees`` names the time regressors' candidate set (:data:`seer.estimators.CANDIDATE_SETS`)
    of the default selector; a given ``selector`` keeps its own candidates."""
    if trees not in CANDIDATE_SETS:
        raise InputError(f"unknown tree set {trees!r}; choose one of: {', '.join(CANDIDATE_SETS)}")
    measurements = dataset_dir / "measurements.csv.gz"
    if not measurements.exists():
        raise InputError(f"no dataset; run `seer parse --gpu {gpu}` first", path=measurements)
    table = pd.read_csv(measurements, low_memory=False)
    census = census_table(RunStore(dataset_dir)) if use_census else pd.DataFrame()
    template = (selector if selector is not None
                else AlgorithmSelector(gpu=gpu, candidates=CANDIDATE_SETS[trees]()))
    selectors, baselines, per_math = {}, {}, {}
    for math in maths:
        shapes, times, workspaces, asked = training_inputs(table, census, math)
        if shapes.empty:
            raise InputError(f"no {math}-math rows in the train split", path=measurements)
        if progress:
            progress(f"fitting {math} math: {len(shapes)} shapes x {times.shape[1]} algorithms"
                     + (f", first stage on a census of {len(asked[0])} shapes" if asked else ""))
        fitted = _clone_with_gpu(template, gpu).fit(shapes, times, workspaces, asked)
        selectors[math] = fitted
        if progress:
            progress(f"fitting SEER's model, {math} math")
        rows = table[(table["split"] == "train") & (table["math"] == math)]
        baselines[math] = SeerFamily(sm_count=get_gpu_spec(gpu).sm_count).fit(rows)
        per_math[math] = {"shapes": len(shapes), "algorithms": fitted.algorithms_,
                          "support": {a: s if isinstance(s, str) else "classifier" for a, s in fitted.supports_.items()},
                          "first_stage": ("census" if asked else "training runs (out of fold)"),
                          "census_shapes": len(asked[0]) if asked else 0,
                          "regressor": fitted.choice_, "cv_mape_percent": fitted.cv_mape_,
                          "pick_weight": fitted.pick_weight_, "pick_cv_regret_percent": fitted.pick_cv_regret_,
                          "seer_baseline_algorithms": baselines[math].algorithms_}
    import sklearn
    import skops

    card = {
        "gpu": gpu, "families": ["ours", "seer"], "trees": trees if selector is None else "given",
        "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "training_data": {"file": str(measurements), "sha256": sha256(measurements), "split": "train",
                          **({"census": str(RunStore(dataset_dir).raw_dir / "census.jsonl.gz"),
                              "census_sha256": _census_digest(census)} if not census.empty else {})},
        "features": list(next(iter(selectors.values())).features_.get_feature_names_out()),
        "training_ranges": next(iter(selectors.values())).training_ranges_,
        "maths": per_math,
        "versions": {"seer": seer.__version__, "scikit-learn": sklearn.__version__, "skops": skops.__version__,
                     "numpy": np.__version__, "pandas": pd.__version__, "python": platform.python_version()},
    }
    return ModelSet(selectors, card, baselines)


def _census_digest(census: pd.DataFrame) -> str:
    """SHA-256 of the census answers a model learned from (the raw files may be split or packed)."""
    return hashlib.sha256(pd.util.hash_pandas_object(census, index=False).to_numpy().tobytes()).hexdigest()


def _clone_with_gpu(template: AlgorithmSelector, gpu: str) -> AlgorithmSelector:
    from sklearn.base import clone

    return clone(template).set_params(gpu=gpu)


def model_file(family: str, math: str) -> str:
    """Name of the file holding one family's model of one math mode."""
    return f"{family}-{math}{MODEL_SUFFIX}"


def save(models: ModelSet, directory: Path) -> list[Path]:
    """Write one file per (family, math mode) and the card into ``directory``; returns the files.

    One file per part, so that ``seer predict`` loads only the model it uses; the boosted
    trees are stored packed (:mod:`seer.persist`), a few arrays per ensemble.
    """
    import skops.io as sio

    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f"*{MODEL_SUFFIX}"):
        stale.unlink()
    files = {}
    for family, parts in (("ours", models.selectors), ("seer", models.baselines)):
        for math, model in parts.items():
            path = directory / model_file(family, math)
            swapped = persist.pack(model)
            try:
                sio.dump(model, path, compression=zipfile.ZIP_DEFLATED, compresslevel=9)
            finally:
                persist.restore(swapped)
            files[path.name] = sha256(path)
    card = dict(models.card) | {"model_files": files}
    (directory / CARD_FILE).write_text(json.dumps(card, indent=2, default=_json_default) + "\n")
    return [directory / name for name in files]


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to a model card")


def untrusted(types: list[str]) -> list[str]:
    """Types in a model file that are neither seer's estimators nor from a trusted library."""
    return [t for t in types if t not in SEER_TYPES and not t.startswith(_TRUSTED_PREFIXES)]


def read_card(directory: Path) -> dict:
    """The model card of a model directory (InputError if missing or unreadable)."""
    card_path = directory / CARD_FILE
    if not card_path.exists():
        raise InputError("no trained model here; train one with `seer train --gpu GPU`", path=card_path)
    try:
        card = json.loads(card_path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"model card is not valid JSON ({exc.msg})", path=card_path, line=exc.lineno) from None
    if not isinstance(card.get("model_files"), dict):
        raise InputError("model card lists no model files (written by an older seer?); retrain with "
                         "`seer train --gpu GPU`", path=card_path)
    return card


def load(directory: Path, maths: Sequence[str] | None = None, families: Sequence[str] = FAMILIES) -> ModelSet:
    """Load a saved model set (only ``maths`` and ``families`` if given), refusing any file
    whose hash differs from its card's or that holds types seer does not trust."""
    card = read_card(directory)
    maths = list(card.get("maths", {})) if maths is None else list(maths)
    parts: dict[str, dict] = {family: {} for family in FAMILIES}
    for family in families:
        for math in maths:
            name = model_file(family, math)
            if name in card["model_files"]:
                parts[family][math] = _load_part(directory / name, card["model_files"][name])
    if not parts["ours"]:
        raise InputError(f"no model for {', '.join(maths)} math here (the card lists: "
                         f"{', '.join(card['model_files'])})", path=directory / CARD_FILE)
    return ModelSet(parts["ours"], card, parts["seer"])


def _load_part(path: Path, expected_sha256: str):
    import skops.io as sio

    if not path.exists():
        raise InputError("model file listed in the card is missing; retrain with `seer train --gpu GPU`", path=path)
    if sha256(path) != expected_sha256:
        raise InputError("model file does not match the SHA-256 in its card: refusing to load a file "
                         "that changed after training", path=path)
    try:
        # Fast path: the types seer's own models hold. Anything else is checked by name.
        return persist.unpack(sio.load(path, trusted=[*SEER_TYPES, *_KNOWN_SKLEARN_TYPES]))
    except Exception:
        try:
            types = sio.get_untrusted_types(file=path)
        except Exception as exc:  # not a skops file at all
            raise InputError(f"not a readable model file ({exc})", path=path) from None
        bad = untrusted(types)
        if bad:
            raise InputError(f"model file contains types seer does not trust: {', '.join(bad)}", path=path) from None
        return persist.unpack(sio.load(path, trusted=types))


def models_root() -> Path:
    """``models/`` of the checkout seer runs from."""
    return Path(seer.__file__).resolve().parents[1] / "models"


def available(root: Path | None = None) -> list[str]:
    """GPU names that have a trained model under ``root``."""
    root = root or models_root()
    return sorted(p.parent.name for p in root.glob(f"*/{CARD_FILE}"))


def resolve_gpu(gpu: str | None, root: Path | None = None) -> str:
    """The model's GPU: the one asked for, or the only one there is."""
    names = available(root)
    if gpu is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise InputError("no trained models; train one with `seer train --gpu GPU`", path=root or models_root())
        raise InputError(f"several trained models ({', '.join(names)}): choose one with --gpu")
    if gpu not in names:
        raise InputError(f"no trained model for GPU {gpu!r}; trained models exist for: "
                         f"{', '.join(names) or 'none'} (train one with `seer train --gpu {gpu}`)")
    return gpu

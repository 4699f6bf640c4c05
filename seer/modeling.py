"""Train per-algorithm models from a dataset, and save and load them safely.

A model set is, per math mode, one :class:`seer.estimators.AlgorithmSelector` (seer's own
model) and one :class:`seer.seer_baseline.SeerFamily` (SEER's model, the baseline), fitted
on the ``train`` split of ``data/<gpu>/measurements.csv.gz`` (Test-set-I and Test-set-II
stay unseen). It is saved with skops, whose loader builds objects only from an allow-list of
types, so loading a file cannot run code; a JSON card beside it records the features, the
training data's SHA-256, library versions, the choices cross-validation made and the
file's own SHA-256, which a load checks first (a tampered file is refused).
"""

from __future__ import annotations

import hashlib
import json
import platform
import zipfile
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pandas as pd

import seer
from seer.errors import InputError
from seer.gpus import get_gpu_spec
from seer.estimators import AlgorithmSelector
from seer.seer_baseline import SeerFamily
from seer.shapes import SEER_FIELDS

MODEL_FILE = "model.skops"
CARD_FILE = "model.json"
#: Types a model file may contain besides scikit-learn's and NumPy's own.
SEER_TYPES = ("seer.estimators.AlgorithmSelector", "seer.features.ShapeFeatures",
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


def training_frames(table: pd.DataFrame, math: str, split: str | None = "train") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Shapes (SEER's eight columns, indexed by shape_id) and times (one column per algorithm,
    NaN where the run did not succeed) of one split (None: every split) and math mode."""
    rows = table[(table["math"] == math) & ((table["split"] == split) if split is not None else True)]
    times = rows.assign(time_ms=rows["time_ms"].where(rows["status"] == "ok")).pivot(
        index="shape_id", columns="algo", values="time_ms")
    algos = [a for a in pd.unique(table["algo"]) if a in times.columns]
    shapes = rows.drop_duplicates("shape_id").set_index("shape_id").loc[times.index, list(SEER_FIELDS)]
    return shapes, times[algos]


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
          progress=None) -> ModelSet:
    """Fit one selector per math mode on the dataset's train split."""
    measurements = dataset_dir / "measurements.csv.gz"
    if not measurements.exists():
        raise InputError(f"no dataset; run `seer parse --gpu {gpu}` first", path=measurements)
    table = pd.read_csv(measurements, low_memory=False)
    template = selector if selector is not None else AlgorithmSelector(gpu=gpu)
    selectors, baselines, per_math = {}, {}, {}
    for math in maths:
        shapes, times = training_frames(table, math)
        if shapes.empty:
            raise InputError(f"no {math}-math rows in the train split", path=measurements)
        if progress:
            progress(f"fitting {math} math: {len(shapes)} shapes x {times.shape[1]} algorithms")
        fitted = _clone_with_gpu(template, gpu).fit(shapes, times)
        selectors[math] = fitted
        if progress:
            progress(f"fitting SEER's model, {math} math")
        rows = table[(table["split"] == "train") & (table["math"] == math)]
        baselines[math] = SeerFamily(sm_count=get_gpu_spec(gpu).sm_count).fit(rows)
        per_math[math] = {"shapes": len(shapes), "algorithms": fitted.algorithms_,
                          "support": {a: s if isinstance(s, str) else "classifier" for a, s in fitted.supports_.items()},
                          "regressor": fitted.choice_, "cv_mape_percent": fitted.cv_mape_,
                          "pick_weight": fitted.pick_weight_, "pick_cv_regret_percent": fitted.pick_cv_regret_,
                          "seer_baseline_algorithms": baselines[math].algorithms_}
    import sklearn
    import skops

    card = {
        "gpu": gpu, "families": ["ours", "seer"], "trained_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "training_data": {"file": str(measurements), "sha256": sha256(measurements), "split": "train"},
        "features": list(next(iter(selectors.values())).features_.get_feature_names_out()),
        "training_ranges": next(iter(selectors.values())).training_ranges_,
        "maths": per_math,
        "versions": {"seer": seer.__version__, "scikit-learn": sklearn.__version__, "skops": skops.__version__,
                     "numpy": np.__version__, "pandas": pd.__version__, "python": platform.python_version()},
    }
    return ModelSet(selectors, card, baselines)


def _clone_with_gpu(template: AlgorithmSelector, gpu: str) -> AlgorithmSelector:
    from sklearn.base import clone

    return clone(template).set_params(gpu=gpu)


def save(models: ModelSet, directory: Path) -> Path:
    """Write the model file and its card into ``directory``; returns the model path."""
    import skops.io as sio

    directory.mkdir(parents=True, exist_ok=True)
    path = directory / MODEL_FILE
    sio.dump({"ours": models.selectors, "seer": models.baselines}, path,
             compression=zipfile.ZIP_DEFLATED, compresslevel=9)
    card = dict(models.card) | {"model_file": MODEL_FILE, "model_sha256": sha256(path)}
    (directory / CARD_FILE).write_text(json.dumps(card, indent=2, default=_json_default) + "\n")
    return path


def _json_default(value):
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} to a model card")


def untrusted(types: list[str]) -> list[str]:
    """Types in a model file that are neither seer's estimators nor from a trusted library."""
    return [t for t in types if t not in SEER_TYPES and not t.startswith(_TRUSTED_PREFIXES)]


def load(directory: Path) -> ModelSet:
    """Load a saved model set, refusing a file whose hash or content types are not expected."""
    import skops.io as sio

    card_path, path = directory / CARD_FILE, directory / MODEL_FILE
    for needed in (card_path, path):
        if not needed.exists():
            raise InputError("no trained model here; train one with `seer train --gpu GPU`", path=needed)
    try:
        card = json.loads(card_path.read_text())
    except json.JSONDecodeError as exc:
        raise InputError(f"model card is not valid JSON ({exc.msg})", path=card_path, line=exc.lineno) from None
    if card.get("model_sha256") != sha256(path):
        raise InputError("model file does not match the SHA-256 in its card: refusing to load a file "
                         "that changed after training", path=path)
    try:
        # Fast path: the types seer's own models hold. Anything else is checked by name.
        content = sio.load(path, trusted=[*SEER_TYPES, *_KNOWN_SKLEARN_TYPES])
    except Exception:
        try:
            types = sio.get_untrusted_types(file=path)
        except Exception as exc:  # not a skops file at all
            raise InputError(f"not a readable model file ({exc})", path=path) from None
        bad = untrusted(types)
        if bad:
            raise InputError(f"model file contains types seer does not trust: {', '.join(bad)}", path=path) from None
        content = sio.load(path, trusted=types)
    if not isinstance(content, dict) or not isinstance(content.get("ours"), dict):
        raise InputError("not a seer model file (no 'ours' models in it)", path=path)
    return ModelSet(content["ours"], card, content.get("seer") or {})


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

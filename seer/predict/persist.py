"""Model files: their format, their card, and where seer finds them.

A model set for one GPU is a directory: ``model.json`` (the card: what the models were
trained on, how, and the SHA-256 of each file) and one file per (family, math mode),
``ours-fma.zip`` and so on. A model file is a zip archive of plain data:

``model.json``
    ``{"format": "seer-model", "version": 1, "root": ...}``, where ``root`` is the model's
    state: JSON values, ``{"$array": "arrays/<n>.npy"}`` for an array, and
    ``{"$type": NAME, "state": {...}}`` for a part of a model, NAME one of the exact class
    names of :mod:`seer.predict.predictors` (:data:`TRUSTED_TYPES`);
``arrays/<n>.npy``
    numeric and boolean arrays in NumPy's format, read with ``allow_pickle=False``.

Loading parses JSON and reads arrays; the only objects it builds are seer's own
predictors, each of which checks its state (shapes, dtypes, tree structure) before it is
used. No name in a file can reach any other type or any function, so loading a file never
runs code, and a damaged or hand-made file is refused in one sentence. The card's SHA-256
catches files that changed after training.

Where models are found (:func:`models_root`): ``models_dir`` when given (``--models-dir``),
else the directory named by the environment variable ``SEER_MODELS_DIR``, else the shipped
models (:func:`shipped_models`), which is also where ``seer train`` writes by default.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import re
import stat
import tokenize
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from seer.algorithms import PASSES
from seer.errors import InputError, one_line
from seer.layers.shapes import ConvShape
from seer.predict.model import Model
from seer.predict.sparse import SPARSE_FILE, load_sparse_model
from seer.predict.predictors import AlgorithmPredictor, AnswerTimePredictor, Part, SeerFamilyPredictor, StateError
from seer.predict.trees import TreeError, thread_count

CARD_FILE = "model.json"
MODEL_SUFFIX = ".zip"
FORMAT, FORMAT_VERSION = "seer-model", 2
#: Model families: seer's own, SEER's (the baseline) and seer's times from cuDNN's own answers
#: (read only where a GPU gives them), and the predictor class of each.
FAMILIES: dict[str, type] = {"ours": AlgorithmPredictor, "seer": SeerFamilyPredictor, "answers": AnswerTimePredictor}
#: Every class a model file may name, by exact name.
TRUSTED_TYPES: dict[str, type] = dict(Part.registry)
#: Environment variable that names the models directory.
MODELS_ENV = "SEER_MODELS_DIR"
#: Array dtypes a model file may hold: booleans, integers, floats.
_ARRAY_KINDS = "biuf"
#: Bounds on what a model file may unpack to, checked before anything is unpacked: the
#: shipped files hold at most 535 members, 16 MB in all, and a model.json of 31 KB.
_MAX_MEMBERS, _MAX_BYTES, _MAX_JSON_BYTES = 20_000, 2**28, 2**22
#: The layer every loaded model set predicts once, to show that its parts fit together.
_PROBE_LAYER = ConvShape.square(1, 64, 56, 64, 3, 1, 1)
#: The largest model file and card read at all (the shipped ones: 5.5 MB and 23 KB).
_MAX_FILE_BYTES, _MAX_CARD_BYTES = 2**30, 2**24


def _regular_file(path: Path, limit: int, what: str) -> None:
    """InputError unless ``path`` (through any symbolic link) is a regular file of at most
    ``limit`` bytes: a FIFO would hang the read, a device (``/dev/zero``) never end it."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return  # the caller says what is missing
    except OSError as exc:
        raise InputError(f"{what} cannot be read ({exc.strerror or exc})", path=path) from None
    if stat.S_ISDIR(st.st_mode):
        raise InputError(f"is a directory, not a {what}", path=path)
    if not stat.S_ISREG(st.st_mode):
        raise InputError(f"is not a regular file (a device, FIFO or socket), not a {what}", path=path)
    if st.st_size > limit:
        raise InputError(f"{what} of {st.st_size:,} bytes, more than a {what} may hold ({limit:,})", path=path)


def _no_constant(name: str):
    """``json.loads``' ``parse_constant``: NaN and Infinity have no place in a model."""
    raise StateError(f"holds {name}, which no value of a seer model may be")


def _bounded_int(text: str) -> int:
    """``json.loads``' ``parse_int``: no integer of a model needs more than 20 digits."""
    if len(text.lstrip("-")) > 20:
        raise StateError(f"holds an integer of {len(text.lstrip('-'))} digits")
    return int(text)
_MEMBER_NAME = re.compile(r"^arrays/[0-9]+\.npy$")
#: The header NumPy's ``np.save`` writes for a C-ordered array (format 1.0), read by this
#: pattern alone: numpy's reader parses a header as a Python literal, the slowest step of
#: loading hundreds of arrays. A header of any other form takes numpy's reader.
_NPY_HEADER = re.compile(rb"\{'descr': '([<>|][biuf][0-9]{1,2})', 'fortran_order': False, "
                         rb"'shape': \(((?:[0-9]{1,19}, )*(?:[0-9]{1,19},?)?)\), \} *\n")
_NPY_MAGIC = b"\x93NUMPY\x01\x00"
_MODEL_FILE_NAME = re.compile(rf"^({'|'.join(FAMILIES)})-[a-z0-9_]+{re.escape(MODEL_SUFFIX)}$")
_GPU_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_file(family: str, math: str) -> str:
    """Name of the file holding one family's model of one math mode."""
    return f"{family}-{math}{MODEL_SUFFIX}"


# -- writing ------------------------------------------------------------------------------
def _encode(value: Any, arrays: list[np.ndarray]) -> Any:
    if isinstance(value, Part):
        name = type(value).__name__
        if TRUSTED_TYPES.get(name) is not type(value):
            raise TypeError(f"{name} is not a registered model part")
        return {"$type": name, "state": _encode(value.state(), arrays)}
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in _ARRAY_KINDS:
            raise TypeError(f"arrays of {value.dtype} cannot be stored")
        arrays.append(value)
        return {"$array": f"arrays/{len(arrays) - 1}.npy"}
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("model state keys must be strings")
        return {k: _encode(v, arrays) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_encode(v, arrays) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise TypeError(f"cannot store {type(value).__name__} in a model file")


def write_model_file(part: Part, path: Path) -> None:
    """Write one predictor to ``path`` (through a temporary file: never half-written)."""
    arrays: list[np.ndarray] = []
    document = {"format": FORMAT, "version": FORMAT_VERSION, "root": _encode(part, arrays)}
    text = json.dumps(document, allow_nan=False, separators=(",", ":"))
    tmp = path.with_name(f".{path.name}.tmp")
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        archive.writestr(zipfile.ZipInfo("model.json", date_time=(1980, 1, 1, 0, 0, 0)), text,
                         compress_type=zipfile.ZIP_DEFLATED)
        for i, array in enumerate(arrays):
            buffer = io.BytesIO()
            np.save(buffer, np.ascontiguousarray(array), allow_pickle=False)
            # A fixed timestamp: the same model gives the same bytes.
            archive.writestr(zipfile.ZipInfo(f"arrays/{i}.npy", date_time=(1980, 1, 1, 0, 0, 0)), buffer.getvalue(),
                             compress_type=zipfile.ZIP_DEFLATED)
    os.replace(tmp, path)


def save(model: Model, directory: Path) -> list[Path]:
    """Write one file per (family, math mode) and the card into ``directory``; returns the files.

    One file per part, so that ``seer predict`` reads only the model it uses.
    """
    directory.mkdir(parents=True, exist_ok=True)
    for stale in directory.glob(f"*{MODEL_SUFFIX}"):
        stale.unlink()
    files = {}
    for family, parts in (("ours", model.predictors), ("seer", model.baselines), ("answers", model.answer_times)):
        for math, part in parts.items():
            path = directory / model_file(family, math)
            write_model_file(part, path)
            files[path.name] = sha256(path)
    # A figure that is not a number (a score with nothing to score) is stored as null: the
    # reader refuses NaN and Infinity anywhere in a card.
    card = json.loads(json.dumps(dict(model.card) | {"model_files": files}, default=_json_default),
                      parse_constant=lambda name: None)
    # Training again on the same data gives the same model files (every estimator is seeded and
    # the files carry no time); the card then keeps the date of the training that first gave
    # them, so that a retrain that changed nothing changes no file.
    try:
        earlier = json.loads((directory / CARD_FILE).read_text())
    except (OSError, ValueError):
        earlier = None
    def undated(c: dict) -> dict:
        return {k: v for k, v in c.items() if k != "trained_at"}

    if isinstance(earlier, dict) and "trained_at" in earlier and undated(earlier) == undated(card):
        card["trained_at"] = earlier["trained_at"]
    tmp = directory / f".{CARD_FILE}.tmp"
    tmp.write_text(json.dumps(card, indent=2) + "\n")
    os.replace(tmp, directory / CARD_FILE)
    return [directory / name for name in files]


def _json_default(value):
    if isinstance(value, np.ndarray):
        return value.tolist()
    if hasattr(value, "item"):
        return value.item()
    raise TypeError(f"cannot write {type(value).__name__} to a model card")


# -- reading ------------------------------------------------------------------------------
class _Decoder:
    """Rebuilds a model's state from a model file's JSON and arrays (see the module docstring)."""

    def __init__(self, archive: zipfile.ZipFile, read: dict[str, bytes] | None = None) -> None:
        self.archive = archive
        self.names = set(archive.namelist())
        self.read = read or {}  # members already inflated (:func:`_inflate`)

    def decode(self, value: Any) -> Any:
        if isinstance(value, dict):
            if "$type" in value:
                if set(value) != {"$type", "state"} or not isinstance(value["$type"], str):
                    raise StateError("a part must be {\"$type\": NAME, \"state\": {...}}")
                cls = TRUSTED_TYPES.get(value["$type"])
                if cls is None:
                    raise StateError(f"names a type seer does not trust: {value['$type']!r}")
                state = self.decode(value["state"])
                if not isinstance(state, dict):
                    raise StateError(f"{value['$type']}: its state must be an object")
                return cls.from_state(state)
            if "$array" in value:
                if set(value) != {"$array"}:
                    raise StateError("an array reference must be {\"$array\": NAME}")
                return self.array(value["$array"])
            return {k: self.decode(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.decode(v) for v in value]
        return value

    def array(self, name: Any) -> np.ndarray:
        if not isinstance(name, str) or not _MEMBER_NAME.match(name) or name not in self.names:
            raise StateError(f"refers to an array the file does not hold: {name!r}")
        data = self.read.pop(name, None)
        if data is None:
            data = self.archive.read(name)
        array = _plain_array(data, name)
        if array is None:
            array = _numpy_array(data, name)
        if array.dtype.kind not in _ARRAY_KINDS:
            raise StateError(f"{name} holds {array.dtype} values, not numbers or booleans")
        if array.dtype.kind in "fc" and not np.isfinite(array).all():
            raise StateError(f"{name} holds NaN or infinite values, which no value of a seer model may be")
        return array


def _plain_array(data: bytes, name: str) -> np.ndarray | None:
    """The array of an ``.npy`` member whose header is of :data:`_NPY_HEADER`'s form, read without
    numpy's literal parser; None for any other header (numpy's reader then decides)."""
    if not data.startswith(_NPY_MAGIC) or len(data) < 10:
        return None
    end = 10 + int.from_bytes(data[8:10], "little")
    found = _NPY_HEADER.fullmatch(data, 10, end)
    if found is None:
        return None
    dtype = np.dtype(found.group(1).decode())
    shape = tuple(int(size) for size in found.group(2).split(b",") if size.strip())
    count = int(np.prod(shape, dtype=object))
    if count * dtype.itemsize != len(data) - end:
        raise StateError(f"{name} claims {count * dtype.itemsize:,} bytes of values and holds {len(data) - end:,}")
    # A copy: the array owns writable memory, as numpy's reader gives it.
    return np.frombuffer(data, dtype=dtype, count=count, offset=end).reshape(shape).copy()


def _numpy_array(data: bytes, name: str) -> np.ndarray:
    """An ``.npy`` member read by numpy, its header checked against its size first."""
    try:
        # The header first: a shape it claims must match the bytes that follow it, before
        # NumPy allocates anything (a 200-byte file may claim terabytes).
        stream = io.BytesIO(data)
        version = np.lib.format.read_magic(stream)
        read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
            np.lib.format.read_array_header_2_0
        shape, _, dtype = read_header(stream)
        claimed = int(np.prod(shape, dtype=object)) * dtype.itemsize
        if dtype.kind in _ARRAY_KINDS and claimed != len(data) - stream.tell():
            raise StateError(f"{name} claims {claimed:,} bytes of values and holds {len(data) - stream.tell():,}")
        return np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, SyntaxError, tokenize.TokenError) as exc:  # pickled objects, a mangled header
        raise StateError(f"{name} is not a plain array of numbers or booleans ({one_line(exc)})") from None


def _inflate(path: Path, archive: zipfile.ZipFile, names: list[str]) -> dict[str, bytes]:
    """The bytes of the members ``names``, inflated half on this thread and half on another, which
    reads the file through an archive of its own: zlib lets go of Python's lock, so a model's
    arrays inflate in about half the time on two cores. A member the other thread cannot read is
    left out (the decoder reads it, and says what is wrong with it)."""
    if len(names) < 2 or thread_count() < 2:
        return {}
    from concurrent.futures import ThreadPoolExecutor

    def read(source: zipfile.ZipFile, part: list[str]) -> dict[str, bytes]:
        out = {}
        for name in part:
            try:
                out[name] = source.read(name)
            except Exception:  # noqa: BLE001 - read again by the decoder where used, which reports it
                pass
        return out

    def read_apart(part: list[str]) -> dict[str, bytes]:
        with zipfile.ZipFile(path) as own:
            return read(own, part)

    with ThreadPoolExecutor(1) as pool:
        other = pool.submit(read_apart, names[1::2])
        return read(archive, names[::2]) | other.result()


def read_model_file(path: Path, expected: type | None = None) -> Part:
    """The predictor stored in ``path``, checked; InputError in one sentence otherwise.

    ``expected`` is the predictor class the caller needs (a file holding another is refused).
    """
    _regular_file(path, _MAX_FILE_BYTES, "model file")
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            if len(infos) > _MAX_MEMBERS or sum(i.file_size for i in infos) > _MAX_BYTES or any(
                    i.filename == "model.json" and i.file_size > _MAX_JSON_BYTES for i in infos):
                raise StateError("unpacks to more than a model file may")
            try:
                document = json.loads(archive.read("model.json"), parse_constant=_no_constant,
                                      parse_int=_bounded_int)
            except KeyError:
                raise StateError("is not a seer model file (it holds no model.json)") from None
            if not isinstance(document, dict) or document.get("format") != FORMAT:
                raise StateError("is not a seer model file (its model.json names no seer format)")
            if document.get("version") != FORMAT_VERSION:
                raise StateError(f"has format version {document.get('version')!r}; this seer reads version "
                                 f"{FORMAT_VERSION} (retrain with `seer train`)")
            part = _Decoder(archive, _inflate(path, archive, [i.filename for i in infos
                                                             if i.filename.endswith(".npy")])).decode(document.get("root"))
    except FileNotFoundError:
        raise InputError("model file listed in the card is missing; retrain with `seer train --gpu GPU`",
                         path=path) from None
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError):
        raise InputError("not a seer model file (not a zip archive)", path=path) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"not a seer model file (model.json is not valid JSON: {exc.msg})", path=path) from None
    except (StateError, TreeError) as exc:
        message = one_line(exc)
        raise InputError(message if message.startswith("is not a seer") else f"not a valid seer model file: {message}",
                         path=path) from None
    except (RuntimeError, NotImplementedError) as exc:  # zipfile: an encrypted member, an unknown compression
        raise InputError(f"not a valid seer model file ({' '.join(str(exc).split())})", path=path) from None
    except (ValueError, TypeError, KeyError, IndexError, OSError, RecursionError, ArithmeticError) as exc:
        # Anything else a hand-made file can provoke while its parts check themselves.
        raise InputError(f"not a valid seer model file ({type(exc).__name__}: {one_line(exc)})", path=path) from None
    if expected is not None and type(part) is not expected:
        raise InputError(f"holds a {type(part).__name__}, where a {expected.__name__} was expected", path=path)
    return part


def read_card(directory: Path) -> dict:
    """The model card of a model directory, checked; InputError in one sentence otherwise."""
    card_path = directory / CARD_FILE
    retrain = "retrain with `seer train --gpu GPU`"
    _regular_file(card_path, _MAX_CARD_BYTES, "model card")
    try:
        card = json.loads(card_path.read_text(), parse_constant=_no_constant)
    except FileNotFoundError:
        raise InputError("no trained model here; train one with `seer train --gpu GPU`", path=card_path) from None
    except (UnicodeDecodeError, OSError) as exc:
        raise InputError(f"model card cannot be read ({exc})", path=card_path) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"model card is not valid JSON ({exc.msg})", path=card_path, line=exc.lineno) from None
    except StateError as exc:
        raise InputError(f"model card {exc}; {retrain}", path=card_path) from None
    if not isinstance(card, dict):
        raise InputError(f"model card must be a JSON object, not {type(card).__name__}; {retrain}", path=card_path)
    files = card.get("model_files")
    if not isinstance(files, dict) or not files:
        raise InputError(f"model card lists no model files (written by an older seer?); {retrain}", path=card_path)
    for name, digest in files.items():
        if not _MODEL_FILE_NAME.match(name) or not isinstance(digest, str) or not _SHA256.match(digest):
            raise InputError(f"model card lists {name!r} with {digest!r}: expected FAMILY-MATH{MODEL_SUFFIX} and a "
                             f"SHA-256; {retrain}", path=card_path)
    if not isinstance(card.get("gpu"), str) or not _GPU_NAME.match(card["gpu"]):
        raise InputError(f"model card names no GPU; {retrain}", path=card_path)
    if not isinstance(card.get("maths"), dict):
        raise InputError(f"model card lists no math modes; {retrain}", path=card_path)
    return card


def load(directory: Path, maths: Sequence[str] | None = None, families: Sequence[str] = tuple(FAMILIES)) -> Model:
    """Load a saved model set (only ``maths`` and ``families`` if given), refusing any file
    whose SHA-256 differs from its card's or that is not a valid seer model file."""
    card = read_card(directory)
    maths = list(card["maths"]) if maths is None else list(maths)
    parts: dict[str, dict] = {family: {} for family in FAMILIES}
    for family in families:
        for math in maths:
            name = model_file(family, math)
            if name not in card["model_files"]:
                continue
            path = directory / name
            _regular_file(path, _MAX_FILE_BYTES, "model file")
            if path.is_file() and sha256(path) != card["model_files"][name]:
                raise InputError("model file does not match the SHA-256 in its card: refusing to load a file "
                                 "that changed after training", path=path)
            parts[family][math] = read_model_file(path, FAMILIES[family])
    if not parts["ours"]:
        raise InputError(f"no model for {', '.join(maths)} math here (the card lists: "
                         f"{', '.join(card['model_files'])})", path=directory / CARD_FILE)
    for predictor in parts["ours"].values():
        if predictor.spec.name != card["gpu"]:
            raise InputError(f"model file is for GPU {predictor.spec.name!r}, the card for {card['gpu']!r}",
                             path=directory / CARD_FILE)
    for math, answer_times in parts["answers"].items():
        predictor = parts["ours"].get(math)
        if predictor is None or not set(answer_times.regressors) <= set(predictor.regressors) or \
                answer_times.n_inputs != len(predictor.features) + len(answer_times.algorithms):
            raise InputError("model file's answer-informed times do not fit the model of the same math mode",
                             path=directory / model_file("answers", math))
    model = Model(card["gpu"], card, parts["ours"], parts["seer"], parts["answers"])
    if model.pass_ == "fwd":
        # The sparse kernels' model, where the GPU has one: a small checked JSON file beside the card.
        model.sparse = load_sparse_model(directory)
        if model.sparse is not None and model.sparse.gpu != card["gpu"]:
            raise InputError(f"sparse model is for GPU {model.sparse.gpu!r}, the card for {card['gpu']!r}",
                             path=directory / SPARSE_FILE)
    # Each part checks its own state, but not that it fits the others (a tree over more features
    # than the model computes): one layer predicted now turns such a file into one sentence
    # here, not a traceback in the middle of a user's predictions.
    for math in parts["ours"]:
        try:
            model.predict_table([_PROBE_LAYER], math)
        except InputError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever a hand-made file provokes
            reason = f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            raise InputError(f"not a valid seer model file: it cannot predict ({reason})",
                             path=directory / model_file("ours", math)) from None
    return model


# -- where models live --------------------------------------------------------------------
def shipped_models() -> Path:
    """The shipped models: ``seer/shipped_models`` of an installed seer, which the wheel maps
    from the checkout's ``models/`` (pyproject.toml); in a checkout installed in editable mode,
    that ``models/`` folder itself, beside the package."""
    spec = importlib.util.find_spec("seer.shipped_models")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    # setuptools' editable install maps packages, not a data folder without __init__.py.
    return Path(__file__).resolve().parents[2] / "models"


def models_root(models_dir: str | Path | None = None) -> Path:
    """The models directory: ``models_dir``, else ``$SEER_MODELS_DIR``, else the shipped one."""
    if models_dir is not None:
        return Path(models_dir)
    if os.environ.get(MODELS_ENV):
        return Path(os.environ[MODELS_ENV])
    return shipped_models()


def model_dir(root: Path, gpu: str, pass_: str = "fwd") -> Path:
    """Where a GPU's models of one pass live: ``root/<gpu>/`` for the forward,
    ``root/<gpu>/<pass>/`` for a backward pass."""
    return root / gpu if pass_ == "fwd" else root / gpu / pass_


def available(root: Path, pass_: str = "fwd") -> list[str]:
    """GPU names that have a trained model of ``pass_`` under ``root``."""
    pattern = f"*/{CARD_FILE}" if pass_ == "fwd" else f"*/{pass_}/{CARD_FILE}"
    return sorted((p.parent if pass_ == "fwd" else p.parent.parent).name for p in root.glob(pattern))


#: The GPU whose models answer when several GPUs have models of a pass and none is named:
#: the first seer measured, and the one with the most measurements.
DEFAULT_GPU = "h100"


def resolve_gpu(gpu: str | None, root: Path, pass_: str | Sequence[str] = "fwd") -> str:
    """The model's GPU: the one asked for, or the only one there is (of models of ``pass_``,
    or of every pass of a sequence), or :data:`DEFAULT_GPU` among several."""
    passes = [pass_] if isinstance(pass_, str) else list(pass_)
    names = sorted(set.intersection(*(set(available(root, p)) for p in passes)))
    kind = "" if passes == ["fwd"] else (f"{passes[0]} " if len(passes) == 1 else f"{', '.join(passes)} ")
    what = f"trained {kind}models"
    train = "`, `".join("seer train --gpu GPU" + ("" if p == "fwd" else f" --pass {p}") for p in passes)
    if gpu is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise InputError(f"no {what}; train one with `{train}`", path=root)
        if DEFAULT_GPU in names:
            return DEFAULT_GPU
        raise InputError(f"several {what} ({', '.join(names)}): choose one with --gpu")
    gpu = gpu.strip().lower()
    if gpu not in names:
        raise InputError(f"no trained {kind}model for GPU {gpu!r} in {root}; {what} exist for: "
                         f"{', '.join(names) or 'none'} (train one with `{train.replace('GPU', gpu)}`)")
    return gpu


def load_model(gpu: str | None = None, *, math: str | Sequence[str] | None = None,
               models_dir: str | Path | None = None, baselines: bool = False, pass_: str = "fwd",
               cudnn_answers: bool = False) -> Model:
    """Load the trained models of a GPU (the only one there is, or :data:`DEFAULT_GPU`, when
    ``gpu`` is None) for one convolution pass (:data:`seer.algorithms.PASSES`; the forward by default).

    ``math`` limits loading to one or more math modes; ``baselines`` also loads SEER's
    model (for evaluation); ``cudnn_answers`` also loads the times from cuDNN's own answers,
    where the model has them (for a caller that will give them: ``Model.predict(...,
    workspaces=...)``). See :func:`models_root` for where models are looked up.
    """
    root = models_root(models_dir)
    name = resolve_gpu(gpu, root, pass_)
    maths = [math] if isinstance(math, str) else math
    families = ("ours", *(("seer",) if baselines else ()), *(("answers",) if cudnn_answers else ()))
    return load(model_dir(root, name, pass_), maths=maths, families=families)


def load_passes(gpu: str | None = None, *, math: str | Sequence[str] | None = None,
                models_dir: str | Path | None = None) -> dict[str, Model]:
    """The models of every pass (:data:`seer.algorithms.PASSES`) of one GPU, by pass: what a
    training step needs (:func:`seer.predict.step.training_step`). ``gpu`` None takes the only
    GPU with all of them (or :data:`DEFAULT_GPU`)."""
    root = models_root(models_dir)
    name = resolve_gpu(gpu, root, PASSES)
    return {p: load_model(name, math=math, models_dir=root, pass_=p) for p in PASSES}


# -- the cross-GPU model ------------------------------------------------------------------
#: The cross-GPU model's card and file in a models directory (beside the GPUs' folders).
CROSS_GPU_CARD, CROSS_GPU_FILE = "cross-gpu.json", "cross-gpu.zip"


def has_cross_gpu(root: Path) -> bool:
    return (root / CROSS_GPU_CARD).is_file()


def load_cross_gpu(models_dir: str | Path | None = None):
    """The cross-GPU model (:class:`seer.predict.predictors.CrossGpuPredictor`) and its card, from
    the models directory (:func:`models_root`); a file whose SHA-256 differs from the card's is refused."""
    from seer.predict.predictors import CrossGpuPredictor

    root = models_root(models_dir)
    card_path = root / CROSS_GPU_CARD
    _regular_file(card_path, _MAX_CARD_BYTES, "model card")
    if not card_path.is_file():
        raise InputError("no cross-GPU model here; train one with `seer train-cross-gpu`", path=card_path)
    try:
        card = json.loads(card_path.read_text(), parse_constant=_no_constant)
    except (OSError, ValueError) as exc:
        raise InputError(f"not a readable model card ({type(exc).__name__})", path=card_path) from None
    if not isinstance(card, dict) or card.get("model_file") != CROSS_GPU_FILE or not isinstance(card.get("gpus"), dict):
        raise InputError("not a cross-GPU model card; retrain with `seer train-cross-gpu`", path=card_path)
    path = root / CROSS_GPU_FILE
    _regular_file(path, _MAX_FILE_BYTES, "model file")
    if path.is_file() and sha256(path) != card.get("sha256"):
        raise InputError("model file does not match the SHA-256 in its card: refusing to load a file that changed "
                         "after training", path=path)
    return read_model_file(path, CrossGpuPredictor), card

"""Model files: a round trip changes nothing, and no file, however made, runs code or a traceback."""

from __future__ import annotations

import io
import json
import pickle
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from conftest import DATASET
from seer.cli import main
from seer.errors import InputError
from seer.layers.files import read_layers
from seer.predict import persist

LAYERS = str(DATASET / "Test-set-II.txt")


def _copy(small_models: Path, tmp_path: Path) -> Path:
    target = tmp_path / "models"
    shutil.copytree(small_models, target)
    return target / "h100"


def _predict(capsys, models_root: Path, *extra) -> tuple[int, str]:
    code = main(["predict", LAYERS, "--models-dir", str(models_root), *extra])
    err = capsys.readouterr().err
    return code, err


def _one_line_refusal(code: int, err: str, *words: str) -> None:
    assert code == 2, err
    assert "Traceback" not in err and err.count("\n") == 1, err
    for word in words:
        assert word in err, (word, err)


def _rehash(directory: Path, name: str) -> None:
    """Make the card vouch for a file, as an attacker who can write the folder would."""
    card = json.loads((directory / persist.CARD_FILE).read_text())
    card["model_files"][name] = persist.sha256(directory / name)
    (directory / persist.CARD_FILE).write_text(json.dumps(card))


def test_a_round_trip_predicts_the_same_and_the_card_vouches_for_every_file(small_models, tmp_path):
    directory = small_models / "h100"
    card = json.loads((directory / persist.CARD_FILE).read_text())
    assert set(card["model_files"]) == {f"{f}-{m}.zip" for f in ("ours", "seer", "answers") for m in ("fma", "default")}
    for name, digest in card["model_files"].items():
        assert digest == persist.sha256(directory / name)
    assert card["training_data"]["census_sha256"] and card["maths"]["fma"]["first_stage"] == "census"
    model = persist.load(directory)
    again = tmp_path / "again"
    persist.save(model, again)
    for name in card["model_files"]:  # the format is byte-stable: same model, same bytes
        assert (again / name).read_bytes() == (directory / name).read_bytes()
    layers = read_layers(LAYERS)
    pd.testing.assert_frame_equal(model.predict(layers, "fma"), persist.load(again).predict(layers, "fma"))
    only = persist.load(directory, maths=["default"], families=["ours"])
    assert set(only.predictors) == {"default"} and not only.baselines


@pytest.mark.slow
def test_training_again_on_the_same_data_changes_no_file(small_models, small_dataset, tmp_path):
    """Every estimator is seeded and model files carry no time, so a retrain on unchanged data
    leaves the folder byte for byte as it was: the card keeps its first training date."""
    from conftest import small_selector
    from seer.hardware.gpus import get_gpu_spec
    from seer.training import train as training

    target = _copy(small_models, tmp_path)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    persist.save(training.train(small_dataset, get_gpu_spec("h100"), selector=small_selector()), target)
    assert {p.name: p.read_bytes() for p in target.iterdir()} == before
    # A card that differs in more than its date is written anew.
    card = json.loads((target / persist.CARD_FILE).read_text())
    model = persist.load(target)
    model.card["trained_at"] = "2000-01-01T00:00:00+00:00"
    model.card["max_kernel_paths"] = card["max_kernel_paths"] + 1
    persist.save(model, target)
    assert json.loads((target / persist.CARD_FILE).read_text())["trained_at"] == "2000-01-01T00:00:00+00:00"


def test_a_file_changed_after_training_is_refused(small_models, tmp_path, capsys):
    directory = _copy(small_models, tmp_path)
    with open(directory / persist.model_file("ours", "default"), "ab") as handle:
        handle.write(b"\0")
    _one_line_refusal(*_predict(capsys, directory.parent), "SHA-256")


class _Payload:
    """Unpickling this writes a marker file: what a pickled model file can do on load."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


def _skops_style_exploit(path: Path, marker: Path) -> None:
    """A skops-format file whose types all start with ``numpy.`` or ``sklearn.``: a Pipeline of
    FunctionTransformers, one building a command, the next calling a function reachable under
    ``numpy.``. A loader trusting those prefixes builds it and, on predict, runs it."""
    def function(module: str, name: str) -> dict:
        return {"__class__": "function", "__module__": module, "__loader__": "FunctionNode", "content": name}

    def step(func: dict) -> dict:
        return {"__class__": "FunctionTransformer", "__module__": "sklearn.preprocessing._function_transformer",
                "__loader__": "ObjectNode", "content": {"__class__": "dict", "__module__": "builtins",
                                                        "__loader__": "DictNode", "content": {"func": func}}}
    schema = {"__class__": "Pipeline", "__module__": "sklearn.pipeline", "__loader__": "ObjectNode",
              "protocol": 2, "_skops_version": "0.10",
              "content": {"__class__": "dict", "__module__": "builtins", "__loader__": "DictNode", "content": {
                  "steps": [["build", step(function("numpy", "char.add"))],
                            ["run", step(function("numpy.distutils.exec_command", "exec_command"))]],
                  "marker": str(marker)}}}
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("schema.json", json.dumps(schema))


@pytest.mark.parametrize("kind", ["pickle", "skops"])
def test_an_exploit_with_a_matching_hash_is_refused_and_runs_nothing(small_models, tmp_path, capsys, kind):
    directory = _copy(small_models, tmp_path)
    marker = tmp_path / "marker"
    name = persist.model_file("ours", "default")
    if kind == "pickle":
        payload = pickle.dumps(_Payload(marker))
        pickle.loads(payload)  # the payload is live: loading it the unsafe way runs it
        assert marker.read_text() == "code ran"
        marker.unlink()
        (directory / name).write_bytes(payload)
    else:
        _skops_style_exploit(directory / name, marker)
    _rehash(directory, name)
    _one_line_refusal(*_predict(capsys, directory.parent), "not a seer model file", name)
    assert not marker.exists()


def _rewrite_model_json(path: Path, edit) -> None:
    """Rewrite a model file with ``edit`` applied to its model.json document (arrays kept)."""
    with zipfile.ZipFile(path) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    document = json.loads(members["model.json"])
    edit(document, members)
    members["model.json"] = json.dumps(document).encode()
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for n, data in members.items():
            archive.writestr(n, data)


def _find(value, test):
    """The first dict inside a JSON document for which ``test`` holds."""
    if isinstance(value, dict):
        if test(value):
            return value
        children = value.values()
    elif isinstance(value, list):
        children = value
    else:
        return None
    for child in children:
        found = _find(child, test)
        if found is not None:
            return found
    return None


def _retype(name: str):
    def edit(document, members):
        _find(document, lambda d: d.get("$type") == "BoostedRegressor")["$type"] = name
    return edit


def _object_array(document, members):
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"pickled": "object"}], dtype=object), allow_pickle=True)
    members[_find(document, lambda d: "$array" in d)["$array"]] = buffer.getvalue()


def _escape(document, members):
    _find(document, lambda d: "$array" in d)["$array"] = "../../../etc/passwd"


def _loop(document, members):
    trees = _find(document, lambda d: d.get("$type") == "BoostedRegressor")["state"]["trees"]
    left = np.load(io.BytesIO(members[trees["left"]["$array"]]))
    left[0] = 0  # the root becomes its own child: a walk that never ends
    buffer = io.BytesIO()
    np.save(buffer, left)
    members[trees["left"]["$array"]] = buffer.getvalue()


def _version(document, members):
    document["version"] = 99


@pytest.mark.parametrize("edit, words", [
    (_retype("os.system"), "does not trust: 'os.system'"),
    (_retype("numpy.testing._private.utils.runstring"), "does not trust"),
    (_retype("TreeEnsemble"), "does not trust"),
    (_object_array, "not a plain array of numbers or booleans"),
    (_escape, "array the file does not hold"),
    (_loop, "before its parent"),
    (_version, "format version 99"),
])
def test_hand_made_seer_files_are_refused_in_one_sentence(small_models, tmp_path, capsys, edit, words):
    directory = _copy(small_models, tmp_path)
    name = persist.model_file("ours", "default")
    _rewrite_model_json(directory / name, edit)
    _rehash(directory, name)
    _one_line_refusal(*_predict(capsys, directory.parent), words)


def test_a_file_holding_another_kind_of_model_is_refused(small_models, tmp_path, capsys):
    directory = _copy(small_models, tmp_path)
    ours, seers = persist.model_file("ours", "default"), persist.model_file("seer", "default")
    shutil.copy(directory / seers, directory / ours)
    _rehash(directory, ours)
    _one_line_refusal(*_predict(capsys, directory.parent), "holds a SeerFamilyPredictor", "AlgorithmPredictor")


@pytest.mark.parametrize("card, words", [
    ("[]", "must be a JSON object, not list"),
    ("null", "must be a JSON object, not NoneType"),
    ("{}", "lists no model files"),
    ('{"model_files": {"ours-default.zip": "abc"}}', "expected FAMILY-MATH.zip and a SHA-256"),
    ('{"gpu": "h100", "maths": {}, "model_files": {"../../x.zip": "' + "0" * 64 + '"}}', "expected FAMILY-MATH"),
    ('{"gpu": 7, "maths": {}, "model_files": {"ours-default.zip": "' + "0" * 64 + '"}}', "names no GPU"),
    ('{"gpu": "h100", "model_files": {"ours-default.zip": "' + "0" * 64 + '"}}', "lists no math modes"),
    ("{not json", "not valid JSON"),
])
def test_malformed_cards_are_one_sentence(small_models, tmp_path, capsys, card, words):
    directory = _copy(small_models, tmp_path)
    (directory / persist.CARD_FILE).write_text(card)
    _one_line_refusal(*_predict(capsys, directory.parent), words)


def test_directories_in_place_of_files_are_one_sentence(small_models, tmp_path, capsys):
    directory = _copy(small_models, tmp_path)
    name = directory / persist.model_file("ours", "default")
    name.unlink()
    name.mkdir()
    _one_line_refusal(*_predict(capsys, directory.parent), "is a directory")
    card = directory / persist.CARD_FILE
    card.unlink()
    card.mkdir()
    _one_line_refusal(*_predict(capsys, directory.parent), "is a directory")


def test_models_are_found_by_the_documented_rule(small_models, tmp_path, monkeypatch):
    monkeypatch.delenv(persist.MODELS_ENV, raising=False)
    assert persist.models_root() == persist.shipped_models()
    assert (persist.shipped_models() / "h100" / persist.CARD_FILE).exists()
    monkeypatch.setenv(persist.MODELS_ENV, str(small_models))
    assert persist.models_root() == small_models
    assert persist.load_model("h100").card == persist.read_card(small_models / "h100")
    assert persist.models_root(tmp_path) == tmp_path  # an explicit folder wins
    with pytest.raises(InputError, match="trained models exist for: none"):
        persist.load_model("h100", models_dir=tmp_path)


@pytest.mark.slow
def test_model_files_that_are_not_regular_files_are_refused_before_any_read(small_models, tmp_path, capsys):
    import os

    directory = _copy(small_models, tmp_path)
    target = directory / "ours-default.zip"
    target.unlink()
    target.symlink_to("/dev/zero")  # read whole, it would never end
    _one_line_refusal(*_predict(capsys, directory.parent), "ours-default.zip", "not a regular file")
    target.unlink()
    os.mkfifo(target)  # read, it would wait for a writer forever
    _one_line_refusal(*_predict(capsys, directory.parent), "ours-default.zip", "not a regular file")
    card = directory / persist.CARD_FILE
    text = card.read_text()
    card.unlink()
    os.mkfifo(card)
    _one_line_refusal(*_predict(capsys, directory.parent), "model.json", "not a regular file")
    card.unlink()
    card.write_text(text)


@pytest.mark.slow
def test_nan_and_infinity_in_a_card_or_a_model_file_are_refused(small_models, tmp_path, capsys):
    directory = _copy(small_models, tmp_path)
    card_path = directory / persist.CARD_FILE
    card = json.loads(card_path.read_text())
    card["pick_weight"] = float("inf")
    card_path.write_text(json.dumps(card))  # json writes Infinity
    _one_line_refusal(*_predict(capsys, directory.parent), "model.json", "Infinity")
    # Inside a model file, with the card's SHA-256 made to match.
    directory = _copy(small_models, tmp_path / "again")
    with zipfile.ZipFile(directory / "ours-default.zip") as archive:
        document = archive.read("model.json")
    _replace_member(directory, "ours-default.zip", "model.json",
                    document.replace(b'"n_features":', b'"nan_here":NaN,"n_features":', 1))
    _one_line_refusal(*_predict(capsys, directory.parent), "ours-default.zip", "NaN")


def _replace_member(directory: Path, file: str, member: str, data: bytes) -> None:
    """Put ``data`` in place of one member of a model file, and the card's SHA-256 to match."""
    path = directory / file
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    members[member] = data
    with zipfile.ZipFile(path, "w") as archive:
        for name, content in members.items():
            archive.writestr(name, content)
    _rehash(directory, file)


@pytest.mark.slow
def test_an_array_whose_header_claims_more_than_it_holds_or_holds_nan_is_refused(small_models, tmp_path, capsys):
    directory = _copy(small_models, tmp_path)
    # A 200-byte member that claims 8 TiB: refused before NumPy allocates anything.
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<f8", "fortran_order": False, "shape": (2**40,)})
    _replace_member(directory, "ours-default.zip", "arrays/0.npy", header.getvalue() + b"\0" * 8)
    _one_line_refusal(*_predict(capsys, directory.parent), "ours-default.zip", "claims 8,796,093,022,208 bytes")
    directory = _copy(small_models, tmp_path / "nan")
    with zipfile.ZipFile(directory / "ours-default.zip") as archive:
        first = np.load(io.BytesIO(archive.read("arrays/0.npy")), allow_pickle=False)
    poisoned = io.BytesIO()
    np.save(poisoned, np.full(first.shape, np.nan), allow_pickle=False)
    _replace_member(directory, "ours-default.zip", "arrays/0.npy", poisoned.getvalue())
    _one_line_refusal(*_predict(capsys, directory.parent), "ours-default.zip", "NaN or infinite")


@pytest.mark.slow
@pytest.mark.parametrize("tamper, words", [
    ("n_features", "reads 65535 inputs where the model has"),
    ("digits", "an integer of 401 digits"),
    ("encrypted", "encrypted"),
    ("method 99", "compression method"),
])
def test_tampered_model_files_with_a_matching_hash_are_one_sentence(small_models, tmp_path, capsys, tamper, words):
    directory = _copy(small_models, tmp_path)
    path = directory / "ours-default.zip"
    with zipfile.ZipFile(path) as archive:
        document = archive.read("model.json")
    if tamper in ("n_features", "digits"):
        value = b"65535" if tamper == "n_features" else b"9" * 401
        _replace_member(directory, path.name, "model.json", re.sub(rb'"n_features":\d+', b'"n_features":' + value,
                                                                    document))
    else:
        # Patch the first member (model.json) in its local header and in the central directory:
        # its flags (bit 0: encrypted) or its compression method.
        raw = bytearray(path.read_bytes())
        for signature, flags, method in ((b"PK\x03\x04", 6, 8), (b"PK\x01\x02", 8, 10)):
            at = raw.find(signature)
            if tamper == "encrypted":
                raw[at + flags] |= 0x1
            else:
                raw[at + method:at + method + 2] = (99).to_bytes(2, "little")
        path.write_bytes(bytes(raw))
        _rehash(directory, path.name)
    _one_line_refusal(*_predict(capsys, directory.parent), "ours-default.zip", words)


def _npy(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


def _first_time_regressor(document) -> dict:
    return _find(document["root"]["state"]["regressors"], lambda d: d.get("$type") == "LogTarget")["state"]


def _huge_leaf(document, members):
    value = _first_time_regressor(document)["regressor"]["state"]["trees"]["value"]["$array"]
    leaves = np.load(io.BytesIO(members[value]))
    leaves[-1] = 1e308
    members[value] = _npy(leaves)


def _quadratic(n_features: int, coef: float):
    """A time regressor replaced by a quadratic of ``n_features`` inputs whose coefficients are ``coef``."""
    def edit(document, members):
        arrays = {"mean": np.zeros(n_features), "scale": np.ones(n_features),
                  "powers": np.eye(n_features, dtype=np.int64), "coef": np.full(n_features, coef)}
        state = {"intercept": 0.0}
        for k, (key, array) in enumerate(arrays.items()):
            name = f"arrays/{90000 + k}.npy"
            members[name] = _npy(array)
            state[key] = {"$array": name}
        _first_time_regressor(document)["regressor"] = {"$type": "QuadraticRegressor", "state": state}
    return edit


def _pick_weight(document, members):
    document["root"]["state"]["pick_weight"] = 5


def _bomb(document, members):
    # Blanks compress a thousandfold: a small file whose model.json unpacks past the cap.
    document["padding"] = " " * (5 << 20)


@pytest.mark.slow
@pytest.mark.parametrize("edit, words", [
    (_huge_leaf, "log values reach"),
    (_quadratic(3, 0.0), "reads 3 inputs where the model has"),
    (_quadratic(86, 1e5), "predicts an impossible time"),
    (_pick_weight, "pick weight must lie in [0, 1]"),
    (_bomb, "unpacks to more than a model file may"),
])
def test_model_files_whose_parts_load_but_cannot_answer_are_one_sentence(small_models, tmp_path, capsys, edit,
                                                                         words):
    directory = _copy(small_models, tmp_path)
    name = persist.model_file("ours", "default")
    _rewrite_model_json(directory / name, edit)
    _rehash(directory, name)
    if edit is _bomb:
        assert (directory / name).stat().st_size < 2 << 20  # a small file: what it unpacks to is refused
    _one_line_refusal(*_predict(capsys, directory.parent), words)


# -- fuzzing: any change to a model file, with the card's SHA-256 to match ----------------
def _json_paths(value, path=()):
    """Every (path, value) inside a JSON document, containers included."""
    yield path, value
    if isinstance(value, dict):
        for key, child in value.items():
            yield from _json_paths(child, (*path, key))
    elif isinstance(value, list):
        for i, child in enumerate(value):
            yield from _json_paths(child, (*path, i))


_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-10**30, max_value=10**30)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12)
    | st.sampled_from(["ALGO", "always", "never", "roofline", "BoostedRegressor", "LogTarget", "arrays/0.npy"]),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=6)


@st.composite
def _model_file_change(draw, document: dict, members: dict) -> tuple:
    """One change to a model file, small enough to print: ("json", path, new value) replaces a
    value of model.json, ("bytes", member, offset, patch) overwrites bytes of an array member."""
    if draw(st.booleans()):
        path = draw(st.sampled_from([p for p, _ in _json_paths(document) if p]))
        return "json", path, draw(_JSON_VALUES)
    name = draw(st.sampled_from(sorted(n for n in members if n != "model.json")))
    return "bytes", name, draw(st.integers(0, len(members[name]) - 1)), draw(st.binary(min_size=1, max_size=8))


def _changed_members(document: dict, members: dict, change: tuple) -> dict:
    members = dict(members)
    if change[0] == "json":
        _, path, value = change
        document = json.loads(json.dumps(document))
        parent = document
        for key in path[:-1]:
            parent = parent[key]
        parent[path[-1]] = value
        members["model.json"] = json.dumps(document).encode()
    else:
        _, name, at, patch = change
        data = bytearray(members[name])
        data[at:at + len(patch)] = patch
        members[name] = bytes(data)
    return members


@pytest.mark.slow
def test_any_change_to_a_model_file_loads_and_answers_soundly_or_is_one_sentence(small_models, tmp_path_factory):
    name = persist.model_file("ours", "default")
    with zipfile.ZipFile(small_models / "h100" / name) as archive:
        members = {n: archive.read(n) for n in archive.namelist()}
    document = json.loads(members["model.json"])
    layers = read_layers(LAYERS)

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(change=_model_file_change(document, members))
    @example(change=("bytes", "arrays/0.npy", 9, b"'"))  # a header length numpy refuses in three lines
    def check(change):
        directory = tmp_path_factory.mktemp("fuzz")  # the card, and the one file loaded
        shutil.copy(small_models / "h100" / persist.CARD_FILE, directory)
        with zipfile.ZipFile(directory / name, "w", zipfile.ZIP_DEFLATED) as archive:
            for member, data in _changed_members(document, members, change).items():
                archive.writestr(member, data)
        _rehash(directory, name)
        try:
            predictions = persist.load(directory, maths=["default"], families=["ours"]).predict(layers, "default")
        except InputError as exc:
            assert "\n" not in str(exc) and name in str(exc), str(exc)
            return
        # Loaded: the answer keeps every promise of Model.predict's frame.
        times = predictions["predicted_ms"].dropna()
        assert set(predictions["layer"]) == set(range(len(layers)))
        assert np.isfinite(times).all() and (times > 0).all()
        ranks = predictions.dropna(subset=["rank"]).groupby("layer")["rank"]
        assert (ranks.min() == 1).all() and (ranks.max() == ranks.count()).all()

    check()


def test_an_array_whose_header_numpy_refuses_is_one_line():
    """numpy's own message for a header it will not read runs over three lines: a model file's
    error is one sentence all the same (found by the change test above)."""
    buffer = io.BytesIO()
    np.save(buffer, np.arange(4000.0))  # more bytes than the header then claims
    data = bytearray(buffer.getvalue())
    data[9] = ord("'")  # the header's length, high byte: about 10,000 bytes claimed
    with pytest.raises(persist.StateError) as caught:
        persist._numpy_array(bytes(data), "arrays/0.npy")
    assert "\n" not in str(caught.value) and "arrays/0.npy" in str(caught.value)

"""Shared fixtures; tests marked ``gpu`` run only where CuPy sees an NVIDIA GPU, and those
marked ``slurm`` only where sbatch is on the PATH.

With ``SEER_CI=1`` (set by ``.ci/run``) a test skipped for any other reason fails
instead, so that CI never passes over a test silently.
"""

from __future__ import annotations

import functools
import os
import shutil
import sys
from pathlib import Path

if os.environ.get("PYTEST_XDIST_WORKER"):
    # Each of pytest-xdist's workers (``-n auto``: one per core) fits scikit-learn's models on one
    # thread: with OpenMP's threads per worker on top, two workers on two cores took twice as long.
    # Set before numpy and scikit-learn load their thread pools.
    os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "data" / "h100"
#: The stand-in for the GPU worker (tests/fake_worker.py), and the probe of an H100 it answers with.
FAKE = [sys.executable, str(Path(__file__).with_name("fake_worker.py"))]
H100_PROBE = {"device_name": "NVIDIA H100 80GB HBM3", "sm_count": 132, "memory_bytes": 85520809984,
              "cuda_runtime_version": "13.0", "cudnn_version": "9.19.0", "driver_version": "580.159.04"}


@pytest.fixture
def fake_worker(monkeypatch, tmp_path):
    """Collections run the stand-in worker on a probed H100; returns the temporary folder their
    scratch folders go to, of the test's own, where they can be counted."""
    import tempfile

    from seer.collect import children, orchestrate

    monkeypatch.setattr(children, "worker_command", lambda: FAKE)
    monkeypatch.setattr(orchestrate, "probe_device", lambda workdir: dict(H100_PROBE))
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    return temp


@pytest.fixture
def models_without_sparse(tmp_path) -> Path:
    """A models directory whose h100 models are the shipped ones less the sparse model (links)."""
    folder = tmp_path / "models" / "h100"
    folder.mkdir(parents=True)
    for path in (REPO / "models" / "h100").iterdir():
        if path.name != "sparse.json":
            (folder / path.name).symlink_to(path)
    return folder.parent


def benchmark_module(name: str):
    """A script of benchmarks/ imported as a module (its own imports resolve from that folder)."""
    import sys

    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        return __import__(name)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


@functools.lru_cache(maxsize=None)
def gpu_available() -> bool:
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


#: Markers of tests that need what a machine may lack; CI skips them where it is absent.
MACHINE_MARKERS = ("gpu", "slurm")
#: The test files that take longest (on CI's two cores), longest first. With -n, pytest-xdist hands
#: out files in the order collected (pyproject.toml's --no-loadscope-reorder), so these go first and
#: the run does not end on one of them while the other workers have nothing left: by default it
#: hands out the files with the most tests first, and these few-test files came last.
LONGEST_FIRST = ("test_dataset.py", "test_cross_gpu.py", "test_persist.py", "test_estimators.py",
                 "test_variant_times.py", "test_orchestrate.py", "test_scoring.py", "test_transfer.py",
                 "test_profile_network.py", "test_backward_models.py", "test_guard.py", "test_network_cli.py",
                 "test_sparse_predict.py")


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file's tests keep their order
    skips = {}
    if not gpu_available():
        skips["gpu"] = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy")
    if shutil.which("sbatch") is None:
        skips["slurm"] = pytest.mark.skip(reason="needs SLURM's sbatch")
    for item in items:
        for marker, skip in skips.items():
            if marker in item.keywords:
                item.add_marker(skip)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("SEER_CI") == "1" and report.skipped and not any(m in item.keywords for m in MACHINE_MARKERS):
        report.outcome = "failed"
        report.longrepr = f"skipped in CI, which must run every test but those marked gpu or slurm: {report.longrepr}"



@pytest.fixture(scope="module")
def tracer():
    """A CUPTI kernel tracer (tests marked gpu); skipped where CUPTI cannot be used."""
    from seer.gpu import tracing

    reason = tracing.available()
    if reason is not None:
        pytest.skip(f"CUPTI tracing unavailable: {reason}")
    with tracing.KernelTracer() as t:
        yield t

# -- a small model set of the real data, fitted in seconds ----------------------------------
def small_selector():
    """The shipped model's design with fewer, smaller trees and two folds."""
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    from seer.training.estimators import AlgorithmSelector, WorkspaceModel, log_time_regressor

    trees = log_time_regressor(HistGradientBoostingRegressor(max_iter=60, learning_rate=0.2,
                                                             max_leaf_nodes=15, random_state=0))
    # The fastest-algorithm classifier: one tree per algorithm and round, fitted three times
    # (two folds, then all), was a third of the fitting; 30 rounds still give it a weight.
    pick = HistGradientBoostingClassifier(max_iter=30, learning_rate=0.25, max_leaf_nodes=15, random_state=0)
    return AlgorithmSelector(candidates={"boosted_trees": trees}, cv=2, workspace_model=WorkspaceModel(max_iter=40),
                             pick_classifier=pick)


@pytest.fixture(scope="session")
def table() -> pd.DataFrame:
    """The committed H100 measurements."""
    from seer.dataset.build import read_measurements

    return read_measurements(DATASET / "measurements")


@pytest.fixture(scope="session")
def census() -> pd.DataFrame:
    """The committed H100 census table."""
    from seer.dataset.build import read_census

    return read_census(DATASET / "census")


#: Shapes of the small dataset: training shapes, Test-set-I shapes, census shapes.
SMALL_TRAIN, SMALL_TEST1, SMALL_CENSUS = 1500, 800, 6000


def _run_folder(tmp_path_factory) -> Path:
    """This run's temporary folder: with pytest-xdist, the one above each worker's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


def _made_once(tmp_path_factory, name: str, make, wait: bool = True) -> Path | None:
    """A folder ``make(folder)`` fills, made once per test run: pytest-xdist's workers share it
    (the first makes it while the others wait on its lock), so each fitting runs once. With
    ``wait`` false, None at once where another worker is making it."""
    from filelock import FileLock, Timeout

    base = _run_folder(tmp_path_factory)
    target = base / name
    lock = FileLock(f"{target}.lock")
    try:
        lock.acquire(timeout=-1 if wait else 0)
    except Timeout:
        return None
    try:
        if not target.exists():
            building = base / f".{name}-{os.getpid()}"
            make(building)
            building.rename(target)
    finally:
        lock.release()
    return target


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory, request) -> Path:
    """A dataset directory holding a seeded sample of the committed one: every Test-set-II
    layer and every layer with energy readings, and some training, Test-set-I and census shapes."""
    from seer.dataset.tables import write_parts
    from seer.schema import DatasetDir

    def make(folder: Path) -> None:
        # The committed tables, read here only: a worker that finds the sample made reads neither.
        table, census = request.getfixturevalue("table"), request.getfixturevalue("census")
        rng = np.random.default_rng(0)
        keep = []
        for split, count in (("train", SMALL_TRAIN), ("test1", SMALL_TEST1)):
            ids = np.sort(table.loc[table["split"] == split, "shape_id"].unique())
            keep.extend(rng.choice(ids, size=count, replace=False))
        keep.extend(table.loc[table["split"] == "test2", "shape_id"].unique())
        keep.extend(table.loc[table["power_w"].notna(), "shape_id"].unique())  # every energy reading
        files = DatasetDir(folder / "h100")
        write_parts(table[table["shape_id"].isin(keep)], files.measurements)
        census_ids = rng.choice(np.sort(census["shape_id"].unique()), size=SMALL_CENSUS, replace=False)
        write_parts(census[census["shape_id"].isin(census_ids)], files.census)

    return _made_once(tmp_path_factory, "small", make) / "h100"


@pytest.fixture(scope="session")
def small_models(tmp_path_factory, small_dataset) -> Path:
    """A models directory with a small model set of the small dataset, saved by seer.predict.persist.

    Each math mode is fitted on its own, by the first worker that finds it not taken (two
    workers that need the models at once fit one each), and the parts are then joined into
    what one ``train`` of every math mode gives (tests/test_persist.py trains again and
    compares the files)."""
    import pickle

    from seer.hardware.gpus import get_gpu_spec
    from seer.predict import persist
    from seer.predict.model import Model
    from seer.schema import MATH_MODE_NAMES
    from seer.training import train as training

    def fit(math: str):
        def make(folder: Path) -> None:
            # On the worker's one OpenMP thread: with one per core, each of scikit-learn's
            # thousands of parallel regions waits at a barrier for a thread that another
            # worker's tests (or another process) keep off its core; on two busy cores the
            # fitting then took minutes instead of about 25 seconds.
            model = training.train(small_dataset, get_gpu_spec("h100"), maths=[math], selector=small_selector())
            folder.mkdir()
            (folder / "model.pickle").write_bytes(pickle.dumps(model))
        return make

    def join(folder: Path) -> None:
        parts = [pickle.loads((_made_once(tmp_path_factory, f"models-{math}", fit(math)) / "model.pickle")
                              .read_bytes()) for math in MATH_MODE_NAMES]
        # The card's per-math entries (the maths, the calibration's counts per math) of every part.
        calibration = parts[0].card["calibration"] | {
            key: {m: n for part in parts for m, n in part.card["calibration"][key].items()}
            for key, value in parts[0].card["calibration"].items() if isinstance(value, dict) and key != "guard"}
        calibration["guard"] = parts[0].card["calibration"]["guard"] | {
            "levels": {m: n for part in parts for m, n in part.card["calibration"]["guard"]["levels"].items()}}
        answers = parts[0].card["cudnn_answers"] | {
            "maths": {m: c for part in parts for m, c in part.card["cudnn_answers"]["maths"].items()}}
        card = parts[0].card | {"maths": {m: c for part in parts for m, c in part.card["maths"].items()},
                                "calibration": calibration, "cudnn_answers": answers}
        model = Model(parts[0].gpu, card, {m: p for part in parts for m, p in part.predictors.items()},
                      {m: b for part in parts for m, b in part.baselines.items()},
                      {m: a for part in parts for m, a in part.answer_times.items()})
        persist.save(model, folder / "h100")

    if not (_run_folder(tmp_path_factory) / "models").exists():
        for math in MATH_MODE_NAMES:  # the math modes no other worker is fitting (the others' are awaited in join)
            _made_once(tmp_path_factory, f"models-{math}", fit(math), wait=False)
    return _made_once(tmp_path_factory, "models", join)

"""Shared fixtures; tests marked ``gpu`` run only where CuPy sees an NVIDIA GPU, and those
marked ``slurm`` only where sbatch is on the PATH.

With ``SEER_CI=1`` (set by ``.ci/run``) a test skipped for any other reason fails
instead, so that CI never passes over a test silently.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

DATA = Path(__file__).parent / "data"
REPO = Path(__file__).resolve().parents[1]
DATASET = REPO / "data" / "h100"


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


def pytest_collection_modifyitems(config, items):
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
    from sklearn.ensemble import HistGradientBoostingRegressor

    from seer.estimators import AlgorithmSelector, WorkspaceModel, log_time_regressor

    trees = log_time_regressor(HistGradientBoostingRegressor(max_iter=60, learning_rate=0.2,
                                                             max_leaf_nodes=15, random_state=0))
    return AlgorithmSelector(candidates={"boosted_trees": trees}, cv=2, workspace_model=WorkspaceModel(max_iter=40))


@pytest.fixture(scope="session")
def table() -> pd.DataFrame:
    """The committed H100 measurements."""
    from seer.dataset import read_measurements

    return read_measurements(DATASET / "measurements")


@pytest.fixture(scope="session")
def census() -> pd.DataFrame:
    """The committed H100 census table."""
    from seer.dataset import read_census

    return read_census(DATASET / "census")


#: Shapes of the small dataset: training shapes, Test-set-I shapes, census shapes.
SMALL_TRAIN, SMALL_TEST1, SMALL_CENSUS = 1500, 800, 6000


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory, table, census) -> Path:
    """A dataset directory holding a seeded sample of the committed one: every Test-set-II
    layer and every layer with energy readings, and some training, Test-set-I and census shapes."""
    rng = np.random.default_rng(0)
    keep = []
    for split, count in (("train", SMALL_TRAIN), ("test1", SMALL_TEST1)):
        ids = np.sort(table.loc[table["split"] == split, "shape_id"].unique())
        keep.extend(rng.choice(ids, size=count, replace=False))
    keep.extend(table.loc[table["split"] == "test2", "shape_id"].unique())
    keep.extend(table.loc[table["power_w"].notna(), "shape_id"].unique())  # every energy reading
    directory = tmp_path_factory.mktemp("small") / "h100"
    directory.mkdir()
    from seer.schema import DatasetDir
    from seer.tables import write_parts

    files = DatasetDir(directory)
    write_parts(table[table["shape_id"].isin(keep)], files.measurements)
    census_ids = rng.choice(np.sort(census["shape_id"].unique()), size=SMALL_CENSUS, replace=False)
    write_parts(census[census["shape_id"].isin(census_ids)], files.census)
    return directory


@pytest.fixture(scope="session")
def small_models(tmp_path_factory, small_dataset) -> Path:
    """A models directory with a small model set of the small dataset, saved by seer.persist."""
    from seer import persist, training
    from seer.gpus import get_gpu_spec

    model = training.train(small_dataset, get_gpu_spec("h100"), selector=small_selector())
    root = tmp_path_factory.mktemp("models")
    persist.save(model, root / "h100")
    return root

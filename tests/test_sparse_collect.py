"""Collection on sparse inputs (``seer collect --sparsity``), on the CPU: the shapes' ids, the
plan, ``--algo sparse``, the records the orchestrator stores and the tables built from them,
with the protocol-compatible stand-in for the GPU worker (tests/fake_worker.py). The same on a
GPU: tests/test_gpu_collect.py."""

import json

import numpy as np
import pandas as pd
import pytest

from seer.algorithms import (ALGORITHM_GROUPS, REGISTRY, SPARSE_ALGORITHMS, algorithm_names, get_algorithm, is_sparse, pass_of,
                             select_algorithms)
from seer.cli import main
from seer.collect.orchestrate import CollectOptions, Collector
from seer.collect.plan import build_plan, shard, shard_shape_ids, without
from seer.collect.protocol import ShapeWork
from seer.collect.store import RunStore
from seer.dataset.build import build_dataset, read_measurements, read_sparse_measurements, split_of
from seer.hardware.gpus import get_gpu_spec
from seer.layers.grids import GridShape
from seer.layers.shapes import ConvShape
from seer.layers.sparsity import DEFAULT_LEVELS, parse_levels, parse_patterns, sparse_shape_id
from seer.schema import MEASUREMENT_COLUMNS, RUN_KEY, SPARSE_COLUMNS, SPARSE_MEASUREMENT_COLUMNS, DatasetDir

SPARSE = ["SEER_SPARSE_GATHER", "SEER_SPARSE_SCATTER", "SEER_SPARSE_POINTWISE"]
CUDNN = ["IMPLICIT_GEMM", "GEMM"]


# -- ids, levels, patterns ---------------------------------------------------------------
def test_a_sparse_shape_id_is_a_stable_hash_and_the_dense_layer_keeps_its_own():
    layer = ConvShape.square(8, 64, 56, 64, 3, 1, 1)
    dense = layer.shape_id
    assert sparse_shape_id(dense, 0, "relu") == sparse_shape_id(dense, 0.0, "uniform") == dense
    # The same on every machine and run: a fixed hash of (dense id, level, pattern).
    assert sparse_shape_id("4ef2bfade5c9", 0.9, "relu") == "4e9bc612a455"
    assert sparse_shape_id(dense, 0.9, "relu") == sparse_shape_id(dense, 0.90, "relu")
    ids = {sparse_shape_id(dense, s, p) for s in DEFAULT_LEVELS[1:] for p in ("relu", "uniform")}
    assert len(ids) == 12 and dense not in ids and all(len(i) == 12 for i in ids)
    assert sparse_shape_id(ConvShape.square(8, 64, 56, 64, 3, 1, 0).shape_id, 0.9, "relu") not in ids
    with pytest.raises(ValueError, match="unknown sparsity pattern"):
        sparse_shape_id(dense, 0.5, "blocks")
    with pytest.raises(ValueError, match="sparsity must lie in"):
        sparse_shape_id(dense, 1.0, "relu")


def test_shape_work_carries_its_sparsity_through_a_plan_file_and_a_resume():
    layer = ConvShape.square(1, 8, 16, 8, 3, 1, 1)
    work = ShapeWork(layer, "quick", [("fma", "GEMM"), ("fma", "SEER_SPARSE_GATHER")], 0.9, "uniform")
    again = ShapeWork.from_record(work.to_record())
    assert again == work and again.shape_id == sparse_shape_id(layer.shape_id, 0.9, "uniform")
    assert again.dense_shape_id == layer.shape_id
    assert work.head("fma")["dense_shape_id"] == layer.shape_id and work.head("fma")["sparsity"] == 0.9
    rest = without([work], {(work.shape_id, "fma", "GEMM")})
    assert rest == [ShapeWork(layer, "quick", [("fma", "SEER_SPARSE_GATHER")], 0.9, "uniform")]
    dense = ShapeWork(layer, "quick", [("fma", "GEMM")])
    assert dense.to_record() == {"shape": layer.as_dict(), "shape_id": layer.shape_id, "grid": "quick",
                                 "items": [["fma", "GEMM"]]}  # as before sparse shapes existed
    assert dense.sparse_fields() == {}
    with pytest.raises(ValueError, match="pattern"):
        ShapeWork(layer, "quick", [], 0.5)


@pytest.mark.parametrize("text, levels", [
    ("0", (0.0,)), ("0.5,0.9", (0.5, 0.9)), ("default", DEFAULT_LEVELS), ("DEFAULT", DEFAULT_LEVELS),
    ("0.9, default", (0.9, 0.0, 0.5, 0.7, 0.8, 0.95, 0.99)), ("0.9,0.90", (0.9,))])
def test_sparsity_levels(text, levels):
    assert parse_levels(text) == levels


@pytest.mark.parametrize("text", ["1", "-0.1", "lots", "", "0.5,x"])
def test_impossible_sparsity_levels_are_refused(text):
    with pytest.raises(ValueError):
        parse_levels(text)


def test_sparsity_patterns():
    assert parse_patterns("relu,uniform") == ("relu", "uniform")
    assert parse_patterns("Uniform,relu,uniform") == ("uniform", "relu")
    with pytest.raises(ValueError, match="unknown sparsity pattern blocks"):
        parse_patterns("relu,blocks")


# -- the registry ------------------------------------------------------------------------
def test_the_sparse_algorithms_are_their_own_group_and_in_no_other():
    assert select_algorithms("sparse") == SPARSE == [a.name for a in SPARSE_ALGORITHMS]
    assert algorithm_names("sparse") == SPARSE
    for group in ALGORITHM_GROUPS:
        if group != "sparse":
            assert not set(select_algorithms(group)) & set(SPARSE), group
    for pass_ in ("fwd", "bwd_data", "bwd_filter", None):
        assert not set(algorithm_names(pass_=pass_)) & set(SPARSE)
    assert select_algorithms("cudnn,sparse") == [*algorithm_names("cudnn"), *SPARSE]
    assert select_algorithms("seer_sparse_gather") == ["SEER_SPARSE_GATHER"]
    gather = get_algorithm("SEER_SPARSE_GATHER")
    assert gather.source == "sparse" and gather.one_math == "fma" and gather.pass_ == "fwd"
    assert not get_algorithm("SEER_SPARSE_SCATTER").deterministic  # atomic adds
    assert is_sparse("seer_sparse_pointwise") and not is_sparse("SEER_DIRECT") and not is_sparse("NOPE")
    assert list(pass_of(pd.Series(SPARSE))) == ["fwd"] * 3
    shorts = [a.short for a in REGISTRY]  # Excel sheet names
    assert len(set(shorts)) == len(shorts)


# -- the plan ----------------------------------------------------------------------------
def _shapes():
    return [GridShape(ConvShape.square(1, 8, 16, 8, 3, 1, 1), "quick"),
            GridShape(ConvShape.square(2, 16, 8, 8, 1, 1, 0), "quick")]


def test_the_plan_times_cudnn_and_the_sparse_kernels_on_sparse_shapes_and_only_cudnn_on_dense_ones():
    algos = [*CUDNN, *SPARSE, "BWD_DATA_ALGO_1"]
    plan = build_plan(_shapes(), ["fma", "default"], algos, set(), (0, 0.5, 0.9), ("relu", "uniform"))
    assert len(plan) == 2 * (1 + 2 * 2)
    for layer in _shapes():  # each layer: its dense shape, then its sparse ones, level by level
        works = [w for w in plan if w.dense_shape_id == layer.shape.shape_id]
        assert [(w.sparsity, w.pattern) for w in works] == [
            (0, None), (0.5, "relu"), (0.5, "uniform"), (0.9, "relu"), (0.9, "uniform")]
        dense, *sparse = works
        assert dense.shape_id == layer.shape.shape_id
        assert dense.items == [(m, a) for m in ("fma", "default") for a in (*CUDNN, "BWD_DATA_ALGO_1")]
        for work in sparse:
            assert work.shape_id == sparse_shape_id(layer.shape.shape_id, work.sparsity, work.pattern)
            # Sparse kernels compute in FP32 only: their fma runs stand for both modes; no backward pass.
            assert work.items == [*(("fma", a) for a in (*CUDNN, *SPARSE)), *(("default", a) for a in CUDNN)]
    # Without --sparsity, the plan is the one of before: dense shapes, sparse algorithms left out.
    assert build_plan(_shapes(), ["fma"], algos, set()) == build_plan(_shapes(), ["fma"], [*CUDNN, "BWD_DATA_ALGO_1"],
                                                                      set())
    assert build_plan(_shapes(), ["fma"], SPARSE, set()) == []
    # Done items are skipped, sparse ones by their own id.
    first = plan[1]
    done = {(first.shape_id, m, a) for m, a in first.items}
    again = build_plan(_shapes(), ["fma", "default"], algos, done, (0, 0.5, 0.9), ("relu", "uniform"))
    assert [w.shape_id for w in again] == [w.shape_id for w in plan if w.shape_id != first.shape_id]


# -- collection with the stand-in worker -------------------------------------------------
def _options(folder, **kw):
    base = dict(gpu=get_gpu_spec("h100"), shapes=_shapes(), maths=["fma", "default"], algos=[*CUDNN, *SPARSE],
                dataset_dir=folder, profile_shapes=0, item_timeout_s=30.0, sparsity=(0.0, 0.9),
                sparsity_patterns=("relu", "uniform"))
    base.update(kw)
    return CollectOptions(**base)


def test_a_shard_reads_the_records_of_its_own_shapes_sparse_and_dense(tmp_path):
    # What a shard's collection decodes of the store to find what is done: nothing of another shard.
    for index in (1, 2):
        options = _options(tmp_path, shard_index=index, shard_count=2)
        mine = shard(_shapes(), index, 2)
        ids = shard_shape_ids(options)
        dense = {gs.shape.shape_id for gs in mine}
        assert dense
        assert dense <= ids and len(ids) == len(dense) * 3  # each layer, and at 0.9 under two patterns
        assert ids == {sparse_shape_id(s, level, p) for s in dense for level in (0.0, 0.9) for p in ("relu", "uniform")}
        others = {gs.shape.shape_id for gs in shard(_shapes(), 3 - index, 2)}
        assert not ids & others


def _without_dates(frame):
    return frame.drop(columns=["collected_at"], errors="ignore").reset_index(drop=True)


@pytest.mark.slow
def test_a_sparse_collection_records_and_tables_and_leaves_the_dense_ones_as_they_were(tmp_path, fake_worker):
    folder = tmp_path / "h100"
    session = Collector(_options(folder)).run()
    assert session["sparsity"] == [0.0, 0.9] and session["sparsity_patterns"] == ["relu", "uniform"]
    records = RunStore(folder).read("timing", RUN_KEY)
    sparse = records[records["sparsity"].fillna(0) > 0]
    dense = records[records["sparsity"].isna()]
    # Two layers: 2 x 2 cuDNN runs dense; per pattern, 2 x 2 cuDNN runs and 3 sparse (fma) runs.
    assert len(dense) == 2 * 4 and len(sparse) == 2 * 2 * (4 + 3) and len(records) == len(dense) + len(sparse)
    assert set(dense["algo"]) == set(CUDNN) and set(sparse["algo"]) == {*CUDNN, *SPARSE}
    assert dense[list(SPARSE_COLUMNS)].isna().all().all()
    assert (sparse["sparsity"] == 0.9).all() and set(sparse["sparsity_pattern"]) == {"relu", "uniform"}
    assert set(sparse["dense_shape_id"]) == {gs.shape.shape_id for gs in _shapes()}
    assert np.allclose(sparse["input_zero_fraction"], 0.9, atol=0.03)
    assert np.allclose(sparse["input_crowding"], 1.0, atol=0.5)  # both patterns spread their non-zeros evenly
    assert (sparse["shape_id"] == [sparse_shape_id(d, s, p) for d, s, p in
                                   zip(sparse["dense_shape_id"], sparse["sparsity"], sparse["sparsity_pattern"])]).all()
    assert Collector(_options(folder)).run()["counts"]["timing_rows"] == 0  # resumed: nothing left

    # The same layers collected dense only, as before: the same dense records and tables.
    plain = tmp_path / "plain"
    Collector(_options(plain, algos=CUDNN, sparsity=(0.0,))).run()
    plain_records = RunStore(plain).read("timing", RUN_KEY)
    keep = [c for c in plain_records.columns if c != "collected_at"]
    pd.testing.assert_frame_equal(_without_dates(dense[keep]), _without_dates(plain_records))

    files = build_dataset(folder, get_gpu_spec("h100"))
    plain_files = build_dataset(plain, get_gpu_spec("h100"))
    assert plain_files.sparse_measurements is None and not DatasetDir(plain).sparse_measurements.exists()
    table = read_measurements(files.measurements)
    pd.testing.assert_frame_equal(_without_dates(table), _without_dates(read_measurements(plain_files.measurements)))
    assert files.rows == len(table) == 8

    assert files.sparse_measurements == DatasetDir(folder).sparse_measurements and files.sparse_rows == 28
    runs = read_sparse_measurements(files.sparse_measurements)
    assert list(runs.drop(columns="pass").columns) == list(SPARSE_MEASUREMENT_COLUMNS)
    assert set(MEASUREMENT_COLUMNS) < set(runs.columns) and set(runs["pass"]) == {"fwd"}
    assert len(runs) == 28 and not runs.duplicated(list(RUN_KEY)).any()
    assert np.allclose(runs["input_zero_fraction"], 0.9, atol=0.03) and (runs["status"] == "ok").all()
    # A sparse shape's split is its layer's.
    splits = table.drop_duplicates("shape_id").set_index("shape_id")["split"]
    assert (runs["split"] == runs["dense_shape_id"].map(splits)).all()
    assert (runs["split"] == [split_of(d, "quick") for d in runs["dense_shape_id"]]).all()
    # Ordered by layer, pattern and level, then math and the registry's order of algorithms.
    first = runs[(runs["dense_shape_id"] == runs["dense_shape_id"].iloc[0]) & (runs["sparsity_pattern"] == "relu")]
    assert list(first["algo"]) == [*CUDNN, *CUDNN, *SPARSE]
    assert list(first["math"]) == ["default"] * 2 + ["fma"] * 5
    counts = json.loads(DatasetDir(folder).provenance.read_text())["counts"]
    assert counts["sparse_runs"] == 28 and counts["sparse_shapes"] == 4 and counts["sparse_layers"] == 2
    assert "sparse_runs" not in json.loads(DatasetDir(plain).provenance.read_text())["counts"]
    # Rebuilding changes nothing.
    before = {p.name: p.read_bytes() for p in files.sparse_measurements.iterdir()}
    build_dataset(folder, get_gpu_spec("h100"))
    assert {p.name: p.read_bytes() for p in files.sparse_measurements.iterdir()} == before


def test_read_sparse_measurements_checks_its_columns(tmp_path):
    path = tmp_path / "sparse.csv"
    pd.DataFrame({c: [] for c in SPARSE_MEASUREMENT_COLUMNS if c != "sparsity_pattern"}).to_csv(path, index=False)
    with pytest.raises(Exception, match="sparsity_pattern"):
        read_sparse_measurements(path)
    with pytest.raises(ValueError, match="not sparse measurement columns"):
        read_sparse_measurements(path, columns=["shape_id", "nonsense"])


# -- the command line --------------------------------------------------------------------
def _run(capsys, *argv):
    code = main(["collect", "--gpu", "h100", "--grid", "quick", *argv])
    return code, " ".join(capsys.readouterr().err.split())


@pytest.mark.parametrize("argv, words", [
    (["--algo", "sparse"], "the sparse algorithms run on sparse inputs only"),
    (["--algo", "cudnn,SEER_SPARSE_GATHER", "--sparsity", "0"], "the sparse algorithms run on sparse inputs only"),
    (["--sparsity", "1.5"], "need numbers in [0, 1)"),
    (["--sparsity", "0.9", "--sparsity-pattern", "blocks"], "unknown sparsity pattern blocks"),
    (["--sparsity", "default", "--census"], "leave out --sparsity"),
])
def test_bad_sparsity_options_exit_2_and_collect_nothing(capsys, tmp_path, argv, words):
    code, err = _run(capsys, "--data-dir", str(tmp_path / "d"), *argv)
    assert code == 2 and words in err and "Traceback" not in err
    assert not (tmp_path / "d").exists()


@pytest.mark.slow
def test_a_sparse_item_that_kills_the_worker_is_recorded_as_the_sparse_shape_it_was(tmp_path, fake_worker,
                                                                                    monkeypatch):
    layer = _shapes()[0].shape
    victim = sparse_shape_id(layer.shape_id, 0.9, "uniform")
    monkeypatch.setenv("FAKE_CRASH", f"{victim}:fma:SEER_SPARSE_SCATTER")
    session = Collector(_options(tmp_path / "h100")).run()
    assert session["counts"]["worker_restarts"] == 1
    records = RunStore(tmp_path / "h100").read("timing", RUN_KEY).set_index(list(RUN_KEY))
    assert len(records) == 36
    crashed = records.loc[(victim, "fma", "SEER_SPARSE_SCATTER")]
    assert crashed["status"] == "error" and "SIGSEGV" in crashed["status_detail"]
    assert (crashed["sparsity"], crashed["sparsity_pattern"], crashed["dense_shape_id"]) == (0.9, "uniform",
                                                                                              layer.shape_id)
    assert (records.drop(index=(victim, "fma", "SEER_SPARSE_SCATTER"))["status"] == "ok").all()

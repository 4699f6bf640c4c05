"""The provenance record: method text from the schema, counts from the tables."""

import json

import pandas as pd

from seer.collect.store import RunStore
from seer.dataset.provenance import provenance
from seer.schema import MATH_MODES


def _tables():
    table = pd.DataFrame({"shape_id": ["a", "a", "b", "c"], "grid": ["seer", "seer", "seer", "test-set-ii"],
                          "math": ["fma", "default", "fma", "fma"], "algo": "GEMM",
                          "status": ["ok", "ok", "not_supported", "ok"],
                          "profile_status": ["ok", None, None, None], "split": ["train", "train", "test1", "test2"]})
    census = pd.DataFrame({"shape_id": ["y", "y", "x", "x"], "math": "fma", "algo": ["GEMM", "FFT", "GEMM", "FFT"],
                           "status": ["ok", "error", "not_supported", "ok"]})
    return table, pd.DataFrame({"kernel_idx": [0, 1]}), census


def test_counts_and_method(tmp_path):
    store = RunStore(tmp_path)
    table, kernels, census = _tables()
    record = provenance(store, table, kernels, census, test_fraction=0.25, test_set_ii_grids=("test-set-ii",))
    json.dumps(record)  # JSON-ready
    counts = record["counts"]
    assert counts["runs"] == 4 and counts["shapes"] == 3 and counts["kernels"] == 2
    assert counts["status"] == {"ok": 3, "not_supported": 1} and counts["ok_runs_by_math"] == {"default": 1, "fma": 2}
    assert counts["profiled_runs"] == 1 and counts["shapes_by_split"] == {"test1": 1, "test2": 1, "train": 1}
    assert counts["census_shapes"] == 2 and counts["census_answers"] == 4
    # Census statuses in the order they first appear by key (shape x, FFT first), not by row.
    assert list(counts["census_status"].items()) == [("ok", 2), ("not_supported", 1), ("error", 1)]
    shuffled = provenance(store, table, kernels, census.iloc[::-1], test_fraction=0.25,
                          test_set_ii_grids=("test-set-ii",))
    assert json.dumps(shuffled) == json.dumps(record)
    assert record["method"]["split"] == "seeded hash of shape_id: 25% of shapes to Test-set-I; grids test-set-ii are " \
                                        "Test-set-II"
    assert set(record["math_modes"]) == {m.name for m in MATH_MODES}
    assert "tolerance fma 5e-3, default 1e-2" in record["method"]["check"]
    assert record["sessions"] == [] and record["first_collected_at"] is None


def test_no_census_no_census_counts(tmp_path):
    table, kernels, _ = _tables()
    for census in (None, pd.DataFrame(columns=["shape_id", "status"])):
        counts = provenance(RunStore(tmp_path), table, kernels, census, test_fraction=0.3,
                            test_set_ii_grids=("test-set-ii",))["counts"]
        assert not any(key.startswith("census") for key in counts)

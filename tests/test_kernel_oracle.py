"""benchmarks/kernel_oracle.py: the committed figures are what its summary gives from the
per-run predictions the same file stores."""

from __future__ import annotations

import json

import pandas as pd
from conftest import REPO, benchmark_module

RESULT = REPO / "benchmarks" / "results" / "h100-kernel-oracle.json"


def test_committed_test2_figures_follow_from_the_stored_runs():
    oracle = benchmark_module("kernel_oracle")
    result = json.loads(RESULT.read_text())
    runs = pd.DataFrame(result["test2_runs"])
    assert set(runs["split"]) == {"Test-set-II"}
    assert list(result["designs"]) == list(oracle.DESIGNS)
    # Every cuDNN algorithm the model times, under both math modes, has runs stored.
    assert runs.groupby("math")["algo"].nunique().to_dict() == {"default": 6, "fma": 6}
    key = ("split", "math", "algo", "runs")
    committed = {tuple(r[k] for k in key): r for r in result["summary"] if r["split"] == "Test-set-II"}
    again = {tuple(r[k] for k in key): r for r in oracle.summarise(runs)}
    assert committed == again
    assert result["by_variant_test2"] == oracle.by_variant(runs)
    # The oracle designs are scored on traced runs only; the stored runs say which.
    traced = runs[runs["variant"].notna()]
    assert traced["answers+variant_all"].notna().all() and runs.loc[runs["variant"].isna(), "per_variant"].isna().all()
    # The kept design reproduces benchmarks/answer_inputs.py --fit paths (design "all").
    for row in result["reproduction"]:
        assert abs(row["here"] - row["answer_inputs"]) <= 0.05, row

"""What makes `seer predict` fast changes no prediction: the shortcuts give the bits of the
long way, and predicting loads neither numba nor scipy (their start-up costs 0.4 s) nor starts
OpenBLAS's threads."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from conftest import DATASET
from seer.layers.files import read_layers
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict.model import PredictionMemo
from seer.predict.persist import load_model


@pytest.mark.parametrize("math", ["fma", "default"])
def test_energies_and_pytorchs_times_are_the_bits_of_the_long_way(math):
    """Power models walk only where an algorithm has a time, and PyTorch's reference algorithm's
    ratios are taken from the times already predicted: both as computed in full."""
    predictor = load_model("h100").predictor(math)
    layers = read_layers(DATASET / "Test-set-II-general.csv")
    policies = list(predictor.policies)
    assert policies and predictor.power  # the shipped models have both
    reported, _, energies, pytorch = predictor.predict_with_energy(layers, policies)
    F, _, _ = predictor.prepare(layers, complete=False)
    assert np.isnan(reported).any()  # some algorithms do not run: the power models skip those rows
    assert energies.tobytes() == (reported * predictor._power(F)).tobytes()
    assert pytorch.tobytes() == predictor.predict_policies(layers, policies).tobytes()


def test_the_order_the_trees_walk_the_layers_in_changes_no_bit():
    """Layers are predicted sorted by the features the trees split on first (the walk order);
    each gets the bits it gets in any order given, reversed or shuffled."""
    predictor = load_model("h100").predictor("default")
    layers = read_layers(DATASET / "Test-set-II-general.csv")
    F, _, _ = predictor.prepare(layers, complete=False)
    order = predictor.walk_order(F)
    assert np.array_equal(np.sort(order), np.arange(len(F))) and not np.array_equal(order, np.arange(len(F)))
    policies = list(predictor.policies)
    given = predictor.predict_with_energy(layers, policies)
    for shuffled in (np.arange(len(layers))[::-1], np.random.default_rng(0).permutation(len(layers))):
        again = predictor.predict_with_energy(layers.iloc[shuffled].reset_index(drop=True), policies)
        assert all(a.tobytes() == b[shuffled].tobytes() for a, b in zip(again, given))


def test_predicting_loads_neither_numba_nor_scipy(tmp_path):
    out = tmp_path / "pred.csv"
    probe = ("import sys, seer.cli; code = seer.cli.main(['predict', sys.argv[1], '--gpu', 'h100', '-o', sys.argv[2]]); "
             "print(code, sorted({'numba', 'scipy', 'sklearn'} & {name.split('.')[0] for name in sys.modules}))")
    done = subprocess.run([sys.executable, "-c", probe, str(DATASET / "Test-set-II.txt"), str(out)],
                          capture_output=True, text=True)
    assert done.stdout.splitlines()[-1] == "0 []", done.stdout + done.stderr
    assert len(out.read_text().splitlines()) > 300


def test_layers_remembered_across_calls_give_the_bits_of_predicting_them_again():
    """A memo (seer predict keeps one across its chunks) answers the layers met before as
    predicting them again would: in part, in full, when full, and afresh for other arguments."""
    model = load_model("h100", math="fma")
    layers = read_layers(DATASET / "Test-set-II-general.csv")
    whole = model.predict(layers, "fma")
    memo, small = PredictionMemo(), PredictionMemo(capacity=50)
    for remembered in (memo, small):
        model.predict(layers.iloc[:400], "fma", memo=remembered)  # the later calls find some layers
        for _ in range(2):  # the second time, every layer is remembered (or the memo is full)
            again = model.predict(layers, "fma", memo=remembered)
            pd.testing.assert_frame_equal(again, whole)
            assert all(again[c].to_numpy().tobytes() == whole[c].to_numpy().tobytes()
                       for c in whole.columns if whole[c].dtype == np.float64)
    assert len(small) == 50 and 400 < len(memo) <= len(layers)
    distinct = len(layers[list(LAYER_COLUMNS)].drop_duplicates())
    assert len(memo) == distinct
    model.predict(layers.iloc[:10], "fma", algorithms="cudnn", memo=memo)  # other arguments: afresh
    assert len(memo) == len(layers.iloc[:10][list(LAYER_COLUMNS)].drop_duplicates())
    cudnn_only = model.predict(layers, "fma", algorithms="cudnn", memo=memo)
    pd.testing.assert_frame_equal(cudnn_only, model.predict(layers, "fma", algorithms="cudnn"))


@pytest.mark.parametrize("chosen", [None, "4"])
def test_predicting_starts_no_openblas_threads_unless_asked(tmp_path, chosen):
    """seer predict asks numpy's OpenBLAS for one thread (its start-up costs 0.05 s), unless the user chose."""
    probe = ("import os, sys, seer.cli; code = seer.cli.main(['predict', sys.argv[1], '--gpu', 'h100', '--math', 'fma', "
             "'-o', sys.argv[2]]); print(code, os.environ.get('OPENBLAS_NUM_THREADS'))")
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"} | (
        {"OPENBLAS_NUM_THREADS": chosen} if chosen else {})
    done = subprocess.run([sys.executable, "-c", probe, str(DATASET / "Test-set-II.txt"), str(tmp_path / "pred.csv")],
                          capture_output=True, text=True, env=env)
    assert done.stdout.splitlines()[-1] == f"0 {chosen or 1}", done.stdout + done.stderr


@pytest.mark.skipif(sys.platform != "linux" or __import__("platform").libc_ver()[0] != "glibc",
                    reason="mallopt is glibc's")
def test_predicting_lets_glibc_keep_freed_blocks_for_reuse():
    """seer predict asks glibc's malloc to keep freed blocks of megabytes for the next ones
    (each fresh one faulted its pages in anew); elsewhere it changes nothing."""
    probe = "import seer.cli; print(seer.cli._keep_freed_memory())"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.strip() == "True", done.stdout + done.stderr


def test_predicting_from_python_leaves_the_garbage_collector_as_it_was(tmp_path):
    """seer predict pauses Python's collector while it imports and loads the model; a caller
    from Python gets it back on, with nothing frozen out of its reach (the seer program alone
    freezes what it loaded: it ends after one command)."""
    import gc

    import seer.cli

    frozen = gc.get_freeze_count()
    assert seer.cli.main(["predict", str(DATASET / "Test-set-II.txt"), "-o", str(tmp_path / "pred.csv")]) == 0
    assert gc.isenabled() and gc.get_freeze_count() == frozen
    probe = ("import gc, seer.cli\n"
             "with seer.cli.collector_paused(freeze=True):\n    paused = gc.isenabled()\n"
             "print(paused, gc.isenabled(), gc.get_freeze_count() > 0)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "True", "True"], done.stdout + done.stderr

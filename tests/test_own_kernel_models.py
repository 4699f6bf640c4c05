"""seer's own kernels in the models: learnt from the layers they were timed on, run where
their plan says, ranked beside cuDNN's algorithms unless the caller asks for cuDNN's only."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from conftest import DATASET
from seer.algorithms import algorithm_names
from seer.cli import main
from seer.collect.plan import build_plan
from seer.dataset.views import math_rows, recorded_runs, training_frames
from seer.errors import InputError
from seer.hardware.kernel_plans import unsupported_reason
from seer.layers.grids import GridShape
from seer.layers.shapes import ConvShape, layer_frame
from seer.predict import persist
from seer.predict.predictors import BY_KERNEL_PLAN

OWN, CUDNN = algorithm_names("cupy"), algorithm_names("cudnn")
#: Layers of several kinds, one whose reduction (3 channels, 1x1) is too short to split.
LAYERS = [ConvShape(8, 64, 64, in_h=56, in_w=56, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
          ConvShape(16, 3, 32, in_h=112, in_w=112),
          ConvShape(4, 128, 128, groups=128, in_h=28, in_w=28, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),
          ConvShape(1, 32, 64, dims=3, in_d=16, in_h=16, in_w=16, kernel_d=3, kernel_h=3, kernel_w=3)]


def test_the_fma_runs_of_seers_kernels_stand_for_every_math_mode(table):
    rows = math_rows(table, "default")
    own = rows["algo"].isin(OWN)
    assert own.sum() > 0 and (rows.loc[own, "math"] == "fma").all()
    assert (rows.loc[~own, "math"] == "default").all()
    assert len(math_rows(table, "fma")) == (table["math"] == "fma").sum()


@pytest.mark.slow
def test_an_algorithm_timed_on_part_of_the_layers_is_kept_apart_from_its_failures(table):
    # The shipped data has seer's kernels on every layer; a collection stopped part-way has
    # them on some. Its records: those of seer's kernels on every other training layer only.
    train = np.sort(table.loc[table["split"] == "train", "shape_id"].unique())
    untimed = set(train[::2])
    stopped = table[~(table["algo"].isin(OWN) & table["shape_id"].isin(untimed))]
    shapes, times = training_frames(stopped, "fma", "train", partial=True)
    recorded = recorded_runs(stopped, "fma", "train", times)
    assert list(recorded.index) == list(shapes.index) and list(recorded.columns) == list(times.columns)
    timed = ~recorded.index.isin(untimed)
    for algo in OWN:
        assert not recorded.loc[~timed, algo].any() and recorded.loc[timed, algo].mean() > 0.99
        assert times.loc[~timed, algo].isna().all()  # missing, not failed: recorded says which
    assert recorded[CUDNN].all().all()
    assert not (times.notna() & ~recorded).any().any()  # every success was recorded
    # Without ``partial`` they are left out: a missing run must not be learnt as a failure.
    assert not set(OWN) & set(training_frames(stopped, "fma", "train")[1].columns)


def test_seers_kernels_are_timed_once_under_their_own_math_mode():
    shape = GridShape(LAYERS[0], "test")
    plan = build_plan([shape], ["fma", "default"], [*CUDNN[:2], *OWN], done=set())
    items = plan[0].items
    assert {a for m, a in items if m == "default"} == set(CUDNN[:2])
    assert {a for m, a in items if m == "fma"} == {*CUDNN[:2], *OWN}


@pytest.fixture(scope="module")
def model(small_models):
    return persist.load(small_models / "h100", maths=["fma", "default"], families=["ours"])


def test_seers_kernels_are_learnt_and_run_exactly_where_their_plan_takes_the_layer(model):
    frame = layer_frame(LAYERS)
    planned = np.array([[unsupported_reason(a, s) is None for a in OWN] for s in LAYERS])
    assert not planned.all()  # the short reduction is refused by split-K
    for math in ("fma", "default"):
        predictor = model.predictors[math]
        columns = [predictor.algorithms.index(a) for a in OWN]
        assert all(predictor.supports[a] == BY_KERNEL_PLAN and a in predictor.regressors for a in OWN)
        np.testing.assert_array_equal(predictor.predict_support(frame)[:, columns], planned.astype(float))
        times = predictor.predict(frame)[:, columns]
        assert np.array_equal(np.isfinite(times), planned) and (times[planned] > 0).all()


def test_predictions_rank_only_the_algorithms_asked_for(model):
    everything = model.predict(LAYERS, "fma")
    assert set(everything["algo"]) >= set(OWN)
    only_cudnn = model.predict(LAYERS, "fma", algorithms=["cudnn"])
    assert set(only_cudnn["algo"].dropna()) <= set(CUDNN)
    # The same times, the others left out and the ranks closed up.
    merged = only_cudnn.merge(everything, on=["layer", "algo"], suffixes=("", "_all"))
    np.testing.assert_allclose(merged["predicted_ms"], merged["predicted_ms_all"])
    assert (only_cudnn.groupby("layer")["rank"].min() == 1).all()
    picks = model.pick(LAYERS, "fma", algorithms="seer")
    assert set(picks["best_algo"]) <= set(OWN)
    with pytest.raises(InputError, match="unknown algorithm 'CUBLAS'"):
        model.predict(LAYERS, "fma", algorithms=["cudnn", "CUBLAS"])


def test_seer_predict_ranks_the_algorithms_of_algo(small_models, tmp_path, capsys):
    out = tmp_path / "pred.csv"
    layers = DATASET / "Test-set-II.txt"
    assert main(["predict", str(layers), "--models-dir", str(small_models), "--math", "fma",
                 "--algo", "cudnn", "-o", str(out)]) == 0
    assert set(pd.read_csv(out)["algo"].dropna()) <= set(CUDNN)
    capsys.readouterr()
    assert main(["predict", str(layers), "--models-dir", str(small_models), "--algo", "FASTEST"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown algorithm 'FASTEST'" in err and "Traceback" not in err


def test_energy_is_predicted_time_times_predicted_power_and_can_decide_the_pick(model):
    predictor = model.predictors["fma"]
    assert set(predictor.power) >= {"IMPLICIT_PRECOMP_GEMM", *OWN}
    by_time = model.predict(LAYERS, "fma")
    by_energy = model.predict(LAYERS, "fma", objective="energy")
    power = pd.DataFrame(predictor.predict_power(layer_frame(LAYERS)), columns=predictor.algorithms)
    for frame in (by_time, by_energy):
        rows = frame.dropna(subset=["predicted_mj"])
        watts = power.to_numpy()[rows["layer"], [predictor.algorithms.index(a) for a in rows["algo"]]]
        np.testing.assert_allclose(rows["predicted_mj"], rows["predicted_ms"] * watts)
        assert (watts > 50).all() and (watts < 1000).all()  # an H100 board draws 70-700 W
    # Ranked by energy: rank 1 has the least predicted energy of the layer's algorithms.
    assert by_energy["predicted_mj"].notna().all()
    least = by_energy.loc[by_energy.groupby("layer")["predicted_mj"].idxmin()]
    assert (least["rank"] == 1).all()
    picks = model.pick(LAYERS, "fma", objective="energy")
    assert list(picks["best_algo"]) == list(least["algo"])


def test_an_energy_pick_without_an_energy_model_is_one_clear_error(model):
    predictor = model.predictors["default"]
    saved, predictor.power = predictor.power, {}
    try:
        with pytest.raises(InputError, match="no energy model"):
            model.predict(LAYERS, "default", objective="energy")
        assert model.predict(LAYERS, "default")["predicted_mj"].isna().all()
    finally:
        predictor.power = saved
    with pytest.raises(InputError, match="unknown objective"):
        model.predict(LAYERS, "default", objective="speed")


def test_seer_predict_picks_by_energy_and_shows_it(small_models, capsys):
    layers = DATASET / "Test-set-II.txt"
    code = main(["predict", str(layers), "--models-dir", str(small_models), "--math", "fma",
                 "--objective", "energy", "--table", "all"])
    out = capsys.readouterr().out
    assert code == 0 and "least energy" in out and "mJ" in out

"""Times learnt from cuDNN's own answers (the GPU side is tests/test_gpu_answers.py): fed the
answers the collector recorded for held-out layers, cuDNN's algorithms are timed from them,
closer to the measured times than from the shape alone; without answers nothing changes."""

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from seer.algorithms import algorithm_names
from seer.dataset.views import algorithm_rows, layers_of, values_by_algorithm
from seer.errors import InputError
from seer.layers.shapes import LAYER_COLUMNS
from seer.predict import persist
from seer.predict.persist import load_model
from seer.predict.predictors import REFUSED, answer_inputs
from seer.schema import DatasetDir

CUDNN = algorithm_names("cudnn")


@pytest.fixture(scope="module")
def model():
    return load_model("h100", math="fma", cudnn_answers=True)


@pytest.fixture(scope="module")
def held_out():
    """300 layers of Test-set-II (fma): the layers, measured times and cuDNN's recorded answers."""
    table = pd.read_parquet(DatasetDir("data/h100").measurements,
                            filters=[("split", "==", "test2")],
                            columns=[*LAYER_COLUMNS, "shape_id", "split", "math", "algo", "status", "time_ms",
                                     "workspace_bytes"])
    rows = algorithm_rows(table, "fma", "test2")
    times = values_by_algorithm(rows, "time_ms").iloc[::3].iloc[:300]
    workspaces = values_by_algorithm(rows[rows["algo"].isin(CUDNN)], "workspace_bytes").reindex(
        index=times.index, columns=CUDNN)
    return (layers_of(rows, times.index).reset_index(drop=True), times.reset_index(drop=True),
            workspaces.reset_index(drop=True))


def wide(predictions: pd.DataFrame, n: int) -> pd.DataFrame:
    return predictions.pivot_table(index="layer", columns="algo", values="predicted_ms").reindex(range(n))


def test_the_shipped_model_has_answer_times_for_cudnns_algorithms(model):
    answer_times = model.answer_times["fma"]
    assert answer_times.algorithms == CUDNN
    assert set(answer_times.regressors) == {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "FFT", "FFT_TILING",
                                            "WINOGRAD_NONFUSED"}
    assert set(answer_times.regressors["GEMM"]) == {"workspace", "no_workspace"}  # im2col or its direct fallback
    assert not load_model("h100", math="fma").answer_times  # loaded only for a caller with answers


def test_without_answers_nothing_changes(model, held_out):
    layers = held_out[0].iloc[:40]
    shape_only = replace(model, answer_times={})
    pd.testing.assert_frame_equal(model.predict(layers, "fma"), shape_only.predict(layers, "fma"))


def test_recorded_answers_time_cudnns_algorithms_closer_to_the_measured(model, held_out):
    layers, times, workspaces = held_out
    shape_only = replace(model, answer_times={})
    learnt = wide(model.predict(layers, "fma", workspaces=workspaces), len(layers))
    runs_only = wide(shape_only.predict(layers, "fma", workspaces=workspaces), len(layers))
    errors = {}
    for name, predicted in (("learnt", learnt), ("runs only", runs_only)):
        per_algo = {}
        for algo in ("GEMM", "IMPLICIT_GEMM", "FFT"):
            ran = times[algo].notna() & predicted[algo].notna()
            per_algo[algo] = float(np.mean(np.abs(predicted.loc[ran, algo] / times.loc[ran, algo] - 1)))
        errors[name] = per_algo
    # GEMM's path (im2col buffer or none) is its workspace: known, it errs far less.
    assert errors["learnt"]["GEMM"] < 0.8 * errors["runs only"]["GEMM"], errors
    assert sum(errors["learnt"].values()) < sum(errors["runs only"].values()), errors
    # seer's own kernels keep their times; an algorithm cuDNN refuses gets none.
    assert np.allclose(learnt["SEER_IMPLICIT_GEMM"], runs_only["SEER_IMPLICIT_GEMM"])
    refused = workspaces["FFT"].isna()
    assert refused.any() and learnt.loc[refused, "FFT"].isna().all()


def test_the_shipped_model_guesses_kernel_variants_where_validation_kept_them(model):
    answer_times = model.answer_times["fma"]
    decided = model.card["cudnn_answers"]["maths"]["fma"]["variants"]
    assert set(decided) == set(answer_times.regressors)
    assert set(answer_times.variants) == {a for a, d in decided.items() if d["used"]}
    assert "IMPLICIT_GEMM" in answer_times.variants and "GEMM" not in answer_times.variants
    for algo, mixture in answer_times.variants.items():
        assert mixture.threshold == decided[algo]["threshold"]


def test_the_guessed_kernel_variant_times_implicit_gemm_closer(model, held_out):
    layers, times, workspaces = held_out
    single = replace(model, answer_times={"fma": replace(model.answer_times["fma"], variants={})})
    errors = {}
    for name, which in (("mixture", model), ("single", single)):
        predicted = wide(which.predict(layers, "fma", workspaces=workspaces), len(layers))["IMPLICIT_GEMM"]
        ran = times["IMPLICIT_GEMM"].notna() & predicted.notna()
        errors[name] = float(np.mean(np.abs(predicted[ran] / times.loc[ran, "IMPLICIT_GEMM"] - 1)))
    assert errors["mixture"] < errors["single"] - 0.005, errors


def test_answers_as_inputs():
    sizes = answer_inputs(np.array([[0.0, np.nan, 1023.0]]))
    assert sizes.tolist() == [[0.0, REFUSED, 10.0]]


def test_answers_lacking_an_algorithm_are_refused(model, held_out):
    layers, _, workspaces = held_out
    with pytest.raises(ValueError, match="lack GEMM"):
        model.predict(layers.iloc[:3], "fma", workspaces=workspaces.iloc[:3].drop(columns="GEMM"))


def test_saved_and_loaded_with_the_model(model, tmp_path, held_out):
    layers, _, workspaces = held_out
    saved = persist.save(model, tmp_path / "h100")
    assert {p.name for p in saved} == {"ours-fma.zip", "answers-fma.zip"}
    loaded = load_model("h100", math="fma", models_dir=tmp_path, cudnn_answers=True)
    pd.testing.assert_frame_equal(loaded.predict(layers.iloc[:20], "fma", workspaces=workspaces.iloc[:20]),
                                  model.predict(layers.iloc[:20], "fma", workspaces=workspaces.iloc[:20]))


@pytest.mark.parametrize("algorithms, message", [
    (CUDNN[:3], "regressors must be of algorithms whose answers it reads"),  # the part's own check
    ([*CUDNN, "ANOTHER"], "do not fit the model"),  # its trees read fewer inputs than it would give
])
def test_answer_times_that_do_not_fit_the_model_are_refused(model, tmp_path, algorithms, message):
    mixed = replace(model, answer_times={"fma": replace(model.answer_times["fma"], algorithms=algorithms)})
    persist.save(mixed, tmp_path / "h100")
    with pytest.raises(InputError, match=message):
        load_model("h100", math="fma", models_dir=tmp_path, cudnn_answers=True)

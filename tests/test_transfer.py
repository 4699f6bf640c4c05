"""A measured GPU's forward model carried over to another GPU (:mod:`seer.training.transfer`):
the features keep the source GPU's figures, each algorithm's times take the scale measured on
the target, the target's memory bounds the layers, and the model file stores and checks both."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from seer.cli import main
from seer.errors import InputError
from seer.hardware.gpus import get_gpu_spec
from seer.layers.shapes import ConvShape
from seer.predict import persist
from seer.predict.predictors import AlgorithmPredictor, StateError

from conftest import REPO

SHIPPED = REPO / "models"
LAYERS = [ConvShape.square(32, 64, 56, 64, 3, 1, 1), ConvShape.square(8, 256, 28, 512, 1, 1, 0),
          ConvShape.square(1, 3, 224, 64, 7, 2, 3)]


@pytest.fixture(scope="module")
def h100_fma():
    return persist.load_model("h100", math="fma", models_dir=SHIPPED).predictor("fma")


def carried(predictor: AlgorithmPredictor, scale: dict) -> AlgorithmPredictor:
    return replace(predictor, spec=get_gpu_spec("h200"), source_spec=predictor.spec, time_scale=scale)


def test_a_carried_model_scales_each_algorithm_and_keeps_the_source_features(h100_fma):
    scale = {"IMPLICIT_GEMM": 0.5, "FFT": 2.0}
    moved = carried(h100_fma, scale)
    assert moved.feature_spec.name == "h100" and moved.spec.name == "h200"
    before, after = h100_fma.predict_unmasked(LAYERS), moved.predict_unmasked(LAYERS)
    for j, algo in enumerate(h100_fma.algorithms):
        assert np.allclose(after[:, j], before[:, j] * scale.get(algo, 1.0), equal_nan=True), algo
    # PyTorch's choice is a ratio to IMPLICIT_PRECOMP_GEMM's time, which is not scaled here
    assert np.allclose(moved.predict_policies(LAYERS), h100_fma.predict_policies(LAYERS))


def test_a_carried_model_bounds_layers_by_the_target_gpus_memory(h100_fma):
    # 91 GB of input and output: beyond the H100's 80 GiB, within the H200's 141 GB
    huge = [ConvShape.square(340, 128, 512, 128, 3, 1, 1)]
    assert np.isnan(h100_fma.predict(huge)).all()
    assert np.isfinite(carried(h100_fma, {}).predict(huge)).any()


def test_a_carried_model_round_trips_through_its_file_and_plain_models_store_no_new_fields(h100_fma, tmp_path):
    moved = carried(h100_fma, {"GEMM": 0.9})
    path = tmp_path / "ours-fma.zip"
    persist.write_model_file(moved, path)
    back = persist.read_model_file(path, AlgorithmPredictor)
    assert back.source_spec == moved.source_spec and back.time_scale == {"GEMM": 0.9}
    assert np.allclose(back.predict_unmasked(LAYERS), moved.predict_unmasked(LAYERS), equal_nan=True)
    assert "source_spec" not in h100_fma.state() and "time_scale" not in h100_fma.state()


@pytest.mark.parametrize("scale", [{"GEMM": 0.0}, {"GEMM": 100.0}, {"GEMM": True}, {"NO_SUCH_ALGO": 1.0}])
def test_a_model_file_with_an_impossible_time_scale_is_refused(h100_fma, scale):
    state = carried(h100_fma, {}).state() | {"time_scale": scale}
    with pytest.raises(StateError, match="time scales"):
        AlgorithmPredictor.from_state(state)


def test_a_carried_model_needs_the_source_spec_its_features_came_from(h100_fma):
    state = carried(h100_fma, {}).state()
    state["source_spec"] = {"name": "h100"}
    with pytest.raises(StateError, match="source GPU's spec"):
        AlgorithmPredictor.from_state(state)


#: Shapes of the H200 sample per split (every H200 forward layer has runs of cuDNN's and seer's
#: algorithms and PyTorch's choices).
SAMPLE_SHAPES = {"train": 1200, "test1": 600}


@pytest.fixture(scope="module")
def h200_sample(tmp_path_factory) -> Path:
    """A data folder whose H200 dataset is a seeded sample of the committed one: what the carried
    model is fitted to (time scales, SEER's model, PyTorch's choice, intervals) at every step,
    on fewer layers."""
    from seer.dataset.build import read_measurements
    from seer.dataset.tables import write_parts
    from seer.schema import DatasetDir

    table = read_measurements(REPO / "data" / "h200" / "measurements", passes=("fwd",))
    rng = np.random.default_rng(0)
    keep = []
    for split, count in SAMPLE_SHAPES.items():
        ids = np.sort(table.loc[table["split"] == split, "shape_id"].unique())
        keep.extend(rng.choice(ids, size=count, replace=False))
    root = tmp_path_factory.mktemp("data")
    write_parts(table[table["shape_id"].isin(keep)], DatasetDir(root / "h200").measurements)
    return root


@pytest.mark.slow
def test_seer_train_transfer_from_carries_the_model_over_and_fits_the_rest(tmp_path, capsys, h200_sample):
    import shutil

    shutil.copytree(SHIPPED / "h100", tmp_path / "h100")
    assert main(["train", "--gpu", "h200", "--transfer-from", "h100", "--models-dir", str(tmp_path),
                 "--data-dir", str(h200_sample)]) == 0
    model = persist.load_model("h200", models_dir=tmp_path)
    card = model.card
    # SEER's model is not carried: it is fitted on the H200's own profiled runs.
    assert card["transferred_from"]["gpu"] == "h100" and card["families"] == ["ours", "seer"]
    baselines = persist.load_model("h200", models_dir=tmp_path, baselines=True).baselines
    assert set(baselines) == set(model.predictors)
    for math, predictor in model.predictors.items():
        assert predictor.spec.name == "h200" and card["maths"][math]["seer_baseline_algorithms"]
        assert predictor.feature_spec.name == "h100"
        assert predictor.time_scale and all(0.8 < v < 1.2 for v in predictor.time_scale.values())
        assert predictor.policies and predictor.intervals  # fitted on the H200's own runs
        assert set(card["maths"][math]["time_scale"]) == set(predictor.time_scale)
    assert "h100's trees" in capsys.readouterr().err
    assert main(["train", "--gpu", "h100", "--transfer-from", "h100", "--models-dir", str(tmp_path)]) == 2
    assert main(["train", "--gpu", "h200", "--transfer-from", "h100", "--pass", "bwd_data",
                 "--models-dir", str(tmp_path)]) == 2
    with pytest.raises(InputError):
        persist.load_model("h300", models_dir=tmp_path)

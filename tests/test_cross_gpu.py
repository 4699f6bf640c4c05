"""The cross-GPU model: the time of PyTorch's cudnn.benchmark choice on GPUs seer has no
per-algorithm models of, learnt from seer's datasets and NeuSight's public timings, each row
saying its source; its error on a GPU left out of the fit; ``seer predict --gpu NAME``."""

import json
import shutil

import pandas as pd
import pytest

from seer.cli import main
from seer.errors import InputError
from seer.hardware.gpus import get_gpu_spec
from seer.predict import persist
from seer.schema import INTERVAL_LEVELS

from conftest import REPO

LAYERS = "batch,in_ch,out_ch,in_h,in_w,kernel_h,kernel_w,pad_h,pad_w,name\n" \
         "32,64,64,56,56,3,3,1,1,conv3\n1,256,256,14,14,3,3,1,1,late\n8,32,64,28,28,1,1,0,0,pointwise\n"


@pytest.fixture()
def layers(tmp_path):
    path = tmp_path / "layers.csv"
    path.write_text(LAYERS)
    return path


def test_training_rows_keep_their_source_and_timing():
    from seer.training.cross_gpu import training_rows

    rows = training_rows(REPO / "data", REPO / "data" / "external" / "neusight-conv")
    by_gpu = rows.groupby("gpu")[["source", "timing"]].first()
    assert set(by_gpu.index) >= {"h100", "h200", "v100-pcie", "t4", "p100", "p4"}
    assert (by_gpu.loc[["h100", "h200"], "source"] == "seer").all() and (by_gpu.loc[["h100"], "timing"] == "burst").all()
    assert (by_gpu.loc[["t4", "p4"], "source"] == "neusight").all()
    public = rows[rows["source"] == "neusight"]
    assert (public[["kernel_h", "stride_h", "pad_h"]] == [3, 1, 1]).all().all() and (public["time_ms"] > 0).all()
    # Each row's family from the kernels it ran: the public rows list theirs, seer's were traced.
    assert public["family"].notna().all() and set(rows["family"].dropna()) <= {"implicit_gemm", "gemm", "direct",
                                                                                "fft", "winograd"}
    assert rows.loc[rows["source"] == "seer", "family"].notna().mean() > 0.99
    assert (public["family"] == "winograd").mean() > 0.5  # cuDNN 8.9.2 on these GPUs: Winograd on most 3x3 layers


def test_a_calls_family_comes_from_its_kernels_names():
    from seer.algorithms import kernels_family

    assert kernels_family(["sm80_xmma_fprop_implicit_gemm_f32f32_tf32f32_f32_nchwkcrs_nchw"]) == "implicit_gemm"
    assert kernels_family(["generateWinogradTilesKernel", "winograd3x3Kernel"]) == "winograd"
    assert kernels_family(["im2col4d_kernel", "sgemm_largek"]) == "gemm"
    assert kernels_family(["fft2d_r2c_32x32", "cgemm", "fft2d_c2r_32x32"]) == "fft"
    assert kernels_family([]) == "implicit_gemm"


@pytest.mark.slow
def test_trained_again_it_gives_the_shipped_model_and_a_left_out_error_per_gpu(tmp_path):
    assert main(["train-cross-gpu", "--models-dir", str(tmp_path)]) == 0
    card = json.loads((tmp_path / persist.CROSS_GPU_CARD).read_text())
    shipped = json.loads((REPO / "models" / persist.CROSS_GPU_CARD).read_text())
    assert card["sha256"] == shipped["sha256"]  # the same data, the same model file
    for gpu, info in card["gpus"].items():
        assert 5 < info["left_out_mape_percent"] < 40, gpu  # a GPU never seen: tens of percent, not exact
        # The likely family, left out: better than always guessing the commonest family of its cuDNN version.
        assert info["left_out_family_agreement_percent"] > info["commonest_family_agreement_percent"], gpu
    assert card["family"]["cudnn_majors"] == [8, 9]
    low, high = card["interval_log2_bounds"]["80"]
    assert low < 0 < high and card["interval_log2_bounds"]["95"][0] < low


def test_an_unmeasured_gpu_gets_one_time_per_layer_with_its_interval(layers, tmp_path, capsys):
    out = tmp_path / "a100.csv"
    assert main(["predict", str(layers), "--gpu", "a100", "--math", "fma", "-o", str(out)]) == 0
    frame = pd.read_csv(out)
    assert list(frame["name"]) == ["conv3", "late", "pointwise"] and list(frame["layer"]) == [0, 1, 2]
    assert (frame["gpu"] == "a100").all() and not frame["gpu_measured"].any()
    assert (frame["policy"] == "PYTORCH_BENCHMARK").all() and (frame["math"] == "fma").all()
    for level in INTERVAL_LEVELS:
        assert (frame[f"predicted_ms_low{level}"] < frame["predicted_ms"]).all()
        assert (frame["predicted_ms"] < frame[f"predicted_ms_high{level}"]).all()
    assert "never measured" in capsys.readouterr().out
    # Its likely algorithm family under cuDNN 9 (the default) with its probability; the 1x1 layer runs an implicit GEMM.
    assert (frame["cudnn_major"] == 9).all() and frame["likely_family"].isin(["implicit_gemm", "fft", "direct"]).all()
    assert ((0 < frame["likely_family_probability"]) & (frame["likely_family_probability"] <= 1)).all()
    assert frame.loc[2, "likely_family"] == "implicit_gemm"
    # The T4 under cuDNN 8, as its public timings ran: Winograd on its 3x3 layers, as measured there on most.
    assert main(["predict", str(layers), "--gpu", "t4", "--math", "fma", "--cudnn", "8",
                 "-o", str(tmp_path / "t4-8.csv")]) == 0
    assert (pd.read_csv(tmp_path / "t4-8.csv")["likely_family"].iloc[:2] == "winograd").all()
    # Faster on a faster GPU: the same layers on the T4 (public timings: measured) take longer.
    assert main(["predict", str(layers), "--gpu", "t4", "--math", "fma", "-o", str(tmp_path / "t4.json")]) == 0
    t4 = pd.DataFrame(json.loads((tmp_path / "t4.json").read_text()))
    assert t4["gpu_measured"].all() and (t4["predicted_ms"] > frame["predicted_ms"]).all()
    # A GPU with per-algorithm models still ranks its algorithms.
    assert main(["predict", str(layers), "--gpu", "h100", "--math", "fma", "-o", str(tmp_path / "h100.csv")]) == 0
    assert "gpu_measured" not in pd.read_csv(tmp_path / "h100.csv").columns


@pytest.mark.parametrize("extra, words", [
    ([], "strict FP32 only: use --math fma"),
    (["--math", "fma", "--rows", "layer", "-o", "x.csv"], "--rows ranks algorithms"),
    (["--math", "fma", "--algo", "cudnn"], "--algo ranks algorithms"),
    (["--math", "fma", "--cudnn", "7"], "families of cuDNN 8 and 9 only, not 7"),
])
def test_what_the_cross_gpu_model_cannot_do_is_refused_in_one_line(layers, capsys, extra, words):
    assert main(["predict", str(layers), "--gpu", "l4", *extra]) == 2
    err = capsys.readouterr().err
    assert words in err and "Traceback" not in err


def test_a_changed_model_file_is_refused(tmp_path, layers, capsys):
    for name in (persist.CROSS_GPU_CARD, persist.CROSS_GPU_FILE):
        shutil.copy(REPO / "models" / name, tmp_path / name)
    model, card = persist.load_cross_gpu(tmp_path)
    assert set(model.gpus) == set(card["gpus"]) and get_gpu_spec("b200").name not in model.gpus
    with open(tmp_path / persist.CROSS_GPU_FILE, "ab") as handle:
        handle.write(b"\0")
    with pytest.raises(InputError, match="does not match the SHA-256"):
        persist.load_cross_gpu(tmp_path)
    assert main(["predict", str(layers), "--gpu", "a10", "--math", "fma", "--models-dir", str(tmp_path)]) == 2
    assert "SHA-256" in capsys.readouterr().err


def test_cudnn_is_refused_where_seer_has_the_gpus_own_models(layers, capsys):
    for extra in ([], ["--pass", "all"]):
        assert main(["predict", str(layers), "--gpu", "h200", "--math", "fma", "--cudnn", "9", *extra]) == 2
        err = capsys.readouterr().err
        assert "--cudnn names the cuDNN version for a GPU without per-algorithm models" in err and "Traceback" not in err


def test_an_unknown_gpu_is_the_users_mistake(layers, capsys):
    assert main(["predict", str(layers), "--gpu", "nosuch", "--math", "fma"]) == 2
    err = capsys.readouterr().err
    assert "unknown GPU 'nosuch'" in err and "a100" in err and "Traceback" not in err


def test_the_best_constant_ratio_baseline_is_the_least_mape_of_any_one_ratio():
    """benchmarks/cross_gpu.py's oracle baseline: exact where the two GPUs differ by one ratio, and
    never worse than the median ratio or than the plain scaling it bounds."""
    import numpy as np
    from conftest import benchmark_module

    cross_gpu = benchmark_module("cross_gpu")
    rng = np.random.default_rng(0)
    source = np.exp(rng.normal(-2, 1.5, 2000))
    assert cross_gpu.best_constant_mape(source, 1.7 * source) < 0.2
    target = source * 0.8 * np.exp(rng.normal(0, 0.2, len(source)))
    best = cross_gpu.best_constant_mape(source, target)
    for ratio in (np.median(target / source), 0.8, 1.0):
        assert best <= cross_gpu.mape(source * ratio, target)

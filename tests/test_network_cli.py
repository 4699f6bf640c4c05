"""``seer network``: a PyTorch model's convolutions predicted layer by layer, totalled per policy;
one line and exit code 2 for every mistake, and nothing half-written."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("torch")  # the torch extra; CI installs it

from seer.cli import main  # noqa: E402
from seer.layers.files import read_layers  # noqa: E402
from seer.networks.network_time import SEER_GUARDED, SEER_PICKS, TOTAL_COLUMNS, predict_network  # noqa: E402
from seer.predict import persist  # noqa: E402
from seer.schema import PREDICTION_COLUMNS, PYTORCH_CHOICE  # noqa: E402
from seer.torch import build_model, conv_calls  # noqa: E402

NET, INPUT = "torch_nets:every_kind", "2x3x64x48"


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def _refused(code: int, err: str, words: str) -> None:
    lines = [line for line in err.splitlines() if line.startswith("seer: error:")]
    assert code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert words in lines[0], err


def test_csv_is_predicts_with_name_and_calls_and_the_layers_file_reads_back(small_models, tmp_path, capsys):
    out, layers_out = tmp_path / "net.csv", tmp_path / "layers.csv"
    code, shown, _ = run(capsys, "network", NET, "--input", INPUT, "--math", "fma", "--models-dir", small_models,
                         "-o", out, "--layers-out", layers_out)
    assert code == 0
    frame = pd.read_csv(out)
    assert list(frame.columns) == ["layer", "name", "calls", *PREDICTION_COLUMNS]
    found = conv_calls(build_model(NET), (2, 3, 64, 48))
    assert list(frame.drop_duplicates("name")["name"]) == list(found.layers["name"])
    assert frame.loc[frame["name"] == "shared.conv", "calls"].eq(2).all()
    per_call = read_layers(layers_out)  # seer predict's reader: every row checked
    assert list(per_call["name"]) == list(found.per_call()["name"]) and len(per_call) == 10
    assert "seer's picks" in shown and "up" in shown and "transposed convolution" in shown


def test_totals_are_the_sums_of_calls_times_predicted_times(small_models):
    model = persist.load_model("h100", models_dir=small_models)
    found = conv_calls(build_model(NET), (2, 3, 64, 48))
    result = predict_network(model, found.layers, "fma")
    totals = result.totals.set_index("policy")
    assert list(result.totals.columns) == list(TOTAL_COLUMNS) and result.totals["policy"].iloc[0] == SEER_PICKS
    picks = model.pick(found.layers, "fma")
    assert np.isclose(totals.loc[SEER_PICKS, "predicted_ms"], (found.layers["calls"] * picks["best_ms"]).sum())
    predictions = model.predict(found.layers, "fma")
    calls = found.layers["calls"].to_numpy()[predictions["layer"]]
    for algo, runs in predictions.assign(weighted=calls * predictions["predicted_ms"]).groupby("algo"):
        assert np.isclose(totals.loc[algo, "predicted_ms"], runs["weighted"].sum())
        assert totals.loc[algo, "layers_run"] + totals.loc[algo, "layers_not_run"] == len(found.layers)


@pytest.mark.parametrize("math", ["fma", "default"])
def test_totals_under_pytorchs_choice_and_the_guarded_picks(math, capsys):
    model = persist.load_model("h100", math=math)  # the shipped models predict PyTorch's choice
    found = conv_calls(build_model(NET), (32, 3, 64, 48))
    result = predict_network(model, found.layers, math)
    totals = result.totals.set_index("policy")
    assert list(result.totals["policy"][:3]) == [SEER_PICKS, SEER_GUARDED, PYTORCH_CHOICE]
    picks, calls = model.pick(found.layers, math), found.layers["calls"].to_numpy()
    assert np.isclose(totals.loc[PYTORCH_CHOICE, "predicted_ms"], (calls * picks["pytorch_ms"]).sum())
    guarded = np.where(picks["recommended"] == PYTORCH_CHOICE, picks["pytorch_ms"], picks["best_ms"])
    assert np.isclose(totals.loc[SEER_GUARDED, "predicted_ms"], (calls * guarded).sum())
    assert (picks["recommended"] == PYTORCH_CHOICE).any() and totals.loc[PYTORCH_CHOICE, "layers_run"] == len(picks)
    seer = totals.loc[SEER_PICKS, "predicted_ms"]
    assert np.isclose(totals.loc[PYTORCH_CHOICE, "slower_than_seer_pct"], (totals.loc[PYTORCH_CHOICE, "predicted_ms"]
                                                                          / seer - 1) * 100)
    by_energy = predict_network(model, found.layers, math, objective="energy").totals["policy"]
    assert SEER_GUARDED not in set(by_energy) and PYTORCH_CHOICE in set(by_energy)  # the guard weighs time only
    code, shown, _ = run(capsys, "network", NET, "--input", "32x3x64x48", "--math", math)
    assert code == 0 and "PyTorch's own choice" in shown and "guarded (recommended)" in shown
    assert "PyTorch ms" in shown and "surely faster than PyTorch's own choice" in shown


def test_json_has_the_layers_totals_and_skipped_calls(small_models, tmp_path, capsys):
    out = tmp_path / "net.json"
    code, _, _ = run(capsys, "network", "torch_nets:video", "--input", "1x3x8x32x32", "--models-dir", small_models,
                     "-o", out)
    assert code == 0
    about = json.loads(out.read_text())
    assert about["model"] == "torch_nets:video" and about["input"] == [1, 3, 8, 32, 32] and about["math"] == "default"
    assert [layer["name"] for layer in about["layers"]] == ["conv3d", "conv1d"]
    assert about["layers"][0]["dims"] == 3 and about["layers"][0]["calls"] == 1
    assert about["totals"][0]["policy"] == SEER_PICKS and about["skipped"] == []


def test_csv_to_standard_output_keeps_the_terminal_text_off_it(small_models, capsys):
    code, out, err = run(capsys, "network", NET, "--input", INPUT, "--models-dir", small_models, "-o", "-")
    assert code == 0 and out.startswith("layer,name,calls,batch,") and "seer's picks" in err


@pytest.mark.parametrize("argv, words", [
    (["torch_nets:every_kind", "--input", "2x3x64"], "input: expected NxCxHxW or NxCxDxHxW"),
    (["torch_nets:every_kind", "--input", "2x5x64x48"], "input: the model's forward pass on an input of 2x5x64x48"),
    (["torch_nets:nothing", "--input", INPUT], "model: 'torch_nets' has no function 'nothing'"),
    (["torch_nets:not_a_module", "--input", INPUT], "not a torch.nn.Module"),
    (["torch_nets:every_kind", "--input", INPUT, "-o", "-", "--layers-out", "-"], "only one of --out and --layers-out"),
])
def test_mistakes_are_one_line_and_exit_2(small_models, capsys, argv, words):
    code, _, err = run(capsys, "network", *argv, "--models-dir", small_models)
    _refused(code, err, words)


def test_a_failing_forward_writes_nothing(small_models, tmp_path, capsys):
    out = tmp_path / "net.csv"
    code, _, err = run(capsys, "network", NET, "--input", "2x5x64x48", "--models-dir", small_models, "-o", out,
                       "--layers-out", tmp_path / "layers.csv")
    _refused(code, err, "forward pass")
    assert list(tmp_path.iterdir()) == []


def test_an_unwritable_output_fails_before_the_model_is_built(small_models, tmp_path, capsys):
    code, _, err = run(capsys, "network", "torch_nets:nothing", "--input", INPUT, "--models-dir", small_models,
                       "-o", tmp_path / "no" / "such" / "net.csv")
    _refused(code, err, "no such folder")


@pytest.mark.parametrize("pass_", ["bwd_data", "bwd_filter"])
def test_a_backward_pass_of_a_network_totals_its_own_algorithms_and_pytorchs(pass_, tmp_path, capsys):
    from seer.algorithms import algorithm_names

    out = tmp_path / "net.json"
    code, shown, _ = run(capsys, "network", NET, "--input", "32x3x64x48", "--gpu", "h200", "--pass", pass_,
                         "--math", "fma", "-o", out)  # the shipped H200 models of the backward passes
    assert code == 0 and f"h200 backward {'data (dgrad)' if pass_ == 'bwd_data' else 'filter (wgrad)'}" in shown
    about = json.loads(out.read_text())
    assert about["pass"] == pass_ and about["gpu"] == "h200"
    policies = [row["policy"] for row in about["totals"]]
    assert policies[:3] == [SEER_PICKS, SEER_GUARDED, PYTORCH_CHOICE]
    assert set(policies[3:]) <= set(algorithm_names("cudnn", pass_=pass_))
    code, _, err = run(capsys, "network", NET, "--input", INPUT, "--gpu", "h100", "--pass", pass_)
    _refused(code, err, f"no trained {pass_} model for GPU 'h100'")


def test_a_layer_whose_input_comes_channels_last_is_named_for_its_layout(capsys):
    """The models predict NC[D]HW times; a convolution that gets a channels-last input (after
    ConvNeXt's permutes), which PyTorch runs in NHWC, is named in a note, not passed off as NCHW."""
    found = conv_calls(build_model("torch_nets:permuted"), (2, 3, 16, 16))
    assert dict(zip(found.layers["name"], found.channels_last)) == {"stem": False, "dw": True}
    assert not conv_calls(build_model(NET), (2, 3, 24, 24)).channels_last.any()
    for extra in ([], ["--training"]):
        code, shown, _ = run(capsys, "network", "torch_nets:permuted", "--input", "8x3x56x56", "--gpu", "h200",
                             *extra)
        assert code == 0 and "1 layer (dw) got its input packed channels-last" in shown, shown
    code, shown, _ = run(capsys, "network", NET, "--input", INPUT, "--gpu", "h200")
    assert code == 0 and "channels-last" not in shown


def test_a_networks_training_step_totals_each_pass_and_the_step(tmp_path, capsys):
    from seer.algorithms import PASSES
    from seer.predict.step import STEP_COLUMNS

    out = tmp_path / "step.json"
    code, shown, _ = run(capsys, "network", NET, "--input", "32x3x64x48", "--gpu", "h200", "--pass", "all",
                         "--math", "fma", "-o", out)  # the shipped H200 models of all three passes
    assert code == 0 and "one training step" in shown and "training step" in shown
    about = json.loads(out.read_text())
    assert about["pass"] == "all" and about["gpu"] == "h200" and about["math"] == "fma"
    totals = {row["pass"]: row for row in about["totals"]}
    assert list(totals) == [*PASSES, "step"]
    assert totals["step"]["seer_ms"] == pytest.approx(sum(totals[p]["seer_ms"] for p in PASSES))
    assert totals["step"]["pytorch_ms"] == pytest.approx(sum(totals[p]["pytorch_ms"] for p in PASSES))
    layers = pd.DataFrame(about["layers"])
    assert set(STEP_COLUMNS) <= set(layers.columns) and {"name", "calls"} <= set(layers.columns)
    assert totals["step"]["seer_ms"] == pytest.approx(float((layers["calls"] * layers["step_ms"]).sum()))
    csv = tmp_path / "step.csv"
    assert run(capsys, "network", NET, "--input", "32x3x64x48", "--gpu", "h200", "--pass", "all", "-o", csv)[0] == 0
    assert len(pd.read_csv(csv)) == len(layers)
    again = tmp_path / "training.csv"  # --training is --pass all
    assert run(capsys, "network", NET, "--input", "32x3x64x48", "--gpu", "h200", "--training", "-o", again)[0] == 0
    assert again.read_bytes() == csv.read_bytes()
    with pytest.raises(SystemExit) as stop:  # argparse's own usage error
        main(["network", NET, "--input", INPUT, "--pass", "bwd_data", "--training"])
    assert stop.value.code == 2 and "not allowed with argument --pass" in capsys.readouterr().err
    code, _, err = run(capsys, "network", NET, "--input", INPUT, "--gpu", "h100", "--pass", "all")
    _refused(code, err, "no trained fwd, bwd_data, bwd_filter model for GPU 'h100'")
    code, _, err = run(capsys, "network", NET, "--input", INPUT, "--pass", "all", "--objective", "energy")
    _refused(code, err, "--objective is for one pass")


def test_a_networks_sparsity_ranks_seers_sparse_kernels_where_the_gpu_has_their_model(tmp_path, capsys):
    out = tmp_path / "net.json"
    code, shown, _ = run(capsys, "network", "torch_nets:resnet50", "--input", "1x3x224x224", "--gpu", "h200",
                         "--math", "fma", "--sparsity", "0.99", "-o", out)
    assert code == 0 and "SEER_SPARSE_GATHER everywhere" in shown
    about = json.loads(out.read_text())
    totals = {row["policy"]: row for row in about["totals"]}
    assert totals["SEER_SPARSE_GATHER"]["layers_run"] == 53  # every layer of ResNet-50 takes it
    # At 99% zeros, among cuDNN's algorithms, seer's picks gain from the sparse kernels: without them the
    # network predicts slower. (Ranked with seer's own dense kernels too, the split-K one wins these layers
    # at batch 1: measured on the sparse-seed grid, docs/sparse.md.)
    picks = {}
    for name, extra in (("sparse", ["--sparsity", "0.99"]), ("dense", [])):
        code, _, _ = run(capsys, "network", "torch_nets:resnet50", "--input", "1x3x224x224", "--gpu", "h200",
                         "--math", "fma", "--algo", "cudnn,sparse" if extra else "cudnn", *extra,
                         "-o", tmp_path / f"{name}.json")
        assert code == 0
        picks[name] = {row["policy"]: row for row in json.loads((tmp_path / f"{name}.json").read_text())["totals"]}
    assert picks["sparse"][SEER_PICKS]["predicted_ms"] < picks["dense"][SEER_PICKS]["predicted_ms"]
    assert "SEER_SPARSE_GATHER" not in picks["dense"]


def test_a_networks_training_step_ranks_the_sparse_kernels_in_its_forward_pass(tmp_path, capsys):
    out = tmp_path / "step.csv"
    code, shown, err = run(capsys, "network", "torch_nets:resnet50", "--input", "8x3x224x224", "--gpu", "h200",
                           "--math", "fma", "--sparsity", "0.99", "--pass", "all", "-o", out)
    assert code == 0, err
    step = pd.read_csv(out)
    assert (step["sparsity"] == 0.99).all() and "SEER_SPARSE_GATHER" in set(step["fwd_algo"])
    assert not step["bwd_data_algo"].astype(str).str.startswith("SEER_SPARSE_").any()
    code, _, _ = run(capsys, "network", "torch_nets:resnet50", "--input", "8x3x224x224", "--gpu", "h200",
                     "--math", "fma", "--pass", "all", "-o", tmp_path / "dense.csv")
    dense = pd.read_csv(tmp_path / "dense.csv")
    assert code == 0 and "sparsity" not in dense and step["step_ms"].sum() < dense["step_ms"].sum()


def test_a_networks_sparsity_ranks_the_sparse_kernels_by_energy_too(tmp_path, capsys):
    out = tmp_path / "net.json"
    code, _, err = run(capsys, "network", "torch_nets:resnet50", "--input", "1x3x224x224", "--gpu", "h200",
                       "--math", "fma", "--sparsity", "0.99", "--objective", "energy", "-o", out)
    assert code == 0, err
    about = json.loads(out.read_text())
    assert {row["policy"] for row in about["totals"]} >= {"SEER_SPARSE_GATHER", "seer"}
    picks = [layer["pick"] for layer in about["layers"]]
    assert "SEER_SPARSE_GATHER" in picks  # the least energy on some layers at 99% zeros
    for layer in about["layers"]:  # ranked by predicted energy, the sparse kernels among the dense
        energies = [a["predicted_mj"] for a in sorted(layer["algorithms"], key=lambda a: a["rank"])]
        assert energies == sorted(energies)


def test_a_sparsity_file_gives_each_named_module_its_own(tmp_path, capsys):
    given = tmp_path / "sparsity.csv"
    given.write_text("name,sparsity\nlayer4.1.conv2,0.99\n")
    out = tmp_path / "net.csv"
    code, _, _ = run(capsys, "network", "torch_nets:resnet50", "--input", "1x3x224x224", "--gpu", "h200",
                     "--math", "fma", "--sparsity", given, "-o", out)
    assert code == 0
    rows = pd.read_csv(out)
    sparse = rows[rows["algo"].astype(str).str.startswith("SEER_SPARSE_")]
    assert set(sparse["name"]) == {"layer4.1.conv2"}  # the others stay dense


def test_a_sparsity_files_crowding_slows_the_sparse_kernel_in_the_totals(tmp_path, capsys):
    totals, picks = {}, {}
    for crowding in ("1.0", "20", ""):
        given = tmp_path / "sparsity.csv"
        given.write_text(f"name,sparsity,crowding\nlayer4.0.conv2,0.99,{crowding}\n")
        out = tmp_path / f"net{crowding}.json"
        code, _, err = run(capsys, "network", "torch_nets:resnet50", "--input", "1x3x224x224", "--gpu", "h200",
                           "--math", "fma", "--algo", "cudnn,sparse", "--sparsity", given, "-o", out)
        assert code == 0, err
        about = json.loads(out.read_text())
        totals[crowding] = {row["policy"]: row["predicted_ms"] for row in about["totals"]}
        picks[crowding] = next(layer for layer in about["layers"] if layer["name"] == "layer4.0.conv2")
    assert picks["1.0"]["pick"] == picks[""]["pick"] == "SEER_SPARSE_GATHER"  # empty: not measured, even
    assert picks["1.0"]["recommended"] == picks[""]["recommended"] == "SEER_SPARSE_GATHER"
    # At crowding 20 the model predicts gather slower than the dense algorithms there.
    assert not picks["20"]["pick"].startswith("SEER_SPARSE_") and not picks["20"]["recommended"].startswith("SEER_")
    assert totals["20"][SEER_GUARDED] > totals["1.0"][SEER_GUARDED] == totals[""][SEER_GUARDED]
    assert totals["20"][SEER_PICKS] > totals["1.0"][SEER_PICKS]


@pytest.mark.parametrize("text, words", [
    ("name,sparsity,crowding\nlayer4.1.conv2,0.9,-2\n", "sparsity.csv:2: crowding: crowding must be a number from 0"),
    ("name,sparsity\nlayer4.1.conv2,1.5\n", "sparsity.csv:2: sparsity: sparsity must be a number from 0 to below 1"),
    ("name,sparsity\nlayer4.1.conv2,+0.5\n", "sparsity.csv:2: sparsity: sparsity must be a number"),  # as in a layer CSV
    ("name,sparsity\nlayer9.conv2,0.9\n", "sparsity.csv:2: name: the network has no convolution module named"),
    ("name,sparsity\nconv1,0.5\nconv1,0.6\n", "sparsity.csv:3: name: 'conv1' is given twice"),
    # Blank and comment lines count: the line is the file's own.
    ("# measured on 8 images\nname,sparsity\n\nconv1,0.5 # first\n\nconv1,0.6\n", "sparsity.csv:6: name: 'conv1'"),
    ("name,sparsity\nconv1,0.5,0.2\n", "sparsity.csv:2: sparsity: more fields (3) than the header's 2 columns"),
    ("module,sparsity\nconv1,0.5\n", "sparsity.csv:1: name: missing column 'name'"),
    ("\n# nothing\n", "sparsity.csv: no header line"),
])
def test_a_bad_sparsity_file_is_one_line_and_exit_2(tmp_path, capsys, text, words):
    given = tmp_path / "sparsity.csv"
    given.write_text(text)
    code, _, err = run(capsys, "network", "torch_nets:resnet50", "--input", "1x3x224x224", "--gpu", "h200",
                       "--sparsity", given)
    _refused(code, err, words)


@pytest.mark.parametrize("argv, words", [
    (["--sparsity", "1", "--gpu", "h200"], "--sparsity must be a share of zeros in [0, 1) or a CSV file"),
    (["--sparsity", "0.9", "--gpu", "h100", "--models-dir", "MODELS"], "h100 has no model of seer's sparse kernels"),
    (["--sparsity", "0.9", "--gpu", "h200", "--pass", "bwd_data"], "--sparsity ranks seer's sparse kernels in the forward"),
    (["--sparsity", "no-such-file.csv", "--gpu", "h200"], "no such file"),
])
def test_sparsity_mistakes_are_one_line_and_exit_2(capsys, argv, words, models_without_sparse):
    argv = [str(models_without_sparse) if a == "MODELS" else a for a in argv]
    code, _, err = run(capsys, "network", "torch_nets:resnet50", "--input", "1x3x224x224", *argv)
    _refused(code, err, words)

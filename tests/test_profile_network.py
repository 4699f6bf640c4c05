"""seer profile-network on the CPU: policies, sizes, shards, the kernel evidence, and the tables
rebuilt from the records the H100 wrote (benchmarks/results/)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import benchmark_module
from seer.cli import main
from seer.errors import InputError
from seer.networks.kernel_evidence import KernelEvidence
from seer.networks.profile_network import (COMPILED_COLUMNS, KINDS, OVERALL_COLUMNS, PASS_KEY, WALL_COLUMNS,
                                           call_layouts, mape_over_sizes, parse_policies, parse_sizes, pick_counts,
                                           plan_jobs, read_profile, untraced_passes, write_tables)

RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
DATASET = Path(__file__).resolve().parents[1] / "data" / "h100"


def test_policies():
    assert parse_policies("seer, Heuristic,implicit_gemm") == ["seer", "heuristic", "IMPLICIT_GEMM"]
    everything = parse_policies("all")
    assert everything[:5] == ["seer", "seer-graph", "seer-all", "heuristic", "benchmark"] and "WINOGRAD_NONFUSED" in everything
    assert parse_policies("Seer-Graph") == ["seer-graph"]
    assert parse_policies("seer,all") == everything  # no repeats
    for bad in ("", "fastest", "SEER_DIRECT"):
        with pytest.raises(InputError):
            parse_policies(bad)


def test_sizes():
    sizes = parse_sizes("224:512:100")
    assert len(sizes) == 100 and sizes[0] == 224 and sizes[-1] == 512
    assert parse_sizes("320,224,320") == [224, 320]
    for bad in ("224:512", "512:224:3", "a,b", "0,3", "224:512:0"):
        with pytest.raises(InputError):
            parse_sizes(bad)


def test_shards_split_the_jobs_without_overlap():
    shapes = [(1, 3, s, s) for s in (224, 256, 288)]
    every = plan_jobs(["a", "b"], shapes, ["fma", "default"], ["seer"])
    shards = [plan_jobs(["a", "b"], shapes, ["fma", "default"], ["seer"], i, 5) for i in range(1, 6)]
    assert sorted(map(repr, (j for s in shards for j in s))) == sorted(map(repr, every)) and len(every) == 12
    assert every[0].input == "1x3x224x224"


@pytest.mark.slow
def test_kernel_evidence_from_the_h100_dataset():
    evidence = KernelEvidence.from_dataset(DATASET)
    sgemm = "void implicit_convolve_sgemm<float, float, 1024, 5, 5, 3, 3, 3, 1, false, false, true>(int, int)"
    assert evidence.verify([sgemm], "IMPLICIT_GEMM")[0] == "verified"
    assert evidence.verify([sgemm], "FFT")[0] == "mismatch"
    fft = "void fft2d_r2c_32x32<float, false, 1u, false>(float2*, float const*, int)"
    assert evidence.verify([fft, sgemm], "FFT")[0] == "mismatch"  # every kernel must allow it
    # PyTorch's own kernels around a call (padding, bias) say nothing about the algorithm.
    pad = "void at::native::(anonymous namespace)::reflection_pad2d_out_kernel<float>(float const*)"
    assert evidence.verify([pad, sgemm], "IMPLICIT_GEMM")[0] == "verified"
    assert evidence.verify([pad], "IMPLICIT_GEMM")[0] == "no_kernels"
    assert evidence.verify([], "GEMM")[0] == "no_kernels"


def test_overall_table_is_what_the_records_say():
    """The committed overall.csv of the ResNet-152 sweep is rebuilt from its raw records."""
    from seer.collect.store import RunStore

    committed = pd.read_csv(RESULTS / "resnet152-sizes" / "overall.csv")
    passes = RunStore(RESULTS / "resnet152-sizes", kinds=KINDS).read("pass_times", PASS_KEY)
    assert len(committed) == len(passes) == 100 * 2 * 4
    # Measured before the wall times existed (WALL_COLUMNS): every other column, in order.
    measured = [c for c in OVERALL_COLUMNS if c not in WALL_COLUMNS]
    assert list(committed.columns[: len(measured)]) == measured
    assert (committed["status"] == "ok").all()
    merged = committed.merge(passes, on=list(PASS_KEY), suffixes=("", "_raw"))
    assert len(merged) == len(committed)
    assert (merged["conv_ms"] - merged["conv_ms_raw"]).abs().max() < 1e-4 * merged["conv_ms"].max()
    errors = mape_over_sizes(committed)
    assert set(errors["policy"]) == {"seer", "IMPLICIT_PRECOMP_GEMM"}  # PyTorch's policies have no prediction
    assert (errors["sizes"] == 100).all()


def test_retrace_finds_the_passes_measured_without_a_tracer(tmp_path):
    """--retrace measures again a pass whose latest layers are untraced, and only those."""
    from seer.collect.store import RunStore

    def record(size, stamp, verified):
        base = {"network": "resnet18", "input": f"1x3x{size}x{size}", "math": "fma", "policy": "seer",
                "size": size, "batch": 1, "collected_at": stamp}
        store = RunStore(tmp_path, tag=stamp[-2:], kinds=KINDS)
        store.append("layer_times", [{**base, "name": "conv1", "measured_ms": 0.1, "verified": verified}])
        store.append("pass_times", [{**base, "status": "ok", "conv_ms": 0.1}])
        store.close()

    record(224, "2026-11-20T10:00:00+00:00", "untraced")
    record(256, "2026-11-20T10:00:01+00:00", "verified")
    assert untraced_passes(tmp_path) == {("resnet18", "1x3x224x224", "fma", "seer")}
    record(224, "2026-11-24T10:00:02+00:00", "verified")  # measured again, traced
    assert untraced_passes(tmp_path) == set()
    assert (read_profile(tmp_path)[1]["verified"] == "verified").all()


@pytest.mark.slow
def test_tables_and_plots_from_the_networks_records(tmp_path):
    out = tmp_path / "networks"
    shutil.copytree(RESULTS / "networks" / "raw", out / "raw")
    tables = write_tables(out)
    overall, layers = pd.read_csv(tables.overall), pd.read_csv(tables.layers)
    assert len(overall) == 6 * 2 * 2 * 3  # networks x batches x maths x policies
    assert set(overall["policy"]) == {"seer", "heuristic", "benchmark"}
    # A pass's convolution time is the sum of its layers' calls x measured time.
    totals = (layers["calls"] * layers["measured_ms"]).groupby([layers[k] for k in PASS_KEY]).sum()
    joined = overall.set_index(list(PASS_KEY))["conv_ms"].to_frame().join(totals.rename("sum"))
    assert ((joined["conv_ms"] - joined["sum"]).abs() <= 1e-5 * joined["conv_ms"]).all()
    assert (layers.loc[layers["policy"] == "seer", "verified"] == "verified").all()
    assert {p.name for p in tables.plots} >= {"resnet50-b1-fma-slowest.png", "inception_v3-b32-default-slowest.png"}
    passes, _ = read_profile(out)
    assert len(mape_over_sizes(passes)) == 6 * 2 * 2  # seer's prediction per network, batch and math


def test_cli_refusals_and_a_slurm_script_without_a_gpu(tmp_path, capsys):
    assert main(["profile-network", "resnet50", "--sizes", "224:512", "--out", str(tmp_path)]) == 2
    assert "--sizes" in capsys.readouterr().err
    assert main(["profile-network", "resnet50", "--sizes", "224", "--algo", "fastest", "--out", str(tmp_path)]) == 2
    assert main(["profile-network", "resnet50", "--sizes", "224", "--tables-only", "--out", str(tmp_path / "none")]) == 2
    assert main(["profile-network", "resnet50", "--sizes", "224", "--training", "--compiled", "--out", str(tmp_path)]) == 2
    assert "--compiled times forward passes" in capsys.readouterr().err
    assert main(["profile-network", "--sizes", "224", "--out", str(tmp_path)]) == 2
    assert "give at least one MODEL" in capsys.readouterr().err
    assert main(["profile-network", "resnet50", "--out", str(tmp_path)]) == 2
    assert "--sizes or --input" in capsys.readouterr().err
    assert main(["profile-network", "resnet50", "--sizes", "224", "--no-layout-optimization", "--out", str(tmp_path)]) == 2
    assert "give --compiled too" in capsys.readouterr().err
    script = tmp_path / "sweep.sh"
    argv = ["profile-network", "resnet152", "--sizes", "224:512:100", "--math", "fma,default", "--out", "res",
            "--slurm", str(script), "--slurm-tasks", "8", "--slurm-constraint", "h100", "--slurm-time", "01:30:00"]
    assert main(argv) == 0
    text = script.read_text()
    assert "#SBATCH --array=1-8" in text and "#SBATCH --constraint=h100" in text
    assert "--no-tables" in text and "--shard" in text and "--slurm" not in text.split("#SBATCH")[-1].split("\n", 1)[1]
    assert main([*argv[:-6], "--slurm", str(script), "--slurm-tasks", "500"]) == 2  # more tasks than jobs


#: benchmarks/network_wall.py, which scores the committed wall times.
WALL = benchmark_module("network_wall")


def _committed_profile(folder: str) -> tuple[pd.DataFrame, pd.DataFrame]:
    """A committed profile's overall.csv and the passes its raw records give: 15 networks x
    batch 1 and 32 x two math modes x three policies."""
    committed = pd.read_csv(RESULTS / folder / "overall.csv")
    passes, _ = read_profile(RESULTS / folder)
    assert len(committed) == len(passes) == 15 * 2 * 2 * 3
    return committed, passes


def test_the_network_wall_times_are_what_their_records_say():
    """The committed eager and CUDA-graph wall times of 15 networks (benchmarks/results/h100-network-wall)
    are rebuilt from their raw records, and benchmarks/network_wall.py scores them as the report says."""
    committed, passes = _committed_profile("h100-network-wall")
    assert (committed["status"] == "ok").all()
    for column in ("eager_ms", "graph_ms", "forward_ms"):
        assert (committed[column] > 0).all()
        merged = committed.merge(passes, on=list(PASS_KEY), suffixes=("", "_raw"))
        assert np.allclose(merged[column], merged[f"{column}_raw"], rtol=1e-5)
    graph = WALL.summary(WALL.comparison(committed, "graph_ms"))
    assert graph["cases"] == 60 and graph["slower_than_1pct"] == 2
    eager = WALL.summary(WALL.comparison(committed, "eager_ms"))
    assert eager["slower_than_1pct"] == 15 and eager["slower_beyond_spread"] == 1
    assert round(eager["median_ratio_largest_batch_fma"], 3) == 0.960
    assert round(graph["median_ratio_largest_batch_fma"], 3) == 0.871


def test_the_wall_times_of_picks_guarded_for_cuda_graphs_are_what_their_records_say():
    """benchmarks/results/h100-network-wall-graph: seer-graph (picks guarded for CUDA graphs)
    against PyTorch's policies, rebuilt from the records and scored as the report says."""
    committed, _ = _committed_profile("h100-network-wall-graph")
    assert set(committed["policy"]) == {"seer-graph", "heuristic", "benchmark"}
    graph = WALL.summary(WALL.comparison(committed, "graph_ms", seer="seer-graph"))
    assert graph["cases"] == 60 and graph["slower_than_1pct"] == 3
    assert round(graph["median_ratio_largest_batch_fma"], 3) == 0.866


def test_the_compiled_wall_times_are_what_their_records_say(tmp_path):
    """benchmarks/results/h200-network-compiled: seer-graph against PyTorch's policies under
    torch.compile(mode="reduce-overhead") and in CUDA graphs, rebuilt from the records and scored
    as its README says; its summary.md is what network_wall.py writes."""
    folder = RESULTS / "h200-network-compiled"
    committed = pd.read_csv(folder / "overall.csv")
    passes, _ = read_profile(folder)
    assert len(committed) == len(passes) == 15 * 3 and (committed["status"] == "ok").all()
    merged = committed.merge(passes, on=list(PASS_KEY), suffixes=("", "_raw"))
    # Every policy compiled as torch.compile does; the first 12 networks were timed before the mode was recorded.
    assert "layout_optimization" not in committed
    assert set(committed["compile_mode"].dropna()) == {"reduce-overhead"} and committed["compile_mode"].notna().sum() == 9
    for column in COMPILED_COLUMNS[:3]:
        assert (committed[column] > 0).all()
        assert np.allclose(merged[column], merged[f"{column}_raw"], rtol=1e-5)
    compiled = WALL.summary(WALL.comparison(committed, "compiled_ms", seer="seer-graph"))
    assert compiled["cases"] == 15 and compiled["slower_than_1pct"] == 1
    assert round(compiled["median_ratio_largest_batch_fma"], 3) == 0.903
    graph = WALL.summary(WALL.comparison(committed, "graph_ms", seer="seer-graph"))
    assert graph["slower_than_1pct"] == 0 and round(graph["median_ratio_largest_batch_fma"], 3) == 0.917
    assert WALL.main([str(folder / "overall.csv"), "--out", str(tmp_path / "summary.md")]) == 0
    assert (tmp_path / "summary.md").read_text() == (folder / "summary.md").read_text()


def test_seer_compile_and_its_layout_control_are_what_their_records_say(tmp_path):
    """benchmarks/results/h200-network-seer-compile: seer-graph compiled by seer.torch.compile
    (inductor's layout optimisation off) against PyTorch's policies compiled by torch.compile, and,
    from h200-network-compiled-no-layout-opt (the same call, the other GPUs), against PyTorch's
    compiled with the optimisation off too."""
    folder, control = RESULTS / "h200-network-seer-compile", RESULTS / "h200-network-compiled-no-layout-opt"
    runs = [pd.read_csv(f / "overall.csv") for f in (folder, control)]
    for frame, f in zip(runs, (folder, control)):
        assert len(frame) == len(read_profile(f)[0]) and (frame["status"] == "ok").all()
        assert (frame["compiled_ms"] > 0).all() and (frame["compile_mode"] == "reduce-overhead").all()
    seer_run, off = runs
    assert (seer_run["layout_optimization"] == seer_run["policy"].isin(["heuristic", "benchmark"])).all()
    assert set(off["policy"]) == {"heuristic", "benchmark"} and not off["layout_optimization"].any()
    compiled = WALL.summary(WALL.comparison(seer_run, "compiled_ms", seer="seer-graph"))
    assert compiled["cases"] == 15 and compiled["slower_than_1pct"] == 0
    assert round(compiled["median_ratio_largest_batch_fma"], 3) == 0.768
    both = pd.concat([frame.assign(run=i) for i, frame in enumerate(runs)], ignore_index=True)
    against_off = WALL.summary(WALL.layout_control(both))
    assert against_off["cases"] == 15 and against_off["slower_than_1pct"] == 0
    assert round(against_off["median_ratio_largest_batch_fma"], 3) == 0.912
    assert WALL.main([str(folder / "overall.csv"), str(control / "overall.csv"), "--out", str(tmp_path / "s.md")]) == 0
    assert (tmp_path / "s.md").read_text() == (folder / "summary.md").read_text()


def test_the_wall_times_of_picks_weighed_for_the_whole_pass_are_what_their_records_say():
    """benchmarks/results/h100-network-wall-pass: the eager policy weighing its picks for the
    whole pass (host time against GPU time), rebuilt from the records and scored as the report
    says, beside the noise of PyTorch's own two policies."""
    committed, passes = _committed_profile("h100-network-wall-pass")
    merged = committed.merge(passes, on=list(PASS_KEY), suffixes=("", "_raw"))
    assert np.allclose(merged["eager_ms"], merged["eager_ms_raw"], rtol=1e-5)
    eager = WALL.summary(WALL.comparison(committed, "eager_ms"))
    assert eager["slower_than_1pct"] == 14 and eager["slower_beyond_spread"] == 2
    assert eager["pytorch_apart_1pct"] == 31
    assert round(eager["median_ratio_largest_batch_fma"], 3) == 0.972


def test_training_jobs_are_planned_apart_from_forward_ones():
    shapes = [(32, 3, 224, 224)]
    jobs = plan_jobs(["resnet18"], shapes, ["fma"], ["seer", "heuristic"], step="training")
    assert [j.step for j in jobs] == ["training"] and plan_jobs(["resnet18"], shapes, ["fma"], ["seer"])[0].step == "forward"
    with pytest.raises(ValueError):
        plan_jobs(["resnet18"], shapes, ["fma"], ["seer"], step="backward")


def test_a_training_step_clears_the_gradients_runs_forward_and_backward():
    torch = pytest.importorskip("torch")
    from torch import nn

    from seer.torch.convolution import training_step

    class WithAuxiliary(nn.Module):  # as GoogLeNet in train mode: logits first, an auxiliary output beside
        def __init__(self):
            super().__init__()
            self.conv, self.head, self.aux = nn.Conv2d(3, 8, 3), nn.Linear(8, 4), nn.Linear(8, 4)

        def forward(self, x):
            pooled = self.conv(x).relu().mean(dim=(2, 3))
            return self.head(pooled), self.aux(pooled)

    torch.manual_seed(0)
    model = WithAuxiliary().train()
    step = training_step(model, torch.randn(2, 3, 16, 16))
    step()
    first = model.conv.weight.grad.clone()
    step()  # gradients set anew, not accumulated
    assert torch.allclose(model.conv.weight.grad, first, rtol=1e-5, atol=1e-7)
    assert model.head.weight.grad is not None and model.aux.weight.grad is None  # the loss is the logits' mean


@pytest.mark.parametrize("name, rows, cases, median_fma", [
    # 15 networks at batch 32, both math modes, with the backward models trained on 5,446 layers
    ("h200-training-steps-graph-20261129", 15 * 2 * 4, 30, 0.895),
    # with the models trained on 5,826 layers (wgrad's with kernel paths): 15 networks under fma,
    # 7 under default math (the device time ran out)
    ("h200-training-steps-graph-20261129b", (15 + 7) * 4, 22, 0.883),
    # each layer's three passes timed too: 4 networks (R3D-18 among them), both math modes, before and after
    # the untimed step per wall window; then with an eager step's picks confirmed
    ("h200-training-steps-layers-20261129a", 4 * 2 * 4, 8, 0.918),
    ("h200-training-steps-layers-20261129", 4 * 2 * 4, 8, 0.918),
    ("h200-training-steps-confirmed-20261129", 10 * 4, 10, 0.884),
    # with the guard's 50% level under fma; then with fewer picks timed again where all of them were slower
    # (no seer-graph policy: None)
    ("h200-training-steps-guard50-20261129", 3 * 4, 3, 0.879),
    ("h200-training-steps-backoff-20261129", 2 * 3, None, None),
])
def test_the_training_steps_timed_again_are_what_their_records_say(tmp_path, name, rows, cases, median_fma):
    """benchmarks/results/h200-training-steps-graph-*: whole training steps at batch 32; steps.csv is
    what the raw records give, and network_wall.py scores it as its README and summary.md say."""
    folder = RESULTS / name
    shutil.copytree(folder / "raw", tmp_path / "raw")
    tables = write_tables(tmp_path)
    committed = pd.read_csv(folder / "steps.csv")
    assert tables.steps.read_text() == (folder / "steps.csv").read_text()
    assert len(committed) == rows and (committed["status"] == "ok").all()
    if cases is not None:
        guarded = WALL.summary(WALL.comparison(committed, "graph_ms", seer="seer-graph"))
        assert guarded["cases"] == cases and guarded["slower_than_1pct"] == 0
        assert round(guarded["median_ratio_largest_batch_fma"], 3) == median_fma
    assert WALL.main([str(folder / "steps.csv"), "--out", str(tmp_path / "summary.md")]) == 0
    assert (tmp_path / "summary.md").read_text() == (folder / "summary.md").read_text()
    if "conv_ms" in committed:  # its layers' passes: the step's sums are theirs
        layers = pd.read_csv(tables.step_layers)
        sums = (layers["calls"] * layers["measured_ms"]).groupby([layers["network"], layers["math"],
                                                                  layers["policy"]]).sum()
        steps = committed.set_index(["network", "math", "policy"])["conv_ms"]
        assert np.allclose(sums.reindex(steps.index), steps, rtol=1e-5)


def test_training_step_records_make_steps_csv_alone(tmp_path):
    from seer.collect.store import RunStore
    from seer.networks.profile_network import STEPS_COLUMNS, read_steps

    store = RunStore(tmp_path, tag="t", kinds=KINDS)
    base = {"network": "resnet50", "input": "32x3x224x224", "math": "fma", "size": 224, "batch": 32,
            "status": "ok", "collected_at": "2026-11-27T00:00:00+00:00"}
    store.append("step_times", [{**base, "policy": "heuristic", "eager_ms": 40.0, "graph_ms": 38.0},
                                {**base, "policy": "seer", "eager_ms": 45.0, "graph_ms": 30.0, "fwd_picks": 20,
                                 "bwd_data_picks": 10, "bwd_filter_picks": 3},
                                {**base, "policy": "seer", "eager_ms": 44.0, "graph_ms": 31.0, "fwd_picks": 20,
                                 "bwd_data_picks": 10, "bwd_filter_picks": 3}])  # measured again: the last wins
    store.close()
    tables = write_tables(tmp_path)
    assert tables.overall is None and tables.steps == tmp_path / "steps.csv" and not (tmp_path / "overall.csv").exists()
    steps = pd.read_csv(tables.steps)
    assert list(steps.columns[:len(STEPS_COLUMNS)]) == list(STEPS_COLUMNS)
    assert steps.set_index("policy").loc["seer", "eager_ms"] == 44.0 and len(steps) == 2
    assert len(read_steps(tmp_path)) == 2
    assert read_profile(tmp_path)[0].empty  # forward passes are not mixed with steps


def test_a_training_steps_layer_passes_make_step_layers_csv_and_its_sums(tmp_path):
    """Each layer's three passes are records of their own; the step's record sums them per pass
    (calls x ms), and a step recorded again keeps only its newer layers' rows."""
    from seer.collect.store import RunStore
    from seer.layers.shapes import LAYER_FIELDS
    from seer.networks.profile_network import STEP_CONV_COLUMNS, STEP_LAYERS_COLUMNS, step_conv_sums

    base = {"network": "resnet50", "input": "32x3x224x224", "math": "fma", "size": 224, "batch": 32}
    fields = dict.fromkeys(LAYER_FIELDS, 1)
    old, new = "2026-11-29T10:00:00+00:00", "2026-11-29T11:00:00+00:00"
    rows = [{**base, **fields, "policy": "seer", "collected_at": stamp, "name": name, "calls": calls, "pass": pass_,
             "algo": algo, "predicted_ms": predicted, "measured_ms": ms * (2 if stamp == old else 1)}
            for stamp in (old, new)
            for name, calls, pass_, algo, predicted, ms in (
                ("conv1", 1, "fwd", "IMPLICIT_PRECOMP_GEMM", 0.5, 0.4), ("conv1", 1, "bwd_data", "pytorch", 0.9, 1.0),
                ("conv1", 1, "bwd_filter", "BWD_FILTER_ALGO_1", 0.7, 0.8),
                ("layer1.0.conv2", 3, "fwd", "pytorch", 0.2, 0.25),
                ("layer1.0.conv2", 3, "bwd_data", "BWD_DATA_ALGO_0", None, 0.3),
                ("layer1.0.conv2", 3, "bwd_filter", "pytorch", 0.1, 0.1))]
    sums = step_conv_sums(rows[6:])
    assert list(sums) == list(STEP_CONV_COLUMNS)
    assert sums["fwd_conv_ms"] == pytest.approx(0.4 + 3 * 0.25) and sums["fwd_predicted_conv_ms"] == pytest.approx(1.1)
    assert sums["bwd_data_predicted_conv_ms"] is None and sums["predicted_conv_ms"] is None  # a row not predicted
    assert sums["conv_ms"] == pytest.approx(0.4 + 1.0 + 0.8 + 3 * (0.25 + 0.3 + 0.1))
    assert step_conv_sums([]) == {}
    store = RunStore(tmp_path, tag="t", kinds=KINDS)
    store.append("step_layer_times", rows)
    store.append("step_times", [{**base, "policy": "seer", "status": "ok", "collected_at": new, **sums}])
    store.close()
    tables = write_tables(tmp_path)
    layers = pd.read_csv(tables.step_layers)
    assert list(layers.columns) == list(STEP_LAYERS_COLUMNS) and len(layers) == 6
    assert sorted(set(layers["pass"])) == ["bwd_data", "bwd_filter", "fwd"]
    assert (layers["calls"] * layers["measured_ms"]).sum() == pytest.approx(sums["conv_ms"])  # the newer rows
    steps = pd.read_csv(tables.steps)
    assert steps.loc[0, "conv_ms"] == pytest.approx(sums["conv_ms"]) and np.isnan(steps.loc[0, "predicted_conv_ms"])
    store = RunStore(tmp_path, tag="u", kinds=KINDS)  # measured again, its layers failing: none of the old rows stay
    store.append("step_times", [{**base, "policy": "seer", "status": "ok", "collected_at": "2026-11-29T12:00:00+00:00",
                                 "layers_error": "oom"}])
    store.close()
    assert write_tables(tmp_path).step_layers is None


def test_the_profiler_loads_each_pass_model_once(tmp_path):
    """The forward's model, and each backward pass's for the training steps, from one cache."""
    from seer.networks.profile_network import NetworkProfiler, ProfileOptions

    profiler = NetworkProfiler.__new__(NetworkProfiler)  # no GPU here: the models alone
    profiler.options, profiler._models = ProfileOptions(out_dir=tmp_path, gpu="h200"), {}
    for pass_ in ("fwd", "bwd_data", "bwd_filter"):
        model = profiler.seer_model("fma", pass_)
        assert model.pass_ == pass_ and profiler.seer_model("fma", pass_) is model
    assert profiler.seer_model("fma") is profiler.seer_model("fma", "fwd") and len(profiler._models) == 3


def test_a_pass_call_asks_for_one_gradient_only_and_leaves_the_parameters_as_they_were():
    """profile-network's call of one backward pass of a plain module (on the CPU here): the input's
    gradient alone for dgrad, the weight's alone for wgrad, each PyTorch's own."""
    torch = pytest.importorskip("torch")
    from seer.networks.profile_network import NetworkProfiler

    profiler = NetworkProfiler.__new__(NetworkProfiler)  # no GPU here: the calls alone
    profiler.torch = torch
    torch.manual_seed(0)
    conv = torch.nn.Conv2d(4, 6, 3, padding=1)
    conv.bias.requires_grad_(False)  # as a user may have frozen it: left so
    x = torch.randn(2, 4, 8, 8)
    reference = conv(x.clone().requires_grad_(True))
    for pass_ in ("bwd_data", "bwd_filter"):
        torch.manual_seed(1)
        call, ran = profiler._pass_call(conv, x, pass_)
        torch.manual_seed(1)
        grad_y = torch.randn_like(reference)  # the call's gradient of the output, drawn the same way
        (grad,) = call()
        assert ran is None and conv.weight.requires_grad and not conv.bias.requires_grad
        expected = (torch.nn.grad.conv2d_input(x.shape, conv.weight, grad_y, padding=1) if pass_ == "bwd_data" else
                    torch.nn.grad.conv2d_weight(x, conv.weight.shape, grad_y, padding=1))
        assert torch.allclose(grad, expected, atol=1e-5)
        assert torch.equal(call()[0], grad)  # the forward is kept: the same gradient again
    call, ran = profiler._pass_call(conv, x, "fwd")
    assert torch.allclose(call(), reference.detach()) and not call().requires_grad


def test_a_training_step_may_end_with_an_sgd_step():
    torch = pytest.importorskip("torch")
    from seer.torch.convolution import training_step

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))
    x = torch.randn(2, 3, 8, 8)
    model(x)  # the lazy layer takes its shape
    before = [p.detach().clone() for p in model.parameters()]
    training_step(model, x)()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))  # no optimizer: weights stay
    training_step(model, x, "sgd")()
    assert not any(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    with pytest.raises(InputError, match="unknown optimizer 'adam'"):
        training_step(model, x, "adam")


def test_steps_recorded_with_another_optimizer_are_measured_again(tmp_path):
    from seer.collect.store import RunStore
    from seer.networks.profile_network import NetworkProfiler, ProfileOptions

    store = RunStore(tmp_path, tag="t", kinds=KINDS)
    base = {"network": "resnet50", "input": "32x3x224x224", "math": "fma", "status": "ok"}
    store.append("step_times", [{**base, "policy": "seer"},  # before there was a choice: no optimizer
                                {**base, "policy": "heuristic", "optimizer": "sgd"}])
    store.close()
    profiler = NetworkProfiler.__new__(NetworkProfiler)  # no GPU here: only the bookkeeping
    profiler.store = RunStore(tmp_path, kinds=KINDS)
    for optimizer, done in (("none", "seer"), ("sgd", "heuristic")):
        profiler.options = ProfileOptions(out_dir=tmp_path, optimizer=optimizer)
        assert profiler.done_steps() == {("resnet50", "32x3x224x224", "fma", done)}


def test_tables_only_needs_no_model_or_inputs(tmp_path):
    """``--tables-only`` rebuilds a profile's tables from its records: nothing to profile, so
    neither MODEL nor --sizes is asked for."""
    import shutil

    folder = tmp_path / "profile"
    shutil.copytree(RESULTS / "h200-network-compiled-no-layout-opt" / "raw", folder / "raw")
    assert main(["profile-network", "--tables-only", "--out", str(folder)]) == 0
    rebuilt = pd.read_csv(folder / "overall.csv")
    committed = pd.read_csv(RESULTS / "h200-network-compiled-no-layout-opt" / "overall.csv")
    pd.testing.assert_frame_equal(rebuilt, committed)


def test_the_network_oracle_benchmark_gives_the_committed_totals_and_bound(tmp_path):
    """benchmarks/network_oracle.py on its committed runs: the same totals, and the bound the docs quote."""
    oracle = benchmark_module("network_oracle")
    runs = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "h200-network-oracle"
    assert oracle.main(["--runs", str(runs), "--gpu", "h200", "--passes",
                        str(runs.parent / "h200-network-wall-quiet" / "overall.csv"), "--out", str(tmp_path)]) == 0
    got, committed = pd.read_csv(tmp_path / "oracle.csv"), pd.read_csv(runs / "oracle.csv")
    pd.testing.assert_frame_equal(got, committed)
    b32 = got[(got["batch"] == 32) & (got["math"] == "fma") & (got["algorithms"] == "all")]
    assert len(b32) == 15 and (b32["untimed_calls"] == 0).all()
    assert round(b32["oracle_pass_bound"].median(), 3) == 0.853
    assert (b32["oracle_ms"] <= b32[["pytorch_ms", "seer_ms", "seer_unguarded_ms"]].min(axis=1) + 1e-9).all()


def test_the_confirmed_eager_runs_are_what_their_records_say():
    """benchmarks/results/h200-network-wall-confirmed (the picks confirmed by timing the swapped pass
    taking turns with PyTorch's): rebuilt from the records and scored as the docs say. Every case
    more than 1% slower ran no pick: seer's model there was PyTorch's own."""
    committed, _ = _committed_profile("h200-network-wall-confirmed")
    eager = WALL.comparison(committed, "eager_ms")
    scored = WALL.summary(eager)
    assert scored["cases"] == 60 and scored["slower_than_1pct"] == 15 and scored["slower_beyond_spread"] == 0
    assert scored["cases_with_picks"] == 6 and scored["slower_with_picks"] == 0
    assert round(scored["median_ratio_largest_batch_fma"], 3) == 0.991
    picked = eager[eager["seer_picks"] > 0]
    assert set(picked["network"]) == {"vgg16", "wide_resnet50_2", "resnet152", "resnet101", "resnet50", "googlenet"}
    assert (picked["batch"] == 32).all() and (picked["math"] == "fma").all()
    # DenseNet-121: picks weighed, timed 1.099 of PyTorch's pass taking turns, and all turned down.
    densenet = committed[(committed["network"] == "densenet121") & (committed["batch"] == 32)
                         & (committed["math"] == "fma") & (committed["policy"] == "seer")].iloc[0]
    assert round(densenet["confirmed_ratio"], 3) == 1.099 and densenet["fwd_picks"] == 0


def test_the_network_host_cost_summary_is_what_its_runs_say():
    """benchmarks/network_host_cost.py --summary on its committed runs gives the committed table."""
    folder = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "h200-network-host-cost"
    assert benchmark_module("network_host_cost").summarize(folder) == (folder / "summary.md").read_text()


def test_the_host_cost_parts_summary_is_what_its_runs_say():
    """benchmarks/host_cost_parts.py --summary on its committed runs gives the committed tables
    (a folder of two runs, before and after, and one of a single run)."""
    results = Path(__file__).resolve().parents[1] / "benchmarks" / "results"
    parts = benchmark_module("host_cost_parts")
    for folder in (results / "h200-host-cost-parts", results / "h200-host-cost-bias"):
        assert parts.summarize(folder) == (folder / "summary.md").read_text()
    assert parts._is_depthwise("32x960x14x14 -> 960, 3x3 s2 p1 g960")
    assert not parts._is_depthwise("32x128x56x56 -> 128, 3x3 s1 p1 g32")
    assert not parts._is_depthwise("32x256x14x14 -> 256, 1x1 s1 p0")


def test_the_wall_times_with_seers_own_kernels_among_the_picks_are_what_their_records_say(tmp_path):
    """benchmarks/results/h200-network-wall-seer-all: seer-all (apply(..., algorithms="all")) beside
    seer and PyTorch's policies, rebuilt from the records and scored as its README says."""
    folder = RESULTS / "h200-network-wall-seer-all"
    committed = pd.read_csv(folder / "overall.csv")
    passes, _ = read_profile(folder)
    assert len(committed) == len(passes) == 15 * 2 * 4 and (committed["status"] == "ok").all()
    merged = committed.merge(passes, on=list(PASS_KEY), suffixes=("", "_raw"))
    assert np.allclose(merged["eager_ms"], merged["eager_ms_raw"], rtol=1e-5)
    every = WALL.comparison(committed, "eager_ms", seer="seer-all")
    scored = WALL.summary(every)
    assert scored["cases"] == 30 and round(scored["median_ratio_largest_batch_fma"], 3) == 0.968
    picked = every[every["seer_picks"] > 0]
    assert len(picked) == 9 and (picked["seer_ratio"] <= 1.01).all()
    cudnn_only = WALL.summary(WALL.comparison(committed, "eager_ms"))
    assert round(cudnn_only["median_ratio_largest_batch_fma"], 3) == 0.996
    assert WALL.main([str(folder / "overall.csv"), "--out", str(tmp_path / "summary.md")]) == 0
    assert (tmp_path / "summary.md").read_text() == (folder / "summary.md").read_text()


def test_picks_are_counted_in_the_layout_each_layer_gets_its_input_in():
    """A guarded choice leaves a depthwise layer that gets its input channels-last to PyTorch
    (seer.torch.convolution.unmodelled_layout), so profile-network counts it as no pick."""
    from seer.torch.convolution import Choice
    from seer.torch.layers import build_model, conv_calls

    class Everywhere(Choice):
        def __init__(self, guard: bool) -> None:
            self.guard = guard

        def algorithm(self, layer):
            return "IMPLICIT_GEMM"

    found = conv_calls(build_model("torch_nets:permuted"), (2, 3, 16, 16))
    layouts = call_layouts(found)
    assert dict(zip(found.layers["name"], layouts)) == {"stem": "nchw", "dw": "nhwc"}
    guarded, unguarded = Everywhere(True), Everywhere(False)
    assert pick_counts(guarded, (guarded, unguarded), found.layers, layouts) == {
        "fwd_picks": 1, "bwd_data_picks": 1, "bwd_filter_picks": 2}
    assert pick_counts(guarded, (), found.layers) == {"fwd_picks": 2}  # no layouts given: NCHW


def test_a_measured_step_rescored_keeps_its_measured_and_recorded_times():
    """benchmarks/step_rescore.py on an H200 run's records: each pass's measured total and the
    prediction recorded at run time are the step's own (steps.csv); the same models from another
    folder predict the same."""
    from seer.networks.profile_network import read_step_layers, read_steps

    rescore = benchmark_module("step_rescore")
    out = RESULTS / "h200-training-steps-layers-20261129"
    layers = read_step_layers(out)
    layers = layers[(layers["network"] == "r3d_18") & (layers["policy"] == "heuristic")]
    table = rescore.rescore(layers, "h200", {"shipped": {}, "again": {"bwd_filter": RESULTS.parents[1] / "models"}})
    steps = read_steps(out).set_index(["network", "math", "policy"])
    assert len(table) == 4 and set(table["math"]) == {"fma", "default"}
    for row in table.itertuples():
        step = steps.loc[(row.network, row.math, row.policy)]
        for pass_ in ("fwd", "bwd_data", "bwd_filter"):
            assert getattr(row, f"{pass_}_measured_ms") == pytest.approx(step[f"{pass_}_conv_ms"], abs=1e-3)
            assert getattr(row, f"{pass_}_at_run_ms") == pytest.approx(step[f"{pass_}_predicted_conv_ms"], abs=1e-3)
    by = table.set_index(["math", "models"])
    assert by.loc[("fma", "shipped")].equals(by.loc[("fma", "again")])
    assert by.loc[("fma", "shipped"), "bwd_filter_predicted_ms"] > 0

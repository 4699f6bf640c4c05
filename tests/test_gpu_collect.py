"""End-to-end collection on a real GPU (skipped without one): binding, check, timing, ncu."""

import json
import shutil

import numpy as np
import pytest

from seer.algorithms import algorithm_names
from seer.cli import main
from seer.dataset.tables import read_parts
from seer.layers.shapes import ConvShape

pytestmark = pytest.mark.gpu

#: What runs under each math mode: cuDNN's algorithms and PyTorch's policies.
MATH_DEPENDENT = algorithm_names("cudnn") + algorithm_names("pytorch")


def test_cudnn_binding_heuristic_workspace_and_forward_match_float64():
    import cupy as cp

    from seer.gpu import cudnn
    from seer.gpu.reference import ShapeTensors

    shape = ConvShape.square(2, 16, 20, 24, 3, 1, 1)
    tensors = ShapeTensors(shape, seed=1)
    # An independent full reference: float64 via an im2col product on the GPU.
    x = tensors.x.astype(cp.float64)
    xp = cp.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = cp.stack([xp[:, :, r:r + 20, s:s + 20] for r in range(3) for s in range(3)], axis=2)
    full = cp.einsum("ncjhw,kcj->nkhw", cols, tensors.w.astype(cp.float64).reshape(24, 16, 9))
    assert cp.allclose(full.ravel()[tensors.sample_index], tensors.reference, rtol=1e-9, atol=1e-9)

    with cudnn.Handle() as handle, cudnn.ConvolutionProblem(handle, shape, "fma") as problem:
        assert problem.y_dims == tensors.y_dims
        ranked = problem.heuristic()
        assert {c.algo for c in ranked} <= set(range(8)) and ranked
        with pytest.raises(cudnn.CudnnNotSupported):
            problem.workspace_size(3)  # DIRECT is not implemented for this case
        ws = problem.workspace_size(0)
        tensors.poison_output()
        problem.forward(0, tensors.x.data.ptr, tensors.w.data.ptr, tensors.y.data.ptr, 0, ws)
        cp.cuda.Device().synchronize()
        assert tensors.relative_error() < 1e-5
        assert float(cp.abs(tensors.y.astype(cp.float64) - full).max()) < 1e-3
        tensors.poison_output()
        assert tensors.relative_error() == float("inf")  # an unwritten output never passes


GENERAL_LAYERS = [
    ConvShape(2, 32, 32, groups=4, in_h=13, in_w=21, kernel_h=3, kernel_w=3, pad_h=1, pad_w=1),  # grouped
    ConvShape(2, 24, 24, groups=24, in_h=15, in_w=15, kernel_h=5, kernel_w=5, stride_h=2, stride_w=2, pad_h=2,
              pad_w=2),  # depthwise, strided
    ConvShape(1, 16, 8, in_h=17, in_w=17, kernel_h=1, kernel_w=7, pad_w=3),  # 1x7
    ConvShape(1, 8, 12, in_h=20, in_w=18, kernel_h=3, kernel_w=3, pad_h=2, pad_w=4, dilation_h=2,
              dilation_w=4),  # dilated, per-axis
    ConvShape(2, 4, 8, in_d=9, in_h=10, in_w=11, kernel_d=3, kernel_h=3, kernel_w=1, stride_d=2, pad_d=1,
              pad_h=1, dilation_w=1),  # 3D
    ConvShape(1, 6, 6, groups=3, in_d=5, in_h=6, in_w=7, kernel_d=1, kernel_h=3, kernel_w=3, pad_h=2, pad_w=1,
              dilation_h=2),  # 3D, grouped, dilated
]


@pytest.mark.parametrize("shape", GENERAL_LAYERS, ids=str)
def test_reference_and_cudnn_agree_with_torch_on_every_layer_kind(shape):
    """The float64 reference sample equals PyTorch's float64 convolution, and cuDNN's
    IMPLICIT_GEMM through seer's Nd descriptors passes the check."""
    import cupy as cp

    from seer.gpu import cudnn
    from seer.gpu.reference import ShapeTensors

    torch = pytest.importorskip("torch")
    tensors = ShapeTensors(shape, seed=3)
    conv = torch.nn.functional.conv3d if shape.is_3d else torch.nn.functional.conv2d
    x = torch.as_tensor(cp.asnumpy(tensors.x), dtype=torch.float64)
    w = torch.as_tensor(cp.asnumpy(tensors.w), dtype=torch.float64)
    full = conv(x, w, stride=shape.spatial_stride, padding=shape.spatial_padding, dilation=shape.spatial_dilation,
                groups=shape.groups).numpy()
    assert full.shape == shape.output_dims
    sample = full.ravel()[cp.asnumpy(tensors.sample_index)]
    np.testing.assert_allclose(cp.asnumpy(tensors.reference), sample, rtol=1e-9, atol=1e-9)
    with cudnn.Handle() as handle, cudnn.ConvolutionProblem(handle, shape, "fma") as problem:
        assert problem.y_dims == shape.output_dims
        ws = problem.workspace_size(0)
        workspace = cp.empty(max(ws, 1), dtype=cp.uint8)
        tensors.poison_output()
        problem.forward(0, tensors.x.data.ptr, tensors.w.data.ptr, tensors.y.data.ptr, workspace.data.ptr, ws)
        cp.cuda.Device().synchronize()
        assert tensors.relative_error() < 1e-5


def test_quick_grid_collection_end_to_end(tmp_path):
    profile = shutil.which("ncu") is not None
    code = main(["collect", "--gpu", _local_gpu(), "--grid", "quick", "--data-dir", str(tmp_path),
                 "--limit-shapes", "6", "--profile-shapes", "all" if profile else "0"])
    assert code == 0
    gpu_dir = next(tmp_path.iterdir())
    table = read_parts(gpu_dir / "measurements")
    # cuDNN's algorithms and PyTorch's policies under both math modes; seer's own under fma
    # only, which stands for both.
    assert len(table) == 6 * (2 * len(MATH_DEPENDENT) + len(algorithm_names("cupy")))
    assert set(table.loc[table["algo"].isin(algorithm_names("cupy")), "math"]) == {"fma"}
    assert set(table["status"]) <= {"ok", "not_supported", "workspace_too_large"}
    ok = table[table["status"] == "ok"]
    assert set(ok["algo"]) >= {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM"}
    assert (ok["time_ms"] > 0).all() and (ok["rel_error"] < 1e-2).all()
    assert ok["heuristic_rank"].notna().any()
    if profile:
        profiled = ok[ok["profile_status"] == "ok"]
        assert len(profiled) == len(ok)
        assert (profiled["n_kernels"] >= 1).all() and profiled["main_kernel"].notna().all()
        fma_ig = profiled[(profiled["algo"] == "IMPLICIT_GEMM") & (profiled["math"] == "fma")]
        # Direct-style FMA kernels execute at least the analytic multiply-adds.
        assert (fma_ig["flops_ratio"] > 0.9).all()
        assert (profiled["blocks_per_sm"] >= 1).all() and (profiled["waves"] > 0).all()
    provenance = json.loads((gpu_dir / "provenance.json").read_text())
    assert provenance["software"]["cudnn_version"]
    # A rerun has nothing left to do.
    assert main(["collect", "--gpu", _local_gpu(), "--grid", "quick", "--data-dir", str(tmp_path),
                 "--limit-shapes", "6", "--profile-shapes", "0", "--no-parse"]) == 0
    assert len(read_parts(gpu_dir / "measurements")) == len(table)


def test_quick_general_grid_collection_end_to_end(tmp_path):
    """Every layer kind (grouped, depthwise, 1xN, non-square, dilated, 3D) collects, checks
    against float64, times, and traces its kernels under CUPTI where cupti-python is installed."""
    from seer.gpu import tracing
    from seer.layers.shapes import layer_kind_flags

    code = main(["collect", "--gpu", _local_gpu(), "--grid", "quick-general", "--data-dir", str(tmp_path),
                 "--profile-shapes", "0", "--budget-ms", "3"])
    assert code == 0
    gpu_dir = next(tmp_path.iterdir())
    table = read_parts(gpu_dir / "measurements")
    assert len(table) == 12 * (2 * len(MATH_DEPENDENT) + len(algorithm_names("cupy")))
    assert set(table["status"]) <= {"ok", "not_supported", "workspace_too_large"}
    ok = table[table["status"] == "ok"]
    assert (ok["time_ms"] > 0).all() and (ok["rel_error"] < 1e-2).all()
    kinds = layer_kind_flags(ok.drop_duplicates("shape_id"))
    assert kinds.drop(columns="square").any(axis=0).all()  # every kind has a layer that ran
    assert set(ok.loc[ok["dims"] == 3, "algo"]) >= {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM"}
    if tracing.available() is None:
        assert (ok["trace_status"] == "ok").all()
        assert (ok["trace_n_kernels"] >= 1).all()
        ratio = ok["trace_time_ms"] / ok["time_ms"]
        assert ratio.median() == pytest.approx(1.0, abs=0.2)
        traced = read_parts(gpu_dir / "traced_kernels")
        assert set(traced["kernel_role"]) >= {"compute"}


def test_pytorch_policies_on_every_layer_kind_match_float64_and_are_traced(tmp_path):
    """PyTorch's own choice (heuristics and cudnn.benchmark) runs on the collector's tensors
    for every layer kind, under both math modes: checked, burst-timed, traced."""
    from seer.gpu import tracing
    from seer.layers.shapes import layer_kind_flags

    code = main(["collect", "--gpu", _local_gpu(), "--grid", "quick-general", "--algo", "pytorch",
                 "--data-dir", str(tmp_path / "data"), "--profile-shapes", "0", "--budget-ms", "3"])
    assert code == 0
    table = read_parts(next((tmp_path / "data").iterdir()) / "measurements")
    assert len(table) == 12 * 2 * 2
    assert layer_kind_flags(table.drop_duplicates("shape_id")).drop(columns="square").any(axis=0).all()
    assert set(table["algo"]) == {"PYTORCH", "PYTORCH_BENCHMARK"}
    assert (table["status"] == "ok").all(), table.loc[table["status"] != "ok", "status_detail"].tolist()
    assert (table["rel_error"] < 1e-2).all() and (table["time_ms"] > 0).all()
    if tracing.available() is None:
        assert (table["trace_status"] == "ok").all() and (table["trace_n_kernels"] >= 1).all()


def _local_gpu() -> str:
    import cupy as cp

    from seer.hardware.gpus import match_device

    props = cp.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    spec = match_device(name, props["multiProcessorCount"])
    if spec is None:
        pytest.skip(f"no GPU spec for {name}")
    return spec.name


def test_census_answers_match_what_the_timed_runs_saw(tmp_path):
    """The census asks what a timed run asks first (support, workspace): the same answers."""
    from seer.collect.store import RunStore
    from seer.dataset.build import census_table

    gpu = _local_gpu()
    common = ["--gpu", gpu, "--grid", "quick", "--data-dir", str(tmp_path), "--limit-shapes", "8"]
    assert main(["collect", *common, "--census", "--no-parse"]) == 0
    assert main(["collect", *common, "--algo", "cudnn", "--profile-shapes", "0"]) == 0  # the census is cuDNN's
    gpu_dir = next(tmp_path.iterdir())
    census = census_table(RunStore(gpu_dir)).set_index(["shape_id", "math", "algo"])
    timed = read_parts(gpu_dir / "measurements").set_index(["shape_id", "math", "algo"])
    assert len(census) == len(timed) == 8 * 2 * 8
    census = census.loc[timed.index]
    assert (census["status"] == timed["status"]).all()
    ok = timed["status"] == "ok"
    assert (census.loc[ok, "workspace_bytes"].astype(int) == timed.loc[ok, "workspace_bytes"].astype(int)).all()
    assert (census["heuristic_rank"].astype(float).fillna(-1) == timed["heuristic_rank"].fillna(-1)).all()
    # The tidy census keeps only shapes that never ran: here every census shape was timed.
    assert not (gpu_dir / "census").exists()


def test_backward_census_answers_match_what_the_timed_backward_runs_saw(tmp_path):
    """``--census --algo backward`` asks what a timed dgrad or wgrad run asks first (the
    workspace-size call of its algorithm: support and workspace; the v7 ranking of its pass):
    the same answers, on a layer of every kind under both math modes."""
    from seer.collect.store import RunStore
    from seer.dataset.build import census_table, read_measurements
    from seer.schema import CENSUS_KEY

    common = ["--gpu", _local_gpu(), "--grid", "quick-general", "--data-dir", str(tmp_path)]
    assert main(["collect", *common, "--census", "--algo", "backward", "--no-parse"]) == 0
    backward = [a for p in ("bwd_data", "bwd_filter") for a in algorithm_names("cudnn", pass_=p)]
    assert main(["collect", *common, "--algo", ",".join(backward), "--profile-shapes", "0", "--budget-ms", "3"]) == 0
    gpu_dir = next(tmp_path.iterdir())
    store = RunStore(gpu_dir)
    records = store.read("census", CENSUS_KEY)
    assert len(records) == 12 * 2 * 2 and set(records["pass"]) == {"bwd_data", "bwd_filter"}
    assert (records["status"] == "ok").all(), records.get("status_detail")
    census = census_table(store).set_index(["shape_id", "math", "algo"])
    timed = read_measurements(gpu_dir / "measurements").set_index(["shape_id", "math", "algo"])
    assert len(census) == len(timed) == 12 * 2 * len(backward)
    census = census.loc[timed.index]
    # What the timed run's first call answered: a workspace (accepted, within the cap), or the
    # refusal it was recorded under; what came after (the run, the check) is no census's.
    asked = timed["status"].where(timed["workspace_bytes"].isna(), "ok")
    differ = census["status"] != asked
    assert not differ.any(), timed.loc[differ, ["status", "status_detail"]].assign(census=census["status"]).to_string()
    ok = asked == "ok"
    assert set(timed.loc[ok, "pass"]) == {"bwd_data", "bwd_filter"}
    assert (census.loc[ok, "workspace_bytes"].astype(int) == timed.loc[ok, "workspace_bytes"].astype(int)).all()
    assert (census["heuristic_rank"].astype(float).fillna(-1) == timed["heuristic_rank"].fillna(-1)).all()
    first = census.loc[ok, "heuristic_rank"].astype(float) == 1
    assert first.groupby(timed.loc[ok, "pass"]).any().all()  # each pass's first choice took its workspace
    # The tidy census keeps only shapes that never ran: here every census shape was timed.
    assert not (gpu_dir / "census").exists()


def test_a_sparse_collection_checks_and_times_every_algorithm_on_the_sparse_input(tmp_path):
    """``--sparsity 0,0.9`` with both patterns: cuDNN's forward algorithms and seer's sparse
    kernels run on inputs with 90% zeros, each checked against float64 on that input and
    burst-timed; the dense layers stay in the measurements table, the sparse runs go to their own."""
    from seer.dataset.build import read_sparse_measurements
    from seer.gpu import tracing
    from seer.layers.files import write_layers
    from seer.layers.shapes import layer_frame

    layers = [ConvShape.square(2, 32, 28, 32, 3, 1, 1), ConvShape.square(2, 64, 14, 32, 1, 1, 0)]  # 3x3; 1x1 (pointwise)
    grid = tmp_path / "layers.csv"
    write_layers(grid, layer_frame(layers), "csv")
    code = main(["collect", "--gpu", _local_gpu(), "--grid", str(grid), "--data-dir", str(tmp_path / "data"),
                 "--algo", "cudnn,sparse", "--sparsity", "0,0.9", "--sparsity-pattern", "relu,uniform",
                 "--math", "fma", "--profile-shapes", "0", "--budget-ms", "3"])
    assert code == 0
    gpu_dir = next((tmp_path / "data").iterdir())
    dense = read_parts(gpu_dir / "measurements")
    assert len(dense) == 2 * 8 and set(dense["algo"]) == set(algorithm_names("cudnn"))
    assert set(dense["shape_id"]) == {s.shape_id for s in layers}
    runs = read_sparse_measurements(gpu_dir / "sparse_measurements")
    sparse_algos = algorithm_names("sparse")
    assert len(runs) == 2 * 2 * (8 + 3) and set(runs["dense_shape_id"]) == {s.shape_id for s in layers}
    assert (runs["sparsity"] == 0.9).all() and set(runs["sparsity_pattern"]) == {"relu", "uniform"}
    assert np.allclose(runs["input_zero_fraction"], 0.9, atol=0.01)
    assert set(runs["status"]) <= {"ok", "not_supported", "workspace_too_large"}
    # Every sparse kernel runs where it can: pointwise takes the 1x1 layer only.
    ours = runs[runs["algo"].isin(sparse_algos)].set_index(["dense_shape_id", "sparsity_pattern", "algo"])
    for layer in layers:
        for pattern in ("relu", "uniform"):
            for algo in sparse_algos:
                expected = "not_supported" if algo == "SEER_SPARSE_POINTWISE" and layer.kernel_w != 1 else "ok"
                assert ours.loc[(layer.shape_id, pattern, algo), "status"] == expected, (layer, pattern, algo)
    ok = runs[runs["status"] == "ok"]
    # Checked against float64 on the sparse input, and timed.
    assert ok["rel_error"].notna().all() and (ok["rel_error"] < 5e-3).all()
    assert (ok["time_ms"] > 0).all() and (ok["n_reps"] >= 5).all()
    assert set(ok["algo"]) >= {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", *sparse_algos}
    # cuDNN's support does not depend on the values: the same algorithms ran dense and sparse.
    dense_ok = dense[dense["status"] == "ok"].groupby("shape_id")["algo"].agg(set)
    sparse_ok = ok[ok["algo"].isin(algorithm_names("cudnn"))].groupby(["dense_shape_id", "sparsity_pattern"])["algo"]
    for (layer_id, _), algos in sparse_ok.agg(set).items():
        assert algos == dense_ok[layer_id]
    assert (runs["split"] == runs["dense_shape_id"].map(dense.drop_duplicates("shape_id").set_index("shape_id")["split"])).all()
    if tracing.available() is None:  # the sparse kernels' own kernels were traced
        gather = ok[ok["algo"] == "SEER_SPARSE_GATHER"]
        assert (gather["trace_status"] == "ok").all()
        assert gather["trace_main_kernel"].str.contains("seer_sparse_gather").all()
    # A rerun has nothing left to do.
    assert main(["collect", "--gpu", _local_gpu(), "--grid", str(grid), "--data-dir", str(tmp_path / "data"),
                 "--algo", "cudnn,sparse", "--sparsity", "0,0.9", "--sparsity-pattern", "relu,uniform",
                 "--math", "fma", "--profile-shapes", "0", "--no-parse"]) == 0
    assert len(read_sparse_measurements(gpu_dir / "sparse_measurements")) == len(runs)

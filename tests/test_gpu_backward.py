"""cuDNN's backward convolutions through seer's binding on a real GPU (skipped without one):
every backward-data and backward-filter algorithm of the registry, on a layer of every kind
and under both math modes, against a float64 reference of dx and dw (outputs poisoned first),
and the registry's determinism flags against cuDNN's own answer."""

import pytest

from seer.algorithms import backward_algorithms
from seer.layers.shapes import ConvShape
from seer.schema import MATH_MODE_NAMES, get_math_mode

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")

LAYERS = {
    "plain": ConvShape.square(4, 32, 20, 48, 3, 1, 1),
    "strided 1x1": ConvShape.square(4, 64, 14, 32, 1, 2, 0),
    "grouped": ConvShape.square(2, 32, 12, 32, 3, 1, 1, groups=4),
    "depthwise": ConvShape.square(2, 24, 16, 24, 3, 2, 1, groups=24),
    "dilated": ConvShape.square(2, 16, 18, 16, 3, 1, 2, dilation_h=2, dilation_w=2),
    "1xN": ConvShape(4, 32, 32, in_h=17, in_w=17, kernel_h=1, kernel_w=7, pad_w=3),
    "3D": ConvShape(1, 8, 8, in_d=8, in_h=8, in_w=8, kernel_d=3, kernel_h=3, kernel_w=3, pad_d=1, pad_h=1, pad_w=1),
}


def _functional(layer: ConvShape):
    return (torch.nn.grad.conv3d_input, torch.nn.grad.conv3d_weight) if layer.dims == 3 else (
        torch.nn.grad.conv2d_input, torch.nn.grad.conv2d_weight)


def _relative_l2(got, expected) -> float:
    return float(torch.linalg.vector_norm(got.double() - expected) / torch.linalg.vector_norm(expected))


@pytest.mark.parametrize("math", MATH_MODE_NAMES)
@pytest.mark.parametrize("kind", list(LAYERS))
def test_every_backward_algorithm_matches_float64(kind, math):
    from seer.gpu import cudnn

    layer = LAYERS[kind]
    generator = torch.Generator(device="cuda").manual_seed(0)
    x, w, dy = (torch.randn(dims, generator=generator, device="cuda")
                for dims in (layer.input_dims, layer.filter_dims, layer.output_dims))
    conv = dict(stride=layer.spatial_stride, padding=layer.spatial_padding, dilation=layer.spatial_dilation,
                groups=layer.groups)
    grad_input, grad_weight = _functional(layer)
    expected = {"bwd_data": grad_input(x.shape, w.double(), dy.double(), **conv),
                "bwd_filter": grad_weight(x.double(), w.shape, dy.double(), **conv)}
    tolerance = get_math_mode(math).tolerance
    ran = 0
    stream = torch.cuda.current_stream().cuda_stream
    with cudnn.Handle(stream) as handle, cudnn.ConvolutionProblem(handle, layer, math) as problem:
        for pass_ in ("bwd_data", "bwd_filter"):
            known = {a.enum: a for a in backward_algorithms(pass_)}
            for choice in problem.backward_heuristic(pass_):
                if choice.status == 0:  # cuDNN's own word on determinism agrees with the registry
                    assert choice.deterministic == known[choice.algo].deterministic, (pass_, known[choice.algo].name)
            for algo in backward_algorithms(pass_):
                try:
                    size = problem.backward_workspace_size(pass_, algo.enum)
                except cudnn.CudnnNotSupported:
                    continue
                workspace = torch.empty(max(size, 1), dtype=torch.uint8, device="cuda")
                out = torch.full(x.shape if pass_ == "bwd_data" else w.shape, float("nan"), device="cuda")
                known_input = w if pass_ == "bwd_data" else x
                try:
                    problem.backward(pass_, algo.enum, known_input.data_ptr(), dy.data_ptr(), out.data_ptr(),
                                     workspace.data_ptr(), size)
                except cudnn.CudnnNotSupported:
                    continue
                torch.cuda.synchronize()
                error = _relative_l2(out, expected[pass_])
                assert error <= tolerance, (kind, math, algo.name, error)
                ran += 1
    assert ran >= 2  # at least one algorithm of each pass ran


def test_backward_collection_on_every_layer_kind_is_checked_timed_and_traced(tmp_path):
    """``seer collect --algo backward``: every backward algorithm and PyTorch's dgrad and wgrad
    on a layer of every kind, both math modes, checked against the float64 sample of dx or
    dw, burst-timed, ranked by cuDNN's heuristic of its pass, traced; the tidy table says
    each run's pass, and forward-only readers see none of them."""
    from seer.algorithms import algorithm_names
    from seer.cli import main
    from seer.dataset.build import read_measurements
    from seer.gpu import tracing
    from seer.layers.shapes import layer_kind_flags
    from test_gpu_collect import _local_gpu

    code = main(["collect", "--gpu", _local_gpu(), "--grid", "quick-general", "--algo", "backward",
                 "--data-dir", str(tmp_path), "--profile-shapes", "0", "--budget-ms", "3"])
    assert code == 0
    gpu_dir = next(tmp_path.iterdir())
    table = read_measurements(gpu_dir / "measurements")
    names = algorithm_names(pass_="bwd_data") + algorithm_names(pass_="bwd_filter")
    assert len(table) == 12 * 2 * len(names)
    assert set(table["pass"]) == {"bwd_data", "bwd_filter"}
    assert (table["pass"] == table["algo"].map(lambda a: "bwd_data" if a in algorithm_names(pass_="bwd_data")
                                                  else "bwd_filter")).all()
    assert set(table["status"]) <= {"ok", "not_supported", "workspace_too_large"}, \
        table.loc[~table["status"].isin(["ok", "not_supported"]), ["algo", "status", "status_detail"]].to_string()
    ok = table[table["status"] == "ok"]
    assert (ok["time_ms"] > 0).all() and (ok["rel_error"] < 1e-2).all()
    policies = table[table["algo"].str.startswith("PYTORCH")]
    assert (policies["status"] == "ok").all(), policies["status_detail"].tolist()
    kinds = layer_kind_flags(ok.drop_duplicates("shape_id"))
    assert kinds.drop(columns="square").any(axis=0).all()
    ranked = ok[~ok["algo"].str.startswith("PYTORCH")]
    assert ranked["heuristic_rank"].notna().mean() > 0.5  # cuDNN's v7 ranking of the run's own pass
    for pass_ in ("bwd_data", "bwd_filter"):
        assert (ranked.loc[ranked["pass"] == pass_, "heuristic_rank"] == 1).any()
    if tracing.available() is None:
        assert (ok["trace_status"] == "ok").all() and (ok["trace_n_kernels"] >= 1).all()
    assert read_measurements(gpu_dir / "measurements", ["algo"], passes=("fwd",)).empty

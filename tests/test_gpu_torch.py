"""seer.torch on a real GPU: forced algorithms run and are verified by their kernels, seer's
picks give PyTorch's outputs, gradients flow, and seer profile-network profiles and resumes."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytestmark = [
    pytest.mark.gpu,
    # torch_nets.every_kind holds a 'same'-padded layer with an even kernel on purpose; PyTorch
    # warns, once per process, that it pads a copy of the input for it.
    pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths:UserWarning"),
    # Raised inside torchvision's models as they load (torch.jit.script_method), not by seer.
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

torch = pytest.importorskip("torch")

from seer.algorithms import algorithm_names, get_algorithm  # noqa: E402
from seer.cli import main  # noqa: E402
from seer.torch.convolution import CONFIRM_SHARE, PYTORCH, apply, force, restore, seer_convolutions  # noqa: E402
from seer.torch.layers import build_model  # noqa: E402

TESTS = Path(__file__).parent
DATASET = TESTS.parent / "data" / "h100"
#: Relative L2 error against PyTorch's strict-FP32 result allowed per algorithm (Winograd's
#: transforms lose the most: about 2e-3 on the device, see device facts).
TOLERANCE = {"WINOGRAD_NONFUSED": 1e-2, "FFT": 1e-4, "FFT_TILING": 1e-4}


@pytest.fixture(scope="module")
def cuda():
    if not torch.cuda.is_available():
        pytest.skip("PyTorch sees no CUDA GPU")
    torch.backends.cudnn.allow_tf32 = False  # strict FP32 on PyTorch's side, as under fma math
    return torch.device("cuda")


@pytest.fixture(scope="module")
def evidence():
    from seer.networks.kernel_evidence import KernelEvidence

    return KernelEvidence.from_dataset(DATASET)


def _net(name: str, cuda):
    import sys

    sys.path.insert(0, str(TESTS))
    try:
        import torch_nets
    finally:
        sys.path.remove(str(TESTS))
    torch.manual_seed(0)
    return getattr(torch_nets, name)().to(cuda).eval()


def _every_kind(cuda):
    model = _net("every_kind", cuda)
    torch.nn.init.normal_(model.shared.weight, std=0.05)  # zeros in the CPU tests, which need no values
    return model


def _relative_error(a, b) -> float:
    return float(torch.linalg.vector_norm(a - b) / torch.linalg.vector_norm(b))


def _inputs(model, x) -> dict:
    seen = {}
    handles = [m.register_forward_pre_hook(lambda m, args, name=name: seen.setdefault(name, args[0]))
               for name, m in seer_convolutions(model).items()]
    model(x)
    for h in handles:
        h.remove()
    return seen


def _forced(model, x, algo: str, tolerance: float = 1e-5) -> tuple[dict, set]:
    """Force ``algo`` on ``model`` (no gradients), check its output on ``x`` against PyTorch's own
    within ``tolerance``; the seer convolutions and the names of those that ran ``algo``."""
    expected = model(x)
    force(model, algo, math="fma")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = model(x)
    assert _relative_error(got, expected) < tolerance
    convs = seer_convolutions(model)
    return convs, {name for name, m in convs.items() if m.last_algorithm == algo}


@pytest.mark.parametrize("algo", [a for a in algorithm_names() if a not in algorithm_names("pytorch")])
def test_forced_algorithm_runs_and_its_kernels_say_so(cuda, evidence, tracer, algo):
    model = _every_kind(cuda)
    x = torch.randn(2, 3, 32, 32, device=cuda)
    with torch.no_grad():
        convs, ran = _forced(model, x, algo, TOLERANCE.get(algo, 1e-5))
        for name, m in convs.items():
            if name not in ran:  # PyTorch ran it, and the module says why
                assert m.last_algorithm == PYTORCH and m.fallbacks, name
        if algo in ("IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "SEER_DIRECT", "SEER_IMPLICIT_GEMM"):
            assert "same_even" not in ran and len(ran) >= 6, ran  # these run every layer kind here
        # What ran each layer: a graph-API plan built once wherever the algorithm has engines.
        path = "cupy" if algo.startswith("SEER") else "graph" if get_algorithm(algo).engines else "legacy"
        for name in ran:
            assert set(convs[name].paths.values()) == {path}, (name, convs[name].paths)
        inputs = _inputs(model, x)
        for name in ran:
            module = convs[name]
            bias, module.bias = module.bias, None
            kernels = tracer.trace(lambda: module(inputs[name]))
            module.bias = bias
            verdict, candidates = evidence.verify([k.name for k in kernels], algo)
            assert verdict == "verified", (name, [k.name for k in kernels], candidates)
    restore(model)
    assert not seer_convolutions(model)


@pytest.mark.parametrize("algo", ["SEER_DIRECT", "SEER_IMPLICIT_GEMM", "SEER_IMPLICIT_GEMM_SPLITK",
                                  "IMPLICIT_PRECOMP_GEMM"])
def test_channels_last_runs_in_its_own_layout(cuda, tracer, algo):
    """A channels-last model runs channels-last: outputs match, keep the layout, and seer's
    kernels are the channels-last ones; layers they refuse in this layout fall back."""
    model = _every_kind(cuda).to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 32, 32, device=cuda).to(memory_format=torch.channels_last)
    with torch.no_grad():
        convs, ran = _forced(model, x, algo)
        assert {"shared.conv", "one_by_seven", "dilated", "reflect"} <= ran, ran
        if algo.startswith("SEER_IMPLICIT"):  # 3, 4 or 1 input channels per group: refused, and said why
            assert all(convs[n].fallbacks and n not in ran for n in ("stem", "grouped", "depthwise"))
            assert all("multiple of 8" in " ".join(convs[n].fallbacks) for n in ("stem", "grouped"))
        elif algo == "SEER_DIRECT":  # any layer but the one PyTorch pads itself
            assert ran == set(convs) - {"same_even"}
            assert [n for n, c in convs.items() if c.fallbacks] == ["same_even"]
        inputs = _inputs(model, x)
        for name in ran:
            assert convs[name](inputs[name]).is_contiguous(memory_format=torch.channels_last), name
        names = [k.name for k in tracer.trace(lambda: convs["dilated"](inputs["dilated"]))]
        depthwise = [k.name for k in tracer.trace(lambda: convs["depthwise"](inputs["depthwise"]))]
    kernel = "seer_direct_conv_nhwc" if algo == "SEER_DIRECT" else "seer_implicit_gemm_nhwc"
    if algo.startswith("SEER"):  # the layer has a bias: its instance runs (after a split's zeroing)
        launched = [n for n in names if "seer_" in n]
        assert len(launched) == 1 and launched[0].startswith(f"void {kernel}_bias<"), names
        assert len(names) == 1 + (algo == "SEER_IMPLICIT_GEMM_SPLITK"), names
    if algo == "SEER_DIRECT":
        assert len(depthwise) == 1 and depthwise[0].startswith("void seer_direct_conv_nhwc"), depthwise


@pytest.mark.parametrize("algo", ["SEER_DIRECT", "SEER_IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM"])
def test_a_channels_last_input_with_an_nchw_weight_runs_a_kept_channels_last_copy(cuda, tracer, algo):
    """A channels-last input meeting an NCHW weight (as ConvNeXt's LayerNorm hands its
    downsampling layers) runs channels-last with a copy of the weight made once and again only
    when the weight changes; an input off a 16-byte boundary falls back where the runner needs
    one (a graph plan, the channels-last implicit GEMM), on the fast path too."""
    import torch.nn.functional as F

    conv = torch.nn.Conv2d(16, 32, 2, stride=2).to(cuda).eval()
    x = torch.randn(2, 16, 20, 20, device=cuda).to(memory_format=torch.channels_last)
    holder = torch.nn.Sequential(conv)
    with torch.no_grad():
        expected = conv(x)
        force(holder, algo, math="fma")
        for _ in range(2):  # the checked path, then the fast one
            got = holder(x)
            assert not conv.fallbacks and conv.last_algorithm == algo, conv.fallbacks
            assert _relative_error(got, expected) < 1e-5 and got.is_contiguous(memory_format=torch.channels_last)
        assert conv.weight.is_contiguous() and any(repacked for _, _, repacked in conv._fast.values())
        copy = conv._weight_copy[3]
        names = [k.name for k in tracer.trace(lambda: holder(x))]
        assert conv._weight_copy[3] is copy
        if algo.startswith("SEER"):  # no copy of the weight: the kernel, with the bias, alone
            assert len(names) == 1 and "_nhwc_bias<" in names[0], names
        conv.weight.mul_(2)
        assert _relative_error(holder(x), F.conv2d(x, conv.weight, conv.bias, 2)) < 1e-5
        assert conv._weight_copy[3] is not copy
        storage = torch.randn(x.numel() + 1, device=cuda)
        shifted = storage[1:].view(2, 20, 20, 16).permute(0, 3, 1, 2)  # channels-last, 4 bytes off
        assert shifted.stride() == x.stride() and shifted.data_ptr() % 16
        assert _relative_error(holder(shifted), F.conv2d(shifted, conv.weight, conv.bias, 2)) < 1e-5
        misaligned = algo != "SEER_DIRECT"
        assert (conv.last_algorithm == PYTORCH) == misaligned
        assert any("16-byte" in reason for reason in conv.fallbacks) == misaligned


@pytest.mark.parametrize("algo", ["IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "FFT_TILING"])
def test_3d_and_1d_layers_run_graph_plans(cuda, algo):
    model = _net("video", cuda)
    x = torch.randn(2, 3, 8, 24, 24, device=cuda)
    with torch.no_grad():
        expected = model(x)
        force(model, algo, math="fma")
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            got, again = model(x), model(x)
    assert _relative_error(got, expected) < 1e-4 and _relative_error(again, expected) < 1e-4
    convs = seer_convolutions(model)
    for name, m in convs.items():
        if m.last_algorithm == algo:
            assert set(m.paths.values()) == {"graph"}, (name, m.paths)
        else:
            assert m.fallbacks, name


def test_apply_gives_pytorch_outputs_and_picks_per_layer(cuda):
    model = _every_kind(cuda)
    x = torch.randn(1, 3, 40, 40, device=cuda)
    with torch.no_grad():
        expected = model(x)
        apply(model, "h100", "fma", input_shape=tuple(x.shape), guard=False)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            got = model(x)
    assert _relative_error(got, expected) < 1e-2
    picks = {name: m.last_algorithm for name, m in seer_convolutions(model).items()}
    assert set(picks.values()) - {PYTORCH} <= set(algorithm_names("cudnn"))
    assert sum(v != PYTORCH for v in picks.values()) >= 6


@pytest.mark.parametrize("batch,size", [(1, 40), (16, 64)])
def test_the_guard_leaves_to_pytorch_what_the_pick_does_not_win(cuda, batch, size):
    from seer.layers.shapes import ConvShape
    from seer.predict.persist import load_model
    from seer.torch.convolution import (Predicted, cudnn_heuristic_choice, extra_host_ms, keeps_pick, left_to_pytorch,
                                        swap_in)
    from seer.torch.layers import conv_calls

    model = _every_kind(cuda)
    x = torch.randn(batch, 3, size, size, device=cuda)
    calls = conv_calls(model, tuple(x.shape)).layers
    choice = Predicted(load_model("h100", math="fma"), "fma")
    choice.prepare(ConvShape.from_mapping(r) for r in calls.to_dict("records"))
    for row in calls.to_dict("records"):  # each layer: the pick where surely faster, else PyTorch
        layer = ConvShape.from_mapping(row)
        pick = choice.picks[layer]
        if pick is None:
            continue
        heuristic = cudnn_heuristic_choice(layer, "fma")
        wins = keeps_pick(choice.guesses[layer], heuristic, extra_ms=extra_host_ms(pick, layer, "fma"))
        assert choice.algorithm(layer) == (pick if wins else None), row["name"]
        assert wins or layer in choice.guarded
    with torch.no_grad():
        expected = model(x)
        kept = left_to_pytorch(choice, calls)
        swap_in(model, choice, keep=kept)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            got = model(x)
    assert _relative_error(got, expected) < 1e-2
    every = {name for name, m in model.named_modules() if isinstance(m, torch.nn.Conv2d)}
    assert every - set(seer_convolutions(model)) == kept & every  # kept may name functional calls too


@pytest.mark.parametrize("algo", ["IMPLICIT_PRECOMP_GEMM", "SEER_DIRECT"])
def test_seer_convolutions_capture_in_a_cuda_graph(cuda, algo):
    model = _every_kind(cuda)
    static = torch.randn(2, 3, 32, 32, device=cuda)
    with torch.no_grad():
        force(model, algo, math="fma")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side), warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            for _ in range(2):
                model(static)
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(static)
        for _ in range(2):  # new inputs into the captured input, replayed
            x = torch.randn_like(static)
            static.copy_(x)
            graph.replay()
            restore(model)
            expected = model(x)
            force(model, algo, math="fma")
            torch.cuda.synchronize()
            assert _relative_error(out, expected) < 1e-5


def test_seers_kernel_adds_the_bias_in_its_own_launch_and_any_other_bias_after(cuda, tracer):
    """A seer kernel's runner adds a bias in the kernel (its bias instance, built at the first
    call with a bias): one launch, PyTorch's output. A bias the kernel cannot read (strided)
    is added after it, and a first call inside a CUDA-graph capture compiles nothing: it
    also adds the bias after, and the graph replays PyTorch's output."""
    import torch.nn.functional as F

    from seer.torch.convolution import _Call, _call_layer, _runner

    x, w = torch.randn(2, 24, 19, 19, device=cuda), torch.randn(24, 1, 3, 3, device=cuda)
    call = _Call(2, (1, 1), (1, 1), (1, 1), 24)  # depthwise: the direct kernel, as seer picks it there
    runner = _runner(_call_layer(x, w, call), get_algorithm("SEER_DIRECT"), "fma", "nchw", x.device, 2)
    every_other = torch.randn(48, device=cuda)[::2]
    bias = every_other.contiguous()
    expected = F.conv2d(x, w, bias, 1, 1, 1, 24)
    with torch.no_grad():
        runner(x, w, None)  # warmed up without a bias, as a capture wants its kernels loaded
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            captured = runner(x, w, runner.shaped(bias))
        graph.replay()
        torch.cuda.synchronize()
        assert _relative_error(captured, expected) < 1e-6
        assert runner._bias_launch is None  # nothing compiled in the capture
        names = [k.name for k in tracer.trace(lambda: runner(x, w, runner.shaped(bias)))]
        assert len(names) == 1 and "seer_direct_conv_bias<" in names[0], names
        assert _relative_error(runner(x, w, runner.shaped(bias)), expected) < 1e-6
        names = [k.name for k in tracer.trace(lambda: runner(x, w, runner.shaped(every_other)))]
        assert len(names) == 2 and "seer_direct_conv<" in names[0], names
        assert _relative_error(runner(x, w, runner.shaped(every_other)), expected) < 1e-6


def test_seer_convolutions_compile_through_their_custom_operator(cuda):
    model = _every_kind(cuda)
    x = torch.randn(2, 3, 32, 32, device=cuda)
    with torch.no_grad():
        expected = model(x)
        force(model, "IMPLICIT_GEMM", math="fma")
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            model(x)  # plans made eagerly first: tracing then only reads them
            compiled = torch.compile(model, backend="aot_eager", fullgraph=False)
            got = compiled(x)
    assert _relative_error(got, expected) < 1e-5
    from torch._dynamo.testing import CompileCounterWithBackend

    counter = CompileCounterWithBackend("aot_eager")
    torch._dynamo.reset()
    with torch.no_grad(), warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        torch.compile(model, backend=counter)(x)
    ops = {str(node.target) for gm in counter.graphs for node in gm.graph.nodes if node.op == "call_function"}
    assert any("seer.convolution" in op for op in ops), ops


@pytest.mark.parametrize("layout_optimization", [True, False])
@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
@pytest.mark.parametrize("algo", ["IMPLICIT_GEMM", "FFT_TILING", "SEER_IMPLICIT_GEMM"])
def test_seer_convolutions_run_under_inductor(cuda, mode, algo, layout_optimization):
    """Inductor, the backend users get, keeps each seer convolution as an opaque call; under
    ``reduce-overhead`` its passes are replayed from CUDA graphs, workspaces included
    (FFT_TILING needs one). seer.torch.compile with the layout optimisation on is torch.compile."""
    from seer.torch import compile as seer_compile

    if algo.startswith("SEER"):
        pytest.importorskip("cupy")
    model = _every_kind(cuda)
    x = torch.randn(2, 3, 32, 32, device=cuda)
    with torch.no_grad():
        expected = model(x)
        force(model, algo, math="fma")
        torch.compiler.reset()
        try:
            with warnings.catch_warnings(record=True):
                warnings.simplefilter("always")
                model(x)  # plans made eagerly first
                compiled = seer_compile(model, mode, layout_optimization=layout_optimization)
                outputs = [compiled(x).clone() for _ in range(4)]  # compiled, then recorded, then replayed
                x.copy_(torch.randn_like(x))  # new values into the same input, replayed
                fresh = compiled(x).clone()
        finally:
            torch.compiler.reset()
        tolerance = TOLERANCE.get(algo, 1e-4)
        for got in outputs:
            assert _relative_error(got, expected) < tolerance
        restore(model)
        assert _relative_error(fresh, model(x)) < tolerance


def test_apply_may_pick_seers_own_kernels(cuda):
    model = _every_kind(cuda)
    x = torch.randn(4, 3, 64, 64, device=cuda)
    with torch.no_grad():
        expected = model(x)
        apply(model, "h100", "fma", input_shape=tuple(x.shape), algorithms="all", guard=False)
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            got = model(x)
    assert _relative_error(got, expected) < 1e-4
    convs = seer_convolutions(model)
    for name, m in convs.items():
        # Each module ran what was picked for its input; seer's kernels did not fall back.
        picked = {p.algorithm.name for p in m._plans.values() if p.algorithm is not None}
        if m.last_algorithm == PYTORCH:
            assert not any("CuPy" in reason for reason in m.fallbacks), (name, m.fallbacks)
        else:
            assert m.last_algorithm in picked, (name, m.last_algorithm, picked)


def test_gradients_are_pytorchs(cuda):
    model = _every_kind(cuda)
    x = torch.randn(2, 3, 24, 24, device=cuda, requires_grad=True)
    model(x).square().sum().backward()
    expected = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    x.grad = None
    force(model, "IMPLICIT_PRECOMP_GEMM", math="fma")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        model(x).square().sum().backward()
    got = [x.grad] + [p.grad for p in model.parameters()]
    for g, e in zip(got, expected):
        assert _relative_error(g, e) < 1e-4


# -- the backward passes ---------------------------------------------------------------------
#: Relative L2 error of a gradient against float64 allowed per backward algorithm under fma
#: (the collector's tolerance; Winograd's transforms lose more).
BACKWARD_TOLERANCE = {"BWD_DATA_WINOGRAD_NONFUSED": 1e-2, "BWD_FILTER_WINOGRAD_NONFUSED": 1e-2}


@pytest.fixture(scope="module")
def backward_evidence():
    from seer.networks.kernel_evidence import KernelEvidence

    return KernelEvidence.from_dataset(DATASET.parent / "h200")  # the backward passes' traced kernels


@pytest.mark.parametrize("algo", algorithm_names("cudnn", pass_="bwd_data") + algorithm_names("cudnn", pass_="bwd_filter"))
def test_a_forced_backward_algorithm_gives_the_gradient_and_its_kernels_say_so(cuda, tracer, backward_evidence, algo):
    pass_ = get_algorithm(algo).pass_
    data = pass_ == "bwd_data"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 3, padding=1, bias=False)).to(cuda)
    conv = model[0]
    x = torch.randn(8, 32, 28, 28, device=cuda, requires_grad=data)
    conv.weight.requires_grad_(not data)  # one gradient: the trace holds one pass's kernels
    grad_y = torch.randn(8, 32, 28, 28, device=cuda)
    x64 = x.detach().double().requires_grad_(data)
    w64 = conv.weight.detach().double().requires_grad_(not data)
    torch.nn.functional.conv2d(x64, w64, padding=1).backward(grad_y.double())
    expected = (x64 if data else w64).grad
    force(model, "IMPLICIT_PRECOMP_GEMM", math="fma", **{"dgrad" if data else "wgrad": algo})
    module = seer_convolutions(model)["0"]
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        y = model(x)
        kernels = tracer.trace(lambda: y.backward(grad_y))
    got = (x if data else conv.weight).grad
    assert _relative_error(got.double(), expected) < BACKWARD_TOLERANCE.get(algo, 5e-3)
    ran = module.backward_algorithms[0 if data else 1]
    if ran == PYTORCH:  # cuDNN does not run it on this layer, and the module says why
        assert any(algo in reason for reason in module.fallbacks), module.fallbacks
        return
    assert ran == algo
    verdict, candidates = backward_evidence.verify([k.name for k in kernels], algo)
    assert verdict == "verified", ([k.name for k in kernels], candidates)
    # What ran it: a graph-API plan built once wherever the algorithm has engines.
    runner = _backward_runner_of(module, algo)
    assert runner.path == ("graph" if get_algorithm(algo).engines else "legacy")


def _backward_runner_of(module, algo: str):
    from seer.torch.convolution import _backward_runner

    plan = next(iter(module._plans.values()))
    return _backward_runner(plan.layer, get_algorithm(algo), module.seer_choice.math, "nchw",
                            module.weight.device, 2)


@pytest.mark.parametrize("algo", ["BWD_DATA_ALGO_1", "BWD_FILTER_ALGO_1"])
def test_a_backward_plan_takes_the_legacy_call_for_tensors_off_its_alignment(cuda, algo):
    from seer.layers.shapes import ConvShape
    from seer.torch.convolution import _backward_runner

    shape = ConvShape.square(8, 32, 28, 32, 3, padding=1)
    device = torch.device("cuda", torch.cuda.current_device())  # as a module hands it over: with its index
    runner = _backward_runner(shape, get_algorithm(algo), "fma", "nchw", device, 2)
    assert (runner.path, runner.alignment) == ("graph", 16), (runner.path, runner.alignment)
    data = get_algorithm(algo).pass_ == "bwd_data"
    x, w = torch.randn(shape.input_dims, device=cuda), torch.randn(shape.filter_dims, device=cuda)
    grad_y = torch.randn(shape.output_dims, device=cuda)
    wanted = [data, not data, False]
    grads = torch.ops.aten.convolution_backward(grad_y.double(), x.double(), w.double(), None, [1, 1], [1, 1], [1, 1],
                                                False, [0, 0], 1, wanted)
    expected = grads[0] if data else grads[1]
    known, like = (w, x) if data else (x, w)
    shifted = torch.empty(known.numel() + 1, device=cuda)[1:].view(known.shape).copy_(known)  # 4 bytes off
    assert shifted.data_ptr() % 16
    for tensor in (known, shifted):  # the plan, then the legacy call
        assert _relative_error(runner(tensor, grad_y, like).double(), expected) < 1e-4


def test_training_calls_after_the_first_take_the_fast_path_and_give_the_same_gradients(cuda):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 16, 1)).to(cuda).train()
    x = torch.randn(4, 16, 20, 20, device=cuda, requires_grad=True)
    model(x).square().sum().backward()
    expected = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    force(model, "IMPLICIT_PRECOMP_GEMM", math="fma", dgrad="BWD_DATA_ALGO_1", wgrad="BWD_FILTER_ALGO_1")
    for step in range(3):
        model.zero_grad()
        x.grad = None
        model(x).square().sum().backward()
        got = [x.grad] + [p.grad for p in model.parameters()]
        for g, e in zip(got, expected):
            assert _relative_error(g, e) < 1e-4, step
    for module in seer_convolutions(model).values():
        assert len(module._fast_grad) == 1 and module.last_algorithm == "IMPLICIT_PRECOMP_GEMM"
        assert module.backward_algorithms == ("BWD_DATA_ALGO_1", "BWD_FILTER_ALGO_1")


def test_a_copy_of_a_model_that_ran_its_picks_keeps_its_own_cache_and_tensors_and_gives_the_same_gradients(cuda):
    import copy

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 16, 1)).to(cuda).train()
    force(model, "IMPLICIT_PRECOMP_GEMM", math="fma", dgrad="BWD_DATA_ALGO_1", wgrad="BWD_FILTER_ALGO_1")
    x = torch.randn(4, 16, 20, 20, device=cuda, requires_grad=True)
    model(x).square().sum().backward()  # the fast paths' caches filled: runners and views of the module's tensors
    expected = [p.grad.clone() for p in model.parameters()]
    twin = copy.deepcopy(model)
    twin.zero_grad()
    twin(x.detach().requires_grad_()).square().sum().backward()
    for g, e in zip([p.grad for p in twin.parameters()], expected):
        assert _relative_error(g, e) < 1e-4
    originals = seer_convolutions(model)
    for name, module in seer_convolutions(twin).items():
        assert module.backward_algorithms == ("BWD_DATA_ALGO_1", "BWD_FILTER_ALGO_1")
        assert module._fast_grad is not originals[name]._fast_grad
        assert module._fast_grad.keys() == originals[name]._fast_grad.keys()  # the same kind of input
        for kind, (_, runner, _, backward, _) in module._fast_grad.items():
            # Runners hold a layer's cuDNN plans, no tensor: one per layer and thread, as two equal
            # layers of one model share them.
            _, original, _, original_backward, _ = originals[name]._fast_grad[kind]
            assert runner is original and all(r is o for r, o in zip(backward, original_backward))
    # Each computes with its own weights: changing the twin's leaves the model's output as it was.
    with torch.no_grad():
        before = model(x)
        for p in twin.parameters():
            p.mul_(0.5)
        twin_out, after = twin(x), model(x)
        reference = torch.nn.functional.conv2d(torch.relu(torch.nn.functional.conv2d(
            x, twin[0].weight, twin[0].bias, padding=1)), twin[2].weight, twin[2].bias)
    assert torch.equal(before, after)
    assert _relative_error(twin_out, reference) < 1e-4


def test_channels_last_1d_and_3d_layers_take_their_gradients_from_the_chosen_algorithms(cuda):
    for name, shape in (("video", (2, 3, 8, 32, 32)), ("every_kind", (2, 3, 32, 32))):
        model = _net(name, cuda).train()
        x = torch.randn(*shape, device=cuda, requires_grad=True)
        if name == "every_kind":
            torch.nn.init.normal_(model.shared.weight, std=0.05)
            model, x = model.to(memory_format=torch.channels_last), x.detach().to(
                memory_format=torch.channels_last).requires_grad_()
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always")
            model(x).square().sum().backward()
            expected = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
            model.zero_grad()
            x.grad = None
            force(model, "IMPLICIT_GEMM", math="fma", dgrad="BWD_DATA_ALGO_1", wgrad="BWD_FILTER_ALGO_1")
            model(x).square().sum().backward()
        got = [x.grad] + [p.grad for p in model.parameters()]
        for g, e in zip(got, expected):
            assert _relative_error(g, e) < 1e-4, name
        ran = {m.backward_algorithms for m in seer_convolutions(model).values()}
        assert ("BWD_DATA_ALGO_1", "BWD_FILTER_ALGO_1") in ran, (name, ran)


def test_apply_for_training_runs_seers_backward_picks_and_the_gradients_are_pytorchs(cuda):
    model = _every_kind(cuda).train()
    x = torch.randn(4, 3, 32, 32, device=cuda, requires_grad=True)
    model(x).square().sum().backward()
    expected = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    x.grad = None
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        apply(model, gpu="h200", math="fma", training=True, guard=False)
        model(x).square().sum().backward()
    got = [x.grad] + [p.grad for p in model.parameters()]
    for g, e in zip(got, expected):
        assert _relative_error(g, e) < 1e-2  # Winograd's transforms, where picked, lose the most
    ran = [a for m in seer_convolutions(model).values() for a in m.backward_algorithms if a not in (None, PYTORCH)]
    assert ran and all(get_algorithm(a).pass_ in ("bwd_data", "bwd_filter") for a in ran)


def test_a_channels_last_depthwise_layer_trains_on_pytorchs_gradients_under_the_guard(cuda):
    from seer.layers.shapes import ConvShape
    from seer.torch.convolution import PredictedPass

    model = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 7, padding=3, groups=32)).to(cuda).train()
    model = model.to(memory_format=torch.channels_last)
    apply(model, gpu="h200", math="fma", training=True)
    module = seer_convolutions(model)["0"]
    layer = ConvShape.square(8, 32, 28, 32, 7, padding=3, groups=32)
    for choice in module.seer_backward:  # picks for the layer, whatever the models predict for it in NCHW
        assert isinstance(choice, PredictedPass)
        choice.picks[layer] = "BWD_DATA_ALGO_0" if choice.pass_ == "bwd_data" else "BWD_FILTER_ALGO_0"
    x = torch.randn(8, 32, 28, 28, device=cuda).contiguous(memory_format=torch.channels_last).requires_grad_()
    model(x).square().sum().backward()
    assert module.last_algorithm == PYTORCH  # every pass PyTorch's own
    assert module.backward_algorithms in ((None, None), (PYTORCH, PYTORCH))


def test_apply_for_training_keeps_the_picks_only_where_a_step_with_them_measures_faster(cuda):
    model = _net("resnet50", cuda).train()
    apply(model, gpu="h200", math="fma", training=True, input_shape=(16, 3, 112, 112))
    swapped = seer_convolutions(model)
    # The step with the picks was timed against PyTorch's: kept, it measured faster; else nothing is swapped.
    for module in swapped.values():
        assert module.seer_choice.confirmed_ratio is not None and module.seer_choice.confirmed_ratio <= CONFIRM_SHARE
    x = torch.randn(16, 3, 112, 112, device=cuda)
    model(x).mean().backward()
    assert all(p.grad is not None for p in model.parameters())


# The test network's 'same'-padded even-kernel layer is left to PyTorch, and seer says so.
@pytest.mark.filterwarnings("ignore:seer. same_even. 'same' padding that pads one side more:UserWarning")
def test_profile_network_measures_verifies_and_resumes(cuda, tmp_path, monkeypatch):
    monkeypatch.chdir(TESTS)
    out = tmp_path / "profile"
    argv = ["profile-network", "torch_nets:every_kind", "--sizes", "32,48", "--algo", "seer,heuristic,GEMM",
            "--math", "fma", "--out", str(out), "--data-dir", str(DATASET.parent), "--budget-ms", "2"]
    assert main(argv) == 0
    overall = pd.read_csv(out / "overall.csv")
    assert len(overall) == 6 and (overall["status"] == "ok").all()
    assert (overall["forward_ms"] > 0).all() and (overall["conv_ms"] > 0).all()
    assert (overall["eager_ms"] > 0).all() and (overall["graph_ms"] > 0).all()
    layers = pd.read_csv(out / "layers.csv")
    gemm = layers[layers["policy"] == "GEMM"]
    ran = gemm[gemm["algo"] == "GEMM"]
    assert len(ran) >= 6 and (ran["verified"] == "verified").all()
    assert (layers.loc[layers["policy"] == "heuristic", "verified"] == "pytorch").all()
    seer_rows = layers[layers["policy"] == "seer"]
    # Where seer's pick ran (the guard leaves the rest to PyTorch), its prediction is there.
    assert seer_rows.loc[seer_rows["algo"] != "pytorch", "predicted_ms"].notna().all()
    assert overall.loc[overall["policy"] == "seer", "guarded_layers"].notna().all()
    weighed = overall.loc[overall["policy"] == "seer", ["weighed_host_ms", "weighed_wall_ms", "weighed_gpu_ms"]]
    assert (weighed > 0).all().all()  # the eager pass its picks were weighed against, GPU time included
    if "confirmed_wall_ms" in overall:  # and, where it took any, the pass with them
        assert (overall["confirmed_wall_ms"].dropna() > 0).all()
    records = sorted((out / "raw").glob("pass_times-*.jsonl"))
    before = sum(len(p.read_text().splitlines()) for p in records)
    assert main(argv) == 0  # everything recorded: nothing measured again
    assert sum(len(p.read_text().splitlines()) for p in records) == before
    assert np.isfinite(pd.read_csv(out / "overall.csv")["conv_ms"]).all()


@pytest.mark.filterwarnings("ignore:seer. same_even. 'same' padding that pads one side more:UserWarning")
def test_profile_network_times_training_steps_with_seers_backward_picks(cuda, tmp_path, monkeypatch):
    monkeypatch.chdir(TESTS)
    out = tmp_path / "steps"
    argv = ["profile-network", "torch_nets:resnet50", "--input", "16x3x112x112", "--algo", "seer,seer-graph,heuristic",
            "--math", "fma", "--gpu", "h200", "--training", "--out", str(out), "--data-dir", str(DATASET.parent)]
    assert main(argv) == 0
    steps = pd.read_csv(out / "steps.csv")
    assert sorted(steps["policy"]) == ["heuristic", "seer", "seer-graph"] and (steps["status"] == "ok").all()
    assert (steps["eager_ms"] > 0).all() and (steps["graph_ms"] > 0).all(), steps.get("graph_error")
    picks = steps.set_index("policy")[["fwd_picks", "bwd_data_picks", "bwd_filter_picks"]].sum(axis=1)
    assert (steps.loc[steps["policy"] != "heuristic", "conv_layers"] == 53).all()
    # Captured, every pick that wins on the GPU; eager, only those that shorten the step with their host time,
    # and only where the step with them, timed taking turns with PyTorch's, is faster.
    assert picks["seer-graph"] > 0 and picks["seer"] <= picks["seer-graph"]
    if picks["seer"] > 0:
        assert steps.set_index("policy").loc["seer", "confirmed_ratio"] <= CONFIRM_SHARE
    assert not (out / "overall.csv").exists()
    # Each distinct convolution's three passes, timed and traced under each policy; their sums join the step.
    layers = pd.read_csv(out / "step_layers.csv")
    assert (steps["conv_ms"] > 0).all() and (steps["bwd_filter_conv_ms"] > 0).all()
    per_policy = layers.groupby("policy")["pass"].value_counts().unstack()
    assert sorted(per_policy.index) == ["heuristic", "seer", "seer-graph"] and (per_policy.nunique(axis=1) == 1).all()
    by = steps.set_index("policy")
    for policy, rows in layers.groupby("policy"):
        assert (rows["calls"] * rows["measured_ms"]).sum() == pytest.approx(by.loc[policy, "conv_ms"])
    heuristic = layers[layers["policy"] == "heuristic"]
    assert (heuristic["algo"] == "pytorch").all() and (heuristic["verified"] == "pytorch").all()
    assert heuristic["predicted_ms"].notna().all() and by.loc["heuristic", "predicted_conv_ms"] > 0
    chosen = layers[(layers["policy"] == "seer-graph") & (layers["algo"] != "pytorch")]
    assert {"fwd", "bwd_data"} <= set(chosen["pass"]) and chosen["predicted_ms"].notna().all()
    assert chosen.loc[chosen["algo"].str.startswith("BWD_"), "pass"].isin(["bwd_data", "bwd_filter"]).all()
    assert (chosen["verified"] != "mismatch").all(), chosen[["name", "pass", "algo", "kernels"]]
    assert (chosen.loc[chosen["pass"] != "fwd", "verified"] == "verified").any()
    before = len(steps)
    assert main(argv) == 0  # everything recorded: nothing measured again
    assert len(pd.read_csv(out / "steps.csv")) == before


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_profile_network_times_compiled_passes_in_either_mode(cuda, tmp_path, monkeypatch, mode):
    monkeypatch.chdir(TESTS)
    out = tmp_path / mode
    argv = ["profile-network", "torch_nets:resnet50", "--input", "4x3x64x64", "--algo", "seer,seer-graph,heuristic",
            "--math", "fma", "--passes-only", "--compiled", mode, "--out", str(out), "--data-dir", str(DATASET.parent)]
    assert main(argv) == 0
    overall = pd.read_csv(out / "overall.csv")
    assert sorted(overall["policy"]) == ["heuristic", "seer", "seer-graph"]
    assert (overall["compiled_ms"] > 0).all() and (overall["compile_s"] > 0).all(), overall.get("compiled_error")
    assert (overall["compile_mode"] == mode).all()


def test_build_on_gpu_has_weights(cuda):
    pytest.importorskip("torchvision")
    model = build_model("resnet18", device="cuda")
    assert next(model.parameters()).is_cuda


def test_apply_times_the_pass_and_weighs_every_layer_of_it(cuda):
    """Given input_shape, apply times the eval-mode model as it is (its own random input, the
    global random state untouched) and decides every layer of the pass at once."""
    from seer.layers.shapes import ConvShape
    from seer.torch.convolution import Predicted, apply, eager_pass_times
    from seer.torch.layers import conv_calls

    model = _every_kind(cuda).eval()
    x = torch.randn(16, 3, 64, 64, device=cuda)
    with torch.no_grad():
        expected = model(x)
    host_ms, wall_ms, gpu_ms = eager_pass_times(model, x)
    assert 0 < host_ms and 0 < wall_ms
    assert 0 < gpu_ms < 1.2 * wall_ms  # bursts behind the spin: GPU time, the host's kept out
    layers = [ConvShape.from_mapping(r) for r in conv_calls(model, tuple(x.shape)).layers.to_dict("records")]
    state = torch.cuda.get_rng_state()
    apply(model, math="fma", input_shape=tuple(x.shape))
    assert torch.equal(state, torch.cuda.get_rng_state())
    choices = {id(m.seer_choice): m.seer_choice for m in seer_convolutions(model).values()}
    for choice in choices.values():
        assert isinstance(choice, Predicted)
        assert all(layer in choice._decided for layer in layers if choice.picks.get(layer))
    with torch.no_grad(), warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        got = model(x)
    assert _relative_error(got, expected) < 1e-2
    # The swapped pass is timed too, and the picks stay only where it is faster (Predicted.confirm).
    from seer.predict.persist import load_model
    from seer.torch.convolution import CONFIRM_SHARE, restore, swap_in_confirmed

    restore(model)
    choice = Predicted(load_model("h100", math="fma"), "fma")
    choice.prepare(layers)
    choice.decide_pass(layers, eager_pass_times(model, x))
    picked = choice.picked()
    swap_in_confirmed(model, choice, conv_calls(model, tuple(x.shape)).layers, x)
    assert (choice.confirmed is not None) == picked
    assert (choice.confirmed_ratio is not None) == picked  # the two passes timed taking turns
    if choice.picked():
        assert 0 < choice.confirmed_ratio <= CONFIRM_SHARE
    assert bool(seer_convolutions(model)) == choice.picked()
    with torch.no_grad():
        assert _relative_error(model(x), expected) < 1e-2


# -- seer's sparse kernels in PyTorch ------------------------------------------------------
#: The kernel each sparse algorithm's call must launch (pointwise runs cuSPARSE's own).
SPARSE_KERNELS = {"SEER_SPARSE_GATHER": "seer_sparse_gather", "SEER_SPARSE_SCATTER": "seer_sparse_scatter"}


def _relu_net(cuda):
    """Every layer kind the sparse kernels take, each after a ReLU but the first."""
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, stride=2, padding=1),
                         nn.ReLU(), nn.Conv2d(64, 128, 1), nn.ReLU(),
                         nn.Conv2d(128, 128, 3, padding=2, dilation=2, groups=4), nn.ReLU(),
                         nn.Conv2d(128, 64, 1)).to(cuda).eval()


@pytest.mark.parametrize("algo", algorithm_names("sparse"))
def test_a_forced_sparse_kernel_gives_pytorchs_output_and_its_kernels_say_so(cuda, tracer, algo):
    model = _relu_net(cuda)
    x = torch.randn(2, 3, 32, 32, device=cuda)
    with torch.no_grad():
        convs, ran = _forced(model, x, algo)
        takes = {"4", "8"} if algo == "SEER_SPARSE_POINTWISE" else set(convs)  # pointwise: 1x1 stride 1 only
        assert ran == takes, ran
        for name, m in convs.items():
            assert set(m.paths.values()) == ({"cupy"} if name in ran else set()), (name, m.paths)
            if name not in ran:
                assert m.last_algorithm == PYTORCH and m.fallbacks, name
        inputs = _inputs(model, x)
        for name in ran:
            module = convs[name]
            bias, module.bias = module.bias, None
            names = [k.name for k in tracer.trace(lambda: module(inputs[name]))]
            module.bias = bias
            assert names and not any("cudnn" in n or "xmma" in n or "implicit_convolve" in n for n in names), names
            if algo in SPARSE_KERNELS:
                assert any(SPARSE_KERNELS[algo] in n for n in names), names


def test_apply_runs_the_sparse_kernel_where_a_calibration_batch_shows_enough_zeros(cuda, tracer):
    nn = torch.nn
    torch.manual_seed(0)
    # The first layer's outputs, about N(0, 1), thresholded at 2.33: about 1% non-zero after.
    model = nn.Sequential(nn.Conv2d(3, 512, 3, padding=1, bias=False), nn.Threshold(2.33, 0.0),
                          nn.Conv2d(512, 512, 3, padding=1)).to(cuda).eval()
    nn.init.normal_(model[0].weight, std=27 ** -0.5)
    x = torch.randn(1, 3, 28, 28, device=cuda)
    with torch.no_grad():
        expected = model(x)
        apply(model, "h200", "fma", input_shape=tuple(x.shape), calibration=x)
        got = model(x)
    convs = seer_convolutions(model)
    choice = convs["2"].seer_choice
    assert 0.97 < choice.sparsity < 1.0, choice.sparsity
    assert convs["2"].last_algorithm == "SEER_SPARSE_GATHER", (choice.guesses, convs["2"].fallbacks)
    assert _relative_error(got, expected) < 1e-5
    module = convs["2"]
    inner = model[1](model[0](x))
    with torch.no_grad():
        names = [k.name for k in tracer.trace(lambda: module(inner))]
    assert any("seer_sparse_gather" in n for n in names), names


def test_sparse_gather_captures_in_a_cuda_graph_and_the_others_refuse(cuda, tracer):
    model = _relu_net(cuda)
    static = torch.randn(2, 3, 32, 32, device=cuda)
    with torch.no_grad():
        expected = {}
        for _ in range(2):
            x = torch.randn_like(static)
            expected[x] = model(x)
        force(model, "SEER_SPARSE_GATHER", math="fma")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            model(static)  # warmed up on a side stream, as torch.cuda.graph asks
        torch.cuda.current_stream().wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = model(static)
        assert {m.last_algorithm for m in seer_convolutions(model).values()} == {"SEER_SPARSE_GATHER"}
        for x, want in expected.items():  # new inputs into the captured input, replayed
            static.copy_(x)
            graph.replay()
            torch.cuda.synchronize()
            assert _relative_error(out, want) < 1e-5
        names = [k.name for k in tracer.trace(graph.replay)]
        assert sum("seer_sparse_gather" in n for n in names) == len(seer_convolutions(model)), names
        for algo in ("SEER_SPARSE_SCATTER", "SEER_SPARSE_POINTWISE"):
            restore(model)
            force(model, algo, math="fma")
            model(static)  # warmed up: runners built
            torch.cuda.synchronize()
            with pytest.raises(RuntimeError, match=f"{algo} cannot be captured in a CUDA graph"):
                with torch.cuda.graph(torch.cuda.CUDAGraph()):
                    model(static)
            torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with pytest.raises(RuntimeError, match="cannot be captured in a CUDA graph"):
            with torch.cuda.graph(graph):
                model(x)
    torch.cuda.synchronize()

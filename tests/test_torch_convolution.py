"""seer.torch's convolution modules on the CPU: swapping, choices and the fallback to PyTorch.

That the chosen algorithm really runs is tested on a GPU (tests/test_gpu_torch.py).
"""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")

import torch_nets  # noqa: E402
from seer.algorithms import algorithm_names  # noqa: E402
from seer.errors import InputError  # noqa: E402
from seer.layers.shapes import ConvShape  # noqa: E402
from seer.predict.model import best_per_layer  # noqa: E402
from seer.torch.convolution import (PYTORCH, Fixed, Predicted, SeerConv1d, SeerConv2d, SeerConv3d, apply,  # noqa: E402
                                    force, restore, seer_convolutions)


def _conv_names(model) -> set[str]:
    return {n for n, m in model.named_modules() if type(m) in (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)}


def test_force_swaps_every_plain_convolution_and_keeps_the_parameters():
    model = torch_nets.every_kind()
    names = _conv_names(model)
    weights = {n: m.weight for n, m in model.named_modules() if n in names}
    keys = list(model.state_dict())
    force(model, "implicit_gemm", math="fma")
    swapped = seer_convolutions(model)
    assert set(swapped) == names  # the transposed convolution is not swapped
    assert all(m.weight is weights[n] for n, m in swapped.items())
    assert list(model.state_dict()) == keys
    assert all(m.seer_choice.name == "IMPLICIT_GEMM" and m.seer_choice.math == "fma" for m in swapped.values())
    assert "algorithm=IMPLICIT_GEMM, math=fma" in repr(swapped["stem"])
    restore(model)
    assert not seer_convolutions(model) and _conv_names(model) == names
    assert all(m.weight is weights[n] for n, m in model.named_modules() if n in names)


def test_a_swapped_convolution_keeps_its_hooks_and_attributes_and_is_the_same_object():
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 1)).eval()
    conv, seen = model[2], []
    conv.tag = "probe"
    before = set(vars(conv))
    conv.register_forward_pre_hook(lambda m, args: (args[0] * (args[0] > 0.5),))  # the input thinned
    conv.register_forward_hook(lambda m, args, out: seen.append(float((args[0] == 0).float().mean())))
    x = torch.randn(2, 3, 16, 16)
    with torch.no_grad():
        expected = model(x)
        force(model, "GEMM", math="fma")
        assert model[2] is conv and type(conv) is SeerConv2d and conv.tag == "probe"
        with warnings.catch_warnings():  # on the CPU, PyTorch's convolution runs (and says why)
            warnings.simplefilter("ignore")
            got = model(x)
    assert torch.equal(got, expected) and len(seen) == 2 and seen[0] == seen[1] > 0.5
    restore(model)
    assert model[2] is conv and type(conv) is torch.nn.Conv2d and set(vars(conv)) == before
    assert len(conv._forward_pre_hooks) == len(conv._forward_hooks) == 1


# torch_nets.every_kind holds a 'same'-padded layer with an even kernel on purpose; PyTorch warns,
# once per process, that it pads a copy of the input for it.
@pytest.mark.filterwarnings("ignore:Using padding='same' with even kernel lengths:UserWarning")
def test_on_the_cpu_pytorch_runs_and_says_why_once_per_reason():
    model = torch_nets.every_kind().eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        expected = model(x)
        force(model, "GEMM")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = model(x)
            model(x)
    assert torch.equal(got, expected)
    swapped = seer_convolutions(model)
    ours = [str(w.message) for w in caught if str(w.message).startswith("seer: ")]
    assert len(ours) == len(swapped)  # once per module, not per call
    assert all("not on a GPU" in message for message in ours)
    assert all(m.last_algorithm == PYTORCH for m in swapped.values())
    assert swapped["shared.conv"].fallbacks == {"the input is not on a GPU": 4}  # run twice per pass


def test_every_kind_of_module_is_swapped_with_its_class():
    model = torch_nets.video()
    force(model, "IMPLICIT_PRECOMP_GEMM")
    assert type(model.conv3d) is SeerConv3d and type(model.conv1d) is SeerConv1d
    # On a CPU each swapped module says once that PyTorch's own convolution runs, and runs it.
    with pytest.warns(UserWarning, match="not on a GPU; PyTorch's own convolution runs instead") as said:
        y = model(torch.randn(1, 3, 4, 16, 16))
    assert sorted(str(w.message).split(":")[1].strip() for w in said) == ["conv1d", "conv3d"]
    assert y.shape[1] == 4
    restore(model)
    assert type(model.conv3d) is torch.nn.Conv3d


def test_subclasses_are_left_alone_and_a_bare_convolution_is_refused():
    class Custom(torch.nn.Conv2d):
        pass

    model = torch.nn.Sequential(Custom(3, 4, 3), torch.nn.Conv2d(4, 4, 1))
    force(model, "GEMM")
    assert type(model[0]) is Custom and type(model[1]) is SeerConv2d
    with pytest.raises(InputError, match="holds the convolution"):
        force(torch.nn.Conv2d(3, 4, 3), "GEMM")


@pytest.mark.parametrize("name", ["NO_SUCH_ALGO", "", "pytorch", "PYTORCH_BENCHMARK"])
def test_unknown_algorithms_and_pytorchs_policies_are_input_errors(name):
    with pytest.raises(InputError):
        Fixed(name)


def test_seers_own_kernels_can_be_forced_and_ranked():
    assert Fixed("seer_implicit_gemm", "fma").name == "SEER_IMPLICIT_GEMM"
    from seer.predict.persist import load_model

    model = load_model("h100", math="fma")
    layer = ConvShape.square(8, 64, 56, 64, 3, stride=1, padding=1)
    every = Predicted(model, "fma", algorithms="all", guard=False)
    assert every.algorithm(layer) == best_per_layer(model.predict([layer], "fma"))["best_algo"].iloc[0]
    assert Predicted(model, "fma", algorithms="seer", guard=False).algorithm(layer).startswith("SEER_")
    assert Predicted(model, "fma", guard=False).algorithm(layer) in algorithm_names("cudnn")
    with pytest.raises(InputError, match="unknown algorithm"):
        Predicted(model, "fma", algorithms="fastest")


def test_apply_predicts_every_layer_of_the_input_in_advance():
    model = torch_nets.every_kind()
    apply(model, "h100", "fma", input_shape=(1, 3, 32, 32))
    choice = seer_convolutions(model)["stem"].seer_choice
    assert isinstance(choice, Predicted) and choice.math == "fma"
    stem = ConvShape.square(1, 3, 32, 16, 3, stride=2, padding=1)
    assert stem in choice.picks and choice.picks[stem] is not None
    assert len(choice.picks) >= 8  # every distinct layer of the pass
    picked = set(choice.picks.values()) - {None}
    from seer.algorithms import algorithm_names

    assert picked <= set(algorithm_names("cudnn"))


def test_a_layer_seen_later_is_predicted_then():
    from seer.predict.persist import load_model

    choice = Predicted(load_model("h100", math="default"), "default", guard=False)
    layer = ConvShape.square(8, 64, 56, 64, 3, stride=1, padding=1)
    assert choice.algorithm(layer) in {"IMPLICIT_PRECOMP_GEMM", "IMPLICIT_GEMM", "GEMM", "FFT", "FFT_TILING",
                                       "WINOGRAD_NONFUSED"}
    assert list(choice.picks) == [layer]


def test_the_layout_is_read_from_input_and_weight_alike():
    from seer.torch.convolution import _layout

    x, w = torch.zeros(2, 16, 8, 8), torch.zeros(32, 16, 3, 3)
    last = torch.channels_last
    assert _layout(x, w, 2) == "nchw"
    assert _layout(x.to(memory_format=last), w.to(memory_format=last), 2) == "nhwc"
    assert _layout(x.to(memory_format=last), w, 2) is None  # mixed: PyTorch runs it, and says why
    x3, w3 = torch.zeros(1, 8, 4, 4, 4), torch.zeros(8, 8, 3, 3, 3)
    assert _layout(x3.to(memory_format=torch.channels_last_3d), w3.to(memory_format=torch.channels_last_3d), 3) == "nhwc"
    assert _layout(torch.zeros(2, 16, 9).transpose(1, 2).contiguous().transpose(1, 2), torch.zeros(4, 16, 3), 1) is None


def test_a_channels_last_input_with_an_nchw_weight_runs_a_copy_of_the_weight_kept_until_it_changes():
    holder = torch.nn.Sequential(torch.nn.Conv2d(16, 32, 2, stride=2))
    force(holder, "IMPLICIT_PRECOMP_GEMM")
    conv = holder[0]
    x = torch.randn(2, 16, 8, 8)
    with torch.no_grad():
        assert conv._repacks(x.to(memory_format=torch.channels_last)) and not conv._repacks(x)
        copy = conv._channels_last_weight(conv.weight)
        assert copy.is_contiguous(memory_format=torch.channels_last) and torch.equal(copy, conv.weight)
        assert conv._channels_last_weight(conv.weight) is copy
        conv.weight.mul_(2)  # in place: its version counter moves
        again = conv._channels_last_weight(conv.weight)
        assert again is not copy and torch.equal(again, conv.weight)
    # Gradients want the weight itself: PyTorch runs the layer, as before.
    assert not conv._repacks(x.to(memory_format=torch.channels_last))
    restore(holder)
    assert not hasattr(holder[0], "_weight_copy")


def test_the_guard_keeps_pytorch_unless_the_pick_is_surely_faster():
    from seer.predict.persist import load_model
    from seer.torch.convolution import (GUARD_DEPTHWISE_HOST_MS, GUARD_HOST_MS, GUARD_LAUNCH_MS, GUARD_LEGACY_HOST_MS,
                                        GUARD_OWN_HOST_MS, GUARD_PYTORCH_HOST_MS, LayerGuess, extra_host_ms,
                                        keeps_pick)

    model = load_model("h100", math="fma")
    choice = Predicted(model, "fma")
    layer = ConvShape.square(32, 256, 56, 64, 1)
    choice.prepare([layer])
    guess, pick = choice.guesses[layer], choice.picks[layer]
    # The guess is seer predict's: the pick, its 80% bound, PyTorch's time and bound.
    row = model.pick([layer], math="fma", algorithms="cudnn").iloc[0]
    assert (guess.pick, guess.pick_ms, guess.pick_high, guess.pytorch_ms, guess.pytorch_low) == (
        row["best_algo"], row["best_ms"], row["best_high80"], row["pytorch_ms"], row["pytorch_low80"])
    assert keeps_pick(guess, None, captured=True) == (row["recommended"] == pick)
    assert not keeps_pick(guess, pick)  # PyTorch's heuristic runs the same algorithm
    host = GUARD_PYTORCH_HOST_MS + GUARD_HOST_MS
    # A long layer: the GPU time decides, by the intervals (not the point times).
    assert keeps_pick(LayerGuess("A", 1.0, 1.1, 1.5, 1.2), "B")
    assert not keeps_pick(LayerGuess("A", 1.0, 1.3, 1.5, 1.2), "B")  # overlapping intervals
    assert not keeps_pick(LayerGuess("A", 1.0, float("nan"), 0.9, float("nan")), "B")  # no intervals: the points
    assert keeps_pick(LayerGuess("A", 1.0), "B")  # no model of PyTorch's choice: the pick stands
    # A short layer in an eager pass: the host's time per call hides the GPU's gain...
    short = LayerGuess("A", host / 4, host / 3, host * 1.2, host * 0.99)
    assert not keeps_pick(short, "B")
    # ...which a model captured in CUDA graphs keeps.
    assert keeps_pick(short, "B", captured=True)
    # A pick's host cost: its path, and a launch per group where the algorithm loops over them.
    grouped = ConvShape.square(32, 120, 28, 120, 3, padding=1, groups=30)
    assert extra_host_ms("IMPLICIT_PRECOMP_GEMM", layer, "fma") == GUARD_HOST_MS
    assert extra_host_ms("GEMM", layer, "fma") == GUARD_LEGACY_HOST_MS
    assert extra_host_ms("WINOGRAD_NONFUSED", grouped, "fma") == GUARD_HOST_MS + GUARD_LAUNCH_MS * (4 * 30 - 1)
    # On a depthwise layer PyTorch's own kernel costs the host less than its cuDNN calls: a cuDNN pick costs
    # more there; seer's own kernels cost what they cost elsewhere, and a split's zeroing is a launch more.
    depthwise = ConvShape.square(32, 96, 56, 96, 3, padding=1, groups=96)
    assert extra_host_ms("IMPLICIT_PRECOMP_GEMM", depthwise, "fma") == GUARD_HOST_MS + GUARD_DEPTHWISE_HOST_MS
    assert extra_host_ms("SEER_IMPLICIT_GEMM", depthwise, "fma") == GUARD_OWN_HOST_MS == \
        extra_host_ms("SEER_DIRECT", layer, "fma") < GUARD_HOST_MS
    assert extra_host_ms("SEER_IMPLICIT_GEMM_SPLITK", layer, "fma") == GUARD_OWN_HOST_MS + GUARD_LAUNCH_MS
    gpu = LayerGuess("A", 0.05, 0.06, 0.5, 0.45)
    assert keeps_pick(gpu, "B", extra_ms=extra_host_ms("IMPLICIT_GEMM", layer, "fma"))
    assert not keeps_pick(gpu, "B", extra_ms=extra_host_ms("WINOGRAD_NONFUSED", grouped, "fma"))
    assert keeps_pick(gpu, "B", extra_ms=extra_host_ms("WINOGRAD_NONFUSED", grouped, "fma"), captured=True)


def test_with_a_margin_the_guard_weighs_the_picks_time_times_e_to_the_margin_against_pytorchs():
    import math

    from seer.predict.persist import load_model
    from seer.torch.convolution import GUARD_HOST_MS, GUARD_PYTORCH_HOST_MS, LayerGuess, keeps_pick

    # The intervals overlap (1.3 > 1.2), yet the ratio clears a margin of 0.3 (1.35 < 1.5), not one of 0.5.
    assert keeps_pick(LayerGuess("A", 1.0, 1.3, 1.5, 1.2, margin=0.3), "B")
    assert not keeps_pick(LayerGuess("A", 1.0, 1.3, 1.5, 1.2, margin=0.5), "B")
    # Disjoint intervals do not keep a pick whose ratio misses the margin.
    assert not keeps_pick(LayerGuess("A", 1.0, 1.1, 1.5, 1.2, margin=0.5), "B", captured=True)
    guess = LayerGuess("A", 1.0, 1.3, 1.5, 1.2, margin=0.3)
    assert guess.pick_slowest == pytest.approx(math.exp(0.3)) and guess.pytorch_fastest == 1.5
    assert not keeps_pick(guess, "A")  # PyTorch's heuristic runs the pick already
    # An eager pass: the host's time still hides a short layer's gain, margin or not.
    host = GUARD_PYTORCH_HOST_MS + GUARD_HOST_MS
    short = LayerGuess("A", host / 4, float("nan"), host * 0.9, float("nan"), margin=0.1)
    assert not keeps_pick(short, "B") and keeps_pick(short, "B", captured=True)
    # seer.torch takes the margin of the layer's kind from the model, as seer predict does.
    model = load_model("h100", math="fma")
    choice = Predicted(model, "fma")
    layer = ConvShape.square(32, 256, 56, 64, 1)
    choice.prepare([layer])
    assert choice.guesses[layer].margin == model.predictor("fma").guard_margins["square"]


def test_a_pass_takes_picks_while_it_is_gpu_bound():
    from seer.torch.convolution import pass_picks

    # GPU-bound: the picks that gain most GPU time per host ms first, while the pass shortens.
    candidates = [("cheap", 0.5, 0.1), ("dear", 0.5, 0.9), ("free", 0.2, -0.01), ("lost", -0.1, 0.0)]
    assert pass_picks(candidates, host_ms=3.0, gpu_ms=5.0) == {"free", "cheap", "dear"}
    assert pass_picks(candidates, host_ms=4.0, gpu_ms=5.0) == {"free", "cheap"}  # dear: host-bound after
    # Host-bound: only what costs no host time.
    assert pass_picks(candidates, host_ms=5.0, gpu_ms=5.0) == {"free"}
    assert pass_picks([], host_ms=1.0, gpu_ms=2.0) == set()


def test_a_pass_whose_gpu_waits_on_the_host_is_host_bound():
    from seer.torch.convolution import GPU_BOUND_SHARE, PassTimes, pass_picks

    candidates = [("cheap", 0.5, 0.1), ("free", 0.2, -0.01)]
    # GPU time unknown (no CuPy) or near the wall time: the GPU is busy, its time is the wall time.
    assert PassTimes(3.0, 5.0, float("nan")).bounds() == (3.0, 5.0)
    assert PassTimes(3.0, 5.0, 4.8).bounds() == (3.0, 5.0)
    # ResNet-50 at batch 1 (H200, strict FP32): 2.9 ms eager, 2.35 ms on the GPU, enqueued in less
    # than either. The GPU idles while the host launches: only picks that add no host time help.
    host, gpu = PassTimes(2.0, 2.9, 2.35).bounds()
    assert (host, gpu) == (2.9, 2.35) and 2.35 < GPU_BOUND_SHARE * 2.9
    assert pass_picks(candidates, host, gpu) == {"free"}
    assert pass_picks(candidates, *PassTimes(2.0, 2.9, float("nan")).bounds()) == {"free", "cheap"}
    assert PassTimes(4.0, 2.9, 1.0).bounds() == (4.0, 1.0)  # enqueuing takes longer than the pass: host-bound already


def test_without_cupy_a_pass_has_no_gpu_time_and_counts_as_gpu_bound(monkeypatch):
    import importlib.util
    import math

    from seer.torch.convolution import PassTimes, pass_gpu_ms

    calls = []
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cupy" else real_find_spec(name, *a))
    gpu_ms = pass_gpu_ms(lambda: calls.append(1), 2.9, "cuda:0")
    assert math.isnan(gpu_ms) and not calls  # nothing timed, nothing run
    assert PassTimes(2.0, 2.9, gpu_ms).bounds() == (2.0, 2.9)


# -- the backward passes (apply(..., training=True), force(..., dgrad=, wgrad=)) -------------
def test_force_takes_backward_algorithms_of_their_own_pass():
    model = torch_nets.every_kind()
    force(model, "IMPLICIT_GEMM", math="fma", dgrad="BWD_DATA_ALGO_1", wgrad="bwd_filter_algo_3")
    stem = seer_convolutions(model)["stem"]
    assert [c.name for c in stem.seer_backward] == ["BWD_DATA_ALGO_1", "BWD_FILTER_ALGO_3"]
    assert "dgrad=BWD_DATA_ALGO_1, wgrad=BWD_FILTER_ALGO_3" in repr(stem)
    with pytest.raises(InputError, match="BWD_FILTER_ALGO_1 computes bwd_filter, not bwd_data"):
        force(torch_nets.every_kind(), "GEMM", dgrad="BWD_FILTER_ALGO_1")
    with pytest.raises(InputError, match="computes bwd_data, not fwd"):
        force(torch_nets.every_kind(), "BWD_DATA_ALGO_0")


def test_a_backward_choice_is_what_seer_predict_recommends_for_the_pass():
    from seer.predict.persist import load_model
    from seer.torch.convolution import PredictedPass

    layers = [ConvShape.square(32, 64, 56, 64, 3, 1, 1), ConvShape.square(32, 256, 56, 512, 1, 2, 0),
              ConvShape.square(8, 512, 14, 512, 3, 1, 1)]
    for pass_ in ("bwd_data", "bwd_filter"):
        model = load_model("h200", math="fma", pass_=pass_)
        choice = PredictedPass(model, "fma", captured=True)  # on the GPU alone: no host time counted
        expected = best_per_layer(model.predict(layers, "fma"))["recommended"].tolist()
        assert [choice.algorithm(l) or "PYTORCH" for l in layers] == expected
        sure = PredictedPass(model, "fma", deterministic=True)
        from seer.algorithms import get_algorithm

        assert all(get_algorithm(a).deterministic for a in map(sure.algorithm, layers) if a is not None)
        assert choice.describe() == f"seer {pass_}"
    with pytest.raises(InputError, match="backward pass's model"):
        PredictedPass(load_model("h200", math="fma"), "fma")


def test_an_eager_training_step_takes_the_picks_that_shorten_it(monkeypatch):
    from seer.predict.persist import load_model
    from seer.torch import convolution
    from seer.torch.convolution import (GUARD_BACKWARD_HOST_MS, GUARD_LAUNCH_MS, LayerGuess, PassTimes,
                                        PredictedPass, decide_step, extra_host_ms)

    monkeypatch.setattr(convolution, "cudnn_heuristic_choice", lambda layer, math: None)  # no GPU to ask
    long_, short, depthwise = (ConvShape.square(32, 256, 56, 256, 3, 1, 1), ConvShape.square(1, 64, 7, 64, 3, 1, 1),
                               ConvShape.square(32, 96, 56, 96, 3, 1, 1, groups=96))
    guesses = {  # (forward, dgrad, wgrad): the pick, its ms and upper bound, PyTorch's ms and lower bound
        long_: [("IMPLICIT_GEMM", 1.0, 1.1, 2.0, 1.8), ("BWD_DATA_ALGO_1", 1.0, 1.1, 2.0, 1.8),
                ("BWD_FILTER_ALGO_1", 1.0, 1.1, 1.05, 1.0)],  # the wgrad pick is not surely faster
        short: [("IMPLICIT_GEMM", 0.01, 0.011, 0.03, 0.028), ("BWD_DATA_ALGO_1", 0.01, 0.011, 0.03, 0.028),
                ("BWD_FILTER_ALGO_1", 0.01, 0.011, 0.03, 0.028)],  # 0.017 ms gained for 0.26 of host time
        depthwise: [("IMPLICIT_GEMM", 1.0, 1.1, 2.0, 1.8), ("BWD_DATA_ALGO_1", 1.0, 1.1, 1.1, 1.0),
                    ("BWD_FILTER_WINOGRAD_NONFUSED", 0.2, 0.25, 0.5, 0.45)]}  # 4 launches per group

    def decide(host_ms, wall_ms, gpu_ms=float("nan")):
        forward = Predicted(load_model("h200", math="fma"), "fma")
        backward = [PredictedPass(load_model("h200", math="fma", pass_=p), "fma") for p in ("bwd_data", "bwd_filter")]
        for layer, (f, d, w) in guesses.items():
            for chooser, guess in zip((forward, *backward), (f, d, w)):
                chooser.picks[layer], chooser.guesses[layer] = guess[0], LayerGuess(*guess)
        decide_step(forward, backward, list(guesses), PassTimes(host_ms, wall_ms, gpu_ms))
        return forward, {layer: (forward.algorithm(layer), *(b.algorithm(layer) for b in backward)) for layer in guesses}

    # A step whose GPU is busy (host 10 ms, 100 ms per step) hides the host time: every pick that wins on the GPU.
    _, picks = decide(10.0, 100.0)
    assert picks[long_] == ("IMPLICIT_GEMM", "BWD_DATA_ALGO_1", None)
    assert picks[short] == ("IMPLICIT_GEMM", "BWD_DATA_ALGO_1", "BWD_FILTER_ALGO_1")
    assert picks[depthwise] == ("IMPLICIT_GEMM", None, "BWD_FILTER_WINOGRAD_NONFUSED")
    # Near the balance, the picks dearest in host time per GPU ms are left out first: 384 launches,
    # about 2 ms of host time for 0.2 ms on the GPU, and the short layer's backward calls.
    assert extra_host_ms("BWD_FILTER_WINOGRAD_NONFUSED", depthwise, "fma") == (
        GUARD_BACKWARD_HOST_MS + GUARD_LAUNCH_MS * (4 * 96 - 1))
    _, picks = decide(10.0, 13.0)
    assert picks[long_] == ("IMPLICIT_GEMM", "BWD_DATA_ALGO_1", None)
    assert picks[depthwise] == ("IMPLICIT_GEMM", None, None)
    assert picks[short] == ("IMPLICIT_GEMM", None, None)
    # A host-bound step takes nothing that costs host time.
    forward, picks = decide(10.0, 10.0)
    assert set(picks.values()) == {(None, None, None)} and set(forward.guarded) == set(guesses)
    # So is a step whose GPU is busy for half of it, though it is enqueued in a tenth.
    forward, picks = decide(10.0, 100.0, 50.0)
    assert set(picks.values()) == {(None, None, None)} and set(forward.guarded) == set(guesses)
    # What the picks were weighed against goes into seer profile-network's records.
    from seer.networks.profile_network import weighed_fields

    assert weighed_fields(forward) == {"weighed_host_ms": 10.0, "weighed_wall_ms": 100.0, "weighed_gpu_ms": 50.0}
    assert weighed_fields(Predicted(load_model("h200", math="fma"), "fma")) == {}


def test_an_eager_training_steps_picks_stay_only_where_the_step_with_them_measures_faster(monkeypatch):
    """decide_step's picks of every pass are a model of host and GPU time; the step timed with
    them, taking turns with PyTorch's, keeps them all or sends every pass back to PyTorch."""
    from seer.predict.persist import load_model
    from seer.torch import convolution
    from seer.torch.convolution import CONFIRM_SHARE, LayerGuess, PassTimes, PredictedPass, decide_step

    monkeypatch.setattr(convolution, "cudnn_heuristic_choice", lambda layer, math: None)  # no GPU to ask
    layer = ConvShape.square(32, 256, 56, 256, 3, 1, 1)
    guesses = [("IMPLICIT_GEMM", 1.0, 1.1, 2.0, 1.8), ("BWD_DATA_ALGO_1", 1.0, 1.1, 2.0, 1.8),
               ("BWD_FILTER_ALGO_1", 1.0, 1.1, 2.0, 1.8)]

    def decided():
        forward = Predicted(load_model("h200", math="fma"), "fma")
        backward = [PredictedPass(load_model("h200", math="fma", pass_=p), "fma") for p in ("bwd_data", "bwd_filter")]
        for chooser, guess in zip((forward, *backward), guesses):
            chooser.picks[layer], chooser.guesses[layer] = guess[0], LayerGuess(*guess)
        decide_step(forward, backward, [layer], PassTimes(10.0, 100.0, 99.0))  # GPU-bound: every pick
        assert forward.picked() and all(b.algorithm(layer) is not None for b in backward)
        return forward, backward

    forward, backward = decided()
    assert forward.confirm_step(CONFIRM_SHARE, backward) and forward.confirmed_ratio == CONFIRM_SHARE
    assert [c.algorithm(layer) for c in (forward, *backward)] == [g[0] for g in guesses]
    forward, backward = decided()
    assert not forward.confirm_step(1.05, backward)  # slower with them (DenseNet-121, H200, 2026-11-29)
    assert [c.algorithm(layer) for c in (forward, *backward)] == [None, None, None]
    assert forward.guarded[layer][0] == "IMPLICIT_GEMM" and not forward.picked()
    assert forward.confirm_step(1.05, [None, *backward[1:]]) is False  # a pass without a choice is skipped


def test_an_eager_training_step_slower_with_its_picks_keeps_those_that_pay_at_the_measured_host_cost(monkeypatch):
    """A step timed slower with its picks than the weighing said (its host time undercounted)
    keeps, once, the picks that still shorten it at the host cost the measurement implies: the
    forward picks, cheap in host time per GPU ms, and the dgrad picks up to the new balance;
    timed slower again, none."""
    from seer.predict.persist import load_model
    from seer.torch import convolution
    from seer.torch.convolution import LayerGuess, PassTimes, PredictedPass, decide_step

    monkeypatch.setattr(convolution, "cudnn_heuristic_choice", lambda layer, math: None)  # no GPU to ask
    layers = [ConvShape.square(32, 64 * (i + 1), 28, 64, 3, 1, 1) for i in range(8)]

    def decided():
        forward = Predicted(load_model("h200", math="fma"), "fma")
        backward = [PredictedPass(load_model("h200", math="fma", pass_="bwd_data"), "fma"), None]  # wgrad: PyTorch's
        for layer in layers:  # each pass 0.5 ms faster on the GPU, surely
            for chooser, pick in ((forward, "IMPLICIT_GEMM"), (backward[0], "BWD_DATA_ALGO_1")):
                chooser.picks[layer], chooser.guesses[layer] = pick, LayerGuess(pick, 1.0, 1.0, 1.5, 1.5)
        decide_step(forward, backward, layers, PassTimes(80.0, 100.0, 99.0))  # GPU-bound: every pick
        return forward, backward

    def taken(forward, backward):
        return [sum(c.algorithm(layer) is not None for layer in layers) for c in (forward, backward[0])]

    forward, backward = decided()
    assert taken(forward, backward) == [8, 8]
    assert not forward.confirm_step(1.05, backward, final=False)  # 105 ms: the host binds, not the GPU
    fewer = taken(forward, backward)
    assert fewer[0] == 8 and 0 < fewer[1] < 8, fewer  # a dgrad pick costs 2.7x a forward pick's host time
    assert forward.confirm_step(0.97, backward, final=True) and taken(forward, backward) == fewer
    forward, backward = decided()
    forward.confirm_step(1.05, backward, final=False)
    assert not forward.confirm_step(1.02, backward, final=True) and taken(forward, backward) == [0, 0]
    assert not forward.picked() and set(forward.guarded) == set(layers)


def test_the_picks_of_an_eager_pass_stay_only_where_the_swapped_pass_measures_faster(monkeypatch):
    from seer.networks.profile_network import weighed_fields
    from seer.predict.persist import load_model
    from seer.torch import convolution
    from seer.torch.convolution import CONFIRM_SHARE, LayerGuess, PassTimes

    monkeypatch.setattr(convolution, "cudnn_heuristic_choice", lambda layer, math: None)  # no GPU to ask
    big, small = ConvShape.square(32, 256, 56, 256, 3, 1, 1), ConvShape.square(32, 64, 56, 64, 1, 1, 0)
    lost = ConvShape.square(1, 64, 7, 64, 3, 1, 1)  # its pick is not surely faster: PyTorch's from the start
    guesses = {big: LayerGuess("IMPLICIT_GEMM", 1.0, 1.1, 2.0, 1.8), small: LayerGuess("GEMM", 0.1, 0.11, 0.2, 0.18),
               lost: LayerGuess("FFT", 1.0, 1.1, 1.05, 1.0)}
    weighed = PassTimes(host_ms=5.0, wall_ms=20.0, gpu_ms=19.8)  # GPU-bound: every pick that wins on the GPU

    def decided():
        choice = Predicted(load_model("h200", math="fma"), "fma")
        for layer, guess in guesses.items():
            choice.picks[layer], choice.guesses[layer] = guess.pick, guess
        choice.decide_pass([big, big, small, lost], weighed)
        assert choice.picked() and {layer: choice.algorithm(layer) for layer in guesses} == {
            big: "IMPLICIT_GEMM", small: "GEMM", lost: None}
        return choice

    # Faster by at least 1 - CONFIRM_SHARE: the picks stay, and the record says what confirmed them.
    choice = decided()
    assert choice.confirm(PassTimes(5.4, CONFIRM_SHARE * 20.0, 17.0))
    assert choice.algorithm(big) == "IMPLICIT_GEMM" and choice.algorithm(small) == "GEMM"
    assert weighed_fields(choice) == {"weighed_host_ms": 5.0, "weighed_wall_ms": 20.0, "weighed_gpu_ms": 19.8,
                                      "confirmed_host_ms": 5.4, "confirmed_wall_ms": CONFIRM_SHARE * 20.0,
                                      "confirmed_gpu_ms": 17.0}
    # Slower, or faster by less than that: their host cost ate the gain, and every layer goes back to PyTorch.
    for wall_ms in (20.5, 19.9):
        choice = decided()
        assert not choice.confirm(PassTimes(21.0, wall_ms, 17.0))
        assert not choice.picked() and {choice.algorithm(layer) for layer in guesses} == {None}
        assert set(choice.guarded) == set(guesses)  # each says what it gave up
        assert weighed_fields(choice)["confirmed_wall_ms"] == wall_ms
    # Timed taking turns with PyTorch's pass, the ratio of the two decides, whatever the wall time
    # measured minutes after the weighing says (the host drifts), and the record keeps it.
    choice = decided()
    assert choice.confirm(PassTimes(5.4, 20.5, 17.0), ratio=CONFIRM_SHARE)
    assert choice.picked() and weighed_fields(choice)["confirmed_ratio"] == CONFIRM_SHARE
    choice = decided()
    assert not choice.confirm(PassTimes(5.4, 15.0, 17.0), ratio=1.02) and not choice.picked()
    assert weighed_fields(choice)["confirmed_ratio"] == 1.02
    # A pass not weighed (the picks decided layer by layer) has nothing to confirm against.
    unweighed = Predicted(load_model("h200", math="fma"), "fma")
    assert not unweighed.picked() and unweighed.confirm(PassTimes(1.0, 2.0)) and unweighed.weighed is None


def test_picks_turned_down_are_weighed_again_at_the_host_cost_the_measurement_shows(monkeypatch):
    from seer.predict.persist import load_model
    from seer.torch import convolution
    from seer.torch.convolution import LayerGuess, PassTimes

    monkeypatch.setattr(convolution, "cudnn_heuristic_choice", lambda layer, math: None)  # no GPU to ask
    cheap, dear = ConvShape.square(32, 256, 56, 256, 3, 1, 1), ConvShape.square(32, 64, 56, 64, 1, 1, 0)
    # GPU ms gained per call (PyTorch's lower bound less the pick's upper bound) and host ms counted per call.
    guesses = {cheap: LayerGuess("IMPLICIT_GEMM", 1.0, 1.0, 3.0, 3.0), dear: LayerGuess("GEMM", 1.0, 1.0, 1.5, 1.5)}
    costs = {cheap: 0.5, dear: 0.5}
    monkeypatch.setattr(convolution, "extra_host_ms", lambda algorithm, layer, math: costs[layer])
    weighed = PassTimes(host_ms=15.0, wall_ms=20.0, gpu_ms=19.8)  # GPU-bound, 5 ms of host time to spare

    def decided():
        choice = Predicted(load_model("h200", math="fma"), "fma")
        for layer, guess in guesses.items():
            choice.picks[layer], choice.guesses[layer] = guess.pick, guess
        choice.decide_pass([cheap, dear], weighed)  # counted: host 16 ms, GPU 17.5 ms
        assert {choice.algorithm(layer) for layer in guesses} == {"IMPLICIT_GEMM", "GEMM"}
        return choice

    # Measured host-bound at 21 ms: the two picks added 6 ms of host time, not 1. At 3 ms each, the cheap
    # pick alone (2 ms of GPU time for 3 of host) still shortens the pass; the dear one (0.5 for 3) does not.
    choice = decided()
    assert not choice.confirm(PassTimes(21.0, 21.0, 17.5), final=False)
    assert (choice.algorithm(cheap), choice.algorithm(dear)) == ("IMPLICIT_GEMM", None) and choice.picked()
    assert choice.confirm(PassTimes(18.2, 18.5, 18.0))  # timed again: the cheap pick stays
    # The same from a ratio of the two passes timed taking turns: 1.05 of the weighed 20 ms is 21 ms.
    choice = decided()
    assert not choice.confirm(PassTimes(15.0, 20.0, 17.5), final=False, ratio=1.05)
    assert (choice.algorithm(cheap), choice.algorithm(dear)) == ("IMPLICIT_GEMM", None)
    # Timed again and still slower: every layer goes back to PyTorch's path.
    choice = decided()
    assert not choice.confirm(PassTimes(21.0, 21.0, 17.5), final=False)
    assert not choice.confirm(PassTimes(20.5, 20.5, 18.0)) and not choice.picked()
    # So much slower (30 ms: 7.5 ms of host time per pick) that no pick shortens the pass: none is timed again.
    choice = decided()
    assert not choice.confirm(PassTimes(30.0, 30.0, 17.5), final=False) and not choice.picked()
    assert set(choice.guarded) == set(guesses)


def test_apply_for_training_gives_every_module_its_backward_choices_and_pytorch_runs_on_the_cpu():
    from seer.torch.convolution import PredictedPass

    model = torch_nets.every_kind()
    x = torch.randn(2, 3, 24, 24, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model(x).square().sum().backward()
        expected = [x.grad.clone()] + [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        x.grad = None
        apply(model, gpu="h200", math="fma", training=True)
        model(x).square().sum().backward()
    swapped = seer_convolutions(model)
    assert swapped and all(isinstance(c, PredictedPass) for m in swapped.values() for c in m.seer_backward)
    assert [c.pass_ for c in swapped["stem"].seer_backward] == ["bwd_data", "bwd_filter"]
    got = [x.grad] + [p.grad for p in model.parameters()]
    assert all(torch.equal(g, e) for g, e in zip(got, expected))  # PyTorch's own, on the CPU
    with pytest.raises(InputError, match="no trained bwd_data model for GPU 'h100'"):
        apply(torch_nets.every_kind(), gpu="h100", training=True)


def test_apply_takes_the_input_shape_as_sizes_or_text_and_refuses_what_is_neither_and_lazy_convolutions():
    from seer.torch.convolution import seer_convolutions

    for shape in ((2, 3, 24, 24), torch.Size([2, 3, 24, 24]), "2x3x24x24"):
        model = torch_nets.every_kind()
        apply(model, gpu="h200", math="fma", input_shape=shape)
        assert seer_convolutions(model)
    for wrong in ("2x3xtwo", (2, 3, 24.5, 24), (2, 0, 24, 24), 5):
        with pytest.raises(InputError, match="input"):
            apply(torch_nets.every_kind(), gpu="h200", input_shape=wrong)
    lazy = torch.nn.Sequential(torch.nn.LazyConv2d(8, 3), torch.nn.ReLU())
    with pytest.raises(InputError, match=r"lazy convolutions \(0\) have no shape yet: run one forward pass first"):
        apply(lazy, gpu="h200")
    lazy(torch.randn(1, 3, 8, 8))  # now an nn.Conv2d
    apply(lazy, gpu="h200")
    assert list(seer_convolutions(lazy)) == ["0"]


def test_applying_again_runs_what_the_last_call_says():
    """A second apply or force on a model already swapped takes effect (it was silently ignored:
    only plain nn.Conv* were swapped), and a module the call keeps is made plain again."""
    from seer.torch.convolution import seer_convolutions, swap_in

    model = torch_nets.every_kind()
    apply(model, gpu="h200", math="fma")
    apply(model, gpu="h100", math="default")
    assert {(c.seer_choice.model.gpu, c.seer_choice.math) for c in seer_convolutions(model).values()} == {
        ("h100", "default")}
    force(model, "IMPLICIT_GEMM", math="fma", dgrad="BWD_DATA_ALGO_1")
    swapped = seer_convolutions(model)
    assert {(c.seer_choice.describe(), c.seer_backward[0].name) for c in swapped.values()} == {
        ("IMPLICIT_GEMM", "BWD_DATA_ALGO_1")}
    kept = sorted(swapped)[0]
    swap_in(model, Fixed("GEMM"), keep=[kept])
    assert kept not in seer_convolutions(model) and type(model.get_submodule(kept)) in (
        torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)
    assert {c.seer_choice.describe() for c in seer_convolutions(model).values()} == {"GEMM"}
    # apply finds the layers (and, on a GPU, times the passes) of PyTorch's own model, not the one swapped before
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        apply(model, gpu="h200", math="fma", input_shape=(2, 3, 24, 24))
    assert not [w for w in seen if "seer:" in str(w.message)], [str(w.message) for w in seen]
    assert {c.seer_choice.math for c in seer_convolutions(model).values()} == {"fma"}


def test_a_swapped_model_saves_as_pytorchs_own_and_loads_without_seer():
    """torch.save(model) after apply (a whole-model checkpoint): the convolutions are saved as
    the plain modules they were, their attributes kept and seer's choices left out (they raised
    on a choice's lock, and hold a whole seer model); the model in memory stays seer's."""
    import io
    import zipfile

    from seer.torch.convolution import seer_convolutions

    model = torch_nets.every_kind()
    model.stem.note = "kept"
    apply(model, gpu="h200", math="fma", training=True)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    with zipfile.ZipFile(io.BytesIO(buffer.getvalue())) as archive:
        pickled = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    assert b"seer" not in pickled  # no class, function or attribute of seer's: loading needs no seer
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert type(loaded.stem) is torch.nn.Conv2d and loaded.stem.note == "kept" and not seer_convolutions(loaded)
    assert torch.equal(loaded.stem.weight, model.stem.weight) and seer_convolutions(model)
    x = torch.randn(2, 3, 24, 24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(loaded(x), model(x))


def test_each_backward_pass_runs_under_its_own_choices_math_mode(monkeypatch):
    """A backward pass's plan is built for its own choice's math mode, not the forward's: a
    forward left to PyTorch (a choice of default math) must not let a strict-FP32 wgrad run TF32
    kernels."""
    from seer.torch import convolution
    from seer.torch.convolution import Choice, swap_in

    class PyTorchForward(Choice):
        def algorithm(self, layer):
            return None

    built = []
    monkeypatch.setattr(convolution, "_backward_runner",
                        lambda layer, algo, math, layout, device, dims: built.append((algo.name, math)) or object())
    model = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1))
    swap_in(model, PyTorchForward(), backward=(Fixed("BWD_DATA_ALGO_1", "fma", "bwd_data"),
                                               Fixed("BWD_FILTER_ALGO_1", "default", "bwd_filter")))
    module = model[0]
    x = torch.randn(2, 8, 12, 12)
    module._backward_runners(module._plan(x, "nchw"), "nchw", x.device, 2)
    assert built == [("BWD_DATA_ALGO_1", "fma"), ("BWD_FILTER_ALGO_1", "default")]
    assert module.backward_algorithms == ("BWD_DATA_ALGO_1", "BWD_FILTER_ALGO_1")


def test_a_channels_last_depthwise_layer_keeps_pytorchs_backward_passes_as_its_forward():
    """The guard leaves a depthwise layer run channels-last to PyTorch in every pass, the
    backward ones too: the models' times are NCHW's, which such a layer's do not follow."""
    from seer.predict.persist import load_model
    from seer.torch.convolution import PredictedPass, swap_in

    def planned(guard: bool, layout: str):
        model = torch.nn.Sequential(torch.nn.Conv2d(32, 32, 7, padding=3, groups=32))
        backward = [PredictedPass(load_model("h200", math="fma", pass_=p), "fma", guard=guard)
                    for p in ("bwd_data", "bwd_filter")]
        swap_in(model, Fixed("IMPLICIT_GEMM", "fma"), backward=tuple(backward))
        x = torch.randn(8, 32, 28, 28)
        if layout == "nhwc":
            x = x.contiguous(memory_format=torch.channels_last)
        layer = ConvShape.square(8, 32, 28, 32, 7, padding=3, groups=32)
        for choice, pick in zip(backward, ("BWD_DATA_ALGO_0", "BWD_FILTER_ALGO_0")):
            choice.picks[layer] = pick  # as a prediction would have it
        return tuple(None if a is None else a.name for a in model[0]._plan(x, layout).backward)

    assert planned(True, "nchw") == ("BWD_DATA_ALGO_0", "BWD_FILTER_ALGO_0")
    assert planned(True, "nhwc") == (None, None)
    assert planned(False, "nhwc") == ("BWD_DATA_ALGO_0", "BWD_FILTER_ALGO_0")  # unguarded: the picks stand


def test_a_swapped_model_deep_copies_sharing_its_choices_and_building_its_own_runners():
    """copy.deepcopy of a model after apply (an EMA copy, a twin to time): each copied module
    shares its choices (they hold a lock, and what they decided holds for the copy) and starts
    without the runners the original built, which hold its cuDNN plans and tensors."""
    import copy
    import threading

    from seer.torch.convolution import seer_convolutions

    model = torch_nets.every_kind()
    apply(model, gpu="h200", math="fma", training=True)
    for module in seer_convolutions(model).values():  # as a GPU call leaves them: a runner not to copy
        module._fast_grad[("kind",)] = ("IMPLICIT_GEMM", threading.Lock(), None, (None, None), (None, None))
    twin = copy.deepcopy(model)
    originals, copies = seer_convolutions(model), seer_convolutions(twin)
    assert set(copies) == set(originals)
    for name, module in copies.items():
        assert module.seer_choice is originals[name].seer_choice
        assert all(c is o for c, o in zip(module.seer_backward, originals[name].seer_backward))
        assert module._fast_grad == {} and len(originals[name]._fast_grad) == 1
        assert module.weight is not originals[name].weight and torch.equal(module.weight, originals[name].weight)
    x = torch.randn(2, 3, 24, 24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert torch.equal(twin(x), model(x))


def test_a_module_stays_pytorchs_only_where_every_pass_leaves_it_to_pytorch():
    import pandas as pd

    from seer.torch.convolution import Choice, left_to_pytorch

    class Never(Choice):
        def algorithm(self, layer):
            return None

    layer = ConvShape.square(2, 3, 24, 8, 3, 1, 1)
    calls = pd.DataFrame([{"name": "a", **layer.as_dict()}, {"name": "b", **layer.as_dict()}])
    assert left_to_pytorch(Never(), calls) == {"a", "b"}
    assert left_to_pytorch(Never(), calls, (Never(), Never())) == {"a", "b"}
    assert left_to_pytorch(Never(), calls, (None, Fixed("BWD_FILTER_ALGO_1", pass_="bwd_filter"))) == set()


# -- sparse inputs: seer's sparse kernels where the input holds enough zeros -----------------
def _h200_fma():
    from seer.predict.persist import load_model

    return load_model("h200", math="fma")


@pytest.fixture
def no_heuristic(monkeypatch):
    """The guard asks cuDNN's heuristic on the GPU; here it names none."""
    import seer.torch.convolution as convolution

    monkeypatch.setattr(convolution, "cudnn_heuristic_choice", lambda layer, math: None)


def test_a_sparse_input_runs_gather_only_where_seer_predict_recommends_it(no_heuristic):
    from seer.layers.shapes import layer_frame
    from seer.torch.convolution import GUARD_SPARSE_HOST_MS, SparseInput, extra_host_ms

    model = _h200_fma()
    layer = ConvShape.square(1, 512, 28, 512, 3, stride=1, padding=1)
    captured = Predicted(model, "fma", captured=True)
    frame = layer_frame([layer])
    for level in (0.5, 0.9, 0.99):
        frame["sparsity"] = level
        recommended = model.predict(frame, "fma", algorithms=[*captured._ranked, "SEER_SPARSE_GATHER"])["recommended"]
        # Captured in CUDA graphs (no host time), the choice is seer predict's recommendation.
        expected = recommended.iloc[0] if recommended.iloc[0] == "SEER_SPARSE_GATHER" else captured.algorithm(layer)
        assert SparseInput(captured, level).algorithm(layer) == expected
    assert SparseInput(captured, 0.99).algorithm(layer) == "SEER_SPARSE_GATHER"
    assert SparseInput(captured, 0.5).algorithm(layer) == captured.algorithm(layer)  # dense wins at half zeros
    # Unguarded, the predicted fastest runs; the guard's host cost is the sparse kernels' own.
    assert SparseInput(Predicted(model, "fma", guard=False), 0.99).algorithm(layer) == "SEER_SPARSE_GATHER"
    assert extra_host_ms("SEER_SPARSE_GATHER", layer, "fma") == GUARD_SPARSE_HOST_MS


def _sparse_net():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 64, 3, padding=1), torch.nn.ReLU(),
                               torch.nn.Conv2d(64, 512, 1), torch.nn.ReLU(),
                               torch.nn.Conv2d(512, 512, 3, padding=1))


def test_apply_gives_modules_with_zeros_in_their_input_a_sparse_choice(no_heuristic):
    from seer.torch.convolution import SparseInput

    model = _sparse_net()
    apply(model, "h200", "fma", input_shape=(1, 3, 28, 28), sparsity={"4": 0.99, "2": 0.0})
    modules = seer_convolutions(model)
    assert isinstance(modules["4"].seer_choice, SparseInput) and modules["4"].seer_choice.sparsity == 0.99
    assert isinstance(modules["2"].seer_choice, Predicted)  # no zeros: the dense choice
    layer = ConvShape.square(1, 512, 28, 512, 3, stride=1, padding=1)
    assert modules["4"].seer_choice.algorithm(layer) == "SEER_SPARSE_GATHER"
    assert "zeros" in modules["4"].extra_repr()
    with warnings.catch_warnings():  # on the CPU, PyTorch's convolution runs (and says why)
        warnings.simplefilter("ignore")
        assert model(torch.randn(1, 3, 28, 28)).shape == (1, 512, 28, 28)


def test_a_sparse_kernels_time_follows_how_crowded_its_inputs_non_zeros_are(no_heuristic):
    from seer.predict.sparse import SPARSE_MAX_CROWDING
    from seer.torch import input_sparsity
    from seer.torch.convolution import SparseInput, module_crowding

    layer = ConvShape.square(1, 512, 28, 512, 3, stride=1, padding=1)
    even = Predicted(_h200_fma(), "fma")
    assert SparseInput(even, 0.99, crowding=1.0).algorithm(layer) == "SEER_SPARSE_GATHER"
    assert SparseInput(even, 0.99).algorithm(layer) == "SEER_SPARSE_GATHER"  # not measured: taken as even
    # The model learnt crowded inputs: at crowding 10 gather is predicted slower than the dense pick.
    unguarded = Predicted(_h200_fma(), "fma", guard=False)
    times = [SparseInput(unguarded, 0.99, crowding=c) for c in (1.0, 2.0, 10.0)]
    assert [t.algorithm(layer) for t in times] == ["SEER_SPARSE_GATHER"] * 2 + [unguarded.algorithm(layer)]
    assert even.model.sparse.max_crowding > 10  # learnt from crowded inputs, not a fixed bound
    crowded = SparseInput(even, 0.99, crowding=10.0)
    assert crowded.algorithm(layer) == even.algorithm(layer) != "SEER_SPARSE_GATHER"
    assert "crowding 10" in crowded.describe()
    beyond = SparseInput(even, 0.99, crowding=even.model.sparse.max_crowding * 2)
    assert beyond.algorithm(layer) == even.algorithm(layer) and layer not in beyond.guesses  # never predicted there
    # A calibration batch measures it: here every non-zero input of the second layer sits on 4 of 64 pixels.
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 64, 1), torch.nn.ReLU(), torch.nn.Conv2d(64, 64, 3, padding=1))
    model[1].register_forward_hook(lambda m, args, out: out * (torch.arange(64).reshape(8, 8) < 4))
    measured = module_crowding(input_sparsity(model.eval(), torch.randn(2, 3, 8, 8)))
    assert measured["2"] > SPARSE_MAX_CROWDING and measured["0"] == pytest.approx(1.0)
    one = torch.randn(3, 8, 8)  # an unbatched input: its channels are the first axis
    assert module_crowding(input_sparsity(model, one)) == module_crowding(input_sparsity(model, one[None]))
    assert module_crowding({"2": 0.9}) == {}


def test_a_model_run_in_cuda_graphs_gets_the_capturable_sparse_kernel_without_its_host_time(no_heuristic):
    from seer.torch.convolution import SparseInput

    model = _sparse_net()
    apply(model, "h200", "fma", input_shape=(1, 3, 28, 28), sparsity={"4": 0.99}, cuda_graphs=True)
    choice = seer_convolutions(model)["4"].seer_choice
    assert isinstance(choice, SparseInput) and choice.dense.captured and choice.kernels == ("SEER_SPARSE_GATHER",)
    assert choice.algorithm(ConvShape.square(1, 512, 28, 512, 3, stride=1, padding=1)) == "SEER_SPARSE_GATHER"


def test_a_calibration_batch_measures_each_modules_zeros():
    from seer.torch import input_sparsity
    from seer.torch.convolution import SparseInput, module_sparsity

    torch.manual_seed(0)
    model = _sparse_net().eval()
    batch = torch.randn(2, 3, 28, 28)
    measured = module_sparsity(input_sparsity(model, batch))
    assert measured["0"] == 0 and 0.3 < measured["2"] < 0.7 and 0.3 < measured["4"] < 0.7
    apply(model, "h200", "fma", calibration=batch)
    modules = seer_convolutions(model)
    assert isinstance(modules["2"].seer_choice, SparseInput) and modules["2"].seer_choice.sparsity == measured["2"]
    assert isinstance(modules["0"].seer_choice, Predicted)


def test_a_model_trained_here_takes_the_calibration_path(no_heuristic):
    """A user's own trained model and data (issue 40): a small network trained for a few steps here,
    then calibrated on a batch of its data. Each convolution after a ReLU gets a sparse choice at its
    measured share of zeros and crowding, which runs a sparse kernel only where seer predict
    recommends one there, and the model still computes what it computed (on the CPU, through
    PyTorch's convolution)."""
    from seer.layers.shapes import layer_frame
    from seer.predict.persist import load_model
    from seer.torch import input_sparsity
    from seer.torch.convolution import SparseInput, module_crowding, module_sparsity

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(),
                                torch.nn.Conv2d(64, 64, 1), torch.nn.ReLU(),
                                torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(64, 2))
    images = torch.randn(64, 3, 16, 16)
    labels = (images[:, 0].mean(dim=(1, 2)) > images[:, 1].mean(dim=(1, 2))).long()  # redder than green
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0]  # it learnt
    model.eval()
    batch = images[:8]
    with torch.no_grad():
        before = model(batch)
    calls = input_sparsity(model, batch)
    shares, crowding = module_sparsity(calls), module_crowding(calls)
    assert shares["0"] == 0 and all(0 < shares[name] < 1 for name in ("2", "4"))
    apply(model, "h200", "fma", calibration=batch)
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")  # on the CPU, PyTorch's convolution runs (and says why)
        assert torch.allclose(model(batch), before)
    predictor = load_model("h200", math="fma")
    for name in ("2", "4"):
        choice = seer_convolutions(model)[name].seer_choice
        assert isinstance(choice, SparseInput) and (choice.sparsity, choice.crowding) == (shares[name], crowding[name])
        layer = ConvShape.from_mapping(calls.layers.set_index("name").loc[name])
        frame = layer_frame([layer]).assign(sparsity=shares[name], crowding=crowding[name])
        rows = predictor.predict(frame, "fma")
        algorithm = choice.algorithm(layer)
        if algorithm in choice.kernels:  # a sparse kernel only where seer predict recommends it
            assert rows["recommended"].iloc[0] == algorithm, name
        else:
            assert algorithm == choice.dense.algorithm(layer), name


def test_sparsity_mistakes_are_input_errors(models_without_sparse):
    from seer.torch.convolution import module_sparsity

    with pytest.raises(InputError, match="module 4: sparsity must be a number in \\[0, 1\\)"):
        apply(_sparse_net(), "h200", "fma", sparsity={"4": 1.0})
    with pytest.raises(InputError, match="not both"):
        apply(_sparse_net(), "h200", "fma", sparsity={"4": 0.9}, calibration=torch.randn(1, 3, 8, 8))
    with pytest.raises(InputError, match="SEER_SPARSE_SCATTER and SEER_SPARSE_POINTWISE cannot be captured in "
                                         "CUDA graphs"):
        apply(_sparse_net(), "h200", "fma", sparsity={"4": 0.9}, cuda_graphs=True, algorithms="cudnn,sparse")
    with pytest.raises(InputError, match="h100 models have no model of seer's sparse kernels"):
        apply(_sparse_net(), "h100", "fma", sparsity={"4": 0.9}, models_dir=models_without_sparse)
    with pytest.raises(InputError, match="sparsity names '40', which is not an nn.Conv1d/2d/3d of the model"):
        apply(_sparse_net(), "h200", "fma", sparsity={"4": 0.9, "40": 0.9})  # a typo would leave it dense, unsaid
    with pytest.raises(InputError, match="map module names"):
        module_sparsity(0.9)
    import pandas as pd

    assert module_sparsity(pd.DataFrame({"name": ["a", "a", "b"], "sparsity": [0.9, 0.5, 0.0]})) == {"a": 0.5, "b": 0.0}
    with pytest.raises(InputError, match="lacks sparsity"):
        module_sparsity(pd.DataFrame({"name": ["a"]}))


def test_sparse_kernels_run_contiguous_nchw_only_and_are_ranked_on_sparse_inputs_only(no_heuristic):
    from seer.algorithms import get_algorithm
    from seer.torch.convolution import _refusal

    layer = ConvShape.square(1, 64, 28, 64, 3, stride=1, padding=1)
    assert "NC[D]HW" in _refusal(get_algorithm("SEER_SPARSE_GATHER"), layer, "nhwc")
    assert _refusal(get_algorithm("SEER_SPARSE_GATHER"), layer, "nchw") is None
    choice = Predicted(_h200_fma(), "fma", algorithms="cudnn,sparse")
    assert choice.sparse_kernels == ("SEER_SPARSE_GATHER", "SEER_SPARSE_SCATTER", "SEER_SPARSE_POINTWISE")
    assert choice.algorithm(layer) is None or choice.algorithm(layer) in algorithm_names("cudnn")
    with pytest.raises(InputError, match="at least one dense algorithm"):
        Predicted(_h200_fma(), "fma", algorithms="sparse")
    assert Fixed("SEER_SPARSE_GATHER", "fma").name == "SEER_SPARSE_GATHER"  # force() takes them


def test_the_sparse_network_benchmark_gives_each_convolution_but_the_first_its_share_of_zeros():
    import sys
    from pathlib import Path

    benchmarks = Path(__file__).resolve().parents[1] / "benchmarks"
    sys.path.insert(0, str(benchmarks))
    try:
        from sparse_network import sparsify
    finally:
        sys.path.remove(str(benchmarks))
    from seer.torch import input_sparsity
    from seer.torch.convolution import module_sparsity

    torch.manual_seed(0)
    model = _sparse_net().eval()
    x = torch.randn(2, 3, 28, 28)
    handles = sparsify(model, x, 0.95)
    measured = module_sparsity(input_sparsity(model, x))
    assert measured["0"] == 0  # the image is left as it is
    assert measured["2"] == pytest.approx(0.95, abs=0.002) and measured["4"] == pytest.approx(0.95, abs=0.002)
    for h in handles:
        h.remove()
    assert module_sparsity(input_sparsity(model, x))["4"] < 0.7  # the ReLU's own zeros again


def test_the_sparse_network_tables_join_the_runs_and_rebuild_the_committed_ones(tmp_path, monkeypatch):
    """``sparse_network.py --merge``: the committed runs' tables joined, with the bound from the per-layer
    times, give the committed tables again."""
    import pandas as pd
    from conftest import REPO, benchmark_module

    committed = REPO / "benchmarks" / "results" / "h200-sparse-network"
    monkeypatch.chdir(REPO)
    runs = sorted((committed / "runs").iterdir())
    assert benchmark_module("sparse_network").main(["--merge", *map(str, runs), "--out", str(tmp_path)]) == 0
    for name in ("results.csv", "layer-bound.csv"):
        assert (tmp_path / name).read_text() == (committed / name).read_text(), name
    joined = pd.read_csv(tmp_path / "results.csv")
    assert len(joined) == sum(len(pd.read_csv(run / "results.csv")) for run in runs) == 40
    bound = pd.read_csv(tmp_path / "layer-bound.csv")
    assert (bound["timed"] == bound["convolutions"]).all() and (bound["ratio"] <= 1).all()


def test_the_graph_runs_join_into_the_committed_tables_keeping_only_the_levels_asked(tmp_path, monkeypatch):
    """The CUDA-graph runs: those after the hook fix whole, with their per-layer checks of the picks;
    of those before it, the rows at ``relu`` only (the others are wrong on seer's side: README)."""
    import pandas as pd
    from conftest import REPO, benchmark_module

    committed = REPO / "benchmarks" / "results" / "h200-sparse-network-graphs"
    monkeypatch.chdir(REPO)
    merge = benchmark_module("sparse_network").main
    before = [*sorted((committed / "runs-before-fix" / "call1").iterdir()),
              committed / "runs-before-fix" / "call2" / "densenet121-b1"]
    for out, args in (("after-fix-0.99", [*sorted((committed / "runs").iterdir())]),
                      ("relu", [*before, "--levels", "relu"])):
        assert merge(["--merge", *map(str, args), "--out", str(tmp_path / out)]) == 0
        for name in ("results.csv", "layer-bound.csv", "picks.csv"):
            if (committed / out / name).exists() or (tmp_path / out / name).exists():
                assert (tmp_path / out / name).read_text() == (committed / out / name).read_text(), (out, name)
    relu = pd.read_csv(tmp_path / "relu" / "results.csv")
    assert len(relu) == 10 and set(relu["level"]) == {"relu"} and (relu["sparse_layers_graph"] == 0).all()
    picks = pd.read_csv(tmp_path / "after-fix-0.99" / "picks.csv")
    assert len(picks) == 33 and (picks["sparsity"] > 0.988).all()


@pytest.mark.parametrize("dims, groups, stride, dilation", [(1, 1, 2, 1), (2, 1, 1, 1), (2, 4, 2, 2), (3, 2, 1, 1)])
@pytest.mark.parametrize("needs", [(True, True, True), (True, False, False), (False, True, True), (True, True, False)])
def test_pytorchs_gradients_come_from_one_backward_call_and_equal_the_nn_grad_functions(dims, groups, stride,
                                                                                          dilation, needs):
    """Where no backward algorithm was chosen, a seer convolution takes all its gradients from PyTorch's one
    backward operator: the same values as ``torch.nn.grad``'s functions and the bias's sum, and none
    that autograd did not ask for."""
    from seer.torch.convolution import _GRADIENTS, _backward, _Call

    torch.manual_seed(0)
    size = (9,) * dims
    x, weight = torch.randn(2, 8, *size), torch.randn(8, 8 // groups, *(3,) * dims)
    call = _Call(dims, (stride,) * dims, (1,) * dims, (dilation,) * dims, groups)
    y = torch.nn.functional.__dict__[f"conv{dims}d"](x, weight, None, call.stride, call.padding, call.dilation, groups)
    grad_y = torch.randn_like(y)
    grad_x, grad_w, grad_b = _backward(call, x, weight, grad_y, needs, has_bias=True)
    input_fn, weight_fn = _GRADIENTS[dims]
    args = (call.stride, call.padding, call.dilation, groups)
    assert (grad_x is None) != needs[0] and (grad_w is None) != needs[1] and (grad_b is None) != needs[2]
    if needs[0]:
        assert torch.allclose(grad_x, input_fn(x.shape, weight, grad_y, *args), rtol=1e-5, atol=1e-5)
    if needs[1]:
        assert torch.allclose(grad_w, weight_fn(x, weight.shape, grad_y, *args), rtol=1e-5, atol=1e-4)
    if needs[2]:
        assert torch.allclose(grad_b, grad_y.sum(dim=[0, *range(2, grad_y.dim())]), rtol=1e-5, atol=1e-5)
    assert _backward(call, x, weight, grad_y, (True, True, True), has_bias=False)[2] is None


def test_the_compiled_operator_builds_each_runner_once_and_falls_back_once(monkeypatch):
    """``torch.ops.seer.convolution`` runs on every pass of a compiled graph: its runner is built
    at the first call of an input kind and looked up after; where cuDNN cannot run the layer,
    PyTorch's convolution runs it, with one warning."""
    import torch.nn.functional as F

    from seer.torch import convolution as conv

    built = []

    class Runner:
        def misaligned(self, x, w):
            return False

        def shaped(self, bias):
            return bias

        def __call__(self, x, w, bias):
            return F.conv2d(x, w, bias, 1, 1)

    def fake_runner(layer, algo, math, layout, device, dims):
        built.append((layer, algo.name, layout))
        if algo.name == "FFT":
            raise ImportError("no CuPy here")  # as cuDNN's refusal or a missing CuPy would
        return Runner()

    monkeypatch.setattr(conv, "_runner", fake_runner)
    monkeypatch.setattr(conv._local, "op_runners", {}, raising=False)
    x, w = torch.randn(2, 8, 10, 10), torch.randn(4, 8, 3, 3)
    expected = F.conv2d(x, w, None, 1, 1)
    args = ([1, 1], [1, 1], [1, 1], 1)
    for _ in range(3):
        assert torch.allclose(conv._op_convolution(x, w, None, *args, "IMPLICIT_GEMM", "fma"), expected)
    assert len(built) == 1 and built[0][2] == "nchw"
    conv._op_convolution(torch.randn(3, 8, 10, 10), w, None, *args, "IMPLICIT_GEMM", "fma")  # another batch
    assert len(built) == 2
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            assert torch.allclose(conv._op_convolution(x, w, None, *args, "FFT", "fma"), expected, atol=1e-5)
    assert len(built) == 3 and len(caught) == 1 and "PyTorch's runs instead" in str(caught[0].message)


@pytest.mark.parametrize("mode", ["reduce-overhead", "default", "max-autotune-no-cudagraphs"])
def test_seer_compile_is_torch_compile_in_that_mode_without_the_layout_optimisation(monkeypatch, mode):
    """seer.torch.compile gives torch.compile the mode's own options (a mode and options cannot
    both be given) with inductor's layout optimisation off, and passes the rest through."""
    import seer.torch
    from torch._inductor import list_mode_options

    given = {}
    monkeypatch.setattr(torch, "compile", lambda model, **kwargs: given.update(kwargs, model=model) or "compiled")
    model = torch.nn.Conv2d(3, 4, 3)
    assert seer.torch.compile(model, mode, dynamic=False) == "compiled"
    assert given["model"] is model and given["dynamic"] is False and "mode" not in given
    assert given["options"] == {**list_mode_options(mode), "layout_optimization": False}
    seer.torch.compile(model, mode, layout_optimization=True)
    assert given["options"] == {**list_mode_options(mode), "layout_optimization": True}
    assert list_mode_options("reduce-overhead")["triton.cudagraphs"] is True  # what makes it replay graphs


def test_the_guard_leaves_channels_last_depthwise_layers_to_pytorch(no_heuristic):
    """The models' times are NCHW's, and channels-last PyTorch runs depthwise layers far faster
    than there: guarded, those layers stay PyTorch's; unguarded, or in NCHW, the pick stands."""
    from seer.predict.persist import load_model

    model = load_model("h100", math="fma")
    depthwise = ConvShape.square(32, 96, 56, 96, 7, padding=3, groups=96)
    grouped = ConvShape.square(32, 128, 56, 128, 3, padding=1, groups=32)
    guarded = Predicted(model, "fma", algorithms="all")
    assert guarded.algorithm_in(depthwise, "nhwc") is None
    assert guarded.algorithm_in(depthwise, "nchw") == guarded.algorithm(depthwise)
    assert guarded.algorithm_in(grouped, "nhwc") == guarded.algorithm(grouped)
    unguarded = Predicted(model, "fma", algorithms="all", guard=False)
    assert unguarded.algorithm_in(depthwise, "nhwc") == unguarded.algorithm(depthwise) is not None


def test_the_graph_handle_is_moved_to_a_stream_only_when_the_stream_changes(monkeypatch):
    from seer.torch import convolution

    moves = []

    class Frontend:
        @staticmethod
        def set_stream(handle, stream):
            moves.append((handle, stream))

    monkeypatch.setattr(convolution._DeviceState, "frontend", property(lambda self: Frontend))
    state = object.__new__(convolution._DeviceState)  # no GPU here: only what graph_on reads
    state._graph_handle, state.graph_stream = "handle", None
    assert [state.graph_on(s) for s in (7, 7, 9, 9, 7)] == [7, 7, 9, 9, 7]
    assert moves == [("handle", 7), ("handle", 9), ("handle", 7)]


def test_a_backward_runners_legacy_call_and_its_workspace_are_asked_of_cudnn_once():
    from types import SimpleNamespace

    from seer.torch import convolution

    asked = []

    class Problem:
        def __init__(self, handle, layer, math, layout):
            asked.append(("descriptors", layer, math, layout))

        def backward_workspace_size(self, pass_, algo):
            asked.append(("workspace", pass_, algo))
            return 4096

    runner = object.__new__(convolution._BackwardRunner)  # no GPU here: only what the property reads
    runner.state = SimpleNamespace(cudnn=SimpleNamespace(ConvolutionProblem=Problem), legacy_handle="handle")
    runner.layer, runner.math, runner.layout, runner.pass_, runner.algo = "layer", "fma", "nchw", "bwd_data", 1
    runner._legacy = None
    first, second = runner.legacy, runner.legacy
    assert first is second and first[1] == 4096
    assert asked == [("descriptors", "layer", "fma", "nchw"), ("workspace", "bwd_data", 1)]

"""seer.torch: the convolutions a PyTorch model runs, found on the meta device, checked against
hand-worked layers, seer's own network tables and torchvision's models (tables from the device)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")  # the torch extra; CI installs it

import torch_nets  # noqa: E402
from conftest import DATA  # noqa: E402
from seer.errors import InputError  # noqa: E402
from seer.layers import known_networks as networks  # noqa: E402
from seer.layers.files import read_layers  # noqa: E402
from seer.layers.shapes import describe  # noqa: E402
from seer.torch import build_model, conv_calls, parse_input_shape  # noqa: E402

TORCHVISION = DATA / "torchvision"


def _by_name(found):
    return {row["name"]: row for _, row in found.layers.iterrows()}


def test_every_kind_is_recorded_as_cudnn_gets_it():
    found = conv_calls(build_model(torch_nets.every_kind), (2, 3, 64, 48))
    layers = _by_name(found)
    assert found.device == "meta"
    assert describe(layers["stem"]) == "2x3x64x48 -> 16, 3x3 s2 p1"
    assert layers["shared.conv"]["calls"] == 2  # one module, run twice
    assert describe(layers["shared"]) == "2x16x32x24 -> 16, 5x5 s1 p2"  # functional, named by its module
    assert describe(layers["grouped"]) == "2x16x32x24 -> 32, 3x3 s1 p1 g4"
    assert describe(layers["depthwise"]) == "2x32x32x24 -> 32, 3x3 s1 p1 g32"
    assert describe(layers["one_by_seven"]) == "2x32x32x24 -> 32, 1x7 s1 p0,3"
    assert describe(layers["dilated"]) == "2x32x32x24 -> 32, 3x3 s1 p2 d2"
    # 'same' with an even kernel: PyTorch pads one more row and column itself, then pads 1.
    assert describe(layers["same_even"]) == "2x32x33x25 -> 32, 4x4 s1 p1"
    assert layers["same_even"]["out_h"] == 32 and layers["same_even"]["out_w"] == 24
    # A reflect-padded convolution is an unpadded one of the padded input.
    assert describe(layers["reflect"]) == "2x32x34x26 -> 32, 3x3 s1 p0"
    assert list(found.skipped["name"]) == ["up"] and "transposed" in found.skipped["reason"].iloc[0]
    assert found.total_calls == 11 and int(found.layers["calls"].sum()) == 10
    order = list(found.per_call()["name"])
    assert order == ["stem", "shared.conv", "shared.conv", "shared", "grouped", "depthwise", "one_by_seven",
                     "dilated", "same_even", "reflect"]


def test_3d_and_1d_convolutions():
    layers = _by_name(conv_calls(build_model("torch_nets:video"), (1, 3, 16, 112, 112)))
    assert describe(layers["conv3d"]) == "1x3x16x112x112 -> 8, 3x7x7 s1,2,2 p1,3,3"
    # PyTorch hands cuDNN a 1D convolution as a 2D one of height 1.
    conv1d = layers["conv1d"]
    assert conv1d["dims"] == 2 and conv1d["in_h"] == 1 and conv1d["kernel_h"] == 1 and conv1d["pad_h"] == 0
    assert (conv1d["in_w"], conv1d["kernel_w"], conv1d["pad_w"], conv1d["out_w"]) == (16 * 56 * 56, 5, 2, 16 * 56 * 56)


def test_a_model_built_on_the_cpu_gives_the_same_layers_and_is_left_as_it_was():
    model = torch_nets.every_kind().eval()
    weight = model.stem.weight.detach().clone()
    on_cpu = conv_calls(model, (2, 3, 64, 48))
    on_meta = conv_calls(build_model(torch_nets.every_kind), (2, 3, 64, 48))
    assert on_cpu.layers.equals(on_meta.layers)
    assert model.stem.weight.device.type == "cpu" and torch.equal(model.stem.weight, weight)


def test_a_forward_that_reads_values_runs_on_the_cpu_and_a_failing_one_is_one_input_error():
    found = conv_calls(build_model(torch_nets.reads_values), (1, 3, 8, 8))
    assert found.device == "cpu" and len(found.layers) == 1
    with pytest.raises(InputError, match="forward pass on an input of 1x3x8x8 failed"):
        conv_calls(build_model(torch_nets.reads_values), (1, 3, 8, 8), device="meta")
    with pytest.raises(InputError, match="1x5x8x8 failed") as caught:
        conv_calls(build_model(torch_nets.reads_values), (1, 5, 8, 8))
    assert caught.value.field == "input" and "\n" not in str(caught.value)


def test_resnet50_written_in_the_tests_matches_seers_network_table():
    found = conv_calls(build_model("torch_nets:resnet50"), (1, 3, 224, 224))
    ours = networks.network_layers("resnet50", batch=1)
    assert list(found.layers["name"]) == [layer.layer for layer in ours]
    for (_, row), layer in zip(found.layers.iterrows(), ours):
        assert (row["in_ch"], row["in_w"], row["out_ch"], row["kernel_w"], row["stride_w"], row["pad_w"]) == (
            layer.shape.in_ch, layer.shape.in_w, layer.shape.out_ch, layer.shape.kernel_w, layer.shape.stride_w,
            layer.shape.pad_w)


#: Convolution calls of torchvision's models at 224x224 (inception_v3: 299x299), counted by hand
#: from their definitions: ResNet 1 + 3 per bottleneck (2 per basic block) + 1 per downsampling
#: stage; DenseNet-121 1 + 2 per dense layer (58) + 3 transitions (DenseNet-169 82, -201 98 dense layers); GoogLeNet 3 + 6 per module (9);
#: SqueezeNet 1.1 1 + 3 per fire module (8) + the classifier's; Inception-v3 94 (34 of them 1xN/Nx1).
TORCHVISION_CALLS = {"resnet18": 20, "resnet50": 53, "resnet152": 155, "vgg16": 13, "vgg19": 16, "alexnet": 5,
                     "densenet121": 120, "googlenet": 57, "squeezenet1_1": 26, "inception_v3": 94,
                     "resnet101": 104, "densenet169": 168, "densenet201": 200}


@pytest.mark.parametrize("name", sorted(TORCHVISION_CALLS))
def test_torchvision_tables_from_seer_network_match_the_counts_and_seers_own_tables(name):
    """The tables `seer network NAME --layers-out` wrote with torchvision on the device
    (provenance.json) against the counts above and seer.layers.known_networks, which was written from the papers."""
    table = read_layers(TORCHVISION / f"{name}.csv")
    assert len(table) == TORCHVISION_CALLS[name]
    square = table[(table["kernel_h"] == table["kernel_w"]) & (table["groups"] == 1)]
    ours = networks.network_layers(name, batch=1)
    assert list(square["name"]) == [layer.layer for layer in ours]
    assert [(r.in_ch, r.in_h, r.in_w, r.out_ch, r.kernel_w, r.stride_w, r.pad_w) for r in square.itertuples()] == [
        (s.in_ch, s.in_w, s.in_w, s.out_ch, s.kernel_w, s.stride_w, s.pad_w) for s in (x.shape for x in ours)]
    assert sorted(set(table["name"]) - set(square["name"])) == sorted(n for n, _ in networks.skipped_layers(name, 1))


def test_torchvision_tables_have_provenance():
    about = json.loads((TORCHVISION / "provenance.json").read_text())
    assert set(about["files"]) == {f"{name}.csv" for name in TORCHVISION_CALLS}
    assert about["torch"] and about["torchvision"] and about["command"]


@pytest.mark.parametrize("text, shape", [("1x3x224x224", (1, 3, 224, 224)), ("2X3X16X112X112", (2, 3, 16, 112, 112)),
                                         (" 8, 3, 32, 32 ", (8, 3, 32, 32))])
def test_input_shapes_parse(text, shape):
    assert parse_input_shape(text) == shape


@pytest.mark.parametrize("text", ["1x3x224", "1x3x0x224", "1x3x-2x2", "a", "1x3x2x2x2x2", ""])
def test_bad_input_shapes_are_one_input_error(text):
    with pytest.raises(InputError) as caught:
        parse_input_shape(text)
    assert caught.value.field == "input"


@pytest.mark.parametrize("spec, words", [
    ("no_such_module_here:net", "cannot import 'no_such_module_here'"),
    ("torch_nets:no_function", "has no function 'no_function'"),
    ("torch_nets:not_a_module", "built a list, not a torch.nn.Module"),
    ("torch_nets:needs_an_argument", "building 'torch_nets:needs_an_argument' failed: TypeError"),
])
def test_bad_model_specs_are_one_input_error(spec, words):
    with pytest.raises(InputError, match=words):
        build_model(spec)


def test_a_torchvision_name_without_torchvision_says_so():
    try:
        import torchvision  # noqa: F401
    except (ImportError, RuntimeError):  # CPU torch here has no torchvision build to match
        with pytest.raises(InputError, match="torchvision, which would know the name, is not installed"):
            build_model("resnet50")
    else:
        with pytest.raises(InputError, match="did you mean resnet152"):
            build_model("resnet_152")


def test_input_sparsity_counts_the_zeros_each_convolution_is_given():
    from torch import nn

    from seer.torch import input_sparsity

    class Net(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.first = nn.Conv2d(4, 8, 3, padding=1)
            self.second = nn.Conv2d(8, 8, 1)

        def forward(self, x):
            y = self.first(x)
            y = y * (torch.arange(y.shape[1]).view(1, -1, 1, 1) < 2)  # 6 of 8 channels zero
            return self.second(self.second(y))  # a layer called twice counts both calls

    x = torch.randn(2, 4, 6, 6)
    x[0] = 0  # half the batch
    model = Net().eval()
    calls = input_sparsity(model, x)
    layers = calls.layers.set_index("name")
    assert layers.loc["first", "sparsity"] == 0.5 and layers.loc["first", "calls"] == 1
    # "second" runs twice: on the masked output (6 of 8 channels zero, the rest rarely) and on
    # its own dense output; its sparsity is over both calls' values.
    assert layers.loc["second", "calls"] == 2 and 0.375 <= layers.loc["second", "sparsity"] < 0.4
    assert calls.device == "cpu" and calls.input_shape == (2, 4, 6, 6)
    assert not any(p.grad is not None for p in model.parameters())
    with pytest.raises(InputError, match="calibration batch"):
        input_sparsity(model, torch.randn(2, 3, 6, 6))  # 3 channels where the model takes 4

"""Tests of seer.layers.known_networks: layer counts, hand-checked layers, chaining, FLOPs, torchvision."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from seer.layers.known_networks import (NETWORKS, TEST_SET_II_NETWORKS, TRAINING_NETWORKS, NetworkLayer, network_layers,
                                        pool_out_width, skipped_layers, unique_shapes)
from seer.layers.shapes import ConvShape

# name -> (square non-grouped convs, skipped convs, last layer's output width), default width.
EXPECTED = {
    # torchvision: stem + 3 convs per bottleneck (3+4+6+3 = 16) + 4 downsamples.
    "resnet50": (53, 0, 7),
    # stem + 3 * (3+8+36+3) + 4 downsamples.
    "resnet152": (155, 0, 7),
    "vgg16": (13, 0, 14),
    # conv0 + 2 * (6+12+24+16) dense-layer convs + 3 transition convs.
    "densenet121": (120, 0, 7),
    "alexnet": (5, 0, 13),
    # conv1..conv3 + 9 inception modules * 6 convs.
    "googlenet": (57, 0, 7),
    # stem + 2 * 8 basic-block convs + 3 downsamples (layers 2-4).
    "resnet18": (20, 0, 7),
    # features.0 + 8 fire modules * 3 + the classifier conv.
    "squeezenet1_1": (26, 0, 13),
    # torchvision Inception3 has 94 Conv2d (no aux): stem 5, Mixed_5b/c/d 3*7,
    # Mixed_6a 4, Mixed_6b..e 4*10, Mixed_7a 6, Mixed_7b/c 2*9. Non-square: 6 per
    # InceptionC (24), 2 in InceptionD, 4 per InceptionE (8) = 34; 94 - 34 = 60 square.
    "inception_v3": (60, 34, 8),
    # conv1 + 13 pointwise convs; the 13 depthwise convs are skipped.
    "mobilenet_v1": (14, 13, 7),
    "vgg19": (16, 0, 14),
    # yolov3.cfg has 75 [convolutional] sections: Darknet-53 has 52 (1 + 5 strided +
    # 2 * (1+2+8+8+4) residual), the head 23 (3 * 7 + 2 route 1x1 convs). The last conv
    # is the 52x52 detection conv.
    "yolov3": (75, 0, 52),
    # 5 encoder + 4 decoder double-convs (18) + the 1x1 output conv; 4 transposed convs.
    "unet": (19, 4, 256),
}


def test_groups_cover_the_registry_without_overlap():
    assert set(TRAINING_NETWORKS).isdisjoint(TEST_SET_II_NETWORKS)
    assert set(TRAINING_NETWORKS) | set(TEST_SET_II_NETWORKS) == set(NETWORKS)
    assert set(NETWORKS) == set(EXPECTED)
    assert TRAINING_NETWORKS == ("resnet50", "resnet152", "vgg16", "densenet121",
                                 "alexnet", "googlenet")
    assert all(name == name.lower() for name in NETWORKS)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_layer_counts_and_final_width(name):
    count, skipped, final = EXPECTED[name]
    layers = network_layers(name, 1)
    assert len(layers) == count
    assert len(skipped_layers(name, 1)) == skipped
    assert layers[-1].shape.out_w == final
    assert all(isinstance(layer, NetworkLayer) and layer.network == name for layer in layers)
    names = [layer.layer for layer in layers] + [n for n, _ in skipped_layers(name, 1)]
    assert len(set(names)) == len(names), "layer names must be unique"


@pytest.mark.parametrize("name", list(EXPECTED))
@pytest.mark.parametrize("batch", [1, 32])
def test_every_shape_is_valid(name, batch):
    for layer in network_layers(name, batch):
        shape = layer.shape
        assert shape.batch == batch
        # Reconstructing runs ConvShape's validation (out_width rule, kernel fits).
        assert ConvShape(**{f.name: getattr(shape, f.name)
                            for f in dataclasses.fields(shape)}) == shape
        assert shape.pad_w <= shape.kernel_w // 2


# Distinct input widths, first-seen order: they follow the pooling layers' exact outputs.
@pytest.mark.parametrize("name, width, widths", [
    ("resnet50", 224, [224, 56, 28, 14, 7]),  # 7x7/s2 -> 112, max-pool 3/2/1 -> 56
    ("densenet121", 224, [224, 56, 28, 14, 7]),
    ("vgg16", 224, [224, 112, 56, 28, 14]),
    ("alexnet", 224, [224, 27, 13]),  # (224+4-11)//4+1 = 55, pool 3/2 -> 27 -> 13
    ("googlenet", 224, [224, 56, 28, 14, 7]),  # ceil-mode pools: 112->56->28->14->7
    ("squeezenet1_1", 224, [224, 55, 27, 13]),  # 111 -> ceil pools 55, 27, 13
    # 149, 147, 147 -> pool 73 -> 73, 71 -> pool 35 -> Mixed_6a 17 -> Mixed_7a 8.
    ("inception_v3", 299, [299, 149, 147, 73, 35, 17, 8]),
    ("mobilenet_v1", 224, [224, 112, 56, 28, 14, 7]),
    ("yolov3", 416, [416, 208, 104, 52, 26, 13]),
    ("unet", 256, [256, 128, 64, 32, 16]),
    # conv1 -> 100; ceil pools 3/2: ceil(97/2)+1 = 50 (floor: 49), ceil(47/2)+1 = 25
    # (floor: 24), 25 -> 12; the 2x2 ceil pool 12 -> 6.
    ("googlenet", 200, [200, 50, 25, 12, 6]),
    ("googlenet", 193, [193, 48, 24, 12, 6]),  # conv1 -> 97, pools 48, 24, 12, 6
    ("squeezenet1_1", 225, [225, 56, 28, 14]),  # 112 -> 56 -> 28 -> 14 (ceil)
])
def test_widths_chain_through_pooling(name, width, widths):
    seen: list[int] = []
    for layer in network_layers(name, 1, width):
        if layer.shape.in_w not in seen:
            seen.append(layer.shape.in_w)
    assert seen == widths


@pytest.mark.parametrize("name", ["vgg16", "vgg19", "alexnet"])
def test_sequential_networks_chain_channels(name):
    layers = network_layers(name, 1)
    assert layers[0].shape.in_ch == 3
    for prev, cur in zip(layers, layers[1:]):
        assert cur.shape.in_ch == prev.shape.out_ch
        assert cur.shape.in_w in (prev.shape.out_w,
                                      pool_out_width(prev.shape.out_w, 2, 2),
                                      pool_out_width(prev.shape.out_w, 3, 2))


@pytest.mark.parametrize("name", ["resnet18", "resnet50", "resnet152"])
def test_resnet_blocks_chain(name):
    by_name = {layer.layer: layer.shape for layer in network_layers(name, 1)}
    blocks = sorted({n.rsplit(".", 1)[0] for n in by_name if n.startswith("layer")
                     and "downsample" not in n})
    for block in blocks:
        convs = [by_name[f"{block}.conv{i}"] for i in (1, 2, 3) if f"{block}.conv{i}" in by_name]
        for a, b in zip(convs, convs[1:]):
            assert (b.in_ch, b.in_w) == (a.out_ch, a.out_w)
        down = by_name.get(f"{block}.downsample.0")
        if down is not None:  # projection shortcut meets the main path
            assert (down.in_ch, down.in_w) == (convs[0].in_ch, convs[0].in_w)
            assert (down.out_ch, down.out_w) == (convs[-1].out_ch, convs[-1].out_w)
        else:
            assert convs[0].in_ch == convs[-1].out_ch
    stride2 = [n for n, s in by_name.items() if s.stride_w == 2 and s.kernel_w == 3]
    if name != "resnet18":  # v1.5: the stride sits on the bottleneck's 3x3 conv
        assert stride2 == ["layer2.0.conv2", "layer3.0.conv2", "layer4.0.conv2"]


def test_hand_checked_layers():
    r50 = {layer.layer: layer.shape for layer in network_layers("resnet50", 8)}
    assert r50["conv1"] == ConvShape.seer(8, 3, 224, 64, 112, 7, 2, 3)
    assert r50["layer1.0.downsample.0"] == ConvShape.seer(8, 64, 56, 256, 56, 1, 1, 0)
    assert r50["layer2.0.conv2"] == ConvShape.seer(8, 128, 56, 128, 28, 3, 2, 1)
    assert r50["layer2.0.downsample.0"] == ConvShape.seer(8, 256, 56, 512, 28, 1, 2, 0)
    last3x3 = [layer for layer in network_layers("resnet50", 8) if layer.shape.kernel_w == 3][-1]
    assert last3x3.layer == "layer4.2.conv2"
    assert last3x3.shape == ConvShape.seer(8, 512, 7, 512, 7, 3, 1, 1)
    assert network_layers("resnet50", 8)[-1].shape == ConvShape.seer(8, 512, 7, 2048, 7, 1, 1, 0)

    vgg = network_layers("vgg16", 1)
    assert vgg[-1].layer == "features.28"
    assert vgg[-1].shape == ConvShape.seer(1, 512, 14, 512, 14, 3, 1, 1)

    alex = network_layers("alexnet", 1)
    assert [layer.layer for layer in alex] == [f"features.{i}" for i in (0, 3, 6, 8, 10)]
    assert alex[0].shape == ConvShape.seer(1, 3, 224, 64, 55, 11, 4, 2)
    assert [s.shape.out_ch for s in alex] == [64, 192, 384, 256, 256]

    dn = {layer.layer: layer.shape for layer in network_layers("densenet121", 1)}
    # Block 1 ends at 64 + 6*32 = 256 channels, halved by transition1.
    assert dn["features.transition1.conv"] == ConvShape.seer(1, 256, 56, 128, 56, 1, 1, 0)
    assert dn["features.denseblock4.denselayer16.conv1"] == ConvShape.seer(1, 992, 7, 128, 7, 1, 1, 0)

    gn = {layer.layer: layer.shape for layer in network_layers("googlenet", 1)}
    # torchvision's "5x5" branch is a 3x3 conv.
    assert gn["inception3a.branch3.1.conv"] == ConvShape.seer(1, 16, 28, 32, 28, 3, 1, 1)
    assert gn["inception5b.branch4.1.conv"] == ConvShape.seer(1, 832, 7, 128, 7, 1, 1, 0)

    iv3 = {layer.layer: layer.shape for layer in network_layers("inception_v3", 1)}
    assert iv3["Mixed_5b.branch5x5_2.conv"] == ConvShape.seer(1, 48, 35, 64, 35, 5, 1, 2)
    assert iv3["Mixed_7c.branch1x1.conv"] == ConvShape.seer(1, 2048, 8, 320, 8, 1, 1, 0)
    skipped = dict(skipped_layers("inception_v3", 1))
    assert skipped["Mixed_6b.branch7x7_2.conv"] == "non-square kernel 1x7"

    sq = network_layers("squeezenet1_1", 1)
    assert sq[-1].layer == "classifier.1"
    assert sq[-1].shape == ConvShape.seer(1, 512, 13, 1000, 13, 1, 1, 0)

    mb = network_layers("mobilenet_v1", 1)
    assert mb[0].shape == ConvShape.seer(1, 3, 224, 32, 112, 3, 2, 1)
    assert mb[-1].shape == ConvShape.seer(1, 1024, 7, 1024, 7, 1, 1, 0)
    assert all(reason.startswith("depthwise") for _, reason in skipped_layers("mobilenet_v1", 1))

    yolo = {layer.layer: layer.shape for layer in network_layers("yolov3", 1)}
    # Darknet layer indices: the routes concatenate 256+512 (layer 86) and 128+256 (98).
    assert yolo["module_list.81"] == ConvShape.seer(1, 1024, 13, 255, 13, 1, 1, 0)
    assert yolo["module_list.87"].in_ch == 768 and yolo["module_list.87"].in_w == 26
    assert yolo["module_list.99"].in_ch == 384 and yolo["module_list.99"].in_w == 52
    assert yolo["module_list.105"] == ConvShape.seer(1, 256, 52, 255, 52, 1, 1, 0)

    unet = network_layers("unet", 1)
    assert unet[0].shape == ConvShape.seer(1, 3, 256, 64, 256, 3, 1, 1)
    assert unet[9].layer == "down4.maxpool_conv.1.double_conv.3"
    assert unet[9].shape == ConvShape.seer(1, 1024, 16, 1024, 16, 3, 1, 1)
    assert unet[10].shape == ConvShape.seer(1, 1024, 32, 512, 32, 3, 1, 1)  # after concat
    assert unet[-1].shape == ConvShape.seer(1, 64, 256, 2, 256, 1, 1, 0)
    assert [n for n, _ in skipped_layers("unet", 1)] == [f"up{i}.up" for i in (1, 2, 3, 4)]


def _gflops(name: str, width: int | None = None) -> float:
    return sum(layer.shape.flops for layer in network_layers(name, 1, width)) / 1e9


def test_alexnet_flops_by_hand():
    # (C, K, R, P) of torchvision's AlexNet at 224: P = 55, 27, 13, 13, 13.
    table = [(3, 64, 11, 55), (64, 192, 5, 27), (192, 384, 3, 13), (384, 256, 3, 13),
             (256, 256, 3, 13)]
    macs = sum(c * k * r * r * p * p for c, k, r, p in table)
    assert macs == 655_566_528
    assert _gflops("alexnet") * 1e9 == 2 * macs
    # torchvision docs: AlexNet 0.71 GFLOPS (counted as MACs) including the classifier's
    # 9216*4096 + 4096*4096 + 4096*1000 = 58.6M MACs; 2 * (0.714e9 - 58.6e6) ~ 1.31 GFLOP.
    assert _gflops("alexnet") == pytest.approx(1.31, rel=0.02)


def test_vgg16_flops_by_hand():
    # Simonyan & Zisserman configuration D: (C, K, width) of each 3x3 conv.
    table = ([(3, 64, 224), (64, 64, 224), (64, 128, 112), (128, 128, 112),
              (128, 256, 56), (256, 256, 56), (256, 256, 56),
              (256, 512, 28), (512, 512, 28), (512, 512, 28)]
             + [(512, 512, 14)] * 3)
    macs = sum(9 * c * k * w * w for c, k, w in table)
    assert _gflops("vgg16") * 1e9 == 2 * macs
    # torchvision docs: VGG16 15.47 GMACs, minus 123.6M classifier MACs -> 30.7 GFLOP.
    assert _gflops("vgg16") == pytest.approx(30.7, rel=0.02)


def test_resnet50_flops_by_hand():
    # ResNet v1.5 bottlenecks at output widths 56, 28, 14, 7: the 1x1 reduce runs at the
    # stage's input width, the strided 3x3 and the 1x1 expand at its output width.
    macs = 3 * 64 * 49 * 112**2
    cin, win = 64, 56
    for planes, blocks, w in ((64, 3, 56), (128, 4, 28), (256, 6, 14), (512, 3, 7)):
        out = 4 * planes
        macs += cin * planes * win**2 + 9 * planes**2 * w**2 + planes * out * w**2
        macs += cin * out * w**2  # downsample
        macs += (blocks - 1) * (out * planes + 9 * planes**2 + planes * out) * w**2
        cin, win = out, w
    assert _gflops("resnet50") * 1e9 == 2 * macs
    # torchvision docs: ResNet-50 4.09 GMACs; minus the 2048*1000 FC -> 8.18 GFLOP.
    assert _gflops("resnet50") == pytest.approx(8.18, rel=0.02)


# torchvision's model docs list "GFLOPS" (in fact GMACs) per model at its default size.
# Convs here exclude the fully connected layers, so subtract their MACs:
# ResNet FC 512/2048*1000, DenseNet-121/GoogLeNet FC 1024*1000, VGG 123.6M, none for
# SqueezeNet (its classifier is a conv). Expected conv GFLOP = 2 * (docs - FC).
@pytest.mark.parametrize("name, docs_gmacs, fc_macs", [
    ("resnet18", 1.81, 512 * 1000),
    ("resnet152", 11.51, 2048 * 1000),
    ("densenet121", 2.83, 1024 * 1000),
    ("googlenet", 1.50, 1024 * 1000),
    ("squeezenet1_1", 0.35, 0),
    ("vgg19", 19.63, 25088 * 4096 + 4096 * 4096 + 4096 * 1000),
])
def test_flops_match_torchvision_docs(name, docs_gmacs, fc_macs):
    assert _gflops(name) == pytest.approx(2 * (docs_gmacs - fc_macs / 1e9), rel=0.02)


@pytest.mark.parametrize("width, bflops", [(320, 38.97), (416, 65.86), (608, 140.69)])
def test_yolov3_flops_match_darknet(width, bflops):
    # pjreddie.com/darknet/yolo lists YOLOv3-320/416/608 at 38.97/65.86/140.69 Bn FLOPS
    # (Darknet counts 2 FLOPs per multiply-add and only convolutions).
    assert _gflops("yolov3", width) == pytest.approx(bflops, rel=0.002)


def test_mobilenet_v1_mult_adds_match_the_paper():
    # Howard et al. 2017: MobileNet-224 (1.0) has 569M mult-adds: full convs, the
    # 13 depthwise 3x3 convs and the 1024*1000 FC.
    depthwise = 0
    ch_w = [(32, 112), (64, 112), (128, 56), (128, 56), (256, 28), (256, 28)] + \
        [(512, 14)] * 6 + [(1024, 7)]
    strides = [1, 2, 1, 2, 1, 2, 1, 1, 1, 1, 1, 2, 1]
    for (ch, w_in), s in zip(ch_w, strides):
        depthwise += 9 * ch * (w_in // s) ** 2
    full = _gflops("mobilenet_v1") * 1e9 / 2
    assert (full + depthwise + 1024 * 1000) / 1e6 == pytest.approx(569, rel=0.01)


def test_unet_flops_by_hand():
    # Double 3x3 convs per level (widths 256..16), decoder convs at the skip widths with
    # the concatenated 2*C input, and the 1x1 head: 3 -> 2 classes.
    chans, widths = (64, 128, 256, 512, 1024), (256, 128, 64, 32, 16)
    macs, cin = 0, 3
    for c, w in zip(chans, widths):
        macs += 9 * (cin * c + c * c) * w * w
        cin = c
    for c, w in zip(chans[-2::-1], widths[-2::-1]):
        macs += 9 * (2 * c * c + c * c) * w * w
    macs += 64 * 2 * 256 * 256
    assert _gflops("unet") * 1e9 == 2 * macs


def test_non_default_widths_and_batches():
    layers = network_layers("resnet50", 4, 256)
    assert layers[-1].shape.out_w == 8 and all(l.shape.batch == 4 for l in layers)
    assert network_layers("inception_v3", 1) == network_layers("INCEPTION_V3", 1, 299)
    assert network_layers("unet", 1, 100)[-1].shape.out_w == 100  # padded decoder
    with pytest.raises(ValueError, match="divisible by 32"):
        network_layers("yolov3", 1, 400)
    with pytest.raises(ValueError):
        network_layers("resnet50", 1, 0)
    with pytest.raises(ValueError):
        network_layers("vgg16", 1, 8)  # too small for five 2x2 pools
    with pytest.raises(ValueError):
        network_layers("resnet50", 0)  # ShapeError is a ValueError


def test_unknown_network_lists_known_names():
    with pytest.raises(ValueError) as info:
        network_layers("lenet5", 1)
    message = str(info.value)
    assert "lenet5" in message
    for name in NETWORKS:
        assert name in message
    with pytest.raises(ValueError, match="resnet50"):
        skipped_layers("nope", 1)


def test_unique_shapes_keeps_first_seen_order():
    layers = network_layers("resnet50", 2)
    shapes = unique_shapes(layers)
    assert len(shapes) == len(set(layer.shape for layer in layers)) == 23
    assert shapes[0] == layers[0].shape
    firsts = []
    for layer in layers:
        if layer.shape not in firsts:
            firsts.append(layer.shape)
    assert shapes == firsts
    both = unique_shapes(network_layers("vgg16", 1) + network_layers("vgg19", 1))
    assert both == unique_shapes(network_layers("vgg16", 1))  # VGG-19 adds no new shape
    assert unique_shapes([s.shape for s in layers]) == shapes


@pytest.mark.parametrize("args, expected", [
    ((112, 3, 2, 0, True), 56),
    ((111, 3, 2, 0, True), 55),
    ((14, 2, 2, 0, True), 7),
    ((13, 2, 2, 0, True), 7),
    ((13, 2, 2, 0, False), 6),
    ((112, 3, 2, 1, False), 56),
    ((5, 2, 2, 1, True), 3),  # the last window would start in the padding: dropped
    ((6, 2, 2, 1, True), 4),
])
def test_pool_out_width(args, expected):
    # (in_width, kernel, stride, padding, ceil_mode), checked against PyTorch's rule.
    assert pool_out_width(*args) == expected


def test_pool_out_width_rejects_too_small_inputs():
    with pytest.raises(ValueError):
        pool_out_width(1, 2, 2)


# -- torchvision, exactly ------------------------------------------------------------------
#: Every Conv2d call of torchvision's models, recorded by tests/data/capture_torchvision_convs.py.
CAPTURE = json.loads((Path(__file__).with_name("data") / "torchvision-convs.json").read_text())


@pytest.mark.parametrize("case", CAPTURE["cases"], ids=lambda c: f"{c['network']}-{c['width']}")
def test_matches_torchvision(case):
    name, width, batch = case["network"], case["width"], case["batch"]
    if width is None:
        assert NETWORKS[name].default_width == case["image_width"]
    seen, other = [], []
    for conv in case["convs"]:
        x, y = conv["input"], conv["output"]
        assert x[-1] == x[-2] and y[-1] == y[-2]  # torchvision feeds square maps everywhere
        kh, kw = conv["kernel"]
        if conv["groups"] == 1 and kh == kw:
            assert conv["stride"][0] == conv["stride"][1] and conv["padding"][0] == conv["padding"][1]
            assert conv["dilation"] == [1, 1]
            seen.append((conv["module"], x[0], x[1], x[-1], y[1], y[-1], kh, conv["stride"][0], conv["padding"][0]))
        else:
            other.append(conv["module"])
    ours = [(layer.layer, s.batch, s.in_ch, s.in_w, s.out_ch, s.out_w, s.kernel_w, s.stride_w, s.pad_w)
            for layer in network_layers(name, batch, width) for s in [layer.shape]]
    assert ours == seen
    assert [n for n, _ in skipped_layers(name, batch, width)] == other


def test_the_torchvision_capture_covers_every_table_checked_against_it():
    assert len(CAPTURE["cases"]) == 19 and CAPTURE["torchvision"]
    assert {c["network"] for c in CAPTURE["cases"]} <= set(NETWORKS)


def test_the_sparse_seeds_networks_and_grid():
    from seer.layers.grids import SPARSE_SEED_BATCHES, resolve_grids, sparse_seed_grid
    from seer.layers.known_networks import SPARSE_SEED_EXTRA, SPARSE_SEED_NETWORKS

    # torchvision's counts: 1 + 3 per bottleneck + 4 downsamples; 1 + 2 per dense layer + 3 transitions.
    assert {n: len(network_layers(n, 1)) for n in SPARSE_SEED_EXTRA} == {"resnet101": 104, "densenet169": 168,
                                                                       "densenet201": 200}
    assert set(SPARSE_SEED_EXTRA).isdisjoint(NETWORKS) and set(SPARSE_SEED_NETWORKS) <= set(NETWORKS) | set(SPARSE_SEED_EXTRA)
    shapes = sparse_seed_grid()
    per_batch = {b: len({s for s in shapes if s.batch == b}) for b in SPARSE_SEED_BATCHES}
    assert per_batch == {1: 139, 2: 139, 4: 139, 8: 139}  # DenseNets share their first blocks, ResNets all shapes
    assert [s.shape for s in resolve_grids("sparse-seed")] == shapes
    assert {s.grid for s in resolve_grids("sparse-seed")} == {"sparse-seed"}

"""The convolution layers of well-known CNNs, as data.

Each network is a compact table (ResNet's block type, stage widths and counts; VGG's
``cfg`` list; DenseNet's growth rate and block config; Inception modules as tables of
branch convolutions; YOLOv3 as a Darknet-style layer list) and one small builder that
walks it, carrying channels and the spatial width through every convolution *and* every
pooling layer, so each layer's ``in_width`` is the previous layer's exact output width.

Two groups of networks are registered in :data:`NETWORKS`:

``TRAINING_NETWORKS``
    ResNet-50/152, VGG-16, DenseNet-121, AlexNet and GoogLeNet, exactly as torchvision
    defines them (ResNet v1.5, torchvision's AlexNet, torchvision's GoogLeNet).
``TEST_SET_II_NETWORKS``
    Networks held out of training: ResNet-18, SqueezeNet 1.1, Inception-v3, MobileNet v1,
    VGG-19, YOLOv3 and U-Net.

Only square-kernel, non-grouped, non-transposed convolutions can be written as a
:class:`~seer.layers.shapes.ConvShape`; :func:`network_layers` returns those, in forward order
and with repeated shapes kept (a network's time is the sum over all its layers), and
:func:`skipped_layers` names the others and says why. Layer names follow torchvision's
module names wherever torchvision has the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from seer.layers.shapes import ConvShape, conv_out_width

__all__ = [
    "NETWORKS",
    "TEST_SET_II_NETWORKS",
    "TRAINING_NETWORKS",
    "NetworkLayer",
    "NetworkSpec",
    "network_layers",
    "pool_out_width",
    "skipped_layers",
    "unique_shapes",
]


@dataclass(frozen=True)
class NetworkLayer:
    """One convolution layer of a network.

    Parameters
    ----------
    network : str
        Registry name of the network, e.g. ``"resnet50"``.
    layer : str
        Readable layer name, torchvision's module name where torchvision has the network
        (e.g. ``"layer3.2.conv2"``, ``"features.0"``).
    shape : ConvShape
        The layer's convolution at the requested batch size and input width.
    """

    network: str
    layer: str
    shape: ConvShape


def pool_out_width(
    in_width: int, kernel_width: int, stride: int, padding: int = 0, ceil_mode: bool = False
) -> int:
    """Output width of a max or average pooling layer, as PyTorch computes it.

    Parameters
    ----------
    in_width : int
        Input width.
    kernel_width, stride, padding : int
        Pooling window, stride and (implicit) padding.
    ceil_mode : bool, default=False
        Round the number of windows up instead of down; as in PyTorch, a last window that
        would start inside the right padding is dropped.

    Returns
    -------
    int
        The output width.

    Raises
    ------
    ValueError
        If the window does not fit the padded input.
    """
    span = in_width + 2 * padding - kernel_width
    if span < 0:
        raise ValueError(
            f"pooling window {kernel_width} does not fit input width {in_width} "
            f"with padding {padding}"
        )
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= in_width + padding:
        out -= 1
    return out


# -- builder machinery ---------------------------------------------------------------------
@dataclass(frozen=True)
class _Conv:
    """One convolution as a builder emits it, before the batch size is known."""

    name: str
    in_ch: int
    in_width: int
    out_ch: int
    kernel: int | tuple[int, int]
    stride: int
    padding: int | tuple[int, int]
    skip: str | None  # why it is no ConvShape; None if it is one


class _Trace:
    """Collects a network's convolutions; each ``conv`` call returns its output width."""

    def __init__(self) -> None:
        self.convs: list[_Conv] = []

    def conv(
        self,
        name: str,
        in_ch: int,
        width: int,
        out_ch: int,
        kernel: int | tuple[int, int],
        stride: int = 1,
        padding: int | tuple[int, int] = 0,
        groups: int = 1,
    ) -> int:
        """Record a convolution and return its output width (along the width axis)."""
        skip = None
        if isinstance(kernel, tuple):
            skip = f"non-square kernel {kernel[0]}x{kernel[1]}"
        elif groups == in_ch and groups > 1:
            skip = f"depthwise convolution (groups={groups})"
        elif groups > 1:
            skip = f"grouped convolution (groups={groups})"
        self.convs.append(_Conv(name, in_ch, width, out_ch, kernel, stride, padding, skip))
        k = kernel[1] if isinstance(kernel, tuple) else kernel
        p = padding[1] if isinstance(padding, tuple) else padding
        out = conv_out_width(width, k, stride, p)
        if out <= 0:
            raise ValueError(f"{name}: input width {width} is too small for this network")
        return out

    def transposed(self, name: str, in_ch: int, width: int, out_ch: int, factor: int) -> int:
        """Record a ``factor`` x ``factor``, stride-``factor`` transposed convolution."""
        self.convs.append(_Conv(name, in_ch, width, out_ch, factor, factor, 0,
                                "transposed convolution"))
        return width * factor


#: A branch convolution of a multi-branch module: (name, input, out_ch, kernel, stride,
#: padding). ``input`` is None for the module's input, else the name of an earlier conv of
#: the same module. Convs that no other conv reads are concatenated into the output.
_Row = tuple[str, str | None, int, int | tuple[int, int], int, int | tuple[int, int]]


def _module(
    trace: _Trace, prefix: str, rows: Sequence[_Row], in_ch: int, width: int,
    passthrough: bool = False,
) -> tuple[int, int]:
    """Emit a multi-branch module's convs in table order; return (out_ch, out_width).

    ``passthrough`` adds a branch that carries the input channels unchanged (a pooling
    branch without a conv, or DenseNet's concatenation of the layer's input).
    """
    outputs: dict[str, tuple[int, int]] = {}
    for name, source, out_ch, kernel, stride, padding in rows:
        cin, w = outputs[source] if source else (in_ch, width)
        outputs[name] = (out_ch, trace.conv(f"{prefix}.{name}", cin, w, out_ch, kernel,
                                            stride, padding))
    read = {row[1] for row in rows}
    leaves = [value for name, value in outputs.items() if name not in read]
    widths = {w for _, w in leaves}
    assert len(widths) == 1, f"{prefix}: branches end at different widths {widths}"
    return sum(c for c, _ in leaves) + (in_ch if passthrough else 0), widths.pop()


# -- ResNet --------------------------------------------------------------------------------
#: Block type -> (expansion, kernel widths of its convs). torchvision's ResNet v1.5 puts the
#: stage's stride 2 on the block's first 3x3 conv; the 1x1 downsample conv runs after them.
_RESNET_BLOCKS = {"basic": (1, (3, 3)), "bottleneck": (4, (1, 3, 1))}
_RESNET_WIDTHS = (64, 128, 256, 512)


def _resnet(block: str, counts: Sequence[int]) -> Callable[[int], list[_Conv]]:
    expansion, kernels = _RESNET_BLOCKS[block]
    strided = kernels.index(3)

    def build(width: int) -> list[_Conv]:
        t = _Trace()
        width = t.conv("conv1", 3, width, 64, 7, 2, 3)
        width = pool_out_width(width, 3, 2, 1)
        in_ch = 64
        for stage, (planes, count) in enumerate(zip(_RESNET_WIDTHS, counts), start=1):
            for i in range(count):
                stride = 2 if stage > 1 and i == 0 else 1
                out_ch = planes * expansion
                cin, w = in_ch, width
                for j, k in enumerate(kernels):
                    cout = out_ch if j == len(kernels) - 1 else planes
                    w = t.conv(f"layer{stage}.{i}.conv{j + 1}", cin, w, cout, k,
                               stride if j == strided else 1, k // 2)
                    cin = cout
                if stride != 1 or in_ch != out_ch:
                    t.conv(f"layer{stage}.{i}.downsample.0", in_ch, width, out_ch, 1, stride)
                in_ch, width = out_ch, w
        return t.convs

    return build


# -- plain conv/pool stacks: AlexNet and VGG -----------------------------------------------
#: An int c is a conv to c channels with VGG's 3x3/s1/p1; a tuple (c, k, s, p) is a conv;
#: "M" is the network's max-pool. Module indices follow torchvision's ``features``
#: Sequential: a conv is followed by its ReLU (two indices), a pool takes one.
_Cfg = Sequence[int | tuple[int, int, int, int] | str]

_VGG_CFGS: dict[str, _Cfg] = {
    "vgg16": [64, 64, "M", 128, 128, "M", 256, 256, 256, "M",
              512, 512, 512, "M", 512, 512, 512, "M"],
    "vgg19": [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M",
              512, 512, 512, 512, "M", 512, 512, 512, 512, "M"],
}
#: torchvision's AlexNet (the "one weird trick" variant: 64-192-384-256-256 channels).
_ALEXNET_CFG: _Cfg = [(64, 11, 4, 2), "M", (192, 5, 1, 2), "M",
                      (384, 3, 1, 1), (256, 3, 1, 1), (256, 3, 1, 1), "M"]


def _features(cfg: _Cfg, pool: tuple[int, int]) -> Callable[[int], list[_Conv]]:
    def build(width: int) -> list[_Conv]:
        t = _Trace()
        in_ch, index = 3, 0
        for item in cfg:
            if item == "M":
                width = pool_out_width(width, *pool)
                index += 1
                continue
            out_ch, k, s, p = (item, 3, 1, 1) if isinstance(item, int) else item
            width = t.conv(f"features.{index}", in_ch, width, out_ch, k, s, p)
            in_ch, index = out_ch, index + 2
        return t.convs

    return build


# -- DenseNet ------------------------------------------------------------------------------
def _densenet(growth: int, blocks: Sequence[int], init_ch: int = 64,
              bn_size: int = 4) -> Callable[[int], list[_Conv]]:
    # Dense layer: 1x1 bottleneck to bn_size*growth, then 3x3 to growth; its output is
    # concatenated to its input. Transitions halve the channels (1x1) and avg-pool 2x2.
    layer: list[_Row] = [("conv1", None, bn_size * growth, 1, 1, 0),
                         ("conv2", "conv1", growth, 3, 1, 1)]

    def build(width: int) -> list[_Conv]:
        t = _Trace()
        width = t.conv("features.conv0", 3, width, init_ch, 7, 2, 3)
        width = pool_out_width(width, 3, 2, 1)
        ch = init_ch
        for b, count in enumerate(blocks, start=1):
            for i in range(1, count + 1):
                ch, width = _module(t, f"features.denseblock{b}.denselayer{i}", layer, ch,
                                    width, passthrough=True)
            if b < len(blocks):
                width = t.conv(f"features.transition{b}.conv", ch, width, ch // 2, 1)
                ch, width = ch // 2, pool_out_width(width, 2, 2)
        return t.convs

    return build


# -- GoogLeNet -----------------------------------------------------------------------------
#: torchvision's GoogLeNet: (module, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj),
#: and the ceil-mode max-pools (kernel, stride) that follow some modules.
_GOOGLENET = [("inception3a", 64, 96, 128, 16, 32, 32),
              ("inception3b", 128, 128, 192, 32, 96, 64),
              ("inception4a", 192, 96, 208, 16, 48, 64),
              ("inception4b", 160, 112, 224, 24, 64, 64),
              ("inception4c", 128, 128, 256, 24, 64, 64),
              ("inception4d", 112, 144, 288, 32, 64, 64),
              ("inception4e", 256, 160, 320, 32, 128, 128),
              ("inception5a", 256, 160, 320, 32, 128, 128),
              ("inception5b", 384, 192, 384, 48, 128, 128)]
_GOOGLENET_POOLS = {"inception3b": (3, 2), "inception4e": (2, 2)}


def _googlenet_module(c1: int, c3r: int, c3: int, c5r: int, c5: int, pp: int) -> list[_Row]:
    # The paper's "5x5" branch is a 3x3 conv in torchvision (a known quirk kept for
    # compatibility with its pretrained weights); we follow torchvision. Branch 4's
    # 3x3/s1/p1 ceil-mode max-pool keeps the width.
    return [("branch1.conv", None, c1, 1, 1, 0),
            ("branch2.0.conv", None, c3r, 1, 1, 0),
            ("branch2.1.conv", "branch2.0.conv", c3, 3, 1, 1),
            ("branch3.0.conv", None, c5r, 1, 1, 0),
            ("branch3.1.conv", "branch3.0.conv", c5, 3, 1, 1),
            ("branch4.1.conv", None, pp, 1, 1, 0)]


def _googlenet(width: int) -> list[_Conv]:
    t = _Trace()
    width = t.conv("conv1.conv", 3, width, 64, 7, 2, 3)
    width = pool_out_width(width, 3, 2, ceil_mode=True)
    width = t.conv("conv2.conv", 64, width, 64, 1)
    width = t.conv("conv3.conv", 64, width, 192, 3, 1, 1)
    width = pool_out_width(width, 3, 2, ceil_mode=True)
    ch = 192
    for name, *channels in _GOOGLENET:
        ch, width = _module(t, name, _googlenet_module(*channels), ch, width)
        if name in _GOOGLENET_POOLS:
            width = pool_out_width(width, *_GOOGLENET_POOLS[name], ceil_mode=True)
    return t.convs


# -- Inception-v3 --------------------------------------------------------------------------
# torchvision's Inception3 modules. Rows are in forward order; "x.conv" names follow the
# BasicConv2d wrappers. The 1x7/7x1/1x3/3x1 convs are recorded and reported as skipped.
def _inception_a(pool_features: int) -> list[_Row]:
    return [("branch1x1.conv", None, 64, 1, 1, 0),
            ("branch5x5_1.conv", None, 48, 1, 1, 0),
            ("branch5x5_2.conv", "branch5x5_1.conv", 64, 5, 1, 2),
            ("branch3x3dbl_1.conv", None, 64, 1, 1, 0),
            ("branch3x3dbl_2.conv", "branch3x3dbl_1.conv", 96, 3, 1, 1),
            ("branch3x3dbl_3.conv", "branch3x3dbl_2.conv", 96, 3, 1, 1),
            ("branch_pool.conv", None, pool_features, 1, 1, 0)]  # after 3x3/s1/p1 avg-pool


_INCEPTION_B: list[_Row] = [  # plus a 3x3/s2 max-pool branch (passthrough)
    ("branch3x3.conv", None, 384, 3, 2, 0),
    ("branch3x3dbl_1.conv", None, 64, 1, 1, 0),
    ("branch3x3dbl_2.conv", "branch3x3dbl_1.conv", 96, 3, 1, 1),
    ("branch3x3dbl_3.conv", "branch3x3dbl_2.conv", 96, 3, 2, 0)]


def _inception_c(c7: int) -> list[_Row]:
    row, col = ((1, 7), (0, 3)), ((7, 1), (3, 0))
    return [("branch1x1.conv", None, 192, 1, 1, 0),
            ("branch7x7_1.conv", None, c7, 1, 1, 0),
            ("branch7x7_2.conv", "branch7x7_1.conv", c7, row[0], 1, row[1]),
            ("branch7x7_3.conv", "branch7x7_2.conv", 192, col[0], 1, col[1]),
            ("branch7x7dbl_1.conv", None, c7, 1, 1, 0),
            ("branch7x7dbl_2.conv", "branch7x7dbl_1.conv", c7, col[0], 1, col[1]),
            ("branch7x7dbl_3.conv", "branch7x7dbl_2.conv", c7, row[0], 1, row[1]),
            ("branch7x7dbl_4.conv", "branch7x7dbl_3.conv", c7, col[0], 1, col[1]),
            ("branch7x7dbl_5.conv", "branch7x7dbl_4.conv", 192, row[0], 1, row[1]),
            ("branch_pool.conv", None, 192, 1, 1, 0)]


_INCEPTION_D: list[_Row] = [  # plus a 3x3/s2 max-pool branch (passthrough)
    ("branch3x3_1.conv", None, 192, 1, 1, 0),
    ("branch3x3_2.conv", "branch3x3_1.conv", 320, 3, 2, 0),
    ("branch7x7x3_1.conv", None, 192, 1, 1, 0),
    ("branch7x7x3_2.conv", "branch7x7x3_1.conv", 192, (1, 7), 1, (0, 3)),
    ("branch7x7x3_3.conv", "branch7x7x3_2.conv", 192, (7, 1), 1, (3, 0)),
    ("branch7x7x3_4.conv", "branch7x7x3_3.conv", 192, 3, 2, 0)]

_INCEPTION_E: list[_Row] = [
    ("branch1x1.conv", None, 320, 1, 1, 0),
    ("branch3x3_1.conv", None, 384, 1, 1, 0),
    ("branch3x3_2a.conv", "branch3x3_1.conv", 384, (1, 3), 1, (0, 1)),
    ("branch3x3_2b.conv", "branch3x3_1.conv", 384, (3, 1), 1, (1, 0)),
    ("branch3x3dbl_1.conv", None, 448, 1, 1, 0),
    ("branch3x3dbl_2.conv", "branch3x3dbl_1.conv", 384, 3, 1, 1),
    ("branch3x3dbl_3a.conv", "branch3x3dbl_2.conv", 384, (1, 3), 1, (0, 1)),
    ("branch3x3dbl_3b.conv", "branch3x3dbl_2.conv", 384, (3, 1), 1, (1, 0)),
    ("branch_pool.conv", None, 192, 1, 1, 0)]

#: (module name, rows, has a passthrough max-pool branch), in forward order.
_INCEPTION_V3 = [("Mixed_5b", _inception_a(32), False),
                 ("Mixed_5c", _inception_a(64), False),
                 ("Mixed_5d", _inception_a(64), False),
                 ("Mixed_6a", _INCEPTION_B, True),
                 ("Mixed_6b", _inception_c(128), False),
                 ("Mixed_6c", _inception_c(160), False),
                 ("Mixed_6d", _inception_c(160), False),
                 ("Mixed_6e", _inception_c(192), False),
                 ("Mixed_7a", _INCEPTION_D, True),
                 ("Mixed_7b", _INCEPTION_E, False),
                 ("Mixed_7c", _INCEPTION_E, False)]
#: The stem: (name, out_ch, kernel, stride, padding), or "M" for a 3x3/s2 max-pool.
_INCEPTION_V3_STEM = [("Conv2d_1a_3x3", 32, 3, 2, 0), ("Conv2d_2a_3x3", 32, 3, 1, 0),
                      ("Conv2d_2b_3x3", 64, 3, 1, 1), "M", ("Conv2d_3b_1x1", 80, 1, 1, 0),
                      ("Conv2d_4a_3x3", 192, 3, 1, 0), "M"]


def _inception_v3(width: int) -> list[_Conv]:
    # The auxiliary classifier (training only; aux_logits=False) is not included.
    t = _Trace()
    ch = 3
    for item in _INCEPTION_V3_STEM:
        if item == "M":
            width = pool_out_width(width, 3, 2)
            continue
        name, out_ch, k, s, p = item
        width = t.conv(f"{name}.conv", ch, width, out_ch, k, s, p)
        ch = out_ch
    for name, rows, passthrough in _INCEPTION_V3:
        ch, width = _module(t, name, rows, ch, width, passthrough)
    return t.convs


# -- SqueezeNet 1.1 ------------------------------------------------------------------------
#: torchvision's squeezenet1_1 ``features``: index -> ("conv", out, k, s), ("pool",) for a
#: 3x3/s2 ceil-mode max-pool, or ("fire", squeeze, expand1x1, expand3x3).
_SQUEEZENET1_1 = {0: ("conv", 64, 3, 2), 2: ("pool",),
                  3: ("fire", 16, 64, 64), 4: ("fire", 16, 64, 64), 5: ("pool",),
                  6: ("fire", 32, 128, 128), 7: ("fire", 32, 128, 128), 8: ("pool",),
                  9: ("fire", 48, 192, 192), 10: ("fire", 48, 192, 192),
                  11: ("fire", 64, 256, 256), 12: ("fire", 64, 256, 256)}


def _squeezenet1_1(width: int, num_classes: int = 1000) -> list[_Conv]:
    t = _Trace()
    ch = 3
    for index, (kind, *args) in _SQUEEZENET1_1.items():
        if kind == "conv":
            out_ch, k, s = args
            width = t.conv(f"features.{index}", ch, width, out_ch, k, s)
            ch = out_ch
        elif kind == "pool":
            width = pool_out_width(width, 3, 2, ceil_mode=True)
        else:
            sq, e1, e3 = args
            rows: list[_Row] = [("squeeze", None, sq, 1, 1, 0),
                                ("expand1x1", "squeeze", e1, 1, 1, 0),
                                ("expand3x3", "squeeze", e3, 3, 1, 1)]
            ch, width = _module(t, f"features.{index}", rows, ch, width)
    t.conv("classifier.1", ch, width, num_classes, 1)  # the final conv is the classifier
    return t.convs


# -- MobileNet v1 --------------------------------------------------------------------------
#: Howard et al. 2017, Table 1: a 3x3/s2 conv to 32 channels, then depthwise-separable
#: blocks (pointwise out_ch, depthwise stride). Names follow Keras' MobileNet
#: (conv1, conv_dw_i, conv_pw_i); padding is 1 on every 3x3 conv as in PyTorch ports.
_MOBILENET_V1 = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                 (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1)]


def _mobilenet_v1(width: int) -> list[_Conv]:
    t = _Trace()
    width = t.conv("conv1", 3, width, 32, 3, 2, 1)
    ch = 32
    for i, (out_ch, stride) in enumerate(_MOBILENET_V1, start=1):
        width = t.conv(f"conv_dw_{i}", ch, width, ch, 3, stride, 1, groups=ch)
        width = t.conv(f"conv_pw_{i}", ch, width, out_ch, 1)
        ch = out_ch
    return t.convs


# -- YOLOv3 --------------------------------------------------------------------------------
def _yolov3_cfg(num_classes: int = 80) -> list[tuple]:
    """YOLOv3 as the layer list of Darknet's ``yolov3.cfg`` (107 layers, 75 convs).

    Entries: ("conv", filters, size, stride) with Darknet's pad=1 (padding size // 2),
    ("shortcut",), ("route", *layers) with relative or absolute indices, ("upsample",)
    and ("yolo",).
    """
    cfg: list[tuple] = [("conv", 32, 3, 1)]
    # Darknet-53 backbone: a strided 3x3 conv, then residual blocks (1x1 halve, 3x3).
    for filters, repeats in ((64, 1), (128, 2), (256, 8), (512, 8), (1024, 4)):
        cfg.append(("conv", filters, 3, 2))
        cfg += [("conv", filters // 2, 1, 1), ("conv", filters, 3, 1), ("shortcut",)] * repeats
    outputs = 3 * (num_classes + 5)
    # Head: at 1/32, 1/16 and 1/8 scale, five alternating 1x1/3x3 convs, a 3x3 and the
    # 1x1 detection conv. Lower scales first route back to the fifth conv, reduce it with
    # a 1x1 conv, upsample and concatenate a backbone output (layers 61 and 36).
    for scale, (filters, skip) in enumerate(((512, None), (256, 61), (128, 36))):
        if scale:
            cfg += [("route", -4), ("conv", filters, 1, 1), ("upsample",), ("route", -1, skip)]
        cfg += [("conv", filters, 1, 1), ("conv", 2 * filters, 3, 1)] * 3
        cfg += [("conv", outputs, 1, 1), ("yolo",)]
    return cfg


def _yolov3(width: int) -> list[_Conv]:
    if width % 32:
        raise ValueError(f"yolov3 needs an input width divisible by 32, got {width}")
    t = _Trace()
    out: list[tuple[int, int]] = []  # (channels, width) of each Darknet layer
    ch = 3
    for index, (kind, *args) in enumerate(_yolov3_cfg()):
        if kind == "conv":
            filters, size, stride = args
            width = t.conv(f"module_list.{index}", ch, width, filters, size, stride, size // 2)
            ch = filters
        elif kind == "upsample":
            width *= 2
        elif kind == "route":
            parts = [out[i if i >= 0 else index + i] for i in args]
            ch, width = sum(c for c, _ in parts), parts[0][1]
        out.append((ch, width))
    return t.convs


# -- U-Net ---------------------------------------------------------------------------------
#: Ronneberger et al. 2015 with padding 1 (sizes kept), as in the common PyTorch port
#: (milesial/Pytorch-UNet, bilinear=False): 3 input channels, 2 classes, whose module
#: names are used. Encoder double-convs at 64..1024 channels with 2x2 max-pools; each
#: decoder stage is a 2x2/s2 transposed conv (skipped) halving the channels, a
#: concatenation with the encoder's feature map (upsampled map padded to its width),
#: and a double conv; then a 1x1 conv to the classes.
_UNET_CHANNELS = (64, 128, 256, 512, 1024)


def _unet(width: int, in_ch: int = 3, num_classes: int = 2) -> list[_Conv]:
    t = _Trace()

    def double_conv(prefix: str, cin: int, cout: int, w: int) -> int:
        w = t.conv(f"{prefix}.double_conv.0", cin, w, cout, 3, 1, 1)
        return t.conv(f"{prefix}.double_conv.3", cout, w, cout, 3, 1, 1)

    skips: list[int] = []
    ch = in_ch
    for level, out_ch in enumerate(_UNET_CHANNELS):
        if level:
            skips.append(width)
            width = pool_out_width(width, 2, 2)
        prefix = f"down{level}.maxpool_conv.1" if level else "inc"
        width = double_conv(prefix, ch, out_ch, width)
        ch = out_ch
    for level, skip_width in enumerate(reversed(skips), start=1):
        t.transposed(f"up{level}.up", ch, width, ch // 2, 2)
        width = double_conv(f"up{level}.conv", ch, ch // 2, skip_width)
        ch //= 2
    t.conv("outc.conv", ch, width, num_classes, 1)
    return t.convs


# -- registry ------------------------------------------------------------------------------
@dataclass(frozen=True)
class NetworkSpec:
    """A registered network.

    Parameters
    ----------
    name : str
        Lowercase registry name.
    default_width : int
        Input image width used when none is given.
    description : str
        Which definition the layers follow.
    build : callable
        ``build(image_width)`` returns the network's convolutions (internal records).
    """

    name: str
    default_width: int
    description: str
    build: Callable[[int], list[_Conv]]


_SPECS = [
    NetworkSpec("resnet50", 224, "torchvision resnet50 (v1.5)",
                _resnet("bottleneck", (3, 4, 6, 3))),
    NetworkSpec("resnet152", 224, "torchvision resnet152 (v1.5)",
                _resnet("bottleneck", (3, 8, 36, 3))),
    NetworkSpec("vgg16", 224, "torchvision vgg16 (configuration D)",
                _features(_VGG_CFGS["vgg16"], (2, 2))),
    NetworkSpec("densenet121", 224, "torchvision densenet121", _densenet(32, (6, 12, 24, 16))),
    NetworkSpec("alexnet", 224, "torchvision alexnet", _features(_ALEXNET_CFG, (3, 2))),
    NetworkSpec("googlenet", 224, "torchvision googlenet", _googlenet),
    NetworkSpec("resnet18", 224, "torchvision resnet18", _resnet("basic", (2, 2, 2, 2))),
    NetworkSpec("squeezenet1_1", 224, "torchvision squeezenet1_1", _squeezenet1_1),
    NetworkSpec("inception_v3", 299, "torchvision inception_v3, square-kernel convs",
                _inception_v3),
    NetworkSpec("mobilenet_v1", 224, "MobileNet v1 (1.0), full convs only", _mobilenet_v1),
    NetworkSpec("vgg19", 224, "torchvision vgg19 (configuration E)",
                _features(_VGG_CFGS["vgg19"], (2, 2))),
    NetworkSpec("yolov3", 416, "YOLOv3 (Darknet yolov3.cfg, 80 classes)", _yolov3),
    NetworkSpec("unet", 256, "U-Net, padding 1 (milesial/Pytorch-UNet, 3 in, 2 classes)",
                _unet),
]
#: Every registered network, keyed by lowercase name.
NETWORKS: dict[str, NetworkSpec] = {spec.name: spec for spec in _SPECS}
#: The networks of the cuSNN seed's sparse experiments (``../seeds/001``: DenseNet-121/169/201,
#: ResNet-101/152) that :data:`NETWORKS` lacks; neither training nor Test-set-II networks, they
#: make the ``sparse-seed`` grid only.
SPARSE_SEED_EXTRA: dict[str, NetworkSpec] = {spec.name: spec for spec in (
    NetworkSpec("resnet101", 224, "torchvision resnet101 (v1.5)", _resnet("bottleneck", (3, 4, 23, 3))),
    NetworkSpec("densenet169", 224, "torchvision densenet169", _densenet(32, (6, 12, 32, 32))),
    NetworkSpec("densenet201", 224, "torchvision densenet201", _densenet(32, (6, 12, 48, 32))),
)}
#: The cuSNN seed's networks, in its order.
SPARSE_SEED_NETWORKS: tuple[str, ...] = ("densenet121", "densenet169", "densenet201", "resnet101", "resnet152")
#: The networks whose layers make up the training grid.
TRAINING_NETWORKS: tuple[str, ...] = (
    "resnet50", "resnet152", "vgg16", "densenet121", "alexnet", "googlenet")
#: Held-out networks for Test-set-II: none of them is in ``TRAINING_NETWORKS``.
TEST_SET_II_NETWORKS: tuple[str, ...] = (
    "resnet18", "squeezenet1_1", "inception_v3", "mobilenet_v1", "vgg19", "yolov3", "unet")


def _convs(name: str, image_width: int | None) -> tuple[NetworkSpec, list[_Conv]]:
    spec = (NETWORKS.get(name.lower()) or SPARSE_SEED_EXTRA.get(name.lower())) if isinstance(name, str) else None
    if spec is None:
        raise ValueError(f"unknown network {name!r}; known networks: {', '.join([*NETWORKS, *SPARSE_SEED_EXTRA])}")
    width = spec.default_width if image_width is None else image_width
    if isinstance(width, bool) or not isinstance(width, int) or width <= 0:
        raise ValueError(f"image_width must be a positive integer, got {image_width!r}")
    return spec, spec.build(width)


def network_layers(name: str, batch: int, image_width: int | None = None) -> list[NetworkLayer]:
    """Every non-grouped, square-kernel convolution of a network, in forward order.

    Parameters
    ----------
    name : str
        Network name, one of :data:`NETWORKS` (case-insensitive).
    batch : int
        Batch size of every layer.
    image_width : int, optional
        Width (= height) of the input image; the network's default (224; 299 for
        inception_v3, 416 for yolov3, 256 for unet) when None.

    Returns
    -------
    list of NetworkLayer
        One entry per layer, repeated shapes kept, so that summing over the list gives the
        network's total.

    Raises
    ------
    ValueError
        If the name is unknown (the message lists the known names) or the width is not a
        positive integer or too small for the network.
    ShapeError
        If ``batch`` is not a positive integer.
    """
    spec, convs = _convs(name, image_width)
    return [
        NetworkLayer(spec.name, c.name, ConvShape.square(
            batch, c.in_ch, c.in_width, c.out_ch, c.kernel, c.stride, c.padding))
        for c in convs if c.skip is None
    ]


def skipped_layers(name: str, batch: int, image_width: int | None = None) -> list[tuple[str, str]]:
    """The convolutions of a network that a :class:`ConvShape` cannot express.

    Parameters
    ----------
    name : str
        Network name, one of :data:`NETWORKS` (case-insensitive).
    batch : int
        Batch size (kept for symmetry with :func:`network_layers`; it changes nothing).
    image_width : int, optional
        Input width; the network's default when None.

    Returns
    -------
    list of (str, str)
        ``(layer name, reason)`` in forward order: non-square kernels, grouped or
        depthwise convolutions, transposed convolutions.
    """
    _, convs = _convs(name, image_width)
    return [(c.name, c.skip) for c in convs if c.skip is not None]


def unique_shapes(layers: Iterable[NetworkLayer | ConvShape]) -> list[ConvShape]:
    """Distinct shapes of some layers, in first-seen order.

    Parameters
    ----------
    layers : iterable of NetworkLayer or ConvShape
        Layers (e.g. from :func:`network_layers`, possibly of several networks) or shapes.

    Returns
    -------
    list of ConvShape
        Each shape once.
    """
    seen: dict[ConvShape, None] = {}
    for item in layers:
        seen.setdefault(item.shape if isinstance(item, NetworkLayer) else item, None)
    return list(seen)

"""Why seer's picks can lose their gain under ``torch.compile``: a CPU probe of inductor's
layout choice around convolutions it cannot see into.

seer's convolutions reach inductor as one opaque custom operator, traced with the NCHW strides
of eager mode. Inductor's layout optimisation decides, from the ``aten.convolution`` nodes it
can see, whether to run convolutions channels-last; where it does, the tensors around each
opaque operator change layout. This script stands a CPU custom operator (``F.conv2d`` inside)
in for seer's on chosen convolutions of two networks: ResNet-50 (``tests/torch_nets.py``) and a
RegNetY-1.6GF-like one (its widths, depths, group width 24 and squeeze-excitation). It prints
inductor's decision per case, and, with ``--code DIR``, writes the code inductor generates for
ResNet-50 with its 3x3 convolutions opaque.

Inductor's layout heuristic is private (``GraphLowering.decide_layout_opt``), so this script may
break with another PyTorch; seer does not use it. MKLDNN is switched off so that the CPU-only
rule (always channels-last) is skipped, which leaves the flop-based rule that GPUs get.

    python benchmarks/compile_layout.py [--code DIR]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import torch_nets  # noqa: E402


@torch.library.custom_op("probe::conv", mutates_args=())
def opaque_conv(x: torch.Tensor, w: torch.Tensor, stride: int, padding: int, groups: int) -> torch.Tensor:
    return F.conv2d(x, w, None, stride, padding, 1, groups)


@opaque_conv.register_fake
def _(x, w, stride, padding, groups):
    return F.conv2d(x, w, None, stride, padding, 1, groups)  # fake tensors: shapes only


class Opaque(nn.Module):
    def __init__(self, conv: nn.Conv2d) -> None:
        super().__init__()
        self.conv = conv

    def forward(self, x):
        c = self.conv
        return opaque_conv(x, c.weight, c.stride[0], c.padding[0], c.groups)


class Block(nn.Module):
    """RegNetY's block: 1x1, grouped 3x3, squeeze-excitation, 1x1, residual."""

    def __init__(self, cin: int, cout: int, stride: int, group_width: int = 24) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())
        self.b = nn.Sequential(nn.Conv2d(cout, cout, 3, stride, 1, groups=cout // group_width, bias=False),
                               nn.BatchNorm2d(cout), nn.ReLU())
        squeezed = max(1, cin // 4)
        self.se = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(cout, squeezed, 1), nn.ReLU(),
                                nn.Conv2d(squeezed, cout, 1), nn.Sigmoid())
        self.c = nn.Sequential(nn.Conv2d(cout, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.proj = None if stride == 1 and cin == cout else nn.Sequential(
            nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.b(self.a(x))
        y = self.c(y * self.se(y))
        return F.relu(y + (x if self.proj is None else self.proj(x)))


def regnet_like() -> nn.Module:
    layers, cin = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32), nn.ReLU()], 32
    for width, depth in zip((48, 120, 336, 888), (2, 6, 17, 2)):
        for i in range(depth):
            layers.append(Block(cin, width, 2 if i == 0 else 1))
            cin = width
    return nn.Sequential(*layers)


NETWORKS = {"regnet_y_1_6gf-like": regnet_like, "resnet50": torch_nets.resnet50}
#: Which convolutions stand in for seer's picks.
OPAQUE = {"none": lambda c: False, "grouped": lambda c: c.groups > 1,
          "3x3": lambda c: c.kernel_size == (3, 3), "1x1": lambda c: c.kernel_size == (1, 1)}


def with_opaque(model: nn.Module, which) -> nn.Module:
    for module in list(model.modules()):
        for name, child in list(module.named_children()):
            if isinstance(child, nn.Conv2d) and which(child):
                setattr(module, name, Opaque(child))
    return model


def decision(model: nn.Module, x: torch.Tensor) -> tuple[bool, int]:
    """Inductor's layout decision on ``model``'s inference graph, and its aten convolutions."""
    from torch._dynamo.backends.common import aot_autograd
    from torch._inductor.graph import GraphLowering

    seen = {}

    def compiler(gm, inputs):
        convs = sum(n.target is torch.ops.aten.convolution.default for n in gm.graph.nodes)
        seen["decision"] = (GraphLowering.decide_layout_opt(gm, is_inference=True), convs)
        return gm

    torch.compiler.reset()
    with torch.no_grad():
        torch.compile(model, backend=aot_autograd(fw_compiler=compiler))(x)
    return seen["decision"]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--code", type=Path, help="folder for inductor's code of ResNet-50, 3x3 opaque")
    args = parser.parse_args(argv)
    torch.backends.mkldnn.enabled = False
    x = torch.randn(2, 3, 224, 224)
    print("| network | opaque convolutions | aten convolutions left | channels-last |\n|---|---|---|---|")
    for net, build in NETWORKS.items():
        for label, which in OPAQUE.items():
            on, convs = decision(with_opaque(build().eval(), which), x)
            print(f"| {net} | {label} | {convs} | {on} |")
    if args.code:
        from torch._inductor.utils import run_and_get_code

        torch.compiler.reset()
        with torch.no_grad():
            _, codes = run_and_get_code(torch.compile(with_opaque(torch_nets.resnet50().eval(), OPAQUE["3x3"])),
                                        torch.randn(2, 3, 64, 64))
        args.code.mkdir(parents=True, exist_ok=True)
        (args.code / "resnet50-3x3-opaque.py").write_text("\n".join(codes))
    return 0


if __name__ == "__main__":
    sys.exit(main())

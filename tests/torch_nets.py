"""Small PyTorch networks for the tests of seer.torch, importable as ``torch_nets:FUNCTION``."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class _Bottleneck(nn.Module):
    """torchvision's ResNet v1.5 bottleneck (stride on the 3x3), written out again here."""

    def __init__(self, in_ch: int, width: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, width * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(width * 4)
        self.downsample = None
        if stride != 1 or in_ch != width * 4:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, width * 4, 1, stride=stride, bias=False),
                                            nn.BatchNorm2d(width * 4))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return F.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    """ResNet-50 as torchvision defines it, with the same module names."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        in_ch = 64
        for stage, (width, blocks, stride) in enumerate(((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)), 1):
            layers = []
            for b in range(blocks):
                layers.append(_Bottleneck(in_ch, width, stride if b == 0 else 1))
                in_ch = width * 4
            setattr(self, f"layer{stage}", nn.Sequential(*layers))
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def resnet50() -> nn.Module:
    return ResNet50()


class _Shared(nn.Module):
    """One convolution module run twice, and a functional convolution with its own weight."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(16, 16, 3, padding=1)
        self.weight = nn.Parameter(torch.zeros(16, 16, 5, 5))

    def forward(self, x):
        x = self.conv(self.conv(x))
        return F.conv2d(x, self.weight, padding=2, dilation=1)


class EveryKind(nn.Module):
    """A layer of every kind seer models, and one it does not."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.shared = _Shared()
        self.grouped = nn.Conv2d(16, 32, 3, padding=1, groups=4)
        self.depthwise = nn.Conv2d(32, 32, 3, padding=1, groups=32)
        self.one_by_seven = nn.Conv2d(32, 32, (1, 7), padding=(0, 3))
        self.dilated = nn.Conv2d(32, 32, 3, padding=2, dilation=2)
        self.same_even = nn.Conv2d(32, 32, 4, padding="same")
        self.reflect = nn.Conv2d(32, 32, 3, padding=1, padding_mode="reflect")
        self.up = nn.ConvTranspose2d(32, 8, 2, stride=2)

    def forward(self, x):
        x = self.shared(self.stem(x))
        x = self.depthwise(self.grouped(x))
        x = self.reflect(self.same_even(self.dilated(self.one_by_seven(x))))
        return self.up(x)


def every_kind() -> nn.Module:
    return EveryKind()


class Video(nn.Module):
    """A 3D convolution and a 1D one (as a sequence model would have)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv3d = nn.Conv3d(3, 8, (3, 7, 7), stride=(1, 2, 2), padding=(1, 3, 3))
        self.conv1d = nn.Conv1d(8, 4, 5, padding=2)

    def forward(self, x):
        x = self.conv3d(x)
        return self.conv1d(x.flatten(2))


def video() -> nn.Module:
    return Video()


class Permuted(nn.Module):
    """A ConvNeXt-like block: the depthwise convolution after it gets its input channels-last
    (permuted to NHWC for a Linear, and back)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, padding=1)
        self.mix = nn.Linear(16, 16)
        self.dw = nn.Conv2d(16, 16, 7, padding=3, groups=16)

    def forward(self, x):
        y = self.mix(self.stem(x).permute(0, 2, 3, 1)).permute(0, 3, 1, 2)
        return self.dw(y * 1.0)


def permuted() -> nn.Module:
    return Permuted()


class ReadsValues(nn.Module):
    """Reads a tensor's value in its forward pass, which the meta device cannot do."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        if x.abs().sum().item() >= 0:
            return self.conv(x)
        return x


def reads_values() -> nn.Module:
    return ReadsValues()


def not_a_module():
    return [nn.Conv2d(3, 4, 3)]


def needs_an_argument(width):
    return nn.Conv2d(3, width, 3)

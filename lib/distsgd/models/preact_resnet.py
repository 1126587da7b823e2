"""PreAct ResNet-18/34 for CIFAR: the pre-activation ResNets LIEC-SGD's authors train.

He, Zhang, Ren, Sun, "Identity Mappings in Deep Residual Networks", ECCV 2016: every residual
unit is "full pre-activation" (the paper's Fig. 4e, Eq. 1-2 with f = identity)

    x_{l+1} = x_l + F(x_l),    F(x) = conv3x3(ReLU(BN(conv3x3(ReLU(BN(x))))))

so the identity path from any unit to any later one carries no activation. Where a unit changes
the width or (stride 2) the side, its shortcut is a 1x1 convolution (stride 2) without batch norm,
applied to the unit's pre-activated input ReLU(BN(x_l)) (the projection shortcut of the paper's
Sec. 4.1 and its CIFAR code).

The CIFAR variant is the one the LIEC-SGD code builds (``chengyif/LIEC-SGD``, ``models/resnet.py``:
the widely used kuangliu/pytorch-cifar PreActResNet, SPECS.md section b): a 3x3 stride-1 stem
convolution to 64 channels without bias or pooling, four stages of basic pre-activation units of
64, 128, 256, 512 channels (the first unit of stages 2-4 with stride 2), [2, 2, 2, 2] units for
ResNet-18 and [3, 4, 6, 3] for ResNet-34, global average pooling and one Linear. Like the authors'
code it has no batch norm + ReLU after the last unit (He et al.'s networks end with one), so the
counts are the authors': 11,171,146 parameters for ResNet-18 and 21,279,306 for ResNet-34 at 10
classes (their file's header). Initialization is PyTorch's default, as in the authors' code.
The stem keeps its stride 1 at any input side (the pooling is adaptive; 32x32 reaches 4x4).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .common import image_shape

STEM_CHANNELS = 64
WIDTHS = (64, 128, 256, 512)


class PreActBlock(nn.Module):
    """One full pre-activation basic unit: x + conv(ReLU(BN(conv(ReLU(BN(x)))))), He et al. 2016
    Fig. 4(e); a 1x1 projection of ReLU(BN(x)) as shortcut where the shape changes."""

    def __init__(self, in_channels: int, channels: int, stride: int) -> None:
        super().__init__()
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = nn.Conv2d(in_channels, channels, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, 1, 1, bias=False)
        self.shortcut = (nn.Conv2d(in_channels, channels, 1, stride, bias=False)
                         if stride != 1 or in_channels != channels else None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = F.relu(self.bn1(x))
        identity = x if self.shortcut is None else self.shortcut(pre)
        return self.conv2(F.relu(self.bn2(self.conv1(pre)))) + identity


def _preact_resnet(name: str, units: tuple[int, ...], input_shape: tuple[int, ...],
                   num_classes: int) -> nn.Module:
    channels, _, _ = image_shape(name, input_shape)
    layers: list[nn.Module] = [nn.Conv2d(channels, STEM_CHANNELS, 3, 1, 1, bias=False)]
    width = STEM_CHANNELS
    for stage, (out, n) in enumerate(zip(WIDTHS, units)):
        for unit in range(n):
            layers.append(PreActBlock(width, out, 2 if stage > 0 and unit == 0 else 1))
            width = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes)]
    return nn.Sequential(*layers)


def preact_resnet18(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """PreAct ResNet-18 for CIFAR (LIEC-SGD's CIFAR-10 model), [2, 2, 2, 2] units."""
    return _preact_resnet("preact_resnet18", (2, 2, 2, 2), input_shape, num_classes)


def preact_resnet34(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """PreAct ResNet-34 for CIFAR (LIEC-SGD's CIFAR-100 model), [3, 4, 6, 3] units."""
    return _preact_resnet("preact_resnet34", (3, 4, 6, 3), input_shape, num_classes)

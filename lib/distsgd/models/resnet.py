"""ResNets: torchvision's ResNet-18/34/50/101 and ResNeXt-50 (32x4d) / ResNeXt-101 (32x8d) (never
pretrained), with the CIFAR stem for small inputs, and the CIFAR ResNet-20 of He et al.

ResNet-101 and the ResNeXts are the models of PyTorch's DDP benchmark and Horovod's first benchmark
(`timeline.public_tables`); ResNeXt is Xie et al., "Aggregated Residual Transformations for Deep Neural
Networks", CVPR 2017 (32 groups of width 4 or 8 in the bottlenecks).

ResNet-18/34/50/101, ResNeXt: for inputs of at most `SMALL_INPUT_SIDE` pixels a side the stem is the standard
CIFAR adaptation (He et al. 2016, Sec. 4.2; kuangliu/pytorch-cifar): conv1 becomes a 3x3, stride 1,
padding 1 convolution without bias and the max-pool is removed, so a 32x32 image reaches the
last stage at 4x4 instead of 1x1. For larger inputs the ImageNet stem is kept. Either way conv1
takes `input_shape[0]` channels; a replaced conv1 gets torchvision's initialization. ResNet-34
(LIEC-SGD's CIFAR-100 model) has 21,282,122 parameters with this stem and 10 classes.

ResNet-20 (``resnet20``, SSD-SGD's CIFAR-10 model): He et al., "Deep Residual Learning for Image
Recognition", CVPR 2016, Sec. 4.2: a 3x3 convolution with 16 filters, then 3 stages of n = 3
basic blocks (two 3x3 convolutions with batch norm) of 16, 32, 64 filters, the first block of
stages 2 and 3 with stride 2, global average pooling and one Linear; 6n + 2 = 20 weighted layers.
Shortcuts are the paper's option A for CIFAR: identity, and where the shape changes the input
subsampled by 2 and zero-padded in channels (no parameters), so 269,722 parameters for 10
classes (the paper's 0.27 M). Convolutions get He (fan-out) initialization. Reconstructed:
SSD-SGD's MXNet fork builds MXNet's example `symbols/resnet.py`, the pre-activation variant with
1x1 projection shortcuts (He et al., ECCV 2016); this is the original post-activation network the
name refers to. Any input side works (the last stage sees side / 4).
"""
from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn
from torchvision import models
from torchvision.models.resnet import BasicBlock

from .common import SMALL_INPUT_SIDE, image_shape, kaiming_conv

STEM_CHANNELS = 64
CIFAR_WIDTHS = (16, 32, 64)     # resnet20's three stages
CIFAR_BLOCKS = 3                # basic blocks per stage: n = 3, 6n + 2 = 20 layers


def resnet18(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-18, CIFAR stem for small inputs."""
    return _resnet("resnet18", models.resnet18, input_shape, num_classes)


def resnet34(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-34, CIFAR stem for small inputs."""
    return _resnet("resnet34", models.resnet34, input_shape, num_classes)


def resnet50(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-50, CIFAR stem for small inputs."""
    return _resnet("resnet50", models.resnet50, input_shape, num_classes)


def resnet101(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-101, CIFAR stem for small inputs."""
    return _resnet("resnet101", models.resnet101, input_shape, num_classes)


def resnext50_32x4d(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNeXt-50 (32x4d), CIFAR stem for small inputs."""
    return _resnet("resnext50_32x4d", models.resnext50_32x4d, input_shape, num_classes)


def resnext101_32x8d(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNeXt-101 (32x8d), CIFAR stem for small inputs."""
    return _resnet("resnext101_32x8d", models.resnext101_32x8d, input_shape, num_classes)


def _resnet(name: str, build: Callable[..., models.ResNet], input_shape: tuple[int, ...],
            num_classes: int) -> models.ResNet:
    channels, height, width = image_shape(name, input_shape)
    net = build(weights=None, num_classes=num_classes)
    if max(height, width) <= SMALL_INPUT_SIDE:
        net.conv1 = kaiming_conv(nn.Conv2d(channels, STEM_CHANNELS, 3, 1, 1, bias=False))
        net.maxpool = nn.Identity()
    elif channels != net.conv1.in_channels:
        net.conv1 = kaiming_conv(nn.Conv2d(channels, STEM_CHANNELS, 7, 2, 3, bias=False))
    return net


class ShortcutA(nn.Module):
    """Option A: the input subsampled by 2 and zero-padded to `out_channels` (no parameters)."""

    def __init__(self, out_channels: int) -> None:
        super().__init__()
        self.out_channels = out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, :, ::2, ::2]
        extra = self.out_channels - x.shape[1]
        return F.pad(x, (0, 0, 0, 0, extra // 2, extra - extra // 2))


def resnet20(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-20 for CIFAR (He et al. 2016, Sec. 4.2), option-A shortcuts."""
    channels, _, _ = image_shape("resnet20", input_shape)
    layers: list[nn.Module] = [nn.Conv2d(channels, CIFAR_WIDTHS[0], 3, 1, 1, bias=False),
                               nn.BatchNorm2d(CIFAR_WIDTHS[0]), nn.ReLU(inplace=True)]
    width = CIFAR_WIDTHS[0]
    for stage, out in enumerate(CIFAR_WIDTHS):
        for block in range(CIFAR_BLOCKS):
            stride = 2 if stage > 0 and block == 0 else 1
            shortcut = ShortcutA(out) if stride != 1 or width != out else None
            layers.append(BasicBlock(width, out, stride, downsample=shortcut))
            width = out
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, num_classes)]
    net = nn.Sequential(*layers)
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            kaiming_conv(m)
    return net

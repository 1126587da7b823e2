"""torchvision's ResNet-18/50 (never pretrained), with the CIFAR variant for small inputs.

For inputs of at most `SMALL_INPUT_SIDE` pixels a side the stem is the standard CIFAR
adaptation (He et al. 2016, Sec. 4.2; kuangliu/pytorch-cifar): conv1 becomes a 3x3, stride 1,
padding 1 convolution without bias and the max-pool is removed, so a 32x32 image reaches the
last stage at 4x4 instead of 1x1. For larger inputs the ImageNet stem is kept. Either way conv1
takes `input_shape[0]` channels; a replaced conv1 gets torchvision's initialization.
"""
from __future__ import annotations

from typing import Callable

from torch import nn
from torchvision import models

from .common import SMALL_INPUT_SIDE, image_shape, kaiming_conv

STEM_CHANNELS = 64


def resnet18(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-18, CIFAR stem for small inputs."""
    return _resnet("resnet18", models.resnet18, input_shape, num_classes)


def resnet50(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """ResNet-50, CIFAR stem for small inputs."""
    return _resnet("resnet50", models.resnet50, input_shape, num_classes)


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

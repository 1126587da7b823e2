"""A small CNN for 8x8 (digits) up to 32x32 (CIFAR) images.

Two blocks of 3x3 convolution (padding 1) + ReLU, each followed by a 2x2 max-pool while the
feature map is at least 4 pixels on a side; then adaptive average pooling to 2x2 and one Linear.
For digits: 8x8 -> 4x4 -> 2x2, about 21 k parameters.
"""
from __future__ import annotations

from torch import nn

from .common import image_shape

POOLED_SIDE = 2


def cnn(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """The small CNN for inputs of shape `input_shape` = (C, H, W)."""
    channels, height, width = image_shape("cnn", input_shape)
    side = min(height, width)
    layers: list[nn.Module] = []
    for out_channels in (32, 64):
        layers += [nn.Conv2d(channels, out_channels, 3, padding=1), nn.ReLU()]
        if side >= 2 * POOLED_SIDE:
            layers.append(nn.MaxPool2d(2))
            side //= 2
        channels = out_channels
    layers += [nn.AdaptiveAvgPool2d(POOLED_SIDE), nn.Flatten(),
               nn.Linear(channels * POOLED_SIDE**2, num_classes)]
    return nn.Sequential(*layers)

"""torchvision's VGG-16 with batch norm (never pretrained), with a CIFAR variant.

For inputs of at most `SMALL_INPUT_SIDE` pixels a side the convolutional features are kept and
the head is the usual CIFAR one: global average pooling and a single Linear(512, num_classes)
(instead of 7x7 pooling and three fully connected layers of 4096). The five 2x2 max-pools need
inputs of at least 32x32, so 8x8 digits are rejected. The first convolution takes
`input_shape[0]` channels; replaced layers get torchvision's VGG initialization.
"""
from __future__ import annotations

from torch import nn
from torchvision import models

from ..errors import ConfigError
from .common import SMALL_INPUT_SIDE, image_shape, kaiming_conv

MIN_SIDE = 2**5  # five 2x2 max-pools
FEATURES = 512


def vgg16(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """VGG-16-BN; CIFAR head for small inputs."""
    channels, height, width = image_shape("vgg16", input_shape)
    if min(height, width) < MIN_SIDE:
        raise ConfigError("model", "vgg16", hint=f"needs inputs of at least {MIN_SIDE}x{MIN_SIDE}"
                          f" pixels, got {height}x{width}; use cnn or resnet18")
    net = models.vgg16_bn(weights=None, num_classes=num_classes)
    first = net.features[0]
    if channels != first.in_channels:
        net.features[0] = kaiming_conv(nn.Conv2d(channels, first.out_channels, 3, padding=1))
    if max(height, width) <= SMALL_INPUT_SIDE:
        net.avgpool = nn.AdaptiveAvgPool2d(1)
        net.classifier = nn.Linear(FEATURES, num_classes)
        nn.init.normal_(net.classifier.weight, 0, 0.01)
        nn.init.zeros_(net.classifier.bias)
    return net

"""Helpers shared by the model builders: reading an image input shape, weight initialization."""
from __future__ import annotations

from torch import nn

from ..errors import ConfigError

# Inputs at most this many pixels on a side get the CIFAR variant of ResNet and VGG.
SMALL_INPUT_SIDE = 64


def image_shape(model: str, input_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """`input_shape` as (channels, height, width); ConfigError for non-image inputs."""
    if len(input_shape) != 3:
        raise ConfigError("model", model, hint=f"needs image inputs (C, H, W), got shape "
                          f"{tuple(input_shape)}; use logistic or mlp")
    c, h, w = input_shape
    return c, h, w


def kaiming_conv(conv: nn.Conv2d) -> nn.Conv2d:
    """torchvision's ResNet/VGG convolution init (He normal, fan-out), for replaced layers."""
    nn.init.kaiming_normal_(conv.weight, mode="fan_out", nonlinearity="relu")
    if conv.bias is not None:
        nn.init.zeros_(conv.bias)
    return conv

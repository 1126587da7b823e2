"""torchvision's Inception v3 (never pretrained), without the auxiliary classifier.

Inception v3 (Szegedy et al., "Rethinking the Inception Architecture for Computer Vision", CVPR 2016)
is one of the three models of Horovod's first benchmark (tf_cnn_benchmarks' `inception3`, 299x299
inputs); the simulator reads its layer profile (`timeline.public_tables`). The auxiliary classifier,
a training-time head on an intermediate layer, is left out (`aux_logits=False`): the model returns
one logits tensor like every other model here. torchvision's network needs inputs of at least
`MIN_SIDE` pixels a side (its stride-2 stem and reductions leave a 1x1 map at 75); 21,806,058
parameters for 10 classes.
"""
from __future__ import annotations

from torch import nn
from torchvision import models

from ..errors import ConfigError
from .common import image_shape

MIN_SIDE = 75


def inception_v3(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Inception v3 without the auxiliary head, for inputs of at least `MIN_SIDE` pixels a side."""
    channels, height, width = image_shape("inception_v3", input_shape)
    if min(height, width) < MIN_SIDE:
        raise ConfigError("input_shape", tuple(input_shape), f"at least {MIN_SIDE} pixels a side (299x299 as published)",
                          "Inception v3's stem and reductions need it")
    net = models.inception_v3(weights=None, num_classes=num_classes, aux_logits=False, init_weights=True)
    if channels != 3:
        net.Conv2d_1a_3x3.conv = nn.Conv2d(channels, 32, 3, 2, bias=False)
    return net

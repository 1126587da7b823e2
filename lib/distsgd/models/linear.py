"""Models on flattened inputs: logistic (multinomial) regression and a ReLU MLP.

With ``num_classes=1`` (regression) the output is ``[B, 1]``; which loss applies (cross entropy,
or squared error for regression) is the trainer's choice, not the model's.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from ..errors import ConfigError


def logistic(input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    """Flatten + Linear(prod(input_shape), num_classes)."""
    return nn.Sequential(nn.Flatten(), nn.Linear(math.prod(input_shape), num_classes))


def mlp(input_shape: tuple[int, ...], num_classes: int,
        hidden: Sequence[int] = (256, 256)) -> nn.Module:
    """Flatten, then Linear+ReLU for every width in `hidden`, then Linear to the classes."""
    if isinstance(hidden, (str, bytes)) or not all(
            isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hidden):
        raise ConfigError("model_options.hidden", hidden, "a list of positive integers")
    widths = [math.prod(input_shape), *hidden]
    layers: list[nn.Module] = [nn.Flatten()]
    for fan_in, fan_out in zip(widths, widths[1:]):
        layers += [nn.Linear(fan_in, fan_out), nn.ReLU()]
    layers.append(nn.Linear(widths[-1], num_classes))
    return nn.Sequential(*layers)

"""Models by name: `build_model(name, input_shape, num_classes, **options)`.

- ``logistic``: Flatten + Linear (multinomial logistic regression; linear regression for
  ``num_classes=1``).
- ``mlp``: Flatten + Linear/ReLU layers; option ``hidden`` (default ``(256, 256)``).
- ``cnn``: two 3x3 conv blocks (32, 64 channels) for 8x8 to 32x32 images.
- ``resnet18``, ``resnet50``: torchvision's, CIFAR stem for inputs up to 64 pixels a side.
- ``vgg16``: torchvision's VGG-16-BN, CIFAR head for inputs up to 64 pixels a side.
- ``transformer``: a stack of pre-norm transformer blocks over tokens cut from the flat input;
  options ``dim``, ``depth``, ``heads``, ``tokens``.

No weights are ever downloaded. Initialization draws from torch's global generator: the caller
seeds it (the same seed on every rank gives identical models); builders never reseed.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable

from torch import nn

from ..errors import ConfigError

__all__ = ["MODELS", "build_model", "builder_module"]

# name -> module holding the builder of that name; imported on use, because torchvision
# takes seconds to import and every worker process pays for what it imports.
_BUILDERS: dict[str, str] = {
    "logistic": "linear",
    "mlp": "linear",
    "cnn": "cnn",
    "resnet18": "resnet",
    "resnet50": "resnet",
    "vgg16": "vgg",
    "transformer": "transformer",
}
MODELS: tuple[str, ...] = tuple(_BUILDERS)


def builder_module(name: str) -> str:
    """The module that builds model `name` (a known name)."""
    return f"{__name__}.{_BUILDERS[name]}"


def _builder(name: str) -> Callable[..., nn.Module]:
    return getattr(importlib.import_module(builder_module(name)), name)

# Parameters every builder takes positionally; the rest of a builder's parameters are options.
_SHAPE_ARGS = ("input_shape", "num_classes")


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int,
                **options: Any) -> nn.Module:
    """Build model `name` for inputs of shape `input_shape` (one sample) and `num_classes`
    outputs. Unknown names and options raise ConfigError."""
    if name not in _BUILDERS:
        raise ConfigError("model", name, MODELS)
    builder = _builder(name)
    allowed = [p for p in inspect.signature(builder).parameters if p not in _SHAPE_ARGS]
    for key in options:
        if key not in allowed:
            raise ConfigError("model_options", key, allowed or "no options",
                              f"not an option of model {name}")
    return builder(tuple(input_shape), num_classes, **options)

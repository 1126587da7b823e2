"""Models by name: `build_model(name, input_shape, num_classes, **options)`.

- ``logistic``: Flatten + Linear (multinomial logistic regression; linear regression for
  ``num_classes=1``).
- ``mlp``: Flatten + Linear/ReLU layers; option ``hidden`` (default ``(256, 256)``).
- ``cnn``: two 3x3 conv blocks (32, 64 channels) for 8x8 to 32x32 images.
- ``lenet5``: LeNet-5 (LeCun et al. 1998; ReLU, max-pool), 61,706 parameters for MNIST (VRL-SGD).
- ``resnet20``: the CIFAR ResNet-20 of He et al. 2016, Sec. 4.2, option-A shortcuts, 0.27 M
  parameters (SSD-SGD).
- ``resnet18``, ``resnet34``, ``resnet50``: torchvision's, CIFAR stem for inputs up to 64 pixels a
  side (ResNet-18: CoCoD-SGD, LIEC-SGD; ResNet-34: LIEC-SGD on CIFAR-100).
- ``resnet101``, ``resnext50_32x4d``, ``resnext101_32x8d``: torchvision's, the same stems (PyTorch's
  DDP benchmark, Horovod's first benchmark).
- ``inception_v3``: torchvision's Inception v3 without the auxiliary head, for inputs of at least
  75 pixels a side (299x299 as published; Horovod's first benchmark).
- ``preact_resnet18``, ``preact_resnet34``: the pre-activation ResNets of He et al. 2016 (identity
  mappings) in the CIFAR variant LIEC-SGD's authors train (their ResNet-18 on CIFAR-10, ResNet-34
  on CIFAR-100), 11,171,146 / 21,279,306 parameters for 10 classes.
- ``vgg16``: torchvision's VGG-16-BN, CIFAR head for inputs up to 64 pixels a side (CoCoD-SGD).
- ``densenet201``: torchvision's DenseNet-201, CIFAR stem for inputs up to 64 pixels a side
  (DeAR, the survey: 224x224).
- ``transformer``: a stack of pre-norm transformer blocks over tokens cut from the flat input;
  options ``dim``, ``depth``, ``heads``, ``tokens``.
- ``vit_tiny``: DeiT-Tiny (Touvron et al. 2021; DropIT), patch 4 for inputs up to 64 pixels a
  side, else 16; options ``patch``, ``dim``, ``depth``, ``heads``.
- ``bert_base``, ``bert_large``: BERT-Base/Large-like encoders (Devlin et al. 2019; DeAR, the
  survey) over token ids, input shape ``(seq_len,)``; option ``vocab`` (default 30522).

Every model also takes the option ``dropit``: ``{"gamma": γ, "strategy": "mink" | "random",
"all_layers": false | true}`` (strategy default ``mink``, all_layers default false) trains its
Linear and Conv2d layers with DropIT (`distsgd.dropit.dropit`, Chen et al., ICLR 2023) at drop
ratio 0 <= γ < 1; γ = 0 leaves the model unchanged. As the authors train (their DeiT marks the
patch embedding and the head ``no_dropit``), the model's stem and classifier head stay exact
(`distsgd.dropit.stem_and_head`: e.g. resnet18's ``conv1`` and ``fc``, vit_tiny's ``embed.conv``
and ``head``; the single layer of ``logistic``, so DropIT leaves it unchanged); ``all_layers:
true`` wraps them too (the kit's behaviour before it followed the authors).

No weights are ever downloaded. Initialization draws from torch's global generator: the caller
seeds it (the same seed on every rank gives identical models); builders never reseed.
"""
from __future__ import annotations

import importlib
import inspect
from typing import Any, Callable, Mapping

from torch import nn

from ..errors import ConfigError

__all__ = ["DROPIT", "MODELS", "build_model", "builder_module", "check_options", "dropit_setting"]

# name -> module holding the builder of that name; imported on use, because torchvision
# takes seconds to import and every worker process pays for what it imports.
_BUILDERS: dict[str, str] = {
    "logistic": "linear",
    "mlp": "linear",
    "cnn": "cnn",
    "lenet5": "cnn",
    "resnet20": "resnet",
    "resnet18": "resnet",
    "resnet34": "resnet",
    "resnet50": "resnet",
    "resnet101": "resnet",
    "resnext50_32x4d": "resnet",
    "resnext101_32x8d": "resnet",
    "inception_v3": "inception",
    "preact_resnet18": "preact_resnet",
    "preact_resnet34": "preact_resnet",
    "vgg16": "vgg",
    "densenet201": "densenet",
    "transformer": "transformer",
    "vit_tiny": "transformer",
    "bert_base": "transformer",
    "bert_large": "transformer",
}
MODELS: tuple[str, ...] = tuple(_BUILDERS)
DROPIT = "dropit"                   # the option every model takes: train it with DropIT


def builder_module(name: str) -> str:
    """The module that builds model `name` (a known name)."""
    return f"{__name__}.{_BUILDERS[name]}"


def _builder(name: str) -> Callable[..., nn.Module]:
    return getattr(importlib.import_module(builder_module(name)), name)

# Parameters every builder takes positionally; the rest of a builder's parameters are options.
_SHAPE_ARGS = ("input_shape", "num_classes")


def check_options(name: str, options: Mapping[str, Any]) -> None:
    """Raise ConfigError unless `name` is a model and each of `options` is an option of its
    builder or a valid `DROPIT` option."""
    if name not in _BUILDERS:
        raise ConfigError("model", name, MODELS)
    allowed = [p for p in inspect.signature(_builder(name)).parameters if p not in _SHAPE_ARGS]
    allowed.append(DROPIT)
    for key in options:
        if key not in allowed:
            raise ConfigError("model_options", key, allowed, f"not an option of model {name}")
    if DROPIT in options:
        dropit_setting(options[DROPIT])


def dropit_setting(option: Any) -> tuple[float, str, bool]:
    """(gamma, strategy, all_layers) of a `DROPIT` option ``{"gamma": γ, "strategy": s,
    "all_layers": a}`` (s and a optional: ``"mink"``, false); ConfigError if it is not such a
    dict, γ is not in [0, 1), s is not a DropIT strategy or a is not a bool."""
    from ..dropit.selection import STRATEGIES, check_gamma

    if not (isinstance(option, dict) and "gamma" in option
            and set(option) <= {"gamma", "strategy", "all_layers"}):
        raise ConfigError(f"model_options.{DROPIT}", option,
                          '{"gamma": G}, optionally with "strategy": S and "all_layers": A (0 <= G < 1, S: '
                          + " or ".join(STRATEGIES) + ", A: true or false)")
    gamma, strategy = option["gamma"], option.get("strategy", "mink")
    all_layers = option.get("all_layers", False)
    try:
        check_gamma(gamma)
    except ValueError:
        raise ConfigError(f"model_options.{DROPIT}.gamma", gamma, "0 <= gamma < 1 (0: DropIT off)") from None
    if strategy not in STRATEGIES:
        raise ConfigError(f"model_options.{DROPIT}.strategy", strategy, STRATEGIES)
    if not isinstance(all_layers, bool):
        raise ConfigError(f"model_options.{DROPIT}.all_layers", all_layers, "true or false",
                          "false: the stem and the head stay exact, as the authors train; "
                          "true: every Linear/Conv2d layer")
    return float(gamma), strategy, all_layers


def build_model(name: str, input_shape: tuple[int, ...], num_classes: int,
                **options: Any) -> nn.Module:
    """Build model `name` for inputs of shape `input_shape` (one sample) and `num_classes`
    outputs, with DropIT if `options` hold a `DROPIT` option with γ > 0 (stem and head exempt
    unless its ``all_layers``). Unknown names and bad options raise ConfigError."""
    check_options(name, options)
    setting = options.pop(DROPIT, None)
    model = _builder(name)(tuple(input_shape), num_classes, **options)
    if setting is not None:
        gamma, strategy, all_layers = dropit_setting(setting)
        if gamma > 0:
            from ..dropit import dropit, stem_and_head
            dropit(model, gamma, strategy, skip=() if all_layers else stem_and_head(model))
    return model

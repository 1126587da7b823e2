"""Tests of distsgd.models: every model builds and runs, seeding, CIFAR variants, errors."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from distsgd.errors import ConfigError
from distsgd.models import MODELS, build_model

DIGITS = (1, 8, 8)
CIFAR = (3, 32, 32)
# VGG-16's five max-pools need 32x32 inputs; it rejects 8x8 digits (tested below).
CASES = [(m, DIGITS) for m in MODELS if m != "vgg16"] + [(m, CIFAR) for m in MODELS]


@pytest.mark.parametrize("name,shape", CASES)
def test_forward_gives_one_output_per_class(name, shape):
    torch.manual_seed(0)
    model = build_model(name, shape, 10)
    out = model(torch.randn(2, *shape))
    assert out.shape == (2, 10)
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("name", ["logistic", "mlp"])
def test_vector_inputs_and_regression_output(name):
    model = build_model(name, (32,), 1)
    assert model(torch.randn(5, 32)).shape == (5, 1)


@pytest.mark.parametrize("name", ["logistic", "mlp", "cnn", "resnet18"])
def test_same_seed_same_parameters(name):
    def build(seed):
        torch.manual_seed(seed)
        return list(build_model(name, DIGITS, 10).state_dict().values())

    first, again, other = build(1), build(1), build(2)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    assert not all(torch.equal(a, b) for a, b in zip(first, other))


def test_mlp_layers_and_hidden_option():
    linears = [m for m in build_model("mlp", DIGITS, 10) if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 256), (256, 256), (256, 10)]
    linears = [m for m in build_model("mlp", DIGITS, 10, hidden=[32]) if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(64, 32), (32, 10)]
    with pytest.raises(ConfigError):
        build_model("mlp", DIGITS, 10, hidden=[0])


def test_logistic_is_one_linear_layer():
    params = dict(build_model("logistic", DIGITS, 10).named_parameters())
    assert {k: tuple(v.shape) for k, v in params.items()} == {"1.weight": (10, 64),
                                                               "1.bias": (10,)}


@pytest.mark.parametrize("name", ["resnet18", "resnet50"])
def test_resnet_cifar_stem(name):
    small = build_model(name, CIFAR, 10)
    assert small.conv1.kernel_size == (3, 3) and small.conv1.stride == (1, 1)
    assert small.conv1.bias is None and isinstance(small.maxpool, nn.Identity)
    grey = build_model(name, DIGITS, 10)
    assert grey.conv1.in_channels == 1


def test_resnet_keeps_the_imagenet_stem_for_large_inputs():
    model = build_model("resnet18", (3, 224, 224), 10)
    assert model.conv1.kernel_size == (7, 7) and isinstance(model.maxpool, nn.MaxPool2d)
    assert build_model("resnet18", (1, 96, 96), 10).conv1.in_channels == 1


def test_vgg16_cifar_head():
    model = build_model("vgg16", CIFAR, 100)
    assert isinstance(model.classifier, nn.Linear)
    assert (model.classifier.in_features, model.classifier.out_features) == (512, 100)
    grey = build_model("vgg16", (1, 32, 32), 10)
    assert grey.features[0].in_channels == 1
    assert grey(torch.randn(2, 1, 32, 32)).shape == (2, 10)


def test_image_models_reject_unusable_shapes():
    with pytest.raises(ConfigError) as err:
        build_model("vgg16", DIGITS, 10)
    assert err.value.field == "model"
    with pytest.raises(ConfigError):
        build_model("cnn", (32,), 2)


def test_unknown_model_names_the_model_field():
    with pytest.raises(ConfigError) as err:
        build_model("gpt", DIGITS, 10)
    assert err.value.field == "model" and "resnet18" in str(err.value)


def test_unknown_model_option_is_rejected():
    with pytest.raises(ConfigError) as err:
        build_model("cnn", DIGITS, 10, width=3)
    assert err.value.field == "model_options"


def test_all_models_are_listed():
    assert MODELS == ("logistic", "mlp", "cnn", "resnet18", "resnet50", "vgg16", "transformer")

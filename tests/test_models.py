"""Tests of distsgd.models: every model builds and runs, seeding, CIFAR variants, errors."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from distsgd.errors import ConfigError
from distsgd.models import MODELS, build_model

DIGITS = (1, 8, 8)
CIFAR = (3, 32, 32)
TEXT = ("bert_base", "bert_large")           # token-id inputs (seq_len,), not images
# the public tables' models (ImageNet-size profiles only): built on the meta device below, not run here
PROFILED = ("resnet101", "resnext50_32x4d", "resnext101_32x8d", "inception_v3")
IMAGE_MODELS = [m for m in MODELS if m not in TEXT + PROFILED]
# VGG-16's five max-pools need 32x32 inputs; it rejects 8x8 digits (tested below).
CASES = [(m, DIGITS) for m in IMAGE_MODELS if m != "vgg16"] + [(m, CIFAR) for m in IMAGE_MODELS]


def count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


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


def test_densenet201_cifar_stem_and_imagenet_stem():
    with torch.device("meta"):
        small, large = build_model("densenet201", CIFAR, 10), build_model("densenet201", (1, 224, 224), 10)
    assert small.features.conv0.kernel_size == (3, 3) and small.features.conv0.stride == (1, 1)
    assert isinstance(small.features.pool0, nn.Identity)
    assert large.features.conv0.kernel_size == (7, 7) and large.features.conv0.in_channels == 1
    assert isinstance(large.features.pool0, nn.MaxPool2d)


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


def test_the_public_tables_models_at_imagenet_size():
    with torch.device("meta"):
        counts = {name: sum(p.numel() for p in build_model(name, shape, 10).parameters())
                  for name, shape in [("resnet101", (3, 224, 224)), ("resnext50_32x4d", (3, 224, 224)),
                                      ("resnext101_32x8d", (3, 224, 224)), ("inception_v3", (3, 299, 299))]}
    assert counts == {"resnet101": 42_520_650, "resnext50_32x4d": 23_000_394, "resnext101_32x8d": 86_762_826,
                      "inception_v3": 21_806_058}
    with pytest.raises(ConfigError) as err:
        build_model("inception_v3", CIFAR, 10)
    assert err.value.field == "input_shape"


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
    assert MODELS == ("logistic", "mlp", "cnn", "lenet5", "resnet20", "resnet18", "resnet34", "resnet50",
                      "resnet101", "resnext50_32x4d", "resnext101_32x8d", "inception_v3", "preact_resnet18", "preact_resnet34", "vgg16", "densenet201", "transformer", "vit_tiny",
                      "bert_base", "bert_large")


# ---------------------------------------------------------------- the papers' models
# Parameter counts: the published figures (LeNet-5 61.7 k at 32x32; ResNet-20 0.27 M; DeiT-Ti 5.7 M;
# BERT-Base 110 M, BERT-Large 340 M) pinned to the exact totals of these architectures, computed by
# hand in the builders' docstrings. Big models are built on the meta device (no memory, no init).
PAPER_COUNTS = [
    ("lenet5", (1, 32, 32), 10, 61_706),
    ("lenet5", (1, 28, 28), 10, 61_706),       # MNIST: C1 pads 28x28 to LeNet's 32x32 field
    ("resnet20", CIFAR, 10, 269_722),
    ("vgg16", CIFAR, 10, 14_728_266),          # VGG-16-BN, Linear(512, 10) head
    ("vit_tiny", CIFAR, 10, 5_362_762),        # patch 4: 64 patches + class token
    ("vit_tiny", (3, 224, 224), 1000, 5_717_416),  # DeiT-Ti at ImageNet size, patch 16
    ("resnet34", CIFAR, 10, 21_282_122),
    ("resnet34", CIFAR, 100, 21_328_292),
    ("preact_resnet18", CIFAR, 10, 11_171_146),   # LIEC-SGD's models/resnet.py header
    ("preact_resnet34", CIFAR, 10, 21_279_306),
    ("preact_resnet34", CIFAR, 100, 21_279_306 + 90 * 513),
    # DenseNet-201: torchvision's 20,013,928 at 1000 classes less 1920 x 990 + 990 of the head
    ("densenet201", (3, 224, 224), 10, 20_013_928 - 1920 * 990 - 990),
    ("densenet201", CIFAR, 10, 18_112_138 - 7 * 7 * 3 * 64 + 3 * 3 * 3 * 64),   # 3x3 CIFAR conv0
    ("bert_base", (128,), 2, 109_480_704 + 768 * 2 + 2),
    ("bert_large", (128,), 2, 335_139_840 + 1024 * 2 + 2),
]


@pytest.mark.parametrize("name,shape,classes,expected", PAPER_COUNTS)
def test_papers_models_have_the_published_parameter_counts(name, shape, classes, expected):
    with torch.device("meta"):
        assert count(build_model(name, shape, classes)) == expected


@pytest.mark.parametrize("name,units", [("preact_resnet18", 8), ("preact_resnet34", 16)])
def test_preact_resnet_units_shortcuts_and_output_shape(name, units):
    from distsgd.models.preact_resnet import PreActBlock

    torch.manual_seed(0)
    model = build_model(name, CIFAR, 10)
    blocks = [m for m in model.modules() if isinstance(m, PreActBlock)]
    assert len(blocks) == units
    projections = [b.shortcut for b in blocks if b.shortcut is not None]
    assert len(projections) == 3 and all(p.kernel_size == (1, 1) and p.stride == (2, 2) for p in projections)
    assert model[0].kernel_size == (3, 3) and model[0].stride == (1, 1)       # CIFAR stem, no pooling
    assert model(torch.randn(2, *CIFAR)).shape == (2, 10)
    assert build_model(name, (1, 8, 8), 100)(torch.randn(3, 1, 8, 8)).shape == (3, 100)


def test_resnet20_is_three_stages_of_three_blocks_with_parameter_free_shortcuts():
    model = build_model("resnet20", CIFAR, 10)
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]
    assert len(convs) == 19 and [c.out_channels for c in convs[::6]] == [16, 16, 32, 64]
    assert [c.stride for c in convs if c.stride != (1, 1)] == [(2, 2), (2, 2)]
    assert model[:-3](torch.randn(2, *CIFAR)).shape == (2, 64, 8, 8)


def test_lenet5_layers():
    model = build_model("lenet5", (1, 28, 28), 10)
    conv1, conv2 = [m for m in model if isinstance(m, nn.Conv2d)]
    assert conv1.padding == (2, 2) and conv2.padding == (0, 0) and conv1.kernel_size == (5, 5)
    assert [(m.in_features, m.out_features) for m in model if isinstance(m, nn.Linear)] == [
        (400, 120), (120, 84), (84, 10)]
    out = model(torch.randn(3, 1, 28, 28))
    out.sum().backward()
    assert out.shape == (3, 10) and all(p.grad is not None for p in model.parameters())


def test_vit_tiny_is_deit_tiny_with_a_class_token():
    model = build_model("vit_tiny", CIFAR, 10)
    assert len(model.blocks) == 12 and model.blocks[0].heads == 3 and model.norm.normalized_shape == (192,)
    assert model.embed.conv.kernel_size == (4, 4) and model.embed.pos.shape == (1, 65, 192)
    assert model.blocks[0].ff1.out_features == 4 * 192
    assert build_model("vit_tiny", (3, 224, 224), 10).embed.conv.kernel_size == (16, 16)
    small = build_model("vit_tiny", (1, 8, 8), 10, patch=2, dim=24, depth=2, heads=2)
    out = small(torch.randn(2, 1, 8, 8))
    out.sum().backward()
    assert out.shape == (2, 10) and small.embed.cls.grad is not None and small.embed.pos.grad is not None
    with pytest.raises(ConfigError) as err:
        build_model("vit_tiny", CIFAR, 10, patch=5)
    assert err.value.field == "model_options.patch"


@pytest.mark.parametrize("name,dim,depth,heads", [("bert_base", 768, 12, 12), ("bert_large", 1024, 24, 16)])
def test_bert_dimensions_forward_and_backward(name, dim, depth, heads):
    with torch.device("meta"):
        model = build_model(name, (16,), 2)
        assert model.embed.word.weight.shape == (30522, dim) and model.embed.pos.weight.shape == (512, dim)
        assert len(model.blocks) == depth and model.blocks[0].heads == heads
        assert model.blocks[0].ff1.out_features == 4 * dim
        out = model(torch.randint(0, 30522, (2, 16)))
        out.sum().backward()
        assert out.shape == (2, 2) and model.embed.word.weight.grad.shape == (30522, dim)


def test_bert_takes_token_ids_and_rejects_images():
    from distsgd.models.transformer import _bert

    torch.manual_seed(0)
    model = _bert("bert_base", (6,), 3, vocab=50, dim=16, depth=2, heads=2)   # BERT at toy width
    ids = torch.randint(0, 50, (2, 6))
    out = model(ids)
    assert out.shape == (2, 3) and torch.isfinite(out).all()
    ids2 = ids.clone()
    ids2[0, 3] = (ids[0, 3] + 1) % 50                # another token changes that sequence only
    out2 = model(ids2)
    assert not torch.allclose(out[0], out2[0]) and torch.allclose(out[1], out2[1])
    swapped = ids[:, [0, 1, 3, 2, 4, 5]]             # positions matter (attention alone is symmetric)
    assert not torch.allclose(model(swapped), out)
    for shape in (CIFAR, (513,)):
        with pytest.raises(ConfigError) as err:
            build_model("bert_base", shape, 2)
        assert err.value.field == "model" and "seq_len" in str(err.value)


def test_deit_and_bert_initialization_has_std_002():
    torch.manual_seed(0)
    model = build_model("vit_tiny", CIFAR, 10)
    w = model.blocks[0].ff1.weight
    assert abs(w.std().item() - 0.02) < 0.003 and w.abs().max() <= 0.04
    assert model.blocks[0].ff1.bias.abs().max() == 0 and 0 < model.embed.pos.std() < 0.03
    assert torch.equal(model.norm.weight, torch.ones(192)) and model.norm.bias.abs().max() == 0
    assert all(torch.isfinite(p).all() for p in model.parameters())
    # truncated at 2 std: the normal's tails are redrawn, not clipped (no pile-up at the bounds)
    w = build_model("bert_base", (4,), 2, vocab=2000).embed.word.weight
    assert w.abs().max() <= 0.04 and (w.abs() > 0.0399).float().mean() < 1e-3
    assert abs(w.std().item() - 0.02 * 0.8796) < 5e-4      # std of N(0, 1) truncated at +-2


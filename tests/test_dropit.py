"""DropIT (lib/distsgd/dropit): exact forward, exact input gradient, weight gradient from the
zero-filled input, the kept-entry count (the authors' truncation), the stem and head left exact
(as the authors train), activation memory, eval mode, state_dict, and a distributed run with
DropIT on."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import distsgd
from distsgd.dropit import (DropITConv2d, DropITLinear, dropit, dropit_layers, kept_count,
                            measure_activation_memory, stem_and_head)
from distsgd.models import build_model
from distsgd.files import load_tensors

GAMMAS = (0.5, 0.7, 0.9)
STRATEGIES = ("mink", "random")


def _model(name: str) -> nn.Module:
    torch.manual_seed(0)
    return build_model(name, (1, 8, 8), 10)


def _batch(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(n, 1, 8, 8, generator=g), torch.randint(0, 10, (n,), generator=g)


def _grads(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> dict[str, torch.Tensor]:
    """Every parameter gradient, and the input gradient under the key 'input'."""
    model.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    F.cross_entropy(model(x), y).backward()
    return {"input": x.grad, **{n: p.grad for n, p in model.named_parameters()}}


@pytest.mark.parametrize("name", ["mlp", "cnn"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_gamma_zero_gives_bit_identical_gradients(name, strategy):
    base = _model(name)
    wrapped = dropit(copy.deepcopy(base), 0.0, strategy)
    assert len(dropit_layers(wrapped)) == 3
    x, y = _batch()
    exact, ours = _grads(base, x, y), _grads(wrapped, x, y)
    assert exact.keys() == ours.keys()
    for key in exact:
        assert torch.equal(ours[key], exact[key]), key


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_forward_exact_and_input_and_bias_gradients_bit_identical_for_any_gamma(name):
    base = _model(name)
    x, y = _batch()
    exact = _grads(base, x, y)
    for strategy in STRATEGIES:
        for gamma in GAMMAS:
            wrapped = dropit(copy.deepcopy(base), gamma, strategy)
            assert torch.equal(wrapped(x), base(x))
            ours = _grads(wrapped, x, y)
            for key in exact:
                if key == "input" or key.endswith("bias"):
                    assert torch.equal(ours[key], exact[key]), (strategy, gamma, key)
                else:
                    assert not torch.equal(ours[key], exact[key]), (strategy, gamma, key)


def test_kept_count_truncates_as_the_authors():
    # the authors' select_mink: int(numel * (1 - gamma)) in binary floating point
    assert kept_count(1000, 0.9) == 99          # 1 - 0.9 = 0.09999999999999998: 99.99... -> 99
    assert kept_count(100, 0.9) == 9            # the old ceiling kept 10
    assert kept_count(100, 0.7) == 30           # 1 - 0.7 = 0.30000000000000004: 30.000...04 -> 30
    assert kept_count(91, 0.5) == 45           # int(45.5); the old ceiling kept 46
    assert kept_count(91, 0.9) == 9             # int(9.1)
    assert kept_count(5, 0.99) == 0             # under one entry: nothing kept, as the authors
    assert kept_count(91, 0.0) == 91


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("gamma", (0.0, *GAMMAS))
@pytest.mark.parametrize("layer,shape", [
    (lambda: nn.Linear(13, 4), (7, 13)),                   # 91 entries
    (lambda: nn.Linear(10, 4), (10, 10)),                  # 100
    (lambda: nn.Conv2d(3, 2, 3), (2, 3, 5, 5)),            # 150
    (lambda: nn.Conv2d(8, 4, 3, padding=1), (5, 8, 5, 5)),  # 1000
], ids=["linear91", "linear100", "conv150", "conv1000"])
def test_saved_entries_are_the_authors_count_with_int32_positions(strategy, gamma, layer, shape):
    torch.manual_seed(0)
    wrapped, x = dropit(layer(), gamma, strategy), torch.randn(shape)
    values, positions, weight = wrapped(x).grad_fn.saved_tensors
    assert values.numel() == positions.numel() == int(x.numel() * (1 - gamma))
    assert positions.dtype == torch.int32 and values.dtype == x.dtype
    assert weight is wrapped.weight


def test_a_layer_that_keeps_nothing_has_a_zero_weight_gradient():
    layer = dropit(nn.Linear(4, 2), 0.9)                   # 8 entries: int(0.8) = 0 kept
    layer(torch.randn(2, 4)).sum().backward()
    assert torch.equal(layer.weight.grad, torch.zeros(2, 4)) and layer.bias.grad.abs().sum() > 0


def _topk_mask(x: torch.Tensor, k: int) -> torch.Tensor:
    """1 at the k largest |x| over the whole tensor (independent of the library's selection)."""
    mask = torch.zeros(x.numel())
    mask[x.abs().flatten().argsort(descending=True)[:k]] = 1
    return mask.view_as(x)


@pytest.mark.parametrize("gamma", GAMMAS)
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_weight_gradient_is_the_gradient_of_the_zero_filled_input(gamma, strategy):
    torch.manual_seed(0)
    cases = [(nn.Linear(13, 4), torch.randn(7, 13)),
             (nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), torch.randn(2, 4, 9, 9))]
    for layer, x in cases:
        wrapped = dropit(copy.deepcopy(layer), gamma, strategy)
        out = wrapped(x)
        if strategy == "mink":
            x_hat = x * _topk_mask(x, kept_count(x.numel(), gamma))
        else:                                   # random: rebuild from the saved entries
            values, positions, _ = out.grad_fn.saved_tensors
            x_hat = torch.zeros(x.numel())
            x_hat[positions.long()] = values
            x_hat = x_hat.view_as(x)
            assert torch.equal(x_hat[x_hat != 0], x[x_hat != 0])
        grad_y = torch.randn_like(out)
        out.backward(grad_y)
        layer(x_hat).backward(grad_y)
        torch.testing.assert_close(wrapped.weight.grad, layer.weight.grad, rtol=1e-6, atol=1e-6)


def test_memory_measurement_sees_the_reduction():
    base = _model("cnn")
    data, y = _batch(64)
    x = data[:32]                          # a view: counts as its 32 samples, not the 64 behind it
    y = y[:32]
    exact = measure_activation_memory(base, x, y, F.cross_entropy)
    wrapped = dropit(copy.deepcopy(base), 0.9)
    dropped = measure_activation_memory(wrapped, x, y, F.cross_entropy)
    # the inputs of conv 0, conv 3 and linear 8, as float32; DropIT: values and int32 positions
    numels = [32 * 1 * 8 * 8, 32 * 32 * 4 * 4, 32 * 256]
    assert exact.layer_bytes == 4 * sum(numels)
    assert dropped.layer_bytes == 8 * sum(kept_count(n, 0.9) for n in numels)
    assert dropped.layer_bytes <= 0.8 * exact.layer_bytes
    assert dropped.saved_bytes - dropped.layer_bytes == exact.saved_bytes - exact.layer_bytes
    assert exact.by_module["0"] == 4 * numels[0] and dropped.by_module["0"] == 8 * kept_count(numels[0], 0.9)
    assert exact.cuda_peak_bytes is None


def test_no_dropping_in_eval_mode_or_without_grad():
    wrapped = dropit(_model("cnn"), 0.9)
    x, y = _batch()
    training = measure_activation_memory(wrapped, x, y, F.cross_entropy)
    wrapped.eval()
    evaluation = measure_activation_memory(wrapped, x, y, F.cross_entropy)
    exact = measure_activation_memory(_model("cnn").eval(), x, y, F.cross_entropy)
    assert evaluation.saved_bytes == exact.saved_bytes > training.saved_bytes
    assert type(wrapped[0](x).grad_fn).__name__ == "ConvolutionBackward0"
    wrapped.train()
    assert type(wrapped[0](x).grad_fn).__name__ == "DropITConv2dFunctionBackward"
    with torch.no_grad():
        assert torch.equal(wrapped(x), _model("cnn")(x))


def test_model_keeps_its_parameters_state_dict_and_saves_normally(tmp_path):
    base = _model("cnn")
    params = list(base.parameters())
    keys = list(base.state_dict())
    wrapped = dropit(base, 0.9, "random", skip={"8"})
    assert wrapped is base and list(wrapped.parameters()) == params
    assert list(wrapped.state_dict()) == keys
    assert isinstance(wrapped[0], DropITConv2d) and isinstance(wrapped[0], nn.Conv2d)
    assert type(wrapped[8]) is nn.Linear                     # skipped by name
    torch.save(wrapped.state_dict(), tmp_path / "model.pt")
    fresh = _model("cnn")
    fresh.load_state_dict(load_tensors(tmp_path / "model.pt"))
    reloaded = load_tensors(tmp_path / "model.pt")
    assert all(torch.equal(reloaded[k], v) for k, v in wrapped.state_dict().items())
    assert "dropit_gamma=0.9" in repr(wrapped)


def test_opt_out_updates_and_bad_arguments():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    model[1].no_dropit = True
    dropit(model, 0.5)
    assert isinstance(model[0], DropITLinear) and type(model[1]) is nn.Linear
    dropit(model, 0.7, "random")
    assert (model[0].gamma, model[0].strategy) == (0.7, "random")
    same = nn.Conv2d(2, 2, 3, padding="same")
    assert type(dropit(same, 0.5)) is nn.Conv2d              # string padding: left unchanged
    for gamma in (-0.1, 1.0):
        with pytest.raises(ValueError, match="gamma"):
            dropit(nn.Linear(2, 2), gamma)
    with pytest.raises(ValueError, match="strategy"):
        dropit(nn.Linear(2, 2), 0.5, "maxk")


def test_model_option_dropit_wraps_the_built_model():
    wrapped = build_model("cnn", (1, 8, 8), 10, dropit={"gamma": 0.7, "strategy": "random", "all_layers": True})
    layers = dropit_layers(wrapped)
    assert set(layers) == set(dropit_layers(dropit(_model("cnn"), 0.7)))
    assert all((m.gamma, m.strategy) == (0.7, "random") for m in layers.values())
    assert all(m.strategy == "mink" for m in dropit_layers(build_model("mlp", (1, 8, 8), 10,
                                                                       dropit={"gamma": 0.5})).values())
    assert not dropit_layers(build_model("cnn", (1, 8, 8), 10, dropit={"gamma": 0}))   # 0: off


# model, input shape, its stem and head (registration order = forward order), the layers between
ENDS = [
    ("cnn", (1, 8, 8), ("0", "8"), {"3"}),
    ("mlp", (1, 8, 8), ("1", "5"), {"3"}),
    ("resnet18", (3, 32, 32), ("conv1", "fc"), {"layer1.0.conv1", "layer2.0.downsample.0"}),
    ("vit_tiny", (3, 32, 32), ("embed.conv", "head"), {"blocks.0.qkv", "blocks.0.ff2"}),
]


@pytest.mark.parametrize("name,shape,ends,inner", ENDS, ids=[e[0] for e in ENDS])
def test_stem_and_head_are_exempt_by_default_and_wrapped_with_all_layers(name, shape, ends, inner):
    options = {"depth": 1} if name == "vit_tiny" else {}
    torch.manual_seed(0)
    default = build_model(name, shape, 10, dropit={"gamma": 0.9}, **options)
    assert stem_and_head(default) == ends
    wrapped = set(dropit_layers(default))
    assert not wrapped & set(ends) and inner <= wrapped
    every = set(dropit_layers(build_model(name, shape, 10, dropit={"gamma": 0.9, "all_layers": True}, **options)))
    assert every == wrapped | set(ends)
    stem, head = (dict(default.named_modules())[n] for n in ends)
    assert type(stem) in (nn.Conv2d, nn.Linear) and type(head) is nn.Linear


def test_stem_and_head_of_models_with_one_layer_or_a_token_embedding():
    assert stem_and_head(build_model("logistic", (1, 8, 8), 10)) == ("1",)     # one layer: both ends
    assert not dropit_layers(build_model("logistic", (1, 8, 8), 10, dropit={"gamma": 0.9}))
    chunks = build_model("transformer", (1, 8, 8), 10, depth=1)                # a Linear embeds the chunks
    assert stem_and_head(chunks) == ("embed.embed", "head")
    tokens = nn.Sequential(nn.Embedding(50, 8), nn.Linear(8, 8), nn.Linear(8, 2))   # as BERT: no stem
    assert stem_and_head(tokens) == ("2",)


@pytest.mark.parametrize("option,field", [
    ({"gamma": 1.0}, "model_options.dropit.gamma"),
    ({"gamma": -0.1}, "model_options.dropit.gamma"),
    ({"gamma": "0.5"}, "model_options.dropit.gamma"),
    ({"gamma": 0.5, "strategy": "maxk"}, "model_options.dropit.strategy"),
    ({"strategy": "mink"}, "model_options.dropit"),
    ({"gamma": 0.5, "ratio": 0.5}, "model_options.dropit"),
    ({"gamma": 0.5, "all_layers": "yes"}, "model_options.dropit.all_layers"),
    ({"gamma": 0.5, "all_layers": 1}, "model_options.dropit.all_layers"),
    (0.9, "model_options.dropit"),
])
def test_bad_dropit_option_fails_before_any_worker_starts(tmp_path, option, field):
    with pytest.raises(distsgd.ConfigError) as err:
        distsgd.run(algo="ssgd", nproc=2, model="cnn", model_options={"dropit": option}, out=str(tmp_path / "out"))
    assert err.value.field == field
    assert not (tmp_path / "out").exists()                 # failed in validation: no run directory


@pytest.mark.multiproc
def test_distributed_run_with_dropit_finishes():
    r = distsgd.run(algo="ssgd", nproc=2, steps=10, model_options={"dropit": {"gamma": 0.9}}, progress=False,
                    model="cnn", data="digits", batch_size=16, eval_every=10, log_every=5)
    assert r.summary["status"] == "finished"
    assert r.config.model_options == {"dropit": {"gamma": 0.9}}
    assert r.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)
    weights = r.state_dict()
    assert list(weights) == list(_model("cnn").state_dict())

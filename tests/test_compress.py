"""Compressors: round trip, declared wire bytes, contraction, and error-feedback memory."""
from __future__ import annotations

import math

import pytest
import torch

from distsgd.compress import NAMES, ErrorFeedback, QSGD, RandK, TopK, make
from distsgd.compress.base import pack_bits, unpack_bits

D = 1000


def _wire_formula(name: str, d: int) -> int:
    """The wire formats, written out independently of the modules."""
    k = math.ceil(0.1 * d)
    n = math.ceil(math.sqrt(d))
    return {"none": 4 * d, "topk": 4 * k + 4 * k, "randk": 4 * k,
            "qsgd": 4 * math.ceil(d / 512) + math.ceil(d * 4 / 8),      # levels 4 -> 4-bit codes
            "sign": 4 + math.ceil(d / 8),
            "powersgd": 4 * 1 * (n + math.ceil(d / n))}[name]


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("d", [1, 7, D])
def test_round_trip_shape_dtype_and_wire_bytes(name, d):
    c = make(name, ratio=0.1, levels=4, rank=1)
    x = torch.randn(d)
    payload, ctx = c.compress(x, seed=3)
    y = c.decompress(payload, ctx)
    assert y.shape == x.shape and y.dtype == x.dtype
    assert payload.dim() == 1
    assert payload.numel() * payload.element_size() == c.wire_bytes(d) == _wire_formula(name, d)
    if not c.all_reducible:
        assert payload.dtype == torch.uint8


def _vectors() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randn(D, generator=g),
            torch.randn(D, generator=g) ** 3,                      # heavy-tailed
            torch.rand(D, generator=g),                            # all positive
            torch.cat([torch.full((5,), 10.0), torch.randn(D - 5, generator=g) * 0.01])]


@pytest.mark.parametrize("name", NAMES)
def test_contraction_bound(name):
    """E||C(x) - x||^2 <= (1 - delta) ||x||^2, the expectation over 50 seeds."""
    c = make(name, ratio=0.1, levels=4, rank=1)
    for x in _vectors():
        err = torch.stack([(c(x, seed) - x).pow(2).sum() for seed in range(50)]).mean()
        bound = (1 - c.delta(D)) * x.pow(2).sum()
        assert err <= bound * 1.02 + 1e-6, (name, err.item(), bound.item())


def test_topk_keeps_largest_and_ratio_one_is_identity():
    x = torch.tensor([0.1, -5.0, 0.2, 3.0, -0.3])
    assert torch.equal(TopK(0.4)(x), torch.tensor([0.0, -5.0, 0.0, 3.0, 0.0]))
    y = torch.randn(D)
    assert torch.equal(TopK(1.0)(y), y)


def test_randk_shared_seed_gives_same_indices():
    x, z = torch.randn(D), torch.randn(D)
    assert torch.equal(RandK(0.1)(x, 5) != 0, RandK(0.1)(z, 5) != 0)
    assert not torch.equal(RandK(0.1)(x, 5) != 0, RandK(0.1)(x, 6) != 0)


def test_qsgd_is_unbiased_up_to_its_scale():
    q = QSGD(levels=4)
    x = torch.randn(D)
    mean = torch.stack([q(x, s) for s in range(400)]).mean(0) * (1 + q._omega(D))
    assert (mean - x).norm() < 0.1 * x.norm()


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_pack_bits_round_trip(bits):
    codes = torch.randint(0, 2**bits, (37,))
    packed = pack_bits(codes, bits)
    assert packed.numel() == math.ceil(37 * bits / 8)
    assert torch.equal(unpack_bits(packed, bits, 37), codes)


@pytest.mark.parametrize("name", ["topk", "sign", "qsgd"])
def test_error_feedback_keeps_exactly_what_was_not_sent(name):
    """sum_t x_t = sum_t C(p_t) + e_T: the memory holds exactly the part never sent."""
    c, memory = make(name, ratio=0.05), ErrorFeedback()
    inputs, sent = torch.zeros(D, dtype=torch.float64), torch.zeros(D, dtype=torch.float64)
    for t in range(20):
        x = torch.randn(D)
        p = memory.compensate(x)
        out = c(p, t)
        memory.update(p, out)
        inputs += x.double()
        sent += out.double()
    torch.testing.assert_close(sent + memory.error.double(), inputs, atol=1e-4, rtol=0)
    assert memory.error.norm() > 0

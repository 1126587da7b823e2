"""Scaled sign (Karimireddy et al. 2019, EF-SignSGD, Algorithm 1 line 5):

    C(x) = (||x||_1 / d) * sign(x)
    ||C(x) - x||^2 = ||x||^2 - ||x||_1^2 / d <= (1 - 1/d) ||x||^2          delta = 1/d (worst case;
                                                       ||x||_1^2 / (d ||x||^2) for a given x)

Wire format: the float32 scale, then one bit per entry (1 = non-negative), 4 + ceil(d/8) bytes.
"""
from __future__ import annotations

import math

import torch

from .base import Compressor, from_bytes, pack_bits, to_bytes, unpack_bits


class ScaledSign(Compressor):
    name = "sign"

    def compress(self, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, tuple[int, torch.dtype]]:
        scale = x.abs().mean().float().reshape(1)
        payload = torch.cat([to_bytes(scale), pack_bits(x >= 0, 1)])
        return payload, (x.numel(), x.dtype)

    def decompress(self, payload: torch.Tensor, ctx: tuple[int, torch.dtype]) -> torch.Tensor:
        numel, dtype = ctx
        scale = from_bytes(payload[:4], torch.float32)
        signs = unpack_bits(payload[4:], 1, numel).to(torch.float32) * 2 - 1
        return (scale * signs).to(dtype)

    def wire_bytes(self, numel: int) -> int:
        return 4 + math.ceil(numel / 8)

    def delta(self, numel: int) -> float:
        return 1.0 / numel

"""QSGD (Alistarh et al. 2017, Sec. 3.1), bucketed, scaled to a contraction.

Per bucket v of b consecutive entries, with s quantization levels and l = floor(s|v_j|/||v||):

    Q_s(v)_j = ||v||_2 * sign(v_j) * xi_j / s,  xi_j = l + 1 with prob. s|v_j|/||v|| - l, else l
    E Q_s(v) = v,  E||Q_s(v) - v||^2 <= omega ||v||^2,  omega = min(b/s^2, sqrt(b)/s)   (Lemma 3.1)

For error feedback the compressor must be a contraction, so C(x) = Q_s(x) / (1 + omega)
(Karimireddy et al. 2019, Remark 6 / Stich & Karimireddy 2020), which gives
E||C(x) - x||^2 <= (1 - delta)||x||^2 with delta = 1 / (1 + omega).

Wire format: one float32 norm per bucket, then per entry a fixed-width code (sign bit + level
in [0, s]) of 1 + ceil(log2(s+1)) bits rounded up to 2, 4 or 8 bits (s <= 127): no Elias coding.
"""
from __future__ import annotations

import math

import torch

from .base import Compressor, from_bytes, generator, pack_bits, to_bytes, unpack_bits


class QSGD(Compressor):
    name = "qsgd"

    def __init__(self, levels: int, bucket: int = 512) -> None:
        if not 1 <= levels <= 127:
            raise ValueError(f"QSGD levels must be in 1..127, got {levels}")
        self.levels, self.bucket = levels, bucket
        need = 1 + math.ceil(math.log2(levels + 1))
        self.bits = next(b for b in (2, 4, 8) if b >= need)

    def _omega(self, numel: int) -> float:
        b, s = min(self.bucket, numel), self.levels
        return min(b / s**2, math.sqrt(b) / s)

    def compress(self, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, tuple[int, torch.dtype]]:
        d, b, s = x.numel(), self.bucket, self.levels
        padded = torch.zeros(math.ceil(d / b) * b, dtype=torch.float32, device=x.device)
        padded[:d] = x.float()
        buckets = padded.view(-1, b)
        norms = buckets.norm(dim=1, keepdim=True)
        scaled = buckets.abs() * s / norms.clamp_min(torch.finfo(torch.float32).tiny)
        lower = scaled.floor()
        u = torch.rand(scaled.shape, generator=generator(seed, x.device), device=x.device)
        level = (lower + (u < scaled - lower).float()).clamp_max(s).reshape(-1)[:d]
        codes = level.long() * 2 + (x < 0).long()
        payload = torch.cat([to_bytes(norms.reshape(-1)), pack_bits(codes, self.bits)])
        return payload, (d, x.dtype)

    def decompress(self, payload: torch.Tensor, ctx: tuple[int, torch.dtype]) -> torch.Tensor:
        d, dtype = ctx
        nb = math.ceil(d / self.bucket)
        norms = from_bytes(payload[:4 * nb], torch.float32)
        codes = unpack_bits(payload[4 * nb:], self.bits, d)
        sign = 1.0 - 2.0 * (codes & 1).float()
        norm_per_entry = norms.repeat_interleave(self.bucket)[:d]
        value = norm_per_entry * sign * (codes >> 1).float() / self.levels
        return (value / (1 + self._omega(d))).to(dtype)

    def wire_bytes(self, numel: int) -> int:
        return 4 * math.ceil(numel / self.bucket) + math.ceil(numel * self.bits / 8)

    def delta(self, numel: int) -> float:
        return 1.0 / (1.0 + self._omega(numel))

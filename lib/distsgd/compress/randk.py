"""Random-k sparsification with a shared seed (Stich et al. 2018): keep k = ceil(ratio * d)
entries chosen uniformly at random, unscaled.

    C(x)_j = x_j if j in S, S a uniform k-subset, else 0
    E||C(x) - x||^2 = (1 - k/d) ||x||^2                     delta = k/d

Every rank draws S from the same seed, so indices are never sent: the payload is the k float32
values (4k bytes), and payloads of all ranks are summed by an all-reduce.
"""
from __future__ import annotations

import torch

from .base import Compressor, generator, keep_count


class RandK(Compressor):
    name = "randk"
    all_reducible = True

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio

    def compress(self, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, tuple[int, torch.Tensor]]:
        k = keep_count(self.ratio, x.numel())
        idx = torch.randperm(x.numel(), generator=generator(seed, x.device), device=x.device)[:k]
        return x[idx].clone(), (x.numel(), idx)

    def decompress(self, payload: torch.Tensor, ctx: tuple[int, torch.Tensor]) -> torch.Tensor:
        numel, idx = ctx
        out = torch.zeros(numel, dtype=payload.dtype, device=payload.device)
        out[idx] = payload
        return out

    def wire_bytes(self, numel: int) -> int:
        return 4 * keep_count(self.ratio, numel)

    def delta(self, numel: int) -> float:
        return keep_count(self.ratio, numel) / numel

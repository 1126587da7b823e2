"""Top-k sparsification (Aji & Heafield 2017; Stich et al. 2018): keep the k = ceil(ratio * d)
entries of largest magnitude.

    C(x)_j = x_j if j is among the k largest |x_j|, else 0
    ||C(x) - x||^2 <= (1 - k/d) ||x||^2                     delta = k/d (deterministic)

Wire format: k float32 values then k int32 indices, 8k bytes. The supports differ between
ranks, so payloads are all-gathered, not all-reduced.
"""
from __future__ import annotations

import torch

from .base import Compressor, from_bytes, keep_count, to_bytes


class TopK(Compressor):
    name = "topk"

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio

    def compress(self, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, tuple[int, torch.dtype]]:
        k = keep_count(self.ratio, x.numel())
        idx = x.abs().topk(k, sorted=False).indices
        payload = torch.cat([to_bytes(x[idx].float()), to_bytes(idx.int())])
        return payload, (x.numel(), x.dtype)

    def decompress(self, payload: torch.Tensor, ctx: tuple[int, torch.dtype]) -> torch.Tensor:
        numel, dtype = ctx
        k = keep_count(self.ratio, numel)
        values = from_bytes(payload[:4 * k], torch.float32)
        idx = from_bytes(payload[4 * k:], torch.int32).long()
        out = torch.zeros(numel, dtype=dtype, device=payload.device)
        out[idx] = values.to(dtype)
        return out

    def wire_bytes(self, numel: int) -> int:
        return 8 * keep_count(self.ratio, numel)

    def delta(self, numel: int) -> float:
        return keep_count(self.ratio, numel) / numel

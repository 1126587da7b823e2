"""No compression: C(x) = x. delta = 1; the payload is x itself (all-reducible). Used as the
uncompressed reference (an algorithm with identity compressors reduces to S-SGD)."""
from __future__ import annotations

import torch

from .base import Compressor


class Identity(Compressor):
    name = "none"
    all_reducible = True

    def compress(self, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, None]:
        return x.clone(), None

    def decompress(self, payload: torch.Tensor, ctx: None) -> torch.Tensor:
        return payload

    def wire_bytes(self, numel: int) -> int:
        return 4 * numel

    def delta(self, numel: int) -> float:
        return 1.0

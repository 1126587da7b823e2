"""The compressor interface (GRACE-style: a compressor only compresses; error feedback lives in
`memory`, communication in the algorithms and `ddp_hook`).

A compressor maps a flat tensor x (d elements) to a *payload*, the exact bytes that travel, and
back. Two kinds:

- all-reducible (`all_reducible = True`): payloads of different ranks can be summed element-wise
  in their wire form (identity, random-k with a shared seed); the algorithms all-reduce them.
- otherwise the payload is a flat ``uint8`` tensor of `wire_bytes(d)` bytes (values + indices,
  packed bits, norms); the algorithms all-gather the payloads so the ledger counts exactly those
  bytes, and every rank decompresses every rank's payload.

`compress(x, seed)` returns ``(payload, ctx)``. `ctx` is what `decompress` needs besides the
payload; it depends only on d, dtype and the shared seed, so it is the same on every rank and
decompresses the payloads of other ranks too. `seed` drives any randomness: equal seeds on all
ranks give equal random choices (random-k's indices), different seeds independent ones.

Each compressor declares its contraction constant delta(d):
E||C(x) - x||^2 <= (1 - delta) ||x||^2 (Stich, Cordonnier & Jaggi 2018, Def. 2.1; Karimireddy
et al. 2019, Assumption A), which the tests check empirically.
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import Any, ClassVar

import torch


class Compressor(ABC):
    """Compress a flat tensor into its wire payload and back."""

    name: ClassVar[str] = ""
    all_reducible: ClassVar[bool] = False

    @abstractmethod
    def compress(self, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, Any]:
        """x: flat float tensor -> (payload, ctx)."""

    @abstractmethod
    def decompress(self, payload: torch.Tensor, ctx: Any) -> torch.Tensor:
        """The dense flat tensor C(x) (same shape and dtype as x)."""

    @abstractmethod
    def wire_bytes(self, numel: int) -> int:
        """Bytes of the payload for a d = `numel` element input (the declared wire format)."""

    @abstractmethod
    def delta(self, numel: int) -> float:
        """Contraction constant: E||C(x) - x||^2 <= (1 - delta) ||x||^2."""

    def __call__(self, x: torch.Tensor, seed: int = 0) -> torch.Tensor:
        """C(x), compressed and decompressed (convenient for tests and the replicated server)."""
        return self.decompress(*self.compress(x, seed))


def generator(seed: int, device: torch.device) -> torch.Generator | None:
    """A generator on `device` seeded with `seed`; None on the meta device (the timeline
    simulator's tensors, which hold no data: nothing to draw)."""
    if torch.device(device).type == "meta":
        return None
    g = torch.Generator(device=device)
    g.manual_seed(seed)
    return g


def keep_count(ratio: float, numel: int) -> int:
    """k = ceil(ratio * d), at least 1: the number of entries a sparsifier keeps."""
    return max(1, min(numel, math.ceil(ratio * numel)))


def to_bytes(t: torch.Tensor) -> torch.Tensor:
    """The raw bytes of a contiguous tensor, as a flat uint8 view."""
    return t.contiguous().reshape(-1).view(torch.uint8)


def from_bytes(b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Reinterpret bytes as `dtype` (copied: a slice of a payload may be misaligned for it)."""
    return b.clone().view(dtype)


def pack_bits(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """Pack non-negative integer codes < 2**bits (bits in 1, 2, 4, 8) into uint8, 8/bits per byte."""
    per = 8 // bits
    n = codes.numel()
    padded = torch.zeros(math.ceil(n / per) * per, dtype=torch.uint8, device=codes.device)
    padded[:n] = codes.to(torch.uint8)
    shifts = torch.arange(per, device=codes.device, dtype=torch.uint8) * bits
    return (padded.view(-1, per) << shifts).sum(1, dtype=torch.uint8)


def unpack_bits(packed: torch.Tensor, bits: int, n: int) -> torch.Tensor:
    """Inverse of `pack_bits`: the first n codes, as int64."""
    per = 8 // bits
    shifts = torch.arange(per, device=packed.device, dtype=torch.uint8) * bits
    codes = (packed.view(-1, 1) >> shifts) & ((1 << bits) - 1)
    return codes.reshape(-1)[:n].long()

"""Shared pieces of the compressed-communication algorithms (compressed_sgd, double_squeeze,
liec_sgd): their parameters, the flat gradient, seeds, and the byte counters of the
parameter-server view.

Bytes, two views. (1) The ledger: what the collectives really send in this implementation, where
every rank all-gathers (or all-reduces) the workers' compressed messages and the "server" is
replicated on every rank, so no download collective exists. (2) `up_bytes` / `down_bytes`
(metrics columns, cumulative per worker): the wire bytes one worker would send to and receive
from a parameter server in the papers' architecture, from the compressors' declared formats:
up = |C_w(.)| every step; down = |C_s(.)| for bidirectional methods, and 4d (the dense average)
for unidirectional compression.
"""
from __future__ import annotations

import torch

from ..compress import NAMES, Compressor, make
from .base import Algorithm, Param
from .flat import flatten, unflatten_into

PARAMS = (
    Param("compressor", "topk", "compressor: " + ", ".join(NAMES), lambda v: v in NAMES, ", ".join(NAMES)),
    Param("ratio", 0.01, "fraction of entries kept (topk, randk)", lambda v: 0 < v <= 1, "a number in (0, 1]"),
    Param("levels", 4, "QSGD quantization levels s", lambda v: 1 <= v <= 127, "an integer in 1..127"),
    Param("rank", 1, "PowerSGD rank", lambda v: v >= 1, "an integer >= 1"),
)

WORKER, SERVER = 0, 1


class CompressedAlgorithm(Algorithm):
    """Base for algorithms that compress the flat gradient of all trainable parameters."""

    compressor: str                     # its name; the compressor itself is self.codec
    ratio: float
    levels: int
    rank: int                           # PowerSGD's rank r (the process rank is comm.rank)

    state_fields = ("up_bytes", "down_bytes")
    up_bytes: int                       # parameter-server view: bytes sent so far by this worker
    down_bytes: int                     # ... and received so far

    def build(self) -> None:
        self.trainable = [p for p in self.model.parameters() if p.requires_grad]
        self.numel = sum(p.numel() for p in self.trainable)
        self.codec: Compressor = make(self.compressor, self.ratio, self.levels, self.rank)   # C
        self.up_bytes = 0
        self.down_bytes = 0

    def flat_grad(self) -> torch.Tensor:
        return flatten([torch.zeros_like(p) if p.grad is None else p.grad for p in self.trainable])

    def set_grad(self, flat: torch.Tensor) -> None:
        for p in self.trainable:
            if p.grad is None:
                p.grad = torch.empty_like(p)
        unflatten_into(flat, [p.grad for p in self.trainable])

    def seed(self, step: int, side: int, compressor: Compressor) -> int:
        """Seed of a compression at `step` on `side` (WORKER / SERVER). All-reducible compressors
        and the replicated server use one seed on every rank (their random choices must agree);
        the workers' other compressors draw independently per rank."""
        shared = side == SERVER or compressor.all_reducible
        rank = 0 if shared else self.comm.rank + 1
        return ((self.config.seed * 1_000_003 + step) * 2 + side) * 65_537 + rank

    def count(self, up: int, down: int) -> None:
        self.up_bytes += up
        self.down_bytes += down

    def metrics(self) -> dict[str, float]:
        return {"up_bytes": self.up_bytes, "down_bytes": self.down_bytes}

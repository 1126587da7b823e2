"""Averaging compressed messages over all ranks through `Comm` (so the ledger counts them):

    all-reducible payloads (identity, random-k):  all-reduce (average) the payloads, decompress
    others (top-k, sign, QSGD, PowerSGD):          all-gather the byte payloads, decompress each,
                                                   average                      -> (1/p) sum_i C(x_i)

An all-gather of p payloads of w bytes is recorded with nbytes = p*w and, by the ring formula,
(p-1)*w bytes sent per rank.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .base import Compressor

if TYPE_CHECKING:
    from ..comm import Comm


def average(comm: "Comm", compressor: Compressor, payload: torch.Tensor, ctx: Any) -> torch.Tensor:
    """(1/p) sum over ranks of C(x_rank), given this rank's (payload, ctx) of C(x_rank)."""
    if compressor.all_reducible:
        comm.all_reduce(payload, op="avg")
        return compressor.decompress(payload, ctx)
    p = comm.world_size
    gathered = torch.empty(p * payload.numel(), dtype=payload.dtype, device=payload.device)
    comm.all_gather(gathered, payload)
    chunks = gathered.view(p, -1)
    return sum(compressor.decompress(chunks[r], ctx) for r in range(p)) / p

"""Averaging compressed messages over all ranks through `Comm` (so the ledger counts them):

    all-reducible payloads (identity, random-k):  all-reduce (average) the payloads, decompress
    others (top-k, sign, QSGD, PowerSGD):          all-gather the byte payloads, decompress each,
                                                   average                      -> (1/p) sum_i C(x_i)

An all-gather of p payloads of w bytes is recorded with nbytes = p*w and, by the ring formula,
(p-1)*w bytes sent per rank. The exchange is issued asynchronously: `average` returns a Future
that completes once the collective has (and the emulated network's time has passed), with the
decompression done in its callback, so a DDP communication hook overlaps it with backward.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from .base import Compressor

if TYPE_CHECKING:
    from ..comm import Comm


def average(comm: "Comm", compressor: Compressor, payload: torch.Tensor,
            ctx: Any) -> torch.futures.Future[torch.Tensor]:
    """A Future of (1/p) sum over ranks of C(x_rank), given this rank's (payload, ctx) of C(x_rank)."""
    if compressor.all_reducible:
        return comm.all_reduce_future(payload, op="avg").then(lambda fut: compressor.decompress(fut.value(), ctx))
    p = comm.world_size
    gathered = torch.empty(p * payload.numel(), dtype=payload.dtype, device=payload.device)

    def mean(fut: torch.futures.Future[torch.Tensor]) -> torch.Tensor:
        chunks = fut.value().view(p, -1)
        return sum(compressor.decompress(chunks[r], ctx) for r in range(p)) / p

    return comm.all_gather_future(gathered, payload).then(mean)

"""Compressors as a DDP communication hook, for users' own `DistributedDataParallel` training.

    state = register(ddp_model, comm, TopK(0.01))          # error feedback on by default

Each gradient bucket b of DDP is compensated with its residual, compressed, averaged over the
ranks through `Comm` (all-gather or all-reduce, so the ledger counts the wire bytes), and the
residual updated (EF-SGD, as in `algorithms.compressed_sgd`, per bucket):

    p = g_b + e_b;  c = C(p);  e_b <- p - c;  g_b <- (1/N) sum_i c_i

The exchange is synchronous inside the hook (the returned future is already complete), so this
hook does not overlap communication with the rest of backward. For PowerSGD use PyTorch's own
hook: `compress.register_powersgd`.
"""
# No `from __future__ import annotations` here: DDP checks the hook's annotations at runtime.
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .base import Compressor
from .exchange import average
from .memory import ErrorFeedback

if TYPE_CHECKING:
    from ..comm import Comm


@dataclass
class HookState:
    comm: "Comm"
    compressor: Compressor
    error_feedback: bool = True
    seed: int = 0
    iteration: int = 0
    memories: dict[int, ErrorFeedback] = field(default_factory=dict)


def compression_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: error-compensated compressed average of one bucket."""
    grad = bucket.buffer()
    memory = state.memories.setdefault(bucket.index(), ErrorFeedback())
    p = memory.compensate(grad) if state.error_feedback else grad
    rank = 0 if state.compressor.all_reducible else state.comm.rank + 1
    seed = ((state.seed * 1_000_003 + state.iteration) * 1024 + bucket.index()) * 65_537 + rank
    payload, ctx = state.compressor.compress(p, seed)
    if state.error_feedback:
        memory.update(p, state.compressor.decompress(payload, ctx))
    grad.copy_(average(state.comm, state.compressor, payload, ctx))
    if bucket.is_last():
        state.iteration += 1
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(grad)
    return fut


def register(model: DistributedDataParallel, comm: "Comm", compressor: Compressor,
             error_feedback: bool = True, seed: int = 0) -> HookState:
    """Install `compression_hook` on a DDP model; returns the hook's state (residuals per bucket)."""
    state = HookState(comm, compressor, error_feedback, seed)
    model.register_comm_hook(state, compression_hook)
    return state

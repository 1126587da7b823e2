"""Compressors as a DDP communication hook, for users' own `DistributedDataParallel` training.

    state = register(ddp_model, TopK(0.01))         # error feedback on by default; the default group
    state = register(ddp_model, TopK(0.01), comm=optimizer.algorithm.comm)   # a `distsgd.wrap`'s Comm

Each gradient bucket b of DDP is compensated with its residual, compressed, averaged over the
ranks through `Comm` (all-gather or all-reduce, so the ledger counts the wire bytes), and the
residual updated (EF-SGD, as in `algorithms.compressed_sgd`, per bucket):

    p = g_b + e_b;  c = C(p);  e_b <- p - c;  g_b <- (1/N) sum_i c_i

Compensation, compression and the residual update run inside the hook, on this rank's data; the
exchange is issued asynchronously and the hook returns its pending Future (decompression and the
average run in its callback), so DDP goes on with backward while the bucket travels, as its own
all-reduce hook does. `pending=False` waits for it inside the hook instead (the returned future
already complete: no overlap, the benchmark's baseline, `benchmark.hook_overlap`); both give
the same gradients. The collectives go through a `Comm` (the ledger counts them; `--net`
emulation applies): one given, or one made on the given or default process group. For PowerSGD
use PyTorch's own hook: `compress.register_powersgd`.
"""
# No `from __future__ import annotations` here: DDP checks the hook's annotations at runtime.
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ..comm import Comm
from .base import Compressor
from .exchange import average
from .error_feedback import ErrorFeedback


@dataclass
class HookState:
    comm: Comm
    compressor: Compressor
    error_feedback: bool = True
    seed: int = 0
    pending: bool = True                # return the exchange's pending Future (else wait for it)
    iteration: int = 0
    memories: dict[tuple[int, ...], ErrorFeedback] = field(default_factory=dict)   # per bucket (its parameters' ids)


def compression_hook(state: HookState, bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: error-compensated compressed average of one bucket."""
    grad = bucket.buffer()
    # keyed by the bucket's parameters: DDP rebuilds its buckets after the first step (other
    # indices, other sizes), and a residual belongs to its parameters
    memory = state.memories.setdefault(tuple(map(id, bucket.parameters())), ErrorFeedback())
    p = memory.compensate(grad) if state.error_feedback else grad
    rank = 0 if state.compressor.all_reducible else state.comm.rank + 1
    seed = ((state.seed * 1_000_003 + state.iteration) * 1024 + bucket.index()) * 65_537 + rank
    payload, ctx = state.compressor.compress(p, seed)
    if state.error_feedback:
        memory.update(p, state.compressor.decompress(payload, ctx))
    if bucket.is_last():
        state.iteration += 1
    fut = average(state.comm, state.compressor, payload, ctx).then(lambda avg: grad.copy_(avg.value()))
    if not state.pending:
        fut.wait()
    return fut


def register(model: DistributedDataParallel, compressor: Compressor,
             comm: "Comm | dist.ProcessGroup | None" = None, error_feedback: bool = True, seed: int = 0,
             pending: bool = True) -> HookState:
    """Install `compression_hook` on a DDP model; returns the hook's state (residuals per bucket).
    `comm`: a distsgd `Comm`, or a process group of all ranks (None: the default group) on which
    one is made (`Comm.on_group`, never initialising a group)."""
    if not isinstance(comm, Comm):
        comm = Comm.on_group(next(model.parameters()).device, group=comm)
    state = HookState(comm, compressor, error_feedback, seed, pending)
    model.register_comm_hook(state, compression_hook)
    return state

"""PowerSGD (Vogels, Karimireddy & Jaggi 2019): rank-r approximation by one power iteration.

In DDP training use PyTorch's own implementation, `register_powersgd` below (its hook
`torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook`, Algorithm 1 of the paper with
warm start and error feedback, all-reducing P and Q). That hook calls torch.distributed itself,
so its traffic is NOT in the distsgd ledger.

`PowerSGD` is the same low-rank step as a stand-alone compressor for our algorithms: the flat
input is viewed as an n x m matrix M (n = ceil(sqrt d), zero-padded), Q0 is a random m x r
matrix from the shared seed, and

    P = orthogonalize(M Q0),  Q = M^T P,  C(x) = P Q^T         (Algorithm 1, lines 3-7, one worker)

C is the projection of M onto span(P), so ||C(x) - x||^2 = ||M||^2 - ||P^T M||^2; delta = r /
min(n, m) is the declared (empirically checked, not proven) contraction. Each worker's P, Q
are sent (all-gathered), 4 r (n + m) bytes; the paper's trick of all-reducing P and Q of a
shared subspace needs two rounds of communication and is what PyTorch's hook does.
"""
from __future__ import annotations

import math

import torch
import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as ptorch_powersgd
from torch.nn.parallel import DistributedDataParallel

from .base import Compressor, from_bytes, generator, to_bytes


def _shape(numel: int) -> tuple[int, int]:
    n = math.ceil(math.sqrt(numel))
    return n, math.ceil(numel / n)


class PowerSGD(Compressor):
    name = "powersgd"

    def __init__(self, rank: int = 1) -> None:
        self.rank = rank

    def compress(self, x: torch.Tensor, seed: int) -> tuple[torch.Tensor, tuple[int, torch.dtype]]:
        n, m = _shape(x.numel())
        r = min(self.rank, n, m)
        padded = torch.zeros(n * m, dtype=torch.float32, device=x.device)
        padded[:x.numel()] = x.float()
        mat = padded.view(n, m)
        q0 = torch.randn(m, r, generator=generator(seed, x.device), device=x.device)
        p = torch.linalg.qr(mat @ q0).Q
        q = mat.T @ p
        return torch.cat([to_bytes(p), to_bytes(q)]), (x.numel(), x.dtype)

    def decompress(self, payload: torch.Tensor, ctx: tuple[int, torch.dtype]) -> torch.Tensor:
        numel, dtype = ctx
        n, m = _shape(numel)
        r = min(self.rank, n, m)
        p = from_bytes(payload[:4 * n * r], torch.float32).view(n, r)
        q = from_bytes(payload[4 * n * r:], torch.float32).view(m, r)
        return (p @ q.T).reshape(-1)[:numel].to(dtype)

    def wire_bytes(self, numel: int) -> int:
        n, m = _shape(numel)
        return 4 * min(self.rank, n, m) * (n + m)

    def delta(self, numel: int) -> float:
        n, m = _shape(numel)
        return min(self.rank, n, m) / min(n, m)


def register_powersgd(model: DistributedDataParallel, rank: int = 1, start_iter: int = 2,
                      process_group: dist.ProcessGroup | None = None) -> ptorch_powersgd.PowerSGDState:
    """Install PyTorch's PowerSGD communication hook (rank-`rank`, error feedback, warm start;
    plain all-reduce for the first `start_iter` steps) on a DDP model; returns its state."""
    state = ptorch_powersgd.PowerSGDState(process_group=process_group, matrix_approximation_rank=rank,
                                          start_powerSGD_iter=start_iter, min_compression_rate=1)
    model.register_comm_hook(state, ptorch_powersgd.powerSGD_hook)
    return state

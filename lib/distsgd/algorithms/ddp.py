"""DDP: PyTorch's own `DistributedDataParallel`, as the reference S-SGD implementation.

Same update as `ssgd` (average gradient, identical step on every rank); DDP's C++ reducer does
the bucketing and overlap. Its bucket all-reduces are routed through `Comm` with a DDP
communication hook (`register_comm_hook`) so that they are counted in the ledger and see the
emulated network like every other algorithm; the reduction itself is DDP's standard average.
"""
# No `from __future__ import annotations` here: DDP checks the hook's annotations at runtime.
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from .base import Algorithm, Param
from .registry import register

if TYPE_CHECKING:
    from ..comm import Comm


def ledger_allreduce_hook(comm: "Comm", bucket: dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DDP communication hook: average the bucket over all ranks through `comm`."""
    return comm.all_reduce_future(bucket.buffer(), op="avg")


@register
class DDP(Algorithm):
    name = "ddp"
    summary = "torch.nn.parallel.DistributedDataParallel (all-reduce routed through the ledger)"
    params = (
        Param("bucket_mb", 25.0, "DDP bucket_cap_mb", lambda v: v > 0, "a number > 0"),
    )

    bucket_mb: float

    def build(self) -> None:
        device = self.comm.device
        device_ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(self.model, device_ids=device_ids, bucket_cap_mb=self.bucket_mb)
        ddp.register_comm_hook(self.comm, ledger_allreduce_hook)
        self.net = ddp

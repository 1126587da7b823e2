"""DDP: PyTorch's own `DistributedDataParallel`, as the reference S-SGD implementation.

Same update as `ssgd` (average gradient, identical step on every rank); DDP's C++ reducer does
the bucketing and overlap. Its bucket all-reduces are routed through `Comm` with a DDP
communication hook (`register_comm_hook`) so that they are counted in the ledger and see the
emulated network like every other algorithm; the reduction itself is DDP's standard average.

DDP runs on the process group of `Comm`'s world (`Comm.world.pg`): in a run the default group (or a
user's, `Comm.on_group`), in the timeline simulator a fake one whose bucket collectives are the
simulator's futures (`timeline.driver.SimComm`). The reducer starts with all gradients in one bucket
and rebuilds its buckets in gradient-ready order after the first iteration (`steady_state`).
"""
# No `from __future__ import annotations` here: DDP checks the hook's annotations at runtime.
from typing import TYPE_CHECKING, Any

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
    simulated_storage = True     # the reducer reads its rebuilt bucket order back from a tensor

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """The reducer's buckets are rebuilt after the first iteration: steady from step 1."""
        return 1, 1

    def build(self) -> None:
        device = self.comm.device
        device_ids = [device.index] if device.type == "cuda" else None
        ddp = DistributedDataParallel(self.model, device_ids=device_ids, bucket_cap_mb=self.bucket_mb,
                                      process_group=self.comm.world.pg, init_sync=self.comm.moves_data)
        ddp.register_comm_hook(self.comm, ledger_allreduce_hook)
        self.net = ddp

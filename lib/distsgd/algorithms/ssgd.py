"""S-SGD: synchronous data-parallel SGD with a gradient all-reduce every step.

Update rule (mini-batch SGD on p workers, e.g. Goyal et al. 2017, eq. 1):

    g_t = (1/p) * sum_i grad F(x_t; xi_{i,t})          # all-reduce (average) of gradients
    x_{t+1} = optimizer_step(x_t, g_t)                # identical on every rank

Gradients are fused into buckets of at most `bucket_mb` MB, filled in reverse parameter order
(the order backward produces them, as in PyTorch DDP and Horovod's tensor fusion; 0: one bucket
per tensor). With `overlap`, a bucket's all-reduce is launched asynchronously from the gradient
hooks as soon as every gradient in it is ready, so communication overlaps the rest of backward
(wait-free backpropagation); otherwise all buckets are reduced after backward.

Three of the survey's all-reduce schedules of S-SGD (Shi et al., "Communication-Efficient
Distributed Deep Learning: Survey, Evaluation, and Challenges", arXiv 2005.13247, sec. on
scheduling) are this one rule under their names, `preset`s of `SSGD` with no code of their own:

- ``no_overlap``: all gradients reduced after backward, in fusion buckets (naive S-SGD): overlap false;
- ``wfbp``: wait-free backpropagation (Poseidon, Zhang et al. 2017): one all-reduce per tensor,
  launched from its gradient hook as soon as it is ready: bucket_mb 0, overlap true;
- ``fusion``: tensor fusion with a size threshold (Horovod / PyTorch DDP): consecutive gradients
  fused into buckets of at most `bucket_mb`, each launched when full: overlap true.

Horovod's tensor fusion cycle (Horovod's docs, "Tensor Fusion"; HOROVOD_CYCLE_TIME and
HOROVOD_FUSION_THRESHOLD) is a parameter of the rule, `cycle_ms` (0: off, the kit's own launch):
Horovod's background thread wakes every cycle and fuses the gradients that became ready since its
last tick, up to `cycle_mb`, into one all-reduce issued at the tick. Here the cycle is read from the
rank's clock (`Comm.now()`: wall time in a run, the simulated clock in the timeline simulator): a
full bucket joins the group of the next tick at or after the time it is ready; a group is issued,
as one all-reduce of its buckets back to back issued at its tick (`Comm.all_reduce(at=...)`), once a
bucket of a later tick, or one that would take it past `cycle_mb`, arrives, and after backward.

MG-WFBP, ByteScheduler, the parameter server and DeAR have their own modules.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from .base import Algorithm, Param
from .buckets import Bucket, make_buckets
from .registry import preset, register

if TYPE_CHECKING:
    from ..comm import Handle


class BucketedAllReduce(Algorithm):
    """Gradient all-reduce in buckets (planned by `plan`), launched from gradient hooks when a
    bucket is full (`overlap`) or all after backward; averaged gradients, then optimizer.step()."""

    overlap: bool = True                # a parameter of ssgd; a constant of ps and mgwfbp

    def build(self) -> None:
        self.backward_order = list(reversed([p for p in self.model.parameters() if p.requires_grad]))
        self.set_buckets(self.plan())
        for p in self.backward_order:
            self.hook(p.register_post_accumulate_grad_hook(self._grad_ready))

    def plan(self) -> list[Bucket]:
        raise NotImplementedError

    def set_buckets(self, buckets: list[Bucket]) -> None:
        self.buckets = buckets
        self.bucket_of = {p: b for b in buckets for p in b.params}

    def _grad_ready(self, p: torch.nn.Parameter) -> None:
        bucket = self.bucket_of[p]
        bucket.ready += 1
        if self.overlap and bucket.ready == len(bucket.params):
            self._launch(bucket)

    def _launch(self, bucket: Bucket) -> None:
        bucket.pack()
        bucket.handle = self.comm.all_reduce(bucket.buffer, op="avg", async_op=True)

    def after_backward(self, step: int) -> None:
        for bucket in self.buckets:
            if bucket.handle is None:          # no overlap, or a parameter without gradient
                self._launch(bucket)
        self.issue_held()
        for bucket in self.buckets:
            bucket.handle.wait()
            bucket.unpack()
            bucket.handle, bucket.ready = None, 0

    def issue_held(self) -> None:
        """After backward, once every bucket is launched: issue what `_launch` held back (none here)."""


class FusedPart:
    """A bucket's share of a fused all-reduce: `wait()` waits for the fused collective, then copies
    the bucket's slice of the fused buffer back into the bucket's buffer."""

    def __init__(self, handle: "Handle", fused: torch.Tensor, bucket: Bucket, offset: int) -> None:
        self.handle, self.fused, self.bucket, self.offset = handle, fused, bucket, offset

    def wait(self) -> None:
        self.handle.wait()
        if self.fused is not self.bucket.buffer:
            self.bucket.buffer.copy_(self.fused.narrow(0, self.offset, self.bucket.buffer.numel()))


@register
class SSGD(BucketedAllReduce):
    name = "ssgd"
    summary = "synchronous SGD: bucketed gradient all-reduce every step, overlapped with backward"
    params = (
        Param("bucket_mb", 25.0, "tensor-fusion bucket size cap in MB (0: one bucket per tensor)",
              lambda v: v >= 0, "a number >= 0"),
        Param("overlap", True, "launch each bucket's all-reduce from backward hooks as soon as it is full"),
        Param("cycle_ms", 0.0, "Horovod's fusion cycle in ms: full buckets are fused per cycle tick and issued "
              "at it (0: each bucket launched at once)", lambda v: v >= 0, "a number >= 0"),
        Param("cycle_mb", 128.0, "with cycle_ms: the most MB fused into one all-reduce (Horovod's fusion "
              "threshold)", lambda v: v > 0, "a number > 0"),
    )

    bucket_mb: float
    cycle_ms: float
    cycle_mb: float
    epoch_schedule = True            # unchanged by it: the models are equal after every step

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """With a fusion cycle the groups follow its ticks, which fall anywhere in a step: (0, 0)."""
        return (0, 0) if params["cycle_ms"] else (0, 1)

    def plan(self) -> list[Bucket]:
        self.fused: list[Bucket] = []          # the buckets of the group of cycle tick `tick`
        self.tick = 0.0
        return make_buckets(self.backward_order, self.bucket_mb * 2**20)

    def _launch(self, bucket: Bucket) -> None:
        """Without a cycle, at once; with one, into the group of the next tick (module doc)."""
        if not self.cycle_ms:
            super()._launch(bucket)
            return
        if bucket in self.fused:
            return
        cycle = self.cycle_ms / 1e3
        tick = math.ceil(self.comm.now() / cycle) * cycle
        fused_bytes = sum(b.nbytes for b in self.fused)
        if self.fused and (tick != self.tick or fused_bytes + bucket.nbytes > self.cycle_mb * 2**20):
            self._flush()
        if not self.fused:
            self.tick = tick
        bucket.pack()
        self.fused.append(bucket)

    def _flush(self) -> None:
        """Issue the fused group as one all-reduce at its tick."""
        group, self.fused = self.fused, []
        fused = torch.cat([b.buffer for b in group]) if len(group) > 1 else group[0].buffer
        handle = self.comm.all_reduce(fused, op="avg", async_op=True, at=self.tick)
        offset = 0
        for b in group:
            b.handle = FusedPart(handle, fused, b, offset)
            offset += b.buffer.numel()

    def issue_held(self) -> None:
        if self.fused:
            self._flush()


preset("no_overlap", SSGD, "S-SGD without overlap: fused gradient all-reduces after backward",
       overlap=False)
preset("wfbp", SSGD, "wait-free backpropagation: one all-reduce per tensor as soon as its gradient is ready",
       overlap=True, bucket_mb=0.0)
preset("fusion", SSGD, "tensor fusion (Horovod/DDP): buckets of at most bucket_mb, each all-reduced "
       "when full", overlap=True)

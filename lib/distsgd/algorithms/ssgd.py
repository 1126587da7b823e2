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

MG-WFBP, ByteScheduler, the parameter server and DeAR have their own modules.
"""
from __future__ import annotations

import torch

from .base import Algorithm, Param
from .buckets import Bucket, make_buckets
from .registry import preset, register


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
        for bucket in self.buckets:
            bucket.handle.wait()
            bucket.unpack()
            bucket.handle, bucket.ready = None, 0


@register
class SSGD(BucketedAllReduce):
    name = "ssgd"
    summary = "synchronous SGD: bucketed gradient all-reduce every step, overlapped with backward"
    params = (
        Param("bucket_mb", 25.0, "tensor-fusion bucket size cap in MB (0: one bucket per tensor)",
              lambda v: v >= 0, "a number >= 0"),
        Param("overlap", True, "launch each bucket's all-reduce from backward hooks as soon as it is full"),
    )

    bucket_mb: float
    epoch_schedule = True            # unchanged by it: the models are equal after every step

    def plan(self) -> list[Bucket]:
        return make_buckets(self.backward_order, self.bucket_mb * 2**20)


preset("no_overlap", SSGD, "S-SGD without overlap: fused gradient all-reduces after backward",
       overlap=False)
preset("wfbp", SSGD, "wait-free backpropagation: one all-reduce per tensor as soon as its gradient is ready",
       overlap=True, bucket_mb=0.0)
preset("fusion", SSGD, "tensor fusion (Horovod/DDP): buckets of at most bucket_mb, each all-reduced "
       "when full", overlap=True)

"""The survey's all-reduce schedules of S-SGD (Shi et al., "Communication-Efficient Distributed
Deep Learning: Survey, Evaluation, and Challenges", arXiv 2005.13247, sec. on scheduling):
the same update as `ssgd`,

    g_t = (1/p) * sum_i grad F(x_t; xi_{i,t});   x_{t+1} = optimizer_step(x_t, g_t),

so every schedule gives S-SGD's parameters (up to floating-point summation order); they differ
only in *when* which gradients are all-reduced:

- ``no_overlap``: all gradients reduced after backward, in fusion buckets (naive S-SGD).
- ``wfbp``: wait-free backpropagation (Poseidon, Zhang et al. 2017): one all-reduce per tensor,
  launched from its gradient hook as soon as it is ready, overlapping the rest of backward.
- ``fusion``: tensor fusion with a size threshold (Horovod / PyTorch DDP): consecutive gradients
  are fused into buckets of at most `bucket_mb`, each launched when full (= ``ssgd``).
- ``mgwfbp``: merged-gradient WFBP (Shi, Chu & Li, INFOCOM 2019): consecutive tensors are merged
  into groups chosen to minimise the modeled finish time of the pipeline of backward computation
  and all-reduces, from per-tensor gradient-ready times measured in the first `profile_steps`
  steps and the alpha-beta all-reduce cost. [Reconstructed: the paper derives a greedy merge
  rule; we minimise the same modeled finish time exactly by dynamic programming (`mgwfbp_merge`),
  which is the optimum the rule approximates.]

The schedules with tensor partition + priority (ByteScheduler) and the parameter server are in
`bytescheduler.py` and `ps.py`; DeAR is in `dear.py`.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

from .base import Param
from .buckets import Bucket, group_sizes, make_buckets
from .registry import register
from .ssgd import BucketedAllReduce


@register
class NoOverlap(BucketedAllReduce):
    name = "no_overlap"
    summary = "S-SGD without overlap: fused gradient all-reduces after backward"
    params = (Param("bucket_mb", 25.0, "fusion bucket size cap in MB", lambda v: v > 0, "a number > 0"),)
    bucket_mb: float
    overlap = False

    def plan(self) -> list[Bucket]:
        return make_buckets(self.backward_order, self.bucket_mb * 2**20)


@register
class WFBP(BucketedAllReduce):
    name = "wfbp"
    summary = "wait-free backpropagation: one all-reduce per tensor as soon as its gradient is ready"

    def plan(self) -> list[Bucket]:
        return make_buckets(self.backward_order, 0)


@register
class TensorFusion(BucketedAllReduce):
    name = "fusion"
    summary = "tensor fusion (Horovod/DDP): buckets of at most bucket_mb, each all-reduced when full"
    params = (Param("bucket_mb", 25.0, "fusion threshold in MB", lambda v: v > 0, "a number > 0"),)
    bucket_mb: float

    def plan(self) -> list[Bucket]:
        return make_buckets(self.backward_order, self.bucket_mb * 2**20)


# ---------------------------------------------------------------------- MG-WFBP
def pipeline_finish(ready: list[float], sizes: list[float], groups: list[int],
                    cost: Callable[[float], float]) -> float:
    """Modeled end of the last all-reduce when consecutive tensors (backward order, gradient
    ready at `ready[i]`, `sizes[i]` bytes) are merged into groups of `groups[k]` tensors: group k
    starts when all its gradients are ready and the previous all-reduce is done, and takes
    `cost(bytes)`."""
    t, start = float("-inf"), 0
    for k in groups:
        end = start + k
        t = max(max(ready[start:end]), t) + cost(sum(sizes[start:end]))
        start = end
    return t


def mgwfbp_merge(ready: list[float], sizes: list[float],
                 cost: Callable[[float], float]) -> list[int]:
    """Group sizes minimising `pipeline_finish`, by dynamic programming over the end of the last
    group: best(j) = min_i max(ready[i..j], best(i-1)) + cost(sizes[i..j]); exact because the
    finish time is non-decreasing in the previous group's finish."""
    n = len(ready)
    best = [0.0] * n
    cut = [0] * n                      # start index of the last group ending at j
    for j in range(n):
        total, latest, best[j] = 0.0, float("-inf"), float("inf")
        for i in range(j, -1, -1):
            total += sizes[i]
            latest = max(latest, ready[i])
            prev = best[i - 1] if i > 0 else float("-inf")
            t = max(latest, prev) + cost(total)
            if t < best[j]:
                best[j], cut[j] = t, i
    groups, j = [], n - 1
    while j >= 0:
        groups.append(j - cut[j] + 1)
        j = cut[j] - 1
    return groups[::-1]


@register
class MGWFBP(BucketedAllReduce):
    name = "mgwfbp"
    summary = "merged-gradient WFBP: merge consecutive tensors to minimise the modeled finish time"
    params = (Param("profile_steps", 3, "steps of per-tensor all-reduce whose gradient-ready times "
                    "are measured (the first is warm-up) before merging", lambda v: v >= 2, "an integer >= 2"),)

    profile_steps: int

    state_fields = ("ready_times", "groups")
    ready_times: list[dict[int, float]]     # per profiled step: backward position -> gradient-ready time
    groups: list[int]                       # the merge plan, tensors per group ([] until merged)

    def build(self) -> None:
        super().build()
        self.position = {p: i for i, p in enumerate(self.backward_order)}
        self.ready_times, self.groups = [], []
        self.profiling = False

    def plan(self) -> list[Bucket]:
        return make_buckets(self.backward_order, 0)             # WFBP while profiling

    def before_forward(self, step: int) -> None:
        self.profiling = step < self.profile_steps
        if self.profiling:
            self.ready_times.append({})
        elif step == self.profile_steps:
            self.set_buckets(group_sizes(self.backward_order, self.merge()))

    def _grad_ready(self, p: torch.nn.Parameter) -> None:
        if self.profiling:
            self.ready_times[-1][self.position[p]] = time.perf_counter()
        super()._grad_ready(p)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.groups:                         # merged before the checkpoint
            self.set_buckets(group_sizes(self.backward_order, self.groups))

    def merge(self) -> list[int]:
        """The merge plan from the profiled steps after the first (gradient-ready times relative
        to the first gradient of the step, averaged over steps and ranks so all ranks agree)."""
        rel = []
        for times in self.ready_times[1:]:
            t0 = min(times.values())
            rel.append([times.get(i, t0) - t0 for i in range(len(self.backward_order))])
        ready = self.comm.reduce_uncounted(torch.tensor(rel, dtype=torch.float64).mean(0), op="avg").tolist()
        sizes = [p.numel() * p.element_size() for p in self.backward_order]
        self.groups = mgwfbp_merge(ready, sizes, self.allreduce_cost())
        return self.groups

    def allreduce_cost(self) -> Callable[[float], float]:
        """Seconds of an all-reduce of n bytes: the emulated network's alpha-beta model, or (no
        emulation) alpha and beta fitted to timed all-reduces of 1 and 2^18 floats."""
        p = self.comm.world_size
        if self.comm.net is not None:
            net = self.comm.net
            return lambda n: net.cost("all_reduce", int(n), p)
        small, big = torch.zeros(1), torch.zeros(2**18)
        times = []
        for t in (small, big):
            runs = []
            for _ in range(3):
                t0 = time.perf_counter()
                self.comm.reduce_uncounted(t)
                runs.append(time.perf_counter() - t0)
            times.append(min(runs))
        a, b = self.comm.reduce_uncounted(torch.tensor(times, dtype=torch.float64), op="max").tolist()
        beta = max(b - a, 0.0) / big.nbytes
        return lambda n: a + beta * n

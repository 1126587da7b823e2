"""MG-WFBP: merged-gradient wait-free backpropagation (Shi, Chu & Li, "MG-WFBP: Efficient Data
Communication for Distributed Synchronous SGD Algorithms", INFOCOM 2019), one of the survey's
all-reduce schedules of S-SGD (Shi et al., arXiv 2005.13247): the same update as `ssgd`,

    g_t = (1/p) * sum_i grad F(x_t; xi_{i,t});   x_{t+1} = optimizer_step(x_t, g_t),

so it gives S-SGD's parameters (up to floating-point summation order); it differs only in *when*
which gradients are all-reduced. Consecutive tensors are merged into groups for the pipeline of
backward computation and all-reduces, from per-tensor gradient-ready times measured in the first
`profile_steps` steps (per-tensor all-reduces, WFBP, meanwhile) and the alpha-beta all-reduce cost.
``merge="greedy"`` (default) is the authors' rule as their code applies it
(`mgwfbp_greedy`: HKBU-HPML/ddl-benchmarks, ``mgwfbp/hv_distributed_optimizer.py``,
``_generate_groups_mgwfbp``); ``merge="optimal"`` minimises the same modeled finish time exactly by
dynamic programming (`mgwfbp_merge`), the optimum the rule approximates.

The survey's other schedules: no overlap, WFBP and tensor fusion are `ssgd`'s rule under their
names (`ssgd.py`); ByteScheduler, the parameter server and DeAR are `bytescheduler.py`, `ps.py`,
`dear.py`.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import torch

from .base import Param
from .buckets import Bucket, group_sizes, make_buckets
from .registry import register
from .ssgd import BucketedAllReduce


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


def mgwfbp_greedy(ready: list[float], sizes: list[float], numel: list[int],
                  cost: Callable[[float], float], small_numel: int = 8192) -> list[int]:
    """Group sizes by the authors' greedy rule (HKBU-HPML/ddl-benchmarks, ``mgwfbp/
    hv_distributed_optimizer.py``, ``_generate_groups_mgwfbp``; the paper's Algorithm 1 with one
    addition of their code). Tensors in backward order: gradient ready at `ready[i]`, `sizes[i]`
    bytes, `numel[i]` elements. With the pipeline's all-reduce starts
    ``start[0] = ready[0]``, ``start[i] = max(start[i-1] + cost_i-1, ready[i])`` over the groups
    merged so far (a merged tensor costs 0, its group the cost of all its bytes), each tensor i but
    the last, in order, is merged into the group of tensor i + 1 when

    - tensor i + 1 is ready less than one start-up time ``alpha = cost(0)`` after the all-reduce of i
      can start, ``ready[i+1] < start[i] + alpha`` (waiting for it costs less than another
      all-reduce's start-up). Their code tests this in two branches under ``ready[i+1] < start[i] +
      cost_i`` (the all-reduce not started yet; started less than alpha before), which together are
      this one condition because ``cost_i >= alpha``;
    - or, whatever the times, its group holds fewer than `small_numel` elements (their code: 8192).

    A tensor not merged closes its group; the last tensor ends the last group."""
    n = len(ready)
    alpha = cost(0.0)
    merged = list(sizes)                      # bytes of each tensor's group so far (0: merged on)
    elements = list(numel)
    tc = [cost(b) for b in merged]

    def starts() -> list[float]:
        out = [ready[0]] * n
        for i in range(1, n):
            out[i] = max(out[i - 1] + tc[i - 1], ready[i])
        return out

    groups, current = [], 0
    for i in range(n - 1):
        current += 1
        if ready[i + 1] < starts()[i] + alpha or elements[i] < small_numel:
            merged[i + 1] += merged[i]
            elements[i + 1] += elements[i]
            merged[i], elements[i], tc[i] = 0.0, 0, 0.0
            tc[i + 1] = cost(merged[i + 1])
        else:
            groups.append(current)
            current = 0
    if n:
        groups.append(current + 1)
    return groups


MERGES = ("greedy", "optimal")


def plan_merge(rule: str, ready: list[float], sizes: list[float], numel: list[int],
               cost: Callable[[float], float]) -> list[int]:
    """MG-WFBP's groups by `rule` (`MERGES`): the authors' `mgwfbp_greedy` or the `mgwfbp_merge` optimum."""
    return mgwfbp_greedy(ready, sizes, numel, cost) if rule == "greedy" else mgwfbp_merge(ready, sizes, cost)


@register
class MGWFBP(BucketedAllReduce):
    name = "mgwfbp"
    summary = "merged-gradient WFBP: merge consecutive tensors to minimise the modeled finish time"
    params = (Param("profile_steps", 3, "steps of per-tensor all-reduce whose gradient-ready times "
                    "are measured (the first is warm-up) before merging", lambda v: v >= 2, "an integer >= 2"),
              Param("merge", "greedy", "the merge rule: greedy (the authors' code) or optimal (dynamic "
                    "programming over the same modeled finish time)", lambda v: v in MERGES, " or ".join(MERGES)))

    profile_steps: int
    merge: str

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """Per-tensor all-reduces while profiling, the merged groups from step `profile_steps` on."""
        return params["profile_steps"], 1

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
            self.set_buckets(group_sizes(self.backward_order, self.merge_plan()))

    def _grad_ready(self, p: torch.nn.Parameter) -> None:
        if self.profiling:
            self.ready_times[-1][self.position[p]] = self.comm.now()
        super()._grad_ready(p)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        if self.groups:                         # merged before the checkpoint
            self.set_buckets(group_sizes(self.backward_order, self.groups))

    def merge_plan(self) -> list[int]:
        """The merge plan (`merge`: `mgwfbp_greedy` or `mgwfbp_merge`) from the profiled steps after
        the first (gradient-ready times relative to the first gradient of the step, averaged over
        steps and ranks so all ranks agree)."""
        rel = []
        for times in self.ready_times[1:]:
            t0 = min(times.values())
            rel.append([times.get(i, t0) - t0 for i in range(len(self.backward_order))])
        ready = self.comm.reduce_uncounted(torch.tensor(rel, dtype=torch.float64).mean(0), op="avg").tolist()
        sizes = [p.numel() * p.element_size() for p in self.backward_order]
        self.groups = plan_merge(self.merge, ready, sizes, [p.numel() for p in self.backward_order],
                                 self.allreduce_cost())
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

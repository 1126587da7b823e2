"""The S-SGD schedules as the simulator runs them: when each algorithm of lib/distsgd/algorithms
issues which collective of how many bytes, and what the compute stream waits for.

`Simulated.iteration` is `step.train_step`'s hook order on a profile instead of a model:

    before_forward; per layer in forward order: before_layer, its forward_s;
    per layer in backward order: its backward_s, then grad_ready(t) for each of its tensors;
    after_backward; optimizer_step; after_step

Every schedule reuses its algorithm's planner (`buckets.group_counts`, `schedules.plan_merge`,
`ps.server_assignment`, `dear.fusion_counts`, torch DDP's own bucket assignment) and issues the
collectives the algorithm issues, in the same order, with the same sizes:

- ssgd / fusion / no_overlap / wfbp / mgwfbp (`BucketedAllReduce`): one all-reduce per bucket,
  launched from the gradient hooks when the bucket's last gradient is ready (no_overlap, ssgd with
  overlap=false: all after backward); after backward every bucket is waited for in order, then
  the optimizer step (`update_s`). MG-WFBP merges with the profile's gradient-ready times.
- ddp: torch's buckets after their rebuild in gradient-ready order (the steady state, from the
  second iteration): `torch.distributed._compute_bucket_assignment_by_size` on the tensors in
  backward order with limits [_DEFAULT_FIRST_BUCKET_BYTES (1 MiB), bucket_mb MiB]; a bucket
  closes once it reaches its limit. Its reducer launches each bucket when ready and waits for
  all at the end of backward, as ssgd does.
- wfbp with `Effects.fusion_cycle_s` > 0 (`timeline.effects`): Horovod's tensor fusion; each
  gradient joins the group of the next cycle tick at or after it is ready, and a group (up to
  `fusion_threshold_bytes`) is one all-reduce issued at its tick.
- ps: with `Topology.servers` None, the PS as `Comm` runs it: per bucket a reduce-scatter
  (push) of p*m elements from the hooks, m = the largest server load of its `server_assignment`;
  after backward each push is waited for in order and its pull (an all-gather of the same p*m
  elements) issued, then all pulls are waited for. With a server placement (`PER_NODE`, 0 or N:
  BytePS as the survey ran it), each bucket (bucket_mb 0: each tensor, BYTEPS_FUSION_THRESHOLD=0)
  is one push_pull from the hooks, cut into partitions of partition_mb (0: whole); every
  partition is reduced inside the machine (intra-node link), pushed to and pulled from the
  servers by the machine (inter-node link) and broadcast inside it, each stage in the first gap
  of its link (`Rank.place`), so partitions pipeline; after backward all push_pulls are waited
  for (BytePS's synchronize). Stage costs: `Topology.byteps_local`, `Topology.byteps_remote`.
- bytescheduler: partitions of at most partition_mb per tensor, queued by (forward layer, offset),
  launched from the hooks while the bytes in flight fit the credit; after backward the rest is
  launched, retiring the oldest in-flight partition whenever the credit is full; each layer's
  forward pre-hook waits for its partitions (same loop), then applies its update.
- dear: reduce-scatter of each fusion group (padded to a multiple of p) when its gradients are
  ready; after backward all are waited for and the all-gather of group 0 is issued; the first
  layer of group g waits for gather g and issues gather g+1; every layer's update (`update_s`)
  runs in its forward pre-hook. With tune=true, `simulate.tuned` runs DeAR's tuner over
  simulated step times and this schedule at each threshold it asks (tune=false here).

Optimizer updates cost the profile's `update_s` (per layer for the layer-wise deferred schedules).
Copies into and out of fusion buffers and the per-collective issue cost are not in the profile;
`simulate(..., overheads=Overheads(...))` charges them by one rule for every schedule
(`timeline.overheads`), default none.
"""
from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from typing import Any

import torch
import torch.distributed as dist

from ..algorithms.buckets import group_counts
from ..algorithms.dear import fusion_counts
from ..algorithms.ps import server_assignment
from ..algorithms.schedules import plan_merge
from ..errors import ConfigError
from ..layer_profile import Profile
from .streams import Rank
from .topology import INTER, INTRA

MB = 2**20


class Simulated:
    """One rank's run of an algorithm on a profile: `iteration(step)` advances the rank's streams
    by one training step. Subclasses override the hooks, as `Algorithm` subclasses do."""

    algo = ""
    cycle = 1                          # steps after which the schedule repeats

    def __init__(self, profile: Profile, rank: Rank, params: dict[str, Any]) -> None:
        self.profile, self.rank, self.p = profile, rank, rank.nproc
        for name, value in params.items():
            setattr(self, name, value)
        self.layers = profile.layers                                  # backward order
        self.tensor_bytes = [b for layer in self.layers for b in layer.tensor_bytes]
        self.tensor_numel = [n for layer in self.layers for n in layer.tensor_numel]
        self.tensor_layer = [i for i, layer in enumerate(self.layers) for _ in layer.tensor_bytes]
        self.element_size = [max(1, b // max(n, 1)) for b, n in zip(self.tensor_bytes, self.tensor_numel)]
        self.link = rank.topology.group_link(self.p, self.p)          # the world's link
        self.build()

    def build(self) -> None:
        """Plan (buckets, groups, partitions) once the profile and p are known."""

    # ------------------------------------------------------------------ the step
    def iteration(self, step: int) -> None:
        r = self.rank
        r.step = step
        self.before_forward(step)
        for i in reversed(range(len(self.layers))):
            self.before_layer(i)
            r.compute(f"forward {self.layers[i].name}", self.layers[i].forward_s)
        t = 0
        for i, layer in enumerate(self.layers):
            r.compute(f"backward {layer.name}", layer.backward_s)
            for _ in layer.tensor_bytes:
                self.grad_ready(t)
                t += 1
        self.after_backward(step)
        self.optimizer_step(step)
        self.after_step(step)

    def issue(self, kind: str, nbytes: int, name: str) -> float:
        """A collective over all ranks (on the world's link); its ready time."""
        return self.rank.issue(kind, nbytes, name, link=self.link)

    # ------------------------------------------------------------------ hooks
    def before_forward(self, step: int) -> None:
        pass

    def before_layer(self, layer: int) -> None:
        pass

    def grad_ready(self, tensor: int) -> None:
        pass

    def after_backward(self, step: int) -> None:
        pass

    def optimizer_step(self, step: int) -> None:
        self.rank.compute("update", self.profile.update_s)

    def after_step(self, step: int) -> None:
        pass


class Bucketed(Simulated):
    """`BucketedAllReduce`: buckets of consecutive tensors (backward order), one all-reduce each."""

    overlap = True

    def plan(self) -> list[int]:
        """Tensors per bucket, in backward order."""
        raise NotImplementedError

    def build(self) -> None:
        counts = self.plan()
        self.bucket_of = [b for b, k in enumerate(counts) for _ in range(k)]
        self.size = counts
        self.nbytes = [0] * len(counts)
        for t, b in enumerate(self.bucket_of):
            self.nbytes[b] += self.tensor_bytes[t]
        self.ready = [0] * len(counts)
        self.handle: list[float | None] = [None] * len(counts)

    def grad_ready(self, tensor: int) -> None:
        b = self.bucket_of[tensor]
        self.ready[b] += 1
        if self.overlap and self.ready[b] == self.size[b]:
            self.launch(b)

    def launch(self, b: int) -> None:
        self.handle[b] = self.issue("all_reduce", self.nbytes[b], f"bucket {b}")

    def after_backward(self, step: int) -> None:
        for b, h in enumerate(self.handle):
            if h is None:
                self.launch(b)
        for h in self.handle:
            self.rank.wait(h)
        self.handle = [None] * len(self.size)
        self.ready = [0] * len(self.size)


class SSGD(Bucketed):
    algo = "ssgd"
    bucket_mb: float

    def plan(self) -> list[int]:
        return group_counts(self.tensor_bytes, self.bucket_mb * MB, self.element_size)


class Fusion(SSGD):
    algo = "fusion"


class NoOverlap(SSGD):
    algo = "no_overlap"
    overlap = False


class WFBP(Bucketed):
    algo = "wfbp"

    def plan(self) -> list[int]:
        return group_counts(self.tensor_bytes, 0, self.element_size)

    def build(self) -> None:
        super().build()
        self.tick = 0.0                 # the cycle tick of the group being fused
        self.fused: list[int] = []      # its buckets (one gradient each)

    def launch(self, b: int) -> None:
        """Per gradient, or into the fusion group of the next cycle tick (module doc)."""
        effects = self.rank.effects
        if not effects.fusion_cycle_s:
            super().launch(b)
            return
        tick = math.ceil(self.rank.t / effects.fusion_cycle_s) * effects.fusion_cycle_s
        fused_bytes = sum(self.nbytes[f] for f in self.fused)
        if self.fused and (tick != self.tick or fused_bytes + self.nbytes[b] > effects.fusion_threshold_bytes):
            self.flush()
        if not self.fused:
            self.tick = tick
        self.fused.append(b)

    def flush(self) -> None:
        """Issue the fused group as one all-reduce at its tick."""
        nbytes = sum(self.nbytes[f] for f in self.fused)
        ready = self.rank.issue("all_reduce", nbytes, f"fused {self.fused[0]}-{self.fused[-1]}",
                                link=self.link, at=self.tick)
        for f in self.fused:
            self.handle[f] = ready
        self.fused = []

    def after_backward(self, step: int) -> None:
        if self.fused:
            self.flush()
        super().after_backward(step)


class MGWFBP(Bucketed):
    algo = "mgwfbp"
    merge: str

    def plan(self) -> list[int]:
        """The algorithm's merge rule (`plan_merge`, param `merge`) on the profile's gradient-ready
        times (relative to the first gradient) and the all-reduce cost of the world's link."""
        done = list(itertools.accumulate(layer.backward_s for layer in self.layers))
        ready = [done[i] for i in self.tensor_layer]
        first = ready[0] if ready else 0.0
        topo, p, link = self.rank.topology, self.p, self.link
        return plan_merge(self.merge, [x - first for x in ready], self.tensor_bytes, self.tensor_numel,
                          lambda n: topo.cost(link, "all_reduce", int(n), p))


class DDP(Bucketed):
    algo = "ddp"
    bucket_mb: float

    def plan(self) -> list[int]:
        tensors = [torch.empty(n, dtype=torch.uint8, device="meta") for n in self.tensor_bytes]
        limits = [dist._DEFAULT_FIRST_BUCKET_BYTES, int(self.bucket_mb * MB)]
        indices, _ = dist._compute_bucket_assignment_by_size(tensors, limits, [False] * len(tensors))
        counts = [len(ix) for ix in indices]
        assert [i for ix in indices for i in ix] == list(range(len(tensors))), indices
        return counts


class PS(Bucketed):
    algo = "ps"
    servers: int
    partition_mb: float
    bucket_mb: float

    def plan(self) -> list[int]:
        if self.servers > self.p:
            raise ConfigError("params.servers", self.servers, f"0..nproc ({self.p})")
        counts = group_counts(self.tensor_bytes, self.bucket_mb * MB, self.element_size)
        size = self.element_size[0] if self.element_size else 4
        piece = int(self.partition_mb * MB) // size
        self.slot_bytes, start = [], 0
        for k in counts:
            _, _, m = server_assignment(self.tensor_numel[start:start + k], self.servers or self.p, piece)
            self.slot_bytes.append(self.p * m * size)
            start += k
        return counts

    def launch(self, b: int) -> None:
        if self.rank.topology.servers is None:
            self.handle[b] = self.issue("reduce_scatter", self.slot_bytes[b], f"push {b}")
        else:
            self.handle[b] = self.push_pull(b)

    def push_pull(self, b: int) -> float:
        """BytePS's push_pull of bucket `b` (module doc): the ready time of its last partition."""
        rank, topo, nbytes = self.rank, self.rank.topology, self.nbytes[b]
        if rank.overheads.active:
            rank.compute(f"issue push_pull {b}", rank.overheads.issue_s + rank.overheads.copy_s(nbytes))
        part = int(self.partition_mb * MB) or nbytes
        done = ready = rank.t
        for k, offset in enumerate(range(0, nbytes, part)):
            n = min(part, nbytes - offset)
            local, remote = topo.byteps_local(n, self.p), topo.byteps_remote(n, self.p)
            t = rank.place(INTRA, f"reduce {b}.{k} {n} B", ready, local)
            t = rank.place(INTER, f"push {b}.{k} {n} B", t, remote)
            t = rank.place(INTER, f"pull {b}.{k} {n} B", t, remote)
            done = max(done, rank.place(INTRA, f"broadcast {b}.{k} {n} B", t, local))
        return done

    def after_backward(self, step: int) -> None:
        if self.rank.topology.servers is not None:
            super().after_backward(step)
            return
        for b, h in enumerate(self.handle):
            if h is None:
                self.launch(b)
        pulls = []
        for b, h in enumerate(self.handle):
            self.rank.wait(h)
            pulls.append(self.issue("all_gather", self.slot_bytes[b], f"pull {b}"))
        for h in pulls:
            self.rank.wait(h)
        self.handle = [None] * len(self.size)
        self.ready = [0] * len(self.size)


class LayerwiseDeferred(Simulated):
    """The update of step t applied per layer in its forward pre-hook of step t+1."""

    pending = False

    def before_layer(self, layer: int) -> None:
        if self.pending:
            self.wait_for(layer)
            self.rank.compute(f"update {self.layers[layer].name}", self.layers[layer].update_s)
            self.pending = layer != 0                # layer 0 (backward order) runs last forward

    def wait_for(self, layer: int) -> None:
        raise NotImplementedError

    def optimizer_step(self, step: int) -> None:
        self.pending = True


class ByteScheduler(LayerwiseDeferred):
    algo = "bytescheduler"
    partition_mb: float
    credit_mb: float

    def build(self) -> None:
        nlayers = len(self.layers)
        self.parts: list[list[tuple[tuple[int, int], int, int]]] = []     # per tensor: (priority, bytes, id)
        self.part_bytes: list[int] = []
        for t, (n, size) in enumerate(zip(self.tensor_numel, self.element_size)):
            step = max(1, int(self.partition_mb * MB) // size)
            layer = nlayers - 1 - self.tensor_layer[t]                  # forward index
            parts = []
            for i in range(0, n, step):
                parts.append(((layer, i), min(step, n - i) * size, len(self.part_bytes)))
                self.part_bytes.append(min(step, n - i) * size)
            self.parts.append(parts)
        self.layer_parts = [[part for t in range(len(self.tensor_layer)) if self.tensor_layer[t] == i
                             for part in self.parts[t]] for i in range(nlayers)]
        self.done = [True] * len(self.part_bytes)
        self.queue: list[tuple[tuple[int, int], int, int]] = []
        self.inflight: deque[tuple[int, float]] = deque()
        self.inflight_bytes = 0

    def grad_ready(self, tensor: int) -> None:
        for part in self.parts[tensor]:
            self.done[part[2]] = False
            heapq.heappush(self.queue, part)
        self._pump()

    def _pump(self, block: bool = False) -> None:
        credit = self.credit_mb * MB
        while self.queue:
            if self.inflight and self.inflight_bytes + self.queue[0][1] > credit:
                if not block:
                    return
                self._retire()
                continue
            priority, nbytes, pid = heapq.heappop(self.queue)
            self.inflight.append((pid, self.issue("all_reduce", nbytes, f"part {priority}")))
            self.inflight_bytes += nbytes

    def _retire(self) -> None:
        pid, ready = self.inflight.popleft()
        self.rank.wait(ready)
        self.done[pid] = True
        self.inflight_bytes -= self.part_bytes[pid]

    def optimizer_step(self, step: int) -> None:
        super().optimizer_step(step)
        self._pump(block=True)

    def wait_for(self, layer: int) -> None:
        for _, _, pid in self.layer_parts[layer]:
            while not self.done[pid]:
                if self.inflight:
                    self._retire()
                self._pump(block=True)


class DeAR(LayerwiseDeferred):
    algo = "dear"
    threshold_mb: float
    nearby_layers: int

    def build(self) -> None:
        nlayers = len(self.layers)
        forward = list(reversed(range(nlayers)))
        counts = fusion_counts([self.layers[i].grad_bytes for i in forward], self.threshold_mb * MB,
                               self.nearby_layers)
        self.group_of = [0] * nlayers
        g_layers = [forward[sum(counts[:g]):sum(counts[:g + 1])] for g in range(len(counts))]
        size = self.element_size[0] if self.element_size else 4
        self.nbytes, self.ntensors = [], []
        for g, layers in enumerate(g_layers):
            numel = sum(n for i in layers for n in self.layers[i].tensor_numel)
            self.nbytes.append((numel + -numel % self.p) * size)
            self.ntensors.append(sum(len(self.layers[i].tensor_bytes) for i in layers))
            for i in layers:
                self.group_of[i] = g
        self.ready = [0] * len(counts)
        self.scatter: list[float | None] = [None] * len(counts)
        self.gather: list[float] = [0.0] * len(counts)
        self.gathered = self.launched = len(counts)

    def grad_ready(self, tensor: int) -> None:
        g = self.group_of[self.tensor_layer[tensor]]
        self.ready[g] += 1
        if self.ready[g] == self.ntensors[g]:
            self.scatter[g] = self.issue("reduce_scatter", self.nbytes[g], f"group {g}")

    def optimizer_step(self, step: int) -> None:
        for g, h in enumerate(self.scatter):
            if h is None:
                self.scatter[g] = self.issue("reduce_scatter", self.nbytes[g], f"group {g}")
        for h in self.scatter:
            self.rank.wait(h)
        self.scatter = [None] * len(self.nbytes)
        self.ready = [0] * len(self.nbytes)
        super().optimizer_step(step)
        self.gathered, self.launched = 0, 0
        self._launch_gather()

    def _launch_gather(self) -> None:
        if self.launched < len(self.nbytes):
            g = self.launched
            self.gather[g] = self.issue("all_gather", self.nbytes[g], f"group {g}")
            self.launched += 1

    def wait_for(self, layer: int) -> None:
        g = self.group_of[layer]
        while self.gathered <= g:
            self.rank.wait(self.gather[self.gathered])
            self.gathered += 1
            self._launch_gather()


SCHEDULES: dict[str, type[Simulated]] = {cls.algo: cls for cls in (
    SSGD, Fusion, NoOverlap, WFBP, MGWFBP, DDP, PS, ByteScheduler, DeAR)}

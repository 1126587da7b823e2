"""Stated models of other libraries' runtimes, which the simulator charges instead of driving the
kit's own algorithm class (`timeline.driver`, every other case): what each library does with the
gradients, in `step.train_step`'s hook order on a profile instead of a model:

    per layer in forward order: its forward_s;
    per layer in backward order: its backward_s, then grad_ready(t) for each of its tensors;
    after_backward; optimizer_step; after_step

- ps with a server placement (`Topology.servers`: `PER_NODE`, 0 or N): BytePS as the survey ran it.
  Each bucket (bucket_mb 0: each tensor, BYTEPS_FUSION_THRESHOLD=0) is one push_pull from the
  hooks, cut into partitions of partition_mb (0: whole); every partition is reduced inside the
  machine (intra-node link), pushed to and pulled from the servers by the machine (inter-node
  link) and broadcast inside it, each stage in the first gap of its link (`Rank.place`), so
  partitions pipeline; after backward all push_pulls are waited for (BytePS's synchronize). Stage
  costs: `Topology.byteps_local`, `Topology.byteps_remote`.

Optimizer updates cost the profile's `update_s`. The per-call costs the profile lacks are charged
by `simulate(..., overheads=...)` (`timeline.costs`), by the same rule as for a driven algorithm.
"""
from __future__ import annotations

from typing import Any

from ...algorithms.buckets import group_counts
from ..layer_profile import Profile
from .streams import Rank
from .topology import INTER, INTRA

MB = 2**20


class Simulated:
    """One rank's run of a stated model on a profile: `iteration(step)` advances the rank's
    streams by one training step. Subclasses override the hooks, as `Algorithm` subclasses do."""

    algo = ""
    cycle = 1                          # steps after which the schedule repeats

    def __init__(self, profile: Profile, rank: Rank, params: dict[str, Any]) -> None:
        self.profile, self.rank, self.p = profile, rank, rank.nproc
        for name, value in params.items():
            setattr(self, name, value)
        self.layers = profile.layers                                  # backward order
        self.tensor_bytes = [b for layer in self.layers for b in layer.tensor_bytes]
        self.tensor_numel = [n for layer in self.layers for n in layer.tensor_numel]
        self.element_size = [max(1, b // max(n, 1)) for b, n in zip(self.tensor_bytes, self.tensor_numel)]
        self.link = rank.topology.group_link(self.p, self.p)          # the world's link
        self.build()

    def build(self) -> None:
        """Plan (buckets, groups, partitions) once the profile and p are known."""

    # ------------------------------------------------------------------ the step
    def iteration(self, step: int) -> None:
        r = self.rank
        r.step = step
        for i in reversed(range(len(self.layers))):
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

    def steps(self, first: int, count: int) -> None:
        """Iterations first .. first + count - 1."""
        for step in range(first, first + count):
            self.iteration(step)

    def issue(self, kind: str, nbytes: int, name: str) -> float:
        """A collective over all ranks (on the world's link); its ready time."""
        return self.rank.issue(kind, nbytes, name, link=self.link)

    # ------------------------------------------------------------------ hooks
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


class BytePS(Bucketed):
    """ps on a server placement: BytePS's push_pull (module doc)."""

    algo = "ps"
    partition_mb: float
    bucket_mb: float

    def plan(self) -> list[int]:
        return group_counts(self.tensor_bytes, self.bucket_mb * MB, self.element_size)

    def launch(self, b: int) -> None:
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


"""Parameter-server architecture built from collectives, so that PS and all-reduce can be
compared on the same emulated network (the PS of Li et al., OSDI 2014; one of the architectures of
Shi et al.'s survey, arXiv 2005.13247, and its BytePS: Jiang et al., OSDI 2020). Two placements.

Update: S-SGD's. Ranks 0..s-1 (s = `servers`, default all p ranks, co-located with the workers as
in BytePS) each host a shard of the gradient keys:

    push:  server j receives sum_i g_i[keys of j]      (reduce to the server, /p)
    pull:  every worker receives every server's keys   (the server's values to all)

Servers on the ranks (`machine_size` 0). Both are built from one collective each per fusion bucket
(buckets as in `fusion`, launched from the gradient hooks): the bucket is laid out as p slots of m
elements, slot j holding server j's keys zero-padded to m = the largest server load (slots j >= s
stay empty); push is a reduce-scatter of that layout and pull an all-gather. A ring reduce-scatter
over p*m elements costs (p-1)*alpha + (p-1)*m/B, which is exactly the time the busiest server needs
to receive (p-1) workers' m elements over its one link, so the emulation charges a PS its server
bottleneck. Keys go to servers greedily (each piece to the least-loaded server, in bucket order):
whole tensors without partitioning; with `partition_mb` > 0 tensors are first cut into pieces of
at most that size (BytePS/ByteScheduler's tensor partitioning), which balances the servers.
Bytes (ledger, per rank and bucket): 2(p-1)*m, which equals one all-reduce, 2(p-1)/p*n, when the
load is balanced (m = n/p with s = p) and is up to p times more when one server holds a large
tensor (the emulated layout charges every rank the busiest server's traffic; in a real PS a
worker sends (p-1)/p*n for s = p and the busiest server receives (p-1)*m).

BytePS's placement (`machine_size` k >= 1; Jiang et al. section 4, as the survey ran BytePS:
`byteps/launch.sh` of HKBU-HPML/ddl-benchmarks). The ranks form machines of k consecutive ranks,
each with a root, its last rank (BytePS's local root); `servers` S separate server machines (0:
one per worker machine, the survey's nworkers / 4 with 4 GPUs each). Each bucket (bucket_mb 0:
each tensor, BYTEPS_FUSION_THRESHOLD=0) is cut into partitions of at most `partition_mb`
(BYTEPS_PARTITION_BYTES; 0: whole), and every partition, as BytePS's push_pull runs it:

    reduce inside the machine to its root      Comm.reduce over the machine's ranks
    push from each root to the servers         Comm.push over the W machines' roots (sum)
    pull back from the servers                 Comm.pull over the roots
    broadcast inside the machine from its root Comm.broadcast over the machine's ranks

then every rank divides by p. The reduces are issued from the gradient hooks as a bucket is full;
BytePS's background threads issue each later stage of a partition as soon as the stage before it
is done, which the class says with `at` (the time its data was there: the handle's ready time on
`comm.now()`'s clock, `Comm.all_reduce`), issuing them after backward, partition by partition,
when it waits for the stage before. A stage with one rank (one machine, or machines of one rank)
is not issued. The servers' sum is held by the roots (push a reduce-scatter, pull an
all-gather among them), timed as S separate server machines (`NetModel.cost`'s push and pull).
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import ConfigError
from .base import Param, RunFacts
from .buckets import Bucket, make_buckets
from .registry import register
from .ssgd import BucketedAllReduce


def server_layout(sizes: list[int], servers: int, piece: int) -> tuple[list[tuple[int, int, int]], int]:
    """For a bucket of tensors of `sizes` elements: the copies that lay it out in server slots
    (slot j = [j*m, (j+1)*m)), as (bucket offset, slot-layout offset, elements) per piece, and m.
    Pieces (whole tensors, or slices of at most `piece` elements when piece > 0) go to the
    least-loaded of `servers` servers (`server_assignment`); a piece that continues the previous
    one in both the bucket and the slots extends its copy. O(pieces) memory, none per element."""
    pieces, owner, m = server_assignment(sizes, servers, piece)
    copies: list[tuple[int, int, int]] = []
    src = 0
    for n, (j, start) in zip(pieces, owner):
        dst = j * m + start
        if copies and copies[-1][0] + copies[-1][2] == src and copies[-1][1] + copies[-1][2] == dst:
            copies[-1] = (copies[-1][0], copies[-1][1], copies[-1][2] + n)
        else:
            copies.append((src, dst, n))
        src += n
    return copies, m


def server_assignment(sizes: list[int], servers: int, piece: int) -> tuple[list[int], list[tuple[int, int]], int]:
    """The pieces of a bucket (elements each), each piece's (server, offset in its slot), and m,
    the largest server load (elements): a slot's length, which sets the bytes of the push and the
    pull (p*m elements) without building the element positions."""
    pieces = []
    for n in sizes:
        step = piece if piece > 0 else n
        pieces += [min(step, n - i) for i in range(0, n, step)]
    load = [0] * servers
    owner = []
    for n in pieces:
        j = min(range(servers), key=lambda k: load[k])
        owner.append((j, load[j]))
        load[j] += n
    return pieces, owner, max(load)


class _PSBucket:
    """A fusion bucket plus its server layout and slot buffers."""

    def __init__(self, bucket: Bucket, servers: int, p: int, piece: int) -> None:
        self.bucket = bucket
        self.copies, m = server_layout([q.numel() for q in bucket.params], servers, piece)
        self.slots = torch.zeros(p * m, dtype=bucket.buffer.dtype, device=bucket.buffer.device)
        self.shard = torch.zeros(m, dtype=bucket.buffer.dtype, device=bucket.buffer.device)


class _Partition:
    """One partition of a bucket on BytePS's placement: its slice of the bucket's buffer, padded to
    a multiple of the machines (`part`) and the root's shard of the servers' sum (`shard`)."""

    def __init__(self, bucket: Bucket, offset: int, numel: int, machines: int) -> None:
        self.bucket, self.offset, self.numel = bucket, offset, numel
        m = -(-numel // machines)
        self.part = torch.zeros(m * machines, dtype=bucket.buffer.dtype, device=bucket.buffer.device)
        self.shard = torch.zeros(m, dtype=bucket.buffer.dtype, device=bucket.buffer.device)
        self.handle: Any = None

    def view(self) -> torch.Tensor:
        return self.bucket.buffer.narrow(0, self.offset, self.numel)


class _Machines:
    """BytePS's placement of `PS` (module doc): the machines' groups, their roots' group, and the
    partitions reduced so far this step, in issue order."""

    def __init__(self, comm: Any, size: int, servers: int, piece: int, buckets: list[Bucket]) -> None:
        p = comm.world_size
        self.comm, self.p, self.servers = comm, p, servers
        machines = [list(range(first, min(first + size, p))) for first in range(0, p, size)]
        self.machine = comm.split_groups(machines)
        self.root = self.machine.ranks[-1]
        self.roots = comm.new_group([ranks[-1] for ranks in machines])
        self.is_root = comm.rank == self.root
        self.parts = {id(b): [_Partition(b, offset, min(piece or b.numel, b.numel - offset), len(machines))
                              for offset in range(0, b.numel, piece or b.numel)] for b in buckets}
        self.issued: list[_Partition] = []

    def reduce(self, bucket: Bucket) -> None:
        """Reduce each partition of the packed `bucket` inside the machine, to its root."""
        for part in self.parts[id(bucket)]:
            part.part.narrow(0, 0, part.numel).copy_(part.view())
            if self.machine.size > 1:
                part.handle = self.comm.reduce(part.part, self.root, group=self.machine, async_op=True)
            self.issued.append(part)

    def finish(self) -> None:
        """Every reduced partition through push, pull and broadcast (module doc), each stage issued
        at the time the stage before it was done; then the buckets' buffers hold the average."""
        comm, bcasts = self.comm, []
        for part in self.issued:
            ready = self._wait(part.handle)
            if self.is_root and self.roots.size > 1:
                h = comm.push(part.shard, part.part, self.servers, self.roots, async_op=True, at=ready)
                h = comm.pull(part.part, part.shard, self.servers, self.roots, async_op=True, at=self._wait(h))
                ready = self._wait(h)
            if self.machine.size > 1:
                bcasts.append(comm.broadcast(part.part, self.root, self.machine, async_op=True,
                                             at=ready if self.is_root else None))
        for h in bcasts:
            h.wait()
        for part in self.issued:
            part.view().copy_(part.part.narrow(0, 0, part.numel)).div_(self.p)
            part.handle = None
        self.issued = []

    def _wait(self, handle: Any) -> float | None:
        """Wait for `handle` (None: nothing issued); the time its data was there (None: now)."""
        if handle is None:
            return None
        handle.wait()
        return handle.entry.t_ready


@register
class PS(BucketedAllReduce):
    name = "ps"
    summary = "parameter server over collectives: push = reduce-scatter to server shards, pull = all-gather"
    params = (
        Param("servers", 0, "server shards on ranks 0..servers-1, or with machine_size that many separate "
              "server machines (0: every rank, or one per worker machine)", lambda v: v >= 0, "an integer >= 0"),
        Param("machine_size", 0, "BytePS's placement: machines of this many consecutive ranks, reduced inside "
              "and pushed / pulled by their roots (0: servers on the ranks)", lambda v: v >= 0, "an integer >= 0"),
        Param("partition_mb", 0.0, "split tensors into pieces of at most this many MB (0: whole tensors)",
              lambda v: v >= 0, "a number >= 0"),
        Param("bucket_mb", 25.0, "fusion bucket size cap in MB (0: one bucket per tensor)", lambda v: v >= 0,
              "a number >= 0"),
    )

    servers: int
    machine_size: int
    partition_mb: float
    bucket_mb: float

    @classmethod
    def check_run(cls, params: dict[str, Any], facts: RunFacts) -> None:
        if params["servers"] > facts.nproc and not params["machine_size"]:
            raise ConfigError("params.servers", params["servers"], f"0..nproc ({facts.nproc})")

    def plan(self) -> list[Bucket]:
        buckets = make_buckets(self.backward_order, self.bucket_mb * 2**20)
        p = self.comm.world_size
        piece = int(self.partition_mb * 2**20) // self.backward_order[0].element_size()
        if self.machine_size:
            self.placement = _Machines(self.comm, self.machine_size, self.servers, piece, buckets)
        else:
            self.ps = {id(b): _PSBucket(b, self.servers or p, p, piece) for b in buckets}
        return buckets

    def _launch(self, bucket: Bucket) -> None:
        """Push: lay the bucket out in server slots and reduce-scatter it to the servers (on BytePS's
        placement: reduce each partition inside the machine, `_Machines.reduce`)."""
        if self.machine_size:
            bucket.pack()
            self.placement.reduce(bucket)
            bucket.handle = self.placement           # launched: `_Machines.finish` completes it
            return
        b = self.ps[id(bucket)]
        bucket.pack()
        b.slots.zero_()
        for src, dst, n in b.copies:
            b.slots.narrow(0, dst, n).copy_(bucket.buffer.narrow(0, src, n))
        bucket.handle = self.comm.reduce_scatter(b.shard, b.slots, op="avg", async_op=True)

    def after_backward(self, step: int) -> None:
        for bucket in self.buckets:
            if bucket.handle is None:
                self._launch(bucket)
        if self.machine_size:
            self.placement.finish()
            for bucket in self.buckets:
                bucket.unpack()
                bucket.handle, bucket.ready = None, 0
            return
        pulls = []
        for bucket in self.buckets:              # pull each bucket as soon as its push is done
            b = self.ps[id(bucket)]
            bucket.handle.wait()
            pulls.append(self.comm.all_gather(b.slots, b.shard, async_op=True))
        for bucket, pull in zip(self.buckets, pulls):
            b = self.ps[id(bucket)]
            pull.wait()
            for src, dst, n in b.copies:
                bucket.buffer.narrow(0, src, n).copy_(b.slots.narrow(0, dst, n))
            bucket.unpack()
            bucket.handle, bucket.ready = None, 0

"""Parameter-server architecture built from collectives, so that PS and all-reduce can be
compared on the same emulated network (BytePS-style sharded servers; the PS of Li et al.,
OSDI 2014; one of the architectures of Shi et al.'s survey, arXiv 2005.13247).

Update: S-SGD's. Ranks 0..s-1 (s = `servers`, default all p ranks, co-located with the workers as
in BytePS) each host a shard of the gradient keys:

    push:  server j receives sum_i g_i[keys of j]      (reduce to the server, /p)
    pull:  every worker receives every server's keys   (the server's values to all)

Both are built from one collective each per fusion bucket (buckets as in `fusion`, launched from
the gradient hooks): the bucket is laid out as p slots of m elements, slot j holding server j's
keys zero-padded to m = the largest server load (slots j >= s stay empty); push is a
reduce-scatter of that layout and pull an all-gather. A ring reduce-scatter over p*m elements
costs (p-1)*alpha + (p-1)*m/B, which is exactly the time the busiest server needs to receive
(p-1) workers' m elements over its one link, so the emulation charges a PS its server
bottleneck. Keys go to servers greedily (each piece to the least-loaded server, in bucket order):
whole tensors without partitioning; with `partition_mb` > 0 tensors are first cut into pieces of
at most that size (BytePS/ByteScheduler's tensor partitioning), which balances the servers.

Bytes (ledger, per rank and bucket): 2(p-1)*m, which equals one all-reduce, 2(p-1)/p*n, when the
load is balanced (m = n/p with s = p) and is up to p times more when one server holds a large
tensor (the emulated layout charges every rank the busiest server's traffic; in a real PS a
worker sends (p-1)/p*n for s = p and the busiest server receives (p-1)*m).
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


@register
class PS(BucketedAllReduce):
    name = "ps"
    summary = "parameter server over collectives: push = reduce-scatter to server shards, pull = all-gather"
    params = (
        Param("servers", 0, "server shards on ranks 0..servers-1 (0: every rank)", lambda v: v >= 0,
              "an integer >= 0"),
        Param("partition_mb", 0.0, "split tensors into pieces of at most this many MB (0: whole tensors)",
              lambda v: v >= 0, "a number >= 0"),
        Param("bucket_mb", 25.0, "fusion bucket size cap in MB (0: one bucket per tensor)", lambda v: v >= 0,
              "a number >= 0"),
    )

    servers: int
    partition_mb: float
    bucket_mb: float

    @classmethod
    def check_run(cls, params: dict[str, Any], facts: RunFacts) -> None:
        if params["servers"] > facts.nproc:
            raise ConfigError("params.servers", params["servers"], f"0..nproc ({facts.nproc})")

    def plan(self) -> list[Bucket]:
        buckets = make_buckets(self.backward_order, self.bucket_mb * 2**20)
        p = self.comm.world_size
        servers = self.servers or p
        piece = int(self.partition_mb * 2**20) // self.backward_order[0].element_size()
        self.ps = {id(b): _PSBucket(b, servers, p, piece) for b in buckets}
        return buckets

    def _launch(self, bucket: Bucket) -> None:
        """Push: lay the bucket out in server slots and reduce-scatter it to the servers."""
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

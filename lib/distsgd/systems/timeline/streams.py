"""One rank's streams: a compute stream and its link(s), advanced by the rule of `Comm._record`.

Data-parallel ranks are symmetric (same profile, same schedule, collectives issued in the same
order), so one rank's timeline is every rank's and the simulator follows one rank only. Its
compute stream runs one task after the other; a collective issued at compute time t on a link
that is free at f starts at max(t, f) and is ready `Topology.cost` seconds later, and the link is
busy until then (one FIFO queue per link, issue order, exactly what `Comm` charges):

    start = max(issue time, link free);   ready = start + cost;   link free <- ready

and `wait(ready)` moves the compute stream to max(now, ready). Every time is a max or a sum of
known times, so no event queue is needed: the closed form of the discrete-event model.

With `Effects.contention` c > 0 (`timeline.effects`), a compute task progresses at rate 1/(1+c)
while any of the rank's collectives is in flight (the union of its links' busy intervals known
when the task starts), at rate 1 otherwise. With `Overheads.transfer` (`timeline.costs`: the
backend's real, un-emulated collective cost on a CPU host), each collective's real transfer runs
on the compute stream's cores from its issue (one real transfer after the other: gloo's thread),
for its real cost, and a compute task progresses at rate 1/`Overheads.transfer_share` meanwhile;
where both apply, the larger slow-down. A collective may be issued at a later time than the
compute clock (`at`: Horovod's fusion cycle tick) or with a cost of its own (`seconds`).

On a GPU host (`Overheads.host_share` set: `timeline.costs`, (e)) the compute stream is the
device's, and the host that issues its work is a clock of its own: issuing a compute task of s device
seconds costs the host `host_share` x s, a collective `issue_s`. The device runs a task no earlier
than the host has begun issuing it and finishes it no earlier than the host has issued all of it; a
collective starts no earlier than the host has issued it. Waiting for a collective is the device's
(NCCL's stream wait), not the host's, so a host ahead of the device hides its costs, and a host
behind it (small kernels, many collectives) sets the pace:

    task:        host0 = host;  host += host_share * s;  start = max(t, host0);  end = max(start + s, host)
    collective:  host += issue_s;  start = max(t, host, link free)
"""
from __future__ import annotations

import heapq
import math
from typing import NamedTuple

from .effects import OFF, Effects
from .costs import NONE, Overheads, out_bytes
from .topology import INTER, Topology

COMPUTE = "compute"


class Interval(NamedTuple):
    """A task on one stream ("compute", or a link "intra" / "inter") from `start` to `end` s (a
    named tuple: a simulation makes one per task, and a tuple is made several times faster than a
    frozen dataclass)."""

    stream: str
    name: str
    start: float
    end: float
    step: int


class Slowdowns:
    """The intervals (start, end, slow-down) during which the compute stream is slowed (module doc),
    kept as a sweep that moves forward with the compute clock, so that pricing a task reads only
    the boundaries it spans: the slow-downs covering `now` (intervals begun at or before it and not
    ended) and, in time order, the boundaries after it. Between two consecutive boundaries b < b'
    the rate of a task is 1 / the largest slow-down of the intervals covering [b, b')."""

    def __init__(self) -> None:
        self.now = -math.inf
        self.covering: dict[float, int] = {}          # slow-down -> intervals covering `now`
        self.starts: list[tuple[float, float]] = []   # heap: (start after now, slow-down it begins)
        self.ends: list[tuple[float, float]] = []     # heap: (end after now, slow-down it ends)
        self.empty: list[float] = []                  # heap: empty intervals after now (boundaries only)

    def add(self, start: float, end: float, slow: float) -> None:
        """An interval from `start` to `end` (>= start) slowing the compute stream by `slow`; its
        boundaries after `now` count (an empty one's too), and it covers [start, end)."""
        if end <= self.now:
            return
        if start >= end:
            heapq.heappush(self.empty, end)
            return
        if start <= self.now:
            self.covering[slow] = self.covering.get(slow, 0) + 1
        else:
            heapq.heappush(self.starts, (start, slow))
        heapq.heappush(self.ends, (end, slow))

    def advance(self, t: float) -> None:
        """Move `now` to `t` (>= now): the intervals begun by then cover it, those ended by then not."""
        while self.starts and self.starts[0][0] <= t:
            _, slow = heapq.heappop(self.starts)
            self.covering[slow] = self.covering.get(slow, 0) + 1
        while self.empty and self.empty[0] <= t:
            heapq.heappop(self.empty)
        while self.ends and self.ends[0][0] <= t:
            _, slow = heapq.heappop(self.ends)
            self.covering[slow] -= 1
        self.now = t

    def next_boundary(self) -> float | None:
        """The first boundary after `now`, or None when every interval has ended."""
        heads = [h[0][0] for h in (self.starts, self.ends) if h] + self.empty[:1]
        return min(heads) if heads else None

    def slow(self) -> float:
        """The largest slow-down covering `now` (1.0 when none)."""
        return max((k for k, n in self.covering.items() if n), default=1.0)

    def finish(self, t: float, work: float) -> float:
        """When a task of `work` seconds begun at `t` (>= now) ends: boundary by boundary, at the
        rate of the slow-downs covering each stretch."""
        self.advance(t)
        a, b = t, self.next_boundary()
        while b is not None:
            slow = self.slow()
            if work * slow <= b - a:
                return a + work * slow
            work -= (b - a) / slow
            self.advance(b)
            a, b = b, self.next_boundary()
        return a + work


class Rank:
    """The compute stream and the links of one (every) rank."""

    def __init__(self, topology: Topology, nproc: int, overheads: Overheads = NONE,
                 effects: Effects = OFF) -> None:
        self.topology, self.nproc, self.overheads, self.effects = topology, nproc, overheads, effects
        self.slowdowns = Slowdowns()                   # the intervals slowing compute
        self.real_free = 0.0                           # when the backend's real transfers are done
        self.pending: dict[float, float] = {}          # ready time -> bytes passed over at its first wait
        self.t = 0.0                                   # the compute stream's clock
        self.host = 0.0                                # a GPU host's clock: all issued by then (module doc)
        self.free: dict[str, float] = {}               # link -> time it becomes free
        self.events: list[Interval] = []
        self.busy = 0.0                                # compute seconds so far
        self.step = 0                                  # tags the events

    def compute(self, name: str, seconds: float) -> None:
        """Run a task of `seconds` on the compute stream (on a GPU host, once the host issues it)."""
        if seconds > 0:
            host_end = None
            if self.overheads.gpu:
                self.t = max(self.t, self.host)
                self.host += self.overheads.host_share * seconds
                host_end = self.host
            end = self.slowdowns.finish(self.t, seconds)
            if host_end is not None:
                end = max(end, host_end)
            self.events.append(Interval(COMPUTE, name, self.t, end, self.step))
            self.busy += end - self.t
            self.t = end

    def issue(self, kind: str, nbytes: int, name: str = "", size: int | None = None,
              link: str = INTER, at: float | None = None, seconds: float | None = None,
              sharers: int | None = None, servers: int = 0) -> float:
        """Issue collective `kind` on `nbytes` over `size` ranks (default: all) on `link` at
        the compute clock (or at `at`, which may be past: a background thread's tick), costing
        `Topology.cost` (or `seconds`) with the NIC shared by `sharers` groups (default: consecutive
        groups of `size`, `Topology.nic_sharers`), a push or pull to `servers` server machines;
        returns its ready time. The compute stream does not wait, but with `overheads` it first
        spends `issue_s` and one pass over `nbytes` (`costs` module)."""
        p = self.nproc if size is None else size
        if self.overheads.gpu:
            self.host += self.overheads.issue_s
        elif self.overheads.active:
            self.compute(f"issue {kind} {name}".rstrip(),
                         self.overheads.issue_s + self.overheads.copy_s(nbytes))
        if seconds is None:
            if sharers is None:
                sharers = self.topology.nic_sharers(p, self.nproc) if link == INTER else 1
            seconds = self.topology.cost(link, kind, nbytes, p, sharers, servers)
        start = max(self.t if at is None else at, self.free.get(link, 0.0),
                    self.host if self.overheads.gpu and at is None else 0.0)
        ready = start + seconds
        if seconds > 0:
            self.free[link] = ready
            if self.effects.contention:
                self.slowdowns.add(start, ready, 1.0 + self.effects.contention)
            label = " ".join(part for part in (kind, name, f"{nbytes} B") if part)
            self.events.append(Interval(link, label, start, ready, self.step))
        real = self.overheads.transfer_s(kind, nbytes, p)
        if real > 0:
            real_start = max(self.t, self.real_free)
            self.real_free = real_start + real
            self.slowdowns.add(real_start, self.real_free, self.overheads.transfer_share)
        if self.overheads.active:
            self.pending[ready] = self.pending.get(ready, 0.0) + out_bytes(kind, nbytes, p)
        return ready

    def wait(self, ready: float) -> None:
        """Block the compute stream until `ready` (a collective's ready time); with `overheads`,
        the first wait for a collective then passes over its result (`costs.out_bytes`)."""
        self.t = max(self.t, ready)
        if self.pending:
            nbytes = self.pending.pop(ready, 0.0)
            if nbytes:
                self.compute("copy out", self.overheads.copy_s(nbytes))

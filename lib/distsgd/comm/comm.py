"""`Comm`: the one place in distsgd that calls torch.distributed.

Every collective goes through here so that it is counted in the `Ledger` and, when a network
model is set, its completion is delayed to what that network would take:

    ready_at = max(issue time, time the link becomes free) + NetModel.cost(kind, n, p, backend)

with the formulas of the backend that runs the collective (`Comm.backend`: NCCL's for CUDA tensors on
an NCCL group, gloo's otherwise; `netmodel.backend_of`).

The real collective still runs and moves the real data; `Handle.wait()` returns no earlier than
`ready_at`. Collectives of one rank queue on its link in issue order (one NIC), so two
overlapping collectives do not both get the full bandwidth. Because the delay is measured from
issue time, computation done between issuing and waiting overlaps with the modeled transfer in
real wall-clock time.

On a GPU (NCCL) the host runs ahead of the device, so with a network model the times are the
device's (`device_sync`): the issue time is read once the device has reached the issue point (its
queued compute done), and `wait()` returns once the collective has completed on the device and
`ready_at` has passed. An emulated transfer thus starts when the data is ready and ends no earlier
than the data arrived, instead of being timed from the host's early issue and hidden behind queued
GPU work. Without a network model nothing is synchronised (a real interconnect's overlap is left
as NCCL makes it); on the CPU (gloo) a collective has run when its call returns, and nothing changes.
"""
from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from typing import Callable

import torch
import torch.distributed as dist

from . import device_sync, teardown
from .ledger import Entry, Ledger
from .netmodel import GLOO, NetModel, backend_of, bytes_sent
from .ring import FutureWork, RingReducer

INIT_METHOD_ENV = "DISTSGD_INIT_METHOD"   # a local run's rendezvous (file://...), set by distsgd.training.launch


def join_group(backend: str, timeout_s: float = 300.0, **kwargs) -> None:
    """`dist.init_process_group` from the environment: RANK and WORLD_SIZE with the
    $DISTSGD_INIT_METHOD rendezvous (a file) when a local launcher set it, so that no TCP store
    listens on the host's interfaces; otherwise torchrun's env:// (MASTER_ADDR, MASTER_PORT).

    Under torchrun the env:// store gets a prefix of the attempt ($TORCHELASTIC_RESTART_COUNT):
    torchrun keeps its store across the restarts of `--max-restarts`, and a restarted gloo group
    would otherwise read its dead predecessor's addresses there and fail to connect."""
    init = os.environ.get(INIT_METHOD_ENV)
    timeout = timedelta(seconds=timeout_s)
    if init:
        kwargs.update(init_method=init, rank=int(os.environ["RANK"]),
                      world_size=int(os.environ["WORLD_SIZE"]))
    elif "TORCHELASTIC_RESTART_COUNT" in os.environ:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        store, _, _ = next(dist.rendezvous("env://", rank, world, timeout=timeout))
        attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
        kwargs.update(store=dist.PrefixStore(f"distsgd/attempt-{attempt}", store), rank=rank,
                      world_size=world)
    dist.init_process_group(backend=backend, timeout=timeout, **kwargs)
    teardown.mark_joined()


_OPS = {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
        "min": dist.ReduceOp.MIN}


def single_tensor_collective(kind: str) -> Callable:
    """torch.distributed's single-tensor reduce-scatter or all-gather: `reduce_scatter_single` /
    `all_gather_single` (torch >= 2.13, which deprecates the older names), else
    `reduce_scatter_tensor` / `all_gather_into_tensor` (torch 2.11 and 2.12, e.g. the NCCL
    machine of reproduce/gpu_check.py). Same arguments (output, input, ..., group, async_op)."""
    new, old = {"reduce_scatter": ("reduce_scatter_single", "reduce_scatter_tensor"),
                "all_gather": ("all_gather_single", "all_gather_into_tensor")}[kind]
    return getattr(dist, new, None) or getattr(dist, old)


@dataclass(frozen=True)
class Group:
    """A set of ranks that communicate together; `pg` is None for the default process group.
    `scope` tags the ledger entries: "global" for the Comm's whole world, "local" for a subgroup."""

    ranks: tuple[int, ...]
    pg: object | None = None
    scope: str = "local"

    @property
    def size(self) -> int:
        return len(self.ranks)


class Handle:
    """An in-flight collective. `wait()` blocks until the data arrived and the modeled time passed."""

    def __init__(self, comm: "Comm", work: "dist.Work | FutureWork", entry: Entry,
                 post: Callable[[], None] | None) -> None:
        self._comm, self._work, self.entry, self._post = comm, work, entry, post
        self.done = False

    def is_completed(self) -> bool:
        return self.done or (self._work.is_completed() and time.perf_counter() >= self.entry.t_ready)

    def wait(self) -> None:
        if self.done:
            return
        t0 = time.perf_counter()
        self._work.wait()
        if self._comm.net is not None:          # on a GPU: until the data is there, not the host's wait
            device_sync.wait_arrived(self._work, self._comm.device)
        remaining = self.entry.t_ready - time.perf_counter()
        if remaining > 0:
            time.sleep(remaining)
        if self._post is not None:
            self._post()
        self.done = True
        self.entry.t_done = time.perf_counter()
        self._comm.ledger.add_wait(self.entry, self.entry.t_done - t0)
        self._comm._pending.discard(self)


class Comm:
    """Collectives with a byte ledger and optional network emulation, for one rank."""

    # collectives move data (the timeline simulator's `SimComm` records them only: a runtime that
    # synchronises the ranks' models at its start, DDP's, skips that there)
    moves_data = True

    def __init__(self, rank: int, world_size: int, device: torch.device,
                 net: NetModel | None = None, ring_reduce_scatter: bool = False,
                 group: "dist.ProcessGroup | None" = None, owns_group: bool = False,
                 backend: str = GLOO) -> None:
        """`group`: the process group of all `world_size` ranks (None: the default group);
        `owns_group`: `close()` destroys the default group (`from_env` joined it); `backend`: whose
        collectives the network model prices (`netmodel.BACKENDS`)."""
        self.rank, self.world_size, self.device, self.net = rank, world_size, device, net
        self.backend = backend
        self.world = Group(tuple(range(world_size)), group, "global")
        self._owns_group = owns_group
        self.ledger = Ledger()
        self.step = 0                       # set by the training loop; tags ledger entries
        self._link_free_at = 0.0
        self._pending: set[Handle] = set()
        self._lock = threading.Lock()
        self._ring = RingReducer() if ring_reduce_scatter else None   # see reduce_scatter
        self._control: "dist.ProcessGroup | None" = None   # see agree
        self._settled = 0                   # settle() calls so far (each its own store key)

    # ------------------------------------------------------------------ set-up
    @classmethod
    def from_env(cls, backend: str, device: torch.device, net: NetModel | None,
                 timeout_s: float, ring_reduce_scatter: bool | None = None) -> "Comm":
        """Join the process group described by the torchrun-style environment variables
        (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT). A peer that does not answer within
        `timeout_s` makes collectives raise instead of hanging.

        `ring_reduce_scatter` (see `reduce_scatter`); None: on gloo when the ranks span several
        hosts (LOCAL_WORLD_SIZE < WORLD_SIZE), where bandwidth is what a reduce-scatter costs.
        On one host gloo's own is cheaper: its loopback transfers cost memory copies, and the
        ring's extra CPU work would compete with computation."""
        kwargs = {}
        if backend == "nccl":
            kwargs["device_id"] = device
        join_group(backend, timeout_s, **kwargs)
        world = dist.get_world_size()
        if ring_reduce_scatter is None:
            local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
            ring_reduce_scatter = backend == "gloo" and local < world
        return cls(dist.get_rank(), world, device, net, ring_reduce_scatter, owns_group=True,
                   backend=backend_of(backend, device.type))

    @classmethod
    def on_group(cls, device: torch.device, net: NetModel | None = None,
                 group: "dist.ProcessGroup | None" = None, ring_reduce_scatter: bool = False) -> "Comm":
        """A Comm on a process group the caller already initialised (a user's script:
        `distsgd.wrap`, `compress.ddp_hook.register`): the default group, or `group`, which must
        hold every rank (the algorithms address ranks by their global number). Never calls
        `init_process_group`; `close()` leaves the group alone."""
        if not dist.is_initialized():
            raise RuntimeError("no default process group: call torch.distributed.init_process_group first")
        world = dist.get_world_size()
        if group is not None and dist.get_world_size(group) != world:
            raise ValueError(f"group: a process group of all {world} ranks, got one of "
                             f"{dist.get_world_size(group)}; the algorithms address ranks by global number")
        return cls(dist.get_rank(), world, device, net, ring_reduce_scatter, group,
                   backend=backend_of(str(dist.get_backend(group)), device.type))

    def new_group(self, ranks: list[int] | tuple[int, ...]) -> Group:
        """A subgroup; every rank must call this with the same `ranks` (torch.distributed rule)."""
        ranks = tuple(sorted(ranks))
        return Group(ranks, dist.new_group(list(ranks)))

    def split_groups(self, groups: list[list[int]]) -> Group:
        """Create all `groups` (a partition of the ranks) and return the one holding this rank."""
        mine = None
        for ranks in groups:
            g = self.new_group(ranks)
            if self.rank in g.ranks:
                mine = g
        if mine is None:
            raise ValueError(f"rank {self.rank} is in none of the groups {groups}")
        return mine

    def close(self) -> None:
        if self._ring is not None:
            self._ring.close()
        if self._owns_group and dist.is_initialized():
            dist.destroy_process_group()

    # ------------------------------------------------------------------ collectives
    def all_reduce(self, tensor: torch.Tensor, op: str = "sum", group: Group | None = None,
                   async_op: bool = False, at: float | None = None) -> Handle | None:
        """In-place all-reduce; op 'avg' divides the sum by the group size on completion. `at`: the
        time on `now()`'s clock at which a runtime's background thread issues it (Horovod's fusion
        cycle tick, past or to come), from which the emulated network times it (default: now)."""
        g = group or self.world
        post = (lambda: tensor.div_(g.size)) if op == "avg" else None
        return self._issue("all_reduce", tensor, g, post, async_op, lambda: dist.all_reduce(
            tensor, op=_OPS[op], group=g.pg, async_op=True), at)

    def reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, op: str = "sum",
                       group: Group | None = None, async_op: bool = False) -> Handle | None:
        """`output` (n/p elements) receives this rank's shard of the reduction of `input` (n).
        With `ring_reduce_scatter` it is a ring of point-to-point messages (`comm.ring`):
        gloo's own reduce-scatter sends what an all-reduce sends, twice the ring's bytes."""
        g = group or self.world
        post = (lambda: output.div_(g.size)) if op == "avg" else None
        return self._issue("reduce_scatter", input, g, post, async_op,
                           lambda: self._reduce_scatter(output, input, op, g))

    def _reduce_scatter(self, output: torch.Tensor, input: torch.Tensor, op: str, g: Group) -> "dist.Work | FutureWork":
        """Launch the reduce-scatter of `reduce_scatter` (the ring with `ring_reduce_scatter`)."""
        if self._ring is not None and g.size > 1:
            return self._ring.reduce_scatter(output, input, op, g.ranks, self.rank, g.pg)
        return single_tensor_collective("reduce_scatter")(output, input, op=_OPS[op], group=g.pg, async_op=True)

    def all_gather(self, output: torch.Tensor, input: torch.Tensor, group: Group | None = None,
                   async_op: bool = False) -> Handle | None:
        """`output` (p*n elements) receives every rank's `input` (n), in rank order."""
        g = group or self.world
        return self._issue("all_gather", output, g, None, async_op, lambda: single_tensor_collective("all_gather")(
            output, input, group=g.pg, async_op=True))

    def gather(self, output: torch.Tensor | None, input: torch.Tensor, dst: int,
               group: Group | None = None, async_op: bool = False) -> Handle | None:
        """Global rank `dst`'s `output` (p*n elements) receives every rank's `input` (n), in rank
        order; the other ranks pass output=None. Recorded with nbytes = n (one rank's message)."""
        g = group or self.world
        if self.rank == dst:
            if output is None or output.numel() != g.size * input.numel():
                raise ValueError(f"gather: rank {dst} needs an output of {g.size} x {input.numel()} elements")
            chunks = list(output.view(g.size, -1).unbind(0))
        else:
            chunks = None
        return self._issue("gather", input, g, None, async_op, lambda: dist.gather(
            input, gather_list=chunks, dst=dst, group=g.pg, async_op=True))

    def reduce(self, tensor: torch.Tensor, dst: int, op: str = "sum", group: Group | None = None,
               async_op: bool = False) -> Handle | None:
        """In-place reduction of every rank's `tensor` into global rank `dst`'s (the others' are
        left unspecified); op 'avg' divides the sum by the group size on `dst`."""
        g = group or self.world
        post = (lambda: tensor.div_(g.size)) if op == "avg" and self.rank == dst else None
        return self._issue("reduce", tensor, g, post, async_op, lambda: dist.reduce(
            tensor, dst=dst, op=_OPS[op], group=g.pg, async_op=True))

    def broadcast(self, tensor: torch.Tensor, src: int, group: Group | None = None,
                  async_op: bool = False, at: float | None = None) -> Handle | None:
        """`tensor` takes the value of global rank `src`'s tensor. `at`: as `all_reduce`'s (a
        runtime's background thread issuing it once the data it sends is there)."""
        g = group or self.world
        return self._issue("broadcast", tensor, g, None, async_op, lambda: dist.broadcast(
            tensor, src=src, group=g.pg, async_op=True), at)

    def push(self, shard: torch.Tensor, input: torch.Tensor, servers: int = 0, group: Group | None = None,
             async_op: bool = False, at: float | None = None) -> Handle | None:
        """A parameter server's push: every rank of `group` (one per worker machine) sends `input`
        (n elements, divisible by the group's size) to `servers` separate server machines (0: as
        many as the group's ranks), which sum it; timed and recorded as that (`NetModel.cost`'s
        "push": the busier of a machine's and a server's NIC). The servers' keys are held by the
        group's ranks: `shard` (n / size elements) receives this rank's share of the sum, a
        reduce-scatter (`reduce_scatter`'s), which `pull` gathers. `at`: as `all_reduce`'s."""
        g = group or self.world
        return self._issue("push", input, g, None, async_op, lambda: self._reduce_scatter(shard, input, "sum", g),
                           at, servers)

    def pull(self, output: torch.Tensor, shard: torch.Tensor, servers: int = 0, group: Group | None = None,
             async_op: bool = False, at: float | None = None) -> Handle | None:
        """A parameter server's pull: every rank of `group` receives the servers' sum (`output`, n
        elements) of a `push` (timed and recorded as `NetModel.cost`'s "pull" from `servers`
        separate server machines, 0: as many as the group's ranks), gathered from the shards
        the group's ranks hold (an all-gather). `at`: as `all_reduce`'s."""
        g = group or self.world
        return self._issue("pull", output, g, None, async_op, lambda: single_tensor_collective("all_gather")(
            output, shard, group=g.pg, async_op=True), at, servers)

    def all_reduce_future(self, tensor: torch.Tensor, op: str = "avg",
                          group: Group | None = None) -> torch.futures.Future:
        """In-place all-reduce returning a Future of `tensor` (for DDP communication hooks)."""
        g = group or self.world
        post = (lambda: tensor.div_(g.size)) if op == "avg" else None
        return self._future("all_reduce", tensor, g, post, tensor, lambda: dist.all_reduce(
            tensor, op=_OPS[op], group=g.pg, async_op=True))

    def all_gather_future(self, output: torch.Tensor, input: torch.Tensor,
                          group: Group | None = None) -> torch.futures.Future:
        """`all_gather` returning a Future of `output` (for DDP communication hooks)."""
        g = group or self.world
        return self._future("all_gather", output, g, None, output, lambda: single_tensor_collective("all_gather")(
            output, input, group=g.pg, async_op=True))

    def _future(self, kind: str, tensor: torch.Tensor, g: Group, post: Callable[[], None] | None,
                result: torch.Tensor, launch: Callable[[], "dist.Work"]) -> torch.futures.Future:
        """Issue a collective and return a Future of `result` that completes no earlier than the
        modeled time (after `post`), so DDP's overlap is measured against the emulated network. With a
        network model, a thread waits for the collective on the device (`device_sync.wait_arrived`) and
        then for the modeled time; without, the Future completes with the collective's."""
        entry = self._record(kind, tensor, g)
        work = launch()
        out: torch.futures.Future = torch.futures.Future()

        def finish() -> None:
            if post is not None:
                post()
            entry.t_done = time.perf_counter()
            out.set_result(result)

        def finish_when_ready() -> None:
            device_sync.wait_arrived(work, self.device)
            time.sleep(max(0.0, entry.t_ready - time.perf_counter()))
            finish()

        def on_done(fut: torch.futures.Future) -> None:
            try:
                fut.value()
            except Exception as exc:  # propagate a failed collective to DDP
                out.set_exception(exc)
                return
            if self.net is not None:
                threading.Thread(target=finish_when_ready, daemon=True).start()
            else:
                finish()

        work.get_future().add_done_callback(on_done)
        return out

    def barrier(self) -> None:
        """Synchronise all ranks; not counted in the ledger (used for bookkeeping only)."""
        dist.barrier(group=self.world.pg)

    def settle(self) -> None:
        """Return once every rank has completed every collective it issued before this call: a
        rendezvous through the default group's store, not a collective, so that when it returns no
        rank's backend is still carrying one. A rank that tears down or exits right after its last
        collective (even `barrier`, itself a collective) while a peer is still in it aborted that
        peer ("terminate called without an active exception", gloo on 2 cores: the README's `wrap`
        example under torchrun in 6 of 30 runs, a plain torch DDP script in 4 of 10; with `settle`
        at the end of `distsgd.finalize`, 0 of 24). The last rank to arrive sets a key that the
        others wait for in the store (a blocking wait, no polling: on more ranks than cores a
        polling rank would take the CPU from the one it waits for)."""
        store = dist.distributed_c10d._get_default_store()
        self._settled += 1
        key = f"distsgd/settled/{self._settled}"
        if store.add(key, 1) == self.world_size:
            store.set(f"{key}/all", "1")
        store.wait([f"{key}/all"])

    def reduce_uncounted(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        """All-reduce for bookkeeping (metrics); not in the ledger and never delayed. A tensor on
        another device than this communicator's (a CPU tensor of timings on NCCL, which reduces
        only GPU tensors) goes through this device and back, so the result is in it on return."""
        work = tensor if tensor.device == self.device else tensor.to(self.device)
        dist.all_reduce(work, op=_OPS[op], group=self.world.pg)
        if op == "avg":
            work.div_(self.world_size)
        return tensor if work is tensor else tensor.copy_(work)

    def agree(self, tensor: torch.Tensor, op: str = "max") -> torch.Tensor:
        """In-place all-reduce (op 'max' or 'sum') of a small bookkeeping tensor on a control
        group of its own (gloo, through the CPU). Unlike `reduce_uncounted` it does not queue
        behind the data plane's in-flight collectives (CoCoD-SGD's model average, SSD-SGD's
        pushes, DeAR's all-gathers), so it neither waits for them nor delays them. Not in the
        ledger. The group is created at the first call, which every rank must make at the same
        point (a torch.distributed rule)."""
        if op not in ("max", "sum"):
            raise ValueError(f"agree: op must be 'max' or 'sum', got {op!r}")
        if self._control is None:
            self._control = dist.new_group(backend="gloo")
        cpu = tensor.cpu()
        dist.all_reduce(cpu, op=_OPS[op], group=self._control)
        tensor.copy_(cpu)
        return tensor

    def now(self) -> float:
        """This rank's clock in seconds (`time.perf_counter`): what an algorithm that times itself
        (MG-WFBP's gradient-ready times, DeAR's tuner) reads, so that the simulator's `SimComm`
        answers with the simulated clock through the same call."""
        return time.perf_counter()

    def work(self, name: str) -> None:
        """Announce an algorithm's own pass over its buffers that no layer of the model times (one
        of its class's `Algorithm.work_passes`), called where the pass runs.
        Nothing here: in a run the pass takes its real time. The simulator's `SimComm` charges it
        on the compute stream at its measured cost (`timeline.costs.Overheads.work_s`)."""

    # ------------------------------------------------------------------ accounting
    def pending(self) -> int:
        """Number of issued async collectives not yet waited on."""
        return len(self._pending)

    def assert_drained(self) -> None:
        """Raise if an async handle was never waited on (a leak that would make results wrong)."""
        if self._pending:
            kinds = sorted(h.entry.kind for h in self._pending)
            raise RuntimeError(f"rank {self.rank}: {len(kinds)} collectives never waited: {kinds}")

    def _record(self, kind: str, tensor: torch.Tensor, g: Group, at: float | None = None,
                servers: int = 0) -> Entry:
        nbytes = tensor.numel() * tensor.element_size()
        if self.net is not None:                # on a GPU: the issue time is when the device gets here
            device_sync.synchronize(self.device)
        now = time.perf_counter() if at is None else at
        modeled = self.net.cost(kind, nbytes, g.size, servers, self.backend) if self.net else 0.0
        with self._lock:
            start = max(now, self._link_free_at) if self.net else now
            ready = start + modeled
            if self.net:
                self._link_free_at = ready
        entry = Entry(step=self.step, kind=kind, scope=g.scope, nbytes=nbytes,
                      sent=bytes_sent(kind, nbytes, g.size), group_size=g.size,
                      t_issue=now, modeled_s=modeled, t_ready=ready)
        return self.ledger.record(entry)

    def _issue(self, kind: str, tensor: torch.Tensor, g: Group, post: Callable[[], None] | None,
               async_op: bool, launch: Callable[[], "dist.Work | FutureWork"],
               at: float | None = None, servers: int = 0) -> Handle | None:
        entry = self._record(kind, tensor, g, at, servers)
        handle = Handle(self, launch(), entry, post)
        if async_op:
            self._pending.add(handle)
            return handle
        handle.wait()
        return None

"""The simulator runs the algorithm's own code: its class, driven over a layer profile.

`drive` sets the algorithm of `lib/distsgd/algorithms` up exactly as a run does
(`Algorithm.setup(model, optimizer, comm, config.facts())`) and trains it with the kit's own step
(`step.train_step`: before_forward, forward, backward with the gradient hooks, after_backward,
optimizer_step, after_step), on stand-ins that move no data and keep the time of one rank
(`streams.Rank`; data-parallel ranks are alike, so one rank's timeline is every rank's):

- `ProfileNet`: the profile's layers as modules on the meta device (shapes, no storage; on the CPU
  for a class whose runtime reads tensors back, `Algorithm.simulated_storage`), in forward order, each holding parameters of the profile's gradient sizes; a layer's forward charges its
  `forward_s` on the compute stream, its backward (autograd, one node per parameter) its
  `backward_s` before the gradients of its parameters, in the profile's order, are accumulated, so
  the algorithm's gradient hooks fire when the profile says the gradients are ready.
- `SimComm`: the `Comm` the algorithm calls, recording instead of transmitting. Each collective is
  charged on its group's link (`Topology.ranks_link`) by the rule of `Comm`'s emulation (`Rank.issue`: start when issued and
  the link is free, ready `Topology.cost` later; the per-call costs of `timeline.costs` on the
  compute stream); its handle's `wait()` moves the compute stream to the ready time. A collective
  issued as a future (a DDP communication hook's, `Comm.all_reduce_future`) is waited for when the
  backward pass that issued it ends, as DDP's reducer waits for its buckets' futures. Its world's
  process group is a fake one (`fake_process_group`): torch's DDP runs its own reducer on it, whose
  bucket collectives reach the simulator through the class's communication hook. Its ledger holds
  what the algorithm issued, with the columns of a run's comm.csv. `now()` is the simulated clock:
  an algorithm that times itself (MG-WFBP's gradient-ready times, DeAR's tuner) measures the
  profile's times through the interface it uses in a run. An algorithm's own pass over its buffers
  that no layer times, declared by its class (`Algorithm.work_passes`) and announced by
  `Comm.work(name)`, is charged on the compute stream at its cost (`Overheads.work_s`: measured,
  or one `update_s`); a pass its class does not declare is an error.
- Updates: `optimizer.step()` charges the profile's `update_s`; a layer whose parameters were
  changed in place since its last forward (a layer-wise deferred update: DeAR, ByteScheduler)
  charges its own `update_s` before its forward.

The steady state: the algorithm's communication repeats every `cycle` steps from step `start`
(`Algorithm.steady_state`); `simulate` runs the steps before `start` (a long one that repeats
itself by its ends: `timeline.simulator.transient`), then `warmup + measured` steps, and checks that
the measured steps issued what the cycle before them did.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd
import torch
from torch import nn
from torch._C._distributed_c10d import FakeProcessGroup, FakeStore, ProcessGroup

from ...algorithms.base import Algorithm
from ...comm.comm import Comm, Group
from ...comm.ledger import Entry
from ...comm.netmodel import bytes_sent
from ...training.config import Config
from ..layer_profile import Layer, Profile
from ...lr_schedule import lr_at
from ...training.step import train_step
from .streams import Rank

# the columns of a run's comm.csv that do not depend on wall time, in issue order
COLLECTIVE_COLUMNS = ["step", "kind", "scope", "nbytes", "group_size", "rank"]


class SimHandle:
    """An issued collective: `wait()` moves the rank's compute stream to its ready time."""

    def __init__(self, comm: "SimComm", entry: Entry) -> None:
        self._comm, self.entry = comm, entry
        self.done = False

    def is_completed(self) -> bool:
        return self.done or self._comm.clock.t >= self.entry.t_ready

    def wait(self) -> None:
        if self.done:
            return
        self._comm.clock.wait(self.entry.t_ready)
        self.done = True
        self.entry.t_done = self._comm.clock.t
        self._comm._pending.discard(self)


class _LinkCost:
    """`comm.net` of a SimComm: the cost of a collective over the world on its link, what an
    algorithm that plans with the network model (MG-WFBP) asks."""

    def __init__(self, clock: Rank, link: str) -> None:
        self.clock, self.link = clock, link

    def cost(self, kind: str, nbytes: int, p: int) -> float:
        return self.clock.topology.cost(self.link, kind, nbytes, p)


def fake_process_group(rank: int, size: int) -> ProcessGroup:
    """A process group of `size` ranks, this one `rank`, whose collectives complete at once and move
    nothing (torch's fake backend, `FakeProcessGroup`), made without `init_process_group`: the
    simulator's process leaves torch.distributed's default group alone."""
    group = ProcessGroup(FakeStore(), rank, size)
    group._set_default_backend(ProcessGroup.BackendType.CUSTOM)
    backend = FakeProcessGroup._create_internal(rank, size)
    for device in ("cpu", "meta"):
        group._register_backend(torch.device(device), ProcessGroup.BackendType.CUSTOM, backend)
    return group


class SimComm(Comm):
    """A `Comm` for one rank of `clock.nproc` alike ranks that charges its collectives on `clock`
    (module doc) and moves no data. It is the last rank: a worker, not the root of a root-based
    scheme (the compression family's rank 0, whose aggregation of every worker's payload would cost
    the simulator p decompressions per bucket and the timeline nothing: meta tensors cost no time).
    Reductions of bookkeeping values (`reduce_uncounted`, `agree`) see every rank holding this
    rank's value. `update_s` and `compute_s` (the profile's optimizer update and training step)
    price the algorithm's announced work (`work`), one of the passes its class declares (`passes`).
    Its world's process group is a fake one (`fake_process_group`)."""

    moves_data = False

    def __init__(self, clock: Rank, update_s: float, compute_s: float, passes: tuple[str, ...] = (),
                 device: torch.device = torch.device("meta")) -> None:
        super().__init__(clock.nproc - 1, clock.nproc, device,
                         group=fake_process_group(clock.nproc - 1, clock.nproc))
        self.clock, self.update_s, self.compute_s, self.passes = clock, update_s, compute_s, passes
        self.net = _LinkCost(clock, clock.topology.group_link(clock.nproc, clock.nproc))
        self._futures: list[SimHandle] = []        # issued as futures in this backward pass

    def now(self) -> float:
        return self.clock.t

    def new_group(self, ranks: list[int] | tuple[int, ...]) -> Group:
        return Group(tuple(sorted(ranks)))

    def close(self) -> None:
        pass

    def barrier(self) -> None:
        pass

    def settle(self) -> None:
        pass

    def reduce_uncounted(self, tensor: torch.Tensor, op: str = "sum") -> torch.Tensor:
        return tensor.mul_(self.world_size) if op == "sum" else tensor

    def agree(self, tensor: torch.Tensor, op: str = "max") -> torch.Tensor:
        return self.reduce_uncounted(tensor, op)

    def work(self, name: str) -> None:
        """The algorithm's pass `name`, on the compute stream at `Overheads.work_s` (module doc);
        RuntimeError unless its class declares it (`Algorithm.work_passes`)."""
        if name not in self.passes:
            raise RuntimeError(f"Comm.work({name!r}): not a pass the algorithm's class declares "
                               f"(work_passes: {', '.join(self.passes) or 'none'})")
        self.clock.compute(name, self.clock.overheads.work_s(name, self.update_s, self.compute_s))

    def _charge(self, kind: str, tensor: torch.Tensor, g: Group, at: float | None = None,
                servers: int = 0) -> SimHandle:
        """Record collective `kind` on `tensor` over `g` and charge it on the group's link
        (`Topology.ranks_link`), issued now or at `at` (a background thread's time,
        `Comm.all_reduce`), a push or pull to `servers` server machines; its handle."""
        nbytes = tensor.numel() * tensor.element_size()
        clock = self.clock
        link, sharers = clock.topology.ranks_link(g.ranks, clock.nproc)
        t_issue = clock.t if at is None else at
        ready = clock.issue(kind, nbytes, size=g.size, link=link, at=at, sharers=sharers, servers=servers)
        entry = self.ledger.record(Entry(step=self.step, kind=kind, scope=g.scope, nbytes=nbytes,
                                         sent=bytes_sent(kind, nbytes, g.size), group_size=g.size,
                                         t_issue=t_issue, modeled_s=ready - t_issue, t_ready=ready))
        return SimHandle(self, entry)        # no data: no `post` (the average's division)

    def _issue(self, kind: str, tensor: torch.Tensor, g: Group, post: Any, async_op: bool,
               launch: Any, at: float | None = None, servers: int = 0) -> SimHandle | None:
        handle = self._charge(kind, tensor, g, at, servers)
        if async_op:
            self._pending.add(handle)
            return handle
        handle.wait()
        return None

    def _future(self, kind: str, tensor: torch.Tensor, g: Group, post: Any, result: torch.Tensor,
                launch: Any) -> torch.futures.Future:
        """A future of `result`, complete at once (no data); its collective is waited for, in issue
        order, when the backward pass that issued it ends (DDP's reducer waits for every bucket's
        future there): an autograd callback of that pass, queued by its first future."""
        handle = self._charge(kind, tensor, g)
        if not self._futures:
            torch.autograd.Variable._execution_engine.queue_callback(self._wait_futures)
        self._futures.append(handle)
        future: torch.futures.Future = torch.futures.Future()
        future.set_result(result)
        return future

    def _wait_futures(self) -> None:
        futures, self._futures = self._futures, []
        for handle in futures:
            handle.wait()

    def collectives(self) -> pd.DataFrame:
        """Every collective issued, one row each in issue order (`COLLECTIVE_COLUMNS`)."""
        rows = [{"step": e.step, "kind": e.kind, "scope": e.scope, "nbytes": e.nbytes,
                 "group_size": e.group_size, "rank": self.rank} for e in self.ledger.entries]
        return pd.DataFrame(rows, columns=COLLECTIVE_COLUMNS)


class _Backward(torch.autograd.Function):
    """Identity on the activation; its backward charges `seconds` (when given) and returns `zero`
    as the gradient of `param` (a zero of its shape), which autograd accumulates (firing
    `param`'s hooks) before it runs the next node."""

    @staticmethod
    def forward(ctx: Any, h: torch.Tensor, param: torch.Tensor, zero: torch.Tensor, clock: Rank,
                name: str, seconds: float | None) -> torch.Tensor:
        ctx.zero, ctx.clock, ctx.name, ctx.seconds = zero, clock, name, seconds
        return h.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        if ctx.seconds is not None:
            ctx.clock.compute(f"backward {ctx.name}", ctx.seconds)
        return grad, ctx.zero, None, None, None, None


_DTYPES = {8: torch.float64, 4: torch.float32, 2: torch.float16, 1: torch.uint8}


def _zeros(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Zeros of `shape`; on the meta device, which holds no values, made by `torch.empty` (without
    the meta kernels' Python decomposition of `torch.zeros`)."""
    if device.type == "meta":
        return torch.empty(shape, dtype=dtype, device=device)
    return torch.zeros(shape, dtype=dtype, device=device)


class ProfileLayer(nn.Module):
    """One profile layer: parameters of its gradient tensors' sizes (meta), its times."""

    def __init__(self, layer: Layer, clock: Rank, device: torch.device) -> None:
        super().__init__()
        self.layer, self.clock = layer, clock
        self.names = [f"t{i}" for i in range(len(layer.tensor_numel))]
        # registered in reverse, so that the model's reversed parameters (the algorithms' backward
        # order) are the profile's rows
        for name, numel, nbytes in reversed(list(zip(self.names, layer.tensor_numel, layer.tensor_bytes))):
            dtype = _DTYPES[max(1, nbytes // max(numel, 1))]
            self.register_parameter(name, nn.Parameter(_zeros((numel,), dtype, device)))
        self.tensors = [getattr(self, name) for name in self.names]          # the profile's order
        # the gradients: one zero each, expanded (no storage of their size on the CPU)
        self.zeros = [_zeros((), t.dtype, device).expand(t.shape) for t in self.tensors]
        self.versions = self._versions()

    def _versions(self) -> list[int]:
        return [p._version for p in self.tensors]

    def seen(self) -> bool:
        """True if a parameter was changed in place since the last call (an update applied)."""
        now = self._versions()
        changed = now != self.versions
        self.versions[:] = now           # in place: no `nn.Module.__setattr__` on every forward
        return changed

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        if self.seen():
            self.clock.compute(f"update {self.layer.name}", self.layer.update_s)
        self.clock.compute(f"forward {self.layer.name}", self.layer.forward_s)
        # backward visits these nodes last-created first: the profile's first tensor fires first,
        # after the layer's backward time
        for i in reversed(range(len(self.names))):
            h = _Backward.apply(h, self.tensors[i], self.zeros[i], self.clock, self.layer.name,
                                self.layer.backward_s if i == 0 else None)
        return h


class ProfileNet(nn.Module):
    """The profile's layers in forward order (module doc)."""

    def __init__(self, profile: Profile, clock: Rank, device: torch.device) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(ProfileLayer(layer, clock, device) for layer in reversed(profile.layers))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            h = block(h)
        return h

    def seen(self) -> None:
        """Record the parameters as they are (after an optimizer step, charged as a whole)."""
        for block in self.blocks:
            block.seen()


@dataclass
class Driven:
    """An algorithm set up on a profile: its comm (the ledger) and the rank's clock."""

    algorithm: Algorithm
    comm: SimComm
    clock: Rank
    net: nn.Module
    optimizer: torch.optim.Optimizer
    model: ProfileNet
    config: Config

    def steps(self, first: int, count: int) -> None:
        """Train steps first .. first + count - 1 as the run's loop takes them: the learning rate
        of the step (`Algorithm.learning_rate` of the config's schedule: STL-SGD's stages), then
        `step.train_step`."""
        x = torch.zeros(1, device="meta")
        for step in range(first, first + count):
            self.clock.step = step
            lr = self.algorithm.learning_rate(step, lr_at(self.config, step))
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            train_step(self.algorithm, self.optimizer, self.net, lambda out, _y: out.sum(), x, x, step)

    def signature(self, steps: range) -> list[tuple]:
        """What was issued in `steps`, step by step relative to its first (kind, scope, bytes, group)."""
        by_step: dict[int, list[tuple]] = {s: [] for s in steps}
        for e in self.comm.ledger.entries:
            if e.step in by_step:
                by_step[e.step].append((e.kind, e.scope, e.nbytes, e.group_size))
        return [tuple(by_step[s]) for s in steps]


def drive(profile: Profile, cls: type[Algorithm], params: dict[str, Any], clock: Rank,
          steps: int = 10**6) -> Driven:
    """`cls` with resolved `params` set up on `profile` for `clock.nproc` ranks (module doc): a
    run's config of `steps` steps with the defaults (SGD, the algorithm's own learning-rate
    schedule), validated as a run's is (ConfigError on a bad setting), then `setup` as a run does,
    on the meta device (the CPU where the class asks for storage, `Algorithm.simulated_storage`)."""
    config = Config(algo=cls.name, params=dict(params), nproc=clock.nproc, steps=steps).validate()
    device = torch.device("cpu" if cls.simulated_storage else "meta")
    model = ProfileNet(profile, clock, device)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)

    def charge(_optimizer: torch.optim.Optimizer, _args: Any, _kwargs: Any) -> None:
        clock.compute("update", profile.update_s)
        model.seen()

    optimizer.register_step_post_hook(charge)
    comm = SimComm(clock, profile.update_s, profile.compute_s, cls.work_passes, device)
    algorithm = cls(**params)
    net = algorithm.setup(model, optimizer, comm, config.facts())
    return Driven(algorithm, comm, clock, net, optimizer, model, config)


def issued_collectives(profile: Profile, cls: type[Algorithm], params: dict[str, Any], clock: Rank,
                       steps: int) -> pd.DataFrame:
    """The collectives of a run of `steps` steps from a fresh start, its `finalize` included,
    one row each in issue order (`COLLECTIVE_COLUMNS`): what the run's comm.csv lists for this rank."""
    driven = drive(profile, cls, params, clock, steps)
    driven.steps(0, steps)
    driven.comm.step = steps - 1
    driven.algorithm.finalize()
    return driven.comm.collectives()


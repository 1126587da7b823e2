"""The algorithm interface: a distributed training algorithm seen from one rank.

The training step (`distsgd.training.step.train_step`, used by the loop, the benchmarks and the tests)
calls, every step:

    algo.before_forward(step)     # e.g. apply a delayed update
    loss.backward()               # gradient hooks installed in build() may fire here
    algo.after_backward(step)     # gradient communication
    algo.optimizer_step(step)     # usually optimizer.step()
    algo.after_step(step)         # model averaging, launching background communication

and `finalize()` once at the end (drain in-flight communication so that every rank holds the
model that is evaluated). During the run the loop evaluates (test metrics, training objective)
inside ``with algo.evaluating():``; by default that is each rank's own model as it is. An
algorithm whose authors evaluate another model swaps it in there and restores the training state
on exit: LIEC-SGD evaluates the average of the workers' models and trains on from each worker's
own. The periodic-averaging algorithms (local_sgd, kavg, vrl_sgd, ...) keep the default: between
averagings every rank evaluates its own model, and their `finalize()` averages at the end.

What a subclass declares, each in one place:

- hyper-parameters: `params`, a tuple of `Param`s (name, default, help, check; set with
  ``--set NAME=VALUE``, listed by ``python -m distsgd list``), each also annotated on the class
  (``period: int``); `__init__` sets every resolved value as that attribute (``self.period``).
- runtime state: `state_fields`, the names of the attributes that hold it (annotated and
  commented next to it); the fields of a class and of its bases together are what
  `state_dict()` saves and `load_state_dict()` restores, so a checkpoint holds all of it.
  A field is a tensor (restored in place, so views of it stay valid), an object with its own
  state_dict / load_state_dict (`Period`, `ErrorFeedback`), or a plain value (number, string,
  None, list); tensors and plain containers only, so ``torch.load(weights_only=True)`` reads it.
- `build()`: creates that state (and buffers, hooks) once the model, optimizer, comm and the run's
  facts (`RunFacts`: the few fields of the run's config an algorithm reads, not the whole `Config`)
  are set. `setup()`, which the loop calls, stores those four, sets `self.net = model` (the module
  the loop runs forward on), calls `build()` and returns `self.net`; a `build()` that wraps the
  model (DDP) replaces `self.net`. A subclass calls `super().build()` first.
"""
from __future__ import annotations

import contextlib
import copy
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator

import torch
from torch.utils.hooks import RemovableHandle

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..comm import Comm


@dataclass(frozen=True)
class RunFacts:
    """What an algorithm knows of the run besides its own parameters: the fields of the run's
    config it checks or reads (`Config.facts()` makes them, with the config's defaults). The
    learning rate itself reaches the algorithm per step (`learning_rate`)."""

    nproc: int                          # ranks
    batch_size: int                     # the config's mini-batch size per rank
    optimizer: str                      # "sgd" or "adam": what the loop's optimizer is
    momentum: float                     # its momentum
    seed: int                           # the run's seed (compression's random streams)
    schedule: str                       # the learning-rate schedule's name (`distsgd.lr_schedule`)
    warm_start_epochs: int              # the VRL-SGD authors' epoch schedule (`algorithms.epochs`)
    epoch_average: bool


@dataclass(frozen=True)
class Param:
    """One algorithm parameter: its default, a one-line help, and an optional check.
    `per_rank`: the value is a list with one entry per rank (or empty)."""

    name: str
    default: Any
    help: str
    check: Callable[[Any], bool] | None = None
    allowed: str = ""
    per_rank: bool = False

    def validate(self, value: Any) -> Any:
        if isinstance(self.default, bool) and not isinstance(value, bool):
            raise ConfigError(f"params.{self.name}", value, "true, false")
        if isinstance(self.default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if type(value) is not type(self.default) and self.default is not None:
            raise ConfigError(f"params.{self.name}", value,
                              self.allowed or f"a {type(self.default).__name__}")
        if self.check is not None and not self.check(value):
            raise ConfigError(f"params.{self.name}", value, self.allowed or None)
        return value


class Algorithm:
    """Base class: plain local SGD steps, no communication. Subclasses override the hooks."""

    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    params: ClassVar[tuple[Param, ...]] = ()
    state_fields: ClassVar[tuple[str, ...]] = ()     # this class's runtime state (see the module doc)
    # the learning-rate schedule of a config that names none (Config.schedule ''; Config.validate
    # gives a stagewise one stage_steps = `lr_schedule.default_stage_steps` where stage_steps is 0)
    default_schedule: ClassVar[str] = "constant"
    # whether a run may give it the VRL-SGD authors' epoch schedule (Config.warm_start_epochs,
    # epoch_average): the classes that run it (`epochs.EpochSchedule`) and those it leaves unchanged
    epoch_schedule: ClassVar[bool] = False
    # its own passes over its buffers that no layer times, each announced where it runs with
    # `Comm.work(name)` (the simulator charges them; `timed_work` runs them for measuring)
    work_passes: ClassVar[tuple[str, ...]] = ()
    # whether the timeline simulator's stand-in model holds storage (CPU tensors) instead of meta
    # tensors: a runtime that reads tensors back (torch's DDP reducer, its rebuilt bucket order)
    simulated_storage: ClassVar[bool] = False

    model: torch.nn.Module                 # the model of this rank
    net: torch.nn.Module                   # the module the loop runs forward on (model or a wrapper)
    optimizer: torch.optim.Optimizer
    comm: "Comm"
    facts: RunFacts
    epoch_steps: int                       # the run's steps per epoch (0: not known)

    def __init__(self, **params: Any) -> None:
        """`params`: every parameter's value, resolved once before (`resolve_params`: by
        `Config.validate` for a run, by `create` for a name and some parameters)."""
        names = {p.name for p in self.params}
        if set(params) != names:
            raise TypeError(f"{type(self).__name__} takes its resolved parameters {sorted(names)}, got "
                            f"{sorted(params)} (create(name, params) fills in the defaults)")
        for name, value in params.items():
            setattr(self, name, value)
        self._handles: list[RemovableHandle] = []   # hooks on the model, removed by close()

    @classmethod
    def resolve_params(cls, given: dict[str, Any]) -> dict[str, Any]:
        """Defaults filled in and every value checked; unknown names raise ConfigError."""
        known = {p.name: p for p in cls.params}
        for key in given:
            if key not in known:
                raise ConfigError("params", key,
                                  sorted(known) or "none", f"algorithm {cls.name!r} has no such parameter")
        return {name: p.validate(given.get(name, p.default)) for name, p in known.items()}

    @classmethod
    def check_run(cls, params: dict[str, Any], facts: RunFacts) -> None:
        """Checks that involve the rest of the run (e.g. a group count dividing nproc);
        raise ConfigError. Called by Config.validate, before any process starts."""

    def timed_work(self) -> dict[str, Callable[[], None]]:
        """Each pass of `work_passes` as a call that runs it once on this rank's current gradients
        (set up, after a backward), for `systems.measure_costs` to time. Default: none."""
        return {}

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """(start, cycle): from step `start` on, what the algorithm issues repeats every `cycle`
        steps (its averaging period; 1 for a per-step rule). The timeline simulator measures a
        cycle after two and checks that it repeats (`timeline.simulate`). Default (0, 1). A cycle of
        0: what it issues follows the clock, not the steps (Horovod's fusion cycle), so no cycle of
        steps repeats it; the simulator measures two steps after two and checks nothing."""
        return 0, 1

    @classmethod
    def state_names(cls) -> tuple[str, ...]:
        """The runtime state: `state_fields` of the bases first, then of this class."""
        return tuple(name for c in reversed(cls.__mro__) for name in vars(c).get("state_fields", ()))

    # ------------------------------------------------------------------ hooks
    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, comm: "Comm",
              facts: RunFacts, epoch_steps: int = 0) -> torch.nn.Module:
        """Store the pieces, build(); return the module the loop runs forward on (self.net).
        `epoch_steps`: the run's steps per epoch (`distsgd.training.loop.steps_per_epoch`; 0: unknown),
        which the epoch schedule of `facts` (warm_start_epochs, epoch_average) counts in."""
        self.model, self.optimizer, self.comm, self.facts = model, optimizer, comm, facts
        self.epoch_steps = epoch_steps
        self.net = model
        self.build()
        return self.net

    def build(self) -> None:
        """Create the runtime state, buffers and hooks (model, optimizer, comm, facts are set)."""

    def learning_rate(self, step: int, scheduled: float) -> float:
        """The learning rate of `step`; `scheduled` is the config's schedule (`distsgd.lr_schedule`),
        the same for every algorithm. An algorithm that acts per stage of it (STL-SGD's period)
        overrides this, before the step is taken."""
        return scheduled

    @classmethod
    def batch_sizes(cls, params: dict[str, Any], facts: RunFacts) -> list[int]:
        """Every rank's mini-batch size under `params` (also checked against the ranks' shares of
        the data before any process starts, `distsgd.training.preflight`). Default: facts.batch_size on
        every rank; an algorithm with per-rank batch sizes (CoCoD-SGD's proportional sampling
        for heterogeneous workers) overrides it."""
        return [facts.batch_size] * facts.nproc

    def batch_size(self) -> int:
        """This rank's mini-batch size, asked once after setup()."""
        return self.batch_sizes(self.param_values(), self.facts)[self.comm.rank]

    def param_values(self) -> dict[str, Any]:
        """The resolved parameters, by name (the typed attributes as a dict)."""
        return {p.name: getattr(self, p.name) for p in self.params}

    def before_forward(self, step: int) -> None:
        pass

    def after_backward(self, step: int) -> None:
        pass

    def optimizer_step(self, step: int) -> None:
        self.optimizer.step()

    def after_step(self, step: int) -> None:
        pass

    def finalize(self) -> None:
        pass

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """Inside: `self.model` is the model to evaluate during the run (see the module doc).
        Default: this rank's own model, untouched."""
        yield

    def hook(self, handle: RemovableHandle) -> None:
        """Keep a hook registered on the model (a gradient or forward hook) for close()."""
        self._handles.append(handle)

    def close(self) -> None:
        """Remove this algorithm's hooks from the model. A hook is a bound method held by a
        parameter: the cycle parameter -> hook -> algorithm -> model -> parameter passes through
        the tensor's hook table, which Python's garbage collector does not see, so without this
        the model and every buffer of the algorithm live as long as the process (a benchmark
        that builds a model per case grew by 180 MB per ResNet-18 case)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def metrics(self) -> dict[str, float]:
        """Extra per-step values logged as metrics columns (e.g. the current period)."""
        return {}

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """This rank's runtime state between two steps: every field of `state_names()` (copies)."""
        return {name: _save(getattr(self, name)) for name in self.state_names()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the state saved by state_dict() into an algorithm set up on the same model."""
        names = self.state_names()
        if set(state) != set(names):
            raise KeyError(f"{self.name} state has fields {sorted(state)}, expected {sorted(names)}")
        for name in names:
            current = getattr(self, name)
            if isinstance(current, torch.Tensor):
                current.copy_(state[name])
            elif hasattr(current, "load_state_dict"):
                current.load_state_dict(state[name])
            else:
                setattr(self, name, copy.deepcopy(state[name]))


def _save(value: Any) -> Any:
    """A state field as tensors and plain containers, detached from the running algorithm."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if hasattr(value, "state_dict"):
        return value.state_dict()
    return copy.deepcopy(value)

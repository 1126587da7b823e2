"""The algorithm interface: a distributed training algorithm seen from one rank.

The training loop (distsgd.train) calls, every step:

    algo.before_forward(step)     # e.g. apply a delayed update
    loss.backward()               # gradient hooks installed in setup() may fire here
    algo.after_backward(step)     # gradient communication
    algo.optimizer_step(step)     # usually optimizer.step()
    algo.after_step(step)         # model averaging, launching background communication

and `finalize()` once at the end (drain in-flight communication so that every rank holds the
model that is evaluated). An algorithm declares its own parameters as `Param`s; they are set
with ``--set NAME=VALUE`` and listed by ``python -m distsgd list``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import torch
from torch.utils.hooks import RemovableHandle

from ..errors import ConfigError

if TYPE_CHECKING:
    from ..comm import Comm
    from ..config import Config


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

    def __init__(self, **params: Any) -> None:
        self.p = self.resolve_params(params)
        self.model: torch.nn.Module
        self.optimizer: torch.optim.Optimizer
        self.comm: Comm
        self.config: Config
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
    def check_config(cls, params: dict[str, Any], config: "Config") -> None:
        """Checks that involve the rest of the config (e.g. a group count dividing nproc);
        raise ConfigError. Called by Config.validate, before any process starts."""

    # ------------------------------------------------------------------ hooks
    def setup(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer, comm: "Comm",
              config: "Config") -> torch.nn.Module:
        """Remember the pieces; return the module the loop runs forward on (may be a wrapper)."""
        self.model, self.optimizer, self.comm, self.config = model, optimizer, comm, config
        return model

    def learning_rate(self, step: int, scheduled: float) -> float:
        """The learning rate of `step`; `scheduled` is the config's schedule. Algorithms that
        own the schedule (stagewise methods) override this."""
        return scheduled

    @classmethod
    def batch_sizes(cls, params: dict[str, Any], config: "Config") -> list[int]:
        """Every rank's mini-batch size under `params` (also checked against the ranks' shares of
        the data before any process starts, `distsgd.preflight`). Default: config.batch_size on
        every rank; an algorithm with per-rank batch sizes (CoCoD-SGD's proportional sampling
        for heterogeneous workers) overrides it."""
        return [config.batch_size] * config.nproc

    def batch_size(self) -> int:
        """This rank's mini-batch size, asked once after setup()."""
        return self.batch_sizes(self.p, self.config)[self.comm.rank]

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

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        pass

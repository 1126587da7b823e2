"""KAVG: K-step averaging, with optional local reductions and reduction momentum.

K-step averaging (Zhou & Cong, IJCAI 2018, Algorithm 1): each of the P learners runs K local
optimizer steps (SGD or Adam), then one global reduction averages the models:

    x_i <- optimizer_step(x_i, grad F(x_i; xi_i))           every step
    x_i <- (1/P) sum_j x_j               if (t + 1) mod K == 0      (global reduction)

Local reductions and reduction momentum (Cong, Yang & Zhou, "Reducing global reductions in
large-scale distributed training", ICPP 2019 workshops). The abstract fixes the ideas, not the
formulas; the concrete rules below are our reconstruction (SPECS.md section i, [proposed]):

  * the P learners form `local_groups` groups of consecutive ranks (e.g. the GPUs of a node);
    every `local_period` steps a group averages its models (a cheap subgroup all-reduce);
  * every `period` steps all learners average globally (local averaging is skipped then);
  * reduction momentum mu (block momentum, as in BMUF): with x_g the model after the previous
    global reduction and xbar the new global average,

        v   <- mu * v + (xbar - x_g)
        x_g <- x_g + v           and every learner continues from x_g,

    computed identically on every rank from the same all-reduced xbar, so no server is needed.
    mu = 0 gives plain averaging.

Optimizer state at a reduction (`optimizer_state`): "local" keeps each learner's momentum / Adam
moments, "average" averages them with the model in the same scope (one more all-reduce),
"reset" clears them.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import torch

from ..errors import ConfigError
from .base import Algorithm, Param, RunFacts
from .flat import average, averaged_tensors, flatten, unflatten_into
from .period import Period
from .registry import register

if TYPE_CHECKING:
    from ..comm import Group

STATE_MODES = ("local", "average", "reset")


@register
class KAVG(Algorithm):
    name = "kavg"
    summary = "K-step averaging; optional local (group) reductions and global reduction momentum"
    params = (
        Param("period", 4, "local steps between global model averagings (K, or K_g with groups)",
              lambda v: v >= 1, "an integer >= 1"),
        Param("local_groups", 1, "number of groups of consecutive ranks for local reductions",
              lambda v: v >= 1, "an integer >= 1 that divides nproc"),
        Param("local_period", 0, "steps between local (in-group) averagings; 0: none (K_l)",
              lambda v: v >= 0, "an integer >= 0"),
        Param("reduction_momentum", 0.0, "block momentum mu on the global pseudo-gradient",
              lambda v: 0 <= v < 1, "0 <= mu < 1"),
        Param("optimizer_state", "local", "optimizer state at a reduction: local, average, reset",
              lambda v: v in STATE_MODES, ", ".join(STATE_MODES)),
    )

    period: int
    local_groups: int
    local_period: int
    reduction_momentum: float
    optimizer_state: str

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """Global reductions every `period` steps, local ones every `local_period`."""
        return 0, math.lcm(params["period"], params["local_period"] or 1)

    state_fields = ("clock", "local_clock", "anchor", "velocity")
    clock: Period                       # when the next global reduction falls (K)
    local_clock: Period                 # when the next local reduction falls (K_l; unused if 0)
    anchor: torch.Tensor                # x_g: the model after the last global reduction, flat
    velocity: torch.Tensor              # v: the reduction momentum (both empty when mu = 0)

    @classmethod
    def check_run(cls, params: dict, facts: RunFacts) -> None:
        if facts.nproc % params["local_groups"]:
            raise ConfigError("params.local_groups", params["local_groups"],
                              f"a divisor of nproc={facts.nproc}")
        if params["local_period"] and params["local_groups"] in (1, facts.nproc) and facts.nproc > 1:
            raise ConfigError("params.local_groups", params["local_groups"],
                              f"1 < local_groups < nproc={facts.nproc} when local_period > 0",
                              "a local reduction needs groups smaller than the world")

    def build(self) -> None:
        self.tensors: list[torch.Tensor] = averaged_tensors(self.model)
        self.group: Group | None = None
        if self.local_period:
            size = self.comm.world_size // self.local_groups
            self.group = self.comm.split_groups([list(range(g * size, (g + 1) * size))
                                                 for g in range(self.local_groups)])
        self.clock = Period(self.period)
        self.local_clock = Period(self.local_period or 1)
        mu = self.reduction_momentum
        self.anchor = flatten(self.tensors) if mu else torch.zeros(0)
        self.velocity = torch.zeros_like(self.anchor)

    # ------------------------------------------------------------------ reductions
    def _state_tensors(self) -> list[torch.Tensor]:
        """Floating-point optimizer state shaped like its parameter (momentum, Adam moments)."""
        out = []
        for p in self.model.parameters():
            for v in self.optimizer.state.get(p, {}).values():
                if torch.is_tensor(v) and v.is_floating_point() and v.shape == p.shape:
                    out.append(v)
        return out

    def _average(self, group: "Group | None", momentum: bool = True) -> None:
        flat = average(self.comm, self.tensors, group)
        if group is None and self.reduction_momentum and momentum:
            self.velocity.mul_(self.reduction_momentum).add_(flat - self.anchor)
            self.anchor.add_(self.velocity)
            unflatten_into(self.anchor, self.tensors)
        if self.optimizer_state == "reset":
            self.optimizer.state.clear()
        elif self.optimizer_state == "average":
            state = self._state_tensors()
            if state:
                average(self.comm, state, group)

    def after_step(self, step: int) -> None:
        local = self.group is not None and self.local_clock.tick()
        if self.clock.tick():
            self._average(None)
        elif local:
            self._average(self.group)

    def finalize(self) -> None:
        """A last plain global average (no momentum extrapolation) so every rank holds the
        model that is evaluated."""
        if self.clock.cut():
            self._average(None, momentum=False)

    def metrics(self) -> dict[str, float]:
        return {"period": self.period}

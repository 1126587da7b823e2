"""The local-update algorithms as the simulator runs them (see `schedules` for the step's hooks).

Every step is a local step: forward, backward, the optimizer step (`update_s`). Communication,
as the algorithms in lib/distsgd/algorithms issue it (periods counted by their `Period`):

- local_sgd: at the end of every `period` steps one blocking all-reduce of the model.
- cocod_sgd: at the end of every period, wait for the all-reduce launched one period earlier,
  then launch the next one (async): the average overlaps the next `period` local steps.
  Identical ranks only (batch_weights and speeds empty).
- ssd_sgd (the steps-delay stage, after its `warmup` S-SGD steps): every step an async
  all-reduce of the gradient (push); the step after a period's end waits for that period's
  pushes (the pull) and applies their `period` server steps (`update_s` each), then every step
  runs the local rule (`update_s`); with measured overheads, each its measured share of the
  training step instead (`Overheads.ssd_s`: the cosdcasgd rule and the server step are several
  passes over the flat model, not one optimizer update).
- kavg: every `period` steps a blocking global all-reduce of the model (on the world's link);
  otherwise every `local_period` steps (if > 0) one within each of `local_groups` groups of
  consecutive ranks (on the intra-node link when the groups fit in nodes, `Topology`); with
  optimizer_state=average each reduction also all-reduces the momentum buffers (model-sized).

The model is the profile's parameters (`Profile.grad_bytes`); floating-point buffers (BatchNorm
statistics), which local_sgd, cocod_sgd and kavg average with them, are not in the profile.
"""
from __future__ import annotations

import math

from ..algorithms.period import Period
from ..errors import ConfigError
from .schedules import Simulated


class LocalSGD(Simulated):
    algo = "local_sgd"
    period: int

    def build(self) -> None:
        self.clock = Period(self.period)
        self.cycle = self.period

    def after_step(self, step: int) -> None:
        if self.clock.tick():
            self.rank.wait(self.issue("all_reduce", self.profile.grad_bytes, "model average"))


class CoCoDSGD(Simulated):
    algo = "cocod_sgd"
    period: int
    batch_weights: list
    speeds: list

    def build(self) -> None:
        for name in ("batch_weights", "speeds"):
            if getattr(self, name):
                raise ConfigError(f"params.{name}", getattr(self, name), "[]",
                                  "the simulator's ranks are identical")
        self.clock = Period(self.period)
        self.cycle = self.period
        self.inflight: float | None = None

    def after_step(self, step: int) -> None:
        if self.clock.tick():
            if self.inflight is not None:
                self.rank.wait(self.inflight)
            self.inflight = self.issue("all_reduce", self.profile.grad_bytes, "model average")


class SSDSGD(Simulated):
    algo = "ssd_sgd"
    period: int

    def build(self) -> None:
        self.clock = Period(self.period)
        self.cycle = self.period
        self.current: list[float] = []          # pushes since the last pull
        self.due: list[float] = []              # pushes the last pull waits for

    def optimizer_step(self, step: int) -> None:
        self.current.append(self.issue("all_reduce", self.profile.grad_bytes, "push"))
        if self.due:
            for ready in self.due:
                self.rank.wait(ready)
            self.rank.compute("server steps", len(self.due) * self._cost("server"))
            self.due = []
        self.rank.compute("local rule", self._cost("rule"))

    def _cost(self, which: str) -> float:
        return self.rank.overheads.ssd_s(which, self.profile.update_s, self.profile.compute_s)

    def after_step(self, step: int) -> None:
        if self.clock.tick():
            self.due, self.current = self.current, []


class KAVG(Simulated):
    algo = "kavg"
    local_groups: int
    local_period: int
    optimizer_state: str

    def build(self) -> None:
        if self.p % self.local_groups:
            raise ConfigError("params.local_groups", self.local_groups, f"a divisor of nproc={self.p}")
        self.group = self.p // self.local_groups
        self.group_link = self.rank.topology.group_link(self.group, self.p)
        self.clock = Period(self.period)
        self.local_clock = Period(self.local_period or 1)
        self.cycle = math.lcm(self.period, self.local_period or 1)

    def _average(self, size: int, link: str, name: str) -> None:
        for what in ("model", "momentum")[:1 + (self.optimizer_state == "average")]:
            ready = self.rank.issue("all_reduce", self.profile.grad_bytes, f"{name} {what}", size, link)
            self.rank.wait(ready)

    def after_step(self, step: int) -> None:
        local = self.local_period > 0 and self.local_clock.tick()
        if self.clock.tick():
            self._average(self.p, self.link, "global")
        elif local:
            self._average(self.group, self.group_link, "local")


LOCAL_UPDATES = {cls.algo: cls for cls in (LocalSGD, CoCoDSGD, SSDSGD, KAVG)}

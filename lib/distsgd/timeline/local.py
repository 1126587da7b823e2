"""SSD-SGD as a stated model (the steps-delay stage, after its `warmup` S-SGD steps): its own class
(`algorithms.ssd_sgd`) runs its local rule and server step on flat buffers the simulator cannot
price, so this model charges them (issue 32: until the class announces them, it is not driven).

Every step an async all-reduce of the gradient (push); the step after a period's end waits for
that period's pushes (the pull) and applies their `period` server steps (`update_s` each), then
every step runs the local rule (`update_s`); with measured overheads, each its measured share of
the training step instead (`Overheads.ssd_s`: the cosdcasgd rule and the server step are several
passes over the flat model, not one optimizer update). The model is the profile's parameters
(`Profile.grad_bytes`).
"""
from __future__ import annotations

from ..algorithms.period import Period
from .schedules import Simulated


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

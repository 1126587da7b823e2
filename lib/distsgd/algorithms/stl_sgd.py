"""STL-SGD: stagewise local SGD (Shen, Cheng, Liu & Xu, AAAI 2021, arXiv 2006.06377).

Local SGD whose communication period grows as the learning rate decays. Stage s = 0, 1, ...
runs local SGD (averaging every k_s local steps) with a fixed learning rate gamma_s for T_s
steps, starting from the average the previous stage ended with:

    gamma_s = gamma_0 / 2^s,    T_s = T_0 * 2^s                  (the stagewise schedule)
    k_s     = k_0 * 2^s         (IID data;     k_s ~ 1/gamma_s)
    k_s     = k_0 * 2^(s/2)     (non-IID data; k_s ~ 1/sqrt(gamma_s))

(the strongly convex / PL algorithm STL-SGD^sc). The abstract fixes the idea ("increases the
communication period gradually along with decreasing learning rate") and the complexities
O(N log T) (IID) and O(N^1/2 T^1/2) (non-IID) communications; the constants above are our
reconstruction of the paper's Algorithm 1 ([recollection] in SPECS.md section d).

Only the period is this module's: gamma_s and T_s are the run's ``schedule="stagewise"`` with
``stage_steps`` = T_0 (`distsgd.lr_schedule`), which the baselines (S-SGD, local SGD with a fixed
period) run too, so that a comparison differs in the period alone (SPECS d, "Fair comparison").
A config that names no schedule gets the stagewise one (`default_schedule`), with T_0 from the run
length unless ``stage_steps`` is given: `lr_schedule.default_stage_steps`, three full stages
(T_0 + 2 T_0 + 4 T_0 <= the steps after warm-up; 300 steps: T_0 = 42).
Under ``schedule="step"`` (x0.1 decays; the variant for deep nets, [proposed] in SPECS) a stage
ends at each decay and the period scales with the inverse decay: k_s = k_0 * 10^s (IID) or
k_0 * 10^(s/2) (non-IID). Generally k_s = k_0 * r^s or k_0 * r^(s/2), r = 1 / `lr_schedule.DECAY`.

Each stage ends with an average, so the next stage starts from the same model on every rank.
The current period and stage are logged as metrics.

The stages are read from the rate itself (`learning_rate`): a stage ends where the rate falls, and
lr_ratio = (the highest rate so far) / (the current one), so k_s = k_0 * r^s on the kit's staged
schedules, and in a user's own loop (`distsgd.wrap`) the user's scheduler sets the stages: a rate
constant within stages (StepLR, MultiStepLR, ...). A rate that falls every step (cosine) makes
every step a stage: an average every step.
"""
from __future__ import annotations

import math
from typing import Any

from ..errors import ConfigError
from ..lr_schedule import EXTERNAL, STAGED
from .base import Param, RunFacts
from .local_sgd import LocalSGD
from .registry import register


GROWTHS = ("iid", "noniid")


def period_for(k0: int, lr_ratio: float, growth: str) -> int:
    """k = k0 * lr_ratio (IID) or k0 * sqrt(lr_ratio) (non-IID), lr_ratio = lr_0 / lr_now."""
    scale = lr_ratio if growth == "iid" else math.sqrt(lr_ratio)
    return max(1, round(k0 * scale))


@register
class STLSGD(LocalSGD):
    name = "stl_sgd"
    summary = "stagewise local SGD: the period grows at each stage of the learning-rate schedule"
    params = (
        Param("period", 2, "initial communication period k_0", lambda v: v >= 1, "an integer >= 1"),
        Param("growth", "iid", "period growth: iid (k ~ 1/lr) or noniid (k ~ 1/sqrt(lr))",
              lambda v: v in GROWTHS, ", ".join(GROWTHS)),
    )
    default_schedule = "stagewise"
    epoch_schedule = False       # not one of the VRL-SGD authors' methods: its stages are its own schedule

    period: int
    growth: str

    state_fields = ("stage", "peak_lr", "last_lr")
    stage: int                          # s, the current stage (the period k_s is clock.length)
    peak_lr: float                      # the highest rate so far (the end of any warm-up)
    last_lr: float                      # the rate of the previous step

    @classmethod
    def check_run(cls, params: dict[str, Any], facts: RunFacts) -> None:
        if facts.schedule not in (*STAGED, EXTERNAL):
            raise ConfigError("schedule", facts.schedule, STAGED,
                              "STL-SGD grows its period at each stage of the learning-rate schedule")

    def build(self) -> None:
        super().build()
        self.stage = 0
        self.peak_lr = self.last_lr = 0.0

    def learning_rate(self, step: int, scheduled: float) -> float:
        """The schedule's rate; fixes this step's stage and period before the step is taken:
        a new stage where the rate fell, k = period_for(k_0, peak rate / rate)."""
        if scheduled < self.last_lr:
            self.stage += 1
            if self.clock.cut():
                self.average()                  # a new stage starts from the average
        self.last_lr = scheduled
        self.peak_lr = max(self.peak_lr, scheduled)
        self.clock.length = period_for(self.period, self.peak_lr / scheduled, self.growth)
        return scheduled

    def metrics(self) -> dict[str, float]:
        return {"period": self.clock.length, "stage": self.stage}

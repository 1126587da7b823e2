"""STL-SGD: stagewise local SGD (Shen, Cheng, Liu & Xu, AAAI 2021, arXiv 2006.06377).

Local SGD whose communication period grows as the learning rate decays. Stage s = 0, 1, ...
runs local SGD (averaging every k_s local steps) with a fixed learning rate for T_s steps,
starting from the average the previous stage ended with:

    gamma_s = gamma_0 / 2^s,    T_s = T_0 * 2^s,
    k_s     = k_0 * 2^s         (IID data;     k_s ~ 1/gamma_s)
    k_s     = k_0 * 2^(s/2)     (non-IID data; k_s ~ 1/sqrt(gamma_s))

(the strongly convex / PL algorithm STL-SGD^sc). The abstract fixes the idea ("increases the
communication period gradually along with decreasing learning rate") and the complexities
O(N log T) (IID) and O(N^1/2 T^1/2) (non-IID) communications; the constants above are our
reconstruction of the paper's Algorithm 1 ([recollection] in SPECS.md section d).

`form="step"` is the variant for deep nets ([proposed] in SPECS): the learning rate follows the
run's own schedule (e.g. step decay) and the period scales with the inverse decay factor,
k_t = k_0 * lr_0 / lr_t (IID) or k_0 * sqrt(lr_0 / lr_t) (non-IID).

Each stage ends with an average, so the next stage starts from the same model on every rank.
The current period and stage are logged as metrics.
"""
from __future__ import annotations

import math
from .base import Param
from .local_sgd import LocalSGD
from .registry import register

GROWTHS = ("iid", "noniid")
FORMS = ("stagewise", "step")


def stage_of(step: int, stage_steps: int) -> int:
    """Stage holding `step` when stage s lasts stage_steps * 2^s steps."""
    return int(math.floor(math.log2(step / stage_steps + 1)))


def stage_end(stage: int, stage_steps: int) -> int:
    """First step after stage `stage` (stages 0..s together last stage_steps * (2^(s+1) - 1))."""
    return stage_steps * (2 ** (stage + 1) - 1)


def period_for(k0: int, lr_ratio: float, growth: str) -> int:
    """k = k0 * lr_ratio (IID) or k0 * sqrt(lr_ratio) (non-IID), lr_ratio = lr_0 / lr_now."""
    scale = lr_ratio if growth == "iid" else math.sqrt(lr_ratio)
    return max(1, round(k0 * scale))


@register
class STLSGD(LocalSGD):
    name = "stl_sgd"
    summary = "stagewise local SGD: the period grows as the learning rate decays"
    params = (
        Param("period", 2, "initial communication period k_0", lambda v: v >= 1, "an integer >= 1"),
        Param("stage_steps", 64, "length T_0 of the first stage (stagewise form)",
              lambda v: v >= 1, "an integer >= 1"),
        Param("growth", "iid", "period growth: iid (k ~ 1/lr) or noniid (k ~ 1/sqrt(lr))",
              lambda v: v in GROWTHS, ", ".join(GROWTHS)),
        Param("form", "stagewise", "stagewise (own lr/2 and 2T stages) or step (run's lr schedule)",
              lambda v: v in FORMS, ", ".join(FORMS)),
    )

    period: int
    stage_steps: int
    growth: str
    form: str

    state_fields = ("stage", "prev_lr")
    stage: int                          # s, the current stage (the period k_s is clock.length)
    prev_lr: float | None               # the last step's learning rate ("step" form: did it decay?)

    def build(self) -> None:
        super().build()
        self.stage, self.prev_lr = 0, None

    def learning_rate(self, step: int, scheduled: float) -> float:
        """Also fixes this step's stage and period, before the step is taken."""
        if self.form == "stagewise":
            stage = stage_of(step, self.stage_steps)
            lr = self.config.lr / 2 ** stage
        else:                                   # a stage ends whenever the schedule decays
            lr = scheduled
            decayed = self.prev_lr is not None and lr < self.prev_lr
            stage = self.stage + int(decayed)
        self.prev_lr = lr
        if stage != self.stage and self.clock.cut():
            self.average()                      # a new stage starts from the average
        self.stage = stage
        self.clock.length = period_for(self.period, max(1.0, self.config.lr / lr), self.growth)
        return lr

    def metrics(self) -> dict[str, float]:
        return {"period": self.clock.length, "stage": self.stage}

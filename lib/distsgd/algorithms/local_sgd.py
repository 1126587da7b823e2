"""Local SGD (periodic model averaging; Stich 2019, Lin et al. 2020; "K-step averaging").

Each worker takes `period` = k local optimizer steps, then all workers average their models:

    x_i <- optimizer_step(x_i, grad F(x_i; xi_i))               every step
    x_i <- (1/p) * sum_j x_j          if (t + 1) mod k == 0      (one all-reduce of the model)

With k = 1 and SGD (with or without momentum and weight decay, all linear in x) this equals
synchronous SGD. Optimizer state (momentum buffers) stays local. Floating-point buffers
(BatchNorm statistics) are averaged with the parameters, in the same flat all-reduce.
`finalize()` averages once more if local steps were taken since the last average.

The VRL-SGD authors' epoch schedule (`Config.warm_start_epochs`, `Config.epoch_average`; see
`distsgd.algorithms.epochs`): S-SGD steps before the first local step, and a model average at
every epoch end that leaves the period clock alone.
"""
from __future__ import annotations

from typing import Any

import torch

from .base import Algorithm, Param
from .epochs import EpochSchedule
from .flat import average, averaged_tensors
from .period import Period
from .registry import register


@register
class LocalSGD(EpochSchedule, Algorithm):
    name = "local_sgd"
    summary = "local SGD: `period` local steps, then a global model average"
    params = (
        Param("period", 4, "local steps between model averagings", lambda v: v >= 1, "an integer >= 1"),
    )
    period: int

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """An average every `period` steps (STL-SGD: k_0 under a constant rate)."""
        return 0, params["period"]

    state_fields = ("clock",)
    clock: Period                       # when the next average falls (k = its length)

    def build(self) -> None:
        self.tensors: list[torch.Tensor] = averaged_tensors(self.model)
        self.clock = Period(self.period)

    def average(self) -> None:
        average(self.comm, self.tensors)

    def after_backward(self, step: int) -> None:
        if self.warm(step):                 # the warm start: S-SGD
            self.average_gradients()

    def after_step(self, step: int) -> None:
        if self.warm(step):                 # the clock starts after the warm start
            return
        if self.clock.tick():
            self.average()
        elif self.epoch_ends(step):         # x_i <- mean_j x_j; the clock goes on
            self.average_models()

    def finalize(self) -> None:
        if self.clock.cut():
            self.average()

    def metrics(self) -> dict[str, float]:
        return {"period": self.period}

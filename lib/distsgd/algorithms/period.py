"""When an averaging period ends: the one period counter of the averaging algorithms (local SGD,
KAVG, VRL-SGD, STL-SGD, SSD-SGD's pulls, CoCoD-SGD's launches).

Like torch's `model_averaging.averagers.PeriodicModelAverager`, it decides only *when*; the
algorithm averages (with `flat.average`) and keeps its own correction term. With period length
k and t_s = local steps since the last period end,

    tick():  t_s <- t_s + 1;   the step ends a period iff t_s >= k   (then t_s <- 0)

Ticked once per step from step 0, a fixed k gives the ends (t + 1) mod k == 0. `length` may change
between ticks (STL-SGD's growing k_s, VRL-SGD-W's 1-step first period); `cut()` ends a period early
(finalize, a new stage).
"""
from __future__ import annotations

from typing import Any


class Period:
    """A period counter: its state is (length, since), saved by state_dict."""

    def __init__(self, length: int) -> None:
        self.length = length    # k: local steps in the current period
        self.since = 0          # t_s: local steps taken since the last period end

    def tick(self) -> int:
        """Count one local step. Returns the number of steps of the period it ends (>= 1), or 0
        when the period goes on."""
        self.since += 1
        return self.cut() if self.since >= self.length else 0

    def cut(self) -> int:
        """End the current period now; returns its steps so far (0: none were taken)."""
        steps, self.since = self.since, 0
        return steps

    def state_dict(self) -> dict[str, Any]:
        return {"length": self.length, "since": self.since}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.length, self.since = int(state["length"]), int(state["since"])

"""CoCoD-SGD: Computation and Communication Decoupled SGD (Shen, Xu, Liu, Liang & Cheng,
"Faster distributed deep net training: computation and communication decoupled stochastic
gradient descent", IJCAI 2019, arXiv 1906.12043, Algorithm 1).

Local SGD with period k = `period` whose model all-reduce runs in the background while the
worker keeps computing. Per worker: the model x_i, the snapshot a_i taken at the last
communication point, and the buffer that the in-flight all-reduce fills with the average ā of
the snapshots. Every step, then at the end of every period:

    x_i <- optimizer_step(x_i, grad F(x_i; xi_i))          every step, no communication
    if (t + 1) mod k == 0:
        wait for the all-reduce launched one period ago     -> ā = sum_j w_j a_j
        x_i <- ā + (x_i - a_i)                              averaged old snapshot + own progress since
        a_i <- x_i                                          new snapshot
        launch all_reduce(w_i * a_i)   (async_op=True)      overlaps with the next k local steps

At the first period end nothing is in flight (ā = a_i = x_0), so the rule reduces to the
snapshot and the launch. The all-reduce is a real torch.distributed collective issued with
``async_op=True`` from the training loop and waited one period later; nothing runs on a
side thread. Communication leaves the critical path unless it takes longer than k steps.

Heterogeneous workers ("proportional sampling", the paper's Section 4.3; the weighting
formula is our reconstruction, SPECS.md section a): with `batch_weights` = (s_1..s_p) worker i
draws mini-batches of b_i = round(p * B * s_i / sum_j s_j) samples (B = facts.batch_size) and
the average is weighted, w_i = b_i / sum_j b_j; without them w_i = 1/p (an 'avg' all-reduce).
`speeds` emulates hardware of different speed on one machine (our emulation knob, not the
paper's): rank i sleeps after backward for (1/speeds[i] - 1) times its measured forward+backward
time, or, with `sample_ms` > 0, for b_i * sample_ms / speeds[i] milliseconds: an emulated compute
cost proportional to the batch size (a small model's measured time barely grows with the batch, so
proportional batches could not balance it). On a GPU both forms wait for the device first
(`comm.device_sync.synchronize`): the compute time is what forward and backward took there, not the
host's time to queue them, and the sleep follows the real backward instead of overlapping it.

Momentum buffers stay local. Floating-point buffers (BatchNorm statistics) travel with the
parameters in the same flat all-reduce. `finalize()` waits for the in-flight all-reduce,
applies it, and, if local steps were taken since the last snapshot, averages once more
(synchronously), so every rank holds the (weighted) average that is evaluated.
"""
from __future__ import annotations

import time
from typing import Any

import torch

from ..errors import ConfigError
from ..comm.device_sync import synchronize
from .base import Algorithm, Param, RunFacts
from .flat import averaged_tensors, flatten, unflatten_into
from .inflight import InFlight
from .period import Period
from .registry import register


def _positive_numbers(v: list) -> bool:
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in v)


def proportional_batches(batch_size: int, weights: list[float]) -> list[int]:
    """Per-rank batch sizes proportional to `weights`, about p * batch_size in total, each >= 1."""
    total = batch_size * len(weights)
    return [max(1, round(total * w / sum(weights))) for w in weights]


@register
class CoCoDSGD(Algorithm):
    name = "cocod_sgd"
    summary = "CoCoD-SGD: local SGD whose model all-reduce overlaps the next `period` local steps"
    params = (
        Param("period", 4, "local steps between launches of the background model all-reduce",
              lambda v: v >= 1, "an integer >= 1"),
        Param("batch_weights", [], "relative worker speeds: per-rank batch sizes proportional to "
              "them and weighted averaging ([]: equal batches, plain average)", _positive_numbers,
              "a list of numbers > 0, one per rank, or []", per_rank=True),
        Param("speeds", [], "emulated relative compute speed per rank (a rank with speed s sleeps "
              "(1/s - 1) x its compute time; []: all 1)",
              lambda v: _positive_numbers(v) and all(x <= 1 for x in v),
              "a list of numbers in (0, 1], one per rank, or []", per_rank=True),
        Param("sample_ms", 0.0, "emulated compute per sample (ms): with it a rank of speed s sleeps "
              "batch x sample_ms / s after backward (0: the measured-time form above)",
              lambda v: v >= 0, "a number >= 0"),
    )

    period: int
    batch_weights: list[float]
    speeds: list[float]
    sample_ms: float

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """A launch every `period` steps."""
        return 0, params["period"]

    state_fields = ("snapshot", "pending", "clock")
    snapshot: torch.Tensor              # a_i: this rank's model at the last communication point, flat
    pending: InFlight                   # the all-reduce filling ā (at most one in flight)
    clock: Period                       # when the next period ends (the next launch)

    @classmethod
    def check_run(cls, params: dict, facts: RunFacts) -> None:
        for name in (p.name for p in cls.params if p.per_rank):
            if params[name] and len(params[name]) != facts.nproc:
                raise ConfigError(f"params.{name}", params[name],
                                  f"a list of {facts.nproc} numbers (one per rank) or []")

    def build(self) -> None:
        self.tensors = averaged_tensors(self.model)
        rank = self.comm.rank
        self.batches = self.batch_sizes(self.param_values(), self.facts)
        self.weight = self.batches[rank] / sum(self.batches)    # w_i
        speed = self.speeds[rank] if self.speeds else 1.0
        self.slowdown = 1 / speed - 1                   # x measured compute time
        self.sleep_s = self.batches[rank] * self.sample_ms / 1e3 / speed
        self.snapshot = flatten(self.tensors)
        self.buffer = torch.empty_like(self.snapshot)    # the all-reduce's input and output
        self.pending = InFlight()
        self.clock = Period(self.period)
        self.t_compute = 0.0

    @classmethod
    def batch_sizes(cls, params: dict, facts: RunFacts) -> list[int]:
        if params["batch_weights"]:
            return proportional_batches(facts.batch_size, params["batch_weights"])
        return super().batch_sizes(params, facts)

    # ------------------------------------------------------------------ emulated speed
    def before_forward(self, step: int) -> None:
        if self.slowdown and not self.sleep_s:  # the measured-time form: time this step's compute alone
            synchronize(self.comm.device)
            self.t_compute = time.perf_counter()

    def after_backward(self, step: int) -> None:
        if self.sleep_s or self.slowdown:
            synchronize(self.comm.device)       # the backward queued on a GPU has run
        if self.sleep_s:
            time.sleep(self.sleep_s)
        elif self.slowdown:
            time.sleep(self.slowdown * (time.perf_counter() - self.t_compute))

    # ------------------------------------------------------------------ averaging
    def _launch(self, x: torch.Tensor) -> None:
        """a_i <- x; start the (weighted) all-reduce of a_i in the background."""
        self.snapshot.copy_(x)
        if self.batch_weights:
            torch.mul(x, self.weight, out=self.buffer)
            self.pending.add(self.buffer, self.comm.all_reduce(self.buffer, op="sum", async_op=True))
        else:
            self.buffer.copy_(x)
            self.pending.add(self.buffer, self.comm.all_reduce(self.buffer, op="avg", async_op=True))

    def _apply_average(self) -> torch.Tensor:
        """Wait for ā and return x_i <- ā + (x_i - a_i) as a flat tensor (written to the model)."""
        x = flatten(self.tensors)
        for abar in self.pending.drain():
            x.sub_(self.snapshot).add_(abar)
            unflatten_into(x, self.tensors)
        return x

    def after_step(self, step: int) -> None:
        if self.clock.tick():
            self._launch(self._apply_average())

    def finalize(self) -> None:
        x = self._apply_average()
        if self.clock.cut():                    # local progress since the snapshot differs per rank
            if self.batch_weights:
                x.mul_(self.weight)
                self.comm.all_reduce(x, op="sum")
            else:
                self.comm.all_reduce(x, op="avg")
            unflatten_into(x, self.tensors)

    def metrics(self) -> dict[str, float]:
        return {"period": self.period}

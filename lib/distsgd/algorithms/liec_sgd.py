"""LIEC-SGD: Local Immediate Error Compensated SGD (Cheng, Shen, Xu, Qian, Wu, Zhou, Zhang, Tao
& Chen, arXiv 2402.11857, 2024), as the authors' code runs it (`chengyif/LIEC-SGD`, main.py,
method `liec`; ../shared/papers/SPECS.md, section b (1)).

Every worker trains its own model x_i; the root (rank 0) keeps the server error e. With
H = `period`, C the compressor per bucket (root_exchange.py; the authors' scaled sign), at step t:

    g_i = grad F(x_i; xi_i)
    if (t + 1) mod H == 0:                        averaging step, dense
        x_i <- (1/N) sum_j x_j                    reduce to the root, broadcast (parameters)
        G = (1/N) sum_j g_j + e;  e <- 0          reduce, the server error flushed, broadcast
        x_i <- optimizer_step(x_i, G)
    else:                                         compressed step
        c_i = C(g_i);  delta_i = g_i - c_i        gathered to the root; delta_i is not stored
        root: u = (1/N) sum_j c_j + e;  q = C(u);  e <- u - q            (broadcast q)
        x_i <- optimizer_step(x_i, q + delta_i)   the local immediate compensation

The optimizer (the authors': SGD, momentum 0, weight decay 5e-4) steps each worker's own model;
there is no worker error memory. Bytes per step and worker: compressed |C| up and |C| down;
averaging 4d up and 4d down twice (model and gradient). With H = 1 every step is dense: P-SGD.
With the identity compressor delta_i = 0 and e = 0, so the models never drift: synchronous SGD
for any H.

Without `error_compensation` (an ablation: LIEC-SGD reduced to bidirectional compression with
periodic dense averaging and no compensation at all) a compressed step applies q = C((1/N) sum_j
c_j) alone: delta_i is dropped and the server keeps no error (e stays 0).

Evaluation, as in the authors' code: during the run the average of the workers' models is
evaluated (`evaluating()`; a bookkeeping all-reduce outside the ledger, as evaluation is outside
the paper's traffic) and training continues from each worker's own model; `finalize()` leaves
every rank with the average (counted: reduce + broadcast).

Reconstructed / differs: the authors average at (cur_iter + 1) mod H with cur_iter counted over
epochs; here over the run's steps (the same when an epoch is a whole number of periods, and
otherwise only a shift of the phase). The authors send each bucket's scale in a message of its
own; here it travels inside the bucket's payload (the same bytes, one message fewer).
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

from .base import Param
from .root_exchange import PARAMS, ServerCompression
from .flat import flatten, unflatten_into
from .period import Period
from .registry import register


@register
class LIECSGD(ServerCompression):
    name = "liec_sgd"
    summary = "LIEC-SGD (authors' code): compressed steps with immediate local compensation, dense averaging every `period`"
    params = PARAMS + (
        Param("period", 32, "H: steps between the dense averaging steps (model average, dense "
              "gradient, server error flushed)", lambda v: v >= 1, "an integer >= 1"),
        Param("error_compensation", True, "apply delta_i = g_i - C(g_i) at once and keep the server "
              "error e (False: neither, bidirectional compression uncompensated)"),
    )

    period: int
    error_compensation: bool

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """A dense averaging step every `period` steps."""
        return 0, params["period"]

    state_fields = ("clock",)
    clock: Period                       # when the next averaging step falls

    def build(self) -> None:
        super().build()
        self.clock = Period(self.period)
        self.params_data = [p.data for p in self.trainable]

    def after_backward(self, step: int) -> None:
        super().after_backward(step)
        g = self.flat_grad()
        if self.clock.tick():
            self.average_model()
            mean = self.reduce_mean(g)
            if self.is_root:
                mean = self.server_memory.compensate(mean)
                self.server_memory.flush()
            self.set_grad(self.broadcast_dense(mean))
        elif self.error_compensation:
            c, mean = self.upload(g, step)
            self.set_grad(self.server_step(mean, step) + (g - c))
        else:
            _, mean = self.upload(g, step)
            self.set_grad(self.broadcast_compressed(mean, step))

    @torch.no_grad()
    def average_model(self) -> None:
        """x_i <- (1/N) sum_j x_j, through the root (counted)."""
        unflatten_into(self.broadcast_dense(self.reduce_mean(flatten(self.params_data))), self.params_data)

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """The average of the workers' models while evaluating; each worker's own afterwards."""
        with torch.no_grad():
            own = flatten(self.params_data)
            unflatten_into(self.comm.reduce_uncounted(own.clone(), op="avg"), self.params_data)
        try:
            yield
        finally:
            with torch.no_grad():
                unflatten_into(own, self.params_data)

    def finalize(self) -> None:
        self.average_model()

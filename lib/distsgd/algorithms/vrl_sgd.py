"""VRL-SGD: Variance Reduced Local SGD (Liang, Shen, Liu, Pan, Chen & Cheng, arXiv 1912.12844).

Local SGD whose local steps are corrected by a per-worker term Delta_i that estimates how far
worker i's gradient is from the global one, so that non-identical data (gradient diversity
zeta^2 = (1/N) sum_i ||grad f_i - grad f||^2) no longer makes the local models drift apart.
With period k, learning rate gamma and N workers, each worker i runs (the paper's Algorithm 1;
the rule below is taken from the official code, zerolxf/VRL-SGD ``DistributedSgd.py``, as
recorded in ``shared/papers/SPECS.md`` section e(1)):

    v_i  = grad F_i(x_i; xi_i) - Delta_i                       every step (Delta_i^0 = 0)
    x_i <- x_i - gamma * v_i                                    (plain SGD; weight decay, if
                                                                 any, is added to the gradient)
    if (t + 1) mod k == 0:                                      (one all-reduce of the model)
        xbar     = (1/N) sum_j x_j
        Delta_i <- Delta_i + (xbar - x_i) / (k * gamma)
        x_i     <- xbar

Why it works: over one period, x_i - xbar = -gamma * sum_steps (g_i - Delta_i - mean_j(g_j -
Delta_j)), so (xbar - x_i)/(k gamma) is the period's average of (g_i - gbar) minus Delta_i, and
the update sets Delta_i to about grad f_i - grad f. Invariant: sum_i Delta_i = 0 at all times
(each update adds sum_i (xbar - x_i) = 0), so the average model moves exactly as in local SGD
with the averaged corrected gradients. Delta_i is never communicated: the bytes are local SGD's.

In the paper this is Algorithm 1 (the text used here, SPECS.md e(1), gives no equation numbers;
the code's rule is the reference). With k = 1 the averaged model equals synchronous SGD's after every step (the corrections sum
to zero); Delta_i then becomes the last step's g_i - gbar.

Choices of this implementation (marked where they are reconstructions, not the paper's text):

* gamma is the learning rate of the optimizer's param group at the averaging step (the paper and
  its code use a constant rate; under a schedule this is our choice).
* k in the Delta update is the number of local steps actually taken since the last average, so
  the short first period of the warm-up variant and a partial last period are handled alike.
* ``warmup=True`` is VRL-SGD-W, which the paper introduces to suppress the initial drift term
  C = (1/N) sum_i ||grad f_i(x_0) - grad f(x_0)||^2. **Reconstructed** (SPECS.md e(1),
  [proposed]): the *first* period has length 1, so after one step Delta_i = g_i(x_0) - gbar(x_0)
  (one stochastic estimate of the initial gradient difference); afterwards averaging happens every
  k steps (at steps 1, 1 + k, 1 + 2k, ...). This costs one extra all-reduce.
* The authors' epoch schedule, not in the paper, as options of the run (`Config.warm_start_epochs`,
  `Config.epoch_average`; `distsgd.algorithms.epochs`): the first W epochs are S-SGD steps
  (Delta_i stays 0, the clock starts after them), and after every epoch's last step
  x_i <- (1/N) sum_j x_j *without* the Delta update above (their trainer's ``_sync_period`` call
  bypasses their optimizer's Delta update); the clock goes on, so the next Delta update divides
  by k the drift accumulated since the epoch-end average.
* Floating-point buffers (BatchNorm statistics) are averaged with the parameters in the same flat
  all-reduce, as in ``local_sgd`` (the official code broadcasts them from rank 0 instead).
  Delta exists for parameters only.
* Only plain SGD (momentum 0, the paper's experiments) is supported: ``check_run`` rejects
  other optimizers and momentum. ``finalize()`` averages (and updates Delta) once more if local
  steps were taken since the last average.
"""
from __future__ import annotations

from typing import Any

import torch

from ..errors import ConfigError
from .base import Algorithm, Param, RunFacts
from .epochs import EpochSchedule
from .flat import average, averaged_tensors, flatten
from .period import Period
from .registry import register


@register
class VRLSGD(EpochSchedule, Algorithm):
    name = "vrl_sgd"
    summary = "VRL-SGD: local SGD with a per-worker gradient correction Delta_i (non-IID data)"
    params = (
        Param("period", 4, "local steps between model averagings (k)", lambda v: v >= 1,
              "an integer >= 1"),
        Param("warmup", False, "VRL-SGD-W: the first period is 1 step, initialising Delta_i"),
    )

    period: int
    warmup: bool

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """An average every `period` steps (after VRL-SGD-W's 1-step first period)."""
        return int(params["warmup"]), params["period"]

    state_fields = ("delta", "clock", "averages")
    delta: torch.Tensor                 # Delta_i, flat in parameter order (Delta_i^0 = 0)
    clock: Period                       # when the next average falls (1 step first with warmup)
    averages: int                       # averages taken so far

    @classmethod
    def check_run(cls, params: dict[str, Any], facts: RunFacts) -> None:
        if facts.optimizer != "sgd":
            raise ConfigError("optimizer", facts.optimizer, "sgd",
                              "vrl_sgd corrects plain SGD steps (the paper's setting)")
        if facts.momentum != 0:
            raise ConfigError("momentum", facts.momentum, "0",
                              "vrl_sgd is defined for SGD without momentum")

    def build(self) -> None:
        momenta = sorted({group.get("momentum", 0.0) for group in self.optimizer.param_groups})
        if momenta != [0]:
            raise ConfigError("momentum", momenta, "0", "vrl_sgd is defined for SGD without momentum")
        self.params_ = [p for p in self.model.parameters()]
        self.tensors = averaged_tensors(self.model)     # parameters first, then float buffers
        self.n_params = sum(p.numel() for p in self.params_)
        self.delta = torch.zeros(self.n_params, device=self.comm.device)
        self.delta_views: list[torch.Tensor] = []       # Delta_i shaped like each parameter
        offset = 0
        for p in self.params_:
            self.delta_views.append(self.delta[offset:offset + p.numel()].view_as(p))
            offset += p.numel()
        self.clock = Period(1 if self.warmup else self.period)
        self.averages = 0

    # ------------------------------------------------------------------ hooks
    def after_backward(self, step: int) -> None:
        """v_i = grad F_i(x_i; xi) - Delta_i, written into p.grad for the optimizer step; during
        the warm start the S-SGD gradient (1/N) sum_j grad F_j(x; xi_j) instead."""
        if self.warm(step):
            self.average_gradients()
            return
        for p, d in zip(self.params_, self.delta_views):
            if p.grad is None:
                p.grad = -d.clone()
            else:
                p.grad.sub_(d)

    def after_step(self, step: int) -> None:
        if self.warm(step):                 # Delta_i and the clock start after the warm start
            return
        if k := self.clock.tick():
            self.average(k)
            self.clock.length = self.period
        elif self.epoch_ends(step):         # x_i <- mean_j x_j; Delta_i and the clock unchanged
            self.average_models()

    def finalize(self) -> None:
        if k := self.clock.cut():
            self.average(k)

    def average(self, k: int) -> None:
        """After k local steps: xbar by one all-reduce; Delta_i += (xbar - x_i) / (k gamma);
        x_i <- xbar."""
        local = flatten(self.tensors)[:self.n_params]        # x_i (parameters lead self.tensors)
        flat = average(self.comm, self.tensors)
        gamma = self._lr()
        self.delta.add_(flat[:self.n_params] - local, alpha=1.0 / (k * gamma))
        self.averages += 1

    def _lr(self) -> float:
        lrs = {group["lr"] for group in self.optimizer.param_groups}
        if len(lrs) != 1:
            raise RuntimeError(f"vrl_sgd needs one learning rate for all parameters, got {sorted(lrs)}")
        (lr,) = lrs
        if lr <= 0:
            raise RuntimeError(f"vrl_sgd needs a learning rate > 0 at an averaging step, got {lr}")
        return float(lr)

    # ------------------------------------------------------------------ introspection
    def metrics(self) -> dict[str, float]:
        return {"period": self.period, "delta_norm": float(self.delta.norm())}

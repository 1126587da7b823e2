"""SSD-SGD: Several Steps Delay SGD (Xu, Dong et al., "SSD-SGD: communication sparsification for
distributed deep learning training"; code: github.com/main-520/SSD-SGD, an MXNet fork).

The paper runs on a parameter server: every iteration each worker pushes its gradient and the
server makes a synchronous momentum-SGD step with the global learning rate; the worker does not
wait for the new weights but updates a local copy with a local optimizer ("GLU", global gradient
for local update, local learning rate), and every k iterations it pulls the global weights and
overwrites its local copy. The pull of period m is applied at the end of period m + 1 (the code
broadcasts the previously pulled copy, then issues the next pull), so its latency is hidden.
The first `warmup` iterations are plain S-SGD (push and pull every step).

All-reduce form used here (our reconstruction of the architecture, same arithmetic): the push
is an ``async_op=True`` all-reduce (average) of the gradient; every rank applies the server's
update itself to a replica x_g of the global model (all ranks receive the same averaged
gradients, so the replicas stay identical and the pull needs no transfer). With local model x_l,
global momentum buffer v, global lr gamma, local lr gamma_l = `local_lr_scale` * gamma:

    warm-up (t < warmup):   gbar = allreduce_avg(g_i) (blocking);  server(gbar);  x_l <- x_g
    steps-delay stage, every step t:
        launch allreduce_avg(g_i(x_l)) -> gbar_t           (async; waited at a later pull)
        x_l <- x_l - step                                  local update, step by `glu` below
    every k steps (a pull):
        wait the pushes of the previous period (`stale_pull`, the paper's; or of this period),
        server(gbar) for each, in step order;   x_l <- x_g
    server(gbar):  v <- mu * v + gbar + wd * x_g;   x_g <- x_g - gamma * v      (torch SGD form)

Local update rules (`glu`):
  * "global" (default; reconstructed, SPECS.md h, [proposed]):
        step = (1 - beta) * gamma_l * (g_i + wd * x_l) + beta * gamma * v,
    a blend of the own gradient step and the server's last step gamma * v (v: the global momentum
    buffer after the last pull, i.e. the global update per step), beta = `glu_weight`. The
    paper's code uses variants of this idea (COSDCASGD: 2g + wd w + 0.5 gs with gs the last
    weight change, which after a pull holds the global update); its exact coefficients are not
    reproduced.
  * "dc": the paper code's `dc_sgd_update` (DC-ASGD delay compensation, Zheng et al. 2017):
    step = gamma_l * (g_i + wd * x_l + lambda * g_i * g_i * (x_l - x_s)), x_s the last pulled
    model, lambda = `dc_lambda`.
  * "none": step = gamma_l * (g_i + wd * x_l), a plain local SGD step (the ablation "without GLU").

With k = 1, `stale_pull` = false, every pull waits for this step's push: S-SGD exactly (also
after warm-up). With k = 1 and `stale_pull` = true it is OD-SGD (one-step-delay SGD: the gradient
at x_{t-1} updates x_t). Floating-point buffers (BatchNorm statistics), which gradients do not
carry, are averaged by one blocking all-reduce at each pull; models without them send nothing
at a pull. `finalize()` waits for every push in flight and applies it, so every rank ends with
x_l = x_g.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from ..errors import ConfigError
from .base import Algorithm, Param
from .flat import average, flatten, unflatten_into
from .inflight import InFlight
from .period import Period
from .registry import register

if TYPE_CHECKING:
    from ..config import Config

GLU_MODES = ("global", "dc", "none")


@register
class SSDSGD(Algorithm):
    name = "ssd_sgd"
    summary = "SSD-SGD: async gradient push every step, local (GLU) updates, stale global pull every `period`"
    params = (
        Param("period", 5, "k: steps between pulls of the global model", lambda v: v >= 1,
              "an integer >= 1"),
        Param("warmup", 500, "S-SGD steps before the steps-delay stage", lambda v: v >= 0,
              "an integer >= 0"),
        Param("local_lr_scale", 4.0, "local lr / global lr (paper: 1.6 / 0.4)", lambda v: v > 0,
              "a number > 0"),
        Param("glu", "global", "local update: global (GLU), dc (delay compensation), none (plain)",
              lambda v: v in GLU_MODES, ", ".join(GLU_MODES)),
        Param("glu_weight", 0.5, "beta: weight of the global direction in the GLU local update",
              lambda v: 0 <= v <= 1, "0 <= beta <= 1"),
        Param("dc_lambda", 0.04, "lambda of the delay-compensation local update", lambda v: v >= 0,
              "a number >= 0"),
        Param("stale_pull", True, "apply the pull one period late (hides its latency); "
              "false: wait for this period's pushes"),
    )

    period: int
    warmup: int
    local_lr_scale: float
    glu: str
    glu_weight: float
    dc_lambda: float
    stale_pull: bool

    state_fields = ("x_global", "velocity", "pulled", "current", "previous", "clock")
    x_global: torch.Tensor              # x_g: the replica of the server's global model, flat
    velocity: torch.Tensor              # v: the server's momentum buffer
    pulled: torch.Tensor                # x_s: the last pulled model (for glu = "dc")
    current: InFlight                   # averaged gradients pushed in this period
    previous: InFlight                  # ... and in the last one (applied at the next pull)
    clock: Period                       # when the next pull falls (ticked after the warm-up)

    @classmethod
    def check_config(cls, params: dict, config: "Config") -> None:
        if config.optimizer != "sgd":
            raise ConfigError("optimizer", config.optimizer, "sgd",
                              "ssd_sgd runs its own global (momentum SGD) and local optimizers")

    def build(self) -> None:
        self.params_ = [p for p in self.model.parameters() if p.requires_grad]
        self.x = [p.data for p in self.params_]                       # the local model x_l
        self.buffers = [b for b in self.model.buffers() if b.is_floating_point()]
        self.x_global = flatten(self.x)
        self.velocity = torch.zeros_like(self.x_global)
        self.pulled = self.x_global.clone()
        self.current, self.previous = InFlight(), InFlight()
        self.clock = Period(self.period)

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def _gradient(self) -> torch.Tensor:
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in self.params_])

    def _server(self, gbar: torch.Tensor) -> None:
        """The server's synchronous momentum-SGD step on the global model (torch SGD form)."""
        c = self.config
        d = gbar.add(self.x_global, alpha=c.weight_decay) if c.weight_decay else gbar
        self.velocity.mul_(c.momentum).add_(d)
        self.x_global.add_(self.velocity, alpha=-self.lr)

    def _pull(self) -> None:
        """Apply the awaited pushes to x_g and overwrite the local model with it."""
        if self.stale_pull:
            pushes, self.previous, self.current = self.previous, self.current, InFlight()
        else:
            pushes, self.current = self.current, InFlight()
        for gbar in pushes.drain():
            self._server(gbar)
        unflatten_into(self.x_global, self.x)
        self.pulled.copy_(self.x_global)
        self._average_buffers()

    def _average_buffers(self) -> None:
        if self.buffers:
            average(self.comm, self.buffers)

    def _local_step(self, g: torch.Tensor) -> None:
        x = flatten(self.x)
        d = g.add(x, alpha=self.config.weight_decay) if self.config.weight_decay else g
        if self.glu == "dc":
            d = d + self.dc_lambda * g * g * (x - self.pulled)
        gamma_l = self.local_lr_scale * self.lr
        if self.glu == "global":
            beta = self.glu_weight
            x.add_(d, alpha=-(1 - beta) * gamma_l).add_(self.velocity, alpha=-beta * self.lr)
        else:
            x.add_(d, alpha=-gamma_l)
        unflatten_into(x, self.x)

    def optimizer_step(self, step: int) -> None:
        g = self._gradient()
        if step < self.warmup:
            self.comm.all_reduce(g, op="avg")
            self._server(g)
            unflatten_into(self.x_global, self.x)
            return
        gbar = g.clone()                                               # filled in by the push
        self.current.add(gbar, self.comm.all_reduce(gbar, op="avg", async_op=True))
        self._local_step(g)

    def after_step(self, step: int) -> None:
        if step >= self.warmup and self.clock.tick():
            self._pull()

    def finalize(self) -> None:
        for pushes in (self.previous, self.current):
            for gbar in pushes.drain():
                self._server(gbar)
        unflatten_into(self.x_global, self.x)
        self._average_buffers()

    def metrics(self) -> dict[str, float]:
        return {"period": self.period}

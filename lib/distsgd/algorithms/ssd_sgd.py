"""SSD-SGD: Several Steps Delay SGD (Xu, Dong et al., "SSD-SGD: communication sparsification for
distributed deep learning training"; code: github.com/main-520/SSD-SGD, an MXNet fork).

Source: the authors' fork as read in SPECS.md h: the timeline of `Push_` / `PullImpl` in
`src/kvstore/kvstore_dist.h`, the local rules `COSDCASGD` and `DCASGD` of
`python/mxnet/optimizer/optimizer.py`, the gradient scale of `module.py` (`rescale_grad`).

Notation: N ranks, g_i this rank's mean gradient over its batch, w_g the server's (global) model,
v its momentum buffer, L_i this rank's local copy, M_i the model its forward/backward runs on,
eta the global lr (the run's schedule), eta_l = `local_lr_scale` * eta, mu the optimizer's momentum,
wd its weight decay (torch SGD with one param group: the run's, or the one given to `distsgd.wrap`), applied (as MXNet's default wd_mult does) to the tensors whose name
ends in ``weight`` only: torch's ``weight`` is MXNet's ``_weight`` (conv, linear) or ``_gamma``
(norm scale), torch's ``bias`` is MXNet's ``_bias`` or ``_beta``, which get no decay, on the
server and in the local rules.

    server(gbar):  v <- mu v + gbar + wd w_g;   w_g <- w_g - eta v
    iteration t < `warmup`:  plain S-SGD: gbar = allreduce_avg(g_i);  server(gbar);  M_i = L_i <- w_g
    iteration t >= `warmup`:
        push g_i: allreduce_avg(g_i) -> server(gbar_t)           (async: no rank waits for it here)
        L_i <- LocalRule(L_i, g_i / N)                            (MXNet's rescale_grad = 1/(B N))
        M_i <- L_i
        every k-th iteration (t - warmup) % k == k - 1:  pull, L_i <- w_g (holding gbar_t)

The pull of iteration t does not change M_i: the forward of t + 1 still runs on the pre-pull local
model, and the local update of t + 1 starts from w_g; the delay is one iteration. Local rules on
each tensor (states created at the first local update as copies of L_i; `local_num` one counter
shared by all tensors, incremented per tensor update, in parameter order):

  * "cosdcasgd" (`COSDCASGD`, what the authors' cifar10 script runs; the default):
        gs = ((1 - eta_l wd) s - w) / 8;   s <- w;   w <- w - eta_l (2 g + wd w + gs / 2)
    Between pulls w - s is the last local step; right after a pull gs holds the global update.
  * "dc" (`DCASGD`, lambda = `dc_lambda`): a tensor updated while `local_num` is even takes
        w <- w - eta_l (g + wd w + lambda g g (w - p)),  p <- w (before the update),
    one updated while it is odd takes w <- w - eta_l (g + wd w). With T tensors, tensor j at the
    m-th local iteration sees local_num = m T + j: for an even T the even-indexed tensors always
    get the delay compensation and the odd ones never, for an odd T every tensor alternates.
  * "none": w <- w - eta_l (g + wd w), the plain local step (the ablation).

The C++ `dc_sgd_update` behind the authors' class `GLU` passes its arguments in the wrong order
(SPECS h) and is not a rule here; nor is the blend of an earlier spec (our invention).

What is reconstructed: the all-reduce form of the parameter server (every rank keeps a replica of
w_g and applies the server's step to the averaged gradients itself; the pushes of a period are
applied when the pull needs them, at the next iteration's local update, so the pull costs no
transfer and its latency is hidden behind one forward/backward). The server uses torch's momentum
form (the kit's S-SGD baseline's), equal to MXNet's (v <- mu v - eta d; w += v) at a constant lr;
a period's pushes are applied with the lr of the step that drains them. Floating-point buffers
(BatchNorm statistics) are never communicated, as MXNet does not communicate auxiliary states.
End state: the authors keep each worker's local model (no final sync); `finalize()` adds a final
pull for evaluation: every push is applied and every rank ends at w_g. The loop's last
evaluation (before `finalize`) measures the local models, the final one the pulled w_g.

With local rule "none" and no pull after the warm-up, each rank runs independent local SGD at lr
eta_l / N on its mean gradient (the 1/N scales the gradient only: weight decay eta_l wd). k = 1 is OD-SGD (one-step delay): the forward still runs on the
local model, so no k gives S-SGD; a warm-up covering the whole run does.
"""
from __future__ import annotations

from typing import Any, Callable

import torch

from ..errors import ConfigError
from .base import Algorithm, Param, RunFacts
from .flat import flatten, unflatten_into
from .layerwise import check_sgd
from .inflight import InFlight
from .period import Period
from .registry import register


LOCAL_RULES = ("cosdcasgd", "dc", "none")


@register
class SSDSGD(Algorithm):
    name = "ssd_sgd"
    summary = "SSD-SGD: async gradient push every step, local rule on a local copy, global pull every `period`"
    params = (
        Param("period", 5, "k: steps between pulls of the global model", lambda v: v >= 1,
              "an integer >= 1"),
        Param("warmup", 500, "S-SGD steps before the steps-delay stage", lambda v: v >= 0,
              "an integer >= 0"),
        Param("local_lr_scale", 4.0, "local lr / global lr (paper: 1.6 / 0.4)", lambda v: v > 0,
              "a number > 0"),
        Param("local_rule", "cosdcasgd", "local update: cosdcasgd (authors' cifar10 script), "
              "dc (their DCASGD), none (plain local SGD step)",
              lambda v: v in LOCAL_RULES, ", ".join(LOCAL_RULES)),
        Param("dc_lambda", 0.04, "lambda of the dc local rule", lambda v: v >= 0, "a number >= 0"),
    )

    period: int
    warmup: int
    local_lr_scale: float
    local_rule: str
    dc_lambda: float

    @classmethod
    def steady_state(cls, params: dict[str, Any]) -> tuple[int, int]:
        """The steps-delay stage after the warm-up: a pull every `period` steps."""
        return params["warmup"], params["period"]

    state_fields = ("x_global", "velocity", "local", "anchor", "local_num", "current", "due", "clock")
    work_passes = ("ssd_rule", "ssd_server")       # `_local_rule`, `_server` (`Comm.work`)
    x_global: torch.Tensor              # w_g: the replica of the server's global model, flat
    velocity: torch.Tensor              # v: the server's momentum buffer
    local: torch.Tensor                 # L_i: the local copy (the model holds M_i)
    anchor: torch.Tensor                # the local rule's state: s (cosdcasgd) or p (dc)
    local_num: int                      # the local optimizer's counter, one per tensor update
    current: InFlight                   # pushes since the last pull
    due: InFlight                       # pushes the last pull waits for (applied at the next step)
    clock: Period                       # when the next pull falls (ticked after the warm-up)

    @classmethod
    def check_run(cls, params: dict, facts: RunFacts) -> None:
        if facts.optimizer != "sgd":
            raise ConfigError("optimizer", facts.optimizer, "sgd",
                              "ssd_sgd runs its own global (momentum SGD) and local optimizers")

    def build(self) -> None:
        check_sgd(self.optimizer, self.name)
        if len(self.optimizer.param_groups) != 1:
            raise ConfigError("optimizer", f"{len(self.optimizer.param_groups)} param groups", "one param group",
                              "ssd_sgd's server and local rules take one lr, momentum and weight decay")
        named = [(n, p) for n, p in self.model.named_parameters() if p.requires_grad]
        self.params_ = [p for _, p in named]
        self.x = [p.data for p in self.params_]                       # M_i
        wd = self.optimizer.param_groups[0]["weight_decay"]
        self.decay = torch.cat([torch.full((p.numel(),), wd if n.rsplit(".", 1)[-1] == "weight" else 0.0,
                                           dtype=p.dtype, device=p.device) for n, p in named])
        odd_tensor = torch.cat([torch.full((p.numel(),), j % 2 == 1, device=p.device)
                                for j, p in enumerate(self.params_)])
        self.even = (~odd_tensor, odd_tensor)     # dc: the tensors whose local_num is even, by local_num % 2
        self.even_scale = tuple(m.to(self.decay.dtype) for m in self.even)   # 1.0 / 0.0, multiplied in place
        self.x_global = flatten(self.x)
        self.velocity = torch.zeros_like(self.x_global)
        self.local = self.x_global.clone()
        self.anchor = self.x_global.clone()
        # scratch, model-sized, reused every step: fresh temporaries of this size are served by
        # fresh pages on a CPU (each page-faulted), which made the rule ~5x slower
        self.grad, self.step_, self.term = (torch.empty_like(self.x_global) for _ in range(3))
        self.local_num = 0
        self.current, self.due = InFlight(), InFlight()
        self.clock = Period(self.period)

    @property
    def lr(self) -> float:
        return self.optimizer.param_groups[0]["lr"]

    def _gradient(self) -> torch.Tensor:
        """g_i, gathered into the `grad` scratch buffer (returned)."""
        return torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1)
                          for p in self.params_], out=self.grad)

    def _server(self, gbar: torch.Tensor) -> None:
        """The server's synchronous momentum-SGD step on the global model (torch SGD form), a pass
        announced as work "ssd_server" (`Comm.work`)."""
        self.comm.work("ssd_server")
        self.velocity.mul_(self.optimizer.param_groups[0]["momentum"]).add_(gbar).addcmul_(self.decay, self.x_global)
        self.x_global.add_(self.velocity, alpha=-self.lr)

    def _local_rule(self, g: torch.Tensor) -> None:
        """L_i <- LocalRule(L_i, g) on the rescaled gradient g = g_i / N, in place: the step d in
        `step_`, the rule's extra term in `term` (each operation as the module docstring writes
        it, so the result is the same to the bit as with fresh temporaries), a pass announced as work
        "ssd_rule" (`Comm.work`)."""
        self.comm.work("ssd_rule")
        w, eta_l, d, term = self.local, self.local_lr_scale * self.lr, self.step_, self.term
        if self.local_rule == "dc":
            parity = self.local_num % 2
            even = self.even[parity]                                           # local_num + j is even
            torch.mul(g, self.dc_lambda, out=d).mul_(g)                         # lambda g g
            torch.sub(w, self.anchor, out=term).mul_(d).mul_(self.even_scale[parity])   # its term, or 0
        torch.mul(self.decay, w, out=d).add_(g)                                 # g + wd w
        if self.local_rule == "cosdcasgd":
            torch.mul(self.decay, eta_l, out=term).neg_().add_(1)               # 1 - eta_l wd
            term.mul_(self.anchor).sub_(w).div_(8)                              # gs
            d.add_(g).add_(term.mul_(0.5))                                      # g + wd w + g + gs / 2
            self.anchor.copy_(w)
        elif self.local_rule == "dc":
            d.add_(term)
            torch.where(even, w, self.anchor, out=self.anchor)                 # p <- w where it applied
            self.local_num += len(self.params_)
        w.add_(d, alpha=-eta_l)

    def timed_work(self) -> dict[str, Callable[[], None]]:
        """The local rule on the rank's gradient rescaled by 1/N, and one server step on it."""
        return {"ssd_rule": lambda: self._local_rule(self._gradient().div_(self.comm.world_size)),
                "ssd_server": lambda: self._server(self._gradient())}

    def optimizer_step(self, step: int) -> None:
        g = self._gradient()
        if step < self.warmup:
            self.comm.all_reduce(g, op="avg")
            self._server(g)
            unflatten_into(self.x_global, self.x)
            self.local.copy_(self.x_global)
            self.anchor.copy_(self.x_global)      # the local rule's state starts at L_i = w_g
            return
        gbar = g.clone()                                               # filled in by the push
        self.current.add(gbar, self.comm.all_reduce(gbar, op="avg", async_op=True))
        if self.due.items:                        # the pull issued after the last step
            for pushed in self.due.drain():
                self._server(pushed)
            self.local.copy_(self.x_global)
        self._local_rule(g.div_(self.comm.world_size))
        unflatten_into(self.local, self.x)

    def after_step(self, step: int) -> None:
        if step >= self.warmup and self.clock.tick():
            self.due, self.current = self.current, InFlight()

    def finalize(self) -> None:
        """The kit's final pull (the authors have none): every push applied, M_i <- w_g."""
        for pushes in (self.due, self.current):
            for gbar in pushes.drain():
                self._server(gbar)
        unflatten_into(self.x_global, self.x)

    def metrics(self) -> dict[str, float]:
        return {"period": self.period}

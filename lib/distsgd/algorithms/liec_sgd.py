"""LIEC-SGD: Local Immediate Error Compensated SGD (Cheng, Shen, Xu, Qian, Wu, Zhou, Zhang, Tao
& Chen, arXiv 2402.11857, 2024).

RECONSTRUCTED from the abstract (the paper text and code were not available; see
../shared/papers/SPECS.md, section b). The abstract fixes: bidirectional compression; each
worker's local compression error is compensated *immediately* into its own model update; only
the server keeps an error variable across iterations. Two rules fit those words; `local_error`
picks one. In gradient units (gamma = current learning rate):

    worker i:  v_i = g_i            (drop)   or   v_i = g_i + delta_i   (carry)
               c_i = C_w(v_i);  delta_i <- v_i - c_i                     (local error)
    server:    u = (1/N) sum_i c_i + e;  q = C_s(u);  e <- u - q         (the server's error)
    worker i:  x   <- optimizer_step(x, q)                               (global model, every rank)
               x_i <- x - gamma * delta_i                                (immediate local compensation)

and g_i = grad F(x_i; xi_i) is taken at the local model x_i.

- ``drop`` (reading A, SPECS.md's reconstruction): delta_i lives one step, only to move the point
  of the next gradient, x_i = x - gamma (g_i - c_i), the global model plus the worker's own full
  step; the part of g_i that C_w removed never reaches the global model. The worker keeps no
  state across iterations, as the abstract's "only ... the global error variable" says.
- ``carry`` (reading B): the local model is the worker's error memory, x_i = x - gamma delta_i
  holds everything it has not sent yet, and that is sent later, as in error feedback. For one
  worker without server compression x_i <- x_i - gamma g_i: the local model takes the full,
  uncompressed step immediately. This is DoubleSqueeze with the gradient taken at x_i instead
  of at x (double_squeeze.py).

`carry` is the default: with `drop` the global model follows sum_t C(g_t), which a biased
compressor such as top-k can keep away from a stationary point, and the abstract proves
convergence for any delta-contraction compressor.

The model parameters hold x_i during forward/backward; x is kept as a flat copy and stepped by
the optimizer (momentum and weight decay act on x with q). `finalize()` loads x, so every rank
evaluates the same model.

The "server" is replicated deterministically: every rank all-gathers the c_i, forms the same u
and applies C_s with the same seed, so the server error e is identical on every rank (tested) and
no parameter-server process or download collective is needed. With identity compressors,
delta_i = 0 and q = (1/N) sum_i g_i: S-SGD. Parameter-server traffic per worker: up |C_w|,
down |C_s|.
"""
from __future__ import annotations

import torch

from ..compress import ErrorFeedback
from ..compress.exchange import average
from .base import Param
from .compression import PARAMS, SERVER, WORKER, CompressedAlgorithm
from .flat import flatten, unflatten_into
from .registry import register

LOCAL_ERROR = ("carry", "drop")


@register
class LIECSGD(CompressedAlgorithm):
    name = "liec_sgd"
    summary = "LIEC-SGD (reconstructed): bidirectional compression, immediate local error compensation"
    params = PARAMS + (
        Param("local_error", "carry", "the worker's compression error: 'carry' it in the local model "
              "and send it later (reading B), or 'drop' it after moving the next gradient's point "
              "(reading A)", lambda v: v in LOCAL_ERROR, ", ".join(LOCAL_ERROR)),
    )

    local_error: str

    state_fields = ("server_memory", "x_global", "delta")
    server_memory: ErrorFeedback        # e: the (replicated) server's compression error
    x_global: torch.Tensor              # x: the global model, flat (the parameters hold x_i)
    delta: torch.Tensor                 # delta_i: this worker's last compression error

    def build(self) -> None:
        super().build()
        self.server_memory = ErrorFeedback()
        self.x_global = flatten([p.detach() for p in self.trainable])
        self.delta = torch.zeros_like(self.x_global)

    def after_backward(self, step: int) -> None:
        c = self.codec
        v_i = self.flat_grad()
        if self.local_error == "carry":
            v_i = v_i + self.delta
        payload, ctx = c.compress(v_i, self.seed(step, WORKER, c))
        self.delta = v_i - c.decompress(payload, ctx)
        u = self.server_memory.compensate(average(self.comm, c, payload, ctx))
        q = c(u, self.seed(step, SERVER, c))
        self.server_memory.update(u, q)
        self.set_grad(q)
        self.count(c.wire_bytes(self.numel), c.wire_bytes(self.numel))

    @torch.no_grad()
    def optimizer_step(self, step: int) -> None:
        params = [p.data for p in self.trainable]
        unflatten_into(self.x_global, params)               # step the global model x
        self.optimizer.step()
        self.x_global = flatten(params)
        lr = self.optimizer.param_groups[0]["lr"]
        unflatten_into(self.x_global - lr * self.delta, params)   # x_i = x - gamma * delta_i

    @torch.no_grad()
    def finalize(self) -> None:
        unflatten_into(self.x_global, [p.data for p in self.trainable])

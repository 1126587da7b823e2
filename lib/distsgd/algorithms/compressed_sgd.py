"""MEM-SGD / EF-SGD: compressed gradients up, the dense average down (the authors' `memsgd` in
`chengyif/LIEC-SGD` main.py; Stich, Cordonnier & Jaggi 2018, MEM-SGD, Algorithm 1; Karimireddy
et al. 2019, EF-SGD, Algorithm 2). In gradient units, per bucket (root_exchange.py):

    p_i = g_i + e_i                   g_i = grad F(x; xi_i), e_i the worker's residual (init 0)
    c_i = C(p_i);  e_i <- p_i - c_i   (compress.memory.ErrorFeedback)
    root: g = (1/N) sum_i c_i         (gather to the root), broadcast dense (4 d bytes)
    x  <- optimizer_step(x, g)        identical on every rank

Without `error_feedback`, c_i = C(g_i) and the residual is dropped. The papers write the residual
in units of gamma*g; keeping it in gradient units is the same with a constant learning rate.
With compressor "none" this is P-SGD (the authors' `psgd`: dense reduce to the root, broadcast),
synchronous SGD with the root topology's bytes.
"""
from __future__ import annotations

from ..compress import ErrorFeedback
from .base import Param
from .root_exchange import PARAMS, CompressedAlgorithm
from .registry import register


@register
class CompressedSGD(CompressedAlgorithm):
    name = "compressed_sgd"
    summary = "MEM-SGD / EF-SGD: compressed gradients gathered to a root, dense average broadcast"
    params = PARAMS + (
        Param("error_feedback", True, "keep the worker's compression residual (MEM-SGD)"),
    )

    error_feedback: bool

    state_fields = ("memory",)
    memory: ErrorFeedback               # e_i: this worker's compression residual

    def build(self) -> None:
        super().build()
        self.memory = ErrorFeedback()

    def after_backward(self, step: int) -> None:
        super().after_backward(step)
        g = self.flat_grad()
        p = self.memory.compensate(g) if self.error_feedback else g
        c, mean = self.upload(p, step)
        if self.error_feedback:
            self.memory.update(p, c)
        self.set_grad(self.broadcast_dense(mean))

"""Compressed SGD with optional worker-side error feedback: EF-SGD / MEM-SGD.

Unidirectional compression (workers -> aggregate; the average is used dense). With
`error_feedback` (Stich, Cordonnier & Jaggi 2018, MEM-SGD, Algorithm 1; Karimireddy et al. 2019,
EF-SGD, Algorithm 2), in gradient units:

    p_i = g_i + e_i                   g_i = grad F(x; xi_i), e_i the worker's residual (init 0)
    c_i = C(p_i);  e_i <- p_i - c_i   (compress.memory.ErrorFeedback)
    g   = (1/N) sum_i c_i             (compress.exchange.average: all-gather or all-reduce)
    x  <- optimizer_step(x, g)        identical on every rank

Without error feedback, c_i = C(g_i) and the residual is dropped. The papers write the residual
in units of gamma*g; keeping it in gradient units is the same with a constant learning rate.
With compressor "none" (or topk at ratio 1) this is S-SGD. Parameter-server traffic per worker
(the `up_bytes`/`down_bytes` metrics): up |C(p_i)|, down 4d (the dense average).
"""
from __future__ import annotations

from ..compress import ErrorFeedback
from ..compress.exchange import average
from .base import Param
from .compression import PARAMS, WORKER, CompressedAlgorithm
from .registry import register


@register
class CompressedSGD(CompressedAlgorithm):
    name = "compressed_sgd"
    summary = "EF-SGD / MEM-SGD: compressed gradients (all-gathered) with worker error feedback"
    params = PARAMS + (
        Param("error_feedback", True, "keep the worker's compression residual (EF-SGD)"),
    )

    error_feedback: bool

    state_fields = ("memory",)
    memory: ErrorFeedback               # e_i: this worker's compression residual

    def build(self) -> None:
        super().build()
        self.memory = ErrorFeedback()

    def after_backward(self, step: int) -> None:
        g = self.flat_grad()
        p = self.memory.compensate(g) if self.error_feedback else g
        payload, ctx = self.codec.compress(p, self.seed(step, WORKER, self.codec))
        if self.error_feedback:
            self.memory.update(p, self.codec.decompress(payload, ctx))
        self.set_grad(average(self.comm, self.codec, payload, ctx))
        self.count(self.codec.wire_bytes(self.numel), 4 * self.numel)

"""DoubleSqueeze (Tang, Yu, Lian, Zhang & Liu, ICML 2019, Algorithm 1; the authors' baseline
`doublesqueeze` in `chengyif/LIEC-SGD` main.py): bidirectional compression with error
compensation on the workers and the server. In gradient units, per bucket (root_exchange.py):

    worker i:  v_i = g_i + d_i;  c_i = C(v_i);  d_i <- v_i - c_i        (lines 4-6; gather to root)
    root:      v = (1/N) sum_i c_i + d;  q = C(v);  d <- v - q          (lines 8-10; broadcast q)
    worker i:  x <- optimizer_step(x, q)                                (line 12)

Workers and server use the same compressor (`compressor`, `ratio`); bytes per step and worker:
|C| up, |C| down. With the identity compressor this is synchronous SGD.
"""
from __future__ import annotations

from ..compress import ErrorFeedback
from .root_exchange import PARAMS, ServerCompression
from .registry import register


@register
class DoubleSqueeze(ServerCompression):
    name = "double_squeeze"
    summary = "DoubleSqueeze: bidirectional compression through a root, error feedback on workers and server"
    params = PARAMS

    state_fields = ("worker_memory",)
    worker_memory: ErrorFeedback        # d_i: this worker's compression error

    def build(self) -> None:
        super().build()
        self.worker_memory = ErrorFeedback()

    def after_backward(self, step: int) -> None:
        super().after_backward(step)
        v_i = self.worker_memory.compensate(self.flat_grad())
        c, mean = self.upload(v_i, step)
        self.worker_memory.update(v_i, c)
        self.set_grad(self.server_step(mean, step))

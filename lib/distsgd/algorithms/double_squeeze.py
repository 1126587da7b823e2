"""DoubleSqueeze (Tang, Yu, Lian, Zhang & Liu, ICML 2019, Algorithm 1): bidirectional
compression with error compensation on both the workers and the server. In gradient units:

    worker i:  v_i = g_i + d_i;  c_i = C_w(v_i);  d_i <- v_i - c_i        (lines 4-6)
    server:    v = (1/N) sum_i c_i + d;  q = C_s(v);  d <- v - q           (lines 8-10)
    worker i:  x <- optimizer_step(x, q)                                   (line 12)

The server is replicated: every rank all-gathers the c_i (compress.exchange.average), forms the
same v and applies C_s with the same seed, so every rank holds the same server error d and the
same q, and no parameter-server process or download collective is needed. C_w and C_s are the
same compressor (`compressor`, `ratio`). Parameter-server traffic per worker: up |C_w|, down |C_s|.
"""
from __future__ import annotations

from ..compress import ErrorFeedback
from ..compress.exchange import average
from .compression import PARAMS, SERVER, WORKER, CompressedAlgorithm
from .registry import register


@register
class DoubleSqueeze(CompressedAlgorithm):
    name = "double_squeeze"
    summary = "DoubleSqueeze: bidirectional compression, error feedback on workers and (replicated) server"
    params = PARAMS

    state_fields = ("worker_memory", "server_memory")
    worker_memory: ErrorFeedback        # d_i: this worker's compression error
    server_memory: ErrorFeedback        # d: the (replicated) server's compression error

    def build(self) -> None:
        super().build()
        self.worker_memory = ErrorFeedback()
        self.server_memory = ErrorFeedback()

    def after_backward(self, step: int) -> None:
        c = self.codec
        v_i = self.worker_memory.compensate(self.flat_grad())
        payload, ctx = c.compress(v_i, self.seed(step, WORKER, c))
        self.worker_memory.update(v_i, c.decompress(payload, ctx))
        v = self.server_memory.compensate(average(self.comm, c, payload, ctx))
        q = c(v, self.seed(step, SERVER, c))
        self.server_memory.update(v, q)
        self.set_grad(q)
        self.count(c.wire_bytes(self.numel), c.wire_bytes(self.numel))

"""Tensor partition + priority scheduling of the gradient all-reduce (ByteScheduler: Peng et al.,
"A Generic Communication Scheduler for Distributed DNN Training Acceleration", SOSP 2019; one of
the seven methods of Shi et al.'s survey, arXiv 2005.13247).

Same update as S-SGD (average gradient, SGD step), different order of communication:

- partition: every gradient tensor is split into partitions of at most `partition_mb`, each
  all-reduced on its own (so a large tensor does not block the link);
- priority: partitions wait in a queue ordered by layer, front layers first, and are launched
  while the bytes in flight stay within `credit_mb` (ByteScheduler's credit), so the gradients the
  next forward needs first overtake those of later layers;
- cross-iteration overlap: no global barrier after backward. Each layer waits for its own
  partitions and is updated (`layerwise.sgd_update`, SGD with momentum and weight decay) just
  before its forward in the next iteration, so the communication of later layers overlaps the
  next forward pass (ByteScheduler's PyTorch plugin does the same with forward pre-hooks).

Every rank must issue its collectives in the same order, so the scheduler decides only at
points that are the same on every rank [reconstructed: ByteScheduler's own thread polls for
completions; Horovod's coordinator agrees on the order]: a gradient hook launches queued
partitions while credit allows (never waiting); the barrier after backward launches the rest,
waiting for the oldest in-flight partition whenever the credit is full, so at most `credit_mb`
(the front layers' partitions, by priority) is still in flight when the next forward starts; a
forward pre-hook waits for its layer's partitions. `finalize()` applies the pending update of the
last step. Bytes: one all-reduce of every gradient per step.
"""
from __future__ import annotations

import heapq
from collections import deque
from typing import TYPE_CHECKING

import torch

from .base import Param
from .layerwise import LayerwiseDeferred, unit_params
from .registry import register

if TYPE_CHECKING:
    from ..comm import Handle


class _Part:
    """A slice of one parameter's gradient buffer, all-reduced on its own."""

    def __init__(self, buffer: torch.Tensor, priority: tuple[int, int]) -> None:
        self.buffer, self.priority = buffer, priority
        self.nbytes = buffer.numel() * buffer.element_size()
        self.handle: Handle | None = None
        self.done = True

    def __lt__(self, other: "_Part") -> bool:
        return self.priority < other.priority


@register
class ByteScheduler(LayerwiseDeferred):
    name = "bytescheduler"
    summary = "tensor partition + priority (ByteScheduler): front layers' partitions first, next forward overlapped"
    params = (
        Param("partition_mb", 1.0, "largest partition in MB", lambda v: v > 0, "a number > 0"),
        Param("credit_mb", 4.0, "bytes in flight at most, in MB (at least one partition)", lambda v: v > 0,
              "a number > 0"),
    )

    partition_mb: float
    credit_mb: float

    def build(self) -> None:
        super().build()
        self.grad: dict[torch.nn.Parameter, torch.Tensor] = {}
        self.parts: dict[torch.nn.Parameter, list[_Part]] = {}
        for layer, m in enumerate(self.modules):
            for q in unit_params(m):
                flat = torch.zeros(q.numel(), dtype=q.dtype, device=q.device)
                size = max(1, int(self.partition_mb * 2**20) // q.element_size())
                self.grad[q] = flat
                self.parts[q] = [_Part(flat[i:i + size], (layer, i)) for i in range(0, q.numel(), size)]
        self.queue: list[_Part] = []                 # heap: front layers first
        self.inflight: deque[_Part] = deque()        # issue order = completion order on the link
        self.inflight_bytes = 0

    # ------------------------------------------------------------------ scheduling
    def gradient_ready(self, q: torch.nn.Parameter) -> None:
        self.grad[q].copy_(q.grad.reshape(-1))
        for part in self.parts[q]:
            part.done = False
            heapq.heappush(self.queue, part)
        self._pump()

    def _pump(self, block: bool = False) -> None:
        """Launch queued partitions, highest priority first, while the bytes in flight stay within
        the credit; with `block`, wait for the oldest in-flight partition to make room."""
        credit = self.credit_mb * 2**20
        while self.queue:
            if self.inflight and self.inflight_bytes + self.queue[0].nbytes > credit:
                if not block:
                    return
                self._retire()
                continue
            part = heapq.heappop(self.queue)
            part.handle = self.comm.all_reduce(part.buffer, op="avg", async_op=True)
            self.inflight.append(part)
            self.inflight_bytes += part.nbytes

    def _retire(self) -> None:
        part = self.inflight.popleft()
        part.handle.wait()
        part.handle, part.done = None, True
        self.inflight_bytes -= part.nbytes

    def _complete(self, part: _Part) -> None:
        while not part.done:
            if self.inflight:
                self._retire()
            self._pump(block=True)

    # ------------------------------------------------------------------ update
    def optimizer_step(self, step: int) -> None:
        """No barrier: the update is applied layer by layer in the next forward."""
        self.flush()
        self.begin_update()
        self._pump(block=True)

    def wait_for(self, module: torch.nn.Module) -> None:
        for q in unit_params(module):
            for part in self.parts[q]:
                self._complete(part)

    def averaged_grad(self, q: torch.nn.Parameter) -> torch.Tensor:
        return self.grad[q].view_as(q)

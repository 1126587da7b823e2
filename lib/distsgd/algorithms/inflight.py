"""Collectives launched now and applied later (SSD-SGD's gradient pushes, CoCoD-SGD's model
all-reduce): their result tensors with their handles, in launch order.

A checkpoint cannot hold a collective in flight, so `state_dict()` waits for them (they would
arrive unchanged later) and holds their results; after `load_state_dict()` they count as arrived.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Iterator

import torch

if TYPE_CHECKING:
    from ..comm import Handle


class InFlight:
    """Result tensors that asynchronous collectives fill, oldest first."""

    def __init__(self) -> None:
        self.items: list[tuple[torch.Tensor, Handle | None]] = []   # None: arrived (restored)

    def add(self, result: torch.Tensor, handle: "Handle") -> None:
        self.items.append((result, handle))

    def drain(self) -> Iterator[torch.Tensor]:
        """Empty the queue, yielding each result in launch order once its collective arrived."""
        items, self.items = self.items, []
        for result, handle in items:
            if handle is not None:
                handle.wait()
            yield result

    def state_dict(self) -> dict[str, Any]:
        for _, handle in self.items:
            if handle is not None:
                handle.wait()
        return {"results": [result.clone() for result, _ in self.items]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.items = [(result.clone(), None) for result in state["results"]]

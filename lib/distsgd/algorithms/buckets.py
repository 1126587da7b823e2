"""Fusion buckets shared by the gradient-reduction schedules (ssgd, the survey's schedules, PS,
DeAR): parameters whose gradients travel in one collective, packed into one flat buffer."""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from ..comm import Handle


class Bucket:
    """Parameters whose gradients travel in one collective. `buffer` holds their gradients back
    to back, followed by `pad` zeros (a reduce-scatter needs a length divisible by the group)."""

    def __init__(self, params: list[torch.nn.Parameter], pad_to: int = 1) -> None:
        self.params = params
        self.numel = sum(p.numel() for p in params)
        self.pad = -self.numel % pad_to
        self.buffer = torch.zeros(self.numel + self.pad, dtype=params[0].dtype, device=params[0].device)
        self.ready = 0
        self.handle: Handle | None = None

    @property
    def nbytes(self) -> int:
        return self.numel * self.buffer.element_size()

    def pack(self) -> None:
        """Copy the parameters' gradients into the buffer (zeros for a parameter without one)."""
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                self.buffer[offset:offset + n].zero_()
            else:
                self.buffer[offset:offset + n].copy_(p.grad.reshape(-1))
            offset += n

    def unpack(self) -> None:
        """Copy the buffer back into the parameters' `.grad`."""
        for p, g in zip(self.params, self.views()):
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(g)

    def views(self) -> list[torch.Tensor]:
        """The slice of the buffer belonging to each parameter, shaped like it."""
        out, offset = [], 0
        for p in self.params:
            n = p.numel()
            out.append(self.buffer[offset:offset + n].view_as(p))
            offset += n
        return out


def make_buckets(params: list[torch.nn.Parameter], cap_bytes: float, pad_to: int = 1) -> list[Bucket]:
    """Group `params` (in the order given, usually backward order) into consecutive buckets of at
    most `cap_bytes` (see `plan_groups`)."""
    return [Bucket(group, pad_to) for group in plan_groups(params, cap_bytes)]


def plan_groups(params: list[torch.Tensor], cap_bytes: float) -> list[list[torch.Tensor]]:
    """`params` (in the order given) cut into consecutive groups of at most `cap_bytes` and one
    dtype (a single tensor larger than the cap gets a group of its own; a cap of 0 gives one group
    per tensor): the rule of DDP's buckets and of torch's `_take_tensors` (`group_counts`)."""
    counts = group_counts([p.numel() * p.element_size() for p in params], cap_bytes,
                          [p.dtype for p in params])
    groups, start = [], 0
    for k in counts:
        groups.append(params[start:start + k])
        start += k
    return groups


def group_counts(nbytes: list[int], cap_bytes: float, kinds: list[object] | None = None) -> list[int]:
    """`plan_groups` on sizes only: the number of consecutive tensors (of `nbytes` each, and of
    `kinds[i]` dtype when given) in each group of at most `cap_bytes`; used by the planners that
    hold no tensors (the timeline simulator)."""
    counts: list[int] = []
    size = 0
    for i, n in enumerate(nbytes):
        if not counts or size + n > cap_bytes or (kinds is not None and kinds[i] != kinds[i - 1]):
            counts.append(0)
            size = 0
        counts[-1] += 1
        size += n
    return counts


def group_sizes(params: list[torch.nn.Parameter], sizes: list[int], pad_to: int = 1) -> list[Bucket]:
    """Consecutive buckets of `sizes[i]` parameters each (sum(sizes) == len(params))."""
    assert sum(sizes) == len(params), (sizes, len(params))
    out, start = [], 0
    for k in sizes:
        out.append(Bucket(params[start:start + k], pad_to))
        start += k
    return out

"""Flattening a model's state into one buffer, for one-collective model averaging."""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Iterator

import torch

if TYPE_CHECKING:
    from ..comm import Comm, Group


def averaged_tensors(model: torch.nn.Module, include_buffers: bool = True) -> list[torch.Tensor]:
    """The tensors that model averaging averages: parameters, and floating-point buffers
    (BatchNorm running statistics) when `include_buffers`. Integer buffers (num_batches_tracked)
    are the same on every rank and are left alone."""
    tensors = [p.data for p in model.parameters()]
    if include_buffers:
        tensors += [b for b in model.buffers() if b.is_floating_point()]
    return tensors


def flatten(tensors: list[torch.Tensor]) -> torch.Tensor:
    """One contiguous copy of `tensors`."""
    return torch.cat([t.reshape(-1) for t in tensors])


def unflatten_into(flat: torch.Tensor, tensors: list[torch.Tensor]) -> None:
    """Copy the consecutive slices of `flat` back into `tensors` (in place)."""
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset:offset + n].view_as(t))
        offset += n


def average(comm: "Comm", tensors: list[torch.Tensor], group: "Group | None" = None) -> torch.Tensor:
    """Replace `tensors` by their mean over the ranks (of `group`) with one all-reduce of their
    flattened copy: x <- (1/p) sum_i x_i. Returns the averaged flat buffer (for an algorithm
    that derives its own term from it, e.g. VRL-SGD's Delta_i or KAVG's reduction momentum)."""
    flat = flatten(tensors)
    comm.all_reduce(flat, op="avg", group=group)
    unflatten_into(flat, tensors)
    return flat


@contextlib.contextmanager
def average_swapped_in(comm: "Comm", tensors: list[torch.Tensor]) -> Iterator[None]:
    """Inside: `tensors` hold their mean over the ranks, (1/p) sum_i x_i, from one uncounted
    all-reduce (bookkeeping for an evaluation: not in the ledger); on exit each rank's own
    values again, so that training goes on from them."""
    with torch.no_grad():
        own = flatten(tensors)
        unflatten_into(comm.reduce_uncounted(own.clone(), op="avg"), tensors)
    try:
        yield
    finally:
        with torch.no_grad():
            unflatten_into(own, tensors)

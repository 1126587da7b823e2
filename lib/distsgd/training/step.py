"""One training step of a distributed algorithm: the hook order that every loop shares.

The run's loop (`distsgd.training.loop`), the schedule benchmark (`distsgd.systems.benchmark`) and one's
own script call `train_step` once per iteration, after `algo.setup(model, optimizer, comm,
config)` returned `net`:

    for step, (x, y) in enumerate(batches):
        loss = train_step(algo, optimizer, net, F.cross_entropy, x, y, step)
    algo.finalize()

`train_steps` is that loop over a batch function (the benchmark's); the run's loop calls
`train_step` itself, with its logging, evaluation and checkpoints between iterations.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import torch

if TYPE_CHECKING:
    from ..algorithms import Algorithm


def train_step(algo: "Algorithm", optimizer: torch.optim.Optimizer, net: torch.nn.Module,
               loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
               x: torch.Tensor, y: torch.Tensor, step: int) -> torch.Tensor:
    """before_forward -> zero_grad -> forward and loss_fn(net(x), y) -> backward ->
    after_backward -> optimizer_step -> after_step; the loss, detached (not synchronised: reading
    it is the caller's choice). The step tags the ledger entries of the collectives it issues."""
    algo.comm.step = step
    algo.before_forward(step)
    optimizer.zero_grad(set_to_none=True)
    loss = loss_fn(net(x), y)
    loss.backward()
    algo.after_backward(step)
    algo.optimizer_step(step)
    algo.after_step(step)
    return loss.detach()


def train_steps(algo: "Algorithm", optimizer: torch.optim.Optimizer, net: torch.nn.Module,
                loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                batches: Callable[[int], tuple[torch.Tensor, torch.Tensor]], start: int, steps: int) -> None:
    """`steps` iterations (`train_step`) from step `start` on, on batches(step)."""
    for step in range(start, start + steps):
        x, y = batches(step)
        train_step(algo, optimizer, net, loss_fn, x, y, step)

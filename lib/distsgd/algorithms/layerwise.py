"""Layer-wise deferred updates, shared by DeAR and ByteScheduler-style scheduling: the update
of step t is applied to each layer just before that layer's forward in step t+1, so the rest of
the gradient communication overlaps the next forward pass.

`sgd_update` is torch.optim.SGD's rule (dampening 0, no Nesterov), applied to a subset of the
parameters with the optimizer's own hyper-parameters and momentum buffers, so a deferred update
gives the parameters `optimizer.step()` would have given:

    d = g + weight_decay * x;   buf = d (first step) or momentum * buf + d;   x -= lr * buf
"""
from __future__ import annotations

from typing import Iterable

import torch

from ..errors import ConfigError


def check_sgd(optimizer: torch.optim.Optimizer, algo: str) -> None:
    """Deferred updates re-implement SGD with momentum and weight decay, nothing else."""
    if type(optimizer) is not torch.optim.SGD:
        raise ConfigError("optimizer", type(optimizer).__name__.lower(), ["sgd"],
                          f"{algo} applies SGD (momentum, weight decay) layer by layer itself")
    for group in optimizer.param_groups:
        if group.get("nesterov") or group.get("dampening") or group.get("maximize"):
            raise ConfigError("optimizer", "sgd with nesterov/dampening/maximize", ["plain sgd"],
                              f"{algo} implements SGD with momentum and weight decay only")


def check_sgd_config(optimizer: str, algo: str) -> None:
    """The same check on the config, before any process starts."""
    if optimizer != "sgd":
        raise ConfigError("optimizer", optimizer, ["sgd"],
                          f"{algo} applies SGD (momentum, weight decay) layer by layer itself")


def forward_order_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The update units: the outermost modules that own trainable parameters directly, in
    registration order (the forward order of this kit's models; a unit run out of order is still
    updated before its forward). A unit's parameters are those of its whole subtree (`unit_params`),
    so a child whose weights the parent uses without calling it (nn.MultiheadAttention.out_proj)
    is updated with its parent."""
    units: list[torch.nn.Module] = []
    covered: set[int] = set()
    for m in model.modules():
        if id(m) in covered:
            continue
        if any(p.requires_grad for p in m.parameters(recurse=False)):
            units.append(m)
            covered.update(id(c) for c in m.modules())
    return units


def unit_params(unit: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The trainable parameters a unit updates (its subtree's)."""
    return [p for p in unit.parameters() if p.requires_grad]


def group_hyper(optimizer: torch.optim.Optimizer) -> dict[torch.nn.Parameter, dict]:
    """Parameter -> its param group (lr, momentum, weight_decay)."""
    return {p: g for g in optimizer.param_groups for p in g["params"]}


@torch.no_grad()
def sgd_update(optimizer: torch.optim.Optimizer, params: Iterable[torch.nn.Parameter],
               grads: Iterable[torch.Tensor], lrs: dict[int, float]) -> None:
    """Apply SGD to `params` with gradients `grads`; `lrs` maps id(param group) to the learning
    rate of the step the gradients belong to (the loop may already have set the next one)."""
    groups = group_hyper(optimizer)
    for p, g in zip(params, grads):
        group = groups[p]
        d = g.add(p, alpha=group["weight_decay"]) if group["weight_decay"] else g
        if group["momentum"]:
            state = optimizer.state[p]
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = d.detach().clone()
            else:
                buf.mul_(group["momentum"]).add_(d)
            d = buf
        p.add_(d, alpha=-lrs[id(group)])

"""Layer-wise deferred updates, shared by DeAR and ByteScheduler-style scheduling: the update
of step t is applied to each layer just before that layer's forward in step t+1, so the rest of
the gradient communication overlaps the next forward pass.

`sgd_update` is torch.optim.SGD's rule (dampening 0, no Nesterov), applied to a subset of the
parameters with the optimizer's own hyper-parameters and momentum buffers, so a deferred update
gives the parameters `optimizer.step()` would have given:

    d = g + weight_decay * x;   buf = d (first step) or momentum * buf + d;   x -= lr * buf

`LayerwiseDeferred` holds the mechanism once (hooks, the pending update, its flush); a schedule
says only how a gradient leaves (`gradient_ready`), what a module must wait for before its
update (`wait_for`) and where its averaged gradient lies (`averaged_grad`).
"""
from __future__ import annotations

from typing import Any, Iterable

import torch

from ..errors import ConfigError
from .base import Algorithm, RunFacts


def check_sgd(optimizer: torch.optim.Optimizer, algo: str) -> None:
    """Algorithms that take the update into their own hands (deferred layer-wise updates, SSD-SGD's
    server) re-implement torch SGD with momentum and weight decay, nothing else."""
    if type(optimizer) is not torch.optim.SGD:
        raise ConfigError("optimizer", type(optimizer).__name__.lower(), ["sgd"],
                          f"{algo} applies the SGD update (momentum, weight decay) itself")
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
               grads: Iterable[torch.Tensor], lrs: dict[int, float],
               groups: dict[torch.nn.Parameter, dict]) -> None:
    """Apply SGD to `params` with gradients `grads`; `lrs` maps id(param group) to the learning
    rate of the step the gradients belong to (the loop may already have set the next one), `groups`
    each parameter to its param group (`group_hyper`, taken once per step: a unit's update looks up
    only its own parameters)."""
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


class LayerwiseDeferred(Algorithm):
    """The update of step t applied module by module just before each module's forward in step
    t+1 (forward pre-hooks), from averaged gradients the subclass communicates. A gradient of
    step t+1 arriving while step t's update is still pending (a module the forward did not run)
    first flushes it; `finalize` flushes what the last step left pending."""

    @classmethod
    def check_run(cls, params: dict[str, Any], facts: RunFacts) -> None:
        check_sgd_config(facts.optimizer, cls.name)

    def build(self) -> None:
        """The update units and their hooks; a schedule's build() adds its buffers after this."""
        check_sgd(self.optimizer, self.name)
        self.modules = forward_order_modules(self.model)
        self.pending = False                 # an update waits to be applied
        self.updated: set[torch.nn.Module] = set()
        self.lrs: dict[int, float] = {}      # id(param group) -> lr of the pending update's step
        self.hyper: dict[torch.nn.Parameter, dict] = {}   # parameter -> its param group (begin_update)
        for m in self.modules:
            self.hook(m.register_forward_pre_hook(self._before_module))
            for q in unit_params(m):
                self.hook(q.register_post_accumulate_grad_hook(self._grad_ready))

    # ------------------------------------------------------------------ for the schedules
    def gradient_ready(self, q: torch.nn.Parameter) -> None:
        """q.grad of this step is complete: start communicating it (or note it)."""
        raise NotImplementedError

    def wait_for(self, module: torch.nn.Module) -> None:
        """Return once the averaged gradients of `module`'s parameters have arrived."""
        raise NotImplementedError

    def averaged_grad(self, q: torch.nn.Parameter) -> torch.Tensor:
        """The averaged gradient of q (shape of q), valid after wait_for(its module)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ the mechanism
    def begin_update(self) -> None:
        """Called by the schedule's optimizer_step once this step's communication has started:
        the update is now pending, applied in the next forward."""
        self.lrs = {id(g): g["lr"] for g in self.optimizer.param_groups}
        self.hyper = group_hyper(self.optimizer)
        self.pending, self.updated = True, set()

    def _grad_ready(self, q: torch.nn.Parameter) -> None:
        if self.pending:                     # a module the last forward did not run
            self.flush()
        self.gradient_ready(q)

    def _before_module(self, module: torch.nn.Module, _inputs: Any) -> None:
        if self.pending and module not in self.updated:
            self._update(module)

    def _update(self, module: torch.nn.Module) -> None:
        self.wait_for(module)
        params = unit_params(module)
        sgd_update(self.optimizer, params, [self.averaged_grad(q) for q in params], self.lrs, self.hyper)
        self.updated.add(module)
        if len(self.updated) == len(self.modules):
            self.pending = False

    def flush(self) -> None:
        """Apply the whole pending update now."""
        for m in self.modules:
            if self.pending and m not in self.updated:
                self._update(m)

    def finalize(self) -> None:
        self.flush()

    # ------------------------------------------------------------------ checkpoint
    def state_dict(self) -> dict[str, Any]:
        """The schedule's fields and the pending update: the modules it has not reached yet,
        their averaged gradients (waited for) and the learning rates of its step."""
        todo = [i for i, m in enumerate(self.modules) if self.pending and m not in self.updated]
        grads = []
        for i in todo:
            self.wait_for(self.modules[i])
            grads += [self.averaged_grad(q).clone() for q in unit_params(self.modules[i])]
        lrs = [self.lrs[id(g)] for g in self.optimizer.param_groups] if todo else []
        return {**super().state_dict(), "update": {"modules": todo, "grads": grads, "lrs": lrs}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore the fields, then put the pending update's gradients where averaged_grad finds
        them (the schedule counts its communication as arrived)."""
        fields = dict(state)
        update = fields.pop("update")
        super().load_state_dict(fields)
        todo = [self.modules[i] for i in update["modules"]]
        self.pending, self.updated = bool(todo), set(self.modules) - set(todo)
        self.lrs = {id(g): lr for g, lr in zip(self.optimizer.param_groups, update["lrs"])}
        self.hyper = group_hyper(self.optimizer)
        params = [q for m in todo for q in unit_params(m)]
        for q, g in zip(params, update["grads"], strict=True):
            self.averaged_grad(q).copy_(g)

"""Every distsgd algorithm in one's own training script: `wrap` and `finalize`.

    import torch.distributed as dist, distsgd
    dist.init_process_group("nccl")                      # the user's own set-up (or gloo)
    model, optimizer = distsgd.wrap(model, optimizer, "local_sgd", period=8)
    for x, y in loader:                                  # the user's own loop, unchanged
        optimizer.zero_grad(); loss_fn(model(x), y).backward(); optimizer.step()
    distsgd.finalize(model, optimizer)                   # drain / final average before evaluation

`wrap` sets the algorithm up exactly as a run's loop does (`Algorithm.setup` on the user's model
and optimizer, a `Comm` on the existing process group, a `Config` of what the algorithm reads) and
drives the same five hooks (`distsgd.algorithms.base`) from the user's calls, so there is one
implementation of every algorithm:

    first forward of step t (a forward pre-hook on the returned model, outside torch.no_grad()):
        algo.learning_rate(t, lr of the first param group)      # STL-SGD's stage; the rate is the user's
        algo.before_forward(t)
    optimizer.step():  algo.after_backward(t); algo.optimizer_step(t); algo.after_step(t); t += 1
    finalize(model, optimizer):  algo.finalize()

`train_step` (`distsgd.training.step`) calls the same hooks in the same order, so a user's loop over the
same batches from the same model ends where `distsgd.run` ends (tests/test_wrap.py). The learning
rate is the user's: their optimizer's param groups, moved by their own lr scheduler.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch
import torch.distributed as dist

from ..algorithms import REGISTRY, Algorithm
from ..comm import Comm, Ledger, NetModel, parse_net, teardown
from .config import Config
from ..errors import ConfigError
from ..lr_schedule import EXTERNAL


class DistributedOptimizer(torch.optim.Optimizer):
    """The user's optimizer seen through a distsgd algorithm: `step()` runs the algorithm's
    after_backward, optimizer_step and after_step (which step the user's optimizer, or, for the
    algorithms that apply the update themselves, its param groups' hyper-parameters).

    `param_groups`, `state`, `defaults`, `state_dict`, `load_state_dict` and `zero_grad` are the
    user's optimizer's (so `torch.optim.lr_scheduler` schedulers work on this object); any other
    attribute is looked up on it too. `Optimizer.__init__` is not called: this object holds no
    parameters of its own. `algorithm` is the set-up `Algorithm` (its `comm.ledger`, `metrics()`,
    `evaluating()`, `state_dict()` for checkpoints); `steps` counts the steps taken."""

    def __init__(self, optimizer: torch.optim.Optimizer, algorithm: Algorithm) -> None:
        self.optimizer = optimizer
        self.algorithm = algorithm
        self.steps = 0
        self._begun = False             # before_forward of step `steps` has run

    @property
    def param_groups(self) -> list[dict[str, Any]]:      # type: ignore[override]
        return self.optimizer.param_groups

    @property
    def state(self) -> Any:                               # type: ignore[override]
        return self.optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:                 # type: ignore[override]
        return self.optimizer.defaults

    def __getattr__(self, name: str) -> Any:
        if name == "optimizer":         # not set yet (unpickling): no recursion
            raise AttributeError(name)
        return getattr(self.optimizer, name)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none)

    def begin_step(self) -> None:
        """The algorithm's start of step `steps` (once per step): the forward pre-hook calls it,
        and `step()` does if no forward went through the returned model."""
        if self._begun:
            return
        self._begun = True
        algo, t = self.algorithm, self.steps
        algo.comm.step = t
        algo.learning_rate(t, self.param_groups[0]["lr"])
        algo.before_forward(t)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """One step of the algorithm on the gradients of the last backward."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.begin_step()
        algo, t = self.algorithm, self.steps
        algo.after_backward(t)
        algo.optimizer_step(t)
        algo.after_step(t)
        self.steps += 1
        self._begun = False
        return loss


def _optimizer_name(optimizer: torch.optim.Optimizer) -> str:
    """The config's name of the optimizer class: 'sgd', 'adam', else the class name lower-cased
    (which the algorithms that need torch's SGD reject by name)."""
    return {torch.optim.SGD: "sgd", torch.optim.Adam: "adam"}.get(type(optimizer), type(optimizer).__name__.lower())


def wrap(model: torch.nn.Module, optimizer: torch.optim.Optimizer, algo: str, *,
         group: dist.ProcessGroup | None = None, net: str | NetModel | None = None,
         ledger: Ledger | None = None, seed: int = 0, batch_size: int | None = None,
         **params: Any) -> tuple[torch.nn.Module, DistributedOptimizer]:
    """`algo` (a name of `python -m distsgd list`) with its parameters `params` (the same names and
    defaults) on the user's model and optimizer; returns (the model to run forward on, the
    optimizer to step). The model is `model` itself, with a forward pre-hook, or the algorithm's
    wrapper around it (`ddp`: a DistributedDataParallel, whose state_dict keys start "module.").

    - group: the process group (default: the default group, which must be initialised; never
      initialised here); one holding every rank.
    - net: emulate a network ('10GbE', '100Mbit,50us', a `NetModel`): collectives complete no
      earlier than that network would deliver them (`distsgd.comm`).
    - ledger: the `Ledger` that records every collective (default: a new one,
      `optimizer.algorithm.comm.ledger`).
    - seed: the seed of the compressors' shared randomness (`distsgd.run`'s `seed`).
    - batch_size: the per-rank mini-batch size, needed where the algorithm derives per-rank batch
      sizes from it (CoCoD-SGD's `batch_weights`; `optimizer.algorithm.batch_size()` is then this
      rank's).

    Raises ConfigError (naming the field and what is allowed) for an unknown algorithm or
    parameter, a bad value, or an optimizer the algorithm cannot work with."""
    if algo not in REGISTRY:
        raise ConfigError("algo", algo, sorted(REGISTRY))
    cls = REGISTRY[algo]
    resolved = cls.resolve_params(params)
    if not dist.is_initialized():
        raise RuntimeError("distsgd.wrap: no process group; call torch.distributed.init_process_group first")
    world = dist.get_world_size()
    group0 = optimizer.param_groups[0]
    config = Config(algo=algo, params=resolved, nproc=world, lr=float(group0["lr"]),
                    optimizer=_optimizer_name(optimizer), momentum=float(group0.get("momentum", 0.0)),
                    weight_decay=float(group0.get("weight_decay", 0.0)), schedule=EXTERNAL, seed=seed,
                    net=net if isinstance(net, str) else "", launcher="env")
    if batch_size is not None:
        config = dataclasses.replace(config, batch_size=batch_size)
    elif len(set(cls.batch_sizes(resolved, config.facts()))) > 1:
        raise ConfigError("batch_size", None, "the per-rank mini-batch size",
                          f"{algo} with these parameters sets per-rank batch sizes from it")
    cls.check_run(resolved, config.facts())
    device = next(model.parameters()).device
    comm = Comm.on_group(device, parse_net(net) if isinstance(net, str) else net, group)
    if ledger is not None:
        comm.ledger = ledger
    algorithm = cls(**resolved)
    net_module = algorithm.setup(model, optimizer, comm, config.facts())
    wrapped = DistributedOptimizer(optimizer, algorithm)

    def before_forward(module: torch.nn.Module, args: Any) -> None:
        if torch.is_grad_enabled():     # an evaluation under torch.no_grad() starts no step
            wrapped.begin_step()

    algorithm.hook(net_module.register_forward_pre_hook(before_forward))
    return net_module, wrapped


def finalize(model: torch.nn.Module, optimizer: DistributedOptimizer) -> None:
    """The algorithm's `finalize()`: in-flight communication drained, pending updates applied,
    the final average taken (local SGD and its kin), so every rank holds the model to evaluate;
    it returns once every rank has completed its collectives (`Comm.settle`), so that a script may
    exit or tear its group down right after it. `model` and `optimizer` are what `wrap` returned."""
    if not isinstance(optimizer, DistributedOptimizer):
        raise TypeError(f"distsgd.finalize: the optimizer returned by distsgd.wrap, got {type(optimizer).__name__}")
    algo = optimizer.algorithm
    if model is not algo.net and model is not algo.model:
        raise ValueError("distsgd.finalize: `model` is not the model distsgd.wrap returned with this optimizer")
    algo.finalize()
    algo.comm.assert_drained()
    algo.comm.settle()          # every rank past its last collective: evaluating, exiting are safe
    teardown.leave_at_exit()    # and at the script's end, no interpreter teardown (gloo's abort)

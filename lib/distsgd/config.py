"""The run configuration: one dataclass, validated before any process starts.

A `Config` fully determines a run (together with the code version). Its `hash()` names the
run directory, so re-running an identical configuration reuses the finished result.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError

OPTIMIZERS = ("sgd", "adam")
BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
SCHEDULES = ("constant", "cosine", "step")
LAUNCHERS = ("auto", "spawn", "env")
DROPIT_STRATEGIES = ("mink", "random")

# Fields that do not change what a run computes, so they are left out of the hash.
_NOT_HASHED = ("out", "progress", "timeout_s", "launcher", "name")


@dataclass
class Config:
    """Everything one training run needs.

    `params` holds the algorithm's own parameters (``--set KEY=VALUE``); validation fills in
    the algorithm's defaults so that the stored config is complete.
    """

    algo: str = "ssgd"
    params: dict[str, Any] = field(default_factory=dict)
    model: str = "mlp"
    model_options: dict[str, Any] = field(default_factory=dict)
    dropit_gamma: float = 0.0          # DropIT's drop ratio for Linear/Conv2d inputs (0: off)
    dropit_strategy: str = "mink"
    data: str = "digits"
    data_options: dict[str, Any] = field(default_factory=dict)
    partition: str = "iid"
    nproc: int = 4
    steps: int = 300
    batch_size: int = 32
    lr: float = 0.1
    optimizer: str = "sgd"
    momentum: float = 0.0
    weight_decay: float = 0.0
    schedule: str = "constant"
    warmup_steps: int = 0
    seed: int = 0
    net: str = ""
    backend: str = "auto"
    device: str = "auto"
    log_every: int = 10
    eval_every: int = 50
    eval_samples: int = 2048
    eval_train: bool = False           # also log the training objective at evaluation points
    timeout_s: float = 300.0
    progress: bool = True
    launcher: str = "auto"
    name: str = ""
    out: str = ""

    # ------------------------------------------------------------------ validation
    def validate(self) -> "Config":
        """Check every field; raise ConfigError naming the field and what is allowed.

        Returns a copy whose `params` include the algorithm's defaults.
        """
        from . import algorithms, data, models  # late: these import torch
        from .comm.netmodel import parse_net

        if self.algo not in algorithms.REGISTRY:
            raise ConfigError("algo", self.algo, sorted(algorithms.REGISTRY))
        data.check_options(self.data, self.data_options)
        if self.model not in models.MODELS:
            raise ConfigError("model", self.model, models.MODELS)
        data.parse_partition(self.partition)
        _check_int("nproc", self.nproc, 1)
        _check_int("steps", self.steps, 1)
        _check_int("batch_size", self.batch_size, 1)
        _check_int("warmup_steps", self.warmup_steps, 0)
        _check_int("log_every", self.log_every, 1)
        _check_int("eval_every", self.eval_every, 0)
        _check_int("eval_samples", self.eval_samples, 1)
        _check_int("seed", self.seed, 0)
        if not (isinstance(self.lr, (int, float)) and self.lr > 0):
            raise ConfigError("lr", self.lr, "a number > 0")
        if not (0 <= self.momentum < 1):
            raise ConfigError("momentum", self.momentum, "0 <= momentum < 1")
        if self.weight_decay < 0:
            raise ConfigError("weight_decay", self.weight_decay, "a number >= 0")
        if self.timeout_s <= 0:
            raise ConfigError("timeout_s", self.timeout_s, "a number of seconds > 0")
        _check_choice("optimizer", self.optimizer, OPTIMIZERS)
        _check_choice("schedule", self.schedule, SCHEDULES)
        _check_choice("backend", self.backend, BACKENDS)
        _check_choice("device", self.device, DEVICES)
        _check_choice("launcher", self.launcher, LAUNCHERS)
        _check_choice("dropit_strategy", self.dropit_strategy, DROPIT_STRATEGIES)
        if not (isinstance(self.dropit_gamma, (int, float)) and 0 <= self.dropit_gamma < 1):
            raise ConfigError("dropit_gamma", self.dropit_gamma, "0 <= gamma < 1 (0: DropIT off)")
        if self.backend == "nccl" and self.device == "cpu":
            raise ConfigError("backend", self.backend, BACKENDS, "nccl needs device=cuda")
        parse_net(self.net)
        algo = algorithms.REGISTRY[self.algo]
        params = algo.resolve_params(self.params)
        algo.check_config(params, self)
        return dataclasses.replace(self, params=params)

    # ------------------------------------------------------------------ identity
    def hashed_fields(self) -> dict[str, Any]:
        """The fields that determine the result (everything but output/UI settings)."""
        d = dataclasses.asdict(self)
        for k in _NOT_HASHED:
            d.pop(k)
        return d

    def hash(self) -> str:
        """A short stable hash of what the run computes."""
        blob = json.dumps(self.hashed_fields(), sort_keys=True, default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:12]

    def run_name(self) -> str:
        """Directory name of the run: `<name or algo>-<hash>`."""
        return f"{self.name or self.algo}-{self.hash()}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Config":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ConfigError(unknown[0], d[unknown[0]], sorted(known), "unknown config field")
        return cls(**d)


def parse_value(text: str) -> Any:
    """Parse a ``--set`` value: JSON where it parses (numbers, true/false, lists), else the string."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text


def parse_assignments(items: list[str], field_name: str = "params") -> dict[str, Any]:
    """Turn ``["period=8", "ratio=0.01"]`` into ``{"period": 8, "ratio": 0.01}``."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(field_name, item, "KEY=VALUE")
        out[key.strip()] = parse_value(value.strip())
    return out


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, value, f"an integer >= {minimum}")


def _check_choice(name: str, value: Any, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(name, value, allowed)

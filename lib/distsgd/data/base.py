"""The dataset interface every loader returns, and the in-memory implementation most share.

A `DataSource` is one dataset with its train and test split. Training reads batches through
`train_batches`, which sees only the indices of one rank's partition and is deterministic given
(indices, batch_size, seed); evaluation reads `eval_batches` in order, without augmentation.
"""
from __future__ import annotations

import abc
import itertools
import math
from typing import Any, Iterator

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

Batch = tuple[Tensor, Tensor]
SPLITS = ("train", "test")


class DataSource(abc.ABC):
    """One dataset, train and test split.

    Attributes:
        name: the dataset's name in `DATASETS`.
        task: ``"classification"`` or ``"regression"``.
        num_classes: number of classes; 1 for regression (the model has one output).
        input_shape: the shape of one model input, e.g. ``(1, 8, 8)`` or ``(32,)``.
        train_labels: int64 ``[num_train()]``, the class of every training sample, used to
            partition the training set. For regression it is a binned target.
    """

    name: str
    task: str
    num_classes: int
    input_shape: tuple[int, ...]
    train_labels: Tensor

    def num_train(self) -> int:
        """Number of training samples."""
        return len(self.train_labels)

    @abc.abstractmethod
    def train_batches(self, indices: Tensor, batch_size: int, seed: int,
                      device: torch.device) -> Iterator[Batch]:
        """An infinite iterator of training batches over the subset `indices` of the train set.

        Every epoch visits the subset in a fresh order drawn from `epoch_generator(seed, epoch)`;
        every batch holds exactly `batch_size` samples (the incomplete tail of an epoch is
        dropped). Training augmentation, where the dataset has one, draws from the same
        generator, so the stream depends on nothing but (indices, batch_size, seed).
        """

    @abc.abstractmethod
    def eval_batches(self, split: str, batch_size: int, device: torch.device,
                     limit: int | None = None) -> Iterator[Batch]:
        """Batches of `split` ("train" or "test") in order, without augmentation.

        At most `limit` samples (the first ones) when `limit` is given; the last batch may be
        smaller than `batch_size`.
        """


class TensorSource(DataSource):
    """A dataset held in memory as tensors.

    Samples are stored as they are kept on disk or generated (`_to_input` turns a stored batch
    into model input) so that, e.g., CIFAR stays uint8 until a batch is drawn. Subclasses with
    training augmentation override `_augment`.
    """

    def __init__(self, name: str, task: str, num_classes: int,
                 train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor],
                 train_labels: Tensor | None = None) -> None:
        """`train` and `test` are (inputs, targets) pairs; `train_labels` defaults to the
        training targets (classification)."""
        self.name, self.task, self.num_classes = name, task, num_classes
        self.train_x, self.train_y = train
        self.test_x, self.test_y = test
        self.input_shape = tuple(self.train_x.shape[1:])
        self.train_labels = self.train_y if train_labels is None else train_labels

    def train_batches(self, indices: Tensor, batch_size: int, seed: int,
                      device: torch.device) -> Iterator[Batch]:
        check_subset(indices, batch_size)
        # This rank's subset moves to the device once; batches are gathered there.
        x = self.train_x[indices].to(device)
        y = self.train_y[indices].to(device)
        for epoch in itertools.count():
            g = epoch_generator(seed, epoch)
            order = torch.randperm(len(indices), generator=g).to(device)
            for start in range(0, len(order) - batch_size + 1, batch_size):
                idx = order[start:start + batch_size]
                yield self._to_input(self._augment(x[idx], g)), y[idx]

    def eval_batches(self, split: str, batch_size: int, device: torch.device,
                     limit: int | None = None) -> Iterator[Batch]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        x, y = (self.train_x, self.train_y) if split == "train" else (self.test_x, self.test_y)
        n = len(x) if limit is None else min(limit, len(x))
        for start in range(0, n, batch_size):
            stop = min(start + batch_size, n)
            yield self._to_input(x[start:stop].to(device)), y[start:stop].to(device)

    def batch(self, indices: Tensor) -> Batch:
        """The training samples `indices` as model input and targets (no augmentation)."""
        return self._to_input(self.train_x[indices]), self.train_y[indices]

    def _to_input(self, x: Tensor) -> Tensor:
        """Stored samples -> model input. Identity for datasets stored as float inputs."""
        return x

    def _augment(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Training augmentation of a stored batch, drawing from `generator`. None by default."""
        return x


def epoch_generator(seed: int, epoch: int) -> torch.Generator:
    """A CPU generator seeded from (seed, epoch): independent streams for every pair."""
    state = np.random.SeedSequence((seed, epoch)).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator().manual_seed(int(state))


def check_subset(indices: Tensor, batch_size: int) -> None:
    """Fail clearly where an epoch over `indices` could not fill a single batch."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if len(indices) < batch_size:
        raise ValueError(f"this rank holds {len(indices)} training samples, fewer than "
                         f"batch_size={batch_size}: use a smaller batch or fewer processes")


def check_int(option: str, value: Any, minimum: int) -> int:
    """A data option that must be an integer >= `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"data_options.{option}", value, f"an integer >= {minimum}")
    return value


def check_float(option: str, value: Any, low: float, high: float = math.inf) -> float:
    """A data option that must be a number in [low, high]."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise ConfigError(f"data_options.{option}", value, f"a number in [{low}, {high}]")
    return float(value)

"""Synthetic convex problems: logistic regression and least squares.

Both draw x ~ N(0, I_d) and a ground-truth w* ~ N(0, I_d / d) (so x·w* has unit variance) from
a generator seeded by the option `data_seed`, not by the run seed: every method and every run
of a comparison sees the same problem. The draws happen in a fixed order (w*, train set, test
set), so changing `n` leaves w* unchanged.

- ``synthetic-logistic``: label ~ Bernoulli(sigmoid(x·w*)), then flipped with probability
  `noise`. Two classes, labels 0/1.
- ``synthetic-lsq``: target y = x·w* + noise·eps with eps ~ N(0, 1); a regression task with
  float32 targets. Its `train_labels` are the decile of y (10 bins) so that label-based
  partitions (shards, Dirichlet) give each rank a different range of targets.
"""
from __future__ import annotations

import torch
from torch import Tensor

from .base import TensorSource, check_float, check_int

TARGET_BINS = 10


def load_logistic(n: int = 4096, d: int = 32, noise: float = 0.0, n_test: int = 1024,
                  data_seed: int = 0) -> TensorSource:
    """Binary logistic-regression data; `noise` is the label-flip probability (<= 0.5)."""
    noise = check_float("noise", noise, 0.0, 0.5)
    g, w = _problem(n, d, n_test, data_seed)

    def sample(count: int) -> tuple[Tensor, Tensor]:
        x = torch.randn(count, d, generator=g)
        y = torch.bernoulli(torch.sigmoid(x @ w), generator=g)
        flip = torch.rand(count, generator=g) < noise
        return x, torch.where(flip, 1 - y, y).to(torch.int64)

    return TensorSource("synthetic-logistic", "classification", 2, sample(n), sample(n_test))


def load_lsq(n: int = 4096, d: int = 32, noise: float = 0.1, n_test: int = 1024,
             data_seed: int = 0) -> TensorSource:
    """Least-squares regression data; `noise` is the standard deviation of the target noise."""
    noise = check_float("noise", noise, 0.0)
    g, w = _problem(n, d, n_test, data_seed)

    def sample(count: int) -> tuple[Tensor, Tensor]:
        x = torch.randn(count, d, generator=g)
        return x, x @ w + noise * torch.randn(count, generator=g)

    train, test = sample(n), sample(n_test)
    return TensorSource("synthetic-lsq", "regression", 1, train, test,
                        train_labels=_quantile_bins(train[1], TARGET_BINS))


def _problem(n: int, d: int, n_test: int, data_seed: int) -> tuple[torch.Generator, Tensor]:
    """Validate the shared options; return the problem's generator and w* ~ N(0, I/d)."""
    check_int("n", n, 1)
    check_int("d", d, 1)
    check_int("n_test", n_test, 1)
    check_int("data_seed", data_seed, 0)
    g = torch.Generator().manual_seed(data_seed)
    return g, torch.randn(d, generator=g) / d**0.5


def _quantile_bins(y: Tensor, bins: int) -> Tensor:
    """The index (0..bins-1) of the quantile bin of every value of `y`."""
    edges = torch.quantile(y, torch.linspace(0, 1, bins + 1)[1:-1])
    return torch.bucketize(y, edges).to(torch.int64)

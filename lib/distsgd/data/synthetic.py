"""Synthetic convex problems: logistic regression and least squares, and least squares whose
optimum differs between groups of samples by a controllable amount (gradient diversity ζ²).

All draw a ground-truth w* ~ N(0, I_d / d) and inputs x ~ N(0, I_d) (so x·w* has unit variance;
synthetic-lsq-shift scales x per group) from a generator seeded by the option `data_seed`, not by
the run seed: every method and every run of a comparison sees the same problem. The draws happen
in a fixed order (w*, the problem's other parameters, train set, test set), so changing `n`
leaves the problem unchanged.

- ``synthetic-logistic``: label ~ Bernoulli(sigmoid(x·w*)), then flipped with probability
  `noise`. Two classes, labels 0/1.
- ``synthetic-lsq``: target y = x·w* + noise·eps with eps ~ N(0, 1); a regression task with
  float32 targets. Its `train_labels` are the decile of y (10 bins) so that label-based
  partitions (shards, Dirichlet) give each rank a different range of targets.
- ``synthetic-lsq-shift``: least squares over `groups` groups of samples, each with its own
  input covariance and its own optimum, `shift` apart; ζ² = 4·shift² (see `load_lsq_shift`).
  Its `train_labels` are the groups.

`lsq_gradient_diversity` measures ζ² of least-squares data split over ranks.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from .base import TensorSource, check_float, check_int

TARGET_BINS = 10
# synthetic-lsq-shift: the range of each group's per-coordinate input variances.
VARIANCE_RANGE = (0.25, 1.75)


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


def load_lsq_shift(n: int = 4096, d: int = 32, noise: float = 0.1, n_test: int = 1024,
                   data_seed: int = 0, groups: int = 8, shift: float = 1.0) -> TensorSource:
    """Least squares whose optimum differs between `groups` groups of samples: ζ² = 4·shift².

    Sample k (train and test alike) belongs to group j = k mod `groups`; `train_labels` are the
    groups, so ``partition="shards"`` with nproc = groups gives rank r exactly group r (with
    fewer ranks, each holds several whole groups and ζ² is smaller). With G = `groups`, group j
    has its own diagonal input covariance D_j and its own optimum w_j:

        x ~ N(0, D_j),  D_j = diag(s_j),  s_jc ~ U[VARIANCE_RANGE]  (per group and coordinate)
        y = x·w_j + noise·eps,  eps ~ N(0, 1),   w_j = w* + shift · D_j⁻¹ v_j,

    with w* ~ N(0, I/d) as in the other problems and v_j ~ N(0, I/d), centred (Σ_j v_j = 0)
    and scaled so that (1/G) Σ_j ‖v_j‖² = 1. For the trainer's loss f_j(w) = E (x·w − y)²,
    ∇f_j(w) = 2 D_j (w − w_j), so ∇f_j(w*) = −2·shift·v_j. These sum to zero, so w* (with bias
    0) minimizes f = (1/G) Σ_j f_j, ∇f(w*) = 0, and

        ζ² = (1/G) Σ_j ‖∇f_j(w*) − ∇f(w*)‖² = 4·shift²   (shift = 0: one problem, ζ² = 0).

    That is the population value. A sample of n/G per group moves it by a sampling error that
    shrinks like √(G/n) (within 16 % at 256 samples per group and d = 16, within 5 % at 2048
    and d = 8, over ten data seeds), and the noise adds about 4·noise²·(d + 1)·G/n.

    The covariances differ between groups on purpose: with a common Hessian the average of
    local SGD's models follows S-SGD's update in expectation, so the drift that ζ² causes
    would cost nothing.
    """
    noise = check_float("noise", noise, 0.0)
    check_int("groups", groups, 2)
    shift = check_float("shift", shift, 0.0)
    g, w = _problem(n, d, n_test, data_seed)
    low, high = VARIANCE_RANGE
    variance = low + (high - low) * torch.rand(groups, d, generator=g)
    v = torch.randn(groups, d, generator=g) / d**0.5
    v -= v.mean(0)
    v /= v.pow(2).sum(1).mean().sqrt()
    optima = w + shift * v / variance

    def sample(count: int) -> tuple[Tensor, Tensor, Tensor]:
        group = torch.arange(count) % groups
        x = torch.randn(count, d, generator=g) * variance[group].sqrt()
        y = (x * optima[group]).sum(1) + noise * torch.randn(count, generator=g)
        return x, y, group

    train_x, train_y, train_group = sample(n)
    test_x, test_y, _ = sample(n_test)
    return TensorSource("synthetic-lsq-shift", "regression", 1, (train_x, train_y),
                        (test_x, test_y), train_labels=train_group)


def lsq_gradient_diversity(x: Tensor, y: Tensor, parts: Sequence[Tensor]) -> float:
    """ζ² = (1/N) Σ_i ‖∇f_i(θ*) − ∇f(θ*)‖² of a linear model with bias on squared error.

    Rank i holds the samples `parts[i]`; f_i(θ) = mean over them of (a·θ − y)², a = (x, 1), the
    trainer's regression loss; f = (1/N) Σ_i f_i and θ* its minimizer, found in closed form (in
    float64) from Σ_i A_iᵀA_i/n_i · θ* = Σ_i A_iᵀy_i/n_i; ∇f_i(θ) = 2 (A_iᵀA_i θ − A_iᵀy_i)/n_i.
    """
    a = torch.cat([x.double().flatten(1), torch.ones(len(x), 1, dtype=torch.float64)], 1)
    grams = torch.stack([a[p].T @ a[p] / len(p) for p in parts])
    moments = torch.stack([a[p].T @ y[p].double() / len(p) for p in parts])
    theta = torch.linalg.solve(grams.sum(0), moments.sum(0))
    grads = 2 * (grams @ theta - moments)
    return float((grads - grads.mean(0)).pow(2).sum(1).mean())


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

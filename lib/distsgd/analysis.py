"""Analysis the notebooks share: time to a target, gradient diversity, log ratios.

When a run first reaches a target, the gradient diversity ζ² of a data split, the log ratio of two
values: plain functions of a run's metrics, of a model and its data, or of numbers, tested in
tests/test_analysis.py."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from .data.base import TensorSource


def first_reaching(metrics: pd.DataFrame, column: str, target: float, at: str,
                   below: bool = True) -> float:
    """The value of column `at` (e.g. "wall_s", "step", "global_reductions") in the first logged
    row where `column` reaches `target`: at or below it when `below` (a loss), at or above it
    otherwise (an accuracy). NaN when the run never reaches it (rows without `column` skipped)."""
    m = metrics.dropna(subset=[column])
    hit = m[m[column] <= target] if below else m[m[column] >= target]
    return float(hit[at].iloc[0]) if len(hit) else float("nan")


def gradient_diversity(model: nn.Module, source: TensorSource, parts: Sequence[Tensor]) -> float:
    """ζ² = (1/N) Σ_i ‖∇f_i(θ) − ∇f(θ)‖² at the model's current parameters θ, where rank i holds
    the training samples `parts[i]`, f_i is the mean cross-entropy over them and ∇f the mean of
    the N local gradients (VRL-SGD's measure of non-identical data, Liang et al. 2019, Assumption 3)."""
    grads = []
    for idx in parts:
        model.zero_grad()
        x, y = source.batch(idx)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    g = torch.stack(grads)
    return float(((g - g.mean(0)) ** 2).sum(1).mean())


def log2_ratio(a: float, b: float, offset: float = 0.0) -> float:
    """log2((a + offset) / (b + offset)): a against b on a log scale (0 when equal, +1 when a is twice
    b), the per-seed quantity of ratio claims. `offset` 1 counts a zero (a target reached before any
    global reduction); NaN when either is NaN."""
    return float(np.log2((a + offset) / (b + offset)))

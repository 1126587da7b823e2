"""Analysis the notebooks share: time to a target, gradient diversity, log ratios, per-round ratios.

When a run first reaches a target, the gradient diversity ζ² of a data split, the log ratio of two
values: plain functions of a run's metrics, of a model and its data, or of numbers; a timing
benchmark's claim decided on its per-round ratios. Nothing here measures: the machine checks before
a benchmark and the simulator's predictions of its steps are `systems.bench_checks`. Tested in
tests/test_analysis.py."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from .claims import Claims, median_interval
from ..data.base import TensorSource



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


def per_round(values: Iterable[float]) -> str:
    """Per-round values as a claim's measured text writes them: "[0.93, 1.02]"."""
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def decide_median_ratio(claims: Claims, id: str, ratios: pd.Series, before: str = "", after: str = "") -> str:
    """Decide a timing claim on its per-round ratios (NaN rounds dropped): the median and its 95%
    distribution-free interval (`claims.median_interval`); NaN, so inconclusive, where no round is
    left. The measured text is `before` + "<n> rounds, per round [...]" + `after`. Returns the verdict."""
    r = ratios.dropna()
    low, high = median_interval(r) if len(r) else (float("nan"), float("nan"))
    est = float(r.median()) if len(r) else float("nan")
    return claims.decide(id, low, high, est, f"{before}{len(r)} rounds, per round {per_round(r)}{after}")


def log2_ratio(a: float, b: float, offset: float = 0.0) -> float:
    """log2((a + offset) / (b + offset)): a against b on a log scale (0 when equal, +1 when a is twice
    b), the per-seed quantity of ratio claims. `offset` 1 counts a zero (a target reached before any
    global reduction); NaN when either is NaN."""
    return float(np.log2((a + offset) / (b + offset)))

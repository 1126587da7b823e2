"""distsgd.analysis: first time a run reaches a target; gradient diversity ζ²; log ratios."""
from __future__ import annotations

import math

import pandas as pd
import torch

from distsgd.analysis import first_reaching, gradient_diversity, log2_ratio
from distsgd.data.base import TensorSource


def test_first_reaching_a_loss_or_an_accuracy() -> None:
    m = pd.DataFrame({"step": [0, 10, 20, 30], "wall_s": [0.0, 1.0, 2.0, 3.0],
                      "train_loss": [2.0, 0.9, 0.5, 0.4], "test_acc": [0.1, None, 0.8, 0.9]})
    assert first_reaching(m, "train_loss", 0.5, at="wall_s") == 2.0
    assert first_reaching(m, "train_loss", 0.9, at="step") == 10
    assert math.isnan(first_reaching(m, "train_loss", 0.1, at="step"))
    assert first_reaching(m, "test_acc", 0.8, at="step", below=False) == 20   # the NaN row is skipped


def test_gradient_diversity_is_zero_for_identical_shards_and_grows_with_disagreement() -> None:
    torch.manual_seed(0)
    x = torch.randn(40, 3)
    y = torch.cat([torch.zeros(20, dtype=torch.long), torch.ones(20, dtype=torch.long)])
    source = TensorSource("t", "classification", 2, (x, y), (x, y))
    model = torch.nn.Linear(3, 2)
    same = [torch.arange(40), torch.arange(40)]
    assert gradient_diversity(model, source, same) == 0.0
    split = [torch.arange(20), torch.arange(20, 40)]          # one class per shard
    g = []
    for idx in split:
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        g.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    expected = float(((g[0] - g[1]) / 2).pow(2).sum())        # each local gradient is ±(g0-g1)/2 off the mean
    assert abs(gradient_diversity(model, source, split) - expected) < 1e-6


def test_log2_ratio_with_and_without_an_offset() -> None:
    assert log2_ratio(2.0, 1.0) == 1.0 and log2_ratio(0.25, 1.0) == -2.0
    assert log2_ratio(0.0, 3.0, offset=1) == -2.0             # a target reached before any reduction counts
    assert math.isnan(log2_ratio(float("nan"), 1.0, offset=1))

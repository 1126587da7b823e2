"""DeAR (the flush on every rank is checked in test_schedules): end to end through distsgd.run with evaluation in between; grouping; the tuner; the
optimizer check."""
from __future__ import annotations

import math

import pytest
import torch

import distsgd
from distsgd import ConfigError
from distsgd.algorithms.dear import fusion_groups
from distsgd.algorithms.tuner import GridTuner, tune_threshold


@pytest.mark.multiproc
def test_dear_run_matches_ssgd_end_to_end_with_evaluations():
    cfg = dict(model="mlp", data="digits", nproc=3, steps=10, batch_size=16, lr=0.1, momentum=0.9,
               weight_decay=1e-4, log_every=2, eval_every=3, progress=False)
    ssgd = distsgd.run(algo="ssgd", **cfg)
    dear = distsgd.run(algo="dear", params={"threshold_mb": 0.02}, **cfg)
    a, b = ssgd.state_dict(), dear.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-5, rtol=1e-4)
    assert dear.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)
    assert dear.summary["comm_bytes"] == pytest.approx(ssgd.summary["comm_bytes"], rel=1e-3)
    m1, m2 = ssgd.metrics, dear.metrics
    torch.testing.assert_close(torch.tensor(m2["test_loss"].dropna().values),
                               torch.tensor(m1["test_loss"].dropna().values), atol=1e-5, rtol=1e-4)


def test_other_optimizers_are_rejected_before_spawning(tmp_path):
    with pytest.raises(ConfigError) as info:
        distsgd.run(algo="dear", optimizer="adam", out=str(tmp_path / "runs"))
    assert info.value.field == "optimizer" and "sgd" in str(info.value)
    with pytest.raises(ConfigError):
        distsgd.run(algo="bytescheduler", optimizer="adam", out=str(tmp_path / "runs"))
    assert not (tmp_path / "runs").exists()


def test_fusion_groups_by_size_and_by_count():
    layers = [torch.nn.Linear(10, 10) for _ in range(5)]               # 440 bytes each
    assert [len(g) for g in fusion_groups(layers, 1000, 1)] == [2, 2, 1]
    assert [len(g) for g in fusion_groups(layers, 100, 1)] == [1] * 5   # larger than the threshold: alone
    assert [len(g) for g in fusion_groups(layers, 0, 2)] == [2, 2, 1]
    assert [len(g) for g in fusion_groups(layers, 0, 1)] == [1] * 5


@pytest.mark.parametrize("low, high, trials", [(1.0, 100.0, 10), (0.01, 0.5, 4), (3.0, 3.0, 1)])
def test_tuner_returns_a_threshold_within_bounds(low, high, trials):
    best_x = math.sqrt(low * high) * 1.3
    seen = []

    def measure(x):
        seen.append(x)
        return (math.log(x) - math.log(best_x)) ** 2 + 0.01

    best, history = tune_threshold(measure, low, high, trials)
    assert low <= best <= high and all(low <= x <= high for x in seen)
    assert len(history) == trials == len(set(seen))
    assert best == min(history, key=lambda h: h[1])[0]


def test_tuner_finds_the_minimum_of_a_unimodal_cost():
    best, _ = tune_threshold(lambda x: abs(math.log(x / 8.0)), 1.0, 100.0, 10)
    grid = GridTuner(1.0, 100.0, 10).candidates
    assert best == min(grid, key=lambda x: abs(math.log(x / 8.0)))

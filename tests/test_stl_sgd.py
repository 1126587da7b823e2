"""STL-SGD's stagewise schedule: learning rate halves, stage length and period double (IID) or
grow by sqrt(2) (non-IID), one average at least every period and at every stage end."""
from __future__ import annotations

import math

import pytest

import distsgd
from distsgd.algorithms.stl_sgd import period_for, stage_end, stage_of


def test_stage_boundaries_double():
    t0 = 8
    assert [stage_of(t, t0) for t in (0, 7, 8, 23, 24, 55, 56)] == [0, 0, 1, 1, 2, 2, 3]
    assert [stage_end(s, t0) for s in range(4)] == [8, 24, 56, 120]


def test_period_grows_with_the_inverse_learning_rate():
    assert [period_for(2, 2.0 ** s, "iid") for s in range(4)] == [2, 4, 8, 16]
    assert [period_for(2, 2.0 ** s, "noniid") for s in range(4)] == [2, round(2 * math.sqrt(2)), 4,
                                                                      round(2 * math.sqrt(8))]


@pytest.mark.multiproc
def test_run_follows_the_schedule():
    t0, k0, stages = 8, 2, 3
    r = distsgd.run(algo="stl_sgd", params={"period": k0, "stage_steps": t0}, model="logistic",
                    nproc=2, steps=stage_end(stages - 1, t0), batch_size=8, lr=0.4, log_every=1,
                    eval_every=0, progress=False)
    m = r.metrics
    for s in range(stages):
        in_stage = m[(m.step > (stage_end(s - 1, t0) if s else 0)) & (m.step <= stage_end(s, t0))]
        assert set(in_stage.lr) == {0.4 / 2 ** s}
        assert set(in_stage.period) == {k0 * 2 ** s} and set(in_stage.stage) == {s}
    # every stage: T0 * 2^s steps / (k0 * 2^s) = T0 / k0 averages, per rank
    assert r.summary["global_reductions"] == 2 * stages * t0 // k0

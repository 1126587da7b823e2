"""The stagewise learning-rate schedule (`distsgd.lr_schedule`: the rate halves, the stage length
doubles) that STL-SGD and its baselines share, and STL-SGD's period on it: doubled (IID) or grown
by sqrt(2) (non-IID) every stage, one average at least every period and at every stage end."""
from __future__ import annotations

import math

import pytest

import distsgd
from distsgd.algorithms.stl_sgd import period_for
from distsgd.training.config import Config
from distsgd.lr_schedule import lr_at, stage_at, stage_end

T0, K0, STAGES, LR = 8, 2, 3, 0.4
RUN = dict(model="logistic", nproc=2, steps=stage_end(STAGES - 1, T0), batch_size=8, lr=LR,
           schedule="stagewise", stage_steps=T0, log_every=1, eval_every=0, progress=False)


def test_stagewise_rate_halves_at_stage_boundaries():
    c = Config(lr=0.8, steps=100, schedule="stagewise", stage_steps=4)
    steps = [0, 3, 4, 11, 12, 27, 28, 59, 60]
    assert [stage_at(c, t) for t in steps] == [0, 0, 1, 1, 2, 2, 3, 3, 4]
    assert [lr_at(c, t) for t in steps] == [0.8, 0.8, 0.4, 0.4, 0.2, 0.2, 0.1, 0.1, 0.05]
    assert [stage_end(s, 4) for s in range(4)] == [4, 12, 28, 60]
    # after a warm-up, the stages count from its end
    w = Config(lr=0.8, steps=100, schedule="stagewise", stage_steps=4, warmup_steps=2)
    assert [lr_at(w, t) for t in (0, 1, 2, 5, 6, 13, 14)] == [0.4, 0.8, 0.8, 0.8, 0.4, 0.4, 0.2]


def test_period_grows_with_the_inverse_learning_rate():
    assert [period_for(2, 2.0 ** s, "iid") for s in range(4)] == [2, 4, 8, 16]
    assert [period_for(2, 2.0 ** s, "noniid") for s in range(4)] == [2, round(2 * math.sqrt(2)), 4,
                                                                      round(2 * math.sqrt(8))]


@pytest.mark.multiproc
def test_stl_sgd_follows_the_schedule():
    r = distsgd.run(algo="stl_sgd", params={"period": K0}, **RUN)
    m = r.metrics
    for s in range(STAGES):
        in_stage = m[(m.step > (stage_end(s - 1, T0) if s else 0)) & (m.step <= stage_end(s, T0))]
        assert set(in_stage.lr) == {LR / 2 ** s}
        assert set(in_stage.period) == {K0 * 2 ** s} and set(in_stage.stage) == {s}
    # every stage: T0 * 2^s steps / (k0 * 2^s) = T0 / k0 averages, per rank
    assert r.summary["global_reductions"] == 2 * STAGES * T0 // K0


@pytest.mark.multiproc
def test_baselines_decay_like_stl_sgd():
    """S-SGD and local SGD with a fixed period log the same stagewise rates as STL-SGD."""
    c = Config(**RUN)
    want = [lr_at(c, t - 1) for t in range(1, c.steps + 1)]
    assert len(set(want)) == STAGES
    for algo, params in [("ssgd", {}), ("local_sgd", {"period": K0}), ("stl_sgd", {"period": K0})]:
        m = distsgd.run(algo=algo, params=params, **RUN).metrics
        assert m.step.tolist() == list(range(1, c.steps + 1))
        assert m.lr.tolist() == want, algo


@pytest.mark.multiproc
def test_on_one_rank_stl_sgd_is_minibatch_sgd_step_for_step():
    """One rank: averaging is the identity, so STL-SGD (whatever its period) and S-SGD take the
    same steps, which they do only if both train with the same stagewise rates."""
    one = dict(RUN, nproc=1, eval_every=RUN["steps"])
    stl = distsgd.run(algo="stl_sgd", params={"period": K0}, **one)
    sync = distsgd.run(algo="ssgd", **one)
    assert stl.metrics.train_loss.tolist() == sync.metrics.train_loss.tolist()
    assert stl.metrics.test_loss.iloc[-1] == sync.metrics.test_loss.iloc[-1]

"""KAVG: K-step averaging, local reductions in groups (counted as scheduled), reduction momentum
(mu -> 0 is plain KAVG), optimizer state."""
from __future__ import annotations

import pytest
import torch

import distsgd
from distsgd import ConfigError

SMALL = dict(model="mlp", data="digits", nproc=2, steps=12, batch_size=16, lr=0.1, log_every=4,
             eval_every=0, progress=False)


def _model(result) -> dict[str, torch.Tensor]:
    return result.state_dict()


@pytest.mark.multiproc
def test_kavg_with_period_1_is_ssgd():
    cfg = dict(SMALL, momentum=0.9)
    ssgd = distsgd.run(algo="ssgd", **cfg)
    kavg = distsgd.run(algo="kavg", params={"period": 1}, **cfg)
    for k, v in _model(ssgd).items():
        torch.testing.assert_close(_model(kavg)[k], v, msg=k)


@pytest.mark.multiproc
def test_kavg_is_local_sgd_and_momentum_changes_it():
    cfg = dict(SMALL, momentum=0.9)
    local = distsgd.run(algo="local_sgd", params={"period": 4}, **cfg)
    kavg = distsgd.run(algo="kavg", params={"period": 4}, **cfg)
    for k, v in _model(local).items():
        torch.testing.assert_close(_model(kavg)[k], v, msg=k)
    assert kavg.summary["comm_bytes"] == local.summary["comm_bytes"]
    mom = distsgd.run(algo="kavg", params={"period": 4, "reduction_momentum": 0.5}, **cfg)
    assert mom.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)
    assert any(not torch.allclose(_model(mom)[k], v) for k, v in _model(kavg).items())


GROUPS = {"period": 4, "local_groups": 2, "local_period": 2}    # K_g = 4, K_l = 2, groups of 2


@pytest.mark.multiproc
def test_reduction_counts_in_metrics_follow_the_schedule():
    steps, nproc = 10, 4
    cfg = dict(SMALL, nproc=nproc, steps=steps, log_every=1)
    r = distsgd.run(algo="kavg", params=GROUPS, **cfg)
    # The schedule (module docstring): after step t (1-based) a global average if t % K_g == 0,
    # else a local one if t % K_l == 0; finalize() adds a last global average when local steps
    # were taken since the last one (here steps 9 and 10). Counts in metrics are summed over ranks.
    k_g, k_l = GROUPS["period"], GROUPS["local_period"]
    global_at = [t for t in range(1, steps + 1) if t % k_g == 0]                 # 4, 8
    local_at = [t for t in range(1, steps + 1) if t % k_l == 0 and t % k_g]   # 2, 6, 10
    m = r.metrics.set_index("step")
    assert list(m.index) == list(range(1, steps + 1))
    for t in m.index:
        assert m.loc[t, "global_reductions"] == nproc * sum(s <= t for s in global_at), t
        assert m.loc[t, "local_reductions"] == nproc * sum(s <= t for s in local_at), t
    assert r.summary["global_reductions"] == nproc * (len(global_at) + 1)       # + finalize
    assert r.summary["local_reductions"] == nproc * len(local_at)
    comm = r.comm()
    local = comm[comm.scope == "local"]
    assert set(local.group_size) == {2}
    # The ledger's step is the 0-based step during which the collective ran (finalize: the last).
    assert sorted(set(local.step)) == [t - 1 for t in local_at]
    global_steps = sorted(set(comm[comm.scope == "global"].step))
    assert global_steps == [t - 1 for t in global_at] + [steps - 1]
    assert r.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)


@pytest.mark.multiproc
def test_reduction_momentum_mu_0_is_plain_kavg():
    """With groups and local reductions, the momentum path at mu -> 0 (v <- mu v + (xbar - x_g),
    x_g <- x_g + v = xbar) gives plain KAVG's parameters and loss trajectory. mu = 0 exactly is
    plain KAVG's own config (the same run, reused) and skips the momentum path, so a mu far
    below float32 resolution stands in for it; mu = 0.5 shows the tolerance can tell them apart."""
    cfg = dict(SMALL, nproc=4, steps=12, log_every=1)
    plain = distsgd.run(algo="kavg", params=GROUPS, **cfg)
    tiny = distsgd.run(algo="kavg", params=dict(GROUPS, reduction_momentum=1e-12), **cfg)
    half = distsgd.run(algo="kavg", params=dict(GROUPS, reduction_momentum=0.5), **cfg)
    assert len({plain.path, tiny.path, half.path}) == 3                  # three real runs
    tol = dict(rtol=1e-4, atol=1e-5)
    for k, v in _model(plain).items():
        torch.testing.assert_close(_model(tiny)[k], v, **tol, msg=k)
    torch.testing.assert_close(torch.tensor(tiny.metrics.train_loss.values),
                               torch.tensor(plain.metrics.train_loss.values), **tol)
    assert any(not torch.allclose(_model(half)[k], v, **tol) for k, v in _model(plain).items())
    assert tiny.summary["global_reductions"] == plain.summary["global_reductions"] == 4 * 3
    assert tiny.summary["local_reductions"] == plain.summary["local_reductions"] == 4 * 3


@pytest.mark.multiproc
@pytest.mark.parametrize("mode", ["average", "reset"])
def test_optimizer_state_modes_with_adam(mode):
    r = distsgd.run(algo="kavg", params={"period": 3, "optimizer_state": mode},
                    **dict(SMALL, optimizer="adam", lr=1e-3))
    base = distsgd.run(algo="kavg", params={"period": 3}, **dict(SMALL, optimizer="adam", lr=1e-3))
    # averaging both Adam moments with the model triples the bytes of a reduction (x, m, v)
    factor = 3 if mode == "average" else 1
    assert r.summary["comm_bytes"] == pytest.approx(factor * base.summary["comm_bytes"], rel=0.01)


@pytest.mark.parametrize("params, nproc", [({"local_groups": 3}, 4),
                                           ({"local_groups": 1, "local_period": 2}, 4),
                                           ({"optimizer_state": "keep"}, 2)])
def test_bad_kavg_params(params, nproc):
    with pytest.raises(ConfigError, match="params"):
        distsgd.Config(algo="kavg", params=params, nproc=nproc).validate()

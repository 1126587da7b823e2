"""KAVG: K-step averaging, local reductions in groups, reduction momentum, optimizer state."""
from __future__ import annotations

import pytest
import torch

import distsgd
from distsgd import ConfigError

SMALL = dict(model="mlp", data="digits", nproc=2, steps=12, batch_size=16, lr=0.1, log_every=4,
             eval_every=0, progress=False)


def _model(result) -> dict[str, torch.Tensor]:
    return torch.load(result.path / "model.pt")


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


@pytest.mark.multiproc
def test_local_reductions_are_counted_apart_from_global_ones():
    r = distsgd.run(algo="kavg", params={"period": 4, "local_groups": 2, "local_period": 2},
                    **dict(SMALL, nproc=4, steps=8))
    # per rank: global averages at steps 4, 8; local (in-group) ones at steps 2, 6
    assert r.summary["global_reductions"] == 4 * 2
    assert r.summary["local_reductions"] == 4 * 2
    comm = r.comm()
    local = comm[comm.scope == "local"]
    assert set(local.group_size) == {2}
    assert r.metrics["local_reductions"].iloc[-1] == 8
    assert r.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)


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

"""VRL-SGD: the sum of the corrections stays zero, period 1 is S-SGD, local SGD's bytes, and
the non-IID advantage over local SGD."""
from __future__ import annotations

import pytest
import torch

import distsgd
from distsgd import ConfigError
from gloo import run_ranks

SMALL = dict(model="mlp", data="digits", nproc=2, steps=12, batch_size=16, lr=0.1, log_every=4,
             eval_every=0, progress=False)


def _vrl_on_rank(rank: int, world: int, period: int, warmup: bool, steps: int) -> dict:
    """Run VRL-SGD's hooks by hand on a tiny regression whose target depends on the rank
    (non-identical data); return this rank's Delta and the model."""
    import torch.distributed as dist

    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.comm.comm import join_group
    from distsgd.config import Config

    join_group("gloo")
    comm = Comm(rank, world, torch.device("cpu"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    algo = create("vrl_sgd", {"period": period, "warmup": warmup})
    algo.setup(model, opt, comm, Config(algo="vrl_sgd"))
    g = torch.Generator().manual_seed(100 + rank)
    sums = []
    for step in range(steps):
        x = torch.randn(16, 5, generator=g) + rank          # rank-dependent inputs and targets
        y = x.sum(1, keepdim=True) * (rank + 1)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        algo.after_backward(step)
        opt.step()
        algo.after_step(step)
        if algo.clock.since == 0:                          # just averaged: sum Delta over ranks
            d = algo.state_dict()["delta"].clone()
            dist.all_reduce(d)
            sums.append((step, float(d.abs().max()), float(algo.delta.abs().max())))
    algo.finalize()
    # plain lists: tensors sent through the queue would need the sender alive
    out = {"delta": algo.state_dict()["delta"].tolist(), "sums": sums, "averages": algo.averages,
           "model": [p.detach().reshape(-1).tolist() for p in model.parameters()]}
    dist.destroy_process_group()
    return out


@pytest.mark.multiproc
def test_corrections_sum_to_zero_and_models_agree():
    ranks = run_ranks(_vrl_on_rank, 3, 4, False, 14)
    for r in ranks:
        r["delta"] = torch.tensor(r["delta"])
    total = sum(r["delta"] for r in ranks)
    largest = max(float(r["delta"].abs().max()) for r in ranks)
    assert largest > 1e-2                                     # the corrections are not trivial
    assert float(total.abs().max()) <= 1e-5 * max(1.0, largest)
    for step, s, biggest in ranks[0]["sums"]:                 # after every averaging
        assert s <= 1e-5 * max(1.0, biggest), step
    # averages after steps 4, 8, 12 and the final one (2 steps left over)
    assert ranks[0]["averages"] == 4
    for r in ranks[1:]:
        for a, b in zip(r["model"], ranks[0]["model"]):
            torch.testing.assert_close(torch.tensor(a), torch.tensor(b))


@pytest.mark.multiproc
def test_warmup_averages_after_the_first_step():
    ranks = run_ranks(_vrl_on_rank, 2, 4, True, 9)
    for r in ranks:
        r["delta"] = torch.tensor(r["delta"])
    # VRL-SGD-W: averages after steps 1, 5, 9 (period 1, then 4)
    assert [s for s, _, _ in ranks[0]["sums"]] == [0, 4, 8]
    assert ranks[0]["averages"] == 3
    assert float((ranks[0]["delta"] + ranks[1]["delta"]).abs().max()) <= 1e-5 * max(
        1.0, float(ranks[0]["delta"].abs().max()))


@pytest.mark.multiproc
def test_period_one_is_ssgd():
    """With k = 1 the corrections sum to zero, so the averaged model is S-SGD's."""
    ssgd = distsgd.run(algo="ssgd", **SMALL)
    vrl = distsgd.run(algo="vrl_sgd", params={"period": 1}, **SMALL)
    a, b = ssgd.state_dict(), vrl.state_dict()
    for k, v in a.items():
        torch.testing.assert_close(b[k], v, atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.multiproc
def test_non_iid_vrl_beats_local_sgd_with_local_sgds_bytes():
    cfg = dict(SMALL, nproc=4, steps=160, batch_size=32, partition="shards", log_every=20)
    local = distsgd.run(algo="local_sgd", params={"period": 16}, **cfg)
    vrl = distsgd.run(algo="vrl_sgd", params={"period": 16}, **cfg)
    assert vrl.summary["comm_bytes"] == local.summary["comm_bytes"]
    assert vrl.summary["global_reductions"] == local.summary["global_reductions"]
    assert vrl.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)
    # label-sorted shards: local SGD's models drift apart, VRL-SGD corrects the drift
    assert vrl.summary["final_train_loss"] < 0.7 * local.summary["final_train_loss"]


@pytest.mark.parametrize("fields, field", [(dict(momentum=0.9), "momentum"),
                                           (dict(optimizer="adam"), "optimizer"),
                                           (dict(params={"period": 0}), "params.period"),
                                           (dict(params={"warmup": 1}), "params.warmup")])
def test_bad_vrl_config(fields, field):
    cfg = dict(dict(algo="vrl_sgd", nproc=2), **fields)
    with pytest.raises(ConfigError, match=field):
        distsgd.Config(**cfg).validate()


def _same_data_on_every_rank(rank: int, world: int, algo_name: str, steps: int) -> list:
    """Train with `algo_name` (period 4) where every rank draws the SAME batches; return the model."""
    import torch.distributed as dist

    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.comm.comm import join_group
    from distsgd.config import Config

    join_group("gloo")
    comm = Comm(rank, world, torch.device("cpu"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    algo = create(algo_name, {"period": 4})
    algo.setup(model, opt, comm, Config(algo=algo_name))
    g = torch.Generator().manual_seed(7)                     # not rank-dependent
    for step in range(steps):
        x = torch.randn(16, 5, generator=g)
        y = x.sum(1, keepdim=True)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.mse_loss(model(x), y).backward()
        algo.after_backward(step)
        opt.step()
        algo.after_step(step)
    algo.finalize()
    out = [p.detach().reshape(-1).tolist() for p in model.parameters()]
    dist.destroy_process_group()
    return out


@pytest.mark.multiproc
def test_identical_data_on_every_rank_makes_vrl_sgd_local_sgd():
    """With the same data everywhere the local models never drift apart, Delta stays 0, and
    VRL-SGD is local SGD."""
    vrl = run_ranks(_same_data_on_every_rank, 2, "vrl_sgd", 10)
    local = run_ranks(_same_data_on_every_rank, 2, "local_sgd", 10)
    for a, b in zip(vrl[0], local[0]):
        torch.testing.assert_close(torch.tensor(a), torch.tensor(b))

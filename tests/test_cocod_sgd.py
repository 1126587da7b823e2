"""CoCoD-SGD: the trajectory equals local SGD whose averaging lags one period, weighted averaging,
no leaked async handle, one model all-reduce per period in the ledger."""
from __future__ import annotations

import pytest
import torch

import distsgd
from distsgd import ConfigError
from gloo import run_ranks

STEPS, PERIOD, LR, MOMENTUM = 11, 3, 0.1, 0.5


def _toy_model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Linear(4, 2)


def _toy_loss(model: torch.nn.Module, rank: int, step: int) -> torch.Tensor:
    """A deterministic rank- and step-dependent least-squares loss."""
    g = torch.Generator().manual_seed(1000 * rank + step)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g) + rank
    return 0.5 * ((model(x) - y) ** 2).mean()


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).clone()


VARIANTS = [([], ""), ([], "10Mbit,1ms"), ([1, 2, 3], ""), ([1.5, 1.5, 1.5], "")]  # (batch_weights, net)


def _cocod_worker(rank: int, world: int) -> list[dict]:
    """Run CoCoD-SGD through its hooks on this rank, once per variant (one process start for
    all: starting processes is what costs); return trajectories and handle counts."""
    from distsgd.algorithms import create
    from distsgd.comm import Comm, parse_net
    from distsgd.training.config import Config

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    config = Config(algo="cocod_sgd", nproc=world, batch_size=32)
    outs = []
    for weights, net in VARIANTS:
        comm.net, comm.ledger = parse_net(net), type(comm.ledger)()
        model = _toy_model()
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        algo = create("cocod_sgd", {"period": PERIOD, "batch_weights": weights})
        algo.setup(model, opt, comm, config.facts())
        trajectory = []
        for step in range(STEPS):
            algo.before_forward(step)
            opt.zero_grad()
            _toy_loss(model, rank, step).backward()
            algo.after_backward(step)
            algo.optimizer_step(step)
            algo.after_step(step)
            trajectory.append(_flat(model).tolist())
        in_flight = comm.pending()
        leak = ""
        try:
            comm.assert_drained()
        except RuntimeError as exc:
            leak = str(exc)
        algo.finalize()
        comm.assert_drained()
        outs.append({"trajectory": trajectory, "final": _flat(model).tolist(), "in_flight": in_flight,
                     "leak": leak, "pending_after": comm.pending(), "batch": algo.batch_size(),
                     "wait_s": comm.ledger.wait_s,
                     "modeled_s": sum(e.modeled_s for e in comm.ledger.entries)})
    comm.close()
    return outs


def _tensors(out: dict) -> dict:
    """Trajectories travel between processes as lists (a tensor would be shared memory of an
    exited process)."""
    return dict(out, trajectory=[torch.tensor(t) for t in out["trajectory"]],
                final=torch.tensor(out["final"]))


def _lagged_local_sgd(world: int, weights: list[float]) -> tuple[list[list[torch.Tensor]], torch.Tensor]:
    """Reference, one process: local SGD whose period-end average is the (weighted) average of
    the models of one period earlier, plus each worker's own progress since then."""
    models = [_toy_model() for _ in range(world)]
    opts = [torch.optim.SGD(m.parameters(), lr=LR, momentum=MOMENTUM) for m in models]
    snapshots: list[torch.Tensor] | None = None
    trajectories: list[list[torch.Tensor]] = [[] for _ in range(world)]

    def set_flat(m: torch.nn.Module, v: torch.Tensor) -> None:
        torch.nn.utils.vector_to_parameters(v, m.parameters())

    def average(vs: list[torch.Tensor]) -> torch.Tensor:
        return sum(w * v for w, v in zip(weights, vs))

    for step in range(STEPS):
        for r, (m, o) in enumerate(zip(models, opts)):
            o.zero_grad()
            _toy_loss(m, r, step).backward()
            o.step()
        if (step + 1) % PERIOD == 0:
            xs = [_flat(m) for m in models]
            if snapshots is not None:
                abar = average(snapshots)
                xs = [abar + (x - a) for x, a in zip(xs, snapshots)]
                for m, x in zip(models, xs):
                    set_flat(m, x)
            snapshots = [x.clone() for x in xs]
        for r, m in enumerate(models):
            trajectories[r].append(_flat(m))
    xs = [_flat(m) for m in models]                  # finalize: apply the last average ...
    xs = [average(snapshots) + (x - a) for x, a in zip(xs, snapshots)]
    return trajectories, average(xs)                # ... then average the remaining drift


@pytest.mark.multiproc
def test_trajectory_is_local_sgd_with_averaging_one_period_late():
    world = 3
    per_rank = run_ranks(_cocod_worker, world)
    runs = [[_tensors(per_rank[r][v]) for r in range(world)] for v in range(len(VARIANTS))]
    for (weights, net), outs in zip(VARIANTS, runs):
        batches = [o["batch"] for o in outs]
        if weights == [1, 2, 3]:
            assert batches == [16, 32, 48]      # proportional to the weights, 3 x 32 in total
        else:
            assert batches == [32] * world
        ref, ref_final = _lagged_local_sgd(world, [b / sum(batches) for b in batches])
        for r, o in enumerate(outs):
            for step, (got, want) in enumerate(zip(o["trajectory"], ref[r])):
                torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-5,
                                           msg=f"{weights} {net}: rank {r} step {step}")
            torch.testing.assert_close(o["final"], ref_final, atol=1e-6, rtol=1e-5)
            # the all-reduce launched at the last period end is still in flight before finalize:
            assert o["in_flight"] == 1 and "never waited" in o["leak"]
            assert o["pending_after"] == 0
        if net:   # the emulated network was on, and changed timing only
            assert outs[0]["modeled_s"] > 0
    # weighted averaging with equal weights is plain averaging
    for plain, equal in zip(runs[0], runs[3]):
        for a, b in zip(plain["trajectory"], equal["trajectory"]):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.multiproc
def test_ledger_holds_one_model_all_reduce_per_period_and_ranks_agree():
    cfg = dict(model="mlp", data="digits", nproc=2, steps=14, batch_size=16, lr=0.1, log_every=7,
               eval_every=0, progress=False)
    r = distsgd.run(algo="cocod_sgd", params={"period": 4}, **cfg)
    comm = r.comm()
    d = sum(v.numel() for v in r.state_dict().values())
    # per rank: async launches after steps 4, 8, 12, then finalize's blocking average (2 local steps)
    assert (comm.groupby("rank").size() == 4).all()
    assert set(comm.kind) == {"all_reduce"} and set(comm.nbytes) == {4 * d}
    assert r.summary["comm_bytes"] == 2 * 4 * round(2 * 1 / 2 * 4 * d)
    assert r.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)


@pytest.mark.parametrize("params", [{"batch_weights": [1, 2, 3]}, {"batch_weights": [1, -1]},
                                    {"speeds": [1, 2]}, {"period": 0}, {"sample_ms": -1}])
def test_bad_cocod_params(params):
    with pytest.raises(ConfigError, match="params"):
        distsgd.Config(algo="cocod_sgd", params=params, nproc=2).validate()


@pytest.mark.parametrize("params,slept", [({"speeds": [1, 0.5]}, "measured"),
                                          ({"speeds": [1, 0.25], "sample_ms": 10.0}, 4 * 10.0 * 8 / 1e3)])
def test_slow_rank_times_its_compute_on_the_device(monkeypatch, params, slept):
    """The slow rank's emulated compute: the device is synchronised (`device_sync.synchronize`, a no-op
    on the CPU) before the compute is timed and before the sleep, since on a GPU the host only queued
    forward and backward. The sleep is (1/s - 1) x the measured compute, or b x sample_ms / s."""
    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.training.config import Config

    import itertools
    from types import SimpleNamespace

    synced, sleeps = [], []
    clock = itertools.cycle([10.0, 10.2])               # forward + backward take 0.2 s
    monkeypatch.setattr("distsgd.algorithms.cocod_sgd.synchronize", lambda device: synced.append(device.type))
    monkeypatch.setattr("distsgd.algorithms.cocod_sgd.time", SimpleNamespace(perf_counter=lambda: next(clock),
                                                                             sleep=sleeps.append))
    for device in ("cuda:0", "cpu"):
        model = _toy_model()
        algo = create("cocod_sgd", {"period": PERIOD, **params})
        algo.setup(model, torch.optim.SGD(model.parameters(), lr=LR), Comm(1, 2, torch.device(device)),
                   Config(algo="cocod_sgd", nproc=2, batch_size=8).facts())
        algo.before_forward(0)
        algo.after_backward(0)
    expected = 1 / params["speeds"][1] - 1
    assert sleeps == [pytest.approx(expected * 0.2 if slept == "measured" else slept)] * 2
    # each device synchronised before forward (the measured form) and after backward; on the CPU a no-op
    assert synced == [d for d in ("cuda", "cpu") for _ in range(2 if slept == "measured" else 1)]

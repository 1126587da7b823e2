"""SSD-SGD: k = 1 without GLU or staleness is S-SGD after warm-up, k = 1 with the stale pull is
one-step-delay SGD, the ledger holds one gradient all-reduce per step plus the per-pull transfer
(BatchNorm buffers), and no async handle leaks."""
from __future__ import annotations

import pytest
import torch

import distsgd
from distsgd import ConfigError
from gloo import run_ranks

STEPS, WARMUP, LR, MOMENTUM = 11, 2, 0.1, 0.5
SMALL = dict(model="mlp", data="digits", nproc=2, steps=10, batch_size=16, lr=0.1, momentum=0.9,
             weight_decay=1e-4, log_every=5, eval_every=0, progress=False)


def _toy_model(batchnorm: bool) -> torch.nn.Module:
    torch.manual_seed(0)
    if batchnorm:
        return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3), torch.nn.Linear(3, 2))
    return torch.nn.Linear(4, 2)


def _toy_loss(model: torch.nn.Module, rank: int, step: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 * rank + step)
    x, y = torch.randn(8, 4, generator=g), torch.randn(8, 2, generator=g) + rank
    return 0.5 * ((model(x) - y) ** 2).mean()


def _flat(model: torch.nn.Module) -> list[float]:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()


VARIANTS = [  # (params, model with BatchNorm)
    ({"period": 1, "warmup": WARMUP, "glu": "none", "stale_pull": True}, False),      # OD-SGD
    ({"period": 3, "warmup": WARMUP, "glu": "global"}, True),
    ({"period": 3, "warmup": WARMUP, "glu": "dc"}, True),
]


def _ssd_worker(rank: int, world: int) -> list[dict]:
    """SSD-SGD through its hooks on this rank, once per variant; trajectory, ledger, handles."""
    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.config import Config

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    config = Config(algo="ssd_sgd", nproc=world, lr=LR, momentum=MOMENTUM)
    outs = []
    for params, batchnorm in VARIANTS:
        comm.ledger = type(comm.ledger)()
        model = _toy_model(batchnorm)
        opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
        algo = create("ssd_sgd", {**params, "local_lr_scale": 2.0})
        algo.setup(model, opt, comm, config)
        trajectory = []
        for step in range(STEPS):
            comm.step = step
            algo.before_forward(step)
            opt.zero_grad()
            _toy_loss(model, rank, step).backward()
            algo.after_backward(step)
            algo.optimizer_step(step)
            algo.after_step(step)
            trajectory.append(_flat(model))
        in_flight = comm.pending()
        algo.finalize()
        comm.assert_drained()
        outs.append({"trajectory": trajectory, "final": _flat(model), "in_flight": in_flight,
                     "ledger": [(e.step, e.kind, e.nbytes) for e in comm.ledger.entries],
                     "buffers": [b.tolist() for b in model.buffers() if b.is_floating_point()]})
    comm.close()
    return outs


def _one_step_delay_sgd(world: int) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Reference, one process: S-SGD for WARMUP steps, then y_t = S(y_{t-1}, mean grad at
    y_{t-2}) (the gradient of step t, taken at the model pulled one step earlier, is applied at
    the end of step t + 1); S is momentum SGD. Returns the model after each step, and the final one."""
    model = _toy_model(False)
    params = list(model.parameters())
    y = torch.nn.utils.parameters_to_vector(params).detach()
    v = torch.zeros_like(y)

    def mean_grad(at: torch.Tensor, step: int) -> torch.Tensor:
        gs = []
        for r in range(world):
            torch.nn.utils.vector_to_parameters(at, params)
            model.zero_grad()
            _toy_loss(model, r, step).backward()
            gs.append(torch.cat([p.grad.reshape(-1) for p in params]))
        return sum(gs) / world

    def server(y: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        v.mul_(MOMENTUM).add_(g)
        return y - LR * v

    trajectory, pending = [], None
    for step in range(STEPS):
        g = mean_grad(y, step)
        if step < WARMUP:
            y = server(y, g)
        else:
            if pending is not None:
                y = server(y, pending)
            pending = g
        trajectory.append(y)
    return trajectory, server(y, pending)


@pytest.mark.multiproc
def test_hooks_one_step_delay_ledger_and_drained_handles():
    world = 2
    per_rank = run_ranks(_ssd_worker, world)
    od, ssd_global, ssd_dc = ([per_rank[r][v] for r in range(world)] for v in range(len(VARIANTS)))

    ref, ref_final = _one_step_delay_sgd(world)
    for r, o in enumerate(od):
        for step, (got, want) in enumerate(zip(o["trajectory"], ref)):
            torch.testing.assert_close(torch.tensor(got), want, atol=1e-6, rtol=1e-5,
                                       msg=f"rank {r} step {step}")
        torch.testing.assert_close(torch.tensor(o["final"]), ref_final, atol=1e-6, rtol=1e-5)
        assert o["in_flight"] == 1                  # the last push, applied by finalize

    d = sum(p.numel() for p in _toy_model(True).parameters())
    nbuf = 2 * 3                                    # BatchNorm running mean and variance
    for outs in (ssd_global, ssd_dc):
        for o in outs:
            grads = [e for e in o["ledger"] if e[2] == 4 * d]
            transfers = [e for e in o["ledger"] if e[2] == 4 * nbuf]
            assert {e[1] for e in o["ledger"]} == {"all_reduce"}
            assert [e[0] for e in grads] == list(range(STEPS))          # one gradient push per step
            # a pull after steps 4, 7, 10 (every 3 steps after 2 warm-up steps), then finalize
            assert [e[0] for e in transfers] == [4, 7, 10, 10]
            assert len(o["ledger"]) == len(grads) + len(transfers)
            assert o["in_flight"] == 3                  # pushes of steps 8-10 wait for the next pull
        assert outs[0]["final"] == outs[1]["final"]     # every rank ends at the global model
        assert outs[0]["buffers"] == outs[1]["buffers"]
    assert ssd_global[0]["final"] != ssd_dc[0]["final"]


@pytest.mark.multiproc
def test_period_one_without_glu_or_staleness_is_ssgd_after_warmup():
    ssgd = distsgd.run(algo="ssgd", **SMALL)
    ssd = distsgd.run(algo="ssd_sgd", params={"period": 1, "warmup": 3, "glu": "none",
                                             "stale_pull": False}, **SMALL)
    a, b = ssgd.state_dict(), ssd.state_dict()
    for k in a:
        torch.testing.assert_close(b[k], a[k], atol=1e-6, rtol=1e-5, msg=k)
    # one all-reduce of the gradient per step on every rank (no buffers in the MLP: pulls are free)
    assert ssd.summary["comm_bytes"] == ssgd.summary["comm_bytes"]
    assert ssd.summary["collectives"] == 2 * SMALL["steps"]


@pytest.mark.parametrize("params, fields", [({"glu": "nesterov"}, {}), ({"period": 0}, {}),
                                            ({"glu_weight": 1.5}, {}), ({}, {"optimizer": "adam"})])
def test_bad_ssd_config(params, fields):
    with pytest.raises(ConfigError):
        distsgd.Config(algo="ssd_sgd", params=params, **fields).validate()

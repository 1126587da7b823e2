"""Every algorithm's runtime state is its checkpoint: on 2 ranks, an algorithm stopped after a few
steps, saved (its state_dict with the model's and the optimizer's, through
``torch.load(weights_only=True)``), rebuilt on a differently initialised model, loaded and run on,
ends with the parameters, buffers and metrics of an uninterrupted run, bit for bit. Also: every
parameter is a typed attribute, a checkpoint leaves no collective in flight, and the period
counter ends periods where (t + 1) mod k == 0."""
from __future__ import annotations

import io

import pytest
import torch

from distsgd.algorithms import REGISTRY, create
from distsgd.algorithms.period import Period
from distsgd.lr_schedule import lr_at
from gloo import run_ranks

WORLD, STEPS, STOP, LR = 2, 10, 5, 0.05
# per algorithm: parameters that give it state worth saving at step STOP (mid-period, pushes and
# an all-reduce in flight, a pending layer-wise update, a merged MG-WFBP plan, stage 1 of STL-SGD);
# an algorithm not listed runs with its defaults (`case`)
CASES: dict[str, dict] = {
    "local_sgd": {"period": 3},
    "kavg": {"period": 3, "reduction_momentum": 0.5, "optimizer_state": "average"},
    "vrl_sgd": {"period": 3, "warmup": True},
    "stl_sgd": {"period": 1},
    "ssd_sgd": {"period": 2, "warmup": 2, "local_rule": "dc"},
    "cocod_sgd": {"period": 3},
    "compressed_sgd": {"ratio": 0.1},
    "double_squeeze": {"ratio": 0.1},
    "liec_sgd": {"ratio": 0.1},
    "ssgd": {"bucket_mb": 0.001},
    "ddp": {},
    "ps": {"bucket_mb": 0.001, "partition_mb": 0.0005},
    "no_overlap": {"bucket_mb": 0.001},
    "wfbp": {},
    "fusion": {"bucket_mb": 0.001},
    "mgwfbp": {"profile_steps": 2},
    "bytescheduler": {"partition_mb": 0.005, "credit_mb": 0.01},
    "dear": {"threshold_mb": 0.0005},
}
PLAIN_SGD = {"vrl_sgd"}            # defined for SGD without momentum
SCHEDULE = {"stl_sgd": {"schedule": "stagewise", "stage_steps": 2}}   # default: T_0 = steps // 7


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.BatchNorm1d(16), torch.nn.ReLU(),
                               torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))


def case(name: str) -> dict:
    """The parameters algorithm `name` is tested with: its entry of `CASES`, else its defaults."""
    return CASES.get(name, {})


def _config(name: str):
    """The run's config of algorithm `name`: its facts for setup, its schedule for the loop."""
    from distsgd.training.config import Config

    momentum = 0.0 if name in PLAIN_SGD else 0.9
    return Config(algo=name, params=case(name), nproc=WORLD, lr=LR, momentum=momentum,
                  weight_decay=1e-3, batch_size=8, steps=STEPS, **SCHEDULE.get(name, {}))


def _start(name: str, comm, seed: int):
    """A model, its optimizer and the algorithm set up on them."""
    from distsgd.algorithms import create

    config = _config(name)
    model = _model(seed)
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=config.momentum, weight_decay=1e-3)
    algo = create(name, case(name))
    net = algo.setup(model, opt, comm, config.facts())
    return model, opt, algo, net


def _run(algo, net, opt, rank: int, start: int, stop: int) -> None:
    """Steps start..stop-1 in distsgd.training.loop's hook order, on batches fixed by (rank, step)."""
    for step in range(start, stop):
        lr = algo.learning_rate(step, lr_at(_config(algo.name), step))
        for group in opt.param_groups:
            group["lr"] = lr
        g = torch.Generator().manual_seed(1000 * rank + step)
        x, y = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g)
        algo.before_forward(step)
        opt.zero_grad(set_to_none=True)
        torch.nn.functional.cross_entropy(net(x), y).backward()
        algo.after_backward(step)
        algo.optimizer_step(step)
        algo.after_step(step)


def _end(model, algo) -> dict:
    algo.finalize()
    algo.close()
    return {"model": [t.reshape(-1).tolist() for t in model.state_dict().values()],
            "metrics": algo.metrics()}


def _resume_on_rank(rank: int, world: int, names: list[str]) -> dict:
    from distsgd.comm import Comm

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    out = {}
    for name in names:
        model, opt, algo, net = _start(name, comm, seed=0)
        _run(algo, net, opt, rank, 0, STEPS)
        straight = _end(model, algo)

        model, opt, algo, net = _start(name, comm, seed=0)
        _run(algo, net, opt, rank, 0, STOP)
        state = algo.state_dict()
        drained = comm.pending() == 0
        fields = sorted(state)
        buf = io.BytesIO()
        torch.save({"algo": state, "model": model.state_dict(), "optimizer": opt.state_dict()}, buf)
        algo.close()
        comm.assert_drained()
        buf.seek(0)
        saved = torch.load(buf, weights_only=True)

        model, opt, algo, net = _start(name, comm, seed=1)      # another initial model
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
        algo.load_state_dict(saved["algo"])
        _run(algo, net, opt, rank, STOP, STEPS)
        resumed = _end(model, algo)
        comm.assert_drained()
        out[name] = {"straight": straight, "resumed": resumed, "drained": drained, "fields": fields,
                     "declared": sorted(algo.state_names())}
    comm.close()
    return out


@pytest.fixture(scope="module")
def resumed():
    return run_ranks(_resume_on_rank, WORLD, sorted(REGISTRY), timeout=240)


def test_period_ends_where_t_plus_1_mod_k_is_0():
    clock = Period(3)
    assert [t for t in range(10) if clock.tick()] == [2, 5, 8]
    assert clock.since == 1 and clock.cut() == 1 and clock.cut() == 0
    clock.load_state_dict(Period(4).state_dict())
    assert [clock.tick() for _ in range(4)] == [0, 0, 0, 4]


def test_every_case_is_a_registered_algorithm():
    assert set(CASES) <= set(REGISTRY)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_parameters_are_annotated_attributes(name):
    cls = REGISTRY[name]
    annotated = {n for c in cls.__mro__ for n in vars(c).get("__annotations__", {})}
    assert {p.name for p in cls.params} <= annotated
    algo = create(name, {})
    for p in cls.params:
        assert getattr(algo, p.name) == p.default


@pytest.mark.multiproc
@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_resumed_run_equals_uninterrupted_run(resumed, name):
    for rank in range(WORLD):
        r = resumed[rank][name]
        assert r["drained"], "state_dict() left a collective in flight"
        assert set(r["declared"]) <= set(r["fields"])
        assert r["resumed"]["model"] == r["straight"]["model"], f"rank {rank}: parameters differ"
        assert r["resumed"]["metrics"] == r["straight"]["metrics"]


def test_an_algorithm_takes_its_parameters_resolved_once() -> None:
    """`Config.validate` (a run) or `create` (a name and some parameters) resolves them; the class
    takes every value as resolved and refuses a partial set, so nothing resolves them twice."""
    assert create("ssd_sgd", {"period": 8}).period == 8
    with pytest.raises(TypeError, match="create"):
        REGISTRY["ssd_sgd"](period=8)                       # its other parameters not resolved

"""`distsgd.wrap`: every algorithm in a user's own torchrun script (tests/user_script.py) ends
where `distsgd.run` ends on the same batches; `ssgd` through wrap ends where PyTorch's DDP does;
the README's "Use it in your own training" example runs as written.

Tolerance: the user's loop and the kit's loop issue the same operations in the same order, so
the final parameters are equal bit for bit, except for `mgwfbp`, whose bucket plan comes from
measured gradient-ready times (another plan sums the same gradients in other all-reduce chunks:
rtol 1e-6), and DDP vs ssgd (DDP's reducer divides before it sums: rtol 1e-6).
"""
from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import distsgd
from distsgd.algorithms import REGISTRY
from distsgd.data import load_data, partition
from distsgd.training.launch import loopback_interface
from distsgd.models import build_model

ROOT = Path(__file__).resolve().parent.parent
WORLD, STEPS, BATCH, SEED = 3, 8, 8, 0
BASE = dict(model="mlp", model_options={"hidden": [16]}, data="digits", nproc=WORLD, steps=STEPS,
            batch_size=BATCH, lr=0.05, momentum=0.9, seed=SEED, eval_every=0, log_every=STEPS, progress=False)
# Algorithms of `python -m distsgd list` with parameters that make them act within 8 steps; every
# other one runs with its defaults.
PARAMS: dict[str, dict] = {
    "bytescheduler": {}, "cocod_sgd": {"period": 3}, "compressed_sgd": {}, "ddp": {}, "dear": {},
    "double_squeeze": {}, "fusion": {}, "kavg": {"period": 3, "reduction_momentum": 0.5, "optimizer_state": "average"},
    "liec_sgd": {"period": 3}, "local_sgd": {"period": 3}, "mgwfbp": {"profile_steps": 2}, "no_overlap": {},
    "ps": {"servers": 2}, "ssd_sgd": {"period": 2, "warmup": 3}, "ssgd": {}, "stl_sgd": {"period": 1},
    "vrl_sgd": {"period": 3}, "wfbp": {},
}
CONFIG = {"stl_sgd": {"schedule": "stagewise", "stage_steps": 2},     # lr halves at steps 2 and 6
          "vrl_sgd": {"momentum": 0.0}}
MILESTONES = {"stl_sgd": [2, 6]}                                       # the user's MultiStepLR
INEXACT = {"mgwfbp"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun(script: Path, *args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """`torchrun --nproc-per-node 3` on loopback (static rendezvous at 127.0.0.1, gloo on lo)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": loopback_interface(),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "lib"), os.environ.get("PYTHONPATH", "")])}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node", str(WORLD),
           "--master-addr", "127.0.0.1", "--master-port", str(_free_port()), str(script), *args]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-4000:]
    return out


def kit_batches() -> dict:
    """The initial model and each rank's first STEPS batches, drawn as `distsgd.run`'s loop draws
    them (`Trainer`: the seed, the partition, each rank's stream)."""
    torch.manual_seed(SEED)
    ds = load_data(BASE["data"], seed=SEED)
    shards = partition(ds.train_labels, WORLD, "iid", SEED)
    model = build_model(BASE["model"], ds.input_shape, ds.num_classes, **BASE["model_options"])
    xs, ys = [], []
    for rank in range(WORLD):
        stream = ds.train_batches(shards[rank], BATCH, SEED * 10_007 + rank, torch.device("cpu"))
        batches = [next(stream) for _ in range(STEPS)]
        xs.append(torch.cat([x for x, _ in batches]))
        ys.append(torch.cat([y for _, y in batches]))
    return {"init": model.state_dict(), "x": xs, "y": ys}


@pytest.fixture(scope="module")
def user_runs(tmp_path_factory) -> Path:
    """tests/user_script.py under torchrun, one launch for every algorithm (and plain DDP)."""
    tmp = tmp_path_factory.mktemp("wrap")
    torch.save(kit_batches(), tmp / "data.pt")
    runs = [{"name": algo, "algo": algo, "params": params, "lr": BASE["lr"],
             "momentum": CONFIG.get(algo, {}).get("momentum", BASE["momentum"]),
             "milestones": MILESTONES.get(algo, []), "batch_size": BATCH}
            for algo, params in ((a, PARAMS.get(a, {})) for a in sorted(REGISTRY))]
    runs.append({"name": "torch_ddp", "algo": "torch_ddp", "params": {}, "lr": BASE["lr"],
                 "momentum": BASE["momentum"], "batch_size": BATCH})
    (tmp / "runs.json").write_text(json.dumps(runs))
    torchrun(ROOT / "tests" / "user_script.py", str(tmp / "data.pt"), str(tmp / "runs.json"), str(tmp), cwd=tmp)
    return tmp


def _final(out: Path, name: str, rank: int = 0) -> dict[str, torch.Tensor]:
    return torch.load(out / f"{name}-rank{rank}.pt", weights_only=True)


def _assert_same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], exact: bool) -> None:
    assert list(a) == list(b)
    for k in a:
        if exact:
            assert torch.equal(a[k], b[k]), (k, (a[k] - b[k]).abs().max().item())
        else:
            torch.testing.assert_close(a[k], b[k], rtol=1e-6, atol=1e-7)


def test_every_parameter_set_is_a_registered_algorithm():
    assert set(PARAMS) <= set(REGISTRY)


@pytest.mark.multiproc
@pytest.mark.parametrize("algo", sorted(REGISTRY))
def test_user_script_matches_distsgd_run(algo, user_runs):
    """The user's loop through wrap ends, on rank 0, where `distsgd.run` ends on the same batches
    from the same initial model."""
    result = distsgd.run(**{**BASE, **CONFIG.get(algo, {})}, algo=algo, params=PARAMS.get(algo, {}))
    reference = result.state_dict()
    mine = _final(user_runs, algo)
    assert not torch.equal(mine["1.weight"], kit_batches()["init"]["1.weight"])     # it trained
    _assert_same(mine, reference, exact=algo not in INEXACT)


@pytest.mark.multiproc
def test_ssgd_through_wrap_matches_torch_ddp(user_runs):
    for rank in range(WORLD):
        _assert_same(_final(user_runs, "ssgd", rank), _final(user_runs, "torch_ddp", rank), exact=False)


def readme_example() -> str:
    """The first python block of the README's "Use it in your own training" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("## Use it in your own training", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.multiproc
def test_readme_example_runs_as_written(tmp_path):
    (tmp_path / "example.py").write_text(readme_example())
    out = torchrun(tmp_path / "example.py", cwd=tmp_path)
    assert re.search(r"rank 0: \d+ steps, loss \d", out.stdout), out.stdout[-2000:]


# ---------------------------------------------------------------------- one rank, in process
@pytest.fixture
def one_rank(tmp_path):
    """A one-rank gloo default group, joined through a file (no socket)."""
    torch.distributed.init_process_group("gloo", init_method=f"file://{tmp_path / 'rdzv'}", rank=0, world_size=1)
    yield
    torch.distributed.destroy_process_group()


def _model_and_sgd(**kw) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    return model, torch.optim.SGD(model.parameters(), **{"lr": 0.1, **kw})


def _step(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
    optimizer.zero_grad()
    model(torch.ones(3, 4)).sum().backward()
    optimizer.step()


def test_the_wrapped_optimizer_is_the_users_for_schedulers_and_state_dicts(one_rank):
    model, inner = _model_and_sgd(momentum=0.9)
    model, optimizer = distsgd.wrap(model, inner, "local_sgd", period=2)
    assert isinstance(optimizer, torch.optim.Optimizer) and optimizer.param_groups is inner.param_groups
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    for _ in range(4):
        _step(model, optimizer)
        scheduler.step()
    assert inner.param_groups[0]["lr"] == pytest.approx(0.025) and optimizer.steps == 4
    state = optimizer.state_dict()
    assert state == inner.state_dict() and len(state["state"]) == 4           # momentum buffers
    optimizer.load_state_dict(state)
    # the step counter tags the ledger: local SGD averages after steps 1 and 3 (period 2)
    assert [e.step for e in optimizer.algorithm.comm.ledger.entries] == [1, 3]
    distsgd.finalize(model, optimizer)


def test_before_forward_runs_once_per_step_and_not_in_evaluation(one_rank, monkeypatch):
    model, optimizer = distsgd.wrap(*_model_and_sgd(), "mgwfbp")
    calls: list[int] = []
    monkeypatch.setattr(optimizer.algorithm, "before_forward", calls.append)
    with torch.no_grad():
        model(torch.ones(1, 4))                 # evaluation: starts no step
    _step(model, optimizer)
    optimizer.zero_grad()
    (model(torch.ones(3, 4)).sum() + model(torch.ones(2, 4)).sum()).backward()   # two forwards, one step
    optimizer.step()
    assert calls == [0, 1]


def test_wrap_uses_the_existing_group_and_the_net_and_ledger_given(one_rank):
    from distsgd.comm import Ledger, parse_net
    ledger = Ledger()
    model, optimizer = distsgd.wrap(*_model_and_sgd(), "ssgd", net="100Mbit,1ms", ledger=ledger)
    _step(model, optimizer)
    comm = optimizer.algorithm.comm
    assert comm.ledger is ledger and ledger.entries and comm.net == parse_net("100Mbit,1ms")
    assert all(e.scope == "global" for e in ledger.entries)
    comm.close()                                # leaves the user's group alone
    assert torch.distributed.is_initialized()


@pytest.mark.parametrize("algo, optimizer, params, field", [
    ("dear", torch.optim.Adam, {}, "optimizer"),
    ("bytescheduler", torch.optim.AdamW, {}, "optimizer"),
    ("ssd_sgd", torch.optim.Adam, {}, "optimizer"),
    ("vrl_sgd", torch.optim.Adam, {}, "optimizer"),
    ("local_sgd", torch.optim.SGD, {"perod": 2}, "params"),
    ("kavg", torch.optim.SGD, {"optimizer_state": "mean"}, "params.optimizer_state"),
])
def test_wrap_refuses_what_the_algorithm_cannot_do(one_rank, algo, optimizer, params, field):
    model = torch.nn.Linear(4, 2)
    with pytest.raises(distsgd.ConfigError, match=rf"invalid {re.escape(field)}="):
        distsgd.wrap(model, optimizer(model.parameters(), lr=0.1), algo, **params)


def test_wrap_refuses_sgd_variants_it_does_not_implement(one_rank):
    for algo, kw in [("dear", {"nesterov": True, "momentum": 0.9}), ("vrl_sgd", {"momentum": 0.9})]:
        model, optimizer = _model_and_sgd(**kw)
        with pytest.raises(distsgd.ConfigError, match="invalid (optimizer|momentum)="):
            distsgd.wrap(model, optimizer, algo)
    model = torch.nn.Linear(4, 2)
    two_groups = torch.optim.SGD([{"params": [model.weight]}, {"params": [model.bias], "weight_decay": 0.1}], lr=0.1)
    with pytest.raises(distsgd.ConfigError, match="one param group"):
        distsgd.wrap(model, two_groups, "ssd_sgd")


def test_wrap_needs_a_process_group():
    model, optimizer = _model_and_sgd()
    with pytest.raises(RuntimeError, match="init_process_group"):
        distsgd.wrap(model, optimizer, "local_sgd")

"""MEM-SGD (compressed_sgd), DoubleSqueeze and LIEC-SGD through the root topology: equivalences
with S-SGD, the server error's flush, the ledger's bytes, the evaluated model; and the compressors
as a DDP communication hook."""
from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

import distsgd
from distsgd.compress import make

from gloo import run_ranks

SMALL = dict(model="mlp", data="digits", nproc=2, steps=10, batch_size=16, lr=0.1, momentum=0.9,
             weight_decay=1e-4, log_every=5, eval_every=0, progress=False)


def _model(result) -> dict[str, torch.Tensor]:
    return result.state_dict()


@pytest.mark.multiproc
def test_liec_run_evaluates_the_average_and_ends_on_it():
    r = distsgd.run(algo="liec_sgd", params={"period": 4}, **{**SMALL, "eval_every": 5})
    assert r.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)
    assert set(r.comm().kind) == {"gather", "reduce", "broadcast"}


# ---------------------------------------------------------------- in-process ranks (Comm level)
BUCKET_MB = 0.0004          # 419 bytes: the tiny MLP's buckets are [w1] (200) and [b1, w2, b2] (41)
SIZES = (200, 41)


def _exchange_and_runs(rank: int, world: int) -> dict:
    """average() of every compressor (the DDP hook's exchange) against a local reference; then
    6 steps of S-SGD and of the root-topology algorithms on a tiny model."""
    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.compress.exchange import average
    from distsgd.training.config import Config

    comm = Comm.from_env("gloo", torch.device("cpu"), None, 60)
    out: dict = {"exchange": {}}
    d = 300
    xs = [torch.randn(d, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    for name in ("none", "topk", "randk", "qsgd", "sign", "powersgd"):
        c = make(name, ratio=0.1)
        seed = 7 if c.all_reducible else 7 + rank
        payload, ctx = c.compress(xs[rank], seed)
        got = average(comm, c, payload, ctx).wait()
        seeds = [7 if c.all_reducible else 7 + r for r in range(world)]
        want = sum(c(xs[r], seeds[r]) for r in range(world)) / world
        e = comm.ledger.entries[-1]
        out["exchange"][name] = ((got - want).abs().max().item(), e.kind, e.nbytes, c.wire_bytes(d))
    b = {"bucket_mb": BUCKET_MB}
    runs = {"ssgd": ("ssgd", {"overlap": False}),
            "liec_h1": ("liec_sgd", {**b, "period": 1}),
            "liec_none_h3": ("liec_sgd", {**b, "compressor": "none", "period": 3}),
            "mem_none": ("compressed_sgd", {**b, "compressor": "none"}),
            "ds_none": ("double_squeeze", {**b, "compressor": "none"}),
            "liec_h3": ("liec_sgd", {**b, "period": 3}),
            "mem": ("compressed_sgd", b),
            "ds": ("double_squeeze", b)}
    for key, (algo, params) in runs.items():
        out[key] = _train_tiny(comm, create(algo, params), Config(), rank)
    comm.close()
    return out


def _train_tiny(comm, algo, config, rank: int) -> dict:
    """6 steps of momentum SGD with weight decay on a tiny MLP, different data on every rank:
    per step the server error's norm (root; None without one), the ledger entries (kind, nbytes)
    and the parameters; the parameters after finalize()."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    algo.setup(model, opt, comm, config.facts())
    gen = torch.Generator().manual_seed(100 + rank)
    params = lambda: torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy().copy()
    out = {"error": [], "entries": [], "params": []}
    for step in range(6):
        comm.step = step
        n0 = len(comm.ledger.entries)
        opt.zero_grad()
        model(torch.randn(32, 10, generator=gen)).pow(2).mean().backward()
        algo.after_backward(step)
        algo.optimizer_step(step)
        algo.after_step(step)
        memory = getattr(algo, "server_memory", None)
        out["error"].append(None if memory is None or memory.error is None else memory.error.norm().item())
        out["entries"].append([(e.kind, e.nbytes) for e in comm.ledger.entries[n0:]])
        out["params"].append(params())
    algo.finalize()
    out["final"] = params()
    return out


def _same(a, b) -> None:
    np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)


@pytest.fixture(scope="module")
def runs():
    return run_ranks(_exchange_and_runs, 3)


@pytest.mark.multiproc
def test_exchange_of_every_compressor(runs):
    for name, (err, kind, nbytes, wire) in runs[0]["exchange"].items():
        assert err < 1e-5, name
        if name in ("none", "randk"):
            assert (kind, nbytes) == ("all_reduce", wire), name
        else:
            assert (kind, nbytes) == ("all_gather", 3 * wire), name


@pytest.mark.multiproc
def test_uncompressed_limits_are_synchronous_sgd(runs):
    """H = 1 (compressed or not) and the identity compressor for H = 3 equal S-SGD step for step;
    so do MEM-SGD and DoubleSqueeze with the identity compressor."""
    for key in ("liec_h1", "liec_none_h3", "mem_none", "ds_none"):
        for r in range(3):
            for step in range(6):
                _same(runs[r][key]["params"][step], runs[r]["ssgd"]["params"][step])


@pytest.mark.multiproc
def test_liec_flushes_the_server_error_and_its_models_drift_between_averagings(runs):
    errors = runs[0]["liec_h3"]["error"]
    for step, e in enumerate(errors):
        if (step + 1) % 3 == 0:
            assert e == 0.0, step                   # flushed at every averaging step
        else:
            assert e > 0, step
    assert all(e is None for e in runs[1]["liec_h3"]["error"])      # the server is the root only
    x = [runs[r]["liec_h3"]["params"] for r in range(3)]
    assert not np.allclose(x[0][0], x[1][0])                         # own models after step 0
    assert not np.allclose(x[0][0], runs[0]["ssgd"]["params"][0])    # compression changed the run
    for r in (1, 2):
        _same(runs[r]["liec_h3"]["final"], runs[0]["liec_h3"]["final"])   # finalize: the average


@pytest.mark.multiproc
def test_ledger_bytes_are_the_papers(runs):
    """Per bucket of d_b entries: scaled sign up (gather) and down (broadcast) ceil(d_b/8) + 4
    bytes; LIEC's averaging step: the model and the gradient reduced and broadcast, 4 d_b each;
    MEM-SGD: sign up, dense down."""
    sign = [-(-d // 8) + 4 for d in SIZES]
    dense = [4 * d for d in SIZES]
    compressed = [("gather", w) for w in sign] + [("broadcast", w) for w in sign]
    averaging = [("reduce", w) for w in dense] + [("broadcast", w) for w in dense]
    for r in range(3):
        entries = runs[r]["liec_h3"]["entries"]
        for step in range(6):
            assert entries[step] == (averaging * 2 if (step + 1) % 3 == 0 else compressed), step
        assert runs[r]["ds"]["entries"][0] == compressed
        assert runs[r]["mem"]["entries"][0] == [("gather", w) for w in sign] + [("broadcast", w) for w in dense]
        assert runs[r]["mem_none"]["entries"][0] == averaging        # P-SGD: reduce, broadcast


def _close_after_ddp(comm) -> None:
    """Destroy the group only once the DDP models (freed by the caller) are collected and every
    rank is past its last collective: otherwise a gloo thread can drop the last reference to the
    group and abort the rank ('Resource deadlock avoided', 1 run in ~15)."""
    gc.collect()
    comm.barrier()
    comm.close()


def _ddp_with_hooks(rank: int, world: int) -> dict:
    """Train a small regression with DDP + our top-k hook, then with PyTorch's PowerSGD hook."""
    from torch.nn.parallel import DistributedDataParallel

    from distsgd.comm import Comm
    from distsgd.compress import TopK, register_powersgd
    from distsgd.compress.ddp_hook import register

    comm = Comm.from_env("gloo", torch.device("cpu"), None, 60)
    out = {}
    for hook in ("topk", "powersgd"):
        torch.manual_seed(0)
        target = torch.randn(16, 4)
        model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)))
        if hook == "topk":
            register(model, TopK(0.25), comm)
        else:
            register_powersgd(model, rank=2, start_iter=2)
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(rank)
        losses = []
        for _ in range(60):
            x = torch.randn(32, 16, generator=gen)
            loss = (model(x) - x @ target).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        out[hook] = (losses[0], sum(losses[-5:]) / 5,
                     torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy())
    out["kinds"] = sorted({e.kind for e in comm.ledger.entries})
    del model, opt
    _close_after_ddp(comm)
    return out


@pytest.mark.multiproc
def test_ddp_training_with_compression_hooks():
    res = run_ranks(_ddp_with_hooks, 2)
    for hook in ("topk", "powersgd"):
        first, last, params = res[0][hook]
        assert last < 0.5 * first, hook
        assert np.array_equal(res[1][hook][2], params), hook      # ranks hold the same model
    assert res[0]["kinds"] == ["all_gather"]                   # top-k's traffic went through Comm


def test_bad_compression_params():
    with pytest.raises(distsgd.ConfigError, match="params"):
        distsgd.run(algo="liec_sgd", params={"ratio": 0.0}, **SMALL)
    with pytest.raises(distsgd.ConfigError, match="params"):
        distsgd.run(algo="compressed_sgd", params={"compressor": "zip"}, **SMALL)


def _hook_futures(rank: int, world: int) -> dict:
    """DDP + the top-k hook on an emulated 20 ms network: whether each future the hook returned
    was pending when returned, and the model after 3 steps with pending futures, with futures
    finished inside the hook (the former synchronous form), and on a Comm the hook made itself
    on the default group (no emulation).

    Pending is checked without a race: the ranks take turns to lead a bucket's hook call; the other
    rank calls the hook only once the leader has returned from it and looked at its future, so the
    leader's exchange cannot have completed then (its peer has not issued its part). A hook that
    waits for its exchange never returns on the leader, and the follower's wait times out."""
    from datetime import timedelta

    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from distsgd.comm import Comm, parse_net
    from distsgd.compress import TopK
    from distsgd.compress.ddp_hook import HookState, compression_hook, register

    comm = Comm.from_env("gloo", torch.device("cpu"), parse_net("1Gbit,20ms"), 60)
    store = dist.distributed_c10d._get_default_store()
    done_when_returned: list[bool] = []
    calls = iter(range(1_000_000))

    def spy(state, bucket):                     # no annotations: DDP checks them at runtime
        call = next(calls)
        key = f"hook-call-{call}-returned"
        leads = call % world == rank
        if not leads:
            store.wait([key], timedelta(seconds=30))
        fut = compression_hook(state, bucket)
        if leads:
            done_when_returned.append(fut.done())
            store.set(key, "1")
        return fut

    out = {}
    for name in ("pending", "finished", "own_comm"):
        torch.manual_seed(0)
        model = DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Linear(32, 4)),
                                        bucket_cap_mb=0.001)             # several buckets
        if name == "pending":
            state = HookState(comm, TopK(0.25))
            model.register_comm_hook(state, spy)
        else:
            state = register(model, TopK(0.25), comm=None if name == "own_comm" else comm,
                             pending=name != "finished")
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        gen = torch.Generator().manual_seed(rank)
        for _ in range(3):
            x = torch.randn(8, 16, generator=gen)
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
        out[name] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()
        out[name + "_kinds"] = sorted({e.kind for e in state.comm.ledger.entries})
    out["done_when_returned"] = done_when_returned
    del model, opt, state
    _close_after_ddp(comm)
    return out


@pytest.mark.multiproc
def test_compression_hook_returns_a_pending_future_with_the_synchronous_result():
    res = run_ranks(_hook_futures, 2)
    for r in res:
        assert r["done_when_returned"] and not any(r["done_when_returned"])     # pending when returned
        assert np.array_equal(r["pending"], r["finished"])                     # the same gradients
        assert np.array_equal(r["own_comm"], r["pending"])
        assert r["pending_kinds"] == r["own_comm_kinds"] == ["all_gather"]
    assert np.array_equal(res[0]["pending"], res[1]["pending"])

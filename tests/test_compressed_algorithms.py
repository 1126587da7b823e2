"""EF-SGD (compressed_sgd), DoubleSqueeze and LIEC-SGD: equivalences with S-SGD, the ledger's
bytes, the replicated server, and the compressors as a DDP communication hook."""
from __future__ import annotations

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
def test_liec_is_not_ssgd_when_compressing_and_ranks_agree():
    r = distsgd.run(algo="liec_sgd", params={"ratio": 0.05}, **SMALL)
    assert r.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)
    d = sum(v.numel() for v in _model(r).values())
    comm = r.comm()
    assert set(comm.kind) == {"all_gather"}
    k = -(-d * 5 // 100)                                  # ceil(0.05 d)
    assert set(comm.nbytes) == {2 * 8 * k}                # 2 ranks x (k values + k int32 indices)
    m = r.metrics.iloc[-1]
    assert m.up_bytes == m.down_bytes == 10 * 8 * k       # parameter-server view, per worker


# ---------------------------------------------------------------- in-process ranks (Comm level)
def _exchange_and_server(rank: int, world: int) -> dict:
    """average() of every compressor against a local reference and the ledger's bytes; then a few
    steps of S-SGD, the uncompressed limits of EF-SGD / DoubleSqueeze / LIEC-SGD, and compressed
    LIEC-SGD and DoubleSqueeze on a tiny model (server error and parameters of every rank)."""
    from distsgd.algorithms import create
    from distsgd.comm import Comm
    from distsgd.compress.exchange import average
    from distsgd.config import Config

    comm = Comm.from_env("gloo", torch.device("cpu"), None, 60)
    out: dict = {"exchange": {}}
    d = 300
    xs = [torch.randn(d, generator=torch.Generator().manual_seed(r)) for r in range(world)]
    for name in ("none", "topk", "randk", "qsgd", "sign", "powersgd"):
        c = make(name, ratio=0.1)
        seed = 7 if c.all_reducible else 7 + rank
        payload, ctx = c.compress(xs[rank], seed)
        got = average(comm, c, payload, ctx)
        seeds = [7 if c.all_reducible else 7 + r for r in range(world)]
        want = sum(c(xs[r], seeds[r]) for r in range(world)) / world
        e = comm.ledger.entries[-1]
        out["exchange"][name] = ((got - want).abs().max().item(), e.kind, e.nbytes, c.wire_bytes(d))
    runs = {"ssgd": ("ssgd", {"overlap": False}),
            "ef_ratio1": ("compressed_sgd", {"compressor": "topk", "ratio": 1.0}),
            "ds_none": ("double_squeeze", {"compressor": "none"}),
            "liec_none": ("liec_sgd", {"compressor": "none"}),
            "liec_sgd": ("liec_sgd", {"compressor": "topk", "ratio": 0.1}),
            "liec_drop": ("liec_sgd", {"compressor": "topk", "ratio": 0.1, "local_error": "drop"}),
            "double_squeeze": ("double_squeeze", {"compressor": "topk", "ratio": 0.1})}
    for key, (algo, params) in runs.items():
        out[key] = _train_tiny(comm, create(algo, params), Config(), rank)
    comm.close()
    return out


def _train_tiny(comm, algo, config, rank: int) -> tuple[np.ndarray | None, np.ndarray]:
    """6 steps of momentum SGD with weight decay on a tiny MLP, different data on every rank;
    returns (server error or None, final parameters), as numpy arrays (sent between processes)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU(), torch.nn.Linear(20, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
    algo.setup(model, opt, comm, config)
    gen = torch.Generator().manual_seed(100 + rank)
    for step in range(6):
        comm.step = step
        opt.zero_grad()
        model(torch.randn(32, 10, generator=gen)).pow(2).mean().backward()
        algo.after_backward(step)
        algo.optimizer_step(step)
        algo.after_step(step)
    algo.finalize()
    error = algo.server_memory.error.numpy().copy() if hasattr(algo, "server_memory") else None
    return error, torch.cat([p.detach().reshape(-1) for p in model.parameters()]).numpy()


@pytest.mark.multiproc
def test_exchange_bytes_and_replicated_server_state():
    world = 3
    res = run_ranks(_exchange_and_server, world)
    for name, (err, kind, nbytes, wire) in res[0]["exchange"].items():
        assert err < 1e-5, name
        if name in ("none", "randk"):
            assert (kind, nbytes) == ("all_reduce", wire), name
        else:
            assert (kind, nbytes) == ("all_gather", world * wire), name
    assert not np.allclose(res[0]["liec_sgd"][1], res[0]["liec_drop"][1])   # the two readings differ
    assert not np.allclose(res[0]["liec_sgd"][1], res[0]["double_squeeze"][1])
    for algo in ("liec_sgd", "liec_drop", "double_squeeze"):
        e0, x0 = res[0][algo]
        assert np.abs(e0).sum() > 0
        assert not np.allclose(x0, res[0]["ssgd"][1])               # compression changed the run
        for r in range(1, world):
            assert np.array_equal(res[r][algo][0], e0), (algo, r)  # server error identical
            assert np.array_equal(res[r][algo][1], x0), (algo, r)  # so is the global model
    for key in ("ef_ratio1", "ds_none", "liec_none"):      # uncompressed limits are S-SGD
        for r in range(world):
            np.testing.assert_allclose(res[r][key][1], res[r]["ssgd"][1], atol=1e-6, rtol=1e-5,
                                       err_msg=key)


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
            register(model, comm, TopK(0.25))
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
    comm.close()
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

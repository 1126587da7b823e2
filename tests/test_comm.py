"""The communication layer: byte ledger formulas, network emulation timing, collectives' results."""
from __future__ import annotations

import time

import pytest
import torch

from distsgd.comm import NetModel, bytes_sent, parse_net
from distsgd.errors import ConfigError
from gloo import run_ranks


# ---------------------------------------------------------------- network model (no processes)
def test_parse_net_units_and_presets():
    m = parse_net("bandwidth=1Gbit,latency=50us")
    assert m.bandwidth_Bps == pytest.approx(125e6) and m.latency_s == pytest.approx(50e-6)
    assert parse_net("bandwidth=100MB,latency=2ms") == NetModel(100e6, 2e-3)
    ten = parse_net("10GbE")
    assert (ten.bandwidth_Bps, ten.latency_s) == pytest.approx((10e9 / 8, 20e-6))
    assert parse_net("") is None
    assert parse_net("100Mbit,100us") == parse_net("bandwidth=100Mbit,latency=100us")
    assert parse_net("1GB") == NetModel(1e9, 0.0)


@pytest.mark.parametrize("bad", ["bandwidth=fast", "latency=1ms", "bandwidth=1Gbit,lat=1us",
                                 "bandwidth=1Gbit,latency=5parsecs", "bandwidth=0Gbit", "nonsense",
                                 "1Gbit,1us,2us", "1Gbit,bandwidth=2Gbit"])
def test_malformed_net_names_the_field(bad):
    with pytest.raises(ConfigError, match=r"net=.*allowed"):
        parse_net(bad)


def test_cost_formulas():
    m = NetModel(bandwidth_Bps=1e6, latency_s=1e-3)
    n, p = 4_000_000, 4
    assert m.cost("all_reduce", n, p) == pytest.approx(2 * 3 * 1e-3 + 2 * 3 / 4 * n / 1e6)
    assert m.cost("reduce_scatter", n, p) == pytest.approx(3 * 1e-3 + 3 / 4 * n / 1e6)
    assert m.cost("broadcast", n, p) == pytest.approx(2 * (1e-3 + n / 1e6))
    assert m.cost("reduce", n, p) == pytest.approx(2 * (1e-3 + n / 1e6))
    assert m.cost("gather", n, p) == pytest.approx(2 * 1e-3 + 3 * n / 1e6)
    assert bytes_sent("gather", n, p) == bytes_sent("reduce", n, p) == 3 * n // 4
    assert m.cost("all_reduce", n, 1) == 0.0
    assert bytes_sent("all_reduce", n, 1) == 0
    # a parameter server's push / pull from p machines to S servers (0: p): the busier NIC
    assert m.cost("push", n, p) == m.cost("pull", n, p, servers=p) == pytest.approx(1e-3 + n / 1e6)
    assert m.cost("push", n, p, servers=1) == pytest.approx(1e-3 + 4 * n / 1e6)
    assert (bytes_sent("push", n, p), bytes_sent("pull", n, p)) == (n, 0)


def test_reduce_and_broadcast_are_priced_as_the_backend_runs_them():
    """gloo's binomial trees (2 passes of n at p = 4) and NCCL's pipelined chain (one pass, p - 1 hops);
    every other kind alike on both; `Comm` reads its group's backend, the simulator its topology's."""
    from distsgd.comm.netmodel import GLOO, NCCL, backend_of
    from distsgd.systems.timeline.topology import INTRA, Topology

    m = NetModel(bandwidth_Bps=1e6, latency_s=1e-3)
    n, p = 4_000_000, 4
    for kind in ("reduce", "broadcast"):
        assert m.cost(kind, n, p, backend=GLOO) == m.cost(kind, n, p) == pytest.approx(2 * (1e-3 + n / 1e6))
        assert m.cost(kind, n, p, backend=NCCL) == pytest.approx(3 * 1e-3 + n / 1e6)
        assert Topology(p, m, m, backend=NCCL).cost(INTRA, kind, n, p) == m.cost(kind, n, p, backend=NCCL)
        assert Topology(p, m, m).cost(INTRA, kind, n, p) == m.cost(kind, n, p, backend=GLOO)
    for kind in ("all_reduce", "reduce_scatter", "all_gather", "gather", "push", "pull"):
        assert m.cost(kind, n, p, backend=NCCL) == m.cost(kind, n, p, backend=GLOO)
    with pytest.raises(ConfigError, match="backend"):
        m.cost("reduce", n, p, backend="mpi")
    assert [backend_of(name, device) for name, device in [("gloo", "cpu"), ("nccl", "cuda"), ("cpu:gloo,cuda:nccl", "cuda"),
                                                         ("cpu:gloo,cuda:nccl", "cpu"), ("mpi", "cuda")]] == \
        [GLOO, NCCL, NCCL, GLOO, GLOO]


# ---------------------------------------------------------------- real collectives over gloo
def _collectives(rank, world, ring):
    from distsgd.comm import Comm

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60, ring_reduce_scatter=ring)
    n = 1000
    x = torch.full((n,), float(rank + 1))
    comm.all_reduce(x, op="avg")
    shard = torch.empty(n // world)
    comm.reduce_scatter(shard, torch.arange(n, dtype=torch.float32) * (rank + 1))
    gathered = torch.empty(world * 3)
    comm.all_gather(gathered, torch.full((3,), float(rank)))
    b = torch.full((5,), float(rank))
    comm.broadcast(b, src=world - 1)
    sub = comm.split_groups([[0, 1], [2, 3]])
    y = torch.full((10,), float(rank + 1))
    comm.all_reduce(y, group=sub)
    # reduce-scatter's other ops, asynchronous and on a subgroup (gloo: all-to-all + local reduction)
    sub_avg, world_max = torch.empty(3), torch.empty(2)
    h = comm.reduce_scatter(sub_avg, torch.arange(6, dtype=torch.float32) + 10 * rank, op="avg",
                            group=sub, async_op=True)
    comm.reduce_scatter(world_max, torch.arange(8, dtype=torch.float32) * (-1) ** rank, op="max")
    h.wait()
    out = dict(avg=x[0].item(), shard=shard.tolist(), gathered=gathered.tolist(), bcast=b.tolist(),
               sub=y[0].item(), sub_avg=sub_avg.tolist(), world_max=world_max.tolist(),
               totals=comm.ledger.totals(),
               sent=[(e.kind, e.scope, e.sent) for e in comm.ledger.entries])
    comm.close()
    return out


@pytest.mark.multiproc
@pytest.mark.parametrize("ring", [False, True], ids=["gloo_reduce_scatter", "ring_reduce_scatter"])
def test_collectives_results_and_ledger_bytes(ring):
    world, n = 4, 1000
    outs = run_ranks(_collectives, world, ring)
    coeff = sum(range(1, world + 1))
    for rank, o in enumerate(outs):
        assert o["avg"] == pytest.approx(2.5)
        lo = rank * n // world
        assert o["shard"] == pytest.approx([coeff * i for i in range(lo, lo + n // world)])
        assert o["gathered"] == [float(r) for r in range(world) for _ in range(3)]
        assert o["bcast"] == [float(world - 1)] * 5
        assert o["sub"] == (3.0 if rank < 2 else 7.0)        # only the group's ranks: 1+2, 3+4
        mean_rank = 0.5 if rank < 2 else 2.5                   # of the ranks in the group
        assert o["sub_avg"] == pytest.approx([i + 10 * mean_rank for i in range(3 * (rank % 2), 3 * (rank % 2) + 3)])
        assert o["world_max"] == [float(i) for i in range(2 * rank, 2 * rank + 2)]   # even ranks: +i
        nbytes = 4 * n
        assert o["sent"] == [
            ("all_reduce", "global", round(2 * (world - 1) / world * nbytes)),
            ("reduce_scatter", "global", round((world - 1) / world * nbytes)),
            ("all_gather", "global", round((world - 1) / world * 4 * 3 * world)),
            ("broadcast", "global", round((world - 1) / world * 4 * 5)),
            ("all_reduce", "local", round(1 / 2 * 4 * 10 * 2)),
            ("reduce_scatter", "local", round(1 / 2 * 4 * 6)),
            ("reduce_scatter", "global", round((world - 1) / world * 4 * 8)),
        ]
        assert o["totals"]["global_reductions"] == 3 and o["totals"]["local_reductions"] == 2
        assert o["totals"]["collectives"] == 7


def _root_collectives(rank, world):
    from distsgd.comm import Comm

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    root = world - 1
    out = torch.empty(world * 3) if rank == root else None
    comm.gather(out, torch.full((3,), float(rank)), dst=root)
    total = torch.full((4,), float(rank + 1))
    comm.reduce(total, dst=root, op="avg")
    s = torch.full((2,), float(rank + 1))
    h = comm.reduce(s, dst=0, async_op=True)
    h.wait()
    result = dict(gathered=None if out is None else out.tolist(), avg=total.tolist(), sum=s.tolist(),
                  totals=comm.ledger.totals(),
                  entries=[(e.kind, e.nbytes, e.sent) for e in comm.ledger.entries])
    comm.close()
    return result


@pytest.mark.multiproc
def test_gather_and_reduce_to_a_root_and_their_ledger_bytes():
    world = 3
    outs = run_ranks(_root_collectives, world)
    assert outs[world - 1]["gathered"] == [float(r) for r in range(world) for _ in range(3)]
    assert outs[world - 1]["avg"] == [2.0] * 4                  # (1 + 2 + 3) / 3 on the root
    assert outs[0]["sum"] == [6.0] * 2
    for o in outs:
        assert o["entries"] == [("gather", 12, round(2 / 3 * 12)), ("reduce", 16, round(2 / 3 * 16)),
                                ("reduce", 8, round(2 / 3 * 8))]
        assert o["totals"]["global_reductions"] == 2 and o["totals"]["collectives"] == 3


def _push_pull(rank, world):
    from distsgd.comm import Comm

    comm = Comm.from_env("gloo", torch.device("cpu"), parse_net("1Gbit,1ms"), timeout_s=60)
    roots = comm.new_group([1, 2])                       # the roots of machines [0, 1] and [2]
    result = {}
    if rank in roots.ranks:
        x, shard = torch.arange(4.0) + 10 * rank, torch.empty(2)
        push = comm.push(shard, x, servers=1, group=roots, async_op=True)
        push.wait()
        pull = comm.pull(x, shard, group=roots, async_op=True, at=push.entry.t_ready)
        pull.wait()
        result = dict(x=x.tolist(), pull_issue=pull.entry.t_issue, push_ready=push.entry.t_ready,
                      entries=[(e.kind, e.nbytes, e.sent, e.group_size, e.modeled_s) for e in comm.ledger.entries])
    comm.barrier()
    comm.close()
    return result


@pytest.mark.multiproc
def test_push_and_pull_sum_over_the_group_and_are_timed_as_separate_servers():
    """`Comm.push` / `Comm.pull` (BytePS's placement of `ps`) on a subgroup: every member ends with
    the group's sum; the ledger records a push (its bytes sent) and a pull (none) at the servers'
    cost, the pull issued when the push was done (`at`)."""
    outs = run_ranks(_push_pull, 3)
    net = parse_net("1Gbit,1ms")
    assert outs[0] == {}
    for o in outs[1:]:
        assert o["x"] == [30.0, 32.0, 34.0, 36.0]        # rank 1's 10.. + rank 2's 20..
        assert o["entries"] == [("push", 16, 16, 2, net.cost("push", 16, 2, servers=1)),
                                ("pull", 16, 0, 2, net.cost("pull", 16, 2))]
        assert o["pull_issue"] == o["push_ready"]


def _timed_allreduce(rank, world, numel, spec):
    from distsgd.comm import Comm, parse_net

    comm = Comm.from_env("gloo", torch.device("cpu"), parse_net(spec), timeout_s=60)
    x = torch.ones(numel)
    comm.barrier()
    t0 = time.perf_counter()
    comm.all_reduce(x)
    sync_s = time.perf_counter() - t0
    # async: the modeled transfer overlaps with computation done before wait()
    comm.barrier()
    t0 = time.perf_counter()
    h = comm.all_reduce(x, async_op=True)
    time.sleep(0.6 * comm.ledger.entries[-1].modeled_s)      # stands for computation
    h.wait()
    async_s = time.perf_counter() - t0
    modeled = comm.ledger.entries[-1].modeled_s
    ok = x[0].item() == world * world
    comm.close()
    return sync_s, async_s, modeled, ok


@pytest.mark.timing
@pytest.mark.multiproc
def test_emulated_allreduce_takes_modeled_time_and_overlaps():
    world, numel = 4, 1_000_000                      # 4 MB
    outs = run_ranks(_timed_allreduce, world, numel, "bandwidth=100Mbit,latency=100us")
    expected = NetModel(100e6 / 8, 100e-6).cost("all_reduce", 4 * numel, world)   # ~0.48 s
    for sync_s, async_s, modeled, ok in outs:
        assert ok, "the real data must still be reduced"
        assert modeled == pytest.approx(expected)
        assert expected <= sync_s <= 1.3 * expected
        # overlap: computing for 0.6x the transfer time while it is in flight costs nothing extra
        assert expected <= async_s <= 1.3 * expected


def _leak(rank, world):
    from distsgd.comm import Comm

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    h = comm.all_reduce(torch.ones(4), async_op=True)
    pending = comm.pending()
    try:
        comm.assert_drained()
        raised = False
    except RuntimeError:
        raised = True
    h.wait()
    comm.assert_drained()
    comm.close()
    return pending, raised


@pytest.mark.multiproc
def test_unwaited_handle_is_detected():
    for pending, raised in run_ranks(_leak, 2):
        assert pending == 1 and raised


def _agree_beside_an_inflight_collective(rank, world):
    """Rank 0 has a model all-reduce in flight when it agrees; rank 1 agrees first and issues
    its all-reduce only afterwards. On a control group of its own the agreement completes; on
    the data plane's group it would be paired with the model all-reduce and fail."""
    from distsgd.comm import Comm

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=20)
    model = torch.ones(1000)
    flag = torch.tensor([float(rank)])
    if rank == 0:
        h = comm.all_reduce(model, async_op=True)
        comm.agree(flag, op="max")
    else:
        comm.agree(flag, op="max")
        h = comm.all_reduce(model, async_op=True)
    h.wait()
    ok = flag.item() == world - 1 and model[0].item() == world and len(comm.ledger.entries) == 1
    comm.close()
    return ok


@pytest.mark.multiproc
def test_agreement_does_not_queue_behind_the_data_plane():
    assert all(run_ranks(_agree_beside_an_inflight_collective, 2, timeout=60))


def _settle(rank, world):
    """Rank 1 arrives 0.5 s late; how long each rank's first and second `settle` waited."""
    from distsgd.comm import Comm

    comm = Comm.from_env("gloo", torch.device("cpu"), None, 60)
    if rank == 1:
        time.sleep(0.5)
    waited = []
    for _ in range(2):                  # the second call is a rendezvous of its own
        t0 = time.perf_counter()
        comm.settle()
        waited.append(time.perf_counter() - t0)
        if rank == 0:
            time.sleep(0.3)
    comm.close()
    return waited


@pytest.mark.multiproc
def test_settle_returns_once_every_rank_has_arrived():
    """`Comm.settle` (the end of `distsgd.finalize`): no rank leaves before the last arrives."""
    first, second = zip(*run_ranks(_settle, 3))
    assert first[0] > 0.4 and first[2] > 0.4, first          # waited for rank 1, 0.5 s late
    assert second[1] > 0.2 and second[2] > 0.2, second       # then for rank 0, 0.3 s late


def test_single_tensor_collectives_fall_back_to_their_pre_2_13_names(monkeypatch):
    """torch >= 2.13 names them reduce_scatter_single / all_gather_single; 2.11 (the H200 of
    reproduce/gpu_check.py) has only reduce_scatter_tensor / all_gather_into_tensor."""
    import torch.distributed as dist

    from distsgd.comm.comm import single_tensor_collective
    assert single_tensor_collective("reduce_scatter") is dist.reduce_scatter_single
    assert single_tensor_collective("all_gather") is dist.all_gather_single
    monkeypatch.delattr(dist, "reduce_scatter_single")
    monkeypatch.delattr(dist, "all_gather_single")
    assert single_tensor_collective("reduce_scatter") is dist.reduce_scatter_tensor
    assert single_tensor_collective("all_gather") is dist.all_gather_into_tensor


# ---------------------------------------------------------------- the device's clock (GPU mocked)
class _FakeWork:
    """An NCCL-like work handle: `wait()` returns at once (the host is not blocked)."""

    def __init__(self) -> None:
        self.waits = 0

    def wait(self) -> bool:
        self.waits += 1
        return True

    def is_completed(self) -> bool:
        return True

    def get_future(self) -> torch.futures.Future:
        fut = torch.futures.Future()
        fut.set_result(None)
        return fut


class _FakeCuda:
    """torch.cuda's streams, recorded: which stream was synchronised, when, and for how long."""

    def __init__(self, monkeypatch, sync_s: float = 0.0) -> None:
        import contextlib

        self.calls: list[tuple[str, float]] = []
        fake = self

        class Stream:
            def __init__(self, name: str) -> None:
                self.name = name

            def synchronize(self) -> None:
                time.sleep(sync_s)                       # the device finishing its queued work
                fake.calls.append((self.name, time.perf_counter()))

        monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: Stream("current"))
        monkeypatch.setattr(torch.cuda, "Stream", lambda device=None: Stream("side"))
        monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())


def _comm(device: str, net: str):
    from distsgd.comm import Comm

    return Comm(0, 2, torch.device(device), parse_net(net))


def test_on_a_gpu_emulated_delays_are_timed_from_the_device(monkeypatch):
    """NCCL's wait does not block the host: with a network model the issue time is read after the
    device has run its queued compute, and `wait` returns once a stream of its own has seen the
    collective complete and the modeled time has passed. Without a model nothing is synchronised."""
    fake = _FakeCuda(monkeypatch, sync_s=0.05)
    work = _FakeWork()
    monkeypatch.setattr("distsgd.comm.comm.dist.all_reduce", lambda *a, **kw: work)
    comm = _comm("cuda:0", "1Gbit,1ms")
    before = time.perf_counter()
    handle = comm.all_reduce(torch.ones(1000), async_op=True)
    (issued,) = fake.calls
    assert issued[0] == "current" and comm.ledger.entries[0].t_issue >= issued[1] >= before + 0.05
    handle.wait()
    assert [name for name, _ in fake.calls] == ["current", "side"] and work.waits == 2
    entry = comm.ledger.entries[0]
    assert entry.t_done >= entry.t_ready and entry.modeled_s > 0

    fake.calls.clear()
    out = comm.all_reduce_future(torch.ones(10), op="sum").wait()     # DDP hooks: the Future's thread
    assert out.tolist() == [1.0] * 10 and [name for name, _ in fake.calls] == ["current", "side"]

    fake.calls.clear()
    plain = _comm("cuda:0", "")
    plain.all_reduce(torch.ones(10), async_op=True).wait()
    plain.all_reduce_future(torch.ones(10)).wait()
    assert fake.calls == [], "a real interconnect's timing is left as NCCL makes it"


def test_on_the_cpu_the_emulation_touches_no_device(monkeypatch):
    """gloo: a collective has run when its call returns; the emulated path reads no CUDA stream."""
    def no_cuda(*args, **kwargs):
        raise AssertionError("a CUDA stream used on the CPU")

    for name in ("current_stream", "Stream", "stream"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    monkeypatch.setattr("distsgd.comm.comm.dist.all_reduce", lambda *a, **kw: _FakeWork())
    comm = _comm("cpu", "1Gbit,1ms")
    comm.all_reduce(torch.ones(1000), async_op=True).wait()
    comm.all_reduce_future(torch.ones(10)).wait()
    entry = comm.ledger.entries[0]
    assert entry.t_done >= entry.t_ready > entry.t_issue


def test_gpu_checks_emulation_probe_runs_on_the_cpu():
    """reproduce/gpu_check.py's `full_profile` step times a modeled all-reduce issued behind queued
    compute; on the CPU (its own check before device time is spent) the probe runs end to end and its
    wait lasts at least the modeled time."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "reproduce" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    gpu_check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gpu_check)
    probe = gpu_check.emulation_on_device("cpu", "gloo")
    assert set(probe) == {"compute_s", "modeled_s", "total_s", "overlap", "holds"}
    assert probe["modeled_s"] > 0 and probe["total_s"] >= probe["modeled_s"]


def test_a_collective_issued_at_a_tick_is_timed_from_it(monkeypatch):
    """`all_reduce(at=t)`: a background thread's issue (Horovod's fusion cycle tick) is emulated from
    t, past or to come, and the link queue still holds: ready = max(t, link free) + cost."""
    monkeypatch.setattr("distsgd.comm.comm.dist.all_reduce", lambda *a, **kw: _FakeWork())
    comm = _comm("cpu", "1Gbit,1ms")
    cost = comm.net.cost("all_reduce", 4000, 2)
    now = time.perf_counter()
    comm.all_reduce(torch.ones(1000), async_op=True, at=now + 0.05).wait()
    assert time.perf_counter() >= now + 0.05 + cost
    past = comm.ledger.entries[0].t_ready - 0.2
    comm.all_reduce(torch.ones(1000), async_op=True, at=past).wait()      # queued behind the first
    first, second = comm.ledger.entries
    assert first.t_issue == now + 0.05 and first.t_ready == pytest.approx(now + 0.05 + cost)
    assert second.t_issue == past and second.t_ready == pytest.approx(first.t_ready + cost)

"""The per-call overheads knob of the simulator (`distsgd.systems.timeline.costs`): closed forms with
the knob on, the knob off giving exactly the plain predictions, and the measurement's sanity."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from distsgd.algorithms.buckets import group_counts
from distsgd.comm.netmodel import NetModel
from distsgd.systems.timeline import ALGORITHMS, simulate
from distsgd.systems.timeline.costs import NONE, Overheads, out_bytes

from test_timeline import FREE as FREE_NET
from test_timeline import MB, NET, TOY, ar, profile

KNOB = Overheads(issue_s=50e-6, copy_Bps=2e9)


def buckets(bucket_mb: float) -> list[int]:
    out, start = [], 0
    for k in group_counts(TOY.tensor_bytes, bucket_mb * MB):
        out.append(sum(TOY.tensor_bytes[start:start + k]))
        start += k
    return out


def test_no_overlap_one_bucket_closed_form() -> None:
    """One bucket: compute + issue + pack (1 pass) + all-reduce + div_ and copy back (2 passes)."""
    p, n = 8, TOY.grad_bytes
    pred = simulate(TOY, "no_overlap", p, NET, {"bucket_mb": 1e4}, overheads=KNOB)
    expected = TOY.compute_s + KNOB.issue_s + n / KNOB.copy_Bps + ar(n, p) + 2 * n / KNOB.copy_Bps
    assert pred.step_s == pytest.approx(expected, rel=1e-12)
    assert pred.compute_s == pytest.approx(TOY.compute_s + KNOB.issue_s + 3 * n / KNOB.copy_Bps, rel=1e-12)


@pytest.mark.parametrize("bucket_mb", [0.5, 4.0])
def test_no_overlap_buckets_closed_form(bucket_mb: float) -> None:
    """Several buckets on a slow link (every all-reduce outlasts the next issue and the previous
    copy-out): compute + first issue and pack + all-reduces back to back + the last copy-out."""
    p, net = 8, NetModel(bandwidth_Bps=1e8, latency_s=1e-3)
    b = buckets(bucket_mb)
    assert len(b) > 1
    pred = simulate(TOY, "no_overlap", p, net, {"bucket_mb": bucket_mb}, overheads=KNOB)
    expected = (TOY.compute_s + KNOB.issue_s + b[0] / KNOB.copy_Bps + sum(ar(x, p, net) for x in b)
                + 2 * b[-1] / KNOB.copy_Bps)
    assert pred.step_s == pytest.approx(expected, rel=1e-12)
    # the compute stream's own seconds: every issue and every pass over every bucket
    assert pred.compute_s == pytest.approx(
        TOY.compute_s + len(b) * KNOB.issue_s + 3 * sum(b) / KNOB.copy_Bps, rel=1e-12)


def test_free_network_charges_n_buckets_issues_and_copies() -> None:
    """On a free network the step is compute + n_buckets * issue_s + 3 passes over the bytes."""
    free = NetModel(bandwidth_Bps=math.inf, latency_s=0.0)
    for algo, params in (("wfbp", {}), ("no_overlap", {"bucket_mb": 0.5}), ("local_sgd", {"period": 1})):
        pred = simulate(TOY, algo, 4, free, params, overheads=KNOB)
        n = len(TOY.tensor_bytes) if algo == "wfbp" else len(buckets(0.5)) if algo == "no_overlap" else 1
        expected = TOY.compute_s + n * KNOB.issue_s + 3 * TOY.grad_bytes / KNOB.copy_Bps
        assert pred.step_s == pytest.approx(expected, rel=1e-12), algo


def test_out_bytes_rule() -> None:
    assert out_bytes("all_reduce", 100, 4) == 200
    assert out_bytes("reduce_scatter", 100, 4) == 25
    assert out_bytes("all_gather", 100, 4) == 100


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_knob_off_is_the_plain_prediction(algo: str) -> None:
    """None, `NONE` and free copies with zero issue cost: identical timelines, event for event."""
    params = {"local_groups": 2} if algo == "kavg" else {}
    plain = simulate(TOY, algo, 4, NET, params)
    for knob in (None, NONE, Overheads(0.0, math.inf)):
        other = simulate(TOY, algo, 4, NET, params, overheads=knob)
        assert other.step_s == plain.step_s and other.compute_s == plain.compute_s
        assert other.events == plain.events
    on = simulate(TOY, algo, 4, NET, params, overheads=KNOB)
    assert on.step_s > plain.step_s


def _rank_with_transfer(cores: int, p: int) -> tuple["Rank", float]:
    """A rank of p whose real transfers copy for 10 ms per all-reduce of 1 MB (plus 1 ms of
    latency: waiting, not work), on an emulated network where it is modeled slower (> 100 ms:
    headroom); those 10 ms."""
    from distsgd.systems.timeline.streams import Rank
    from distsgd.systems.timeline.topology import Topology
    real = NetModel(bandwidth_Bps=2 * (p - 1) / p * MB / 10e-3, latency_s=1e-3 / (2 * (p - 1)))
    ov = Overheads(transfer={p: real}, cores=cores)
    return Rank(Topology.flat(NetModel(bandwidth_Bps=1e7, latency_s=0.0)), p, ov), 10e-3


def test_a_real_transfer_delays_overlapped_compute_by_its_cpu_time() -> None:
    """Issued, then 50 ms of compute: the compute stream ends its CPU time later (half speed
    for twice the transfer); waited for first, it delays nothing; with more ranks than cores,
    the real (wall) time counts cores / p of it."""
    rank, real = _rank_with_transfer(cores=2, p=2)
    rank.issue("all_reduce", MB)
    rank.compute("backward", 50e-3)
    assert rank.t == pytest.approx(50e-3 + real, rel=1e-12)
    blocked, _ = _rank_with_transfer(cores=2, p=2)
    blocked.wait(blocked.issue("all_reduce", MB))
    start = blocked.t
    blocked.compute("forward", 50e-3)
    assert blocked.t - start == pytest.approx(50e-3, rel=1e-12)
    shared, real4 = _rank_with_transfer(cores=2, p=4)
    shared.issue("all_reduce", MB)
    shared.compute("backward", 50e-3)
    assert shared.t == pytest.approx(50e-3 + real4 * 2 / 4, rel=1e-12)


def test_real_transfers_run_one_after_the_other() -> None:
    """Two transfers issued together keep the compute stream at half speed for both: 2 x 10 ms."""
    rank, real = _rank_with_transfer(cores=2, p=2)
    rank.issue("all_reduce", MB)
    rank.issue("all_reduce", MB)
    rank.compute("backward", 100e-3)
    assert rank.t == pytest.approx(100e-3 + 2 * real, rel=1e-12)


def test_ssd_rules_cost_their_measured_share_of_the_step() -> None:
    """SSD-SGD's local rule and server steps: one update each by default, the measured fraction of
    the training step with `work` of `ssd_rule` / `ssd_server`."""
    period = 4
    default = simulate(TOY, "ssd_sgd", 2, NET, {"period": period, "warmup": 0})
    rules = Overheads(work={"ssd_rule": 0.5, "ssd_server": 0.25})
    measured = simulate(TOY, "ssd_sgd", 2, NET, {"period": period, "warmup": 0}, overheads=rules)

    def span(pred, name: str) -> list[float]:
        return [e.end - e.start for e in pred.events if e.stream == "compute" and e.name == name]

    assert span(default, "ssd_rule") == pytest.approx([TOY.update_s] * len(span(default, "ssd_rule")))
    assert set(span(measured, "ssd_rule")) and all(
        d == pytest.approx(0.5 * TOY.compute_s, rel=1e-12) for d in span(measured, "ssd_rule"))
    assert set(span(measured, "ssd_server")) and all(
        d == pytest.approx(0.25 * TOY.compute_s, rel=1e-12) for d in span(measured, "ssd_server"))


def test_a_pass_its_class_does_not_declare_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """The simulator charges only the passes a class declares (`Algorithm.work_passes`): SSD-SGD
    announcing its server step without declaring it fails, naming the pass."""
    from distsgd.algorithms import REGISTRY
    monkeypatch.setattr(REGISTRY["ssd_sgd"], "work_passes", ("ssd_rule",))
    with pytest.raises(RuntimeError, match="'ssd_server'.*work_passes: ssd_rule"):
        simulate(TOY, "ssd_sgd", 2, NET, {"period": 2, "warmup": 0})


@pytest.mark.parametrize("period", [1, 4])
def test_the_simulator_charges_ssd_sgds_announced_work(period: int) -> None:
    """SSD-SGD's class announces its passes (`Comm.work`): on a free network a cycle of `period`
    steps costs `period` forward/backward passes, `period` server steps (the pushes the pull
    applies: len(due)) and `period` local rules, and no optimizer update (its `optimizer_step` does
    not call `optimizer.step()`); its warm-up steps (S-SGD) a forward/backward and a server step."""
    rule, server = 0.5, 0.25
    planted = Overheads(work={"ssd_rule": rule, "ssd_server": server})
    fb, c, u = TOY.compute_s - TOY.update_s, TOY.compute_s, TOY.update_s
    plain = simulate(TOY, "ssd_sgd", 2, FREE_NET, {"period": period})
    charged = simulate(TOY, "ssd_sgd", 2, FREE_NET, {"period": period}, overheads=planted)
    assert period * plain.step_s == pytest.approx(period * fb + period * u + u * period, rel=1e-12)
    assert period * (charged.step_s - plain.step_s) == pytest.approx(
        period * (server * c - u) + period * (rule * c - u), rel=1e-12)
    from distsgd.systems.timeline.validate import window_step
    warm = window_step(TOY, "ssd_sgd", 2, FREE_NET, {"period": period, "warmup": 20}, warmup=2, steps=8,
                       overheads=planted)
    assert warm == pytest.approx(fb + server * c, rel=1e-12)


@pytest.mark.timing
@pytest.mark.multiproc
def test_measured_overheads_are_of_the_right_magnitude() -> None:
    """Measured here on the MLP: a copy speed between 100 MB/s and 1 TB/s (a pass over memory, not
    a unit error), an issue cost under 10 ms, real transfers slower than 10 MB/s, SSD-SGD's rules
    a positive share of a step."""
    from distsgd.systems.measure_costs import measure
    ov = measure(nprocs=(2,))
    assert 1e8 < ov.copy_Bps < 1e12 and 0 < ov.issue_s < 1e-2
    assert set(ov.transfer) == {2} and ov.transfer[2].bandwidth_Bps > 1e7
    assert set(ov.work) == {"ssd_rule", "ssd_server"} and min(ov.work.values()) > 0 and ov.cores >= 1


@pytest.mark.timing
def test_a_hooked_all_reduce_costs_more_than_comms_in_a_loop() -> None:
    """A hooked all-reduce in a training step costs more to issue than Comm's in a loop (it also runs
    the hook and the averaging): medians of wall-clock times, so measured with nothing beside it."""
    calls, hooked = _gpu_check_calls()
    assert hooked.issue_s.median() > calls[calls.path == "distsgd.Comm"].issue_s.median() > 0


# ---------------------------------------------------------------- a GPU host (issue 33 item 2)
def gpu_host(share: float, issue_s: float = 100e-6) -> Overheads:
    return Overheads(issue_s=issue_s, host_share=share)


def test_a_host_ahead_of_the_device_hides_its_issue_costs() -> None:
    """Host share 0.1 of a step, 9 collectives of 100 us: the host needs 0.1 compute + 0.9 ms, far
    less than the device's compute, so WFBP on a free network costs the compute alone."""
    pred = simulate(TOY, "wfbp", 2, FREE_NET, overheads=gpu_host(0.1))
    assert pred.step_s == pytest.approx(TOY.compute_s, rel=1e-12)


def test_a_host_behind_the_device_sets_the_pace_and_pays_every_issue() -> None:
    """Host share 2 (the host takes twice the device's time to issue the compute: small kernels):
    the step is the host's, 2 x compute + one issue per tensor (WFBP), or per bucket (one bucket)."""
    ov = gpu_host(2.0)
    wfbp = simulate(TOY, "wfbp", 2, FREE_NET, overheads=ov)
    assert wfbp.step_s == pytest.approx(2 * TOY.compute_s + len(TOY.tensor_bytes) * ov.issue_s, rel=1e-9)
    one = simulate(TOY, "no_overlap", 2, FREE_NET, {"bucket_mb": 1e4}, overheads=ov)
    assert one.step_s == pytest.approx(2 * TOY.compute_s + ov.issue_s, rel=1e-9)


def test_on_a_gpu_host_a_collective_starts_once_the_host_has_issued_it() -> None:
    """Host share 0: the device computes as soon as it can. With 1 us per issue the all-reduce after
    backward starts when the gradient is ready (step = compute + all-reduce); with 100 ms per issue,
    more than compute and all-reduce together, each all-reduce starts when the host has issued it,
    100 ms after the last one, and the step is the host's 100 ms."""
    p, n = 4, TOY.grad_bytes
    fast = simulate(TOY, "no_overlap", p, NET, {"bucket_mb": 1e4}, overheads=gpu_host(0.0, 1e-6))
    assert fast.step_s == pytest.approx(TOY.compute_s + ar(n, p), rel=1e-9)
    assert TOY.compute_s + ar(n, p) < 0.1
    slow = simulate(TOY, "no_overlap", p, NET, {"bucket_mb": 1e4}, overheads=gpu_host(0.0, 0.1))
    assert slow.step_s == pytest.approx(0.1, rel=1e-9)


def test_gpu_host_rules_on_one_rank() -> None:
    """`streams.Rank` on a GPU host, rule by rule: a task ends no earlier than the host has issued
    all of it (host share 2: 1 s of device work ends at 2 s); the next task starts no earlier than
    the host has begun issuing it; a collective starts once the host has issued it (1 s of issue
    cost, then its transfer); waiting for it is the device's: the host's clock does not move."""
    from distsgd.systems.timeline.streams import Rank
    from distsgd.systems.timeline.topology import Topology

    rank = Rank(Topology.flat(NET), 4, gpu_host(2.0, issue_s=1.0))
    rank.compute("a", 1.0)
    assert (rank.t, rank.host) == (2.0, 2.0)
    ready = rank.issue("all_reduce", 4 * MB)
    assert rank.host == 3.0 and ready == pytest.approx(3.0 + ar(4 * MB, 4), rel=1e-12)
    rank.wait(ready)
    assert rank.t == ready and rank.host == 3.0
    rank.compute("b", 1.0)                     # host 3 -> 5; device from the ready time, ends at 5
    assert rank.t == pytest.approx(max(ready + 1.0, 5.0)) and rank.host == 5.0


def test_gpu_overheads_from_the_checks_tables() -> None:
    """`gpu_overheads`: issue_s the median host issue per call of the kit's Comm over rounds of 8+
    calls; host_share the host's forward + backward + update over the device's step."""
    import pandas as pd

    from distsgd.systems.timeline.costs import HOOKED, Overheads, gpu_overheads
    calls = pd.DataFrame([dict(path="distsgd.Comm", calls=1, issue_s=9.0),
                          dict(path="distsgd.Comm", calls=8, issue_s=1.0),
                          dict(path="distsgd.Comm", calls=64, issue_s=2.0),
                          dict(path="distsgd.Comm", calls=512, issue_s=3.0),
                          dict(path="torch.distributed", calls=64, issue_s=0.5)])
    ov = gpu_overheads(calls, dict(host_forward_s=1.0, host_backward_s=2.0, host_update_s=1.0, device_s=8.0))
    assert ov.issue_s == 2.0 and ov.host_share == 0.5 and ov.gpu
    # a table with the cost in place (measure_hooked_calls' rows) charges that instead
    hooked = pd.concat([calls, pd.DataFrame([dict(path=HOOKED, calls=8, issue_s=5.0),
                                             dict(path=HOOKED, calls=64, issue_s=7.0),
                                             dict(path=HOOKED, calls=256, issue_s=6.0)])])
    assert gpu_overheads(hooked, None) == Overheads(issue_s=6.0, host_share=0.0)


def _gpu_check_calls() -> tuple["pd.DataFrame", "pd.DataFrame"]:
    """`measure_gpu_calls` and `measure_hooked_calls` (run on a GPU by reproduce/gpu_check.py) on the
    CPU, with the rows and the one-rank group checked."""
    import torch.distributed as dist

    from distsgd.systems.measure_costs import measure_gpu_calls, measure_hooked_calls
    from distsgd.systems.timeline.costs import HOOKED
    calls = measure_gpu_calls(sizes=(4096, 65536), counts=(1, 8), reps=2, device="cpu")
    assert len(calls) == 2 * 2 * 2 and set(calls.path) == {"distsgd.Comm", "torch.distributed"}
    assert (calls.issue_s > 0).all() and (calls.call_s >= calls.issue_s).all()
    assert not dist.is_initialized()
    hooked = measure_hooked_calls(widths=(32, 256), counts=(8, 64), reps=5, device="cpu")
    assert len(hooked) == 4 and set(hooked.path) == {HOOKED} and list(hooked.nbytes) == [4096] * 2 + [262144] * 2
    assert not dist.is_initialized()
    return calls, hooked


def test_the_gpu_checks_measurements_run_on_the_cpu_too() -> None:
    """`measure_gpu_calls`, `measure_hooked_calls` and `profiler.host_and_device` (run on a GPU by
    reproduce/gpu_check.py) on the CPU, where host and device are one: every (path, size, count) row,
    positive times, the device's time per call at least the host's issue loop, the one-rank group left
    as found; the host's time for each phase of a step at most the whole step (medians of per-step
    pairs)."""
    from distsgd.systems.profiler import host_and_device
    _gpu_check_calls()
    host = host_and_device("mlp", (64,), 8, device="cpu", reps=3, warmup=1)
    assert host["device_s"] == host["step_s"] > 0 and host["host_layerwise_update_s"] > 0
    assert all(0 < host[f"host_{phase}_s"] <= host["step_s"] for phase in ("forward", "backward", "update"))


def test_simulate_charges_the_committed_gpu_costs_on_a_gpu_profile() -> None:
    """`for_profile`: nothing on a CPU profile; on a projected GPU profile the committed per-call cost
    with the host kept ahead (share 0); on a profile measured with CUDA where the GPU check measured
    that model and batch, its host share too. `simulate` without `overheads` charges exactly that."""
    import dataclasses

    import pandas as pd

    from distsgd.paths import repo_root
    from distsgd.systems.timeline.costs import GPU_CALLS, GPU_HOST, for_profile, gpu_overheads
    root = repo_root(Path(__file__).parent)
    calls, host = pd.read_csv(root / GPU_CALLS), pd.read_csv(root / GPU_HOST)
    assert for_profile(TOY) is NONE
    v100 = dataclasses.replace(TOY, device="V100-fp32")
    assert for_profile(v100) == gpu_overheads(calls, None) and for_profile(v100).host_share == 0.0
    row = host.iloc[0]
    measured = dataclasses.replace(TOY, device="cuda", model=row.model, batch_size=int(row.batch_size))
    ov = for_profile(measured)
    assert ov.gpu and ov.host_share == pytest.approx(
        (row.host_forward_s + row.host_backward_s + row.host_update_s) / row.device_s) and ov.host_share > 0
    assert 1e-6 < ov.issue_s < 1e-3
    # 250 tiny tensors, 15 us of compute, a free network: the host's issue costs set the step
    tiny = profile([[10] * 50] * 5, forward=1e-6, backward=1e-6, update=1e-6)
    slow = dataclasses.replace(tiny, device="cuda", model=row.model, batch_size=int(row.batch_size))
    assert simulate(slow, "wfbp", 2, FREE_NET).step_s == simulate(slow, "wfbp", 2, FREE_NET, overheads=ov).step_s
    assert simulate(slow, "wfbp", 2, FREE_NET).step_s > 100 * simulate(slow, "wfbp", 2, FREE_NET, overheads=NONE).step_s


def test_a_transfer_fit_that_fails_under_load_is_measured_again(monkeypatch) -> None:
    """`measure_transfer`: times that do not grow with the size (a loaded machine) fit no bandwidth;
    the measurement is taken again, up to `tries` times, and the last failure is raised."""
    import pandas as pd

    from distsgd.errors import ConfigError
    from distsgd.systems import benchmark
    from distsgd.systems.measure_costs import measure_transfer
    sizes = (2**18, 2**20)
    loaded = pd.DataFrame({"kind": "all_reduce", "nbytes": sizes, "p": 2, "measured_s": [2e-3, 1e-3]})
    quiet = pd.DataFrame({"kind": "all_reduce", "nbytes": sizes, "p": 2, "measured_s": [1e-4, 4e-4]})
    answers = [loaded, loaded, quiet]
    monkeypatch.setattr(benchmark, "real_collective_times", lambda p, s, reps: answers.pop(0))
    net = measure_transfer((2,), sizes)[2]
    assert not answers and net.bandwidth_Bps > 0
    answers[:] = [loaded, loaded]
    with pytest.raises(ConfigError, match="no bandwidth fits"):
        measure_transfer((2,), sizes, tries=2)

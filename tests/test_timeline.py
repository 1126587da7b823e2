"""The timeline simulator (`distsgd.systems.timeline`) against closed forms of the alpha-beta model that
`Comm` emulates: the step of each schedule where the overlap is known, p = 1, a free network,
monotonicity in bandwidth, the local-update algorithms' communication per step, the two-level
topology, the Chrome trace, and bad input."""
from __future__ import annotations

import json
import math

import pytest
import torch

from distsgd.algorithms.buckets import group_counts, plan_groups
from distsgd.algorithms.dear import fusion_counts
from distsgd.algorithms.tuner import GridTuner
from distsgd.comm.netmodel import NetModel, parse_net
from distsgd.errors import ConfigError
from distsgd.systems.layer_profile import Layer, Profile
from distsgd.systems.timeline import ALGORITHMS, Topology, simulate

NET = NetModel(bandwidth_Bps=1.25e9, latency_s=20e-6)          # 10GbE
FREE = NetModel(bandwidth_Bps=math.inf, latency_s=0.0)
MB = 2**20


def profile(sizes: list[list[int]], forward: float = 1e-3, backward: float = 2e-3,
            update: float = 1e-4) -> Profile:
    """Layers in backward order, each with tensors of `sizes[i]` float32 elements."""
    layers = [Layer(f"layer{i}", forward, backward, update, [f"layer{i}.t{j}" for j in range(len(s))],
                    [4 * n for n in s], list(s)) for i, s in enumerate(sizes)]
    return Profile("toy", 32, (3, 32, 32), "cpu", "measured", "test", layers)


TOY = profile([[300_000, 1000], [2_000_000], [50_000, 500], [1_200_000], [700_000, 20]])


def ar(nbytes: int, p: int, net: NetModel = NET) -> float:
    return net.cost("all_reduce", nbytes, p)


def test_group_counts_is_plan_groups_on_sizes() -> None:
    tensors = [torch.zeros(n, dtype=d) for n, d in [(10, torch.float32), (300, torch.float32),
                                                    (5, torch.float64), (7, torch.float64), (400, torch.float64)]]
    for cap in (0, 100, 1500, 1e9):
        groups = plan_groups(tensors, cap)
        counts = group_counts([t.numel() * t.element_size() for t in tensors], cap, [t.dtype for t in tensors])
        assert counts == [len(g) for g in groups]
    assert group_counts([50, 50, 100, 1, 300], 100) == [2, 1, 1, 1]      # up to the cap, inclusive


@pytest.mark.parametrize("bucket_mb", [0.5, 4.0, 25.0])
def test_no_overlap_is_compute_plus_every_bucket_allreduce(bucket_mb: float) -> None:
    p = 8
    pred = simulate(TOY, "no_overlap", p, NET, {"bucket_mb": bucket_mb})
    counts = group_counts(TOY.tensor_bytes, bucket_mb * MB)
    assert len(counts) > 1 or bucket_mb == 25.0
    buckets, start = [], 0
    for k in counts:
        buckets.append(sum(TOY.tensor_bytes[start:start + k]))
        start += k
    expected = TOY.compute_s + sum(ar(b, p) for b in buckets)
    assert pred.step_s == pytest.approx(expected, rel=1e-12)
    assert pred.compute_s == pytest.approx(TOY.compute_s)
    assert pred.exposed_comm_s == pytest.approx(expected - TOY.compute_s)


def test_wfbp_without_backward_time_is_no_overlap_per_tensor() -> None:
    flat = profile([[300_000, 1000], [2_000_000], [50_000]], backward=0.0)
    wfbp = simulate(flat, "wfbp", 4, NET)
    per_tensor = simulate(flat, "no_overlap", 4, NET, {"bucket_mb": 1e-9})
    assert wfbp.step_s == pytest.approx(per_tensor.step_s, rel=1e-12)
    assert wfbp.step_s == pytest.approx(flat.compute_s + sum(ar(b, 4) for b in flat.tensor_bytes))


def test_one_huge_bucket_overlaps_nothing() -> None:
    for algo in ("ssgd", "fusion"):
        pred = simulate(TOY, algo, 16, NET, {"bucket_mb": 1e4})
        assert pred.step_s == pytest.approx(TOY.compute_s + ar(TOY.grad_bytes, 16), rel=1e-12)


def test_overlap_hides_communication_behind_backward() -> None:
    wfbp, none = simulate(TOY, "wfbp", 8, NET), simulate(TOY, "no_overlap", 8, NET, {"bucket_mb": 1e-9})
    assert wfbp.step_s < none.step_s


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_one_rank_or_a_free_network_costs_nothing(algo: str) -> None:
    extra = TOY.update_s if algo == "ssd_sgd" else 0.0      # its local rule besides the server steps
    for p, net in ((1, NET), (8, FREE)):
        pred = simulate(TOY, algo, p, net)
        assert pred.step_s == pytest.approx(TOY.compute_s + extra, rel=1e-12), (p, net)
        assert pred.exposed_comm_s == pytest.approx(0.0, abs=1e-15)


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_step_is_monotone_in_bandwidth_and_latency(algo: str) -> None:
    steps = [simulate(TOY, algo, 8, NetModel(bw, 20e-6)).step_s for bw in (1e8, 1e9, 1e10, 1e11)]
    assert steps == sorted(steps, reverse=True) and steps[0] > steps[-1]
    lat = [simulate(TOY, algo, 8, NetModel(1e9, a)).step_s for a in (0.0, 1e-5, 1e-3)]
    assert lat == sorted(lat)


def test_dear_one_group_is_a_reduce_scatter_and_an_all_gather_in_a_row() -> None:
    even = profile([[4000, 400], [8000], [1600]])               # divisible by p: no padding
    dear = simulate(even, "dear", 4, NET, {"threshold_mb": 1e4})
    n = even.grad_bytes
    rs_ag = NET.cost("reduce_scatter", n, 4) + NET.cost("all_gather", n, 4)
    assert dear.step_s == pytest.approx(even.compute_s + rs_ag, rel=1e-12)
    assert rs_ag == pytest.approx(ar(n, 4))


def test_dear_all_gathers_overlap_the_next_forward() -> None:
    """Per-layer groups: the all-gathers of later layers hide behind the earlier layers' forward,
    so DeAR beats the same reduce-scatters followed by all-gathers without overlap."""
    long_forward = profile([[500_000]] * 6, forward=5e-3, backward=1e-4)
    dear = simulate(long_forward, "dear", 8, NET, {"threshold_mb": 0.0, "nearby_layers": 1})
    serial = simulate(long_forward, "dear", 8, NET, {"threshold_mb": 1e4})
    assert dear.step_s < serial.step_s
    s = dear.window[0] + 1
    gathers = [e for e in dear.events if e.name.startswith("all_gather") and e.step == s]
    forwards = [e for e in dear.events if e.name.startswith("forward") and e.step == s]
    assert any(g.start < f.end and f.start < g.end for g in gathers for f in forwards)


def test_dear_tune_runs_the_classs_own_tuner_on_the_simulated_clock() -> None:
    """DeAR with tune=true is its class driven: its own `GridTuner` times each window of
    tune_window = 5 steps on the simulated clock. Without compute, a step is its groups'
    reduce-scatters and all-gathers in a row, each group paying its latency, so fewer groups are
    faster. A window ends in the bp barrier right after the all-gathers of its last step are launched.
    Where the tuner then switches the threshold, it waits for them (the flush) before the next window
    starts, so each later trial times 5 reduce-scatter phases and 4 all-gather phases, (sum over groups
    of RS + 4/5 AG) per step; the first trial follows the warm-up window at the same threshold, waits
    for its all-gathers inside, and times RS + AG per step: the class's tuner charges its first
    candidate one all-gather phase more (a bias of the class, kept: the simulator runs it as it is).
    Ten layers of 9 MB (90 MB): of the paper's grid (1..100 MB, 10 log-spaced trials) only 100 MB
    makes one group, so the tuner must end there, and the steady state is then RS + AG of one group."""
    layer = 9 * MB // 4                                         # float32 elements, divisible by p
    comm_only = profile([[layer]] * 10, forward=0.0, backward=0.0, update=0.0)

    def groups(threshold_mb: float) -> list[int]:
        return fusion_counts([9 * MB] * 10, threshold_mb * MB, 1)

    def rs(k: int) -> float:
        return NET.cost("reduce_scatter", k * 9 * MB, 4)

    def ag(k: int) -> float:
        return NET.cost("all_gather", k * 9 * MB, 4)

    pred = simulate(comm_only, "dear", 4, NET, {"tune": True})
    assert [x for x, _ in pred.tuning] == GridTuner(1.0, 100.0, 10).candidates
    for trial, (threshold, step) in enumerate(pred.tuning):
        share = 1.0 if trial == 0 else 4 / 5
        assert step == pytest.approx(sum(rs(k) + share * ag(k) for k in groups(threshold)), rel=1e-12)
    assert pred.params["threshold_mb"] == pytest.approx(100.0)
    assert pred.step_s == pytest.approx(rs(10) + ag(10), rel=1e-12)
    assert pred.step_s < min(sum(rs(k) + ag(k) for k in groups(x)) for x, _ in pred.tuning if x < 100.0)
    fixed = simulate(comm_only, "dear", 4, NET, {"threshold_mb": pred.params["threshold_mb"]})
    assert pred.step_s == pytest.approx(fixed.step_s, rel=1e-12)    # the steady state at the tuner's choice


def test_dear_tuned_is_the_class_driven_through_its_tuning_steps() -> None:
    """The prediction's trials and choice are those of the class's tuner after its transient driven
    step by step in full ((trials + 1) x window steps), never shortened (`simulate.transient`)."""
    from distsgd.algorithms.dear import DeAR
    from distsgd.systems.timeline.simulator import stepper, tuner_of
    from distsgd.systems.timeline.streams import Rank
    from distsgd.systems.timeline.topology import Topology

    prof = profile([[100_000]] * 3 + [[3_000_000]] * 2)
    params = DeAR.resolve_params({"tune": True, "tune_min_mb": 1.0, "tune_max_mb": 30.0, "tune_trials": 4,
                                  "tune_window": 2})
    run, start, _ = stepper(prof, "dear", Rank(Topology.flat(NET), 4), params)
    run.steps(0, start)
    tuner = tuner_of(run)
    pred = simulate(prof, "dear", 4, NET, params)
    assert start == 10 and pred.tuning == tuner.history and len(pred.tuning) == 4
    assert pred.params["threshold_mb"] == run.algorithm.fusion_mb == tuner.best()


def test_ps_balanced_layout_costs_one_all_reduce() -> None:
    equal = profile([[1000]] * 4)
    ps = simulate(equal, "ps", 4, NET, {"bucket_mb": 1e4})
    assert ps.step_s == pytest.approx(equal.compute_s + ar(equal.grad_bytes, 4), rel=1e-12)
    lopsided = simulate(profile([[4000]]), "ps", 4, NET, {"bucket_mb": 1e4})   # one server holds all
    assert lopsided.exposed_comm_s == pytest.approx(NET.cost("reduce_scatter", 4 * 16000, 4)
                                                    + NET.cost("all_gather", 4 * 16000, 4))


def test_ddp_buckets_are_torchs_reducers() -> None:
    """torch's own reducer runs (on a fake process group): with bucket_cap_mb given, every bucket,
    the first included, closes once it reaches it, after the first iteration's one bucket."""
    tensors = profile([[int(0.6 * MB) // 4]] * 100, backward=0.0)     # 0.6 MiB each
    pred = simulate(tensors, "ddp", 4, NET)
    # a bucket closes once it reaches its limit: 42 x 0.6 >= 25 MiB
    counts = [42, 42, 16]
    first = [e.name for e in pred.events if e.stream != "compute" and e.step == 0]
    assert first == [f"all_reduce {100 * tensors.tensor_bytes[0]} B"]
    assert pred.step_s == pytest.approx(tensors.compute_s + sum(ar(k * tensors.tensor_bytes[0], 4)
                                                                  for k in counts), rel=1e-12)


def test_bytescheduler_partitions_each_gradient_once() -> None:
    pred = simulate(TOY, "bytescheduler", 8, NET, {"partition_mb": 0.5, "credit_mb": 1.0})
    links = [e for e in pred.events if e.stream != "compute"]
    assert max(int(e.name.split()[-2]) for e in links) <= 0.5 * MB
    sent = sum(int(e.name.split()[-2]) for e in links if e.step == pred.window[0])
    assert sent == TOY.grad_bytes                               # every gradient once per step


@pytest.mark.parametrize("period", [1, 2, 4, 8])
def test_local_sgd_communicates_one_model_every_period(period: int) -> None:
    local = simulate(TOY, "local_sgd", 8, NET, {"period": period})
    ssgd = simulate(TOY, "no_overlap", 8, NET, {"bucket_mb": 1e4})
    assert local.comm_s == pytest.approx(ssgd.comm_s / period, rel=1e-12)
    assert local.step_s == pytest.approx(TOY.compute_s + ar(TOY.grad_bytes, 8) / period, rel=1e-12)


def test_cocod_hides_the_average_unless_it_outlasts_the_period() -> None:
    period = 3
    fast = simulate(TOY, "cocod_sgd", 8, NET, {"period": period})
    assert fast.step_s == pytest.approx(TOY.compute_s, rel=1e-12)
    slow_net = NetModel(1e7, 1e-4)
    slow = simulate(TOY, "cocod_sgd", 8, slow_net, {"period": period})
    cost = ar(TOY.grad_bytes, 8, slow_net)
    assert cost > period * TOY.compute_s
    assert slow.step_s == pytest.approx(cost / period, rel=1e-9)   # the link is the bottleneck


def test_ssd_waits_for_its_pushes_once_per_period() -> None:
    slow_net = NetModel(1e7, 1e-4)
    period = 4
    pred = simulate(TOY, "ssd_sgd", 8, slow_net, {"period": period})
    push = ar(TOY.grad_bytes, 8, slow_net)
    assert pred.comm_s == pytest.approx(push, rel=1e-12)           # one push per step
    assert pred.step_s == pytest.approx(push, rel=1e-9)            # the link is saturated
    servers = [e for e in pred.events if e.name == "ssd_server" and pred.window[0] <= e.step < pred.window[1]]
    assert len(servers) == pred.window[1] - pred.window[0]                # every push applied once
    assert len({e.step for e in servers}) == (pred.window[1] - pred.window[0]) // period   # at the pulls
    assert all(e.end - e.start == pytest.approx(TOY.update_s) for e in servers)


def test_kavg_local_groups_use_the_intra_node_link() -> None:
    intra, inter = NetModel(1e11, 1e-6), NetModel(1e8, 5e-5)
    topo = Topology(4, intra, inter)
    pred = simulate(TOY, "kavg", 8, params={"period": 4, "local_groups": 2, "local_period": 1}, topology=topo)
    n = TOY.grad_bytes
    per_cycle = 3 * intra.cost("all_reduce", n, 4) + inter.cost("all_reduce", n, 8)
    assert pred.step_s == pytest.approx(TOY.compute_s + per_cycle / 4, rel=1e-12)
    links = {e.stream for e in pred.events if e.stream != "compute"}
    assert links == {"intra", "inter"}
    spanning = simulate(TOY, "kavg", 8, params={"period": 4, "local_groups": 2, "local_period": 1},
                        topology=Topology(2, intra, inter))           # groups of 4 span 2-GPU nodes
    per_cycle = 3 * inter.cost("all_reduce", n, 4) + inter.cost("all_reduce", n, 8)
    assert spanning.step_s == pytest.approx(TOY.compute_s + per_cycle / 4, rel=1e-12)


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_topology_reproduces_the_flat_formulas(algo: str) -> None:
    intra = NetModel(1e11, 1e-6)
    flat = simulate(TOY, algo, 8, NET)
    one_gpu_nodes = simulate(TOY, algo, 8, topology=Topology(1, intra, NET))
    assert one_gpu_nodes.step_s == flat.step_s
    one_node = simulate(TOY, algo, 8, topology=Topology(8, NET, intra))
    assert one_node.step_s == flat.step_s
    assert Topology(4, intra, NET).cost("inter", "all_reduce", 1000, 8) == NET.cost("all_reduce", 1000, 8)


def test_chrome_trace_loads_with_every_stream(tmp_path) -> None:
    pred = simulate(TOY, "dear", 4, "10GbE")
    path = pred.to_chrome_trace(tmp_path / "t" / "dear.json")
    trace = json.loads(path.read_text())
    spans = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(spans) == len(pred.events) > 0
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert names == {"compute", "inter"}
    assert all(e["dur"] > 0 and e["ts"] >= 0 for e in spans)


def test_string_networks_are_the_presets() -> None:
    assert simulate(TOY, "ssgd", 4, "10GbE").step_s == simulate(TOY, "ssgd", 4, parse_net("10GbE")).step_s


@pytest.mark.parametrize("kwargs, field", [
    ({"algo": "nope"}, "algo"),
    ({"nproc": 0}, "nproc"),
    ({"net": ""}, "net"),
    ({"net": "fast"}, "net"),
    ({"params": {"bucket": 1}}, "params"),
    ({"params": {"bucket_mb": -1}}, "params.bucket_mb"),
    ({"algo": "kavg", "params": {"local_groups": 3}}, "params.local_groups"),
    ({"algo": "ps", "params": {"servers": 9}}, "params.servers"),
    ({"algo": "dear", "params": {"tune": True, "tune_min_mb": 50.0, "tune_max_mb": 10.0}}, "params.tune_min_mb"),
    ({"algo": "cocod_sgd", "params": {"speeds": [1.0] * 8}}, "params.speeds"),
])
def test_bad_input_names_the_field(kwargs: dict, field: str) -> None:
    args = {"algo": "ssgd", "nproc": 8, "net": NET, **kwargs}
    with pytest.raises(ConfigError) as err:
        simulate(TOY, args.pop("algo"), args.pop("nproc"), args.pop("net"), args.pop("params", None))
    assert err.value.field == field


def test_bytescheduler_credit_limits_what_backward_overlaps() -> None:
    """Within backward a partition is launched only while the bytes in flight fit the credit
    (nothing retires before the barrier), so a larger credit overlaps more of backward."""
    small = simulate(TOY, "bytescheduler", 8, NET, {"partition_mb": 0.5, "credit_mb": 0.5})
    large = simulate(TOY, "bytescheduler", 8, NET, {"partition_mb": 0.5, "credit_mb": 1e4})
    assert large.step_s < small.step_s
    backward_end = max(e.end for e in small.events if e.step == small.window[0] and e.name.startswith("backward"))
    in_backward = [e for e in small.events if e.stream != "compute" and e.step == small.window[0]
                   and e.start < backward_end]
    assert len(in_backward) == 1                             # one 0.5 MiB partition fills the credit


def test_mgwfbp_beats_every_other_bucketing() -> None:
    """MG-WFBP's merge is optimal for the pipeline the simulator runs (the same gradient-ready
    times and all-reduce cost), so no fixed bucketing finishes earlier."""
    for p, net in ((8, NET), (64, NetModel(1e9, 5e-4))):
        mg = simulate(TOY, "mgwfbp", p, net).step_s
        others = [simulate(TOY, "wfbp", p, net).step_s]
        others += [simulate(TOY, "ssgd", p, net, {"bucket_mb": mb}).step_s for mb in (0.5, 2.0, 8.0, 1e4)]
        assert mg <= min(others) * (1 + 1e-12)
        assert mg < max(others)

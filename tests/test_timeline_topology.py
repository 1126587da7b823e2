"""The two-level topology (hierarchical all-reduce, PS server placement with a shared NIC) and the
scale effects (`timeline.effects`: Horovod's fusion cycle, compute contention, the per-message
cost) against closed forms, and issue #23's two done-when tests: with no latency and one node the
prediction is the closed form of the collective formulas; with the effects off (and the topology's
choices at their defaults) it is the original model, pinned as main's code computed it."""
from __future__ import annotations

import math
import random

import pytest

from distsgd import cli

from distsgd.comm.netmodel import NetModel, bytes_sent, hierarchical_all_reduce, parse_net
from distsgd.errors import ConfigError
from distsgd.systems.layer_profile import Layer, Profile
from distsgd.systems.timeline import ALGORITHMS, Effects, Overheads, Topology, simulate
from distsgd.systems.timeline.effects import MESSAGE_OVERHEADS, OFF, WHATIF, whatif
from distsgd.systems.timeline.streams import Rank, Slowdowns

from test_timeline import TOY

INTRA = NetModel(bandwidth_Bps=15.75e9, latency_s=0.0)       # PCIe3, no latency
INTER = NetModel(bandwidth_Bps=1.25e9, latency_s=0.0)        # 10GbE, no latency


def bucket_bytes(algo: str, p: int, topology: Topology) -> list[int]:
    """The all-reduce sizes `algo` issues in one step (its planner's buckets)."""
    pred = simulate(TOY, algo, p, topology=topology)
    first = pred.window[0]
    return [int(e.name.split()[-2]) for e in pred.events if e.stream != "compute" and e.step == first]


# ------------------------------------------------------------------ done-when (i): closed forms
@pytest.mark.parametrize("bucket_mb", [0.5, 25.0])
def test_no_latency_one_node_is_compute_plus_bandwidth_terms(bucket_mb: float) -> None:
    p = 8
    topo = Topology(p, INTRA, INTER)                                  # all ranks in one node
    pred = simulate(TOY, "no_overlap", p, params={"bucket_mb": bucket_mb}, topology=topo)
    sizes = bucket_bytes("no_overlap", p, topo)
    assert sum(sizes) == TOY.grad_bytes
    closed = TOY.compute_s + sum(2 * (p - 1) / p * n / INTRA.bandwidth_Bps for n in sizes)
    assert pred.step_s == pytest.approx(closed, rel=1e-12)


def test_no_latency_hierarchical_is_reduce_ring_broadcast() -> None:
    g, nodes = 4, 4
    topo = Topology(g, INTRA, INTER, hierarchical=True)
    pred = simulate(TOY, "no_overlap", g * nodes, topology=topo)
    per_byte = (2 * math.log2(g) / INTRA.bandwidth_Bps                # reduce + broadcast (trees)
                + 2 * (nodes - 1) / nodes / INTER.bandwidth_Bps)      # ring among the 4 leaders
    sizes = bucket_bytes("no_overlap", g * nodes, topo)
    assert pred.step_s == pytest.approx(TOY.compute_s + per_byte * sum(sizes), rel=1e-12)
    flat = simulate(TOY, "no_overlap", g * nodes, topology=Topology(g, INTRA, INTER))
    assert flat.step_s == pytest.approx(TOY.compute_s + 2 * 15 / 16 * sum(sizes) / INTER.bandwidth_Bps,
                                        rel=1e-12)


def test_hierarchical_changes_nothing_inside_one_node_or_for_one_gpu_nodes() -> None:
    for g, p in ((8, 8), (1, 8), (4, 4)):
        hier = Topology(g, INTRA, parse_net("10GbE"), hierarchical=True)
        plain = Topology(g, INTRA, parse_net("10GbE"))
        for algo in ("ssgd", "wfbp", "local_sgd"):
            assert simulate(TOY, algo, p, topology=hier).step_s == simulate(TOY, algo, p, topology=plain).step_s
    assert Topology(4, INTRA, INTER, hierarchical=True).cost("inter", "all_reduce", 1000, 8) == \
        hierarchical_all_reduce(INTRA, INTER, 1000, 4, 2)


def test_push_and_pull_cost_the_busier_nic_of_a_machine_and_a_server() -> None:
    n = 4096000
    one = INTER.latency_s + n / INTER.bandwidth_Bps
    for kind in ("push", "pull"):
        assert INTER.cost(kind, n, 1) == 0.0                                 # one machine: not distributed
        assert INTER.cost(kind, n, 8) == INTER.cost(kind, n, 8, servers=8) == pytest.approx(one)
        assert INTER.cost(kind, n, 8, servers=16) == pytest.approx(one)      # the machine's NIC, whatever S
        assert INTER.cost(kind, n, 8, servers=2) == pytest.approx(INTER.latency_s + 4 * n / INTER.bandwidth_Bps)
    assert bytes_sent("push", n, 8) == n and bytes_sent("pull", n, 8) == 0


def test_byteps_placement_of_ps_pipelines_the_partitions_of_a_bucket() -> None:
    """`ps` with machine_size 4 on machines of 4: each partition reduced inside the machine, pushed
    and pulled by its root (the simulated rank), broadcast inside it; the reduces of later partitions
    run on the intra-node link while the NIC pushes and pulls the earlier ones."""
    p, part = 16, 2**20
    free = profile_without_compute()                                     # 4 MiB + 3 MiB, no compute
    topo = Topology(4, INTRA, INTER)
    local, remote = INTRA.cost("reduce", part, 4), INTER.cost("push", part, 4)
    assert local < remote
    params = {"machine_size": 4, "partition_mb": 1.0, "bucket_mb": 512.0}
    pred = simulate(free, "ps", p, topology=topo, params=params)
    window = [e for e in pred.events if e.step == pred.window[0]]
    stages = {kind: [e for e in window if e.name.startswith(kind)] for kind in ("reduce", "push", "pull", "broadcast")}
    assert all(len(v) == 7 for v in stages.values())                     # 7 partitions of 1 MiB
    for e in stages["reduce"] + stages["broadcast"]:
        assert e.stream == "intra" and e.end - e.start == pytest.approx(local, rel=1e-12)
    for e in stages["push"] + stages["pull"]:
        assert e.stream == "inter" and e.end - e.start == pytest.approx(remote, rel=1e-12)
    for link in ("intra", "inter"):                                       # a link runs one stage at a time
        spans = sorted((e.start, e.end) for e in window if e.stream == link)
        assert all(a[1] <= b[0] + 1e-15 for a, b in zip(spans, spans[1:]))
    # the first reduce, the NIC's 14 stages back to back, the last broadcast (28 stages one after the
    # other without the pipeline)
    assert pred.step_s == pytest.approx(local + 14 * remote + local, rel=1e-9)
    inside = simulate(free, "ps", 4, topology=topo, params=params)
    assert not [e for e in inside.events if e.stream == "inter"]         # one machine: no servers


def test_groups_spanning_nodes_share_the_nic() -> None:
    topo = Topology(4, INTRA, INTER)
    assert topo.nic_sharers(16, 16) == 1                                  # the world's ring
    assert topo.nic_sharers(8, 16) == 1                                   # groups of whole nodes
    assert topo.nic_sharers(6, 12) == 2                                   # node 1 holds ranks of groups 0 and 1
    free = profile_without_compute()
    pred = simulate(free, "kavg", 12, topology=topo,
                    params={"period": 2, "local_period": 1, "local_groups": 2})
    local = [e for e in pred.events if e.step == pred.window[0]]
    assert len(local) == 1 and local[0].end - local[0].start == pytest.approx(
        NetModel(INTER.bandwidth_Bps / 2, 0.0).cost("all_reduce", free.grad_bytes, 6), rel=1e-12)


def profile_without_compute() -> Profile:
    layers = [Layer(f"l{i}", 0.0, 0.0, 0.0, [f"l{i}.w"], [4 * n], [n]) for i, n in enumerate([2**20, 3 * 2**18])]
    return Profile("free", 8, (1,), "cpu", "measured", "test", layers)


# ------------------------------------------------------------------ done-when (ii): the original model
# Step times by main at b3b67f2 (before topology and effects), TOY profile, 10GbE flat and 4 GPUs
# per node on PCIe3 + 10GbE: `simulate(TOY, algo, p, topology=...).step_s`; the first five
# algorithms (simulated since the simulator drives their own classes, issue 32) by main at that change.
MAIN_STEPS = {
    ('compressed_sgd', 'flat', 4): 0.044065193600000024,
    ('compressed_sgd', 'flat', 16): 0.07645678400000003,
    ('compressed_sgd', '4pn', 4): 0.017764729650793662,
    ('compressed_sgd', '4pn', 16): 0.07645678400000003,
    ('double_squeeze', 'flat', 4): 0.017705776000000006,
    ('double_squeeze', 'flat', 16): 0.023737948800000006,
    ('double_squeeze', '4pn', 4): 0.015672712380952393,
    ('double_squeeze', '4pn', 16): 0.023737948800000006,
    ('liec_sgd', 'flat', 4): 0.021043061499999453,
    ('liec_sgd', 'flat', 16): 0.030292944899998737,
    ('liec_sgd', '4pn', 4): 0.015937502896824912,
    ('liec_sgd', '4pn', 16): 0.030292944899998737,
    ('stl_sgd', 'flat', 4): 0.025763648000000007,
    ('stl_sgd', 'flat', 16): 0.02855456,
    ('stl_sgd', '4pn', 4): 0.01631281333333335,
    ('stl_sgd', '4pn', 16): 0.02855456,
    ('vrl_sgd', 'flat', 4): 0.020631824000000014,
    ('vrl_sgd', 'flat', 16): 0.02202728000000001,
    ('vrl_sgd', '4pn', 4): 0.015906406666666678,
    ('vrl_sgd', '4pn', 16): 0.02202728000000001,
    ('bytescheduler', 'flat', 4): 0.030203513600000082,
    ('bytescheduler', 'flat', 16): 0.04290911999999997,
    ('bytescheduler', '4pn', 4): 0.016489545904761902,
    ('bytescheduler', '4pn', 16): 0.04290911999999997,
    ('cocod_sgd', 'flat', 4): 0.01550000000000001,
    ('cocod_sgd', 'flat', 16): 0.01550000000000001,
    ('cocod_sgd', '4pn', 4): 0.01550000000000001,
    ('cocod_sgd', '4pn', 16): 0.01550000000000001,
    ('ddp', 'flat', 4): 0.03602729600000002,           # torch's reducer: one bucket (< 25 MB), as ssgd
    ('ddp', 'flat', 16): 0.04160912000000002,
    ('ddp', '4pn', 4): 0.017125626666666678,
    ('ddp', '4pn', 16): 0.04160912000000002,
    ('dear', 'flat', 4): 0.036027296000000035,
    ('dear', 'flat', 16): 0.041609119999999986,
    ('dear', '4pn', 4): 0.017125626666666692,
    ('dear', '4pn', 16): 0.041609119999999986,
    ('fusion', 'flat', 4): 0.03602729600000002,
    ('fusion', 'flat', 16): 0.04160912000000002,
    ('fusion', '4pn', 4): 0.017125626666666678,
    ('fusion', '4pn', 16): 0.04160912000000002,
    ('kavg', 'flat', 4): 0.020631824000000014,
    ('kavg', 'flat', 16): 0.02202728000000001,
    ('kavg', '4pn', 4): 0.015906406666666678,
    ('kavg', '4pn', 16): 0.02202728000000001,
    ('local_sgd', 'flat', 4): 0.020631824000000014,
    ('local_sgd', 'flat', 16): 0.02202728000000001,
    ('local_sgd', '4pn', 4): 0.015906406666666678,
    ('local_sgd', '4pn', 16): 0.02202728000000001,
    ('mgwfbp', 'flat', 4): 0.02870249600000001,
    ('mgwfbp', 'flat', 16): 0.03480912000000001,
    ('mgwfbp', '4pn', 4): 0.0157726742857143,
    ('mgwfbp', '4pn', 16): 0.03480912000000001,
    ('no_overlap', 'flat', 4): 0.03602729600000002,
    ('no_overlap', 'flat', 16): 0.04160912000000002,
    ('no_overlap', '4pn', 4): 0.017125626666666678,
    ('no_overlap', '4pn', 16): 0.04160912000000002,
    ('ps', 'flat', 4): 0.05402000000000001,
    ('ps', 'flat', 16): 0.2081,
    ('ps', '4pn', 4): 0.01855361904761906,
    ('ps', '4pn', 16): 0.2081,
    ('ssd_sgd', 'flat', 4): 0.020527296000000007,
    ('ssd_sgd', 'flat', 16): 0.026109119999999986,
    ('ssd_sgd', '4pn', 4): 0.016000000000000014,
    ('ssd_sgd', '4pn', 16): 0.026109119999999986,
    ('ssgd', 'flat', 4): 0.03602729600000002,
    ('ssgd', 'flat', 16): 0.04160912000000002,
    ('ssgd', '4pn', 4): 0.017125626666666678,
    ('ssgd', '4pn', 16): 0.04160912000000002,
    ('wfbp', 'flat', 4): 0.029182496,
    ('wfbp', 'flat', 16): 0.03780912,
    ('wfbp', '4pn', 4): 0.0157786742857143,
    ('wfbp', '4pn', 16): 0.03780912,
}


@pytest.mark.parametrize("effects", [None, OFF])
def test_effects_off_is_the_original_model(effects: Effects | None) -> None:
    ten, pcie = parse_net("10GbE"), parse_net("PCIe3")
    topos = {"flat": Topology.flat(ten), "4pn": Topology(4, pcie, ten)}
    assert {algo for algo, _, _ in MAIN_STEPS} == set(ALGORITHMS)
    for (algo, topo, p), step in MAIN_STEPS.items():
        assert simulate(TOY, algo, p, topology=topos[topo], effects=effects).step_s == pytest.approx(step, rel=1e-12), \
            (algo, topo, p)


# ------------------------------------------------------------------ the effects
def test_contention_slows_compute_only_while_a_collective_is_in_flight() -> None:
    rank = Rank(Topology.flat(INTER), 2, effects=Effects(contention=0.5))
    ready = rank.issue("all_reduce", 10**6, "x")                       # in flight over [0, ready)
    rank.compute("short", ready / 3)                                     # all inside: 1.5 x
    assert rank.t == pytest.approx(ready / 2)
    rank.compute("long", ready)                                          # ready/3 of work until `ready`
    assert rank.t == pytest.approx(ready + (ready - ready / 3))
    assert rank.busy == pytest.approx(rank.t)
    off = Rank(Topology.flat(INTER), 2)
    off.issue("all_reduce", 10**6, "x")
    off.compute("short", ready / 3)
    assert off.t == pytest.approx(ready / 3)


def finish_by_the_rule(intervals: list[tuple[float, float, float]], t: float, work: float) -> float:
    """The rate rule of `streams` stated directly: between consecutive boundaries (t and every
    interval end point after it) a task runs at 1 / the largest slow-down of the intervals covering
    that stretch."""
    bounds = sorted({t, *(x for s, e, _ in intervals for x in (s, e) if x > t and e > t)})
    for a, b in zip(bounds, bounds[1:]):
        slow = max((k for s, e, k in intervals if s <= a < e), default=1.0)
        if work * slow <= b - a:
            return a + work * slow
        work -= (b - a) / slow
    return bounds[-1] + work


def test_the_slowdowns_sweep_is_the_rate_rule() -> None:
    """`Slowdowns` (the sweep `Rank.compute` prices a task with) gives, to the bit, what the rule
    gives on intervals added between the tasks: begun before the clock, overlapping, nested,
    touching, empty, two kinds of slow-down."""
    rng = random.Random(7)
    sweep, intervals, t = Slowdowns(), [], 0.0
    for _ in range(300):
        for _ in range(rng.randrange(4)):
            start = t + rng.choice([-0.5, 0.0, 0.25, 1.0, 2.0]) * rng.random()
            end = start + rng.choice([0.0, rng.random(), 3 * rng.random()])
            slow = rng.choice([1.189, 2.0])
            sweep.add(start, end, slow)
            intervals.append((start, end, slow))
        work = rng.choice([0.01, 0.3, 2.0]) * rng.random()
        end = finish_by_the_rule(intervals, t, work)
        assert sweep.finish(t, work) == end
        t = end + rng.choice([0.0, 0.1]) * rng.random()
        intervals = [iv for iv in intervals if iv[1] > t]                   # ended ones count no more


def test_contention_does_not_touch_a_schedule_without_overlap() -> None:
    slow = simulate(TOY, "no_overlap", 8, NetModel(1.25e9, 20e-6), effects=Effects(contention=0.5))
    assert slow.step_s == simulate(TOY, "no_overlap", 8, NetModel(1.25e9, 20e-6)).step_s
    overlapped = simulate(TOY, "wfbp", 8, NetModel(1.25e9, 20e-6), effects=Effects(contention=0.5))
    assert overlapped.compute_s > TOY.compute_s


def binary_profile() -> Profile:
    """Times that are exact binary fractions, so the cycle ticks fall exactly on gradient times."""
    f, b = 2.0**-10, 2.0**-9
    layers = [Layer(f"l{i}", f, b, 0.0, [f"l{i}.a", f"l{i}.b"], [4 * 1000, 4 * 3000], [1000, 3000])
              for i in range(4)]
    return Profile("bin", 8, (1,), "cpu", "measured", "test", layers)


def test_fusion_cycle_fuses_the_gradients_of_one_tick() -> None:
    """Horovod's fusion cycle, `ssgd`'s cycle_ms and cycle_mb, read from the simulated clock."""
    prof = binary_profile()
    net = NetModel(1e12, 0.0)                                            # transfers ~free: ticks decide
    def allreduces(params: dict) -> list[str]:
        pred = simulate(prof, "wfbp", 4, net, params)
        return [e.name for e in pred.events if e.stream != "compute" and e.step == pred.window[0]]
    tick_ms = 1e3 * 2.0**-10
    assert len(allreduces({})) == 8                                       # per tensor
    assert len(allreduces({"cycle_ms": tick_ms})) == 4                    # per layer: one tick each
    assert len(allreduces({"cycle_ms": tick_ms, "cycle_mb": 4000 / 2**20})) == 8
    whole = simulate(prof, "wfbp", 4, net, {"cycle_ms": 1e3})
    fused = [e for e in whole.events if e.stream != "compute" and e.step == whole.window[0]]
    assert len(fused) == 1 and fused[0].start == pytest.approx(math.ceil(fused[0].start))  # at its tick


def test_whatif_switches_each_effect_off_alone() -> None:
    assert whatif() == (WHATIF, MESSAGE_OVERHEADS)
    assert whatif(contention=False)[0] == Effects(0.0)
    assert whatif(message_latency=False) == (WHATIF, None)
    assert MESSAGE_OVERHEADS == Overheads(issue_s=8.4e-6)


def test_cli_flags_switch_effects_and_topology(tmp_path, capsys) -> None:
    import pandas as pd
    layers = [Layer(f"layer{i}", 1e-3, 2e-3, 1e-4, [f"layer{i}.weight"], [4 * n], [n])
              for i, n in enumerate([1_200_000, 8_000_000, 200_000])]          # > 25 MB: DDP overlaps a bucket
    path = Profile("toy", 32, (3, 32, 32), "cpu", "measured", "test", layers).to_csv(tmp_path / "toy_b32.csv")
    base = ["simulate", "--profile", str(path), "--algos", "wfbp,ddp,ps", "--nprocs", "16", "--gpus-per-node", "4",
            "--intra", "PCIe3", "--net", "10GbE"]
    steps = {}
    for name, extra in {"all": [], "cycle": ["--set", "cycle_ms=1"], "noct": ["--no-contention"],
                        "noml": ["--no-message-latency"], "hier": ["--hierarchical"],
                        "byteps": ["--set", "machine_size=4"], "sep": ["--set", "machine_size=4", "--set", "servers=1"],
                        "none": ["--no-contention", "--no-message-latency"]}.items():
        out = tmp_path / f"{name}.csv"
        assert cli.main([*base, *extra, "--csv", str(out)]) == 0
        steps[name] = pd.read_csv(out).set_index("algo")
    compute = {name: df.compute_s for name, df in steps.items()}
    steps = {name: df.step_s for name, df in steps.items()}
    for name in ("cycle", "hier"):
        assert steps[name]["wfbp"] != steps["all"]["wfbp"], name
    assert compute["noct"]["ddp"] < compute["all"]["ddp"]  # the backward that overlaps a bucket
    assert compute["noml"]["ddp"] < compute["all"]["ddp"]  # the issue cost is compute time
    assert steps["sep"]["ps"] != steps["byteps"]["ps"] != steps["all"]["ps"]
    topo = Topology(4, parse_net("PCIe3"), parse_net("10GbE"))
    prof = Profile.from_csv(path)
    assert steps["none"]["wfbp"] == pytest.approx(simulate(prof, "wfbp", 16, topology=topo).step_s, rel=1e-12)
    assert cli.main([*base, "--set", "servers=-1", "--csv", str(tmp_path / "x.csv")]) == 2
    assert "servers" in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, field", [
    ({"hierarchical": 1}, "hierarchical"),
])
def test_bad_topology_names_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        Topology(4, INTRA, INTER, **kwargs)
    assert err.value.field == field


def test_bad_effects_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        Effects(contention=-0.1)
    assert err.value.field == "effects.contention"

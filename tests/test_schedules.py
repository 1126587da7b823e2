"""The survey's schedules (no_overlap, wfbp, fusion, mgwfbp, bytescheduler, ps) and DeAR are
lossless: on 3 ranks (not a power of two) they reproduce S-SGD's parameters after 10 steps of
SGD with momentum and weight decay, and send one all-reduce's bytes per step (PS: its documented
bytes). MG-WFBP's merge matches a brute-force optimum on synthetic layer profiles."""
from __future__ import annotations

import itertools
import random

import pytest
import torch

from distsgd.algorithms.ps import server_layout
from distsgd.algorithms.mgwfbp import mgwfbp_greedy, mgwfbp_merge, pipeline_finish
from gloo import run_ranks

WORLD, STEPS = 3, 10
CASES = [
    ("ssgd", {"bucket_mb": 0.01}),
    ("no_overlap", {"bucket_mb": 0.01}),
    ("wfbp", {}),
    ("fusion", {"bucket_mb": 0.01}),
    ("mgwfbp", {"profile_steps": 3}),
    ("bytescheduler", {"partition_mb": 0.005, "credit_mb": 0.01}),
    ("ps", {"bucket_mb": 0.01}),
    ("ps", {"bucket_mb": 0.01, "partition_mb": 0.002, "servers": 2}),
    ("ps", {"bucket_mb": 0.01, "partition_mb": 0.002, "machine_size": 2}),     # BytePS's: machines [0, 1], [2]
    ("dear", {"threshold_mb": 0.01}),
    ("dear", {"threshold_mb": 0.0, "nearby_layers": 1}),
    ("dear", {"tune": True, "tune_min_mb": 0.001, "tune_max_mb": 1.0, "tune_trials": 2, "tune_window": 3}),
]


def _train(rank, world, cases, net):
    """Every case from the same initial model and batches, through distsgd's loop order."""
    from distsgd.algorithms import create
    from distsgd.systems.benchmark import synthetic_batches
    from distsgd.comm import Comm, parse_net
    from distsgd.training.config import Config
    from distsgd.models import build_model
    from distsgd.training.step import train_steps

    Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    out = []
    for algo, params in cases:
        torch.manual_seed(0)
        model = build_model("transformer", (3, 8, 8), 10, dim=32, depth=2, heads=2, tokens=8)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-3)
        comm = Comm(rank, world, torch.device("cpu"), parse_net(net))
        a = create(algo, params)
        run = a.setup(model, opt, comm, Config(algo=algo, params=params, nproc=world, momentum=0.9).facts())
        train_steps(a, opt, run, torch.nn.functional.cross_entropy, synthetic_batches((3, 8, 8), 8, seed=rank), 0, STEPS)
        before = [p.detach().numpy().copy() for p in model.parameters()]
        a.finalize()
        comm.assert_drained()
        sizes = [e.nbytes for e in comm.ledger.entries]
        out.append(dict(params=[p.detach().numpy().copy() for p in model.parameters()], before=before,
                        sent=comm.ledger.bytes_sent, sizes=sizes, metrics=a.metrics()))
    return out


@pytest.fixture(scope="module")
def results():
    return run_ranks(_train, WORLD, CASES, "1Gbit,10us", timeout=240)


def _n_params() -> int:
    from distsgd.models import build_model
    torch.manual_seed(0)
    return sum(p.numel() for p in build_model("transformer", (3, 8, 8), 10, dim=32, depth=2, heads=2,
                                              tokens=8).parameters())


@pytest.mark.multiproc
@pytest.mark.parametrize("case", range(1, len(CASES)), ids=[f"{a}{p}" for a, p in CASES[1:]])
def test_schedule_reproduces_ssgd_parameters_on_every_rank(results, case):
    ref = [torch.from_numpy(a) for a in results[0][0]["params"]]
    for rank in range(WORLD):
        got = [torch.from_numpy(a) for a in results[rank][case]["params"]]
        for a, b in zip(ref, got):
            torch.testing.assert_close(b, a, atol=1e-5, rtol=1e-4)
    # and S-SGD itself moved the model (the comparison is not trivially true)
    torch.manual_seed(0)
    from distsgd.models import build_model
    init = list(build_model("transformer", (3, 8, 8), 10, dim=32, depth=2, heads=2, tokens=8).parameters())
    assert max((a - b).abs().max().item() for a, b in zip(ref, init)) > 1e-3


@pytest.mark.multiproc
@pytest.mark.parametrize("case", [i for i, (a, _) in enumerate(CASES) if a != "ps"],
                         ids=[f"{a}{p}" for a, p in CASES if a != "ps"])
def test_bytes_equal_one_allreduce_per_step(results, case):
    d = _n_params()
    one_allreduce = round(2 * (WORLD - 1) / WORLD * 4 * d)
    for rank in range(WORLD):
        # DeAR pads each fusion group to a multiple of p: at most p-1 elements per group
        assert results[rank][case]["sent"] == pytest.approx(STEPS * one_allreduce, rel=2e-3)


@pytest.mark.multiproc
def test_ps_bytes_follow_the_server_layout(results):
    """PS sends 2(p-1)*m per bucket (m = busiest server's load): more than an all-reduce with
    whole tensors on servers, the same (up to padding) when partitioned over all servers."""
    d = _n_params()
    one_allreduce = STEPS * round(2 * (WORLD - 1) / WORLD * 4 * d)
    whole = [i for i, (a, p) in enumerate(CASES) if a == "ps" and not p.get("partition_mb")][0]
    for rank in range(WORLD):
        o = results[rank][whole]
        # every push (reduce-scatter) and pull (all-gather) is over p slots of m elements
        m_bytes = [n // WORLD for n in o["sizes"]]
        assert o["sent"] == pytest.approx((WORLD - 1) * sum(m_bytes), rel=1e-6)
        assert o["sent"] > one_allreduce


@pytest.mark.multiproc
def test_byteps_placement_sends_each_partition_once_per_stage(results):
    """On BytePS's placement (machines [0, 1] and [2]) the ledger counts what each rank sends by the
    model (`netmodel.bytes_sent`): rank 0's reduce and broadcast within its machine of 2, half the
    partition each; rank 2, alone on its machine, pushes each partition whole (a pull sends none);
    rank 1, the root of [0, 1], both. Per step: the model's bytes, up to a partition's padding."""
    d = 4 * _n_params()
    byteps = [i for i, (a, p) in enumerate(CASES) if a == "ps" and p.get("machine_size")][0]
    sent = [results[rank][byteps]["sent"] for rank in range(WORLD)]
    assert sent[0] == pytest.approx(STEPS * d, rel=2e-3) and sent[2] == pytest.approx(STEPS * d, rel=2e-3)
    assert sent[1] == pytest.approx(sent[0] + sent[2], rel=1e-6)


def _slots_by_element(sizes: list[int], servers: int, piece: int, buffer: torch.Tensor) -> torch.Tensor:
    """The PS slot layout as first built (the reference for the copies): pieces to the
    least-loaded server in bucket order, one slot position per element, applied by index_copy_."""
    pieces = [min(piece or n, n - i) for n in sizes for i in range(0, n, piece or n)]
    load, owner = [0] * servers, []
    for n in pieces:
        j = min(range(servers), key=load.__getitem__)
        owner.append((j, load[j]))
        load[j] += n
    m = max(load)
    position = [j * m + start + k for n, (j, start) in zip(pieces, owner) for k in range(n)]
    return torch.zeros(servers * m).index_copy_(0, torch.tensor(position), buffer)


@pytest.mark.parametrize("sizes, servers, piece", [([100, 10, 10], 3, 0), ([100, 10, 10], 3, 20),
                                                   ([7, 33, 5, 64, 1], 4, 8), ([50, 50, 3], 1, 0),
                                                   ([13, 29, 6], 2, 5)])
def test_ps_server_layout_copies_give_the_per_element_slots(sizes, servers, piece):
    buffer = torch.arange(1.0, sum(sizes) + 1)
    copies, m = server_layout(sizes, servers, piece)
    slots = torch.zeros(servers * m)
    for src, dst, n in copies:
        slots.narrow(0, dst, n).copy_(buffer.narrow(0, src, n))
    assert torch.equal(slots, _slots_by_element(sizes, servers, piece, buffer))
    back = torch.zeros_like(buffer)                                 # the pull's inverse copies
    for src, dst, n in copies:
        back.narrow(0, src, n).copy_(slots.narrow(0, dst, n))
    assert torch.equal(back, buffer)


def test_ps_server_layout_balances_partitioned_pieces():
    assert server_layout([100, 10, 10], servers=3, piece=0)[1] == 100
    copies, m = server_layout([100, 10, 10], servers=3, piece=20)
    assert m == 40 and sum(n for _, _, n in copies) == 120               # balanced: no padding
    assert any(src != dst for src, dst, _ in copies)                     # pieces moved to other servers
    assert server_layout([50, 50, 3], servers=1, piece=0)[0] == [(0, 0, 103)]   # contiguous: one copy


@pytest.mark.multiproc
def test_dear_flush_applies_the_pending_update(results):
    """After 10 steps DeAR (and ByteScheduler) still hold the last update; finalize() applies it,
    after which every rank equals S-SGD (test above)."""
    for case, (algo, _) in enumerate(CASES):
        if algo in ("dear", "bytescheduler"):
            for rank in range(WORLD):
                o = results[rank][case]
                gap = max(abs(a - b).max() for a, b in zip(o["params"], o["before"]))
                assert gap > 1e-4, (algo, rank)


@pytest.mark.multiproc
def test_dear_tuner_ran_and_kept_a_threshold_within_bounds(results):
    tuned = results[0][len(CASES) - 1]["metrics"]
    assert 0.001 <= tuned["threshold_mb"] <= 1.0
    assert len({r[len(CASES) - 1]["metrics"]["threshold_mb"] for r in results}) == 1  # ranks agree


def _brute_force(ready, sizes, cost):
    n = len(ready)
    best = None
    for cuts in itertools.product([0, 1], repeat=n - 1):
        groups, k = [], 1
        for c in cuts:
            if c:
                groups.append(k)
                k = 1
            else:
                k += 1
        groups.append(k)
        t = pipeline_finish(ready, sizes, groups, cost)
        if best is None or t < best[0] - 1e-12:
            best = (t, groups)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_mgwfbp_merge_matches_brute_force(seed):
    rng = random.Random(seed)
    n = rng.randint(3, 10)
    compute = [rng.uniform(0.1, 2.0) for _ in range(n)]
    ready = list(itertools.accumulate(compute))
    sizes = [rng.choice([1e3, 1e5, 1e6, 4e6]) for _ in range(n)]
    alpha, beta = rng.choice([0.05, 0.5, 2.0]), rng.choice([1e-7, 1e-6, 5e-6])
    cost = lambda b: alpha + beta * b                                      # noqa: E731
    groups = mgwfbp_merge(ready, sizes, cost)
    assert sum(groups) == n and all(k >= 1 for k in groups)
    assert pipeline_finish(ready, sizes, groups, cost) == pytest.approx(_brute_force(ready, sizes, cost)[0])


def test_mgwfbp_merge_extremes():
    ready = [1.0, 2.0, 3.0, 4.0]
    # latency-free, compute-bound: one all-reduce per layer overlaps best (WFBP)
    assert mgwfbp_merge(ready, [1.0] * 4, lambda b: 0.1 * b) == [1, 1, 1, 1]
    # latency-dominated: merge everything
    assert mgwfbp_merge(ready, [1.0] * 4, lambda b: 10.0 + 1e-3 * b) == [4]


def _freed_after_case(rank, world):
    """Whether time_case leaves its model collectable, for each hooking schedule."""
    import gc
    import weakref

    import distsgd.models as models
    from distsgd.systems import benchmark as bs
    from distsgd.comm import Comm

    Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    built = []
    original = models.build_model

    def tracking(*args, **kwargs):
        model = original(*args, **kwargs)
        built.append(weakref.ref(model))
        return model

    models.build_model = tracking
    try:
        alive = {}
        for case in [*bs.DEFAULT_CASES, {"algo": "compute", "label": "compute"}]:
            bs.time_case(bs.Case("mlp", case["algo"], case.get("params", {}), "10Gbit,1us"), rank, world,
                         batch_size=4, steps=1, warmup=1)
            gc.collect()
            alive[case["label"]] = built[-1]() is not None
        return alive
    finally:
        models.build_model = original


def test_a_timed_case_frees_its_model():
    """A benchmark builds one model per case: nothing of a finished case (the gradient hooks of the
    schedule, DDP's reducer, the Comm and its ledger) may keep it (and its buffers) alive, or
    ResNet-18's benchmark grows by ~180 MB per case until killed (12 GB on one rank in issue #17).
    Every schedule of the benchmark, on an emulated network."""
    for alive in run_ranks(_freed_after_case, 2):
        assert not any(alive.values()), alive


def test_benchmark_feeds_bert_token_ids_at_a_capped_sequence_length():
    """BERT-Base in the schedule benchmark: random token ids below the vocabulary, sequence length
    128 unless `Caps.seq_len` bounds it (the dry run's), the whole 110 M parameters either way."""
    from distsgd.systems import benchmark as bs
    from distsgd.training.caps import Caps

    assert bs.input_shape("bert_base", Caps()) == (128,)
    assert bs.input_shape("bert_base", Caps(seq_len=8)) == (8,)
    assert bs.input_shape("mlp", Caps(seq_len=8)) == bs.INPUT_SHAPES["mlp"]
    assert bs.input_shape("resnet50", Caps(image_side=16)) == (3, 16, 16)       # the dry run's
    assert bs.input_shape("resnet50", Caps(seq_len=8)) == (3, 224, 224)
    x, y = bs.synthetic_batches((8,), 4, seed=0, vocab=bs.VOCAB["bert_base"])(0)
    assert x.shape == (4, 8) and x.dtype == torch.int64 and 0 <= x.min() and x.max() < 30522
    assert len(x.unique()) > 16 and y.shape == (4,)
    assert bs.synthetic_batches((3, 8, 8), 4, seed=0)(0)[0].dtype == torch.float32
    assert bs.grad_bytes("bert_base") == 4 * (109_480_704 + 768 * 10 + 10)


@pytest.mark.parametrize("model, shape, depth", [("mlp", None, 0), ("transformer", None, 0),
                                                 ("resnet50", (3, 16, 16), 1), ("bert_base", (8,), 1)])
def test_a_case_model_is_the_model_seed_0_draws_and_leaves_the_generator_as_drawing_does(model, shape, depth):
    """Every case of a benchmark starts from the weights `torch.manual_seed(0)` then `bench_model`
    gives; `fresh_bench_model` copies them instead of drawing again, twice in a row the same."""
    from distsgd.systems import benchmark as bs

    shape = shape or bs.INPUT_SHAPES[model]
    torch.manual_seed(0)
    drawn = bs.bench_model(model, shape, depth).state_dict()
    after_draw = torch.rand(4)
    for _ in range(2):
        copied = bs.fresh_bench_model(model, shape, depth).state_dict()
        assert torch.equal(torch.rand(4), after_draw)
        assert drawn.keys() == copied.keys()
        assert all(torch.equal(drawn[k], copied[k]) for k in drawn)


def test_mgwfbp_greedy_is_the_authors_rule_case_by_case():
    """`mgwfbp_greedy` (HKBU-HPML/ddl-benchmarks' `_generate_groups_mgwfbp`), one rule at a time, on
    tensors of 10^6 elements (4 MB) unless said otherwise, cost 1 s + 1e-6 s/B (alpha = 1 s):
    - the next gradient ready before this all-reduce can start (queued behind another): merged;
    - the next ready long (more than alpha) after this all-reduce started but before it ends: kept
      apart;
    - the same, ready less than alpha after the start: merged (waiting beats another start-up);
    - the next ready after this all-reduce ends: kept apart, unless under 8192 elements."""
    big = [4e6] * 2
    n = [10**6] * 2
    cost = lambda b: 1.0 + 1e-6 * b                                          # noqa: E731
    assert mgwfbp_greedy([0.0, 0.5], big, n, cost) == [2]     # ready 0.5 s after the start: < alpha
    assert mgwfbp_greedy([0.0, 2.0], big, n, cost) == [1, 1]  # started 2 s before: 2 > alpha
    assert mgwfbp_greedy([0.0, 10.0], big, n, cost) == [1, 1]  # ready after the end (5 s)
    assert mgwfbp_greedy([0.0, 10.0], [400.0, 4e6], [100, 10**6], cost) == [2]   # < 8192 elements
    # tensor 1 (ready at 2 s, 2 s after tensor 0's all-reduce started: apart) waits for tensor 0's
    # all-reduce until 5 s; tensor 2 is ready at 3 s, before that start: merged with tensor 1
    assert mgwfbp_greedy([0.0, 2.0, 3.0], [4e6] * 3, [10**6] * 3, cost) == [1, 2]


def test_mgwfbp_greedy_never_beats_the_optimum_and_agrees_on_the_extremes():
    """The optimum (`mgwfbp_merge`) is at least as good as the greedy plan on random pipelines; at
    the extremes both give WFBP (no start-up cost, compute-bound) or one group (start-up dominates)."""
    for seed in range(20):
        rng = random.Random(seed)
        k = rng.randint(3, 12)
        ready = list(itertools.accumulate(rng.uniform(0.1, 2.0) for _ in range(k)))
        numel = [rng.choice([100, 10**4, 10**5, 10**6]) for _ in range(k)]
        sizes = [4.0 * e for e in numel]
        alpha, beta = rng.choice([0.05, 0.5, 2.0]), rng.choice([1e-7, 1e-6, 5e-6])
        cost = lambda b: alpha + beta * b                                  # noqa: E731
        greedy = mgwfbp_greedy(ready, sizes, numel, cost)
        assert sum(greedy) == k and all(g >= 1 for g in greedy)
        assert (pipeline_finish(ready, sizes, mgwfbp_merge(ready, sizes, cost), cost)
                <= pipeline_finish(ready, sizes, greedy, cost) + 1e-12)
    ready, numel = [1.0, 2.0, 3.0, 4.0], [10**5] * 4
    assert mgwfbp_greedy(ready, [4e5] * 4, numel, lambda b: 1e-7 * b) == [1, 1, 1, 1]
    assert mgwfbp_greedy(ready, [4e5] * 4, numel, lambda b: 10.0 + 1e-7 * b) == [4]


def test_the_survey_names_are_ssgd_rule_with_parameters_fixed() -> None:
    """fusion, no_overlap and wfbp: `registry.preset`s of ssgd (one rule, one class): the same
    buckets and overlap as ssgd given those values, no parameter for what they fix."""
    from distsgd.algorithms import REGISTRY, create
    from distsgd.algorithms.registry import preset
    from distsgd.algorithms.ssgd import SSGD
    from distsgd.errors import ConfigError

    model = torch.nn.Sequential(torch.nn.Linear(4, 300), torch.nn.Linear(300, 2))
    plans = {}
    for name, same in [("fusion", {"bucket_mb": 0.01}), ("no_overlap", {"bucket_mb": 0.01, "overlap": False}),
                       ("wfbp", {"bucket_mb": 0.0})]:
        assert issubclass(REGISTRY[name], SSGD) and REGISTRY[name].__dict__.keys().isdisjoint({"plan", "build"})
        given = {"bucket_mb": 0.01} if "bucket_mb" in {p.name for p in REGISTRY[name].params} else {}
        a, b = create(name, given), create("ssgd", same)
        a.backward_order = b.backward_order = list(reversed(list(model.parameters())))
        plans[name] = [len(bucket.params) for bucket in a.plan()]
        assert plans[name] == [len(bucket.params) for bucket in b.plan()] and a.overlap == b.overlap
    assert plans["wfbp"] == [1, 1, 1, 1] and plans["fusion"] != plans["wfbp"]
    with pytest.raises(ConfigError):
        create("wfbp", {"overlap": False})                  # fixed: not a parameter of the preset
    with pytest.raises(ValueError, match="no parameter"):
        preset("ssgd_typo", SSGD, "", overlapp=False)

"""The schedule benchmark: iteration time of gradient-reduction schedules over models, p, networks.

`python -m distsgd bench` without --validate-emulation (the emulation check lives in distsgd.systems.emulation_check).

Iteration time and throughput of gradient-reduction schedules (``no_overlap``, ``wfbp``,
``fusion``, ``mgwfbp``, ``bytescheduler``, ``ps``, ``dear``, and PyTorch's ``ddp``) over models of
different compute/communication intensity, worker counts and emulated networks. One group of p
worker processes runs every case of that p (no process start-up per case), and the cases are
interleaved and repeated in a different order each round, so that load from other work on the
machine hits every schedule alike; `medians` reduces the repeats.

Networks are scaled to this machine's compute speed by a stated rule (`scaled_net`): first the
compute time C of one iteration (forward + backward + update, no communication, all p ranks busy)
is measured, then the bandwidth is set so that the bandwidth term of the all-reduce of the whole
gradient, 2(p-1)/p * n/B, is `comm_ratio` x C, and the latency so that one all-reduce's latency
term, 2(p-1) * alpha, is `latency_ratio` x C. "10GbE-like": comm_ratio 1 (communication as long
as computation) and latency_ratio 0.015 (10 GbE's ~25 us per hop over the 62 hops of a ring
all-reduce on the survey's 32 GPUs, against a ~100 ms GPU iteration); "IB-like": 10x the
bandwidth and a tenth of the latency (the papers' 10 Gb/s Ethernet vs 100 Gb/s InfiniBand).
"real" (`REAL`) is no emulation: the backend's own interconnect (NVLink, InfiniBand, ... with NCCL).

Rows are appended to the CSV by rank 0 as they are measured (`append_row`), so an interrupted
benchmark keeps what it measured; each names the hosts its group ran on (`hosts`). `backend="nccl"`
runs every rank on its own GPU (cuda:LOCAL_RANK) and synchronises the device before reading the
clock. A group of p ranks starts as a run's do (`launcher` "auto", `training.launch.on_ranks`): local
processes on one machine, one srun step across the nodes of a SLURM job of several; `launcher="env"`
runs the benchmark on the ranks torchrun/srun started (one group: the job's WORLD_SIZE), like
`train --launcher env`.
"""
from __future__ import annotations

import functools
import os
import random
import resource
import socket
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, NamedTuple

import pandas as pd
import torch
import torch.nn.functional as F

from ..training.caps import Caps
from .cases import DEFAULT_CASES
from ..errors import ConfigError
from ..training.cluster import adopt_slurm_env
from ..training.allocation import Allocation
from ..training.launch import detect_launcher, on_ranks, on_this_rank
from ..models.transformer import BERT_VOCAB
from ..training.step import train_steps

INPUT_SHAPES = {"mlp": (3, 32, 32), "resnet18": (3, 16, 16), "transformer": (3, 32, 32),
                "resnet50": (3, 224, 224), "bert_base": (128,)}
MODEL_OPTIONS: dict[str, dict[str, Any]] = {
    "mlp": {"hidden": [512, 512]},              # few large tensors (6 MiB, 1 MiB)
    "resnet18": {},                             # 62 small tensors, compute-heavy
    "transformer": {"dim": 128, "depth": 4},    # 16 tokens; many mid-size tensors
    "resnet50": {},                             # ImageNet's 224x224 (DeAR, the survey): for GPUs; 161 tensors
    "bert_base": {},                            # 110 M parameters: one 94 MB embedding, 9 MB blocks
}
# Models whose inputs are token ids (random ids below the vocabulary, as random images for the
# others): BERT-Base at sequence length 128 (BERT pre-training's first phase; DeAR and the survey
# time BERT on synthetic inputs). The length is bounded by `Caps.seq_len` (the dry run's).
VOCAB = {"bert_base": BERT_VOCAB}
NUM_CLASSES = 10
NETWORKS = {"10GbE-like": (1.0, 0.015), "IB-like": (0.1, 0.0015)}   # (comm_ratio, latency_ratio)
REAL = "real"                   # a network name: no emulation, the backend's own interconnect
BACKENDS = ("gloo", "nccl")
LAUNCHERS = ("auto", "spawn", "srun", "env")


def synthetic_batches(shape: tuple[int, ...], batch_size: int, seed: int, vocab: int | None = None,
                      device: torch.device = torch.device("cpu")) -> Callable[[int], tuple[torch.Tensor, torch.Tensor]]:
    """Deterministic random batches per (seed, step), drawn on `device` by its own generator: the
    compute, not the data, matters here. Inputs are normal noise, or token ids uniform in
    [0, vocab) if `vocab` is given. (Drawn on the CPU and copied, a ResNet-50 batch of 32 at
    224x224 took 18 ms of a 38 ms step on an H200's rank: the benchmark times the steps with it.)"""
    def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = torch.Generator(device=device).manual_seed(seed * 1_000_003 + step)
        x = (torch.randn(batch_size, *shape, generator=g, device=device) if vocab is None
             else torch.randint(0, vocab, (batch_size, *shape), generator=g, device=device))
        return x, torch.randint(0, NUM_CLASSES, (batch_size,), generator=g, device=device)
    return batch


def _synchronize(device: torch.device) -> None:
    """Wait for the work queued on a GPU, so that the clock reads what it took (no-op on CPU)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def peak_rss_mb() -> float:
    """This process's peak resident memory so far, MiB (getrusage; Linux reports KiB, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10


def input_shape(model: str, caps: Caps) -> tuple[int, ...]:
    """The input shape of benchmark model `model`: a token model's sequence length and an image
    model's side within `caps`."""
    shape = INPUT_SHAPES[model]
    if model in VOCAB:
        return (caps.bound("seq_len", shape[0]),)
    return (shape[0], *(caps.bound("image_side", side) for side in shape[1:]))


def bench_model(model: str, shape: tuple[int, ...], depth: int = 0) -> torch.nn.Module:
    """Benchmark model `model` (`MODEL_OPTIONS`) for inputs of `shape`, each run of repeated blocks
    cut to its first `depth` (0: whole; `Caps.depth`, the dry run's). A run of repeated blocks is a
    `torch.nn.Sequential` of two or more modules of one class that have modules themselves: BERT's
    encoder layers, a ResNet stage's blocks (the first, which changes the shape, stays). A cut
    model is built on the meta device, cut, then allocated and drawn by each layer's
    `reset_parameters` (other parameters N(0, 0.02)), so the whole model never exists (BERT-Base's
    110 M parameters took 3-4 s per case to draw); a dry run measures nothing."""
    from ..models import build_model
    if not depth:
        return build_model(model, shape, NUM_CLASSES, **MODEL_OPTIONS[model])
    with torch.device("meta"):
        m = build_model(model, shape, NUM_CLASSES, **MODEL_OPTIONS[model])
    for module in list(m.modules()):
        blocks = list(module.children()) if isinstance(module, torch.nn.Sequential) else []
        if len(blocks) > 1 and len({type(b) for b in blocks}) == 1 and list(blocks[0].children()):
            del module[depth:]
    if torch.get_default_device().type == "meta":            # asked for on the meta device: sizes only
        return m
    m.to_empty(device=torch.get_default_device())
    with torch.no_grad():
        for module in m.modules():
            if hasattr(module, "reset_parameters"):
                module.reset_parameters()
            else:
                for p in module.parameters(recurse=False):
                    p.normal_(0, 0.02)
    return m


@functools.lru_cache(maxsize=2)          # the benchmarks time at most two models at a time
def _initial_weights(model: str, shape: tuple[int, ...], depth: int) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """The weights `bench_model` draws after ``torch.manual_seed(0)``, and the CPU generator's
    state after drawing them: drawn once per process, then copied into every case's model."""
    torch.manual_seed(0)
    weights = bench_model(model, shape, depth).state_dict()
    return weights, torch.get_rng_state()


def fresh_bench_model(model: str, shape: tuple[int, ...], depth: int = 0) -> torch.nn.Module:
    """`bench_model` as ``torch.manual_seed(0)`` followed by `bench_model` gives it, with the
    random generators where that leaves them, without drawing the weights again: a case builds
    its model on the meta device and copies the weights drawn for the first case of the process
    (BERT-Base's draw cost each case and rank 0.5 s of CPU, its first 3 s)."""
    weights, rng = _initial_weights(model, shape, depth)
    with torch.device("meta"):
        m = bench_model(model, shape, depth)
    m.to_empty(device="cpu")
    m.load_state_dict(weights)
    torch.manual_seed(0)                    # every device's generator as manual_seed leaves it,
    torch.set_rng_state(rng)                # the CPU's as the draw left it
    return m


@dataclass
class Case:
    """One timed configuration: a model, an algorithm with its parameters, a network."""

    model: str
    algo: str                               # a registered algorithm, or "compute" (no communication)
    params: dict[str, Any] = field(default_factory=dict)
    net: str = ""
    label: str = ""
    net_name: str = ""


class Timed(NamedTuple):
    """A timed case: seconds per iteration of the timed window until the device is done (`step_s`,
    the slowest rank's mean), and the host's seconds to issue the last warm-up step, started on an
    idle device (`host_s`, the slowest rank's; NaN without warm-up; on the CPU, that step's time): a
    GPU's launch queue lets the host run only about one step ahead, so a window's host time says
    little."""

    step_s: float
    host_s: float


def time_case(case: Case, rank: int, world: int, batch_size: int, steps: int, warmup: int,
              shape: tuple[int, ...] | None = None, device: torch.device = torch.device("cpu"),
              depth: int = 0) -> Timed:
    """Seconds per iteration of `case` on this group of ranks (`Timed`), on inputs of `shape`
    (default: the model's `INPUT_SHAPES`), on `device` (on a GPU the clock is read after
    `torch.cuda.synchronize`, and before it for the host's share), the model's repeated blocks cut
    to `depth` (`bench_model`)."""
    from ..algorithms import Algorithm, create
    from ..training.config import Config
    from ..comm import Comm, parse_net

    shape = shape or INPUT_SHAPES[case.model]
    model = fresh_bench_model(case.model, tuple(shape), depth).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    comm = Comm(rank, world, device, parse_net(case.net))
    algo = Algorithm() if case.algo == "compute" else create(case.algo, case.params)
    net = algo.setup(model, optimizer, comm, Config(nproc=world, batch_size=batch_size, momentum=0.9).facts())
    batches = synthetic_batches(shape, batch_size, seed=rank, vocab=VOCAB.get(case.model), device=device)
    net.train()
    try:
        train_steps(algo, optimizer, net, F.cross_entropy, batches, 0, max(warmup - 1, 0))
        _synchronize(device)
        t0 = time.perf_counter()
        train_steps(algo, optimizer, net, F.cross_entropy, batches, warmup - 1, min(warmup, 1))
        host = time.perf_counter() - t0 if warmup else float("nan")
        _synchronize(device)
        comm.barrier()
        t0 = time.perf_counter()
        train_steps(algo, optimizer, net, F.cross_entropy, batches, warmup, steps)
        algo.finalize()
        _synchronize(device)
        elapsed = torch.tensor([(time.perf_counter() - t0) / steps, host], dtype=torch.float64, device=device)
        comm.assert_drained()
        return Timed(*comm.reduce_uncounted(elapsed, op="max").tolist())
    finally:
        algo.close()                        # the next case's model must not add to this one's


def grad_tensor_bytes(model: str, depth: int = 0) -> list[int]:
    """Bytes of each gradient tensor of a benchmark model (its repeated blocks cut to `depth`,
    `bench_model`), in parameter order (built on the meta device: no memory, no init): its tensor
    statistics before anything is timed."""
    with torch.device("meta"):
        m = bench_model(model, INPUT_SHAPES[model], depth)
    return [p.numel() * p.element_size() for p in m.parameters() if p.requires_grad]


def grad_bytes(model: str, depth: int = 0) -> int:
    """Bytes of the gradient of a benchmark model (its repeated blocks cut to `depth`)."""
    return sum(grad_tensor_bytes(model, depth))


def scaled_net(compute_s: float, nbytes: int, p: int, comm_ratio: float, latency_ratio: float) -> str:
    """The network on which the all-reduce of `nbytes` over p ranks (NetModel.cost('all_reduce')
    = 2(p-1)*alpha + 2(p-1)/p*n/B) has a bandwidth term of comm_ratio x compute_s and a latency
    term of latency_ratio x compute_s, as a --net string ('<Mbit>Mbit,<us>us')."""
    bandwidth = 2 * (p - 1) / p * nbytes / (comm_ratio * compute_s)          # bytes / s
    alpha = latency_ratio * compute_s / (2 * (p - 1))
    return f"{bandwidth * 8 / 1e6:.4g}Mbit,{alpha * 1e6:.4g}us"


# ---------------------------------------------------------------------- the benchmark
HOST_BYTES = 64                 # a host name's bytes in `group_hosts` (longer names are cut)


def group_hosts(comm: Any) -> list[str]:
    """Every rank's host name (`socket.gethostname`, its first `HOST_BYTES` bytes), in rank order:
    each rank writes its name's bytes into its row of a world x `HOST_BYTES` table of zeros and the
    tables are summed (`Comm.reduce_uncounted`, not in the ledger)."""
    name = socket.gethostname().encode()[:HOST_BYTES]
    table = torch.zeros(comm.world_size, HOST_BYTES, dtype=torch.int32, device=comm.device)
    table[comm.rank, :len(name)] = torch.tensor(list(name), dtype=torch.int32, device=comm.device)
    rows = comm.reduce_uncounted(table).cpu().tolist()
    return [bytes(c for c in row if c).decode(errors="replace") for row in rows]


def append_row(path: Path, row: dict[str, Any]) -> None:
    """Append `row` to the CSV `path`, with the header first when the file is new or empty."""
    write_header = not path.exists() or path.stat().st_size == 0
    pd.DataFrame([row]).to_csv(path, mode="a", header=write_header, index=False)


def compute_models(models: list[str], net_reference: str | None) -> list[str]:
    """The models whose compute a benchmark group measures first, in the same order on every rank:
    `models`, then `net_reference` where it is another (a set's order would differ between ranks
    started as separate processes, as an srun step starts them, so the ranks would time different
    models at once and scale the networks to different computes)."""
    return list(dict.fromkeys([*models, net_reference or models[0]]))


def _bench_group(rank: int, world: int, models: list[str], shapes: dict[str, tuple[int, ...]],
                 cases: list[dict], networks: dict[str, tuple[float, float] | None], batch_size: int,
                 steps: int, warmup: int, repeats: int, net_reference: str | None, out: Path,
                 backend: str, depth: int) -> None:
    """On one group of ranks: measure compute per model (the median of two compute-only timings),
    scale the networks to it (or to the model `net_reference`, then the same
    network for every model; `REAL`'s value None: no emulation), then time every case and the
    compute-only baseline, `repeats` rounds, each in a different (seeded, rank-independent) order.
    Rank 0 appends each row to `out` as soon as it is measured. The models' repeated blocks are
    cut to `depth` (`bench_model`; 0: whole)."""
    from ..comm import Comm

    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    bookkeeping = Comm(rank, world, device)
    hosts = " ".join(sorted(set(group_hosts(bookkeeping))))

    def timed(case: Case, extra_warmup: int = 0) -> Timed:
        return time_case(case, rank, world, batch_size, steps, warmup + extra_warmup, shapes[case.model], device,
                         depth)

    compute = {m: statistics.median(timed(Case(m, "compute")).step_s for _ in range(2))
               for m in compute_models(models, net_reference)}
    nets: dict[tuple[str, str], str] = {}
    for model in models:
        ref = net_reference or model
        for name, ratios in networks.items():
            nets[model, name] = "" if ratios is None else scaled_net(compute[ref], grad_bytes(ref, depth), world, *ratios)
    todo = [Case(model, c["algo"], c.get("params", {}), nets[model, name], c.get("label", c["algo"]), name)
            for model in models for name in networks for c in cases]
    todo += [Case(model, "compute", {}, "", "compute", "none") for model in models]
    for r in range(repeats):
        order = list(todo)
        random.Random(r).shuffle(order)
        for case in order:
            extra = next((c.get("warmup", 0) for c in cases
                          if c["algo"] == case.algo and c.get("params", {}) == case.params), 0)
            t, host = timed(case, extra)
            rss = bookkeeping.reduce_uncounted(torch.tensor(peak_rss_mb(), dtype=torch.float64, device=device),
                                               op="max").item()
            if rank == 0:
                append_row(out, dict(
                    model=case.model, label=case.label, algo=case.algo, params=str(case.params), nproc=world,
                    net_name=case.net_name, net=case.net, repeat=r, step_s=t, host_s=host,
                    grad_bytes=grad_bytes(case.model, depth),
                    throughput=world * batch_size / t, batch_size=batch_size, backend=backend, peak_rss_mb=rss,
                    hosts=hosts))


def check_bench_inputs(models: list[str], cases: list[dict], networks: dict, backend: str, launcher: str,
                       nprocs: list[int]) -> None:
    """Refuse what the ranks would fail on, before any process starts (`ConfigError`)."""
    from ..algorithms import REGISTRY

    for model in models:
        if model not in INPUT_SHAPES:
            raise ConfigError("models", model, sorted(INPUT_SHAPES))
    for case in cases:
        if case["algo"] == "compute":           # the no-communication baseline, as a case
            continue
        if case["algo"] not in REGISTRY:
            raise ConfigError("algo", case["algo"], ["compute", *sorted(REGISTRY)])
        REGISTRY[case["algo"]].resolve_params(case.get("params", {}))
    for name, ratios in networks.items():
        if ratios is not None and len(ratios) != 2:
            raise ConfigError("networks", name, "(comm_ratio, latency_ratio) pairs, or None for no emulation")
    if backend not in BACKENDS:
        raise ConfigError("backend", backend, BACKENDS)
    if launcher not in LAUNCHERS:
        raise ConfigError("launcher", launcher, LAUNCHERS)
    if backend == "nccl" and launcher == "spawn":
        gpus = torch.cuda.device_count()
        if gpus == 0:
            raise ConfigError("backend", backend, BACKENDS, "nccl needs one CUDA GPU per rank; this host has none")
        if max(nprocs) > gpus:
            raise ConfigError("nprocs", max(nprocs), f"at most {gpus} (GPUs on this host, one per rank)")
    if backend == "nccl" and launcher == "srun":
        allocation = Allocation.detect()
        if max(nprocs) > allocation.gpus:
            raise ConfigError("nprocs", max(nprocs), f"at most {allocation.gpus}",
                              f"{max(nprocs)} ranks of one GPU each do not fit {allocation.describe()}")


def bench_schedules(models: Iterable[str] = ("mlp", "transformer"), cases: Iterable[dict] | None = None,
                    nprocs: Iterable[int] = (2, 4), networks: dict[str, tuple[float, float] | None] | None = None,
                    batch_size: int = 16, steps: int = 8, warmup: int = 3, repeats: int = 3,
                    net_reference: str | None = None, out: str | Path | None = None,
                    caps: Caps | None = None, backend: str = "gloo", launcher: str = "auto") -> pd.DataFrame:
    """Time every case on every model, p and network. A case is a dict: algo (a registered
    algorithm, or "compute": no communication), params, label, and
    optionally warmup (extra untimed steps, e.g. for DeAR's online tuner). A network is
    (comm_ratio, latency_ratio) scaled by `scaled_net`, or None: no emulation (`REAL`). Writes to
    the CSV `out` (a temporary file if None) one tidy row per measurement as it is measured: model,
    label, algo, params, nproc, net_name, net, repeat, step_s, host_s (`Timed`), grad_bytes, throughput (samples/s
    over all ranks), batch_size, backend, peak_rss_mb (the largest peak resident memory of any rank
    so far, MiB), hosts (the group's hosts, `group_hosts`); an interrupted benchmark leaves these. Once every case ran, the file is rewritten
    with compute_s (median compute-only step time of that model and p) and efficiency
    (compute_s / step_s) added, and that is what is returned. Rows labelled 'compute' are the
    no-communication baseline (net_name 'none').

    `backend` "nccl": one GPU per rank (cuda:LOCAL_RANK). `launcher` "spawn": one group of p local
    ranks per p in `nprocs`; "srun": one srun step of p ranks per p across this SLURM job's nodes
    (`training.launch.on_ranks`; `out` must then be on a file system rank 0's node sees, as the
    results root is); "env": this process is a rank started by torchrun/srun and the group is the
    job's (`nprocs` is ignored), rank 0 writes the CSV and returns the rows, the other ranks an empty
    DataFrame; "auto" (default): as a run's (`training.launch.detect_launcher`), so srun in a job of
    several nodes and local ranks on one machine. A group has no deadline (it may run for hours): a dead peer fails a collective
    within its timeout, and the launcher stops the group when a rank fails. `caps` (default: `Caps.from_env()`, which the full-profile dry run sets) bound
    p and the batch as they bound a run's (`distsgd.training.caps`), the sequence length of the text
    encoders' inputs, the CNNs' image side and the models' repeated blocks (`bench_model`)."""
    caps = Caps.from_env() if caps is None else caps
    cases = list(cases or DEFAULT_CASES)
    networks = dict(NETWORKS if networks is None else networks)
    models = list(models)
    nprocs = sorted({caps.bound("nproc", p) for p in nprocs})
    launcher = detect_launcher(launcher) if launcher in LAUNCHERS else launcher
    check_bench_inputs(models, cases, networks, backend, launcher, nprocs)
    batch_size = caps.bound("batch_size", batch_size)
    shapes = {m: input_shape(m, caps) for m in {*models, *([net_reference] if net_reference else [])}}
    with tempfile.TemporaryDirectory(prefix="distsgd-bench-") as tmp:
        path = Path(tmp) / "bench.csv" if out is None else Path(out).absolute()
        args = (models, shapes, cases, networks, batch_size, steps, warmup, repeats, net_reference, path, backend,
                caps.depth)
        if launcher == "env":
            adopt_slurm_env(backend)
            if int(os.environ.get("RANK", "0")) != 0:
                on_this_rank(_bench_group, *args, join=backend)
                return pd.DataFrame()
            _start_csv(path)
            on_this_rank(_bench_group, *args, join=backend)
        else:
            _start_csv(path)
            for p in nprocs:
                on_ranks(_bench_group, p, *args, join=backend, timeout=None,   # a group runs for hours
                         launcher=launcher)
        df = with_efficiency(pd.read_csv(path, keep_default_na=False))
        df.to_csv(path, index=False)
        return df


def with_efficiency(df: pd.DataFrame) -> pd.DataFrame:
    """`df` with compute_s (the median step time of the rows labelled 'compute' of the same model
    and p) and efficiency (compute_s / step_s)."""
    base = df[df.algo == "compute"].groupby(["model", "nproc"]).step_s.median()
    df["compute_s"] = [base[(m, p)] for m, p in zip(df.model, df.nproc)]
    df["efficiency"] = df.compute_s / df.step_s
    return df


def _start_csv(path: Path) -> None:
    """A new benchmark's CSV: its directory made, an earlier benchmark's file removed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.unlink(missing_ok=True)


def medians(df: pd.DataFrame) -> pd.DataFrame:
    """Median step time and throughput per (model, nproc, net_name, label) over the repeats."""
    keys = ["model", "nproc", "net_name", "label"]
    return (df.groupby(keys)[["step_s", "throughput", "efficiency", "compute_s", "grad_bytes"]]
            .median().reset_index())


def timing_noise(df: pd.DataFrame) -> float:
    """Largest coefficient of variation (std/mean over the repeats) of the compute-only step time
    of any model and p: how much load from other work moved the clock during the benchmark."""
    c = df[df.label == "compute"].groupby(["model", "nproc"]).step_s
    return float((c.std() / c.mean()).max())


def _fidelity(rank: int, world: int, net: str, sizes: list[int], reps: int, backend: str = "gloo",
              stat: Callable[[list[float]], float] = statistics.median) -> list[dict]:
    from ..comm import Comm, parse_net
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    comm = Comm(rank, world, device, parse_net(net) if net else None)
    rows = []
    for kind in ("all_reduce", "reduce_scatter", "all_gather"):
        for nbytes in sizes:
            n = nbytes // 4 // world * world
            full, shard = torch.zeros(n, device=device), torch.zeros(n // world, device=device)
            times = []
            for _ in range(reps):
                comm.barrier()
                t0 = time.perf_counter()
                if kind == "all_reduce":
                    comm.all_reduce(full)
                elif kind == "reduce_scatter":
                    comm.reduce_scatter(shard, full)
                else:
                    comm.all_gather(full, shard)
                sync()                                   # NCCL returns before the GPU is done
                times.append(time.perf_counter() - t0)
            t = comm.reduce_uncounted(torch.tensor(stat(times), dtype=torch.float64, device=device), op="max")
            rows.append(dict(kind=kind, nbytes=4 * n, p=world, measured_s=t.item(),
                             modeled_s=comm.net.cost(kind, 4 * n, world) if comm.net else float("nan")))
    return rows


def emulation_fidelity(p: int = 2, net: str = "200Mbit,50us", sizes: Iterable[int] = (2**16, 2**20, 2**22),
                       reps: int = 3) -> pd.DataFrame:
    """Measured (the fastest of `reps`, slowest rank) vs modeled time of each collective and message
    size under the in-process emulation (`Comm` with `net`): the emulation waits out the modeled
    time, so its fastest repetition is its own fidelity, and a busy machine only slows the others
    (a median of 3 beside other work measured 1.71x); the real-network check is
    `python -m distsgd bench --validate-emulation`."""
    df = pd.DataFrame(on_ranks(_fidelity, p, net, list(sizes), reps, "gloo", min)[0])
    df["ratio"] = df.measured_s / df.modeled_s
    return df


def real_collective_times(p: int, sizes: Iterable[int], reps: int = 5, backend: str = "gloo") -> pd.DataFrame:
    """Un-emulated time of all_reduce, reduce_scatter and all_gather on this machine's `backend`
    (median over `reps`, slowest rank) per message size: the floor that network emulation can
    only add to. `backend` "gloo": p local CPU ranks; "nccl": p local ranks, one GPU each (the
    benchmark's placement), timed up to `torch.cuda.synchronize`. Columns: kind, nbytes, p,
    measured_s (and backend)."""
    if backend not in BACKENDS:
        raise ConfigError("backend", backend, BACKENDS)
    rows = on_ranks(_fidelity, p, "", sorted(set(sizes)), reps, backend, join=backend)[0]
    return pd.DataFrame(rows).drop(columns="modeled_s").assign(backend=backend)


def emulation_headroom(df: pd.DataFrame, reps: int = 5, margin: float = 2.0, backend: str = "gloo") -> pd.DataFrame:
    """Whether each emulated network of a `bench_schedules` result can be emulated on this machine.

    The emulation delays a collective to its modeled time but cannot make it faster than the
    backend's real one, which also takes CPU time from computation. Rule: a (model, nproc,
    network) is `emulable` when the real all-reduce of the model's whole gradient takes at most
    1/`margin` of its modeled time on that network, timed on the benchmark's `backend`
    (`real_collective_times`). Columns: model, nproc, net_name, real_s, modeled_s, emulable."""
    from ..comm import parse_net
    nets = df[~df.net_name.isin(["none", REAL])].groupby(["model", "nproc", "net_name"]).agg(
        net=("net", "first"), grad_bytes=("grad_bytes", "first")).reset_index()
    rows = []
    for p, group in nets.groupby("nproc"):
        real = real_collective_times(int(p), group.grad_bytes.astype(int), reps, backend)
        real = real[real.kind == "all_reduce"].set_index("nbytes").measured_s
        for r in group.itertuples():
            n = int(r.grad_bytes) // 4 // int(p) * int(p) * 4          # as timed by _fidelity
            modeled = parse_net(r.net).cost("all_reduce", n, int(p))
            rows.append(dict(model=r.model, nproc=p, net_name=r.net_name, real_s=real[n],
                             modeled_s=modeled, emulable=real[n] * margin <= modeled))
    return pd.DataFrame(rows)


def timing_problem(noise: float, noise_max: float, headroom: pd.DataFrame, decoupling: float = 0.0,
                   max_decoupling: float = float("inf")) -> str | None:
    """Why a timing claim cannot be decided on this machine, from the checks made before the claim's
    own measurement (a claim's `precheck`), or None. The first that fails: the compute clock's largest
    coefficient of variation `noise` (`timing_noise`) above `noise_max`; a network in `headroom`'s
    rows (`emulation_headroom`, cut to the claim's models and networks) not emulable; the backend's
    (reduce-scatter + all-gather) / all-reduce time `decoupling` above `max_decoupling` (for a claim
    on a schedule that decouples the two, as DeAR)."""
    if noise > noise_max:
        return (f"compute-time CV {noise:.0%} > {noise_max:.0%}: the clock was not steady (other work, or a shared "
                "virtual CPU)")
    for h in headroom.itertuples():
        if not h.emulable:
            return (f"{h.net_name} not emulable here for {h.model}: real all-reduce {1e3 * h.real_s:.1f} ms vs "
                    f"modeled {1e3 * h.modeled_s:.1f} ms")
    if decoupling > max_decoupling:
        return (f"this backend's reduce-scatter + all-gather take {decoupling:.1f}x its all-reduce "
                f"(> {max_decoupling}; NCCL's ring: ~1)")
    return None


# ---------------------------------------------------------------------- the DDP hook's overlap
def _time_hook(rank: int, model_name: str, pending: bool, net: str, ratio: float, batch_size: int,
               steps: int, warmup: int) -> float:
    """Seconds per iteration (the slowest rank's mean) of DDP with the top-k compression hook
    (`compress.ddp_hook`, 2 MB buckets) returning its pending future, or waiting for it inside."""
    from torch.nn.parallel import DistributedDataParallel

    from ..comm import Comm, parse_net
    from ..compress import TopK
    from ..compress.ddp_hook import register

    shape = INPUT_SHAPES[model_name]
    torch.manual_seed(0)
    model = DistributedDataParallel(bench_model(model_name, shape), bucket_cap_mb=2.0)
    comm = Comm.on_group(torch.device("cpu"), parse_net(net))
    register(model, TopK(ratio), comm=comm, pending=pending)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = synthetic_batches(shape, batch_size, seed=rank)

    def step(t: int) -> None:
        x, y = batches(t)
        optimizer.zero_grad()
        F.cross_entropy(model(x), y).backward()
        optimizer.step()

    for t in range(warmup):
        step(t)
    comm.barrier()
    t0 = time.perf_counter()
    for t in range(warmup, warmup + steps):
        step(t)
    elapsed = torch.tensor((time.perf_counter() - t0) / steps, dtype=torch.float64)
    return comm.reduce_uncounted(elapsed, op="max").item()


def _hook_overlap_group(rank: int, world: int, model: str, ratio: float, comm_ratio: float,
                        latency_ratio: float, batch_size: int, steps: int, warmup: int,
                        repeats: int) -> list[dict]:
    compute = statistics.median(time_case(Case(model, "compute"), rank, world, batch_size, steps, warmup).step_s
                                for _ in range(2))
    # the network on which the all-gather of the top-k payloads, (p-1) x its bytes per rank, takes
    # comm_ratio x compute: the all-reduce of p/2 x the payload has that bandwidth term
    from ..compress import TopK
    payload = TopK(ratio).wire_bytes(grad_bytes(model) // 4)      # all buckets' payloads, to within k's rounding
    net = scaled_net(compute, world * payload // 2, world, comm_ratio, latency_ratio)
    rows = []
    for r in range(repeats):
        for pending in ((True, False) if r % 2 == 0 else (False, True)):
            t = _time_hook(rank, model, pending, net, ratio, batch_size, steps, warmup)
            rows.append(dict(model=model, nproc=world, net=net, repeat=r, future="pending" if pending else "finished",
                             step_s=t, compute_s=compute))
    return rows


def hook_overlap(model: str = "mlp", nproc: int = 2, ratio: float = 0.01, comm_ratio: float = 1.0,
                 latency_ratio: float = 0.015, batch_size: int = 16, steps: int = 8, warmup: int = 3,
                 repeats: int = 4) -> tuple[pd.DataFrame, float]:
    """What the compression hook's pending future buys (`compress.ddp_hook`): DDP + top-k
    (`ratio`) on `nproc` ranks over gloo, on a network emulated so that the exchange takes
    `comm_ratio` x the measured compute (the "10GbE-like" rule of `scaled_net`), the hook returning
    its pending future or the exchange's finished one, interleaved in one run (`repeats` rounds,
    the order alternating). Returns the rows (step_s per round and form) and the ratio
    median(finished) / median(pending): above 1 by what overlapping the exchange with backward saves."""
    rows = on_ranks(_hook_overlap_group, nproc, model, ratio, comm_ratio, latency_ratio, batch_size, steps,
                    warmup, repeats, join="gloo", timeout=None)[0]
    df = pd.DataFrame(rows)
    med = df.groupby("future").step_s.median()
    return df, float(med["finished"] / med["pending"])

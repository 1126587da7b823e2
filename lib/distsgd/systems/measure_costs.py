"""The simulator's per-call costs (`timeline.costs.Overheads`, (a)-(e) of its docstring) measured on
this machine, on ranks this module launches.

`measure()` measures (a)-(d) before any benchmark and without looking at a
validation residual: (a) by issuing `n` async `Comm` all-reduces (avg) of a 4-element tensor on
p = 2 ranks under `launch.on_ranks` (1 thread each, as the benchmark's ranks) and timing the
issue loop alone; (b) and (d) on p = 2 ranks training the validated model (`_model_rank`: the
allocator and caches in a training process's state, every core busy); (c) by fitting alpha-beta
to the real gloo all-reduce at each p (`measure_transfer`).

History (2026-11-25): (b) used to time `torch.cat` of 4 MB in a fresh process: 2.6-3.8 GB/s,
where the ranks' own model average runs at 14-25 GB/s (glibc returns such buffers to the system
between calls in a fresh process, so every pass page-faults); (c) and (d) were missing. All three
were found while looking at the validation residuals (SSD-SGD -20..-28%, CoCoD-SGD and
ByteScheduler under-predicted at 32 timed steps), each then measured on its own. Later the same
day SSD-SGD's rule itself became in place (`SSDSGD._local_rule`): (d) fell from 4.7-5.3x to
1.1-1.4x a training step and stopped depending on the process's allocator state.
"""
from __future__ import annotations

import contextlib
import os
import time

import pandas as pd

from ..comm.netmodel import NetModel
from .cases import HOOKED_PROBE
from .timeline.costs import HOOKED, Overheads


def _issue_rank(rank: int, world: int, n: int, net: str | None) -> float:
    import torch

    from ..comm import Comm, parse_net
    torch.set_num_threads(1)
    comm = Comm(rank, world, torch.device("cpu"), parse_net(net) if net else None)
    tensors = [torch.ones(4) for _ in range(n)]
    for t in tensors[:8]:                                   # warm-up
        comm.all_reduce(t, op="avg", async_op=True).wait()
    handles = []
    t0 = time.perf_counter()
    for t in tensors[8:]:
        handles.append(comm.all_reduce(t, op="avg", async_op=True))
    elapsed = time.perf_counter() - t0
    for h in handles:
        h.wait()
    return elapsed / max(1, n - 8)


def measure_issue(n: int = 208, nproc: int = 2, net: str | None = None) -> float:
    """Seconds per async all-reduce issue of a tiny tensor at p = `nproc` (median over ranks)."""
    import statistics

    from ..training.launch import on_ranks
    return float(statistics.median(on_ranks(_issue_rank, nproc, n, net)))


def work_passes() -> list[str]:
    """Every pass over its own buffers that a registered algorithm's class declares
    (`Algorithm.work_passes`), each once, in the registry's order."""
    from ..algorithms import REGISTRY
    return list(dict.fromkeys(name for cls in REGISTRY.values() for name in cls.work_passes))


def _model_rank(rank: int, world: int, model: str, batch_size: int, steps: int = 4, reps: int = 15) -> dict:
    """On one of `world` ranks that all run this (every core busy, as in the benchmark), after
    `steps` training steps of the benchmark's `model` (the allocator in a training process's
    state): (b) the copy speed of the kit's own model average passes (`algorithms.flat`: flatten,
    `div_`, copy back: 3 passes over the parameters), and (d) every registered algorithm's declared
    passes on this model (`work_passes`: the algorithm with its default parameters set up on the
    model, its `timed_work` calls), each as a fraction of the model's whole training step (forward,
    backward, torch SGD with momentum), each timed right after a forward and backward, medians of
    `reps`. Returns {"copy_Bps": ..., "work": {pass: fraction}}."""
    import statistics

    import torch
    import torch.nn.functional as F

    from . import benchmark as bs
    from ..algorithms import REGISTRY, create
    from ..training.config import Config
    from ..algorithms.flat import flatten, unflatten_into
    from ..training.caps import Caps
    from ..comm import Comm
    torch.set_num_threads(1)
    shape = bs.input_shape(model, Caps.from_env())
    torch.manual_seed(0)
    net = bs.bench_model(model, shape)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    batches = bs.synthetic_batches(shape, batch_size, seed=rank, vocab=bs.VOCAB.get(model))

    def backward(t: int) -> None:
        x, y = batches(t)
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()

    for t in range(steps):
        backward(t)
        optimizer.step()

    def median_s(fn) -> float:
        """`fn` timed right after a forward and backward (as `profiling` times the update)."""
        times = []
        for t in range(reps + 2):
            backward(t)
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return statistics.median(times[2:])

    tensors = [q.data for q in net.parameters()]
    nbytes = sum(q.numel() * q.element_size() for q in tensors)

    def average_passes() -> None:
        flat = flatten(tensors)
        flat.div_(world)
        unflatten_into(flat, tensors)

    def training_step() -> None:
        backward(0)
        optimizer.step()

    copy_Bps = 3 * nbytes / median_s(average_passes)
    step_s = median_s(training_step)
    comm = Comm(rank, world, torch.device("cpu"))
    facts = Config(nproc=world, batch_size=batch_size, momentum=0.9).facts()
    work: dict[str, float] = {}
    for name, cls in REGISTRY.items():
        if not set(cls.work_passes) - set(work):
            continue                                  # none, or timed already (a preset's base)
        algo = create(name, {})
        algo.setup(net, optimizer, comm, facts)
        work.update({p: median_s(call) / step_s for p, call in algo.timed_work().items()})
        algo.close()
    return {"copy_Bps": copy_Bps, "work": work}


def measure_transfer(nprocs: tuple[int, ...] = (2, 4), sizes: tuple[int, ...] = (2**18, 2**20, 2**22, 2**23),
                     reps: int = 5, tries: int = 3) -> dict[int, NetModel]:
    """(c) The real (un-emulated) gloo all-reduce on this machine at each p of `nprocs`, as an
    alpha-beta network fitted to its times at `sizes` (`benchmark.real_collective_times`,
    `comm.nccl_tests.fit_collective_times`). On a loaded machine the medians may not grow with the
    size, and no bandwidth fits them (ConfigError): measured again, up to `tries` times in all."""
    from .benchmark import real_collective_times
    from ..comm.nccl_tests import fit_collective_times
    from ..errors import ConfigError

    def fitted(p: int) -> NetModel:
        for _ in range(tries - 1):
            try:
                return fit_collective_times(real_collective_times(p, sizes, reps))
            except ConfigError:
                pass
        return fit_collective_times(real_collective_times(p, sizes, reps))     # the last try raises

    return {p: fitted(p) for p in nprocs}


def measure(net: str | None = None, nproc: int = 2, model: str = "mlp", batch_size: int = 16,
            nprocs: tuple[int, ...] = (2, 4)) -> Overheads:
    """Every cost measured now on this machine (module docstring): the issue cost at p = `nproc`,
    the copy speed and the algorithms' declared passes (`work_passes`) on `nproc` ranks training `model`, the real transfers at
    each p of `nprocs`."""
    import statistics

    from ..training.launch import on_ranks
    ranks = on_ranks(_model_rank, nproc, model, batch_size)
    work = {k: float(statistics.median(r["work"][k] for r in ranks)) for k in ranks[0]["work"]}
    return Overheads(issue_s=measure_issue(nproc=nproc, net=net),
                     copy_Bps=float(statistics.median(r["copy_Bps"] for r in ranks)),
                     transfer=measure_transfer(nprocs), cores=os.cpu_count() or 1, work=work)


def _call_round(comm, tensors: list, raw: bool) -> tuple[float, float]:
    """Issue one async all-reduce (avg) on each of `tensors` (the kit's `Comm`, or `raw`:
    ``torch.distributed.all_reduce`` alone), then wait for them all: (seconds of the issue loop on the
    host, seconds until the device has finished them all), from an idle device."""
    import torch
    import torch.distributed as dist

    sync = torch.cuda.synchronize if comm.device.type == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    if raw:
        works = [dist.all_reduce(t, async_op=True) for t in tensors]
    else:
        works = [comm.all_reduce(t, op="avg", async_op=True) for t in tensors]
    issued = time.perf_counter() - t0
    for w in works:
        w.wait()
    sync()
    return issued, time.perf_counter() - t0


@contextlib.contextmanager
def _one_rank_group(dev):
    """A one-rank process group (NCCL on a GPU, gloo on the CPU) on a free local port, unless one is
    initialised; left as found."""
    import socket

    import torch.distributed as dist
    joined = not dist.is_initialized()
    if joined:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        dist.init_process_group("nccl" if dev.type == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                                rank=0, world_size=1)
    try:
        yield
    finally:
        if joined:
            dist.destroy_process_group()


def _device(device: str):
    import torch
    return torch.device(device, 0) if device == "cuda" else torch.device(device)


def _device_name(dev) -> str:
    import torch
    return torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"


def measure_gpu_calls(sizes: tuple[int, ...] = (2**12, 2**16, 2**20, 2**24, 2**26),
                      counts: tuple[int, ...] = (1, 8, 64, 512), reps: int = 5,
                      device: str = "cuda") -> pd.DataFrame:
    """The per-collective cost on one GPU (NCCL, p = 1, issue 33 item 2): for each size in bytes
    (fp32 tensors) and each count n, n async all-reduces (avg) issued back to back from an idle device,
    through the kit's `Comm` (what every algorithm calls) and through ``torch.distributed`` alone;
    the medians over `reps` rounds (after one warm-up round) of the host's issue loop per call
    (`issue_s`) and of the time until the device has finished them all, per call (`call_s`).
    Joins a one-rank group (NCCL on "cuda", gloo on "cpu", where host and device are one) on a free
    local port if none is initialised."""
    from ..comm import Comm
    dev = _device(device)
    with _one_rank_group(dev):
        rows = _call_rows(Comm(0, 1, dev), sizes, counts, reps)
    return pd.DataFrame(rows).assign(device=_device_name(dev))


def _chain_case(algo: str, width: int, n: int, batch_size: int, dev) -> tuple:
    """(algorithm, optimizer, model) of `measure_hooked_calls`: `algo` ("compute": none) set up on one rank
    over a chain of n bias-free Linear(width, width) layers drawn after seed 0."""
    import torch

    from ..algorithms import Algorithm, create
    from ..comm import Comm
    from ..training.config import Config
    torch.manual_seed(0)
    net = torch.nn.Sequential(*[torch.nn.Linear(width, width, bias=False) for _ in range(n)]).to(dev)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    runner = Algorithm() if algo == "compute" else create(algo, {})
    model = runner.setup(net, optimizer, Comm(0, 1, dev), Config(nproc=1, batch_size=batch_size, momentum=0.9).facts())
    return runner, optimizer, model


def measure_hooked_calls(widths: tuple[int, ...] = (32, 256, 512), counts: tuple[int, ...] = (8, 64, 256),
                         reps: int = 7, warmup: int = 3, batch_size: int = 8, device: str = "cuda") -> pd.DataFrame:
    """The per-collective cost in place (issue 33 item 2; rule fixed before the third GPU check, 2026-11-27):
    what issuing one all-reduce from a gradient hook inside a training step costs the host: the hook,
    the algorithm's bookkeeping, the kit's `Comm` and the backend's enqueue, and the wait and the
    averaging after it. `measure_gpu_calls` times `Comm.all_reduce` in a loop; in place the GPU check of
    2026-11-26 found 5-9 times that (docs/validation.md, "GPU check").

    A synthetic chain, not a validated model: n bias-free ``Linear(w, w)`` layers (one gradient tensor
    of 4 w^2 bytes each) on a batch of `batch_size`, trained with WFBP (the kit's ``wfbp``: one
    all-reduce per gradient as it is ready) and with compute alone, on one rank. Per (w, n): the
    median over `reps` steps (after `warmup`) of the host's time to issue one training step from an
    idle device (as the benchmark's `Timed.host_s`), each case's steps interleaved; `issue_s` is
    (WFBP's - compute's) / n, `call_s` the same difference of the whole step until the device is
    done, per call. Rows: path `HOOKED`, nbytes, calls = n."""
    import statistics

    import torch
    import torch.nn.functional as F

    from ..training.step import train_step
    dev = _device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows = []
    with _one_rank_group(dev):
        for width in widths:
            for n in counts:
                times: dict[str, list[tuple[float, float]]] = {"compute": [], HOOKED_PROBE: []}
                cases = {name: _chain_case(name, width, n, batch_size, dev) for name in times}
                x = torch.randn(batch_size, width, device=dev)
                y = torch.randint(0, width, (batch_size,), device=dev)
                for step in range(warmup + reps):
                    for name, (algo, optimizer, model) in cases.items():
                        sync()
                        t0 = time.perf_counter()
                        train_step(algo, optimizer, model, F.cross_entropy, x, y, step)
                        issued = time.perf_counter() - t0
                        sync()
                        if step >= warmup:
                            times[name].append((issued, time.perf_counter() - t0))
                for algo, _, _ in cases.values():
                    algo.finalize()
                    algo.close()
                med = {name: [statistics.median(t[i] for t in got) for i in (0, 1)] for name, got in times.items()}
                rows.append(dict(path=HOOKED, nbytes=4 * width * width, calls=n,
                                 issue_s=(med[HOOKED_PROBE][0] - med["compute"][0]) / n,
                                 call_s=(med[HOOKED_PROBE][1] - med["compute"][1]) / n))
                del cases
                if dev.type == "cuda":
                    torch.cuda.empty_cache()
    return pd.DataFrame(rows).assign(device=_device_name(dev))


def _call_rows(comm, sizes: tuple[int, ...], counts: tuple[int, ...], reps: int) -> list[dict]:
    """`measure_gpu_calls`' rows on `comm`'s device."""
    import statistics

    import torch
    rows = []
    for nbytes in sizes:
        for n in counts:
            tensors = [torch.ones(nbytes // 4, device=comm.device) for _ in range(n)]
            for path, raw in (("distsgd.Comm", False), ("torch.distributed", True)):
                _call_round(comm, tensors, raw)
                got = [_call_round(comm, tensors, raw) for _ in range(reps)]
                rows.append(dict(path=path, nbytes=nbytes, calls=n,
                                 issue_s=statistics.median(g[0] for g in got) / n,
                                 call_s=statistics.median(g[1] for g in got) / n))
            del tensors
            if comm.device.type == "cuda":
                torch.cuda.empty_cache()
    return rows

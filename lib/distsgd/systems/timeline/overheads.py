"""Per-call costs the layer profile lacks, spent on the compute stream: a named, switchable knob.

The kit's implementations spend, on the training process's Python thread (the compute stream),
besides the profile's layer times:

(a) `issue_s`: per collective issued, the Python hook, `Comm._record`, the ledger entry and the
    backend's enqueue;
(b) per byte, passes at memory-copy speed (`copy_Bps`): packing gradients into a fusion bucket /
    PS slots / flattening the model before the collective, and after it the averaging division
    (`tensor.div_`) and the copy back;
(c) on a CPU host, the real transfer (`transfer`): the emulation delays a collective to its
    modeled time, but the backend's real transfer (gloo's memory copies over loopback) runs on
    the same cores as the compute from the moment it is issued. Each rank has one transfer
    thread beside its compute thread, so while a transfer runs the compute stream progresses at
    1 / `transfer_share` (2: two threads share the rank's core) for `transfer_share` x the
    transfer's CPU time (its copies: the bandwidth term of the real cost; the latency term is
    waiting for the peers); real transfers run one after the other (gloo's thread). Blocking
    collectives hide it (the compute stream waits anyway); overlapped ones pay it.
(d) an algorithm's own passes over its buffers, announced by `Comm.work(name)` (`work_s`): SSD-SGD's
    cosdcasgd local rule (`ssd_rule`) and its momentum server step (`ssd_server`) are several passes
    over the flat model, as fractions of the model's training step; without them the simulator
    charges one optimizer update (`update_s`) for each.

(e) On a GPU host (`host_share` set) the costs are the host's, not the compute stream's: the host
    spends `host_share` seconds issuing each second of device compute (the model's
    ``host_forward_s + host_backward_s + host_update_s`` over its ``device_s``, measured by
    `profiler.host_and_device` on that GPU) and `issue_s` per collective (`gpu_overheads`: the cost in
    place, `measure_hooked_calls`, where measured; else `Comm`'s in a loop, `measure_gpu_calls`); the
    device waits for the host only where the host falls behind (`streams.Rank`). Copies there are
    device kernels at memory speed and the transfer is NCCL's (no `copy_Bps`, no `transfer`).

`Overheads` holds these numbers; `simulate(..., overheads=...)` charges (a) and (b) by one rule,
the same for every schedule (`streams.Rank`):

    at issue of a collective of n bytes:   issue_s + n / copy_Bps            (pack / flatten)
    at the first wait for its result:      out_passes(kind, n, p) / copy_Bps
        all_reduce:      2 n      (div_ by p, then the copy back into .grad / the model)
        reduce_scatter:  n / p    (div_ of this rank's shard)
        all_gather:      n        (the copy back of the gathered buffer)
        other kinds:     n        (the copy back)

`for_profile` is the default: `NONE` (zero) on a CPU profile, so `simulate` without the knob gives
there exactly the predictions it gave before; on a GPU profile the committed GPU host's costs ((e)).
NCCL's kernels sharing the SMs (`Effects.contention`) are not measured here.

`measure()` measures them on this machine, before any benchmark and without looking at a
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
import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ...comm.netmodel import NetModel

if TYPE_CHECKING:
    from ..layer_profile import Profile


WORK = ("ssd_rule", "ssd_server")     # the passes an algorithm announces (`Comm.work`), each a field


@dataclass(frozen=True)
class Overheads:
    """Seconds per collective issued (`issue_s`) and memory-copy speed in bytes/s (`copy_Bps`;
    0 or inf: copies free) charged on the compute stream (module docstring). Measured on this
    machine (2-core CPU, gloo, p = 2, 1 thread per rank) by `measure()`: see the validation
    test's output and docs/validation.md's "Validation log" for the values of a run."""

    issue_s: float = 0.0
    copy_Bps: float = 0.0
    transfer: dict[int, NetModel] = field(default_factory=dict)
    transfer_share: float = 2.0
    cores: int = 0
    ssd_rule: float | None = None
    ssd_server: float | None = None
    host_share: float | None = None

    @property
    def gpu(self) -> bool:
        """A GPU host: costs on the host's clock, not the compute stream's (module docstring, (e))."""
        return self.host_share is not None

    def work_s(self, name: str, update_s: float, compute_s: float) -> float:
        """Seconds of the algorithm's pass `name` (`Comm.work`: one of `WORK`, SSD-SGD's local rule
        "ssd_rule" or one server step "ssd_server"): the measured fraction (the field of that name)
        of the profile's training step `compute_s`, or one optimizer update `update_s` when not
        measured (module docstring, (d))."""
        if name not in WORK:
            raise ValueError(f"work {name!r}: the passes with a cost are {', '.join(WORK)}")
        fraction = getattr(self, name)
        return update_s if fraction is None else fraction * compute_s

    def transfer_s(self, kind: str, nbytes: int, p: int) -> float:
        """Seconds during which the real transfer of collective `kind` on `nbytes` over `p` ranks
        slows the compute stream (0 without `transfer`): its CPU time (the bandwidth term of the
        real cost at the measured group size nearest `p`: the copies; the latency term is waiting
        for the peers, not work; with more ranks than `cores`, that wall time is shared, cores / p
        of it is one thread's work) times `transfer_share` (module docstring, (c))."""
        if not self.transfer or p <= 1:
            return 0.0
        nearest = min(self.transfer, key=lambda q: (abs(q - p), q))
        cpu = min(1.0, self.cores / nearest) if self.cores else 1.0
        copies = NetModel(bandwidth_Bps=self.transfer[nearest].bandwidth_Bps, latency_s=0.0)
        return self.transfer_share * cpu * copies.cost(kind, nbytes, p)

    def copy_s(self, nbytes: float) -> float:
        """Seconds for one pass over `nbytes` (0 when copies are free)."""
        if not self.copy_Bps or self.copy_Bps == float("inf"):
            return 0.0
        return nbytes / self.copy_Bps

    @property
    def active(self) -> bool:
        return self.issue_s > 0 or self.copy_s(1.0) > 0


NONE = Overheads()

# The GPU check's committed measurements (reproduce/gpu_check.py; reproduce/validation/README.md)
GPU_CALLS = Path("reproduce") / "validation" / "gpu_calls.csv"
GPU_HOST = Path("reproduce") / "validation" / "gpu_host.csv"


HOOKED = "hooked wfbp"       # measure_hooked_calls' rows in the GPU check's calls table


def gpu_overheads(calls: pd.DataFrame, host: dict[str, float] | pd.Series | None) -> Overheads:
    """The GPU host's costs ((e)) from the GPU check's measurements: `issue_s` the cost of a collective
    in place, the median over `measure_hooked_calls`' rows (path `HOOKED`: the host's time per
    gradient hook that issues the kit's all-reduce inside a training step) of 8 or more calls; in a
    table without them (the first two GPU checks), the median host issue time per collective
    through the kit's `Comm` over `measure_gpu_calls`' rounds of 8 or more calls (one call alone also
    pays the first launch's set-up). `host_share` the host's time to issue a step's forward, backward
    and update over the device's own time for it (`profiler.host_and_device`), or 0 without `host`
    (the host keeps ahead of the device)."""
    path = HOOKED if (calls.path == HOOKED).any() else "distsgd.Comm"
    steady = calls[(calls.path == path) & (calls.calls >= 8)]
    share = 0.0
    if host is not None:
        share = float((host["host_forward_s"] + host["host_backward_s"] + host["host_update_s"]) / host["device_s"])
    return Overheads(issue_s=float(steady.issue_s.median()), host_share=share)


@functools.lru_cache(maxsize=None)
def _committed(name: Path) -> pd.DataFrame:
    from ...paths import repo_root
    return pd.read_csv(repo_root(Path(__file__).parent) / name)


def for_profile(profile: "Profile") -> Overheads:
    """What `simulate` charges when not told: nothing on a CPU profile (a CPU's costs are measured on
    the machine that validates, `measure()`), and on a GPU profile (measured with CUDA, or projected
    to a GPU) the GPU host's costs ((e), `gpu_overheads`) from the committed GPU check (`GPU_CALLS`,
    `GPU_HOST`): the per-call cost, and the host's share of that model and batch where the check
    measured it, else 0: a FLOP-scaled profile is calibrated to a whole published iteration, in which
    the host kept ahead."""
    if profile.device == "cpu":
        return NONE
    host = _committed(GPU_HOST)
    row = host[(host.model == profile.model) & (host.batch_size == profile.batch_size)]
    return gpu_overheads(_committed(GPU_CALLS), row.iloc[0] if profile.device == "cuda" and len(row) else None)


def out_bytes(kind: str, nbytes: int, p: int) -> float:
    """Bytes passed over on the compute stream after collective `kind` of `nbytes` completes."""
    if kind == "all_reduce":
        return 2.0 * nbytes
    if kind == "reduce_scatter":
        return nbytes / max(p, 1)
    return float(nbytes)


def _issue_rank(rank: int, world: int, n: int, net: str | None) -> float:
    import torch

    from ...comm import Comm, parse_net
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

    from ...training.launch import on_ranks
    return float(statistics.median(on_ranks(_issue_rank, nproc, n, net)))


def _model_rank(rank: int, world: int, model: str, batch_size: int, steps: int = 4, reps: int = 15) -> dict:
    """On one of `world` ranks that all run this (every core busy, as in the benchmark), after
    `steps` training steps of the benchmark's `model` (the allocator in a training process's
    state): (b) the copy speed of the kit's own model average passes (`algorithms.flat`: flatten,
    `div_`, copy back: 3 passes over the parameters), and (d) SSD-SGD's local rule and server
    step on this model (`SSDSGD._local_rule` on the gathered gradient, `_server`), each as a
    fraction of the model's whole training step (forward, backward, torch SGD with momentum),
    each timed right after a forward and backward, medians of `reps`."""
    import statistics

    import torch
    import torch.nn.functional as F

    from .. import benchmark as bs
    from ...algorithms import create
    from ...training.config import Config
    from ...algorithms.flat import flatten, unflatten_into
    from ...training.caps import Caps
    from ...comm import Comm
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
    params = {"period": 4, "warmup": 0}
    ssd = create("ssd_sgd", params)
    ssd.setup(net, optimizer, Comm(rank, world, torch.device("cpu")),
              Config(nproc=world, batch_size=batch_size, momentum=0.9).facts())
    return {"copy_Bps": copy_Bps,
            "ssd_rule": median_s(lambda: ssd._local_rule(ssd._gradient().div_(world))) / step_s,
            "ssd_server": median_s(lambda: ssd._server(ssd._gradient())) / step_s}


def measure_transfer(nprocs: tuple[int, ...] = (2, 4), sizes: tuple[int, ...] = (2**18, 2**20, 2**22, 2**23),
                     reps: int = 5, tries: int = 3) -> dict[int, NetModel]:
    """(c) The real (un-emulated) gloo all-reduce on this machine at each p of `nprocs`, as an
    alpha-beta network fitted to its times at `sizes` (`benchmark.real_collective_times`,
    `comm.nccl_tests.fit_collective_times`). On a loaded machine the medians may not grow with the
    size, and no bandwidth fits them (ConfigError): measured again, up to `tries` times in all."""
    from ..benchmark import real_collective_times
    from ...comm.nccl_tests import fit_collective_times
    from ...errors import ConfigError

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
    the copy speed and SSD-SGD's rules on `nproc` ranks training `model`, the real transfers at
    each p of `nprocs`."""
    import statistics

    from ...training.launch import on_ranks
    ranks = on_ranks(_model_rank, nproc, model, batch_size)
    med = {k: float(statistics.median(r[k] for r in ranks)) for k in ranks[0]}
    return Overheads(issue_s=measure_issue(nproc=nproc, net=net), copy_Bps=med["copy_Bps"],
                     transfer=measure_transfer(nprocs), cores=os.cpu_count() or 1, ssd_rule=med["ssd_rule"],
                     ssd_server=med["ssd_server"])


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
    from ...comm import Comm
    dev = _device(device)
    with _one_rank_group(dev):
        rows = _call_rows(Comm(0, 1, dev), sizes, counts, reps)
    return pd.DataFrame(rows).assign(device=_device_name(dev))


def _chain_case(algo: str, width: int, n: int, batch_size: int, dev) -> tuple:
    """(algorithm, optimizer, model) of `measure_hooked_calls`: `algo` ("compute": none) set up on one rank
    over a chain of n bias-free Linear(width, width) layers drawn after seed 0."""
    import torch

    from ...algorithms import Algorithm, create
    from ...comm import Comm
    from ...training.config import Config
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

    from ...training.step import train_step
    dev = _device(device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rows = []
    with _one_rank_group(dev):
        for width in widths:
            for n in counts:
                times: dict[str, list[tuple[float, float]]] = {"compute": [], "wfbp": []}
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
                                 issue_s=(med["wfbp"][0] - med["compute"][0]) / n,
                                 call_s=(med["wfbp"][1] - med["compute"][1]) / n))
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

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
(d) an algorithm's own passes over its buffers, declared by its class (`Algorithm.work_passes`) and
    announced where they run by `Comm.work(name)` (`work_s`; e.g. SSD-SGD's local rule and server
    step, several passes over the flat model each): `work`, each pass's measured cost as a fraction
    of the model's training step (`Algorithm.timed_work` timed by `measure_costs`); a pass not
    measured costs one optimizer update (`update_s`).

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

Measured by `systems.measure_costs` (ranks launched, benchmarks run); this module only prices.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from ...comm.netmodel import NetModel

if TYPE_CHECKING:
    from ..layer_profile import Profile


@dataclass(frozen=True)
class Overheads:
    """Seconds per collective issued (`issue_s`) and memory-copy speed in bytes/s (`copy_Bps`;
    0 or inf: copies free) charged on the compute stream (module docstring). Measured on this
    machine (2-core CPU, gloo, p = 2, 1 thread per rank) by `measure_costs.measure()`: see the validation
    test's output and docs/validation.md's "Validation log" for the values of a run."""

    issue_s: float = 0.0
    copy_Bps: float = 0.0
    transfer: dict[int, NetModel] = field(default_factory=dict)
    transfer_share: float = 2.0
    cores: int = 0
    work: dict[str, float] = field(default_factory=dict)    # an announced pass -> its share of a step
    host_share: float | None = None

    @property
    def gpu(self) -> bool:
        """A GPU host: costs on the host's clock, not the compute stream's (module docstring, (e))."""
        return self.host_share is not None

    def work_s(self, name: str, update_s: float, compute_s: float) -> float:
        """Seconds of an algorithm's pass `name` (`Comm.work`, one of its class's `work_passes`): its
        measured fraction (`work`) of the profile's training step `compute_s`, or one optimizer
        update `update_s` when not measured (module docstring, (d))."""
        fraction = self.work.get(name)
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

"""Per-call costs the layer profile lacks, spent on the compute stream: a named, switchable knob.

The kit's implementations spend, on the training process's Python thread (the compute stream),
besides the profile's layer times:

(a) `issue_s`: per collective issued, the Python hook, `Comm._record`, the ledger entry and the
    backend's enqueue;
(b) per byte, passes at memory-copy speed (`copy_Bps`): packing gradients into a fusion bucket /
    PS slots / flattening the model before the collective, and after it the averaging division
    (`tensor.div_`) and the copy back.

`Overheads` holds the two numbers; `simulate(..., overheads=...)` charges them by one rule, the same
for every schedule (`streams.Rank`):

    at issue of a collective of n bytes:   issue_s + n / copy_Bps            (pack / flatten)
    at the first wait for its result:      out_passes(kind, n, p) / copy_Bps
        all_reduce:      2 n      (div_ by p, then the copy back into .grad / the model)
        reduce_scatter:  n / p    (div_ of this rank's shard)
        all_gather:      n        (the copy back of the gathered buffer)
        other kinds:     n        (the copy back)

`NONE` (zero) is the default: `simulate` without the knob gives exactly the predictions it gave
before. Projections to GPUs use `NONE` too, so their verdicts do not move: the values on a GPU
(kernel launches, device copies at HBM speed) are not measured here (issue #23 will add them).

`measure()` measures both on this machine: (a) by issuing `n` async `Comm` all-reduces (avg) of a
4-element tensor on p = 2 ranks under `launch.on_ranks` (1 thread each, as the benchmark's ranks)
and timing the issue loop alone (the waits follow it, untimed); (b) by timing `torch.cat` of a
few MB of tensors plus `copy_` back, on one thread, median of repeats. It does not look at any
validation residual.
"""
from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Overheads:
    """Seconds per collective issued (`issue_s`) and memory-copy speed in bytes/s (`copy_Bps`;
    0 or inf: copies free) charged on the compute stream (module docstring). Measured on this
    machine (2-core CPU, gloo, p = 2, 1 thread per rank) by `measure()`: see the validation
    test's output and the README's "10, Simulator validation" paragraph for the values of a run."""

    issue_s: float = 0.0
    copy_Bps: float = 0.0

    def copy_s(self, nbytes: float) -> float:
        """Seconds for one pass over `nbytes` (0 when copies are free)."""
        if not self.copy_Bps or self.copy_Bps == float("inf"):
            return 0.0
        return nbytes / self.copy_Bps

    @property
    def active(self) -> bool:
        return self.issue_s > 0 or self.copy_s(1.0) > 0


NONE = Overheads()


def out_bytes(kind: str, nbytes: int, p: int) -> float:
    """Bytes passed over on the compute stream after collective `kind` of `nbytes` completes."""
    if kind == "all_reduce":
        return 2.0 * nbytes
    if kind == "reduce_scatter":
        return nbytes / max(p, 1)
    return float(nbytes)


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

    from ..launch import on_ranks
    return float(statistics.median(on_ranks(_issue_rank, nproc, n, net)))


def measure_copy(nbytes: int = 4 * 2**20, pieces: int = 8, reps: int = 15) -> float:
    """Bytes/s of a flatten (`torch.cat` of `pieces` tensors totalling `nbytes`) plus the copy
    back (`copy_`) on one thread: two passes, median of `reps`."""
    import statistics

    import torch
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        parts = [torch.randn(nbytes // 4 // pieces) for _ in range(pieces)]
        times = []
        for _ in range(reps + 2):
            t0 = time.perf_counter()
            flat = torch.cat([x.reshape(-1) for x in parts])
            offset = 0
            for x in parts:
                x.copy_(flat[offset:offset + x.numel()])
                offset += x.numel()
            times.append(time.perf_counter() - t0)
        total = 2 * sum(x.numel() * x.element_size() for x in parts)
        return total / statistics.median(times[2:])
    finally:
        torch.set_num_threads(threads)


def measure(net: str | None = None, nproc: int = 2) -> Overheads:
    """Both costs measured now on this machine (module docstring)."""
    return Overheads(issue_s=measure_issue(nproc=nproc, net=net), copy_Bps=measure_copy())

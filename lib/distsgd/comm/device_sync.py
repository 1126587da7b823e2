"""Host clock readings that mean what the device did.

On a GPU the host only queues work: a kernel launch returns before the kernel runs, and NCCL's
``work.wait()`` makes the current stream wait for the collective without blocking the host. A time
read on the host then measures when work was queued, not when it ran. Where the kit times a section
or emulates a delay from the host's clock (`Comm`'s emulated network, CoCoD-SGD's slow ranks, the
training loop's wall clock), it first waits for the device here; on the CPU (gloo) both calls do
nothing, since there the work has run when the call that issued it returns.
"""
from __future__ import annotations

import torch
import torch.distributed as dist


def synchronize(device: torch.device) -> None:
    """Return once the work queued on `device`'s current stream (the compute) has run; nothing on
    a device other than a GPU. Collectives in flight on NCCL's own streams are not waited for."""
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()


def wait_arrived(work: "dist.Work", device: torch.device) -> None:
    """Return once collective `work` has completed on `device` (its result is in place there); nothing
    on a device other than a GPU, where `work.wait()` has already blocked until then. On a GPU a stream
    of its own waits for `work` and is synchronised, so that the compute queued on the current stream
    meanwhile (which overlaps the collective) is not waited for."""
    if device.type == "cuda":
        stream = torch.cuda.Stream(device)
        with torch.cuda.stream(stream):
            work.wait()
        stream.synchronize()

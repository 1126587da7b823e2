"""Errors raised by distsgd, each with enough context to act on."""
from __future__ import annotations

from typing import Iterable


class ConfigError(ValueError):
    """A configuration value is invalid. Names the field, the bad value and what is allowed."""

    def __init__(self, field: str, value: object, allowed: Iterable[object] | str | None = None,
                 hint: str = "") -> None:
        self.field, self.value = field, value
        if allowed is None:
            allowed_txt = ""
        elif isinstance(allowed, str):
            allowed_txt = f"; allowed: {allowed}"
        else:
            allowed_txt = "; allowed: " + ", ".join(str(a) for a in allowed)
        msg = f"invalid {field}={value!r}{allowed_txt}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class WorkerError(RuntimeError):
    """A worker process failed; carries its rank and the cause (traceback or exit status)."""

    def __init__(self, rank: int, cause: str) -> None:
        self.rank, self.cause = rank, cause
        super().__init__(f"worker rank {rank} failed:\n{cause}")


class DivergedError(WorkerError):
    """Training diverged: a non-finite loss or parameter at `step` on `ranks` (the first of
    them is `rank`), found by the divergence check of every log step (`distsgd.training.divergence`)."""

    def __init__(self, step: int, ranks: list[int], quantity: str) -> None:
        self.step, self.ranks, self.quantity = step, ranks, quantity
        self.rank = ranks[0]
        where = f"rank{'s' * (len(ranks) > 1)} {', '.join(map(str, ranks))}"
        self.cause = (f"training diverged: non-finite {quantity} at step {step} on {where} "
                      f"(on_nan=stop; on_nan=continue trains on)")
        RuntimeError.__init__(self, self.cause)     # no worker failed: the message is the cause


class Preempted(RuntimeError):
    """A rank asked to stop (SIGTERM or SIGUSR1, what SLURM sends before a preemption or the time
    limit) saved a checkpoint with every rank at `step` and stopped; the run resumes there when
    started again (`distsgd.training.checkpoint`)."""

    def __init__(self, step: int, checkpoint: str) -> None:
        self.step, self.checkpoint = step, checkpoint
        super().__init__(f"stopped by a signal (SIGTERM or SIGUSR1) after step {step}: checkpoint "
                         f"{checkpoint} saved; run the same config again to resume from it")

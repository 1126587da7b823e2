"""Stopping a diverged run: the non-finite check every rank makes at each log step.

At every log step each rank looks at two things it already has: the sum of its training losses
since the previous log step (the loop's window; a NaN or infinity in any step's loss makes the
sum non-finite) and its model parameters (`torch.isfinite`, one pass over them). The ranks then
agree through one uncounted all-reduce (`Comm.agree`, MAX, on a control group that does not wait
for the algorithm's in-flight collectives) of a vector with one code
per rank: 0 when finite, 1 for the loss, 2 + i for the i-th parameter. Every rank so learns at
the same step which ranks diverged and in what, and all of them stop together (no rank is left
waiting in a collective).

Cost: one tiny all-reduce and one device-to-host copy per log step, none in the other steps.
A run stops at most ``log_every - 1`` steps after its first non-finite loss.

``on_nan="stop"`` ends the loop there; the run's summary.json records ``status: "diverged"``
and `distsgd.run` raises `DivergedError`. ``on_nan="continue"`` trains on; the summary records
where the first non-finite value appeared (``nonfinite``), its status stays "finished".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch

from ..comm import Comm

LOSS = "train_loss"


@dataclass(frozen=True)
class NonFinite:
    """The first non-finite value of a run: its log step, the ranks where it was found, and the
    quantity on the first of them (the training loss, or the first non-finite parameter)."""

    step: int
    ranks: list[int]
    quantity: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class DivergenceCheck:
    """One rank's check at each log step; `found` holds the first non-finite value, if any."""

    def __init__(self, model: torch.nn.Module, comm: Comm, on_nan: str) -> None:
        named = list(model.named_parameters())
        self.names = [name for name, _ in named]
        self.params = [p for _, p in named]
        self.comm, self.on_nan = comm, on_nan
        self.found: NonFinite | None = None

    @property
    def stopped(self) -> bool:
        """Whether the loop must end: a non-finite value was found and on_nan is "stop"."""
        return self.found is not None and self.on_nan == "stop"

    def check(self, step: int, window_loss: torch.Tensor) -> bool:
        """At log step `step`, with the sum of the losses since the last one: agree with every
        rank on non-finite values; True when the loop must stop. After the first finding of an
        on_nan="continue" run it checks nothing (every rank skips the all-reduce alike)."""
        if self.found is not None:
            return self.stopped
        finite = torch.stack([torch.isfinite(window_loss).all(),
                              *(torch.isfinite(p.detach()).all() for p in self.params)])
        bad = (~finite).nonzero()
        codes = torch.zeros(self.comm.world_size, dtype=torch.float64, device=finite.device)
        if len(bad):
            codes[self.comm.rank] = 1 + int(bad[0])
        self.comm.agree(codes, op="max")
        ranks = codes.nonzero().flatten().tolist()
        if ranks:
            code = int(codes[ranks[0]]) - 1
            self.found = NonFinite(step, ranks, LOSS if code == 0 else f"parameter {self.names[code - 1]}")
        return self.stopped

"""Effects that matter at scale and the alpha-beta model lacks: named knobs, each off by default.

`simulate(..., effects=Effects(...))` applies them; `Effects()` (= `OFF`) is the original model,
so the library's predictions, and the `proj_*` verdicts of notebooks 01/06/07/08/10 that call
`timeline.simulate`, do not move. The what-if CLI (`python -m distsgd simulate`) turns them on
with the defaults below (`WHATIF`, plus the per-message cost `MESSAGE_OVERHEADS`), and
`--no-contention`, `--no-message-latency` switch each off. Another library's runtime is no effect
here but a parameter of the class that runs it (Horovod's fusion cycle: `ssgd`'s `cycle_ms`).

(a) `contention`: compute runs (1 + contention) times slower while a collective of the rank is in
    flight (the kernels share SMs and memory bandwidth with NCCL's). Default 0.189: the average
    compute slow-down measured when overlapping computation with communication on 4 x A100, H100,
    MI250, MI210 (GPT and LLaMA training; maximum 40%), "Characterizing Compute-Communication
    Overlap in GPU-Accelerated Distributed Deep Learning", arXiv 2507.03114 (2025). Only a compute
    task that starts while a collective is in flight is slowed for the overlapping part; a
    collective issued later never reaches back into compute already run.
(b) per-message latency: the per-call cost of a collective, by the kit's one mechanism for it,
    `Overheads.issue_s` (charged on the compute stream at every issue, `timeline.costs`).
    `MESSAGE_OVERHEADS`: 8.4 us, NCCL's own cost model's base latency of a ring all-reduce call
    with the Simple protocol (nccl src/graph/tuning.cc, baseLat Ring/Simple), charged on top of
    the alpha of each ring step.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import ConfigError
from .costs import Overheads



@dataclass(frozen=True)
class Effects:
    """The scale effects (module doc); zero values switch an effect off."""

    contention: float = 0.0

    def __post_init__(self) -> None:
        value = self.contention
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value >= 0:
            raise ConfigError("effects.contention", value, "a number >= 0 (0: off)")


OFF = Effects()
WHATIF = Effects(contention=0.189)
MESSAGE_OVERHEADS = Overheads(issue_s=8.4e-6)


def whatif(contention: bool = True, message_latency: bool = True) -> tuple[Effects, Overheads | None]:
    """The what-if CLI's (effects, overheads): the defaults above, each switched off by its flag."""
    return Effects(contention=WHATIF.contention if contention else 0.0), (MESSAGE_OVERHEADS if message_latency else None)

"""The paper's setting a notebook's systems claims are about, and whether its runs span it.

A systems claim (a step time, a time to target at the paper's scale: a `proj_*` claim) is decided
one of two ways, by one registered test (`Test`: its form, side, threshold and source), the way
resolved from the run:

- **measured at the paper's setting** when the notebook's deciding runs span it (`PaperSetting.
  spanned_by`): each has at least the setting's workers (`nproc`), its ranks ran on at least the
  setting's `nodes` distinct hosts (each rank's pid file names its host), and it crossed the real
  network between them (no emulated network, `Config.net` empty). The claim's interval is then the
  run's own (e.g. the distribution-free interval of a median over logged periods), and its
  `measured` text starts with `AT_SETTING`;
- **projected** otherwise: the simulator at the paper's setting, within its measured error band
  (`distsgd.verdicts.projection`).

A profile may name a stand-in setting (`PaperSetting.parse` of a notebook's ``paper_setting``
parameter): the rehearsal's three SLURM nodes count as the paper's setting there, and its small
model stands for the paper's models (`models`). Whether the allocation can span the setting is
known before any run (`reachable`), so a claim is prechecked "not covered" only where neither way
can decide it. A headline whose deciding claims were all measured at the setting reads as
measured (`verdicts.headlines`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from ..errors import ConfigError
from ..training.allocation import Allocation
from ..training.results import Result

AT_SETTING = "measured at the paper's setting"      # how a claim's `measured` text starts when decided so
FIELDS = ("nproc", "nodes", "models")


@dataclass(frozen=True)
class PaperSetting:
    """At least `nproc` workers on at least `nodes` hosts over the real network between them; the
    notebook's own model stands for the paper's `models` (the claims of those models are measured)."""

    nproc: int
    nodes: int
    models: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for name in ("nproc", "nodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"paper_setting.{name}", value, "an integer >= 1")

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None, nproc: int, nodes: int, models: Iterable[str]) -> "PaperSetting":
        """The setting a notebook's ``paper_setting`` parameter names: a mapping of `FIELDS` (each
        optional), over the paper's own `nproc`, `nodes` and `models`; {} or None is the paper's own.
        ConfigError naming a field not in `FIELDS`."""
        value = dict(value or {})
        unknown = sorted(set(value) - set(FIELDS))
        if unknown:
            raise ConfigError(f"paper_setting.{unknown[0]}", value[unknown[0]], f"one of {', '.join(FIELDS)}")
        return cls(value.get("nproc", nproc), value.get("nodes", nodes), tuple(value.get("models", models)))

    def describe(self) -> str:
        """E.g. '3 workers on 3 nodes over the real network between them'."""
        return f"{self.nproc} workers on {self.nodes} node{'s' * (self.nodes != 1)} over the real network between them"

    def reachable(self, allocation: Allocation) -> bool:
        """Whether runs started from this process can span the setting, known before any run: the
        allocation has at least `nodes` nodes (and, where a node holds one rank per GPU, the GPUs)."""
        return len(allocation.nodes) >= self.nodes and (allocation.gpus_per_node == 0 or allocation.gpus >= self.nproc)

    def spanned_by(self, runs: Iterable[Result]) -> tuple[bool, str]:
        """Whether every run of `runs` spans the setting (module doc), and why not (the first that
        does not: its workers, hosts or emulated network)."""
        runs = list(runs)
        if not runs:
            return False, "no run"
        for r in runs:
            hosts = r.hosts()
            if r.config.nproc < self.nproc:
                return False, f"{r.path.name}: {r.config.nproc} workers, fewer than {self.nproc}"
            if len(hosts) < self.nodes:
                return False, f"{r.path.name}: ranks on {len(hosts)} host(s) ({', '.join(hosts)}), fewer than {self.nodes}"
            if r.config.net:
                return False, f"{r.path.name}: an emulated network ({r.config.net})"
        return True, f"{len(runs)} runs of {self.describe()}"


def decided_at_setting(measured: Any) -> bool:
    """Whether a claims table's `measured` text says the claim was measured at the paper's setting."""
    return isinstance(measured, str) and measured.startswith(AT_SETTING)

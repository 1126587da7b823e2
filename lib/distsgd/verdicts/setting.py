"""The paper's setting a notebook's systems claims are about, and whether its runs span it.

A systems claim (a step time, a time to target at the paper's scale: a `proj_*` claim) is decided
one of two ways, by one registered test (`Test`: its form, side, threshold and source), the way
resolved from the run:

- **measured at the paper's setting** when the notebook's deciding runs span it (`PaperSetting.
  spanned_by`): each has at least the setting's workers (`nproc`), its ranks ran on at least the
  setting's `nodes` distinct hosts (each rank's pid file names its host), and it crossed the real
  network between them (no emulated network, `Config.net` empty); a benchmark's timings alike
  (`spanned_by_benchmark`: each row's workers, the hosts its group ran on, no emulation). The
  claim's interval is then the
  run's own (e.g. the distribution-free interval of a median over logged periods), and its
  `measured` text starts with `AT_SETTING`;
- **projected** otherwise: the simulator at the paper's setting, within its measured error band
  (`distsgd.verdicts.projection`).

A profile may name a stand-in setting (`PaperSetting.parse` of a notebook's ``paper_setting``
parameter): the rehearsal's three SLURM nodes count as the paper's setting there, and its small
model stands for the paper's models (`models`). Where the paper compares networks, the setting
names the one the real network between the nodes stands for (`net`); a claim on another network,
or on two, stays projected. Whether the allocation can span the setting is known before any run
(`reachable`, `can_run`), so a claim is prechecked "not covered" only where neither way can decide
it. A headline whose projected claims were all measured at the setting reads as measured
(`verdicts.headlines`).

A claim about a latency sweep (the paper's latencies, on one network) is measured at the setting
from runs on the real network and runs that add the sweep's highest latency on top of it
(`added_latency`: an emulated latency whose bandwidth term is negligible, so the transfer is the
real network's), which `spanned_by` admits where asked (`latency_added`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import pandas as pd

from ..comm.netmodel import parse_net
from ..errors import ConfigError
from ..training.allocation import Allocation
from ..training.results import Result

AT_SETTING = "measured at the paper's setting"      # how a claim's `measured` text starts when decided so
FIELDS = ("nproc", "nodes", "models", "net")
ADDED_LATENCY_BANDWIDTH = "1000Gbit"                # an emulated network that adds only its latency (`added_latency`)


@dataclass(frozen=True)
class PaperSetting:
    """At least `nproc` workers on at least `nodes` hosts over the real network between them; the
    notebook's own model stands for the paper's `models` (the claims of those models are measured)
    and the real network for the paper's `net` ('' where its claims name one network)."""

    nproc: int
    nodes: int
    models: tuple[str, ...] = ()
    net: str = ""

    def __post_init__(self) -> None:
        for name in ("nproc", "nodes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"paper_setting.{name}", value, "an integer >= 1")

    @classmethod
    def parse(cls, value: Mapping[str, Any] | None, nproc: int, nodes: int, models: Iterable[str],
              net: str = "", nets: Iterable[str] = ()) -> "PaperSetting":
        """The setting a notebook's ``paper_setting`` parameter names: a mapping of `FIELDS` (each
        optional), over the paper's own `nproc`, `nodes`, `models` and `net` (one of the paper's
        `nets`); {} or None is the paper's own. ConfigError naming a field not in `FIELDS`, or a
        `net` not among `nets`."""
        value = dict(value or {})
        unknown = sorted(set(value) - set(FIELDS))
        if unknown:
            raise ConfigError(f"paper_setting.{unknown[0]}", value[unknown[0]], f"one of {', '.join(FIELDS)}")
        nets = list(nets)
        if "net" in value and value["net"] not in nets:
            raise ConfigError("paper_setting.net", value["net"], nets or ["(none: the paper's claims name one network)"])
        return cls(value.get("nproc", nproc), value.get("nodes", nodes), tuple(value.get("models", models)),
                   value.get("net", net))

    def describe(self) -> str:
        """E.g. '3 workers on 3 nodes over the real network between them' (', standing for the
        paper's 10GbE' where it names `net`)."""
        return (f"{self.nproc} workers on {self.nodes} node{'s' * (self.nodes != 1)} over the real network between them"
                + (f", standing for the paper's {self.net}" if self.net else ""))

    def reachable(self, allocation: Allocation) -> bool:
        """Whether runs started from this process can span the setting, known before any run: the
        allocation has at least `nodes` nodes (and, where a node holds one rank per GPU, the GPUs)."""
        return len(allocation.nodes) >= self.nodes and (allocation.gpus_per_node == 0 or allocation.gpus >= self.nproc)

    def can_run(self, nproc: int, allocation: Allocation | None = None) -> bool:
        """Whether runs of `nproc` workers started from this process span the setting: at least its
        workers, and `allocation` (default: this process's, `Allocation.detect`) `reachable`. A
        notebook runs its measurements at the setting only where this holds."""
        return nproc >= self.nproc and self.reachable(allocation or Allocation.detect())

    def covers(self, model: str, net: str = "") -> bool:
        """Whether a claim about the paper's `model` on its network `net` ('' the paper's one) is
        measured where the runs span the setting: the setting names the model and that network."""
        return model in self.models and net == self.net

    def spanned_by(self, runs: Iterable[Result], latency_added: bool = False) -> tuple[bool, str]:
        """Whether every run of `runs` spans the setting (module doc), and why not (the first that
        does not: its workers, hosts or emulated network). With `latency_added`, a run may add an
        emulated latency on top of the real network (`added_latency`)."""
        runs = list(runs)
        if not runs:
            return False, "no run"
        for r in runs:
            short = self._short_of(r.path.name, r.config.nproc, r.hosts(), r.config.net, latency_added)
            if short:
                return False, short
        return True, f"{len(runs)} runs of {self.describe()}"

    def spanned_by_benchmark(self, rows: pd.DataFrame) -> tuple[bool, str]:
        """Whether every row of a benchmark (`systems.benchmark.bench_schedules`' columns: model,
        label, nproc, hosts, net) spans the setting as `spanned_by` asks of a run: at least its
        workers, on at least its hosts, on no emulated network; and why not (the first that does not)."""
        if rows.empty:
            return False, "no benchmark row"
        for r in rows.itertuples():
            short = self._short_of(f"{r.model} {r.label}", int(r.nproc), str(r.hosts).split(), str(r.net), False)
            if short:
                return False, short
        return True, f"a benchmark of {len(rows)} timings, {self.describe()}"

    def _short_of(self, name: str, nproc: int, hosts: list[str], net: str, latency_added: bool) -> str:
        """Why a measurement named `name` of `nproc` workers on `hosts` over `net` (an emulated
        network's spec, '' for the real one) does not span the setting; '' where it does."""
        if nproc < self.nproc:
            return f"{name}: {nproc} workers, fewer than {self.nproc}"
        if len(hosts) < self.nodes:
            return f"{name}: ranks on {len(hosts)} host(s) ({', '.join(hosts)}), fewer than {self.nodes}"
        if net and not (latency_added and adds_latency_only(net)):
            return f"{name}: an emulated network ({net})"
        return ""


def added_latency(latency: str) -> str:
    """The network spec that adds `latency` (e.g. '2000us') per message on top of the real network:
    bandwidth `ADDED_LATENCY_BANDWIDTH`, whose transfer term is negligible against the real one."""
    return f"{ADDED_LATENCY_BANDWIDTH},{latency}"


def adds_latency_only(net: str) -> bool:
    """Whether network spec `net` is one `added_latency` makes (its bandwidth `ADDED_LATENCY_BANDWIDTH`)."""
    model = parse_net(net)
    return model is not None and model.bandwidth_Bps >= parse_net(added_latency("0us")).bandwidth_Bps


def decided_at_setting(measured: Any) -> bool:
    """Whether a claims table's `measured` text says the claim was measured at the paper's setting."""
    return isinstance(measured, str) and measured.startswith(AT_SETTING)

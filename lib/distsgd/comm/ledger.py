"""The communication ledger: what every collective of one rank sent, and when it finished."""
from __future__ import annotations

import csv
import dataclasses
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

REDUCTIONS = ("all_reduce", "reduce_scatter", "reduce")


@dataclass
class Entry:
    """One collective as seen by this rank."""

    step: int
    kind: str
    scope: str            # "global" (all ranks) or "local" (a subgroup)
    nbytes: int           # size of the tensor the collective is defined on
    sent: int             # bytes this rank sends (netmodel.bytes_sent)
    group_size: int
    t_issue: float        # perf_counter() when issued (a GPU with a network model: when the device got there)
    modeled_s: float      # emulated network cost (0 without emulation)
    t_ready: float        # issue time + queueing + modeled cost: completion is not reported before
    t_done: float = 0.0   # when wait() returned
    wait_s: float = 0.0   # time this rank spent blocked in wait()


class Ledger:
    """Cumulative counters plus the full list of entries of one rank."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.bytes_sent = 0
        self.by_kind: Counter[str] = Counter()
        self.reductions: Counter[str] = Counter()   # by scope
        self.wait_s = 0.0

    def record(self, entry: Entry) -> Entry:
        self.entries.append(entry)
        self.bytes_sent += entry.sent
        self.by_kind[entry.kind] += 1
        if entry.kind in REDUCTIONS:
            self.reductions[entry.scope] += 1
        return entry

    def add_wait(self, entry: Entry, seconds: float) -> None:
        entry.wait_s += seconds
        self.wait_s += seconds

    def totals(self) -> dict[str, float]:
        """Cumulative counts for the metrics row of this rank."""
        return {
            "comm_bytes": self.bytes_sent,
            "collectives": sum(self.by_kind.values()),
            "global_reductions": self.reductions["global"],
            "local_reductions": self.reductions["local"],
            "comm_wait_s": self.wait_s,
        }

    def state_dict(self) -> list[dict[str, float | int | str]]:
        """Every entry as a plain dict (a checkpoint); the counters follow from them."""
        return [dataclasses.asdict(e) for e in self.entries]

    def load_state_dict(self, entries: list[dict[str, float | int | str]]) -> None:
        """Continue from the entries of `state_dict()` (on a ledger that recorded nothing yet)."""
        for fields in entries:
            entry = self.record(Entry(**fields))
            self.wait_s += entry.wait_s

    def write_csv(self, path: Path) -> None:
        fields = [f.name for f in dataclasses.fields(Entry)]
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=fields)
            w.writeheader()
            for e in self.entries:
                w.writerow(dataclasses.asdict(e))

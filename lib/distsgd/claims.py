"""The claims table that ends every notebook: the paper's claim, what this run measured, and
whether it holds. Every row is computed from the run; `check()` asserts them all."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

NOT_REPRODUCED = "not reproduced at this scale"


@dataclass
class Claims:
    """Collects rows, shows them as a table, writes claims.csv, and asserts them."""

    rows: list[dict] = field(default_factory=list)

    def add(self, claim: str, paper: str, measured: str, holds: bool) -> bool:
        """One checked claim: `paper` is what the paper reports (or states), `measured` what this
        run gave, `holds` whether the measured value supports the claim."""
        self.rows.append({"claim": claim, "paper": paper, "measured": measured,
                          "holds": bool(holds)})
        return bool(holds)

    def not_reproduced(self, claim: str, paper: str, reason: str) -> None:
        """A claim this scale cannot show: kept in the table with the reason, not asserted."""
        self.rows.append({"claim": claim, "paper": paper,
                          "measured": f"{NOT_REPRODUCED}: {reason}", "holds": None})

    def table(self) -> pd.DataFrame:
        return pd.DataFrame(self.rows, columns=["claim", "paper", "measured", "holds"])

    def save(self, directory: Path) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "claims.csv"
        self.table().to_csv(path, index=False)
        return path

    def check(self) -> None:
        """Raise AssertionError listing every checked claim that does not hold."""
        failed = [r for r in self.rows if r["holds"] is False]
        if failed:
            lines = "\n".join(f"- {r['claim']}: measured {r['measured']} (paper: {r['paper']})"
                              for r in failed)
            raise AssertionError(f"{len(failed)} claim(s) do not hold:\n{lines}")

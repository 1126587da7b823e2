"""The claims table that ends every notebook: the paper's claim, what this run measured, and
whether it holds. Every row is computed from the run; `check()` asserts them all."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

NOT_REPRODUCED = "not reproduced"


def accuracy_resolution(accuracy: float, n: int) -> float:
    """Two standard errors, in accuracy points (0-100), of the difference of two accuracies near
    `accuracy`, each measured on the same `n` test examples (binomial). A difference smaller
    than this cannot be told from evaluation noise, so claims finer than it cannot be shown."""
    return 200 * (2 * accuracy * (1 - accuracy) / n) ** 0.5


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

    def not_reproduced(self, claim: str, paper: str, reason: str,
                       because: str = "at this scale") -> None:
        """A claim this run cannot show (`because` says why in general: too small a scale, a
        reconstructed rule, ...): kept in the table with the measured values in `reason`, not
        asserted."""
        self.rows.append({"claim": claim, "paper": paper,
                          "measured": f"{NOT_REPRODUCED} {because}: {reason}", "holds": None})

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

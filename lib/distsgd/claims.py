"""The claims table that ends every notebook: the paper's claim, what this run measured, and
whether it holds. Every row is computed from the run; `check()` asserts them all."""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

NOT_REPRODUCED = "not reproduced"


def accuracy_resolution(accuracy: float, n: int) -> float:
    """Two standard errors, in accuracy points (0-100), of the difference of two accuracies near
    `accuracy`, each measured on the same `n` test examples (binomial). A difference smaller
    than this cannot be told from evaluation noise, so claims finer than it cannot be shown."""
    return 200 * (2 * accuracy * (1 - accuracy) / n) ** 0.5


def median_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of `values`: the order statistics
    x_(k) and x_(n+1-k) with the largest k whose coverage 1 - 2 P(Binomial(n, 1/2) <= k - 1)
    is at least `level` (n = 9 at 0.95: x_(2), x_(8), coverage 0.961). Outliers move it little,
    unlike an interval from the standard deviation. With too few values for `level` (n < 6 at
    0.95) it is the whole range, whose coverage 1 - 2^(1-n) is then below `level`."""
    x = sorted(values)
    n = len(x)
    if n == 0:
        raise ValueError("median_interval needs at least one value")

    def coverage(k: int) -> float:
        return 1 - 2 * sum(math.comb(n, i) for i in range(k)) / 2 ** n

    k = 1
    while k < (n + 1) // 2 and coverage(k + 1) >= level:
        k += 1
    return x[k - 1], x[n - k]


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

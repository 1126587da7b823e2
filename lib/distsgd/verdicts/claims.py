"""The claims table that ends every notebook: registered tests, measurements, verdicts.

Each paper claim comes with a test fixed before the run, what this run measured, and a verdict
that can fail.

A claim is *registered* before the runs (`Claims.register`): the quantity it is about, the side of
a threshold on which it holds, and the statistic whose interval decides it (a `Test`). After the
runs it is *decided* (`Claims.decide`) from that interval:

* ``reproduced``   the interval lies on the claim's side of the threshold;
* ``contradicted`` the interval lies on the other side;
* ``inconclusive`` the interval contains the threshold, or a condition checked before the claim's
  own measurement (`Claims.precheck`: the experiment's resolution is coarser than the claimed
  effect, a machine cannot run the measurement) says it cannot be decided.

Identities that hold by construction (bytes from declared wire formats, 1 - 1/K reductions,
identical trajectories of lossless schedules) are *invariants* (`Claims.invariant`): asserted
always, shown in their own table, never counted as reproduced claims.

The registered tests are written down before any run (`Claims.preregister`, in the notebook's
registration cell): ``reproduce/registered/<profile>/<notebook>.json``, committed for the quick
profile. A later run whose tests differ from that file fails before its first run, and no claim is
decided without a registration; a new test is a new registration (delete the file, or register
elsewhere with ``DISTSGD_REGISTERED=<folder>``), visible in the history.

`Claims.check` asserts the invariants, that every registered claim was decided, and that every
verdict equals the expected-verdict ledger ``reproduce/expected/<profile>.csv`` (`ledger`), whose
`why` column is generated from the committed run (`report.ledger_why`).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from .verdict import CONTRADICTED, INCONCLUSIVE, REPRODUCED, VERDICTS

CLAIM_COLUMNS = ["id", "claim", "paper", "test", "estimate", "low", "high", "measured", "verdict", "reason"]
INVARIANT_COLUMNS = ["invariant", "expected", "measured", "holds"]
LEVEL = 0.95
PROJECTED_PREFIX = "proj_"                 # the id of every projected claim (projection.register)
REGISTERED_ENV = "DISTSGD_REGISTERED"     # a folder for this run's registrations instead of the committed one
TEST_FIELDS = ("quantity", "side", "threshold", "statistic")


class RegistrationError(RuntimeError):
    """A claim's test differs from (or is missing in) its registration written before the runs."""


# --------------------------------------------------------------------------- intervals (scipy.stats)


def welch_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Confidence interval of mean(a) - mean(b) from independent samples (Welch's t, unequal
    variances). Needs at least two values in each sample."""
    ci = stats.ttest_ind(np.asarray(a, float), np.asarray(b, float), equal_var=False).confidence_interval(level)
    return float(ci.low), float(ci.high)


def paired_interval(a: Sequence[float], b: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Confidence interval of the mean of a - b over pairs that share a seed (paired t)."""
    ci = stats.ttest_rel(np.asarray(a, float), np.asarray(b, float)).confidence_interval(level)
    return float(ci.low), float(ci.high)


def mean_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """Confidence interval of the mean of `values` (one-sample t)."""
    ci = stats.ttest_1samp(np.asarray(values, float), 0.0).confidence_interval(level)
    return float(ci.low), float(ci.high)


def paired_accuracy_interval(a: Sequence[Sequence[float]], b: Sequence[Sequence[float]],
                             level: float = LEVEL) -> tuple[float, float]:
    """Interval, in accuracy points (0-100), of accuracy(a) - accuracy(b) from paired per-example
    results: `a[s][i]`, `b[s][i]` whether method a's and b's models of seed s classify test
    example i correctly (0/1, or a fraction of ranks; `Result.test_correct`), every seed on the
    same test examples.

    The differences x[s, i] = a[s][i] - b[s][i] form a seeds x examples table (two crossed random
    factors: the training seed and the test example). Its grand mean D estimates the difference of
    accuracies; Var(D) = sigma_seed^2 / S + sigma_example^2 / N + sigma_residual^2 / (S N) is
    bounded above by var(seed means) / S + var(example means) / N (the residual counted twice), which
    is used, with Satterthwaite's degrees of freedom and `scipy.stats.t`. Pairing removes every
    example both methods get right or wrong alike, so the interval is far narrower than that of two
    accuracies compared as independent samples (a 1-point difference near 95% on 1,000 images:
    about ±0.9 points over 5 seeds against ±1.9 unpaired). Needs two seeds or more (ValueError)."""
    x = np.asarray(a, float) - np.asarray(b, float)
    if x.ndim != 2 or x.shape[0] < 2 or x.shape[1] < 2:
        raise ValueError(f"paired_accuracy_interval needs seeds x examples with two or more of each, got {x.shape}")
    seeds, examples = x.shape
    v_seed = x.mean(axis=1).var(ddof=1) / seeds
    v_example = x.mean(axis=0).var(ddof=1) / examples
    se = math.sqrt(v_seed + v_example)
    d = float(x.mean())
    if se == 0:
        return 100 * d, 100 * d
    df = (v_seed + v_example) ** 2 / (v_seed ** 2 / (seeds - 1) + v_example ** 2 / (examples - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df)) * se
    return 100 * (d - half), 100 * (d + half)


def paired_accuracy_resolution(accuracy: float, n: int, seeds: int, level: float = LEVEL) -> float:
    """Expected half-width, in points, of `paired_accuracy_interval` for two methods of equal
    accuracy near `accuracy` on `n` test examples over `seeds` seeds, known before any run: each
    seed's two models disagree on at most 2 (1 - accuracy) of the examples (their errors on
    different examples), and a model's errors are assumed to fall on examples drawn anew by each
    seed, so an example's mean difference over seeds has variance 2 (1 - accuracy) / seeds. State a
    precheck where this is coarser than the claimed effect."""
    return 100 * float(stats.norm.ppf(0.5 + level / 2)) * math.sqrt(2 * (1 - accuracy) / (n * seeds))


def median_interval(values: Sequence[float], level: float = LEVEL) -> tuple[float, float]:
    """A distribution-free confidence interval for the median of `values` (`scipy.stats.
    quantile_test`: order statistics, e.g. x_(2), x_(8) for n = 9 at 0.95). Outliers move it
    little, unlike an interval from the standard deviation. With too few values for `level`
    (n < 6 at 0.95) it is the whole range."""
    x = np.sort(np.asarray(values, float))
    if len(x) == 0:
        raise ValueError("median_interval needs at least one value")
    ci = stats.quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(level)
    lo = x[0] if not np.isfinite(ci.low) else ci.low
    hi = x[-1] if not np.isfinite(ci.high) else ci.high
    return float(lo), float(hi)


def interval_or_nan(helper: Callable[..., tuple[float, float]], *values: object) -> tuple[float, float]:
    """`helper(*values)` (one of the intervals above), or (nan, nan) where the values cannot give
    an interval, as after a dry run's 2 steps (no logged period for a median: ValueError; an empty
    series: IndexError; a ratio over nothing: ZeroDivisionError): the claim is then decided
    inconclusive instead of the notebook failing. Any other error propagates."""
    try:
        return helper(*values)
    except (ValueError, IndexError, ZeroDivisionError):
        return float("nan"), float("nan")


# --------------------------------------------------------------------------- the pre-registered test


@dataclass(frozen=True)
class Test:
    """A claim's test, fixed before the run: the claim holds when `quantity` lies on `side` of
    `threshold`, judged on the `statistic`'s interval (95% unless it says otherwise)."""

    __test__ = False    # not a pytest test class

    quantity: str
    side: str           # ">=" or "<=": the claim's side of the threshold
    threshold: float
    statistic: str

    def __post_init__(self) -> None:
        if self.side not in (">=", "<="):
            raise ValueError(f"Test.side must be '>=' or '<=', got {self.side!r}")

    def verdict(self, low: float, high: float) -> str:
        """reproduced / contradicted / inconclusive for an interval [low, high] of the quantity."""
        if not (math.isfinite(low) and math.isfinite(high)):
            return INCONCLUSIVE
        if self.side == ">=":
            return REPRODUCED if low >= self.threshold else CONTRADICTED if high < self.threshold else INCONCLUSIVE
        return REPRODUCED if high <= self.threshold else CONTRADICTED if low > self.threshold else INCONCLUSIVE

    def __str__(self) -> str:
        return f"{self.quantity} {self.side} {self.threshold:g} ({self.statistic})"


@dataclass
class Claim:
    id: str
    claim: str
    paper: str
    test: Test
    precheck: str | None = None       # why it cannot be decided, known before its measurement
    estimate: float | None = None
    low: float | None = None
    high: float | None = None
    measured: str = ""
    verdict: str | None = None
    reason: str = ""


# --------------------------------------------------------------------------- the table


@dataclass
class Claims:
    """One notebook's claims (registered before the runs, decided after) and invariants."""

    notebook: str
    claims: dict[str, Claim] = field(default_factory=dict)
    invariants: list[dict] = field(default_factory=list)
    preregistered: bool = False

    def register(self, id: str, claim: str, paper: str, test: Test) -> None:
        """Fix a claim's test before the run. `paper` is what the paper reports or states."""
        if id in self.claims:
            raise ValueError(f"claim {id!r} is registered twice")
        if self.preregistered:
            raise RegistrationError(f"claim {id!r} is registered after preregister(): register every claim "
                                    f"before the notebook's first run, then call preregister()")
        self.claims[id] = Claim(id, claim, paper, test)

    def registered_tests(self) -> dict[str, dict]:
        """{claim id: its claim, paper and test fields}, as `preregister` writes them."""
        return {c.id: {"claim": c.claim, "paper": c.paper, "quantity": c.test.quantity, "side": c.test.side,
                       "threshold": c.test.threshold, "statistic": c.test.statistic} for c in self.claims.values()}

    def preregister(self, dry_run: bool = False, folder: Path | None = None) -> Path | None:
        """Write the registered tests down before any run, or hold them against the registration
        already written: ``<folder>/<notebook>.json`` (`registration_folder`: $DISTSGD_REGISTERED,
        else ``reproduce/registered/<profile>``). A file that exists is never rewritten; a test that
        differs from it, or a claim it lacks or has in excess, raises `RegistrationError` naming
        them, before the first run. A dry run (claims computed, not asserted) writes and compares
        nothing. Returns the file (None in a dry run). `decide` refuses claims before this."""
        self.preregistered = True
        if dry_run:
            return None
        path = (folder or registration_folder()) / f"{self.notebook}.json"
        tests = self.registered_tests()
        if not path.is_file():
            from ..files import write_text_atomic

            write_text_atomic(path, json.dumps({"notebook": self.notebook, "tests": tests}, indent=1) + "\n")
            print(f"{len(tests)} tests registered in {path}")
        else:
            problems = registration_differences(tests, json.loads(path.read_text())["tests"])
            if problems:
                raise RegistrationError(
                    f"{self.notebook}: the tests differ from their registration {path}:\n" + "\n".join(problems)
                    + f"\nA changed test is a new registration: delete {path.name} (the change shows in the "
                    f"history), or register this run's tests elsewhere with {REGISTERED_ENV}=<folder>.")
        return path

    def precheck(self, id: str, reason: str) -> None:
        """Mark a claim inconclusive for a reason checked before its own measurement is looked at
        (a resolution coarser than the claimed effect, a machine condition). Its measurement is
        still recorded by `decide`, and shown, but does not decide it."""
        c = self._get(id)
        if c.verdict is not None:
            raise RuntimeError(f"claim {id!r} was already decided: a precheck must come before its measurement")
        c.precheck = reason

    def decide(self, id: str, low: float, high: float, estimate: float, measured: str = "") -> str:
        """Decide a registered claim from its interval [low, high] and point estimate; `measured`
        adds the values a reader needs (per-seed numbers, the baseline's value). Returns the verdict."""
        c = self._get(id)
        if not self.preregistered:
            raise RegistrationError(f"claim {id!r} is decided before its notebook's tests were written down: "
                                    f"call claims.preregister() after the registrations, before the first run")
        if c.verdict is not None:
            raise RuntimeError(f"claim {id!r} is decided twice")
        c.low, c.high, c.estimate, c.measured = float(low), float(high), float(estimate), measured
        where = f"{c.test.quantity} = {estimate:.4g}, interval [{low:.4g}, {high:.4g}]"
        if c.precheck:
            c.verdict, c.reason = INCONCLUSIVE, f"precheck: {c.precheck}"
        else:
            c.verdict = c.test.verdict(c.low, c.high)
            c.reason = {REPRODUCED: f"{where} on the claim's side of {c.test.threshold:g}",
                        CONTRADICTED: f"{where} on the other side of {c.test.threshold:g}",
                        INCONCLUSIVE: f"{where} contains {c.test.threshold:g}"}[c.verdict]
            if not (math.isfinite(c.low) and math.isfinite(c.high)):
                c.reason = f"{c.test.quantity} = {estimate:.4g}, no interval (too few values for one)"
        return c.verdict

    def decide_mean(self, id: str, values: Sequence[float], unit: str, fmt: str = "{:+.3f}") -> str:
        """Decide a claim whose quantity is one value per seed, from the t interval of their mean
        (`mean_interval` over the finite values; no interval with fewer than two). `measured` lists
        every seed's value (`fmt`, `unit`), NaN included. Returns the verdict."""
        v = np.asarray(values, float)
        finite = v[np.isfinite(v)]
        low, high = mean_interval(finite) if len(finite) >= 2 else (math.nan, math.nan)
        estimate = float(finite.mean()) if len(finite) else math.nan
        return self.decide(id, low, high, estimate, f"{unit} per seed: " + ", ".join(fmt.format(x) for x in v))

    def decide_paired_accuracy(self, id: str, correct: Sequence[Sequence[float]], baseline: Sequence[Sequence[float]],
                               label: str, baseline_label: str) -> str:
        """Decide a claim on accuracy(correct) - accuracy(baseline), in points, from per-example
        results of the same seeds on the same test examples (`paired_accuracy_interval`; no
        interval with fewer than two seeds): `correct[s]`, `baseline[s]` are seed s's
        `Result.test_correct()`. `measured` gives both mean accuracies and every seed's
        difference. Returns the verdict."""
        a, b = np.asarray(correct, float), np.asarray(baseline, float)
        low, high = interval_or_nan(paired_accuracy_interval, a, b)
        per_seed = ", ".join(f"{100 * (x.mean() - y.mean()):+.1f}" for x, y in zip(a, b))
        return self.decide(id, low, high, 100 * float(a.mean() - b.mean()),
                           f"{label} {100 * a.mean():.2f}% vs {baseline_label} {100 * b.mean():.2f}% (mean of "
                           f"{len(a)} seeds, {a.shape[-1]} test images); per seed {per_seed} points")

    def invariant(self, name: str, expected: str, measured: str, holds: bool) -> bool:
        """An identity that holds by construction: asserted by `check`, not a reproduced claim."""
        self.invariants.append({"invariant": name, "expected": expected, "measured": measured,
                                "holds": bool(holds)})
        return bool(holds)

    def _get(self, id: str) -> Claim:
        if id not in self.claims:
            raise KeyError(f"claim {id!r} was not registered; registered: {', '.join(self.claims)}")
        return self.claims[id]

    # ----------------------------------------------------------------------- output

    def table(self) -> pd.DataFrame:
        rows = [{"id": c.id, "claim": c.claim, "paper": c.paper, "test": str(c.test), "estimate": c.estimate,
                 "low": c.low, "high": c.high, "measured": c.measured, "verdict": c.verdict, "reason": c.reason}
                for c in self.claims.values()]
        return pd.DataFrame(rows, columns=CLAIM_COLUMNS)

    def invariants_table(self) -> pd.DataFrame:
        return pd.DataFrame(self.invariants, columns=INVARIANT_COLUMNS)

    def view(self) -> "pd.io.formats.style.Styler":
        """The claims table for reading in a notebook: verdict first, every text in full (wrapped,
        not cut at pandas' 50 characters), the verdict coloured."""
        cols = ["verdict", "claim", "measured", "reason", "test", "paper", "id"]
        return readable(self.table()[cols])

    def headline(self) -> "pd.io.formats.style.Styler":
        """This notebook's row of the headline table (`distsgd.verdicts.headlines`): the paper's headline
        claim as its abstract states it, how the kit tests it, and the verdict of this run's claims."""
        from .headlines import headline_table

        return readable(headline_table(self.table().assign(notebook=self.notebook)).drop(columns="notebook"))

    def save(self, directory: Path) -> Path:
        """Write claims.csv (and invariants.csv when there are invariants) into `directory`."""
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "claims.csv"
        self.table().to_csv(path, index=False)
        inv = directory / "invariants.csv"
        if self.invariants:
            self.invariants_table().to_csv(inv, index=False)
        elif inv.exists():
            inv.unlink()
        return path

    def check(self, ledger: pd.DataFrame | None = None) -> None:
        """Assert every invariant, that every claim was decided, and that every verdict is the
        ledger's (`ledger` defaults to the one of $DISTSGD_PROFILE, else quick; a profile without
        a ledger asserts no verdict)."""
        problems = [f"- invariant {r['invariant']!r} does not hold: measured {r['measured']} "
                    f"(expected {r['expected']})" for r in self.invariants if not r["holds"]]
        problems += [f"- claim {c.id!r} was registered but never decided" for c in self.claims.values()
                     if c.verdict is None]
        if ledger is None:
            ledger = load_ledger(os.environ.get("DISTSGD_PROFILE", "quick"))
        if ledger is not None:
            problems += ledger_mismatches(self.notebook, self.table(), ledger)
        if problems:
            raise AssertionError(f"{self.notebook}: {len(problems)} problem(s):\n" + "\n".join(problems))


def is_projected(claim_id: str) -> bool:
    """Whether a claim is decided by the simulator at a paper's setting rather than measured here."""
    return claim_id.startswith(PROJECTED_PREFIX)


VERDICT_COLOURS = {REPRODUCED: "#d4edda", CONTRADICTED: "#f8d7da", INCONCLUSIVE: "#fff3cd"}


def readable(table: pd.DataFrame) -> "pd.io.formats.style.Styler":
    """`table` styled for a notebook: no index, text wrapped in full and left-aligned, a `verdict`
    column coloured by verdict. A token longer than a column's 12-character minimum (a claim id,
    "(paired_accuracy_interval)") may break anywhere, so that the table fits the page's width
    (JupyterLab in Chromium at 1280 px: `reproduce/browser_check.py`)."""
    style = (table.style.hide(axis="index")
             .set_properties(**{"white-space": "pre-wrap", "overflow-wrap": "anywhere", "min-width": "12ch",
                                "text-align": "left", "vertical-align": "top"})
             .set_table_styles([{"selector": "th", "props": [("text-align", "left")]}]))
    if "verdict" in table.columns:
        style = style.map(lambda v: f"background-color: {VERDICT_COLOURS[v]}" if v in VERDICT_COLOURS else "",
                          subset=["verdict"])
    return style


# --------------------------------------------------------------------------- the registrations


def registration_folder() -> Path:
    """Where `Claims.preregister` writes and finds registrations: $DISTSGD_REGISTERED, else
    ``reproduce/registered/<profile>`` ($DISTSGD_PROFILE, else quick)."""
    if os.environ.get(REGISTERED_ENV):
        return Path(os.environ[REGISTERED_ENV])
    from ..paths import repo_root
    return repo_root() / "reproduce" / "registered" / os.environ.get("DISTSGD_PROFILE", "quick")


def registration_differences(tests: dict[str, dict], registered: dict[str, dict]) -> list[str]:
    """Where a notebook's tests differ from their registration: a test field (`TEST_FIELDS`) that
    changed, a claim not registered, a registered claim no longer there."""
    problems = [f"- claim {i!r} is not in the registration" for i in tests if i not in registered]
    problems += [f"- registered claim {i!r} is no longer registered by the notebook" for i in registered if i not in tests]
    for i in tests.keys() & registered.keys():
        for f in TEST_FIELDS:
            now, then = tests[i][f], registered[i][f]
            same = math.isclose(now, then, rel_tol=1e-12) if f == "threshold" else now == then
            if not same:
                problems.append(f"- claim {i!r}: {f} {now!r}, registered {then!r}")
    return problems


# --------------------------------------------------------------------------- the expected-verdict ledger

LEDGER_COLUMNS = ["notebook", "id", "verdict", "why"]


def ledger_path(profile: str) -> Path:
    from ..paths import repo_root
    return repo_root() / "reproduce" / "expected" / f"{profile}.csv"


def load_ledger(profile: str) -> pd.DataFrame | None:
    """The expected verdicts of a profile, or None where the profile has no ledger. A verdict
    may list alternatives ("reproduced|inconclusive") for a claim whose machine precheck can go
    either way; `why` says so."""
    path = ledger_path(profile)
    if not path.is_file():
        return None
    ledger = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = set(LEDGER_COLUMNS) - set(ledger.columns)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}; expected {LEDGER_COLUMNS}")
    for v in ledger.verdict:
        bad = set(v.split("|")) - set(VERDICTS)
        if bad:
            raise ValueError(f"{path}: verdict {v!r} is not one of {VERDICTS} (alternatives joined by '|')")
    return ledger


def ledger_mismatches(notebook: str, table: pd.DataFrame, ledger: pd.DataFrame) -> list[str]:
    """Where a notebook's claims table and the ledger disagree: a verdict that differs (either
    direction), a claim the ledger lacks, a ledger row no claim answers."""
    expected = {r.id: r for r in ledger[ledger.notebook == notebook].itertuples()}
    problems = []
    for row in table.itertuples():
        exp = expected.pop(row.id, None)
        if exp is None:
            problems.append(f"- claim {row.id!r} ({row.verdict}) is not in the ledger")
        elif row.verdict not in exp.verdict.split("|"):
            problems.append(f"- claim {row.id!r}: verdict {row.verdict}, ledger expects {exp.verdict} "
                            f"({exp.why}); {row.reason}")
    problems += [f"- ledger row {i!r} ({e.verdict}) has no claim in the notebook" for i, e in expected.items()]
    return problems

"""The claims table that ends every notebook: registered tests, measurements, verdicts.

Each paper claim comes with a test fixed before the run, what this run measured, and a verdict
that can fail.

A claim is *registered* before the runs (`Claims.register`): the quantity it is about, the claim's
form (`FORMS`: a rate, as good as, better than, up to X), the side of a threshold on which it holds,
where that threshold comes from (the paper's number, a pilot's seed spread, or the claim's own null)
and the statistic whose interval decides it (a `Test`). After the runs it is *decided*
(`Claims.decide`) from that interval:

* ``reproduced``   the interval lies on the claim's side of the threshold (strictly beyond it for a
  *better than* claim, so that a method equal to its baseline never reproduces it);
* ``contradicted`` the interval lies on the other side;
* ``inconclusive`` the interval contains the threshold, or a condition checked before the claim's
  own measurement (`Claims.precheck`, or the registration's `undecidable`: the pilot shows that
  this budget cannot decide it) says it cannot be decided.

Identities that hold by construction (bytes from declared wire formats, 1 - 1/K reductions,
identical trajectories of lossless schedules) are *invariants* (`Claims.invariant`): asserted
always, shown in their own table, never counted as reproduced claims.

The registered tests are written down by a step of their own before the deciding runs
(`distsgd.verdicts.registration`: ``reproduce/run.py --register``, logged); a notebook's run holds
itself to them (`Claims.preregister`, in the notebook's registration cell) and never writes them.

`Claims.check` asserts the invariants, that every registered claim was decided, and that every
verdict equals the expected-verdict ledger ``reproduce/expected/<profile>.csv`` (`ledger`), whose
`why` column is generated from the committed run (`report.ledger_why`).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

from . import registration
from .registration import REGISTERED_ENV, TEST_FIELDS, RegistrationError, registration_folder
from .verdict import CONTRADICTED, INCONCLUSIVE, REPRODUCED, VERDICTS

CLAIM_COLUMNS = ["id", "claim", "paper", "test", "estimate", "low", "high", "measured", "verdict", "reason"]
INVARIANT_COLUMNS = ["invariant", "expected", "measured", "holds"]
LEVEL = 0.95
PROJECTED_PREFIX = "proj_"                 # the id of every projected claim (projection.register)
FORMS = {
    "rate": "a rate: a slope (log gap against log T, or against log N) compared with a margin",
    "non-inferiority": "as good as: the interval on the claim's side of a stated margin",
    "superiority": "better than: the interval strictly beyond the threshold, after a precheck of the premise",
    "up-to": "up to X: the kit's estimate against the paper's X",
}
SOURCES = ("paper:", "pilot:", "null:")    # a threshold's source: the paper's number, a pilot's spread, the claim's null


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
    `threshold`, judged on the `statistic`'s interval (95% unless it says otherwise). `form` is the
    claim's form (a key of `FORMS`); `source` says where the threshold comes from, starting with one
    of `SOURCES`: "paper: <its table, figure or sentence, with the number>", "pilot: <the registered
    pilot's statistic>", or "null: <the claim's own null, e.g. no difference>"."""

    __test__ = False    # not a pytest test class

    quantity: str
    side: str           # ">=" or "<=": the claim's side of the threshold
    threshold: float
    statistic: str
    form: str
    source: str

    def __post_init__(self) -> None:
        if self.side not in (">=", "<="):
            raise ValueError(f"Test.side must be '>=' or '<=', got {self.side!r}")
        if self.form not in FORMS:
            raise ValueError(f"Test.form must be one of {', '.join(FORMS)}, got {self.form!r}")
        if not self.source.startswith(SOURCES) or not self.source.split(":", 1)[1].strip():
            raise ValueError(f"Test.source must start with one of {', '.join(SOURCES)} and say where "
                             f"{self.threshold:g} comes from, got {self.source!r}")

    def verdict(self, low: float, high: float) -> str:
        """reproduced / contradicted / inconclusive for an interval [low, high] of the quantity. A
        superiority test reproduces only strictly beyond the threshold."""
        if not (math.isfinite(low) and math.isfinite(high)):
            return INCONCLUSIVE
        strict = self.form == "superiority"
        if self.side == ">=":
            holds = low > self.threshold if strict else low >= self.threshold
            return REPRODUCED if holds else CONTRADICTED if high < self.threshold else INCONCLUSIVE
        holds = high < self.threshold if strict else high <= self.threshold
        return REPRODUCED if holds else CONTRADICTED if low > self.threshold else INCONCLUSIVE

    def __str__(self) -> str:
        return (f"{self.form}: {self.quantity} {self.side} {self.threshold:g} ({self.statistic}); "
                f"threshold from {self.source}")


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
    pilot_claims: list[str] | None = None   # the claims whose power the registered pilot gives (None: all)

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
        return {c.id: {"claim": c.claim, "paper": c.paper, **{f: getattr(c.test, f) for f in TEST_FIELDS}}
                for c in self.claims.values()}

    def preregister(self, dry_run: bool = False, folder: Path | None = None,
                    design: Mapping[str, Any] | None = None) -> Path | None:
        """Hold the registered tests and the `design` (the deciding seeds and run length) to their
        registration ``<folder>/<notebook>.json`` (`registration_folder`) before any run: none, or a
        test, claim or design entry that differs, raises `RegistrationError` naming them. A claim the
        registration calls undecidable is prechecked with its reason. The registration step
        (``reproduce/run.py --register``, `registration.staging_file`) stages the registration with
        the pilot's power instead, and the notebook stops there. A dry run (claims computed, not
        asserted) compares nothing. Only the claims in `pilot_claims` take their power from the pilot
        (None: every claim its table decides). Returns the registration (None in a dry run). `decide`
        refuses claims before this."""
        self.preregistered = True
        if dry_run:
            return None
        design = dict(design or {})
        staging = registration.staging_file()
        if staging is not None:
            from ..files import write_text_atomic

            reg = registration.record(self.notebook, self.registered_tests(), design,
                                      registration.read_pilot(self.notebook),
                                      {c.id: c.test for c in self.claims.values()}, only=self.pilot_claims)
            write_text_atomic(staging, json.dumps(reg, indent=1, ensure_ascii=False) + "\n")
            print(f"{len(reg['tests'])} tests staged for registration in {staging}")
            return staging
        path = (folder or registration_folder()) / f"{self.notebook}.json"
        if not path.is_file():
            raise RegistrationError(
                f"{self.notebook}: no registration {path}. Register the tests before the deciding runs: "
                f"python reproduce/run.py --register --only {self.notebook} --why '...' --seen no")
        registered = json.loads(path.read_text())
        problems = registration.differences(self.registered_tests(), design, registered)
        if problems:
            raise RegistrationError(
                f"{self.notebook}: the tests differ from their registration {path}:\n" + "\n".join(problems)
                + f"\nA changed test is a new registration, logged with why and whether the deciding runs "
                f"were seen: python reproduce/run.py --register --only {self.notebook} --why '...' --seen yes|no")
        for id, t in registered["tests"].items():
            if t.get("undecidable"):
                self.precheck(id, f"registered undecidable here: {t['undecidable']}")
        return path

    def precheck(self, id: str, reason: str) -> None:
        """Mark a claim inconclusive for a reason checked before its own measurement is looked at
        (a resolution coarser than the claimed effect, a machine condition). Its measurement is
        still recorded by `decide`, and shown, but does not decide it. Several prechecks of one
        claim keep every reason."""
        c = self._get(id)
        if c.verdict is not None:
            raise RuntimeError(f"claim {id!r} was already decided: a precheck must come before its measurement")
        c.precheck = f"{c.precheck}; {reason}" if c.precheck else reason

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
        a ledger asserts no verdict). A verdict against a ledger row `NOT_YET_RUN` is printed, not
        asserted."""
        problems = [f"- invariant {r['invariant']!r} does not hold: measured {r['measured']} "
                    f"(expected {r['expected']})" for r in self.invariants if not r["holds"]]
        problems += [f"- claim {c.id!r} was registered but never decided" for c in self.claims.values()
                     if c.verdict is None]
        if ledger is None:
            ledger = load_ledger(os.environ.get("DISTSGD_PROFILE", "quick"))
        if ledger is not None:
            problems += ledger_mismatches(self.notebook, self.table(), ledger)
            first = [d for d in ledger_differences(self.notebook, self.table(), ledger) if not d.fails]
            if first:
                print(f"{len(first)} ledger row(s) read {NOT_YET_RUN!r} (reported, not asserted), this run: "
                      + ", ".join(f"{d.id} {d.run}" for d in first))
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


# --------------------------------------------------------------------------- the expected-verdict ledger

LEDGER_COLUMNS = ["notebook", "id", "verdict", "why"]
# A ledger row of a profile whose deciding runs have not been made (the full profile at the papers'
# scale): the claim's verdict is reported beside it, never failed.
NOT_YET_RUN = "not yet run"
NOT_IN_LEDGER, NOT_IN_RUN = "(not in the ledger)", "(not in this run)"


def ledger_path(profile: str) -> Path:
    from ..paths import repo_root
    return repo_root() / "reproduce" / "expected" / f"{profile}.csv"


def load_ledger(profile: str) -> pd.DataFrame | None:
    """The expected verdicts of a profile, or None where the profile has no ledger. A verdict
    may list alternatives ("reproduced|inconclusive") for a claim whose machine precheck can go
    either way; `why` says so. A row may also read `NOT_YET_RUN` (alone): no run has decided it."""
    path = ledger_path(profile)
    if not path.is_file():
        return None
    ledger = pd.read_csv(path, dtype=str, keep_default_na=False)
    missing = set(LEDGER_COLUMNS) - set(ledger.columns)
    if missing:
        raise ValueError(f"{path}: missing column(s) {sorted(missing)}; expected {LEDGER_COLUMNS}")
    for v in ledger.verdict:
        if v != NOT_YET_RUN and set(v.split("|")) - set(VERDICTS):
            raise ValueError(f"{path}: verdict {v!r} is not one of {VERDICTS} (alternatives joined by '|') "
                             f"or {NOT_YET_RUN!r}")
    return ledger


@dataclass(frozen=True)
class LedgerDifference:
    """A claim whose verdict is not the ledger's: `ledger` is the expected verdict (`NOT_IN_LEDGER`
    for a claim the ledger lacks), `run` this run's (`NOT_IN_RUN` for a ledger row no claim answers).
    `fails`: False only against a `NOT_YET_RUN` row, which is reported, never failed."""

    id: str
    ledger: str
    run: str
    why: str = ""
    reason: str = ""

    @property
    def fails(self) -> bool:
        return self.ledger != NOT_YET_RUN


def ledger_differences(notebook: str, table: pd.DataFrame, ledger: pd.DataFrame) -> list[LedgerDifference]:
    """Where a notebook's claims table (columns id, verdict and, where present, reason) and the ledger
    disagree: a verdict that differs (either direction; any verdict differs from `NOT_YET_RUN`), a
    claim the ledger lacks, a ledger row no claim answers."""
    expected = {r.id: r for r in ledger[ledger.notebook == notebook].itertuples()}
    out = []
    for row in table.itertuples():
        exp = expected.pop(row.id, None)
        reason = str(getattr(row, "reason", "") or "")
        if exp is None:
            out.append(LedgerDifference(row.id, NOT_IN_LEDGER, row.verdict, reason=reason))
        elif row.verdict not in exp.verdict.split("|"):
            out.append(LedgerDifference(row.id, exp.verdict, row.verdict, exp.why, reason))
    return out + [LedgerDifference(i, e.verdict, NOT_IN_RUN, e.why) for i, e in expected.items()]


def ledger_mismatches(notebook: str, table: pd.DataFrame, ledger: pd.DataFrame) -> list[str]:
    """The failing `ledger_differences`, one line each: a verdict that differs from the ledger's, a
    claim the ledger lacks, a ledger row no claim answers (a `NOT_YET_RUN` row fails none of them)."""
    problems = []
    for d in (d for d in ledger_differences(notebook, table, ledger) if d.fails):
        if d.ledger == NOT_IN_LEDGER:
            problems.append(f"- claim {d.id!r} ({d.run}) is not in the ledger")
        elif d.run == NOT_IN_RUN:
            problems.append(f"- ledger row {d.id!r} ({d.ledger}) has no claim in the notebook")
        else:
            problems.append(f"- claim {d.id!r}: verdict {d.run}, ledger expects {d.ledger} ({d.why}); {d.reason}")
    return problems

"""The headline table: one row per paper, the headline claim as its abstract states it, how the kit
tests it, the verdict and one line of reason.

The rows are fixed in ``reproduce/headlines.yaml`` before the runs (committed, like the claims'
registrations): per paper notebook, the abstract's sentence, `how` (``measured`` here at small
scale, ``projected`` to the paper's setting within the simulator's measured error, or ``untested``
with `why`; a projected one reads as measured at the paper's setting where this run's projected
deciding claims all were, and names those that were where only some were, `verdicts.setting`), and the notebook's claim ids that together test the abstract's own empirical sentence
(`claims`). The verdict follows from those claims' verdicts in a run: reproduced when all are
reproduced, contradicted when any is contradicted, inconclusive otherwise (or when one was not
decided). Parts the abstract does not claim (an ablation, a setting the paper never measured) are
`reported`: their verdicts are shown, they do not decide the headline; a genuine finding of the kit
against the authors' own number is stated as one (`finding`). The row shows every part's verdict.
The README, REPORT.md/html and the end of each notebook (`Claims.headline`) show it.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from . import setting
from .claims import is_projected
from .verdict import CONTRADICTED, INCONCLUSIVE, REPRODUCED

HOWS = {"measured": "measured here (small scale)",
        "projected": "projected to the paper's setting, within the simulator's measured error",
        "untested": "not testable here"}
AT_PAPER_SETTING = "measured at the paper's setting by this run"     # a projected headline, resolved (`Headline.resolved_how`)
NOT_TESTED = "not tested"
COLUMNS = ["paper", "headline", "how", "verdict", "reason"]
FIELDS = ("paper", "headline", "how", "claims", "reported", "finding", "scope", "why")     # a row of headlines.yaml


@dataclass(frozen=True)
class Headline:
    notebook: str
    paper: str
    headline: str                    # the abstract's sentence
    how: str                         # a key of HOWS
    claims: tuple[str, ...] = ()     # the notebook's claim ids that test it (none when untested)
    scope: str = ""                  # what of the headline the claims test
    why: str = ""                    # why it is untested
    reported: tuple[str, ...] = ()   # claim ids shown beside it that do not decide it
    finding: str = ""                # a finding of the kit, against the authors' own number

    def __post_init__(self) -> None:
        where = f"headlines[{self.notebook}]"
        if self.how not in HOWS:
            raise ValueError(f"{where}.how: {self.how!r}; allowed: {', '.join(HOWS)}")
        if (self.how == "untested") != (not self.claims):
            raise ValueError(f"{where}.claims: claim ids when how is measured or projected, none when untested")
        if self.how == "untested" and not self.why:
            raise ValueError(f"{where}.why: an untested headline says why")
        both = set(self.claims) & set(self.reported)
        if both:
            raise ValueError(f"{where}.reported: {sorted(both)} also decide it (in claims); a part either decides or is reported")

    def resolved_how(self, claims: pd.DataFrame) -> str:
        """How this run tested it, in words (`HOWS`): a projected headline whose projected deciding
        claims (`claims.is_projected`; a measured part, e.g. an accuracy, stays measured) were all
        measured at the paper's setting (their `measured` text, `setting.decided_at_setting`) reads
        `AT_PAPER_SETTING`; where only some were, the projected `how` names those; otherwise as
        `how` says."""
        measured = claims.set_index("id").measured if "measured" in claims else pd.Series(dtype=object)
        projected = [c for c in self.claims if is_projected(c)]
        at_setting = [c for c in projected if setting.decided_at_setting(measured.get(c))]
        if self.how != "projected" or not at_setting:
            return HOWS[self.how]
        if len(at_setting) == len(projected):
            return AT_PAPER_SETTING
        return f"{HOWS[self.how]} ({AT_PAPER_SETTING}: {', '.join(at_setting)})"

    def decide(self, claims: pd.DataFrame) -> tuple[str, str]:
        """(verdict, reason) from a claims table (columns id, verdict, reason) of this notebook's run:
        the verdict from `claims` alone; the reason lists every part's verdict (`reported` ones
        marked as not deciding), the reason of the claim that decided, and the `finding`."""
        if self.how == "untested":
            return NOT_TESTED, self.why
        rows = claims.set_index("id")
        verdict_of = lambda c: rows.verdict[c] if c in rows.index and not pd.isna(rows.verdict.get(c)) else None  # noqa: E731
        missing = [c for c in self.claims if verdict_of(c) is None]
        if missing:
            return INCONCLUSIVE, f"{missing[0]} was not decided in this run"
        verdicts = {c: verdict_of(c) for c in self.claims}
        verdict, decider = REPRODUCED, self.claims[0]
        for wanted in (CONTRADICTED, INCONCLUSIVE):
            hit = [c for c, v in verdicts.items() if v == wanted]
            if hit:
                verdict, decider = wanted, hit[0]
                break
        parts = ", ".join(f"{c} {v}" for c, v in verdicts.items())
        reported = ", ".join(f"{c} {verdict_of(c) or 'not decided'}" for c in self.reported)
        reason = (f"deciding: {parts}" + (f"; reported, not deciding: {reported}" if reported else "")
                  + f". {decider}: {rows.reason[decider]}" + (f". Finding: {self.finding}" if self.finding else ""))
        return verdict, reason


def headlines_path() -> Path:
    from ..paths import repo_root
    return repo_root() / "reproduce" / "headlines.yaml"


def load_headlines(path: Path | None = None) -> dict[str, Headline]:
    """{notebook: Headline} from ``reproduce/headlines.yaml`` (or `path`); none where the file does
    not exist (a project of one's own notebooks without paper headlines)."""
    import yaml

    path = path or headlines_path()
    if not path.is_file():
        return {}
    raw = yaml.safe_load(path.read_text()) or {}
    out = {}
    for notebook, row in raw.items():
        unknown = set(row) - set(FIELDS)
        if unknown:
            raise ValueError(f"headlines[{notebook}]: unknown field(s) {sorted(unknown)}; allowed: {', '.join(FIELDS)}")
        out[notebook] = Headline(notebook, row["paper"], row["headline"], row["how"],
                                 tuple(row.get("claims") or ()), row.get("scope", ""), row.get("why", ""),
                                 tuple(row.get("reported") or ()), row.get("finding", ""))
    return out


def headline_table(claims: pd.DataFrame, headlines: dict[str, Headline] | None = None) -> pd.DataFrame:
    """One row per paper whose notebook is in `claims` (`report.collect`'s table, with a notebook
    column): paper, headline, how (with the scope), verdict, reason."""
    headlines = load_headlines() if headlines is None else headlines
    rows, present = [], set(claims.notebook)
    for notebook, h in headlines.items():
        if notebook not in present:
            continue
        verdict, reason = h.decide(claims[claims.notebook == notebook])
        how = h.resolved_how(claims[claims.notebook == notebook]) + (f": {h.scope}" if h.scope else "")
        rows.append({"notebook": notebook, "paper": h.paper, "headline": h.headline, "how": how,
                     "verdict": verdict, "reason": reason})
    return pd.DataFrame(rows, columns=["notebook", *COLUMNS])

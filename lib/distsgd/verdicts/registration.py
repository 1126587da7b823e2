"""Registration: a notebook's tests, written down by a step of its own before the deciding runs.

The registration of notebook NB under a profile is ``reproduce/registered/<profile>/<NB>.json``
(committed for the quick profile). It holds, per claim, the claim's text, what the paper says, the
test (its form, quantity, side, threshold, the threshold's source and the statistic) and its power:
the width of the interval the deciding runs are expected to give, from a *pilot* (the same notebook
on seeds disjoint from the deciding ones, committed in ``reproduce/pilots/<profile>/<NB>/``), and,
where the pilot shows that this budget cannot decide the claim, why (`undecidable`). It also holds
the notebook's `design`: the deciding seeds and run length.

Only the registration step writes it (``reproduce/run.py --register``: it executes the notebook's
cells up to its registration cell with ``DISTSGD_REGISTER=<a staging file>``, where `Claims.preregister`
leaves the new registration, then `write` puts it in place), and every registration adds a row
to the registration log ``<folder>/log.csv``: when, which notebook, what changed, why, and whether
the deciding runs had been seen. A notebook's run never writes it: it fails before its first run
when there is none, or when its tests or design differ from it (`check`).

The pilot's rule, applied to every claim the pilot decides (`power`): the expected interval is the
pilot's, its half-widths scaled from the pilot's number of seeds m to the deciding runs' n by
t(n-1)/t(m-1) x sqrt(m/n) (`seed_scale`: a seed mean's standard error and its Student-t quantile,
1 when they are equal); a claim is registered *undecidable here* when that interval around the
pilot's estimate contains the threshold (this budget does not decide it), or when the pilot's verdict
at the run length T differs from its verdict at 4T (the direction is not settled).
"""
from __future__ import annotations

import csv
import datetime as dt
import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from .verdict import INCONCLUSIVE

REGISTERED_ENV = "DISTSGD_REGISTERED"     # a folder for registrations instead of the committed one
REGISTER_ENV = "DISTSGD_REGISTER"         # set by the registration step: where to stage the registration
PILOT_ENV = "DISTSGD_PILOT"               # the pilot folder the registration step reads (T/, 4T/)
TEST_FIELDS = ("form", "quantity", "side", "threshold", "source", "statistic")
LOG_COLUMNS = ["date", "notebook", "changed", "why", "deciding_runs_seen", "code"]


class RegistrationError(RuntimeError):
    """A claim's test differs from (or is missing in) its registration written before the runs."""


def registration_folder() -> Path:
    """Where registrations are read and written: $DISTSGD_REGISTERED, else
    ``reproduce/registered/<profile>`` ($DISTSGD_PROFILE, else quick)."""
    if os.environ.get(REGISTERED_ENV):
        return Path(os.environ[REGISTERED_ENV])
    from ..paths import repo_root
    return repo_root() / "reproduce" / "registered" / os.environ.get("DISTSGD_PROFILE", "quick")


def pilot_folder(notebook: str, profile: str | None = None) -> Path:
    """``reproduce/pilots/<profile>/<notebook>`` ($DISTSGD_PILOT when set): the pilot's claims at the
    run length T (``T/claims.csv``) and at 4T (``4T/claims.csv``), and its own registration."""
    if os.environ.get(PILOT_ENV):
        return Path(os.environ[PILOT_ENV])
    from ..paths import repo_root
    return repo_root() / "reproduce" / "pilots" / (profile or os.environ.get("DISTSGD_PROFILE", "quick")) / notebook


def staging_file() -> Path | None:
    """Where the registration step (``reproduce/run.py --register``) wants this execution's
    registration, or None when this execution is not the registration step."""
    return Path(os.environ[REGISTER_ENV]) if os.environ.get(REGISTER_ENV) else None


# --------------------------------------------------------------------------- power from the pilot


@dataclass(frozen=True)
class Power:
    """What a pilot says of one claim before the deciding runs: the interval width to expect and,
    where this budget cannot decide the claim, why."""

    expected_width: float | None
    undecidable: str | None


def _pilot_row(table: pd.DataFrame | None, id: str) -> Any:
    if table is None or id not in set(table.id):
        return None
    row = table.set_index("id").loc[id]
    return row if math.isfinite(float(row.low)) and math.isfinite(float(row.high)) else None


def seed_scale(pilot_seeds: int | None, seeds: int | None) -> float:
    """The factor from an interval over `pilot_seeds` seeds to one over `seeds`: the ratio of the
    95% Student-t quantiles times sqrt(pilot_seeds / seeds); 1 when either is unknown or below 2."""
    if not pilot_seeds or not seeds or pilot_seeds < 2 or seeds < 2 or pilot_seeds == seeds:
        return 1.0
    from scipy import stats
    return float(stats.t.ppf(0.975, seeds - 1) / stats.t.ppf(0.975, pilot_seeds - 1) * math.sqrt(pilot_seeds / seeds))


def _scaled(row: Any, scale: float) -> tuple[float, float]:
    """The pilot row's interval with its half-widths about the estimate scaled by `scale`."""
    low, high = float(row.low), float(row.high)
    if scale == 1.0 or not math.isfinite(float(row.estimate)):
        return low, high
    est = float(row.estimate)
    return est - (est - low) * scale, est + (high - est) * scale


def power(test: Any, id: str, pilot_t: pd.DataFrame | None, pilot_4t: pd.DataFrame | None,
          scale: float = 1.0, scale_4t: float | None = None) -> Power:
    """The pilot's rule for claim `id` with `test` (a `claims.Test`): no pilot row, no power known
    (None, None); the pilot's interval at T (half-widths times `scale`, `seed_scale`) containing the
    threshold, or its verdict at T differing from the one at 4T (half-widths times `scale_4t`,
    default `scale`), undecidable with the numbers; otherwise that interval's width."""
    t = _pilot_row(pilot_t, id)
    if t is None:
        return Power(None, None)
    low, high = _scaled(t, scale)
    width = high - low
    seeds = "" if scale == 1.0 else f", half-widths x{scale:.3g} for the deciding seeds"
    at_t = test.verdict(low, high)
    if at_t == INCONCLUSIVE:
        return Power(width, f"the pilot's interval [{low:.4g}, {high:.4g}] (other seeds{seeds}) contains "
                            f"{test.threshold:g}: this budget does not decide it")
    long = _pilot_row(pilot_4t, id)
    if long is not None:
        long_low, long_high = _scaled(long, scale if scale_4t is None else scale_4t)
        at_4t = test.verdict(long_low, long_high)
        if at_4t != at_t:
            return Power(width, f"not settled: the pilot is {at_t} at the run length T ([{low:.4g}, {high:.4g}]) "
                                f"and {at_4t} at 4T ([{long_low:.4g}, {long_high:.4g}]){seeds}")
    return Power(width, None)


def read_pilot(notebook: str) -> tuple[pd.DataFrame | None, pd.DataFrame | None]:
    """The pilot's claims tables at T and 4T (None where absent)."""
    folder = pilot_folder(notebook)
    read = lambda p: pd.read_csv(p) if p.is_file() else None      # noqa: E731
    return read(folder / "T" / "claims.csv"), read(folder / "4T" / "claims.csv")


# --------------------------------------------------------------------------- the file


def seed_count(design: Any) -> int | None:
    """How many seeds a design names: the length of its `seeds` list, or `seeds` itself where it is
    a count (08's paired seeds seed, seed + 1, ...); None where it names none."""
    seeds = design.get("seeds") if isinstance(design, Mapping) else None
    if isinstance(seeds, list):
        return len(seeds)
    return seeds if isinstance(seeds, int) and not isinstance(seeds, bool) else None


def record(notebook: str, tests: Mapping[str, dict], design: Mapping[str, Any],
           pilot: tuple[pd.DataFrame | None, pd.DataFrame | None], test_objects: Mapping[str, Any],
           only: Sequence[str] | None = None) -> dict:
    """The registration of `notebook`: its design and, per claim, its test fields with the pilot's
    power (`power`); `only` (ids), where given, the claims whose power the pilot gives (the others
    have none: their quantity is not what the pilot's seeds vary). A threshold whose source is a
    pilot ("pilot: ...") is refused (`RegistrationError`) where this profile has no pilot of the
    notebook: another profile's pilot measured another model and data, not this run's."""
    sourced = sorted(id for id, fields in tests.items() if str(fields.get("source", "")).startswith("pilot:"))
    if sourced and pilot[0] is None:
        profile = os.environ.get("DISTSGD_PROFILE", "quick")
        raise RegistrationError(
            f"{notebook}: the thresholds of {', '.join(sourced)} name a pilot as their source, but "
            f"{pilot_folder(notebook)} holds no pilot of this profile ({profile}): run it (python "
            f"reproduce/register.py --pilot --profile {profile} --only {notebook}, the profile's pilots entry) and "
            "set the margins it gives, or give the notebook its null margins in the profile (margins: null)")
    designs = {}
    for phase in ("T", "4T"):
        pilot_reg = pilot_folder(notebook) / "registered" / phase / f"{notebook}.json"
        designs[phase] = json.loads(pilot_reg.read_text()).get("design") if pilot_reg.is_file() else None
    scale = {phase: seed_scale(seed_count(d), seed_count(design)) for phase, d in designs.items()}
    pilot_design = designs["T"]
    out = {}
    for id, fields in tests.items():
        p = (power(test_objects[id], id, *pilot, scale=scale["T"], scale_4t=scale["4T"])
             if only is None or id in only else Power(None, None))
        out[id] = dict(fields, expected_width=p.expected_width, undecidable=p.undecidable)
    return {"notebook": notebook, "design": dict(design), "pilot": pilot_design, "tests": out}


def differences(tests: Mapping[str, dict], design: Mapping[str, Any], registered: Mapping[str, Any]) -> list[str]:
    """Where a notebook's tests and design differ from its registration: a test field
    (`TEST_FIELDS`) that changed, a claim not registered, a registered claim no longer there, a
    design entry (seeds, run length) that changed."""
    reg_tests = registered["tests"]
    problems = [f"- claim {i!r} is not in the registration" for i in tests if i not in reg_tests]
    problems += [f"- registered claim {i!r} is no longer registered by the notebook" for i in reg_tests if i not in tests]
    for i in tests.keys() & reg_tests.keys():
        for f in TEST_FIELDS:
            now, then = tests[i][f], reg_tests[i].get(f)
            same = (then is not None and math.isclose(now, then, rel_tol=1e-12)) if f == "threshold" else now == then
            if not same:
                problems.append(f"- claim {i!r}: {f} {now!r}, registered {then!r}")
    reg_design = registered.get("design", {})
    for key in sorted(set(design) | set(reg_design)):
        if json.dumps(design.get(key), default=str) != json.dumps(reg_design.get(key), default=str):
            problems.append(f"- design {key!r}: {design.get(key)!r}, registered {reg_design.get(key)!r}")
    return problems


def changes(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str:
    """One line saying what a re-registration changes (for the log)."""
    if old is None:
        return f"first registration: {len(new['tests'])} claims"
    parts = [p.removeprefix("- ") for p in differences(
        {i: t for i, t in new["tests"].items()}, new.get("design", {}), old)]
    power_moved = [i for i in new["tests"].keys() & old["tests"].keys()
                   if (new["tests"][i].get("undecidable"), new["tests"][i].get("expected_width"))
                   != (old["tests"][i].get("undecidable"), old["tests"][i].get("expected_width"))]
    if power_moved:
        parts.append(f"power from the pilot for {', '.join(sorted(power_moved))}")
    return "; ".join(parts) or "nothing"


def write(path: Path, reg: dict, why: str, seen: bool, log: Path | None = None) -> str:
    """The registration step: write `reg` to `path` and add its row to the log (`log`, default
    ``<folder>/log.csv``). Returns what changed."""
    from ..files import write_text_atomic
    from ..training.provenance import code_version

    if not why.strip():
        raise RegistrationError("a registration says why (reproduce/run.py --register --why '...')")
    old = json.loads(path.read_text()) if path.is_file() else None
    changed = changes(old, reg)
    write_text_atomic(path, json.dumps(reg, indent=1, ensure_ascii=False) + "\n")
    log = log or path.parent / "log.csv"
    new = not log.is_file()
    with log.open("a", newline="") as fh:
        w = csv.writer(fh)
        if new:
            w.writerow(LOG_COLUMNS)
        w.writerow([dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d %H:%M"), reg["notebook"], changed, why.strip(),
                    "yes" if seen else "no", code_version()])
    return changed


def read_log(folder: Path | None = None) -> pd.DataFrame:
    """The registration log of a folder (empty with its columns where there is none)."""
    path = (folder or registration_folder()) / "log.csv"
    return pd.read_csv(path, dtype=str, keep_default_na=False) if path.is_file() else pd.DataFrame(columns=LOG_COLUMNS)

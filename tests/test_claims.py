"""The claims table: pre-registered tests give reproduced / contradicted / inconclusive, invariants
are asserted, and `check` compares every verdict with the expected-verdict ledger; a notebook holds
itself to the registration that its own step writes (`distsgd.verdicts.registration`)."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from distsgd.verdicts import registration
from distsgd.verdicts.claims import (CONTRADICTED, FORMS, INCONCLUSIVE, NOT_YET_RUN, REGISTERED_ENV, REPRODUCED, Claims,
                                     RegistrationError, Test, registration_folder, interval_or_nan, ledger_mismatches,
                                     load_ledger, median_interval, paired_accuracy_interval,
                                     paired_accuracy_resolution, paired_interval, welch_interval)
from distsgd.verdicts.registration import REGISTER_ENV, TEST_FIELDS, Power, power, seed_scale

AT_LEAST_2 = Test("speed-up", ">=", 2.0, "median of 9 pairs", form="up-to",
                  source="paper: Table 2, 'a 2x speed-up'")
AT_MOST_0 = Test("loss gap", "<=", 0.0, "paired t over 5 seeds", form="superiority",
                 source="null: no difference")
NOT_WORSE = Test("acc gap", ">=", -1.0, "paired t over 5 seeds", form="non-inferiority",
                 source="pilot: the baseline's seed range, 1 point")
BETTER = Test("acc gap", ">=", 0.0, "paired t over 5 seeds", form="superiority", source="null: no difference")


@pytest.mark.parametrize("test,low,high,verdict", [
    (AT_LEAST_2, 2.1, 3.0, REPRODUCED), (AT_LEAST_2, 2.0, 3.0, REPRODUCED),
    (AT_LEAST_2, 1.0, 1.9, CONTRADICTED), (AT_LEAST_2, 1.5, 2.5, INCONCLUSIVE),
    (AT_MOST_0, -1.0, -0.1, REPRODUCED), (AT_MOST_0, 0.1, 1.0, CONTRADICTED),
    (AT_MOST_0, -0.1, 0.1, INCONCLUSIVE), (AT_MOST_0, float("nan"), 0.1, INCONCLUSIVE),
    (NOT_WORSE, -1.0, 0.5, REPRODUCED), (NOT_WORSE, -1.5, -1.1, CONTRADICTED)])
def test_verdict_is_where_the_interval_lies(test, low, high, verdict) -> None:
    assert test.verdict(low, high) == verdict


@pytest.mark.parametrize("test,low,high,verdict", [
    (BETTER, 0.0, 0.0, INCONCLUSIVE), (BETTER, 0.0, 0.4, INCONCLUSIVE), (BETTER, 1e-9, 0.4, REPRODUCED),
    (BETTER, -0.4, 0.0, INCONCLUSIVE), (BETTER, -0.4, -1e-9, CONTRADICTED),
    (AT_MOST_0, 0.0, 0.0, INCONCLUSIVE), (AT_MOST_0, -0.4, 0.0, INCONCLUSIVE)])
def test_a_superiority_test_reproduces_only_strictly_beyond_its_threshold(test, low, high, verdict) -> None:
    """Identical methods give a difference of exactly 0 on every seed, an interval [0, 0]: a
    *better than* claim is then inconclusive, never reproduced (an *as good as* one on 0 would be)."""
    assert test.verdict(low, high) == verdict
    same = Test(test.quantity, test.side, test.threshold, test.statistic, form="non-inferiority", source=test.source)
    assert same.verdict(0.0, 0.0) == REPRODUCED


def test_a_test_has_a_side_a_form_and_a_sourced_threshold() -> None:
    with pytest.raises(ValueError, match="side"):
        Test("x", ">", 1, "s", form="superiority", source="null: no difference")
    with pytest.raises(ValueError, match="form"):
        Test("x", ">=", 1, "s", form="better", source="null: no difference")
    for source in ("fixed here", "paper:", "pilot:   ", "Paper: Table 1"):
        with pytest.raises(ValueError, match="source"):
            Test("x", ">=", 1, "s", form="non-inferiority", source=source)
    assert set(FORMS) == {"rate", "non-inferiority", "superiority", "up-to"}
    assert str(NOT_WORSE) == ("non-inferiority: acc gap >= -1 (paired t over 5 seeds); threshold from "
                              "pilot: the baseline's seed range, 1 point")


def make_claims() -> Claims:
    claims = Claims("99_demo")
    claims.register("fast", "A is >= 2x faster than B", "2x", AT_LEAST_2)
    claims.register("better", "A's loss is below B's", "lower loss", AT_MOST_0)
    claims.register("fine", "A is within 1 point of B", "±1 point", NOT_WORSE)
    claims.preregister(dry_run=True)
    return claims


def test_decide_records_interval_verdict_and_reason(tmp_path) -> None:
    claims = make_claims()
    claims.precheck("fine", "359 test images resolve ±3.1 points, coarser than the claimed 1 point")
    claims.precheck("fine", "the premise is absent")
    assert claims.decide("fast", 1.2, 1.8, 1.5, "pairs 1.2..1.8") == CONTRADICTED
    assert claims.decide("better", -0.3, -0.1, -0.2) == REPRODUCED
    assert claims.decide("fine", 0.5, 0.9, 0.7) == INCONCLUSIVE      # the precheck decides, not the interval
    table = pd.read_csv(claims.save(tmp_path))
    assert table.verdict.tolist() == [CONTRADICTED, REPRODUCED, INCONCLUSIVE]
    assert table.reason[0] == "speed-up = 1.5, interval [1.2, 1.8] on the other side of 2"
    assert table.reason[2].startswith("precheck: 359 test images")
    assert table.reason[2].endswith("the claimed 1 point; the premise is absent")    # every precheck's reason
    assert table.test[0] == "up-to: speed-up >= 2 (median of 9 pairs); threshold from paper: Table 2, 'a 2x speed-up'"


def test_precheck_must_come_before_the_measurement_and_claims_are_decided_once() -> None:
    claims = make_claims()
    claims.decide("fast", 2.5, 3.0, 2.7)
    with pytest.raises(RuntimeError, match="before its measurement"):
        claims.precheck("fast", "the clock was noisy")
    with pytest.raises(RuntimeError, match="decided twice"):
        claims.decide("fast", 2.5, 3.0, 2.7)
    with pytest.raises(KeyError, match="not registered"):
        claims.decide("unknown", 0, 1, 0.5)
    with pytest.raises(ValueError, match="twice"):
        claims.register("fast", "again", "", AT_LEAST_2)


def ledger(**verdicts: str) -> pd.DataFrame:
    return pd.DataFrame([{"notebook": "99_demo", "id": k, "verdict": v, "why": "test"} for k, v in verdicts.items()])


def decided() -> Claims:
    claims = make_claims()
    claims.decide("fast", 2.5, 3.0, 2.7)
    claims.decide("better", 0.1, 0.3, 0.2)
    claims.decide("fine", -2, 0.5, -0.7)
    return claims


EXPECTED = dict(fast=REPRODUCED, better=CONTRADICTED, fine=INCONCLUSIVE)


def test_check_passes_when_verdicts_match_the_ledger() -> None:
    decided().check(ledger(**EXPECTED))
    decided().check(ledger(**{**EXPECTED, "fast": "reproduced|inconclusive"}))   # listed alternatives


@pytest.mark.parametrize("claim,flipped", [("fast", CONTRADICTED), ("better", REPRODUCED),
                                           ("fine", REPRODUCED)])
def test_flipping_one_expected_verdict_fails_the_check(claim, flipped) -> None:
    """Like a strict xfail: a verdict that differs from the ledger fails in either direction."""
    with pytest.raises(AssertionError, match=f"claim '{claim}': verdict .* ledger expects {flipped}"):
        decided().check(ledger(**{**EXPECTED, claim: flipped}))


def test_check_fails_on_missing_rows_undecided_claims_and_broken_invariants() -> None:
    ledger_rows = ledger(**{k: v for k, v in EXPECTED.items() if k != "fine"}, gone=REPRODUCED)
    problems = ledger_mismatches("99_demo", decided().table(), ledger_rows)
    assert problems == ["- claim 'fine' (inconclusive) is not in the ledger",
                        "- ledger row 'gone' (reproduced) has no claim in the notebook"]
    claims = make_claims()
    claims.decide("fast", 2.5, 3.0, 2.7)
    assert claims.invariant("bytes ratio", "4x", "4.00x", True)
    assert not claims.invariant("identical trajectory", "0", "1e-2", False)
    with pytest.raises(AssertionError) as err:
        claims.check(ledger(**EXPECTED))
    text = str(err.value)
    assert "invariant 'identical trajectory' does not hold" in text and "bytes ratio" not in text
    assert "claim 'better' was registered but never decided" in text


def test_a_not_yet_run_row_is_reported_and_never_failed(capsys, tmp_path, monkeypatch) -> None:
    """The full profile's ledger reads "not yet run" until its deciding runs are made: a verdict (or a
    missing claim) against such a row is printed by `check`, and no mismatch; a real row still fails."""
    decided().check(ledger(**{**EXPECTED, "fast": NOT_YET_RUN, "gone": NOT_YET_RUN}))
    assert ("2 ledger row(s) read 'not yet run' (reported, not asserted), this run: fast reproduced, "
            "gone (not in this run)") in capsys.readouterr().out
    with pytest.raises(AssertionError, match="claim 'better': verdict contradicted, ledger expects reproduced"):
        decided().check(ledger(**{**EXPECTED, "fast": NOT_YET_RUN, "better": REPRODUCED}))
    path = tmp_path / "expected.csv"                      # a ledger row reads it alone, never among alternatives
    monkeypatch.setattr("distsgd.verdicts.claims.ledger_path", lambda profile: path)
    ledger(fast=NOT_YET_RUN).to_csv(path, index=False)
    assert list(load_ledger("any").verdict) == [NOT_YET_RUN]
    ledger(fast=f"{REPRODUCED}|{NOT_YET_RUN}").to_csv(path, index=False)
    with pytest.raises(ValueError, match="not one of"):
        load_ledger("any")


def test_the_committed_full_ledger_lists_every_notebook_not_yet_run() -> None:
    full = load_ledger("full")
    assert full is not None, "reproduce/expected/full.csv is missing"
    assert list(full.columns) == list(load_ledger("quick").columns)
    assert not full.duplicated(["notebook", "id"]).any()
    assert set(full.verdict) == {NOT_YET_RUN}
    notebooks = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert sorted(set(full.notebook)) == notebooks


def test_the_committed_ledger_is_well_formed() -> None:
    quick = load_ledger("quick")
    assert quick is not None, "reproduce/expected/quick.csv is missing"
    assert not quick.duplicated(["notebook", "id"]).any()
    assert (quick.why.str.len() > 0).all(), "every expected verdict says why"


def test_the_committed_claims_tables_match_the_ledger(repo_figures) -> None:
    """figures/*/claims.csv (what the last quick run measured) against the ledger, row by row."""
    quick = load_ledger("quick")
    problems = []
    for notebook in sorted(set(quick.notebook)):
        table = pd.read_csv(repo_figures / notebook / "claims.csv")
        assert set(table.verdict) <= {REPRODUCED, CONTRADICTED, INCONCLUSIVE}, notebook
        assert table[table.verdict != REPRODUCED].reason.notna().all(), notebook
        problems += [f"{notebook} {p}" for p in ledger_mismatches(notebook, table, quick)]
    assert not problems, "\n".join(problems)


# --------------------------------------------------------------------------- intervals

def test_welch_and_paired_intervals_are_scipys() -> None:
    a, b = [1.0, 2.0, 3.0, 4.0], [0.5, 1.0, 2.5, 3.0]
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert welch_interval(a, b) == pytest.approx((ci.low, ci.high))
    lo, hi = paired_interval(a, b)                  # differences 0.5, 1, 0.5, 1: mean 0.75
    assert lo < 0.75 < hi and hi - lo < welch_interval(a, b)[1] - welch_interval(a, b)[0]


def two_methods(rng: np.random.Generator, seeds: int, n: int, shift: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-example correctness of two methods over seeds on one test set: each example has its own
    difficulty, each seed its own offset; b is a's model with `shift` more probability of error."""
    difficulty = rng.normal(-3.0, 1.5, n)                    # logit of an error: ~7% errors
    offset = rng.normal(0.0, 0.2, (seeds, 1))
    p_err = 1 / (1 + np.exp(-(difficulty + offset)))
    u = rng.random((seeds, n))
    return (u >= p_err).astype(float), (u >= p_err + shift).astype(float)


def test_paired_accuracy_interval_covers_the_difference_and_is_narrower_than_unpaired() -> None:
    rng = np.random.default_rng(1)
    hits, widths = [], []
    for _ in range(300):
        a, b = two_methods(rng, 5, 1000, shift=0.01)          # b: 1 point less accurate than a
        lo, hi = paired_accuracy_interval(a, b)
        hits.append(lo <= 1.0 <= hi)
        widths.append(hi - lo)
    assert np.mean(hits) >= 0.93                             # conservative: at least its level
    pa, pb = a.mean(), b.mean()                              # the same accuracies as independent samples
    unpaired = 2 * stats.norm.ppf(0.975) * np.sqrt((pa * (1 - pa) + pb * (1 - pb)) / 1000)
    assert np.median(widths) < 0.5 * 100 * unpaired
    same = paired_accuracy_interval(a, a)                    # no disagreement: the point itself
    assert same == (0.0, 0.0)
    with pytest.raises(ValueError):                          # one seed: no seed variance
        paired_accuracy_interval(a[:1], b[:1])


def test_decide_paired_accuracy_decides_on_the_paired_interval_in_points() -> None:
    a, b = two_methods(np.random.default_rng(2), 5, 1000, shift=0.02)   # b: 2 points less accurate
    claims = Claims("99_demo")
    close = Test("acc a - b (points)", ">=", -1.0, "paired", form="non-inferiority", source="paper: 'within 1 point'")
    ahead = Test("acc a - b (points)", ">=", 0.0, "paired", form="superiority", source="null: no difference")
    claims.register("close", "a within 1 point of b", "", close)
    claims.register("ahead", "a ahead of b", "", ahead)
    claims.register("one_seed", "a ahead of b", "", ahead)
    claims.preregister(dry_run=True)
    assert claims.decide_paired_accuracy("close", a, b, "a", "b") == REPRODUCED
    assert claims.decide_paired_accuracy("ahead", b, a, "b", "a") == CONTRADICTED     # 2 points behind
    assert claims.decide_paired_accuracy("one_seed", a[:1], b[:1], "a", "b") == INCONCLUSIVE
    row = claims.table().set_index("id").loc["ahead"]
    assert (row.low, row.high) == pytest.approx(paired_accuracy_interval(b, a))
    assert row.estimate == pytest.approx(100 * (b.mean() - a.mean()))
    assert "mean of 5 seeds, 1000 test images" in row.measured and row.measured.count(",") >= 5


def test_paired_accuracy_resolution_shrinks_with_examples_and_seeds() -> None:
    assert paired_accuracy_resolution(0.97, 1000, 5) == pytest.approx(
        100 * 1.96 * np.sqrt(0.06 / 5000), rel=1e-3)        # 0.68 points
    assert paired_accuracy_resolution(0.97, 1000, 1) > 2 * paired_accuracy_resolution(0.97, 1000, 5)


def test_median_interval_takes_the_order_statistics_of_its_level() -> None:
    values = [160, 51, 97, 98, 99, 99, 102, 114, 125]       # n = 9: x_(2), x_(8) (coverage 0.961)
    assert median_interval(values) == (97, 125)
    assert median_interval(list(range(20))) == (5, 14)      # n = 20: x_(6), x_(15) (0.959)
    assert median_interval([1.0, 2.0, 3.0]) == (1.0, 3.0)   # too few for 95%: the whole range
    with pytest.raises(ValueError):
        median_interval([])


def test_median_interval_covers_the_median_at_its_level() -> None:
    """Exponential samples (skewed, median ln 2): the interval holds it in >= 95% of draws."""
    rng = np.random.default_rng(0)
    hits = [lo <= np.log(2) <= hi
            for lo, hi in (median_interval(rng.exponential(size=9)) for _ in range(2000))]
    assert 0.95 <= np.mean(hits) <= 0.98                    # exact coverage 0.961


# --------------------------------------------------------------------------- registration


DESIGN = {"seeds": [0, 1, 2, 3, 4], "steps": 320}


def registered_claims(fast: Test = AT_LEAST_2, better: Test = AT_MOST_0) -> Claims:
    claims = Claims("99_demo")
    claims.register("fast", "A is >= 2x faster than B", "2x", fast)
    claims.register("better", "A's loss is below B's", "lower loss", better)
    return claims


def register(folder: Path, monkeypatch, claims: Claims | None = None, design: dict | None = None,
             why: str = "first registration", seen: bool = False) -> tuple[Path, str]:
    """The registration step as reproduce/register.py takes it: the notebook's registration cell
    stages its registration (DISTSGD_REGISTER), then `registration.write` puts it in place and logs it."""
    staged = folder / "staging" / "99_demo.registration.json"
    with monkeypatch.context() as m:
        m.setenv(REGISTER_ENV, str(staged))
        m.setenv(registration.PILOT_ENV, str(folder / "no-pilot"))
        assert (claims or registered_claims()).preregister(folder=folder, design=DESIGN if design is None else design) == staged
    path = folder / "99_demo.json"
    return path, registration.write(path, json.loads(staged.read_text()), why, seen)


def test_preregister_never_writes_a_registration_and_fails_without_one(tmp_path) -> None:
    with pytest.raises(RegistrationError, match="no registration .*99_demo.json.*register"):
        registered_claims().preregister(folder=tmp_path, design=DESIGN)
    assert not list(tmp_path.iterdir())


def test_the_registration_step_stages_then_writes_and_logs(tmp_path, monkeypatch) -> None:
    path, changed = register(tmp_path, monkeypatch)
    assert changed == "first registration: 2 claims"
    written = json.loads(path.read_text())
    assert written["notebook"] == "99_demo" and written["design"] == DESIGN and written["pilot"] is None
    assert written["tests"]["fast"] == {"claim": "A is >= 2x faster than B", "paper": "2x",
                                        **{f: getattr(AT_LEAST_2, f) for f in TEST_FIELDS},
                                        "expected_width": None, "undecidable": None}
    log = registration.read_log(tmp_path)
    assert log[["notebook", "changed", "why", "deciding_runs_seen"]].values.tolist() == [
        ["99_demo", "first registration: 2 claims", "first registration", "no"]]
    assert len(log.code[0]) == 12 and log.date[0][:2] == "20"

    moved = registered_claims(fast=Test(AT_LEAST_2.quantity, ">=", 1.5, AT_LEAST_2.statistic, form="up-to",
                                        source=AT_LEAST_2.source))
    _, changed = register(tmp_path, monkeypatch, moved, why="the paper says 1.5x", seen=True)
    assert changed == "claim 'fast': threshold 1.5, registered 2.0"
    log = registration.read_log(tmp_path)
    assert log.changed.tolist()[1:] == [changed] and log.deciding_runs_seen.tolist() == ["no", "yes"]
    with pytest.raises(RegistrationError, match="why"):
        registration.write(path, json.loads(path.read_text()), "  ", True)
    assert len(registration.read_log(tmp_path)) == 2


def test_a_run_holds_itself_to_its_registration_and_never_rewrites_it(tmp_path, monkeypatch) -> None:
    path, _ = register(tmp_path, monkeypatch)
    written = path.read_text()
    again = registered_claims()
    assert again.preregister(folder=tmp_path, design=DESIGN) == path
    assert again.decide("fast", 2.5, 3.0, 2.7) == REPRODUCED

    def fails(claims: Claims, match: str, design: dict = DESIGN) -> None:
        with pytest.raises(RegistrationError, match=match):
            claims.preregister(folder=tmp_path, design=design)

    fails(registered_claims(fast=Test(AT_LEAST_2.quantity, ">=", 1.5, AT_LEAST_2.statistic, form="up-to",
                                      source=AT_LEAST_2.source)), r"'fast': threshold 1\.5, registered 2\.0")
    fails(registered_claims(better=Test(AT_MOST_0.quantity, "<=", 0.0, AT_MOST_0.statistic, form="non-inferiority",
                                        source=AT_MOST_0.source)), "'better': form 'non-inferiority', registered 'superiority'")
    fails(registered_claims(fast=Test(AT_LEAST_2.quantity, ">=", 2.0, AT_LEAST_2.statistic, form="up-to",
                                      source="paper: Table 3")), "'fast': source")
    extra = registered_claims()
    extra.register("new", "a claim added later", "-", AT_MOST_0)
    fails(extra, "'new' is not in the registration")
    fewer = Claims("99_demo")
    fewer.register("fast", "A is >= 2x faster than B", "2x", AT_LEAST_2)
    fails(fewer, "'better' is no longer registered")
    assert path.read_text() == written


@pytest.mark.parametrize("design,match", [
    ({"seeds": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9], "steps": 320}, r"design 'seeds': \[0, 1, .*registered \[0, 1, 2, 3, 4\]"),
    ({"seeds": [0, 1, 2, 3, 4], "steps": 640}, "design 'steps': 640, registered 320"),
    ({"seeds": [0, 1, 2, 3, 4]}, "design 'steps': None, registered 320"),
    ({**DESIGN, "lr": 0.1}, "design 'lr': 0.1, registered None")])
def test_a_design_that_differs_from_the_registration_raises(tmp_path, monkeypatch, design, match) -> None:
    """More seeds or a longer run after a look is a new registration, not a rerun."""
    register(tmp_path, monkeypatch)
    with pytest.raises(RegistrationError, match=match):
        registered_claims().preregister(folder=tmp_path, design=design)


def test_a_claim_registered_undecidable_is_prechecked(tmp_path, monkeypatch) -> None:
    path, _ = register(tmp_path, monkeypatch)
    reg = json.loads(path.read_text())
    reg["tests"]["fast"]["undecidable"] = "the pilot's interval [1.5, 2.5] contains 2: this budget does not decide it"
    path.write_text(json.dumps(reg))
    claims = registered_claims()
    claims.preregister(folder=tmp_path, design=DESIGN)
    assert claims.decide("fast", 2.5, 3.0, 2.7) == INCONCLUSIVE                # its interval would reproduce it
    assert claims.decide("better", -0.3, -0.1, -0.2) == REPRODUCED
    row = claims.table().set_index("id").loc["fast"]
    assert row.reason == ("precheck: registered undecidable here: the pilot's interval [1.5, 2.5] contains 2: "
                          "this budget does not decide it") and row.low == 2.5


def test_identical_methods_never_reproduce_a_registered_superiority_claim(tmp_path, monkeypatch) -> None:
    claims = registered_claims(better=BETTER)
    claims.preregister(dry_run=True)
    assert claims.decide_mean("better", [0.0, 0.0, 0.0, 0.0, 0.0], "acc gap") == INCONCLUSIVE
    assert claims.table().set_index("id").reason["better"] == "acc gap = 0, interval [0, 0] contains 0"


def test_no_decision_before_the_registration_and_no_registration_after_it(tmp_path, monkeypatch) -> None:
    register(tmp_path, monkeypatch)
    claims = registered_claims()
    with pytest.raises(RegistrationError, match="preregister"):
        claims.decide("fast", 2.5, 3.0, 2.7)
    claims.preregister(folder=tmp_path, design=DESIGN)
    with pytest.raises(RegistrationError, match="after preregister"):
        claims.register("late", "registered after the runs began", "-", AT_MOST_0)


def test_a_dry_run_neither_writes_nor_compares(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(REGISTERED_ENV, str(tmp_path))
    monkeypatch.setenv(REGISTER_ENV, str(tmp_path / "staged.json"))
    claims = registered_claims()
    assert claims.preregister(dry_run=True, design={"steps": 2}) is None and not list(tmp_path.iterdir())
    assert claims.decide("fast", 2.5, 3.0, 2.7) == REPRODUCED


def test_registration_folder_is_the_profiles_unless_redirected(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(REGISTERED_ENV, raising=False)
    monkeypatch.setenv("DISTSGD_PROFILE", "full")
    assert registration_folder().parts[-3:] == ("reproduce", "registered", "full")
    monkeypatch.setenv(REGISTERED_ENV, str(tmp_path))
    assert registration_folder() == tmp_path


# --------------------------------------------------------------------------- power from the pilot


def pilot(**intervals: tuple[float, float]) -> pd.DataFrame:
    return pd.DataFrame([{"id": i, "low": lo, "high": hi} for i, (lo, hi) in intervals.items()])


@pytest.mark.parametrize("at_t,at_4t,expected", [
    ((2.2, 2.6), (2.3, 2.5), Power(0.4, None)),                                  # decided and settled
    ((2.2, 2.6), None, Power(0.4, None)),                                        # no 4T row: nothing against it
    ((0.8, 1.2), (0.9, 1.1), Power(0.4, None)),                                  # contradicted at both
    ((1.8, 2.6), (2.3, 2.5), "contains 2: this budget does not decide it"),      # the threshold inside at T
    ((2.2, 2.6), (1.6, 1.9), "not settled: the pilot is reproduced at the run length T"),
    ((2.2, 2.6), (1.9, 2.5), "and inconclusive at 4T"),
    ((float("nan"), float("nan")), (2.3, 2.5), Power(None, None))])              # no interval: no power known
def test_power_is_the_pilots_width_unless_it_contains_the_threshold_or_4t_differs(at_t, at_4t, expected) -> None:
    p = power(AT_LEAST_2, "fast", pilot(fast=at_t), None if at_4t is None else pilot(fast=at_4t))
    if isinstance(expected, Power):
        assert p.undecidable == expected.undecidable
        assert p.expected_width == (None if expected.expected_width is None else pytest.approx(expected.expected_width))
    else:
        assert p.expected_width == pytest.approx(at_t[1] - at_t[0]) and expected in p.undecidable


def test_power_scales_the_pilots_interval_to_the_deciding_seeds() -> None:
    """Fewer deciding seeds than the pilot's widen its interval about the estimate by the t quantiles'
    ratio times sqrt(m / n); a width that then reaches the threshold makes the claim undecidable."""
    assert seed_scale(10, 5) == pytest.approx(2.7764 / 2.2622 * 2 ** 0.5, rel=1e-4)
    assert seed_scale(5, 5) == seed_scale(None, 5) == seed_scale(5, 1) == 1.0
    table = pilot(fast=(2.2, 2.6)).assign(estimate=2.4)
    assert power(AT_LEAST_2, "fast", table, None, scale=1.0) == Power(pytest.approx(0.4), None)
    wide = power(AT_LEAST_2, "fast", table, None, scale=2.5)
    assert wide.expected_width == pytest.approx(1.0) and "[1.9, 2.9]" in wide.undecidable
    assert "x2.5 for the deciding seeds" in wide.undecidable


def test_power_of_a_superiority_claim_on_identical_pilots_is_undecidable() -> None:
    p = power(BETTER, "b", pilot(b=(0.0, 0.0)), pilot(b=(0.0, 0.0)))
    assert p.expected_width == 0.0 and "[0, 0]" in p.undecidable and "contains 0" in p.undecidable
    assert power(BETTER, "b", pilot(other=(0.1, 0.2)), None) == Power(None, None)   # no pilot row for it
    assert power(BETTER, "b", None, None) == Power(None, None)                      # no pilot at all


def test_the_registration_step_registers_the_pilots_power(tmp_path, monkeypatch) -> None:
    """The staged registration carries each test's power from the pilot's T and 4T claims tables,
    and the pilot's design from its own registration."""
    folder = tmp_path / "pilot"
    for phase, table in (("T", pilot(fast=(2.2, 2.6), better=(-0.2, 0.1))), ("4T", pilot(fast=(1.5, 1.8)))):
        (folder / phase).mkdir(parents=True)
        table.to_csv(folder / phase / "claims.csv", index=False)
    (folder / "registered" / "T").mkdir(parents=True)
    (folder / "registered" / "T" / "99_demo.json").write_text(json.dumps({"design": {"seeds": [100], "steps": 320}}))
    # (one pilot seed: no seed scaling; test_power_scales_the_pilots_interval_to_the_deciding_seeds has it)
    staged = tmp_path / "staged.json"
    monkeypatch.setenv(REGISTER_ENV, str(staged))
    monkeypatch.setenv(registration.PILOT_ENV, str(folder))
    registered_claims().preregister(folder=tmp_path / "registered", design=DESIGN)
    reg = json.loads(staged.read_text())
    assert not (tmp_path / "registered").exists()
    assert reg["pilot"] == {"seeds": [100], "steps": 320} and reg["design"] == DESIGN
    fast, better = reg["tests"]["fast"], reg["tests"]["better"]
    assert fast["expected_width"] == pytest.approx(0.4) and fast["undecidable"].startswith("not settled")
    assert better["expected_width"] == pytest.approx(0.3) and "contains 0" in better["undecidable"]
    path = tmp_path / "registered" / "99_demo.json"
    registration.write(path, reg, "power from the pilot", True)
    assert registration.changes(json.loads(path.read_text()), reg) == "nothing"
    old = {**reg, "tests": {i: {**t, "undecidable": None} for i, t in reg["tests"].items()}}
    assert registration.changes(old, reg) == "power from the pilot for better, fast"


def test_a_design_names_its_seeds_as_a_list_or_a_count() -> None:
    assert registration.seed_count({"seeds": [100, 101, 102]}) == 3 and registration.seed_count({"seeds": 10}) == 10
    assert registration.seed_count({"steps": 300}) is None and registration.seed_count(None) is None


def test_the_pilot_gives_power_only_to_the_claims_named(tmp_path, monkeypatch) -> None:
    """`Claims.pilot_claims`: the claims named take their power from the pilot; the others
    (a wall-clock claim whose spread is the machine's, not the seeds') are registered without one."""
    folder = tmp_path / "pilot"
    (folder / "T").mkdir(parents=True)
    pilot(fast=(2.2, 2.6), better=(-0.2, 0.1)).to_csv(folder / "T" / "claims.csv", index=False)
    staged = tmp_path / "staged.json"
    monkeypatch.setenv(REGISTER_ENV, str(staged))
    monkeypatch.setenv(registration.PILOT_ENV, str(folder))
    claims = registered_claims()
    claims.pilot_claims = ["better"]
    claims.preregister(design=DESIGN)
    tests = json.loads(staged.read_text())["tests"]
    assert tests["better"]["expected_width"] == pytest.approx(0.3) and "contains 0" in tests["better"]["undecidable"]
    assert tests["fast"]["expected_width"] is None and tests["fast"]["undecidable"] is None


def test_a_threshold_sourced_to_a_pilot_is_refused_where_the_profile_has_no_pilot(tmp_path, monkeypatch) -> None:
    """A margin from another profile's pilot (another model and data) is not this run's: registering it
    without this profile's pilot fails, naming the claim and the command that runs the pilot."""
    from_pilot = Test(AT_MOST_0.quantity, "<=", 0.4, AT_MOST_0.statistic, form="non-inferiority",
                      source="pilot: one seed SD of B's loss over the pilot's seeds")
    monkeypatch.setenv(REGISTER_ENV, str(tmp_path / "staged.json"))
    monkeypatch.setenv("DISTSGD_PROFILE", "full")
    monkeypatch.setenv(registration.PILOT_ENV, str(tmp_path / "no-pilot"))
    with pytest.raises(RegistrationError, match=r"99_demo: the thresholds of better name a pilot.*"
                                                r"--pilot --profile full --only 99_demo.*margins: null"):
        registered_claims(better=from_pilot).preregister(design=DESIGN)
    assert not (tmp_path / "staged.json").exists()
    (tmp_path / "pilot" / "T").mkdir(parents=True)
    pilot(fast=(2.2, 2.6), better=(-0.2, 0.1)).to_csv(tmp_path / "pilot" / "T" / "claims.csv", index=False)
    monkeypatch.setenv(registration.PILOT_ENV, str(tmp_path / "pilot"))
    registered_claims(better=from_pilot).preregister(design=DESIGN)
    assert json.loads((tmp_path / "staged.json").read_text())["tests"]["better"]["threshold"] == 0.4


NOTEBOOKS = sorted(p.stem for p in (Path(__file__).resolve().parent.parent / "notebooks").glob("[0-9][0-9]_*.ipynb"))


@pytest.mark.parametrize("notebook", NOTEBOOKS)
def test_every_notebook_has_a_committed_quick_registration_written_before_its_first_run(notebook) -> None:
    """nbval runs the quick profile against these files: each names its design, and each test its
    form, its threshold's source and its power; each notebook calls preregister with its design
    before anything that runs or measures, and registers nothing after."""
    import nbformat

    repo = Path(__file__).resolve().parent.parent
    reg = json.loads((repo / "reproduce" / "registered" / "quick" / f"{notebook}.json").read_text())
    assert reg["tests"] and reg.get("design"), notebook
    for id, t in reg["tests"].items():
        assert set(t) >= {*TEST_FIELDS, "expected_width", "undecidable"}, (notebook, id)
        Test(**{f: t[f] for f in TEST_FIELDS})          # a known form, a sourced threshold
    code = [c.source for c in nbformat.read(repo / "notebooks" / f"{notebook}.ipynb", 4).cells if c.cell_type == "code"]
    pre = next(i for i, s in enumerate(code) if "claims.preregister(dry_run, design=" in s)
    first_run = next(i for i, s in enumerate(code) if runs_or_measures(s))
    assert pre < first_run, (notebook, pre, first_run)
    assert not any("register(" in s and "preregister" not in s for s in code[pre + 1:]), notebook
    log = registration.read_log(repo / "reproduce" / "registered" / "quick")
    assert notebook in set(log.notebook), f"{notebook}: its registration is not in the registration log"


RUNS_OR_MEASURES = ("distsgd.run(", "bench_schedules(", '"bench"', "on_ranks(", "real_collective_times(",
                    # the thin notebooks' calls into distsgd.experiments that run or measure (issue 36)
                    "machine_checks(", "run_bench(", "scaled_networks(", "network_runs(", "accuracy_runs(",
                    "bench_at_setting(")


def runs_or_measures(cell: str) -> bool:
    """Whether a code cell starts a run or a measurement when it executes (not in a function it
    only defines): one of `RUNS_OR_MEASURES`, or a call of a function named run_* (the
    experiments modules' convention for the functions that run)."""
    import ast
    import re

    body = [s for s in ast.parse(cell).body if not isinstance(s, (ast.FunctionDef, ast.ClassDef))]
    return any(k in ast.get_source_segment(cell, s) or re.search(r"\brun_\w*\(", ast.get_source_segment(cell, s))
               for s in body for k in RUNS_OR_MEASURES)


def test_a_claim_without_a_finite_interval_says_so() -> None:
    claims = make_claims()
    assert claims.decide("better", float("nan"), float("nan"), -0.2) == INCONCLUSIVE
    assert claims.table().set_index("id").reason["better"] == "loss gap = -0.2, no interval (too few values for one)"


def test_decide_mean_is_the_t_interval_over_the_finite_seeds() -> None:
    claims = make_claims()
    values = [-0.4, -0.3, float("nan"), -0.35]
    assert claims.decide_mean("better", values, "loss gap", "{:+.2f}") == REPRODUCED
    row = claims.table().set_index("id").loc["better"]
    ci = stats.ttest_1samp([-0.4, -0.3, -0.35], 0.0).confidence_interval(0.95)
    assert (row.low, row.high) == pytest.approx((ci.low, ci.high))
    assert row.estimate == pytest.approx(-0.35)
    assert row.measured == "loss gap per seed: -0.40, -0.30, +nan, -0.35"
    assert claims.decide_mean("fast", [2.5], "speed-up") == INCONCLUSIVE     # one seed: no interval
    assert np.isnan(claims.table().set_index("id").low["fast"])


def test_interval_or_nan_gives_the_interval_or_nan_where_the_values_cannot():
    a, b = [1.0, 2.0, 4.0], [0.5, 1.5, 2.0]
    assert interval_or_nan(paired_interval, a, b) == paired_interval(a, b)
    assert interval_or_nan(median_interval, a) == median_interval(a)
    with pytest.raises(ValueError):
        median_interval([])                      # a dry run's empty list of logged periods
    assert np.isnan(interval_or_nan(median_interval, [])).all()
    assert np.isnan(interval_or_nan(lambda v: (v[0], v[5]), [1.0])).all()    # IndexError
    with pytest.raises(KeyError):                # anything else is a bug, not a short run
        interval_or_nan(lambda v: {}[v], "loss")

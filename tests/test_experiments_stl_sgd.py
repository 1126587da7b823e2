"""distsgd.experiments.stl_sgd (notebook 04): registration, f*, runs, gaps, rounds to a target, the
schedule's round count, invariants and the claims' per-seed values; on synthetic runs (no training)
but for f*, one L-BFGS solve on the digits."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from distsgd.verdicts.claims import Claims
from distsgd.experiments import stl_sgd as st

REGISTERED = Path(__file__).resolve().parent.parent / "reproduce" / "registered" / "quick"
LOCAL = "local SGD k=8"


def fake_run(steps: list[int], objective: list[float], reductions: list[float], lr: list[float] | None = None):
    return SimpleNamespace(metrics=pd.DataFrame({"step": steps, "train_objective": objective,
                                                 "global_reductions": reductions,
                                                 "lr": lr or [0.5] * len(steps)}))


def test_registration_at_the_quick_profile_is_the_committed_one() -> None:
    claims = Claims("04_stl_sgd")
    st.register_claims(claims, 8, 3)
    committed = json.loads((REGISTERED / "04_stl_sgd.json").read_text())["tests"]
    assert claims.registered_tests() == committed
    assert [st.split_key(s) for s, _, _ in st.SPLITS] == ["iid", "noniid"]


def test_optimum_of_the_regularized_logistic_regression_on_digits() -> None:
    f_star = st.optimum("digits", "logistic", 0.01)
    assert f_star == pytest.approx(0.2980844003154, abs=1e-9)      # any initial model: L-BFGS to 1e-14


def test_run_methods_makes_three_runs_per_split_and_seed(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(st, "run", lambda **kw: calls.append(kw) or kw["algo"])
    runs = st.run_methods({"nproc": 4}, [0, 1], 8, 2)
    assert len(runs) == 12 and runs["non-IID", LOCAL, 1] == "local_sgd"
    assert calls[5] == {"algo": "stl_sgd", "params": {"period": 2, "growth": "noniid"}, "partition": "shards",
                        "seed": 0, "nproc": 4}


def test_gaps_settled_gap_rounds_to_targets_and_slopes() -> None:
    f_star, steps = 1.0, [0, 16, 32, 48, 64]
    runs = {("IID", "S-SGD", 0): fake_run(steps, [3.0, 1.5, 1.2, 1.1, 1.05], [0, 64, 128, 192, 256]),
            ("IID", LOCAL, 0): fake_run(steps, [3.0, 1.8, 1.4, 1.2, 1.15], [0, 8, 16, 24, 32]),
            ("IID", "STL-SGD", 0): fake_run(steps, [3.0, 1.6, 1.3, 1.2, 1.1], [0, 16, 24, 28, 30])}
    g = st.with_gap(runs["IID", "STL-SGD", 0], f_star, 4)
    assert g.gap.tolist() == pytest.approx([2.0, 0.6, 0.3, 0.2, 0.1]) and g.rounds.tolist()[-1] == 7.5
    assert st.with_gap(fake_run([0], [0.5], [0]), f_star, 4).gap.tolist() == [1e-8]     # below f*: clipped
    curves = st.gap_curves(runs, f_star, 4)
    assert list(curves.columns) == ["iteration", "rounds", "gap", "split", "method", "seed"] and len(curves) == 15
    assert st.settled_gap(curves[curves.method == "S-SGD"]) == pytest.approx(0.05)    # iterations > 48
    # targets 2, 0.447, 0.1 (STL-SGD's first gap to its settled gap); local SGD never reaches 0.1
    hits = st.rounds_to_targets(runs, curves, f_star, 4, 0, ["S-SGD", LOCAL, "STL-SGD"], n_targets=3)
    assert len(hits) == 8 and set(hits.split) == {"IID"}
    assert hits[hits.method == "S-SGD"]["T"].tolist() == [0, 32, 48] and hits[hits.method == "S-SGD"].R.tolist() == [0, 32, 48]
    assert hits[hits.method == LOCAL].R.tolist() == [0, 4]
    t = pd.DataFrame({"T": [1, 4, 16, 64, 64], "R": [2, 4, 8, 16, 99]})
    assert st.slope(t) == pytest.approx(0.5)                     # R ~ sqrt(T); a repeated T counts once
    assert math.isnan(st.slope(t.iloc[:2]))
    s = st.slopes(pd.DataFrame({"split": "IID", "method": "m", "T": [1, 2, 4], "R": [1, 2, 4]}))
    assert s[("IID", "m")] == pytest.approx(1.0)


def test_schedule_rounds_iid_and_noniid() -> None:
    # IID, k0 = 2, T0 = 4: stage 0 (steps 0-3) period 2, stage 1 (steps 4-11) period 4
    assert st.schedule_rounds(12, 2, 4, "iid") == [0, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4]
    # non-IID: stage 1's period is round(2 * sqrt 2) = 3; stage 2 starts at step 12 with an average
    assert st.schedule_rounds(13, 2, 4, "noniid") == [0, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5]


def test_invariants_hold_and_fail() -> None:
    steps = list(range(13))
    good = st.schedule_rounds(12, 2, 4, "iid")
    stl = fake_run(steps, [1.0] * 13, [0] + [4 * good[t - 1] for t in steps[1:]])
    assert st.stl_rounds_invariant(stl, "iid", 12, 2, 4, 4) == ("4 rounds after 12 steps (schedule)", "4 rounds", True)
    assert not st.stl_rounds_invariant(stl, "noniid", 12, 2, 4, 4)[2]
    local = fake_run([0, 4, 8, 12], [1.0] * 4, [0, 0, 4, 4])
    assert st.local_rounds_invariant(local, 12, 8, 4) == ("1 rounds after 12 steps", "1 rounds", True)
    assert not st.local_rounds_invariant(local, 12, 4, 4)[2]
    rates = [0.5, 0.5, 0.25, 0.25]
    steps = [0, 4, 8, 12]
    runs = {("IID", m, s): fake_run(steps, [1.0] * 4, [0] * 4, rates) for m in ["S-SGD", LOCAL, "STL-SGD"] for s in (0, 1)}
    assert st.rates_invariant(runs, "IID", [0, 1], ["S-SGD", LOCAL, "STL-SGD"], 0.5, 12, 4) == \
        ("lr/2^s, 0.5 to 0.25", "0.5 to 0.25", True)
    runs["IID", "STL-SGD", 1] = fake_run(steps, [1.0] * 4, [0] * 4, [0.5, 0.5, 0.5, 0.25])
    assert st.rates_invariant(runs, "IID", [0, 1], ["S-SGD", LOCAL, "STL-SGD"], 0.5, 12, 4)[1:] == ("0.5 to 0.25, differ", False)


def test_claim_values_within_stl_sgds_round_budget() -> None:
    rows = []
    for s in (0, 1):
        for method, rounds, gaps in [("STL-SGD", [0, 5, 10], [1.0, 0.1, 0.01]),
                                     (LOCAL, [0, 10, 20], [1.0, 0.1, 0.001]),       # its best within 10 rounds: 0.1
                                     ("S-SGD", [0, 50, 100], [1.0, 0.04, 0.005 * (s + 1)])]:
            rows += [{"split": "IID", "seed": s, "method": method, "iteration": 10 * i, "rounds": r, "gap": g}
                     for i, (r, g) in enumerate(zip(rounds, gaps))]
    fewer, per_iter = st.claim_values(pd.DataFrame(rows), "IID", [0, 1], LOCAL)
    assert fewer == pytest.approx([1.0, 1.0])                      # both baselines at 0.1 within 10 rounds vs 0.01
    assert per_iter == pytest.approx([np.log2(0.01 / 0.005), np.log2(0.01 / 0.01)])

"""distsgd.experiments.baselines (notebook 00): its tables, invariants and decisions on synthetic runs."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from distsgd.verdicts.claims import Claims, Test
from distsgd.experiments import baselines

REPO = Path(__file__).resolve().parent.parent


def fake_run(train_loss=(1.0, 0.5), wall_s=(0.0, 1.0), steps=(0, 4), acc=0.9, comm_bytes=400.0, train_s=2.0):
    """A stand-in for a Result: its summary and metrics."""
    return SimpleNamespace(summary={"final_train_loss": train_loss[-1], "final_test_acc": acc,
                                    "comm_bytes": comm_bytes, "train_s": train_s, "comm_wait_s": 0.5},
                           metrics=pd.DataFrame({"step": list(steps), "wall_s": list(wall_s),
                                                 "train_loss": list(train_loss)}))


def claims_00() -> Claims:
    claims = Claims("00_baselines")
    claims.register("local_sgd_iid_accuracy", "c", "p", Test("q", ">=", -1.11, "s", form="non-inferiority",
                                                              source="pilot: S-SGD's seed range"))
    claims.preregister(dry_run=True)
    return claims


def test_summary_table_one_row_per_method() -> None:
    t = baselines.summary_table({"S-SGD": fake_run(comm_bytes=2e6), "DDP": fake_run()})
    assert list(t.method) == ["S-SGD", "DDP"]
    assert t["MB sent (all ranks)"].iloc[0] == 2.0 and t["final train loss"].iloc[0] == 0.5


def test_iid_accuracy_pairs_runs_both_methods_per_seed_without_the_network(monkeypatch) -> None:
    calls = []

    def run(**kw):
        calls.append(kw)
        return fake_run(acc=0.9 if kw["algo"] == "ssgd" else 0.8)

    monkeypatch.setattr(baselines, "run", run)
    pairs = baselines.iid_accuracy_pairs({"seed": 0, "net": "1Gbit,1us", "steps": 2}, [0, 1])
    assert [(c["algo"], c["seed"], c["net"]) for c in calls] == [("ssgd", 0, ""), ("local_sgd", 0, ""),
                                                                  ("ssgd", 1, ""), ("local_sgd", 1, "")]
    assert calls[1]["params"] == {"period": 4} and calls[3]["name"] == "local_sgd_k4_seed1"
    assert list(pairs["S-SGD"]) == [0.9, 0.9] and list(pairs["local SGD k=4"]) == [0.8, 0.8]


def test_invariants_hold_for_identical_schedules_and_fail_for_a_byte_count_off() -> None:
    claims = claims_00()
    runs = {"S-SGD": fake_run(comm_bytes=1600.0), "DDP": fake_run(), "local SGD k=1": fake_run(comm_bytes=1600.0),
            "local SGD k=4": fake_run(comm_bytes=400.0), "local SGD k=16": fake_run(comm_bytes=200.0)}
    baselines.check_invariants(claims, runs, [1, 4, 16])
    holds = {r["invariant"]: r["holds"] for r in claims.invariants}
    assert len(holds) == 4
    assert holds["local SGD with period 4 sends 4x fewer bytes than S-SGD"]
    assert not holds["local SGD with period 16 sends 16x fewer bytes than S-SGD"]      # 8x, not 16x
    assert all(v for k, v in holds.items() if "16" not in k)


def test_block_ratios_per_aligned_block_and_without_aligned_logs() -> None:
    steps = [0, 2, 4, 6, 8]
    slow = pd.DataFrame({"step": steps, "wall_s": [0.0, 1.0, 2.0, 3.0, 4.0]})
    fast = pd.DataFrame({"step": steps, "wall_s": [0.0, 0.5, 1.0, 1.25, 1.5]})
    assert np.allclose(baselines.block_ratios(slow, fast, 4), [2.0, 4.0])          # blocks 0-4, 4-8
    assert np.allclose(baselines.block_ratios(slow, fast, 8), [4 / 1.5])               # one block, 0-8
    assert np.allclose(baselines.block_ratios(slow, fast, 16), [2.0, 2.0, 4.0, 4.0])  # no multiple: every log


def test_the_speedup_is_an_invariant_from_the_median_block_ratio() -> None:
    """A near-identity of the emulated network (issue 37): asserted, not a claim; it fails below 2."""
    claims = claims_00()
    slow = fake_run(steps=range(0, 44, 4), wall_s=[3.0 * i for i in range(11)], train_loss=[1.0] * 11)
    fast = fake_run(steps=range(0, 44, 4), wall_s=[1.0 * i for i in range(11)], train_loss=[1.0] * 11)
    assert baselines.check_speedup(claims, {"S-SGD": slow, "local SGD k=4": fast}, 4) == pytest.approx(3.0)
    (row,) = claims.invariants
    assert row["holds"] and "over 10 blocks" in row["measured"]
    assert "local_sgd_wallclock_speedup" not in set(claims.table().id)
    close = fake_run(steps=range(0, 44, 4), wall_s=[1.5 * i for i in range(11)], train_loss=[1.0] * 11)
    again = claims_00()
    baselines.check_speedup(again, {"S-SGD": close, "local SGD k=4": fast}, 4)
    assert not again.invariants[0]["holds"]


def test_decide_iid_accuracy_paired_over_seeds_and_none_with_one_seed() -> None:
    claims = claims_00()
    pairs = pd.DataFrame({"seed": [0, 1, 2], "S-SGD": [0.90, 0.91, 0.92], "local SGD k=4": [0.90, 0.905, 0.92]})
    assert baselines.decide_iid_accuracy(claims, pairs) == "reproduced"       # [-0.88, 0.55] above -1.11
    c = claims.table().set_index("id").loc["local_sgd_iid_accuracy"]
    assert c.estimate == pytest.approx(-0.5 / 3)
    assert c.measured == ("S-SGD per seed 90.00, 91.00, 92.00%; local SGD k=4 per seed 90.00, 90.50, 92.00%; "
                          "per-seed differences +0.00, -0.50, +0.00 points")
    assert baselines.ssgd_seed_range(c.measured) == 2.0
    one = claims_00()
    baselines.decide_iid_accuracy(one, pairs.iloc[:1])
    assert math.isnan(one.table().set_index("id").loc["local_sgd_iid_accuracy"].low)
    behind = claims_00()                                  # 1.5 points behind on every seed: beyond the margin
    assert baselines.decide_iid_accuracy(behind, pairs.assign(**{"local SGD k=4": pairs["S-SGD"] - 0.015})) == "contradicted"


def test_ssgd_seed_range_reads_the_listed_accuracies_only() -> None:
    assert baselines.ssgd_seed_range("S-SGD per seed 96.10, 96.10, 94.99, 94.99, 95.54%; local SGD k=4 per seed "
                                     "90.00, 99.00%; per-seed differences +0.56 points") == 1.11
    with pytest.raises(ValueError, match="no S-SGD accuracies"):
        baselines.ssgd_seed_range("per-seed differences -0.28, +0.28 points")


def test_the_registered_margin_is_the_committed_pilots_ssgd_seed_range() -> None:
    """The margin's source, checked: the registered threshold of local_sgd_iid_accuracy is minus S-SGD's
    seed range in the committed pilot at T, whose seeds are disjoint from the deciding ones and whose
    run length is theirs; the registration carries the pilot's power."""
    reg = json.loads((REPO / "reproduce/registered/quick/00_baselines.json").read_text())
    test = reg["tests"]["local_sgd_iid_accuracy"]
    pilot = pd.read_csv(REPO / "reproduce/pilots/quick/00_baselines/T/claims.csv").set_index("id").loc["local_sgd_iid_accuracy"]
    assert test["threshold"] == -baselines.ssgd_seed_range(pilot.measured)
    assert test["form"] == "non-inferiority" and test["source"].startswith("pilot: ")
    assert not set(reg["pilot"]["seeds"]) & set(reg["design"]["seeds"])
    assert reg["pilot"]["steps"] == reg["design"]["steps"]
    assert test["expected_width"] == pytest.approx(pilot.high - pilot.low) and test["undecidable"] is None


def test_the_claim_registers_the_pilots_margin_or_the_null_without_one() -> None:
    """`register_claim` with the notebook's margin_points is the committed registration's test; None
    (the pilot itself, a profile without a pilot) is the null, 0 points, sourced so."""
    registered = json.loads((REPO / "reproduce/registered/quick/00_baselines.json").read_text())["tests"]
    claims = Claims("00_baselines")
    baselines.register_claim(claims, 5, 1.11)
    test = claims.claims["local_sgd_iid_accuracy"].test
    assert {f: getattr(test, f) for f in ("threshold", "source", "statistic", "form", "side")} == {
        f: registered["local_sgd_iid_accuracy"][f] for f in ("threshold", "source", "statistic", "form", "side")}
    null = Claims("00_baselines")
    baselines.register_claim(null, 5, None)
    test = null.claims["local_sgd_iid_accuracy"].test
    assert test.threshold == 0.0 and test.source.startswith("null: ")

"""distsgd.experiments.global_reductions (notebook 09): group count, registration, runs, tables,
reductions to a target; on synthetic runs (no training)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from distsgd.verdicts.claims import Claims
from distsgd.experiments import global_reductions as gr

REGISTERED = Path(__file__).resolve().parent.parent / "reproduce" / "registered" / "quick"


def fake_run(acc: list[float], reductions: list[float], local: float = 0.0) -> SimpleNamespace:
    """A finished run's metrics (test accuracy and global reductions per logged step) and summary."""
    m = pd.DataFrame({"step": range(len(acc)), "test_acc": acc, "global_reductions": reductions})
    return SimpleNamespace(metrics=m, summary={"global_reductions": reductions[-1], "local_reductions": local,
                                               "final_test_acc": acc[-1], "final_train_loss": 0.5})


def test_local_group_count_derives_checks_or_refuses() -> None:
    assert gr.local_group_count(4, 0) == 2
    assert gr.local_group_count(12, 0) == 2 and gr.local_group_count(12, 6) == 6
    assert gr.local_group_count(9, 0) == 3
    assert gr.local_group_count(7, 0) is None                     # prime: no grouping
    with pytest.raises(ValueError, match="allowed values are 0 .derived from nproc., 2, 3, 4, 6"):
        gr.local_group_count(12, 5)
    with pytest.raises(ValueError, match="nproc has no divisor"):
        gr.local_group_count(5, 2)


def test_registration_at_the_quick_profile_is_the_committed_one() -> None:
    claims = Claims("09_global_reductions")
    gr.register_claims(claims, ["SGD", "Adam"], 128, 0.5, 5, 1000, 0.9, 0.95, 2, 4)
    committed = json.loads((REGISTERED / "09_global_reductions.json").read_text())["tests"]
    assert claims.registered_tests() == committed
    assert not any(c.precheck for c in claims.claims.values())


def test_registration_prechecks_coarse_resolution_and_prime_nproc() -> None:
    claims = Claims("09_global_reductions")
    gr.register_claims(claims, ["SGD", "Adam"], 2, 0.5, 2, 4, 30.0, 0.95, None, 3)
    prechecked = {id for id, c in claims.claims.items() if c.precheck}
    assert prechecked == {"sgd_comparable_acc", "adam_comparable_acc", "local_momentum_fewer_reductions",
                          "momentum_ablation"}
    assert "nproc=3" in claims.claims["momentum_ablation"].precheck


def test_run_kavg_and_local_momentum_make_the_notebooks_runs(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(gr, "run", lambda **kw: calls.append(kw) or kw["name"])
    runs = gr.run_kavg({"SGD": {"optimizer": "sgd"}, "Adam": {"optimizer": "adam"}}, [16, 128], [0, 1], {"nproc": 4})
    assert list(runs) == [("SGD", "synchronous", 0), ("SGD", "KAVG K=16", 0), ("SGD", "KAVG K=128", 0),
                          ("SGD", "synchronous", 1), ("SGD", "KAVG K=16", 1), ("SGD", "KAVG K=128", 1),
                          ("Adam", "synchronous", 0), ("Adam", "KAVG K=16", 0), ("Adam", "KAVG K=128", 0),
                          ("Adam", "synchronous", 1), ("Adam", "KAVG K=128", 1)]   # Adam's K=16: first seed only
    assert calls[1] == {"algo": "kavg", "params": {"period": 16}, "name": "kavg16-SGD", "seed": 0, "nproc": 4,
                        "optimizer": "sgd"}
    gr.run_local_momentum(runs, [16], [0], 0.5, 2, 4, {"optimizer": "sgd"}, {"nproc": 4})
    assert runs["SGD", "local+momentum K_g=16 mu=0.5", 0] == "local16-mu0.5"
    assert calls[-2]["params"] == {"period": 16, "local_groups": 2, "local_period": 4, "reduction_momentum": 0.0}


def test_tables_reductions_to_target_and_the_best_period() -> None:
    runs = {("SGD", "synchronous", 0): fake_run([0.5, 0.9], [0, 400]),
            ("SGD", "KAVG K=16", 0): fake_run([0.5, 0.8, 0.9], [0, 8, 16]),
            ("SGD", "KAVG K=128", 0): fake_run([0.5, 0.9, 0.95], [0, 4, 8], local=40),
            ("SGD", "KAVG K=16", 1): fake_run([0.5, 0.7], [0, 8]),
            ("SGD", "KAVG K=128", 1): fake_run([0.5, 0.95], [0, 8])}
    assert gr.reductions_to(runs["SGD", "KAVG K=16", 0], 0.9, 4) == 4.0
    assert math.isnan(gr.reductions_to(runs["SGD", "KAVG K=16", 1], 0.9, 4))
    assert gr.best_reductions(runs, "KAVG K={k}", [16, 128, 512], 0, 0.9, 4) == 1.0   # K=128 at 4 / 4 ranks
    assert gr.best_reductions(runs, "KAVG K={k}", [16, 128], 1, 0.9, 4) == 2.0        # K=16 never reaches it
    assert math.isnan(gr.best_reductions(runs, "KAVG K={k}", [16], 1, 0.9, 4))
    reach = gr.reach_table(runs, {0: 0.9, 1: 0.9}, 4)
    assert list(reach.method) == ["KAVG K=16", "KAVG K=128"] * 2            # synchronous left out
    assert reach["global reductions to target"].tolist()[:2] == [4.0, 1.0]
    assert reach["local reductions (per rank)"].tolist()[1] == 10.0
    table = gr.kavg_table(runs, 4, 0)
    assert table["global reductions"].tolist() == [100.0, 4.0, 2.0] and len(table) == 3
    curves = gr.sgd_curves(runs, 4, 0)
    assert len(curves) == 8 and curves.rounds.max() == 100.0


def test_reduction_cut_measured_against_the_schedule() -> None:
    sync, sparse = SimpleNamespace(summary={"global_reductions": 512 * 4}), SimpleNamespace(summary={"global_reductions": 4 * 4})
    cut, expected = gr.reduction_cut(sync, sparse, 512, 128)
    assert cut == expected == 1 - 4 / 512

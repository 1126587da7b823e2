"""distsgd.experiments.vrl_sgd (notebook 05): registration, the runs it asks for, tables and the
loss claims' per-seed values; on synthetic runs (no training) and the committed authors' curves."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from distsgd.verdicts.claims import Claims
from distsgd.experiments import vrl_sgd as vs

REGISTERED = Path(__file__).resolve().parent.parent / "reproduce" / "registered" / "quick"
SPLITS = ["iid", "dirichlet:0.3", "shards"]


def fake(loss: float, comm: int = 100, acc: float = 0.9) -> SimpleNamespace:
    return SimpleNamespace(summary={"final_train_loss": loss, "final_test_acc": acc, "comm_bytes": comm, "train_s": 1.0})


def fake_runs(seeds: list[int]) -> dict:
    """S-SGD at loss 1 (IID) and 2 (shards); local SGD at 2x and VRL-SGD at 1.25x, local SGD's
    excess over VRL-SGD growing with the split's index and with k; seed s adds 0.1 s."""
    runs = {}
    for s in seeds:
        runs["S-SGD iid", s], runs["S-SGD shards", s] = fake(1 + 0.1 * s), fake(2 + 0.1 * s)
        for i, part in enumerate(SPLITS):
            base = runs["S-SGD shards" if part == "shards" else "S-SGD iid", s].summary["final_train_loss"]
            for k in [4, 16]:
                runs[f"local SGD {part} k={k}", s] = fake(2 * base + i + k / 16, comm=10 * k)
                runs[f"VRL-SGD {part} k={k}", s] = fake(1.25 * base, comm=10 * k)
    return runs


def test_registration_at_the_quick_profile_is_the_committed_one() -> None:
    claims = Claims("05_vrl_sgd")
    vs.register_claims(claims, 16, [4, 16], 5, 359)
    committed = json.loads((REGISTERED / "05_vrl_sgd.json").read_text())["tests"]
    assert claims.registered_tests() == committed


def test_run_digits_runs_each_label_once(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(vs, "run", lambda **kw: calls.append(kw) or kw["name"])
    runs = vs.run_digits({"nproc": 4}, [0], SPLITS, [4, 16], 16)
    assert len(runs) == 2 + 2 * len(SPLITS) + 2                  # k=16 on shards is not run twice
    assert runs["S-SGD iid", 0] == "ssgd_iid_k1_s0"
    assert runs["VRL-SGD dirichlet:0.3 k=16", 0] == "vrl_sgd_dirichlet0.3_k16_s0"
    assert runs["local SGD shards k=4", 0] == "local_sgd_shards_k4_s0"
    assert calls[-1] == {"algo": "vrl_sgd", "params": {"period": 4}, "partition": "shards", "seed": 0,
                         "name": "vrl_sgd_shards_k4_s0", "nproc": 4}


def test_fitting_batch_size_is_the_smallest_part() -> None:
    assert vs.fitting_batch_size("digits", 4, ["iid", "shards"], [0], 32) == 32
    small = vs.fitting_batch_size("digits", 4, ["iid"], [0], 10_000)
    assert small < 10_000 and small == vs.fitting_batch_size("digits", 4, ["iid"], [0], small)


def test_tables_and_the_bytes_invariant() -> None:
    runs = fake_runs([0, 1])
    assert len(vs.summary_table(runs)) == len(runs)
    zeta = {"iid": 0.1, "dirichlet:0.3": 1.0, "shards": 5.0}
    sweep = vs.zeta_table(runs, zeta, 16, 0)
    assert sweep[sweep.method == "VRL-SGD"]["excess train loss over S-SGD"].round(9).tolist() == [0.25, 0.25, 1.5]
    ks = vs.k_sweep_table(runs, [4, 16], [0, 1])
    assert len(ks) == 8 and ks.iloc[0]["excess train loss over S-SGD"] == pytest.approx(2.0 + 2 + 0.25)
    expected, measured, holds = vs.bytes_invariant(runs, SPLITS, [0, 1], 16)
    assert holds and expected == "equal bytes in all 6 (split, seed) pairs"
    assert measured == "0.00 MB vs 0.00 MB (shards, seed 0)"
    runs["VRL-SGD iid k=16", 1] = fake(1.0, comm=161)
    assert not vs.bytes_invariant(runs, SPLITS, [0, 1], 16)[2]


def test_loss_claim_values_per_seed() -> None:
    seeds = [0, 1]
    runs = fake_runs(seeds)
    syn = {(m, shift, s): {"local SGD": 1.0 + shift, "VRL-SGD": 1.0}[m] for m in vs.LOCAL for shift in (0.0, 2.0) for s in seeds}
    zeta = {"iid": 0.1, "dirichlet:0.3": 1.0, "shards": 5.0}
    v = vs.loss_claim_values(runs, syn, zeta, [4, 16], 16, [0.0, 2.0], seeds)
    assert list(v) == ["noniid_local_worse", "noniid_vrl_matches_loss", "iid_local_matches_loss",
                       "iid_vrl_matches_loss", "k_sweep", "zeta_digits", "zeta_synthetic"]
    local = [math.log2((2 * (2 + 0.1 * s) + 2 + 1) / (2 + 0.1 * s)) for s in seeds]
    assert v["noniid_local_worse"][0] == pytest.approx(local)
    assert v["noniid_local_worse"][1] == "log2(local/S-SGD) (mean losses 7.100 vs 2.050)"
    assert v["noniid_vrl_matches_loss"][0] == pytest.approx([math.log2(1.25)] * 2)
    assert v["iid_local_matches_loss"][1].startswith("log2(local SGD/S-SGD)")
    assert v["k_sweep"][0] == pytest.approx([0.75, 0.75])             # local SGD: k/16 grows 0.25 -> 1
    assert v["zeta_digits"][0] == pytest.approx([2.75, 2.75])    # split index 0 -> 2, plus 0.75 x (S-SGD 2 - 1)
    assert v["zeta_digits"][1] == "(local − VRL) at shards (ζ² 5) − at iid (ζ² 0.1)"
    assert v["zeta_synthetic"] == ([2.0, 2.0], "(local − VRL) at shift 2 − at shift 0")


def test_authors_curves_and_the_paper_table() -> None:
    authors = vs.authors_curves()
    assert set(authors.method) == {"S-SGD", "local SGD", "VRL-SGD"}
    first = authors[authors.epoch == 2].iloc[0]
    assert first["epochs after the warm start"] == 0 and first["steps after the warm start"] == 0
    assert authors["steps after the warm start"].max() == 98 * 235
    metrics = pd.DataFrame({"step": [30, 45], "test_acc": [0.5, 0.6], "test_loss": [1.2, 1.0]})
    paper = {m: SimpleNamespace(metrics=metrics, summary={"final_test_acc": 0.6, "final_train_loss": 1.0, "comm_bytes": 2e6})
             for m in ["S-SGD", "local SGD", "VRL-SGD"]}
    curves = vs.paper_curves(paper, authors, 15)
    mine = curves[curves.source == "this run"]
    assert mine["steps after the warm start"].tolist() == [0, 15] * 3 and mine.test_acc.tolist() == [50.0, 60.0] * 3
    table = vs.paper_table(paper, authors, 1)
    assert table.loc["VRL-SGD", "this run: test acc (%)"] == 60.0
    assert table.loc["VRL-SGD", "authors, epoch 1 after warm start: test acc (%)"] == \
        authors[(authors.method == "VRL-SGD") & (authors.epoch == 3)].test_acc.iloc[0]
    assert np.isfinite(table["authors, epoch 98 after warm start: train loss"]).all()

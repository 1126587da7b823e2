"""distsgd.experiments.vrl_sgd (notebook 05): registration, the runs it asks for, tables, the claims'
per-seed values and premises, the decisions; on synthetic runs (no training) and the committed
authors' curves, and one planted change on real short runs: VRL-SGD with its correction Δ zeroed
(local SGD) reproduces none of the claims of its advantage."""
from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from distsgd.verdicts.claims import Claims
from distsgd.verdicts.registration import TEST_FIELDS
from distsgd.verdicts.verdict import REPRODUCED
from distsgd.experiments import vrl_sgd as vs

REGISTERED = Path(__file__).resolve().parent.parent / "reproduce" / "registered" / "quick"
SPLITS = ["iid", "dirichlet:0.3", "shards"]
ZETA = {"iid": 0.1, "dirichlet:0.3": 1.0, "shards": 5.0}
# the claims of VRL-SGD's advantage over local SGD: "better than", none may be reproduced by local SGD itself
ADVANTAGE = ["noniid_vrl_beats_local", "noniid_vrl_beats_local_acc", "k_sweep", "zeta_digits", "zeta_synthetic"]


def fake(loss: float, comm: int = 100, acc: float = 0.9, correct: np.ndarray | None = None) -> SimpleNamespace:
    return SimpleNamespace(summary={"final_train_loss": loss, "final_test_acc": acc, "comm_bytes": comm, "train_s": 1.0,
                                    "max_rank_spread_final_train_loss": 0.0},
                           test_correct=lambda: correct)


def fake_runs(seeds: list[int], vrl_share_left: float = 0.25) -> dict:
    """S-SGD at loss 1 (IID) and 2 (shards), + 0.1 s for seed s; local SGD at 2x S-SGD's plus the
    split's index plus k/16; VRL-SGD at S-SGD's plus `vrl_share_left` of local SGD's excess (1:
    local SGD's very numbers). Test images: 100, S-SGD right on the first 90, local SGD on the first 80,
    VRL-SGD on the first 80 + (10 + s) x (1 - share left)."""
    runs = {}
    for s in seeds:
        right = lambda n: (np.arange(100) < n).astype(float)     # noqa: E731
        runs["S-SGD iid", s] = fake(1 + 0.1 * s, correct=right(90))
        runs["S-SGD shards", s] = fake(2 + 0.1 * s, correct=right(90))
        for i, part in enumerate(SPLITS):
            base = runs["S-SGD shards" if part == "shards" else "S-SGD iid", s].summary["final_train_loss"]
            for k in [4, 16]:
                local = 2 * base + i + k / 16
                runs[f"local SGD {part} k={k}", s] = fake(local, comm=10 * k, correct=right(80))
                vrl = local if vrl_share_left == 1 else base + vrl_share_left * (local - base)
                runs[f"VRL-SGD {part} k={k}", s] = fake(vrl, comm=10 * k,
                                                        correct=right(80 + (10 + s) * (1 - vrl_share_left)))
    return runs


def fake_synthetic(seeds: list[int], vrl_share_left: float = 0.0) -> dict:
    """Losses at shift 0 and 2: f* + 0.1 for S-SGD, local SGD's excess 0.1 + shift, VRL-SGD's
    S-SGD's plus `vrl_share_left` of local SGD's excess."""
    out = {}
    for s in seeds:
        for shift in (0.0, 2.0):
            local = 1.0 + shift + 0.1 + shift
            out["S-SGD", shift, s] = fake(1.0 + shift + 0.1)
            out["local SGD", shift, s] = fake(local)
            out["VRL-SGD", shift, s] = fake(local if vrl_share_left == 1 else 1.1 + shift + vrl_share_left * (local - 1.1 - shift))
    return out


MINIMUM = {0.0: 1.0, 2.0: 3.0}


def decided(runs: dict, syn: dict, seeds: list[int]) -> pd.DataFrame:
    claims = Claims("05_vrl_sgd")
    vs.register_claims(claims, 16, [4, 16], len(seeds), 100)
    claims.preregister(dry_run=True)
    values, premises = vs.claim_values(runs, syn, MINIMUM, ZETA, [4, 16], 16, [0.0, 2.0], seeds)
    vs.decide_claims(claims, values, premises, vs.shard_test_correct(runs, 16, seeds))
    return claims.table().set_index("id")


def test_registration_at_the_quick_profile_is_the_committed_one() -> None:
    claims = Claims("05_vrl_sgd")
    vs.register_claims(claims, 16, [4, 16], 5, 359)
    committed = json.loads((REGISTERED / "05_vrl_sgd.json").read_text())["tests"]
    assert claims.registered_tests() == {i: {f: t[f] for f in ("claim", "paper", *TEST_FIELDS)} for i, t in committed.items()}


def test_every_threshold_has_a_source_and_every_better_than_is_superiority() -> None:
    claims = Claims("05_vrl_sgd")
    vs.register_claims(claims, 16, [4, 16], 5, 359)
    tests = claims.registered_tests()
    assert {i for i, t in tests.items() if t["form"] == "superiority"} == {*ADVANTAGE, "noniid_local_worse"}
    assert all(t["threshold"] == 0 and t["source"].startswith("null:") for i, t in tests.items() if t["form"] == "superiority")
    assert tests["noniid_vrl_matches_loss"]["threshold"] == pytest.approx((0.030110 - 0.028439) / (0.100205 - 0.028439), rel=1e-3)
    assert claims.claims["vrl_linear_speedup"].precheck == vs.SPEEDUP_UNDECIDABLE


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


def test_lsq_minimum_is_the_least_squares_loss() -> None:
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(200, 3, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5]) + 0.7 + 0.1 * torch.randn(200, generator=g)
    best = vs.lsq_minimum(x, y)
    assert 0 < best < 0.02
    a = torch.cat([x, torch.ones(200, 1)], 1).double()
    for theta in (torch.tensor([1.0, -2.0, 0.5, 0.7]), torch.tensor([1.1, -2.0, 0.5, 0.7])):
        assert float((a @ theta.double() - y.double()).pow(2).mean()) >= best


def test_tables_and_the_invariants() -> None:
    runs = fake_runs([0, 1])
    assert len(vs.summary_table(runs)) == len(runs)
    sweep = vs.zeta_table(runs, ZETA, 16, 0)
    assert sweep[sweep.method == "VRL-SGD"]["excess train loss over S-SGD"].round(9).tolist() == [0.5, 0.75, 2.25]
    ks = vs.k_sweep_table(runs, [4, 16], [0, 1])
    assert len(ks) == 8 and ks.iloc[0]["excess train loss over S-SGD"] == pytest.approx(2.0 + 2 + 0.25)
    expected, measured, holds = vs.bytes_invariant(runs, SPLITS, [0, 1], 16)
    assert holds and expected == "equal bytes in all 6 (split, seed) pairs"
    assert measured == "0.00 MB vs 0.00 MB (shards, seed 0)"
    assert vs.averaged_model_invariant(runs.values())[2]
    runs["VRL-SGD iid k=16", 1] = fake(1.0, comm=161)
    assert not vs.bytes_invariant(runs, SPLITS, [0, 1], 16)[2]
    runs["VRL-SGD iid k=16", 1].summary["max_rank_spread_final_train_loss"] = 0.01    # a worker's own model
    assert not vs.averaged_model_invariant(runs.values())[2]


def test_claim_values_per_seed() -> None:
    seeds = [0, 1]
    values, premises = vs.claim_values(fake_runs(seeds), fake_synthetic(seeds), MINIMUM, ZETA, [4, 16], 16, [0.0, 2.0], seeds)
    assert list(values) == ["noniid_local_worse", "noniid_vrl_beats_local", "noniid_vrl_matches_loss", "iid_local_matches_loss",
                            "iid_vrl_matches_loss", "k_sweep", "zeta_digits", "zeta_synthetic"]
    assert values["noniid_local_worse"].values == pytest.approx([5 + 0.1 * s for s in seeds])     # S-SGD's loss + 2 + 1
    assert values["noniid_local_worse"].unit.startswith("local − S-SGD (shards; mean losses local SGD 7.1000")
    assert values["noniid_vrl_beats_local"].values == pytest.approx([0.75, 0.75])
    assert values["noniid_vrl_matches_loss"].values == pytest.approx([0.25, 0.25])
    # IID: local SGD's excess (1 + 0.1 s) + 0 + 1, over its excess on the shards (2 + 0.1 s) + 2 + 1
    assert values["iid_local_matches_loss"].values == pytest.approx([(1 + 0.1 * s + 1) / (2 + 0.1 * s + 3) for s in seeds])
    assert values["k_sweep"].values == pytest.approx([0.75 * 0.75] * 2)             # local SGD grows by 0.75, VRL-SGD 0.25 x that
    assert values["zeta_digits"].values == pytest.approx([0.75 * (2 + 0.1 * s + 3 - (1 + 0.1 * s + 1.0)) for s in seeds])
    assert values["zeta_synthetic"].values == pytest.approx([2.0, 2.0])
    assert premises["noniid_vrl_beats_local"] == premises["noniid_vrl_beats_local_acc"]
    assert premises["k_sweep"].values == pytest.approx([0.75, 0.75])
    assert premises["zeta_synthetic"].values == pytest.approx([(5.1 - 3.0) - (1.1 - 1.0)] * 2)
    assert premises["zeta_synthetic"].unit == "local SGD's excess over f* at shift 2 − at shift 0"


def test_premise_absent_unless_strictly_above_zero() -> None:
    assert vs.premise_absent(vs.PerSeed([0.1, 0.2, 0.15], "growth")) is None
    assert vs.premise_absent(vs.PerSeed([0.1, -0.2, 0.15], "growth")).startswith("premise absent: growth = ")
    assert vs.premise_absent(vs.PerSeed([0.0, 0.0, 0.0], "growth")) is not None
    assert vs.premise_absent(vs.PerSeed([0.1], "growth")) is not None          # no interval


def test_decisions_reproduce_an_advantage_and_not_an_identical_method() -> None:
    seeds = [0, 1, 2]
    better = decided(fake_runs(seeds), fake_synthetic(seeds), seeds)
    assert (better.loc[ADVANTAGE, "verdict"] == REPRODUCED).all(), better.loc[ADVANTAGE, "reason"]
    assert better.loc["noniid_local_worse", "verdict"] == REPRODUCED
    assert better.loc["vrl_linear_speedup", "reason"] == f"precheck: {vs.SPEEDUP_UNDECIDABLE}"
    assert "premise, local SGD's loss at k=16 − at k=4: +0.7500" in better.loc["k_sweep", "measured"]
    # Δ zeroed: VRL-SGD is local SGD, every difference is exactly 0 on every seed
    same = decided(fake_runs(seeds, vrl_share_left=1.0), fake_synthetic(seeds, vrl_share_left=1.0), seeds)
    assert not (same.loc[ADVANTAGE, "verdict"] == REPRODUCED).any(), same.loc[ADVANTAGE, "reason"]
    assert (same.loc[ADVANTAGE, ["low", "high"]] == 0).all().all()


def test_a_premise_absent_prechecks_its_claims() -> None:
    seeds = [0, 1, 2]
    runs = fake_runs(seeds)
    for s in seeds:          # local SGD ends at S-SGD's loss on the shards: no excess to remove
        for k in (4, 16):
            runs[f"local SGD shards k={k}", s].summary["final_train_loss"] = runs["S-SGD shards", s].summary["final_train_loss"] + 0.01 * (s - 1)
    table = decided(runs, fake_synthetic(seeds), seeds)
    for id in ("noniid_vrl_beats_local", "noniid_vrl_beats_local_acc", "k_sweep"):
        assert table.loc[id, "verdict"] == "inconclusive" and table.loc[id, "reason"].startswith("precheck: premise absent")


@pytest.mark.multiproc
def test_vrl_sgd_with_delta_zeroed_reproduces_no_advantage(monkeypatch) -> None:
    """The planted change: every "VRL-SGD" run of the notebook's experiment is VRL-SGD with Δ_i
    held at 0, whose update is local SGD's step for step (`methods` gives local_sgd for it), on a
    short form of the quick profile's runs (2 seeds, 60 digits and 60 synthetic steps). Local SGD
    still ends above S-SGD (the premise holds, the claims are decided by their tests) and none of
    the claims of VRL-SGD's advantage is reproduced: their intervals are [0, 0]."""
    real = vs.methods
    monkeypatch.setattr(vs, "methods", lambda k: {**real(k), "VRL-SGD": ("local_sgd", {"period": k})})
    seeds, shifts = [0, 1], [0.0, 2.0]
    common = dict(model="mlp", data="digits", nproc=4, steps=60, batch_size=32, lr=0.1, weight_decay=0.0,
                  backend="gloo", log_every=20, eval_every=0)
    runs = vs.run_digits(common, seeds, ["iid", "shards"], [4, 16], 16)
    _, syn_runs, minimum = vs.run_synthetic(common, shifts, seeds, 16, {"n": 512, "d": 8, "noise": 0.1}, 60, 0.1)
    zeta = vs.split_diversities(runs["S-SGD iid", 0], "mlp", "digits", 4, ["iid", "shards"], 0)
    claims = Claims("05_vrl_sgd")
    vs.register_claims(claims, 16, [4, 16], len(seeds), 359)
    claims.preregister(dry_run=True)
    values, premises = vs.claim_values(runs, syn_runs, minimum, zeta, [4, 16], 16, shifts, seeds)
    vs.decide_claims(claims, values, premises, vs.shard_test_correct(runs, 16, seeds))
    table = claims.table().set_index("id")
    assert table.loc["noniid_local_worse", "verdict"] == REPRODUCED, table.loc["noniid_local_worse", "reason"]
    assert not (table.loc[ADVANTAGE, "verdict"] == REPRODUCED).any(), table.loc[ADVANTAGE, ["verdict", "reason"]]
    assert (table.loc[ADVANTAGE, ["low", "high"]].abs() == 0).all().all()


def test_authors_curves_and_the_paper_table() -> None:
    authors = vs.authors_curves()
    assert set(authors.method) == {"S-SGD", "local SGD", "VRL-SGD"}
    first = authors[authors.epoch == 2].iloc[0]
    assert first["epochs after the warm start"] == 0 and first["steps after the warm start"] == 0
    assert authors["steps after the warm start"].max() == 98 * 235
    assert vs.authors_last().round(4).to_dict() == {"S-SGD": 0.0284, "local SGD": 0.1002, "VRL-SGD": 0.0301}
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
    assert math.isclose(vs.paper_share_left(), 0.0233, abs_tol=5e-5)

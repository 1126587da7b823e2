"""distsgd.experiments.dropit (notebook 03): registration, run tables, the in-process gradient and
memory tables on a tiny model, the figures, the invariants and the decisions."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from distsgd.verdicts.claims import Claims
from distsgd.data import load_data
from distsgd.experiments.dropit_paper_scale import summary
from distsgd.experiments import dropit as exp
from distsgd.models import build_model
from distsgd.paths import repo_root

COMMON = dict(algo="ssgd", data="digits", nproc=1, steps=2, batch_size=4)


def registered(models=("mlp",), gammas=(0.5, 0.9), random_gammas=(0.9,), resolution=0.9) -> Claims:
    claims = Claims("03_dropit")
    exp.register_claims(claims, list(models), list(gammas), list(random_gammas), 2, 100, resolution, 0.95)
    claims.preregister(dry_run=True)
    return claims


def fake_run(acc: float = 0.9, correct=(1, 0, 1, 1)) -> SimpleNamespace:
    return SimpleNamespace(summary={"final_test_acc": acc, "final_train_loss": 1 - acc, "train_s": 1.0},
                           test_correct=lambda: np.asarray(correct, float))


def test_gid() -> None:
    assert [exp.gid(g) for g in (0.5, 0.7, 0.9)] == ["g50", "g70", "g90"]


def test_n_test_images_follows_the_evaluation_cap(monkeypatch) -> None:
    ds = load_data("digits")
    full = exp.n_test_images(ds, "mlp", COMMON)
    monkeypatch.setenv("DISTSGD_MAX_EVAL_SAMPLES", "4")
    assert exp.n_test_images(ds, "mlp", COMMON) == 4 < full


def test_register_claims_ids_and_the_resolution_precheck() -> None:
    fine, coarse = registered(), registered(resolution=1.5)
    ids = list(fine.registered_tests())
    assert ids[:4] == ["acc_within_1pt_mlp_g50", "acc_within_1pt_mlp_g90", "acc_mink_vs_random_mlp_g90",
                       "memory_overall_mlp"]
    assert ids[4:] == ["memory_paper_vit_tiny_fp32", "memory_paper_vit_tiny_fp16",
                       "memory_paper_resnet18_fp32", "memory_paper_resnet18_fp16"]
    assert "γ = 0.9)" in fine._get("memory_overall_mlp").claim                       # max(gammas)
    assert not fine._get("acc_within_1pt_mlp_g50").precheck
    assert "±1.5 points" in coarse._get("acc_within_1pt_mlp_g50").precheck
    assert not coarse._get("acc_mink_vs_random_mlp_g90").precheck


def test_accuracy_tables_and_paper_and_ours() -> None:
    runs = {("mlp", "baseline", 0.0, 0): fake_run(0.90), ("mlp", "baseline", 0.0, 1): fake_run(0.92),
            ("mlp", "mink", 0.9, 0): fake_run(0.94), ("mlp", "mink", 0.9, 1): fake_run(0.96)}
    per_run, accuracy = exp.accuracy_tables(runs)
    assert list(per_run.strategy) == ["baseline", "baseline", "min-k", "min-k"]
    assert accuracy.loc[("mlp", "min-k", 0.9), "test acc"] == pytest.approx(0.95)
    both = exp.paper_and_ours(accuracy, "digits", 2)
    ours = both.iloc[-1]
    assert len(both) == 3 and ours.setting == "mlp, digits (ours, mean of 2 seeds)"
    assert (ours["baseline acc"], ours["DropIT acc"]) == pytest.approx((91.0, 95.0))


def test_gradient_and_memory_tables_on_a_tiny_model(tmp_path) -> None:
    ds = load_data("digits")
    torch.manual_seed(0)
    trained = {"mlp": SimpleNamespace(state_dict=build_model("mlp", ds.input_shape, ds.num_classes).state_dict)}
    fid = exp.gradient_table(["mlp"], trained, ds, torch.device("cpu"), [0.5, 0.9], 8, 1, 0)
    assert len(fid) == 2 * 1 * 2 * 2                              # weights x batches x strategies x γ
    assert fid["input grad bit-identical"].all()
    assert (fid["relative error"] > 0).all() and (fid["cosine similarity"] <= 1 + 1e-6).all()
    mem = exp.memory_table(["mlp"], ds, torch.device("cpu"), [0.5, 0.9], 8, 0)
    assert list(mem.strategy) == ["baseline", "min-k", "min-k", "random", "random"]
    assert mem["whole forward / baseline"].iloc[0] == 1.0
    mink = mem[mem.strategy == "min-k"]
    assert np.allclose(mink["dropped layers / baseline"], [2 * (1 - 0.5), 2 * (1 - 0.9)], rtol=0.01)
    for plot, table, name in ((exp.plot_gradient_error, fid, "g.png"), (exp.plot_memory, mem, "m.png")):
        plot(table, tmp_path / name)
        assert (tmp_path / name).stat().st_size > 0


def test_plot_test_accuracy_draws_one_models_runs_at_one_seed(tmp_path, monkeypatch) -> None:
    drawn = {}
    monkeypatch.setattr(exp.plots, "curves", lambda curves, **kw: drawn.update(curves=list(curves), **kw))
    runs = {("mlp", "baseline", 0.0, 0): 1, ("mlp", "mink", 0.9, 0): 2, ("mlp", "random", 0.9, 0): 3,
            ("mlp", "mink", 0.5, 1): 4, ("lenet5", "mink", 0.5, 0): 5}
    exp.plot_test_accuracy(runs, "mlp", 0, "t", tmp_path / "c.png")
    assert drawn["curves"] == ["baseline", "min-k γ=0.9", "random γ=0.9"] and drawn["y"] == "test_acc"


def test_plot_final_accuracy(tmp_path) -> None:
    per_run = pd.DataFrame({"model": ["mlp"] * 4, "strategy": ["baseline", "baseline", "min-k", "min-k"],
                            "gamma": [0.0, 0.0, 0.9, 0.9], "seed": [0, 1, 0, 1], "test acc": [0.9, 0.91, 0.9, 0.92]})
    accuracy = per_run.groupby(["model", "strategy", "gamma"], sort=False).mean(numeric_only=True)
    grid = exp.plot_final_accuracy(per_run, accuracy, tmp_path / "a.png")
    assert (tmp_path / "a.png").exists() and "over 2 seeds" in grid.figure._suptitle.get_text()


def fidelity_memory(dropped_at_90: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    fidelity = pd.DataFrame([{"model": "mlp", "weights": "initial", "batch": 0, "strategy": s, "gamma": 0.9,
                              "relative error": e, "input grad bit-identical": True}
                             for s, e in (("min-k", 0.2), ("random", 0.8))])
    memory = pd.DataFrame({"model": ["mlp", "mlp"], "strategy": ["baseline", "min-k"], "gamma": [0.0, 0.9],
                           "dropped layers / baseline": [1.0, dropped_at_90]})
    return fidelity, memory


def test_check_invariants_hold_and_fail() -> None:
    good = registered()
    exp.check_invariants(good, *fidelity_memory(0.2), [0.9])
    assert [r["holds"] for r in good.invariants] == [True, True, True]
    bad = registered()
    fidelity, memory = fidelity_memory(0.25)                        # not 2(1 - 0.9)
    fidelity.loc[0, "relative error"] = 0.9                         # min-k worse than random
    exp.check_invariants(bad, fidelity, memory, [0.9])
    assert [r["holds"] for r in bad.invariants] == [True, False, False]


def test_decide_accuracy_paired_per_image() -> None:
    claims = registered(gammas=(0.9,))
    runs = {}
    for sd in (0, 1):
        runs["mlp", "baseline", 0.0, sd] = fake_run(correct=[1, 1, 0, 1, 0, 1, 1, 1])
        runs["mlp", "mink", 0.9, sd] = fake_run(correct=[1, 1, 0, 1, 0, 1, 1, 1 - sd])
        runs["mlp", "random", 0.9, sd] = fake_run(correct=[0, 1, 0, 0, 0, 1, 0, 1])
    exp.decide_accuracy(claims, runs, ["mlp"], [0, 1], [0.9], [0.9])
    t = claims.table().set_index("id")
    assert t.loc["acc_within_1pt_mlp_g90", "estimate"] == pytest.approx(-100 / 16)
    assert t.loc["acc_mink_vs_random_mlp_g90", "estimate"] == pytest.approx(100 * (11 - 6) / 16)
    assert t.loc["acc_mink_vs_random_mlp_g90", "measured"].endswith("per seed +37.5, +25.0 points")


def test_decide_memory_from_the_counts() -> None:
    claims = registered()
    memory = pd.DataFrame({"model": ["mlp"] * 3, "strategy": ["baseline", "min-k", "min-k"], "gamma": [0.0, 0.5, 0.9],
                           "whole forward / baseline": [1.0, 0.9, 0.75], "CUDA peak (bytes)": [np.nan] * 3,
                           "CUDA peak / baseline": [np.nan] * 3})
    paper = summary(pd.read_csv(repo_root() / "figures" / "03_dropit" / "paper_scale_memory.csv"))
    exp.decide_memory(claims, memory, paper, 0.9)
    t = claims.table().set_index("id")
    assert (t.loc["memory_overall_mlp", ["low", "high", "estimate"]] == 0.25).all()
    assert t.loc["memory_overall_mlp", "verdict"] == "reproduced"
    assert t.loc["memory_overall_mlp", "measured"] == "all saved tensors: -25.0%"
    row = paper.set_index(["model", "precision"]).loc[("resnet18", "fp32")]
    assert t.loc["memory_paper_resnet18_fp32", "estimate"] == pytest.approx(row["saved bytes freed"])

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
from distsgd.experiments.dropit_paper_scale import PAPER_BATCH, dropit_memory_table, summary
from distsgd.experiments import dropit as exp
from distsgd.models import build_model
from distsgd.paths import repo_root

COMMON = dict(algo="ssgd", data="digits", nproc=1, steps=2, batch_size=4)


def registered(models=("mlp",), gammas=(0.5, 0.9), random_gammas=(0.9,)) -> Claims:
    claims = Claims("03_dropit")
    exp.register_claims(claims, list(models), list(gammas), list(random_gammas), 2, 100, max(gammas))
    claims.preregister(dry_run=True)
    return claims


def fake_run(acc: float = 0.9, correct=(1, 0, 1, 1), loss: float | None = None) -> SimpleNamespace:
    return SimpleNamespace(summary={"final_test_acc": acc, "final_train_loss": 1 - acc if loss is None else loss,
                                    "train_s": 1.0},
                           test_correct=lambda: np.asarray(correct, float))


def test_gid() -> None:
    assert [exp.gid(g) for g in (0.5, 0.7, 0.9)] == ["g50", "g70", "g90"]


def test_n_test_images_follows_the_evaluation_cap(monkeypatch) -> None:
    ds = load_data("digits")
    full = exp.n_test_images(ds, "mlp", COMMON)
    monkeypatch.setenv("DISTSGD_MAX_EVAL_SAMPLES", "4")
    assert exp.n_test_images(ds, "mlp", COMMON) == 4 < full


def test_register_claims_ids_forms_and_sources() -> None:
    claims = registered()
    ids = list(claims.registered_tests())
    assert ids[:5] == ["acc_noninferior_mlp_g50", "acc_noninferior_mlp_g90", "acc_higher_mlp_g90",
                       "acc_mink_vs_random_mlp_g90", "memory_overall_mlp"]
    assert ids[5:] == [f"memory_paper_{m}_{p}" for m in ("vit_base", "vit_tiny", "resnet18") for p in ("fp32", "fp16")]
    tests = {i: claims._get(i).test for i in ids}
    assert (tests["acc_noninferior_mlp_g90"].form, tests["acc_noninferior_mlp_g90"].threshold) == ("non-inferiority", -0.4)
    assert "89.7 → 90.1" in tests["acc_noninferior_mlp_g90"].source
    assert tests["acc_higher_mlp_g90"].form == tests["acc_mink_vs_random_mlp_g90"].form == "superiority"
    assert tests["acc_higher_mlp_g90"].source.startswith("null:")
    assert tests["memory_paper_vit_base_fp32"].threshold == 0.20 and "20,290" in tests["memory_paper_vit_base_fp32"].source
    assert tests["memory_paper_resnet18_fp16"].threshold == 0.08 and "2,826" in tests["memory_paper_resnet18_fp16"].source
    assert {t.form for i, t in tests.items() if i.startswith("memory")} == {"up-to"}
    assert "γ = 0.9)" in claims._get("memory_overall_mlp").claim                       # max(gammas)


def test_premises_gate_the_superiority_claims() -> None:
    """min-k above the baseline is decided only where min-k's training loss is below the baseline's;
    min-k above random only where random dropping costs accuracy. A premise that shows leaves the
    claim to its own test."""
    right = [1, 1, 1, 1, 0, 1, 1, 1]
    def runs_with(mink_loss: list[float], random_correct: list[list[int]]) -> dict:
        runs = {}
        for sd in (0, 1, 2):
            runs["mlp", "baseline", 0.0, sd] = fake_run(correct=right, loss=1.0 + 0.01 * sd)
            runs["mlp", "mink", 0.9, sd] = fake_run(correct=right, loss=mink_loss[sd])
            runs["mlp", "random", 0.9, sd] = fake_run(correct=random_correct[sd])
        return runs
    absent = registered(gammas=(0.9,))
    runs = runs_with([1.0, 1.01, 1.02], [right] * 3)                      # equal losses, random costs nothing
    exp.precheck_premises(absent, runs, ["mlp"], [0, 1, 2], [0.9], [0.9])
    assert absent._get("acc_higher_mlp_g90").precheck.startswith("premise absent: min-k's final training loss")
    assert absent._get("acc_mink_vs_random_mlp_g90").precheck.startswith("premise absent: random dropping")
    assert not absent._get("acc_noninferior_mlp_g90").precheck
    present = registered(gammas=(0.9,))
    worse = [[0, 1, 0, 1, 0, 0, 1, 1], [0, 0, 1, 1, 0, 1, 0, 1], [1, 0, 0, 0, 0, 1, 1, 0]]
    exp.precheck_premises(present, runs_with([0.5, 0.52, 0.49], worse), ["mlp"], [0, 1, 2], [0.9], [0.9])
    assert not present._get("acc_higher_mlp_g90").precheck and not present._get("acc_mink_vs_random_mlp_g90").precheck


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
    assert t.loc["acc_noninferior_mlp_g90", "estimate"] == pytest.approx(-100 / 16)
    assert t.loc["acc_higher_mlp_g90", "estimate"] == pytest.approx(-100 / 16)
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
    assert t.loc["memory_paper_resnet18_fp32", "verdict"] == "contradicted"       # below the authors' -8.0%


def test_planted_change_dropit_at_gamma_0_reproduces_none_of_its_advantages(monkeypatch, tmp_path) -> None:
    """DropIT reduced to its baseline: γ = 0 in every accuracy run (the model is the baseline's) and in
    every memory count, on a short form of the quick runs (both models, 2 seeds, 30 steps, the same
    MNIST test images). None of the claims of DropIT's advantage may come out reproduced: min-k above
    the baseline and above random dropping (identical models: an interval [0, 0], never strictly above
    0, and no premise), and every memory saving (nothing freed)."""
    monkeypatch.setenv("DISTSGD_RESULTS", str(tmp_path / "results"))
    monkeypatch.setattr(exp, "dropit_option", lambda s, g: {"dropit": {"gamma": 0.0, "strategy": s}})
    real_dropit = exp.dropit
    monkeypatch.setattr(exp, "dropit", lambda model, g, s="mink", skip=(): real_dropit(model, 0.0, s, skip=skip))
    models, seeds, gammas = ["mlp", "lenet5"], [0, 1], [0.9]
    common = dict(algo="ssgd", data="mnist", nproc=1, steps=30, batch_size=32, lr=0.1, progress=False,
                  log_every=10, eval_every=30)
    ds = load_data("mnist")
    claims = Claims("03_dropit")
    exp.register_claims(claims, models, gammas, gammas, len(seeds), exp.n_test_images(ds, "mlp", common), 0.9)
    claims.preregister(dry_run=True)
    runs = exp.accuracy_runs(models, seeds, gammas, gammas, common)
    memory = exp.memory_table(models, ds, torch.device("cpu"), gammas, 8, 0)
    paper_mem = summary(dropit_memory_table("cpu", fake=True, batches={m: 2 for m in PAPER_BATCH},
                                            input_shape=(3, 32, 32), num_classes=10, gamma=0.0))
    exp.precheck_premises(claims, runs, models, seeds, gammas, gammas)
    exp.decide_accuracy(claims, runs, models, seeds, gammas, gammas)
    exp.decide_memory(claims, memory, paper_mem, max(gammas))
    t = claims.table().set_index("id")
    advantage = [i for i in t.index if i.startswith(("acc_higher", "acc_mink_vs_random", "memory"))]
    assert len(advantage) == 2 + 2 + 2 + 6
    assert (t.loc[[f"acc_higher_{m}_g90" for m in models], "estimate"] == 0).all()      # the same models
    reproduced = t.loc[advantage][t.loc[advantage, "verdict"] == "reproduced"]
    assert reproduced.empty, reproduced[["verdict", "reason"]].to_string()

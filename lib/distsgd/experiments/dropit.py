"""Notebook 03 (DropIT, Chen et al., ICLR 2023): its claims' registration, the accuracy runs and
their tables, the in-process weight-gradient and activation-memory measurements, the figures of
those tables, the invariants, the claims' premises and decisions.

Each claim in its form (`claims.FORMS`), every threshold with its source:

- *as good as* (non-inferiority): min-k's test accuracy minus the baseline's at each γ ≥ -`NI_MARGIN`
  points, the smallest gain the paper reports at γ = 0.9 (`NI_SOURCE`): a loss smaller than the
  paper's own effect;
- *higher test accuracy* (superiority, the abstract's words): min-k's accuracy strictly above the
  baseline's at γ = max(gammas), decided only where the setting shows the premise the abstract gives
  for it ("reduces noise on estimated gradients and therefore has a higher rate of convergence"):
  min-k's final training loss below the baseline's (`precheck_premises`);
- min-k above random dropping (superiority, an ablation), decided only where random dropping costs
  accuracy here (its premise);
- *saving 20% GPU memory* (the v1 abstract, an "up to" number: the kit's count against the paper's):
  the fraction of the bytes saved for backward that min-k frees, against 20% (`V1_SOURCE`) for the
  ViTs and the small models, against the authors' own -8.0% for ResNet-18 (`RESNET18_SOURCE`), of
  which the paper never claimed 20%.
"""
from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
import torch
import torch.nn.functional as F

from ..verdicts import plots
from ..training.caps import Caps
from ..verdicts.claims import Claims, Test, interval_or_nan, paired_accuracy_interval, paired_interval
from ..training.config import Config
from ..data.base import DataSource
from .dropit_paper_scale import PAPER_BATCH, PAPER_GAMMA, PAPER_INPUT, PRECISIONS
from ..dropit import dropit, gradient_fidelity, measure_activation_memory, stem_and_head
from ..models import build_model
from ..training.results import Result
from ..training.runner import run

STRATEGIES = ("mink", "random")
STRATEGY_LABEL = {"mink": "min-k", "random": "random"}
# an accuracy run's key: (model, strategy, gamma, seed); the baseline is ("baseline", 0.0)
RunKey = tuple[str, str, float, int]

NI_MARGIN = 0.4
NI_SOURCE = ("paper: the smallest accuracy gain DropIT reports at γ = 0.9, DeiT-S fine-tuned on CIFAR-100 "
             "89.7 → 90.1 (+0.4 points; DeiT-B 90.8 → 91.3, +0.5; README of chenjoya/dropit): "
             "a loss within the paper's own effect")
V1_SOURCE = ("paper: v1 abstract (arXiv 2202.13808v1), \"saving 20% GPU memory\"; the authors' early README: "
             "ViT-B/16 at 224x224, intermediate-tensor cache 20,290 → 16,052 MB (-20.9%)")
RESNET18_SOURCE = ("paper: the authors' early README, ResNet-18 at 224x224 (ImageNet): cache 2,826 → 2,600 MB "
                   "(-8.0%; at 32x32 on CIFAR-100 648 → 598 MB, -7.7%); the abstract's 20% is not claimed for it")
PAPER_CLAIMED = {"vit_base": (0.20, V1_SOURCE), "vit_tiny": (0.20, V1_SOURCE), "resnet18": (0.08, RESNET18_SOURCE)}
PAPER_NAME = {"vit_base": "ViT-B/16", "vit_tiny": "DeiT-Ti", "resnet18": "ResNet-18"}


def gid(g: float) -> str:
    """γ in a claim id: 0.9 -> g90."""
    return f"g{round(100 * g)}"


def n_test_images(ds: DataSource, model: str, common: dict[str, Any]) -> int:
    """The number of test images each run with `common` evaluates on (its evaluation cap applied),
    known from the configuration before any run."""
    eval_limit = Caps.from_env().apply(Config(model=model, **common)).eval_samples
    return sum(len(y) for _, y in ds.eval_batches("test", 4096, torch.device("cpu"), eval_limit))


def register_claims(claims: Claims, models: list[str], gammas: list[float], random_gammas: list[float],
                    n_seeds: int, n_test: int, memory_gamma: float) -> None:
    """Register the notebook's tests (module docstring): per model, min-k's accuracy as good as the
    baseline's at every γ of `gammas` (non-inferiority, margin `NI_MARGIN`) and higher at
    max(`gammas`) (superiority), min-k above random dropping at `random_gammas` (superiority), the
    memory freed overall at `memory_gamma` (≥ 20%); then the memory freed at the paper's setting
    (`dropit_paper_scale`), per model and precision, against the paper's number for that model
    (`PAPER_CLAIMED`)."""
    paired = f"paired 95% interval, {n_seeds} seeds x {n_test} test images (paired_accuracy_interval)"
    paper_acc = "DeiT-Ti 72.1 → 72.5 (γ=0.5); DeiT-S CIFAR-100 89.7 → 90.1, DeiT-B 90.8 → 91.3 (γ=0.9)"
    freed = "fraction of all bytes saved for backward that DropIT frees"
    g_max = max(gammas)
    for m in models:
        for g in gammas:
            claims.register(f"acc_noninferior_{m}_{gid(g)}",
                            f"{m}: min-k's final test accuracy is as good as the baseline's at γ = {g} "
                            f"(at most {NI_MARGIN:g} points below)", paper_acc,
                            Test("test acc min-k - baseline (points)", ">=", -NI_MARGIN, paired,
                                 form="non-inferiority", source=NI_SOURCE))
        claims.register(f"acc_higher_{m}_{gid(g_max)}",
                        f"{m}: min-k at γ = {g_max} reaches a higher test accuracy than the baseline",
                        f"\"achieving higher test accuracy\" (abstract); {paper_acc}",
                        Test("test acc min-k - baseline (points)", ">=", 0.0, paired, form="superiority",
                             source="null: no difference between min-k and the baseline"))
        for g in random_gammas:
            claims.register(f"acc_mink_vs_random_{m}_{gid(g)}",
                            f"{m}: min-k trains to a higher accuracy than random dropping at γ = {g}",
                            "random dropping is the weaker baseline (the paper's ablation)",
                            Test("test acc min-k - random (points)", ">=", 0.0, paired, form="superiority",
                                 source="null: no difference between min-k and random dropping"))
        claims.register(f"memory_overall_{m}",
                        f"{m}: DropIT (min-k, γ = {memory_gamma}) saves about 20% of the memory overall",
                        "saving 20% GPU memory (v1 abstract, ViT-B/16)",
                        Test(freed, ">=", 0.20, "deterministic byte count of one forward pass (interval = the count)",
                             form="up-to", source=V1_SOURCE))
    for m, b in PAPER_BATCH.items():
        threshold, source = PAPER_CLAIMED[m]
        for p in PRECISIONS:
            claims.register(f"memory_paper_{m}_{p.split()[0]}",
                            f"{PAPER_NAME[m]} at the paper's setting (batch {b}, {'x'.join(map(str, PAPER_INPUT[1:]))}, "
                            f"{p}): DropIT (min-k, γ = {PAPER_GAMMA}) frees {100 * threshold:.0f}% of the memory",
                            source.removeprefix("paper: "),
                            Test(freed, ">=", threshold,
                                 "exact byte count of one forward pass under CUDA's rules (interval = the count)",
                                 form="up-to", source=source))


def dropit_option(strategy: str, gamma: float) -> dict[str, Any]:
    """`distsgd.run`'s model_options for an accuracy run with DropIT: `strategy` at drop ratio `gamma`
    (the stem and the head exempt, as the authors train)."""
    return {"dropit": {"gamma": gamma, "strategy": strategy}}


def accuracy_runs(models: list[str], seeds: list[int], gammas: list[float], random_gammas: list[float],
                  common: dict[str, Any]) -> dict[RunKey, Result]:
    """Train every model once per seed with `common` (`distsgd.run`): without DropIT (the baseline), with
    min-k at every γ of `gammas` and with random dropping at `random_gammas`; the methods share the
    seeds, steps and learning rate. Finished runs are reused (same configuration hash)."""
    runs: dict[RunKey, Result] = {}
    for m in models:
        for sd in seeds:
            runs[m, "baseline", 0.0, sd] = run(model=m, name=f"{m}-baseline-s{sd}", seed=sd, **common)
            for s, g in [("mink", g) for g in gammas] + [("random", g) for g in random_gammas]:
                runs[m, s, g, sd] = run(model=m, name=f"{m}-{s}-g{g}-s{sd}", seed=sd,
                                        model_options=dropit_option(s, g), **common)
    return runs


def accuracy_tables(runs: dict[RunKey, Result]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The accuracy runs as a table, one row per run (model, strategy, γ, seed: final test accuracy,
    training loss and time), and its mean over the seeds per model, strategy and γ."""
    per_run = pd.DataFrame([{"model": m, "strategy": STRATEGY_LABEL.get(s, s), "gamma": g, "seed": sd,
                             "test acc": r.summary["final_test_acc"],
                             "final train loss": r.summary["final_train_loss"],
                             "train time (s)": r.summary["train_s"]}
                            for (m, s, g, sd), r in runs.items()])
    accuracy = per_run.groupby(["model", "strategy", "gamma"], sort=False).mean(numeric_only=True).drop(columns="seed")
    return per_run, accuracy


def plot_test_accuracy(runs: dict[RunKey, Result], model: str, seed: int, title: str, path: Path) -> plt.Figure:
    """Test accuracy against steps of every accuracy run (`RunKey`) of `model` at `seed`: the baseline
    and each strategy at each γ; saved to `path`."""
    curves = {"baseline" if s == "baseline" else f"{STRATEGY_LABEL[s]} γ={g}": r
              for (m, s, g, sd), r in runs.items() if m == model and sd == seed}
    return plots.curves(curves, y="test_acc", xs=("step",), path=path, title=title)


def plot_final_accuracy(per_run: pd.DataFrame, accuracy: pd.DataFrame, path: Path) -> sns.FacetGrid:
    """Final test accuracy against γ per strategy, one panel per model (mean and 95% interval over the
    seeds), with the baseline and its ±1-point band; saved to `path`."""
    sns.set_theme(style="whitegrid", context="notebook")
    dropped = per_run[per_run.strategy != "baseline"]
    grid = sns.relplot(data=dropped, x="gamma", y="test acc", hue="strategy", col="model", kind="line",
                       marker="o", height=3.6, facet_kws={"sharey": False})
    for ax, m in zip(grid.axes.flat, per_run.model.unique()):
        base = accuracy.loc[(m, "baseline", 0.0), "test acc"]
        ax.axhline(base, color="black", ls="--", lw=1, label="baseline")
        ax.axhspan(base - 0.01, base + 0.01, color="grey", alpha=0.15)
        ax.set_xlabel("drop ratio γ")
    grid.figure.suptitle(f"final test accuracy, mean and 95% interval over {per_run.seed.nunique()} seeds "
                         "(band: baseline ± 1 point)", y=1.03)
    grid.savefig(path, dpi=120, bbox_inches="tight")
    return grid


def gradient_table(models: list[str], trained: dict[str, Result], ds: DataSource, device: torch.device,
                   gammas: list[float], grad_batch: int, grad_batches: int, seed: int) -> pd.DataFrame:
    """The weight-gradient error of DropIT (`dropit.gradient_fidelity`): per model, at its initial
    weights (seed `seed`) and at the final weights of `trained[model]`, on the first `grad_batches`
    training batches of `grad_batch` samples, per strategy and γ (random dropping draws anew per batch,
    seed `seed` + batch): cosine similarity and relative error over all Linear/Conv2d weight gradients,
    and whether the input gradient is bit-identical."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)        # small products: one thread, which does not spin beside a busy core
    try:
        return _gradient_rows(models, trained, ds, device, gammas, grad_batch, grad_batches, seed)
    finally:
        torch.set_num_threads(threads)


def _gradient_rows(models: list[str], trained: dict[str, Result], ds: DataSource, device: torch.device,
                   gammas: list[float], grad_batch: int, grad_batches: int, seed: int) -> pd.DataFrame:
    grad_sets = []
    for b, batch in enumerate(ds.eval_batches("train", grad_batch, device)):
        if b == grad_batches:
            break
        grad_sets.append(batch)
    rows = []
    for m in models:
        torch.manual_seed(seed)
        net = build_model(m, ds.input_shape, ds.num_classes).to(device)
        points = {"initial": copy.deepcopy(net.state_dict()), "trained": trained[m].state_dict()}
        for point, weights in points.items():
            net.load_state_dict(weights)
            for b, (x_grad, y_grad) in enumerate(grad_sets):
                for s in STRATEGIES:
                    for g in gammas:
                        torch.manual_seed(seed + b)
                        f = gradient_fidelity(net, x_grad, y_grad, F.cross_entropy, g, s)
                        rows.append({"model": m, "weights": point, "batch": b, "strategy": STRATEGY_LABEL[s],
                                     "gamma": g, "cosine similarity": f.cosine, "relative error": f.relative_error,
                                     "input grad bit-identical": f.input_grad_identical})
    return pd.DataFrame(rows)


def plot_gradient_error(fidelity: pd.DataFrame, path: Path) -> sns.FacetGrid:
    """Cosine similarity and relative error of the weight gradients (`gradient_table`) against γ, per
    strategy and weights, one row of panels per model; saved to `path`."""
    sns.set_theme(style="whitegrid", context="notebook")
    long = fidelity.melt(id_vars=["model", "weights", "batch", "strategy", "gamma"],
                         value_vars=["cosine similarity", "relative error"], var_name="metric")
    grid = sns.relplot(data=long, x="gamma", y="value", hue="strategy", style="weights", row="model",
                       col="metric", kind="line", markers=True, height=3.2, facet_kws={"sharey": "col"})
    grid.set_axis_labels("drop ratio γ", "")
    grid.set_titles("{row_name}: {col_name}")
    grid.savefig(path, dpi=120, bbox_inches="tight")
    return grid


def memory_table(models: list[str], ds: DataSource, device: torch.device, gammas: list[float], batch: int,
                 seed: int) -> pd.DataFrame:
    """What autograd saves for backward after one forward pass on the first training batch of `batch`
    samples (`dropit.measure_activation_memory`), per model (seed `seed`) without DropIT and with each
    strategy at each γ, the stem and the head exempt: the bytes the other Linear/Conv2d layers save
    (the dropped layers), every distinct saved storage (the whole forward) and CUDA's peak (NaN off
    CUDA), each also over the model's baseline."""
    x_mem, y_mem = next(ds.eval_batches("train", batch, device))
    rows = []
    for m in models:
        torch.manual_seed(seed)
        net = build_model(m, ds.input_shape, ds.num_classes).to(device).train()
        exempt = stem_and_head(net)
        dropped = [n for n, mod in net.named_modules() if isinstance(mod, (torch.nn.Linear, torch.nn.Conv2d))
                   and n not in exempt]
        variants = {("baseline", 0.0): net}
        variants.update({(s, g): dropit(copy.deepcopy(net), g, s, skip=exempt) for s in STRATEGIES for g in gammas})
        for (s, g), model_ in variants.items():
            mem = measure_activation_memory(model_, x_mem, y_mem, F.cross_entropy)
            rows.append({"model": m, "strategy": STRATEGY_LABEL.get(s, s), "gamma": g,
                         "dropped layers (bytes)": sum(mem.by_module.get(n, 0) for n in dropped),
                         "whole forward (bytes)": mem.saved_bytes,
                         "CUDA peak (bytes)": float("nan") if mem.cuda_peak_bytes is None else mem.cuda_peak_bytes})
    memory = pd.DataFrame(rows)
    for col in ["dropped layers", "whole forward", "CUDA peak"]:
        base = memory.groupby("model")[f"{col} (bytes)"].transform("first")
        memory[f"{col} / baseline"] = memory[f"{col} (bytes)"] / base
    return memory


def plot_memory(memory: pd.DataFrame, path: Path) -> sns.FacetGrid:
    """Bytes saved for backward over the baseline's (`memory_table`: dropped layers, whole forward, and
    CUDA's peak where measured) against γ for min-k, one panel per model; saved to `path`."""
    sns.set_theme(style="whitegrid", context="notebook")
    long = memory.melt(id_vars=["model", "strategy", "gamma"], var_name="saved tensors",
                       value_vars=["dropped layers / baseline", "whole forward / baseline"]
                       + (["CUDA peak / baseline"] if memory["CUDA peak (bytes)"].notna().all() else []))
    long["saved tensors"] = long["saved tensors"].str.replace(" / baseline", "")
    grid = sns.relplot(data=long[long.strategy != "random"], x="gamma", y="value", hue="saved tensors",
                       col="model", kind="line", marker="o", height=3.6)
    grid.set_axis_labels("drop ratio γ (γ = 0: baseline)", "bytes / baseline")
    grid.figure.suptitle("bytes saved for backward, relative to the baseline (min-k; random saves as many)", y=1.03)
    grid.savefig(path, dpi=120, bbox_inches="tight")
    return grid


def paper_and_ours(accuracy: pd.DataFrame, data: str, n_seeds: int) -> pd.DataFrame:
    """The paper's headline accuracies (README tables of chenjoya/dropit) beside this run's min-k
    accuracies and their baselines (`accuracy_tables`' means), in points."""
    paper = pd.DataFrame([
        {"setting": "DeiT-Ti, ImageNet (paper)", "gamma": 0.5, "baseline acc": 72.1, "DropIT acc": 72.5},
        {"setting": "DeiT-S, CIFAR-100 fine-tuning (paper)", "gamma": 0.9, "baseline acc": 89.7, "DropIT acc": 90.1},
    ])
    mean_acc = accuracy.reset_index()
    ours = mean_acc[mean_acc.strategy == "min-k"].merge(
        mean_acc[mean_acc.strategy == "baseline"][["model", "test acc"]], on="model", suffixes=("", " base"))
    ours = pd.DataFrame({"setting": ours.model + f", {data} (ours, mean of {n_seeds} seeds)", "gamma": ours.gamma,
                         "baseline acc": 100 * ours["test acc base"], "DropIT acc": 100 * ours["test acc"]})
    return pd.concat([paper, ours], ignore_index=True)


def check_invariants(claims: Claims, fidelity: pd.DataFrame, memory: pd.DataFrame, gammas: list[float]) -> None:
    """The invariants: DropIT's input gradients bit-identical to the unmodified model's (the input gradient
    does not use the dropped tensor); the dropped layers' saved bytes over the baseline's equal to 2(1-γ)
    within 1% (⌊(1-γ)n⌋ fp32 values + int32 positions over n fp32 entries); min-k's weight-gradient error
    below random dropping's per γ (median ratio over the pairs of the same model, weights, batch and γ <
    1; keeping the largest-magnitude entries makes this hold by construction in practice)."""
    n_identical = int(fidelity["input grad bit-identical"].sum())
    claims.invariant("DropIT's input gradients are bit-identical to the unmodified model's",
                     "all comparisons bit-identical (the input gradient does not use the dropped tensor)",
                     f"{n_identical}/{len(fidelity)} comparisons (models x weights x batches x strategies x γ)",
                     n_identical == len(fidelity))
    for _, r in memory[memory.strategy != "baseline"].iterrows():
        expected = 2 * (1 - r.gamma)            # int((1-γ)n) values + int32 positions over n fp32 entries
        got = r["dropped layers / baseline"]
        claims.invariant(f"{r.model}, {r.strategy} γ = {r.gamma}: dropped layers' saved bytes / baseline",
                         f"2(1-γ) = {expected:.3f} (within 1%)", f"{got:.4f}", abs(got / expected - 1) <= 0.01)
    paired = fidelity.pivot_table(index=["model", "weights", "batch", "gamma"], columns="strategy",
                                  values="relative error")
    ratio = (paired["min-k"] / paired["random"]).dropna()
    for g in gammas:
        r = ratio.xs(g, level="gamma").to_numpy()
        claims.invariant(f"min-k's weight-gradient error is below random dropping's at γ = {g}",
                         "median ratio min-k / random < 1 (models x weights x batches)",
                         f"median {np.median(r):.2f} over {len(r)} ratios, range {r.min():.2f}-{r.max():.2f}" if len(r)
                         else "no ratios", bool(len(r)) and float(np.median(r)) < 1)


def _premise(claims: Claims, id: str, low: float, high: float, what: str) -> None:
    """Precheck claim `id` inconclusive unless its premise shows: the interval [low, high] of `what`
    lies strictly below 0. A claim the registration already calls undecidable keeps that reason."""
    if not high < 0 and not claims.claims[id].precheck:
        claims.precheck(id, f"premise absent: {what}, interval [{low:.3g}, {high:.3g}], is not below 0")


def precheck_premises(claims: Claims, runs: dict[RunKey, Result], models: list[str], seeds: list[int],
                      gammas: list[float], random_gammas: list[float]) -> None:
    """Before the superiority claims are decided, whether the setting shows their premises (module
    docstring), per model: for min-k's higher accuracy at max(`gammas`), min-k's final training loss
    (the full training set) minus the baseline's, paired over the seeds (`paired_interval`), below 0;
    for min-k above random dropping at each of `random_gammas`, random dropping's test accuracy minus
    the baseline's (`paired_accuracy_interval`) below 0."""
    g_max = max(gammas)
    for m in models:
        loss = lambda s, g: [runs[m, s, g, sd].summary["final_train_loss"] for sd in seeds]  # noqa: E731
        low, high = interval_or_nan(paired_interval, loss("mink", g_max), loss("baseline", 0.0))
        _premise(claims, f"acc_higher_{m}_{gid(g_max)}", low, high,
                 f"min-k's final training loss minus the baseline's (the faster convergence the abstract "
                 f"gives as the reason)")
        for g in random_gammas:
            low, high = interval_or_nan(paired_accuracy_interval, _correct(runs, m, "random", g, seeds),
                                        _correct(runs, m, "baseline", 0.0, seeds))
            _premise(claims, f"acc_mink_vs_random_{m}_{gid(g)}", low, high,
                     f"random dropping's test accuracy minus the baseline's at γ = {g} (points)")


def _correct(runs: dict[RunKey, Result], m: str, s: str, g: float, seeds: list[int]) -> list[np.ndarray]:
    return [runs[m, s, g, sd].test_correct() for sd in seeds]


def decide_accuracy(claims: Claims, runs: dict[RunKey, Result], models: list[str], seeds: list[int],
                    gammas: list[float], random_gammas: list[float]) -> None:
    """Decide the accuracy claims, paired per test image over the seeds (`Claims.decide_paired_accuracy`):
    min-k against the baseline at every γ (as good as) and at max(`gammas`) (higher), min-k against
    random dropping at `random_gammas`. `precheck_premises` comes first."""
    g_max = max(gammas)
    for m in models:
        base = _correct(runs, m, "baseline", 0.0, seeds)
        for g in gammas:
            claims.decide_paired_accuracy(f"acc_noninferior_{m}_{gid(g)}", _correct(runs, m, "mink", g, seeds),
                                          base, f"min-k γ={g}", "baseline")
        claims.decide_paired_accuracy(f"acc_higher_{m}_{gid(g_max)}", _correct(runs, m, "mink", g_max, seeds),
                                      base, f"min-k γ={g_max}", "baseline")
        for g in random_gammas:
            claims.decide_paired_accuracy(f"acc_mink_vs_random_{m}_{gid(g)}", _correct(runs, m, "mink", g, seeds),
                                          _correct(runs, m, "random", g, seeds), f"min-k γ={g}", "random")


def decide_memory(claims: Claims, memory: pd.DataFrame, paper_mem: pd.DataFrame, g_max: float) -> None:
    """Decide the memory claims from deterministic byte counts (the interval is the count): the fraction
    of the whole forward's saved bytes min-k frees at `g_max` per model of `memory` (`memory_table`), and
    at the paper's setting per model and precision (`paper_mem`: `dropit_paper_scale.summary`)."""
    at_max = memory[(memory.strategy == "min-k") & (memory.gamma == g_max)].set_index("model")
    for m in memory.model.unique():
        freed = 1 - at_max.loc[m, "whole forward / baseline"]
        note = f"all saved tensors: {100 * -freed:+.1f}%"
        if not math.isnan(at_max.loc[m, "CUDA peak (bytes)"]):
            note += f"; CUDA peak {100 * (at_max.loc[m, 'CUDA peak / baseline'] - 1):+.1f}%"
        claims.decide(f"memory_overall_{m}", freed, freed, freed, note)
    at_paper = paper_mem.set_index(["model", "precision"])
    for m in PAPER_BATCH:
        for p in PRECISIONS:
            r = at_paper.loc[(m, p)]
            freed = r["saved bytes freed"]
            claims.decide(f"memory_paper_{m}_{p.split()[0]}", freed, freed, freed,
                          f"batch {r.batch}: all saved tensors {100 * -freed:+.1f}% ({r['baseline saved (GiB)']:.2f} -> "
                          f"{r['DropIT saved (GiB)']:.2f} GiB), Linear/Conv2d inputs {100 * -r['layer bytes freed']:+.1f}%")

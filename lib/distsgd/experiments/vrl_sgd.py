"""Notebook 05's experiment (VRL-SGD on non-identical data): claims, runs, tables, decisions.

Liang et al. 2019: the registration, the runs (digits, the synthetic ζ² knob, the paper's setting
beside the authors' curves), their tables and the per-seed values the verdicts are decided on.

Digits runs are keyed (label, seed): "S-SGD {split}" and "{method} {split} k={k}" with method
"local SGD" or "VRL-SGD"; synthetic losses are keyed (method, shift, seed)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns

from ..verdicts.analysis import gradient_diversity, log2_ratio
from ..verdicts.claims import Claims, Test
from ..data import load_data, partition
from ..data.synthetic import lsq_gradient_diversity
from ..models import build_model
from ..paths import repo_root
from ..training.results import Result
from ..training.runner import run
from ..training.loop import steps_per_epoch

Runs = dict[tuple[str, int], Result]
LOCAL = ["local SGD", "VRL-SGD"]                   # the two local methods, compared on every split
IID_IDS = {"local SGD": "iid_local_matches_loss", "VRL-SGD": "iid_vrl_matches_loss"}
AUTHORS_CSV = ("reproduce", "authors", "vrl_sgd_lenet_mnist_non_identical.csv")
AUTHORS_STEPS_PER_EPOCH = 235                      # the authors' 60,000 images / (8 workers x 32)


def methods(period: int) -> dict[str, tuple[str, dict[str, int]]]:
    """label -> (algorithm, parameters) of S-SGD, local SGD and VRL-SGD with period k = `period`."""
    return {"S-SGD": ("ssgd", {}), "local SGD": ("local_sgd", {"period": period}),
            "VRL-SGD": ("vrl_sgd", {"period": period})}


def fitting_batch_size(data: str, nproc: int, partitions: Sequence[str], seeds: Sequence[int], batch_size: int) -> int:
    """The largest batch, at most `batch_size`, that every rank of every split and seed can fill:
    Dirichlet splits can leave a rank fewer samples than a batch at larger nproc (says so when it cuts)."""
    train_labels = load_data(data).train_labels
    smallest = min(len(idx) for part in partitions for s in seeds for idx in partition(train_labels, nproc, part, s))
    if smallest < batch_size:
        print(f"batch_size {batch_size} -> {smallest}: the smallest rank's part of a split holds {smallest} samples")
        return smallest
    return batch_size


def register_claims(claims: Claims, period: int, periods: Sequence[int], n_seeds: int, n_test: int) -> None:
    """Register the notebook's claims with their tests (non-IID: local SGD worse than S-SGD, VRL-SGD
    matching it in loss and accuracy, beating local SGD in accuracy; IID: both match; the k sweep;
    the ζ² sweeps on digits and on the synthetic knob), margins from the paper's numbers."""
    paired = f"mean over {n_seeds} paired seeds, t interval"
    acc_stat = f"paired 95% interval, {n_seeds} seeds x {n_test} test images (paired_accuracy_interval)"
    kmin, kmax = min(periods), max(periods)
    claims.register("noniid_local_worse", f"non-IID: local SGD (k={period}) ends at a clearly higher train loss than S-SGD",
                    "LeNet/MNIST k=20: 0.100 vs 0.028", Test("log2(local SGD / S-SGD train loss)", ">=", float(np.log2(1.5)), paired))
    claims.register("noniid_vrl_matches_loss", f"non-IID: VRL-SGD (k={period}) matches S-SGD's train loss",
                    "LeNet/MNIST k=20: 0.030 vs 0.028", Test("log2(VRL-SGD / S-SGD train loss)", "<=", float(np.log2(1.25)), paired))
    claims.register("noniid_vrl_matches_acc", "non-IID: VRL-SGD's test accuracy matches S-SGD's",
                    "LeNet/MNIST: VRL-SGD 98.70, S-SGD 98.68 %", Test("VRL-SGD − S-SGD test accuracy (points)", ">=", -1.0, acc_stat))
    claims.register("noniid_vrl_beats_local_acc", "non-IID: local SGD's test accuracy is lower than VRL-SGD's",
                    "LeNet/MNIST: local SGD 97.13, VRL-SGD 98.70 %", Test("VRL-SGD − local SGD test accuracy (points)", ">=", 0.0, acc_stat))
    for m in LOCAL:
        claims.register(IID_IDS[m], f"IID: {m} (k={period}) matches S-SGD's train loss",
                        "TextCNN/DBPedia test acc 96.96 / 96.94 / 96.97 % (local / VRL / S-SGD)",
                        Test(f"log2({m} / S-SGD train loss)", "<=", float(np.log2(1.25)), paired))
    claims.register("k_sweep", f"non-IID k sweep ({kmin} → {kmax}): local SGD degrades faster than VRL-SGD",
                    "communication O(T^1/2 N^3/2) vs O(T^3/4 N^3/4)",
                    Test("growth of local SGD's loss minus growth of VRL-SGD's", ">=", 0.0, paired))
    claims.register("zeta_digits", "digits: local SGD's error floor grows with ζ² more than VRL-SGD's",
                    "VRL-SGD removes the dependence on (1/N) Σ ||∇f_i − ∇f||²",
                    Test("(local − VRL loss) at max ζ² − at min ζ²", ">=", 0.0, paired))
    claims.register("zeta_synthetic", "synthetic ζ² knob: local SGD's error floor grows with ζ² more than VRL-SGD's",
                    "SPECS e(4) check 3: quadratics with spread optima; VRL-SGD removes the dependence on ζ²",
                    Test("(local − VRL loss) at max shift − at min shift", ">=", 0.0, paired))


def run_digits(common: Mapping[str, Any], seeds: Sequence[int], partitions: Sequence[str], periods: Sequence[int],
               period: int) -> Runs:
    """Every seed's digits runs: S-SGD on the IID and the label-sorted ("shards") split, local SGD
    and VRL-SGD with k = `period` on every split of `partitions`, and both at every k of `periods`
    on the shards (each run once)."""
    runs: Runs = {}

    def one(label: str, algo: str, params: dict[str, int], part: str, s: int) -> None:
        runs[label, s] = run(algo=algo, params=params, partition=part, seed=s,
                             name=f"{algo}_{part.replace(':', '')}_k{params.get('period', 1)}_s{s}", **common)

    for s in seeds:
        for part in ["iid", "shards"]:
            one(f"S-SGD {part}", "ssgd", {}, part, s)
        for part in partitions:
            for method in LOCAL:
                one(f"{method} {part} k={period}", methods(period)[method][0], {"period": period}, part, s)
        for k in periods:
            for method in LOCAL:
                if (f"{method} shards k={k}", s) not in runs:
                    one(f"{method} shards k={k}", methods(k)[method][0], {"period": k}, "shards", s)
    return runs


def loss(runs: Runs, label: str, s: int) -> float:
    """Final train loss (the whole training set) of run `label` with seed `s`."""
    return runs[label, s].summary["final_train_loss"]


def summary_table(runs: Runs) -> pd.DataFrame:
    """Per run and seed: final train loss, test accuracy, MB sent by all ranks, training seconds."""
    return pd.DataFrame([{"run": name, "seed": s, "final train loss": r.summary["final_train_loss"],
                          "test acc": r.summary["final_test_acc"],
                          "MB sent (all ranks)": r.summary["comm_bytes"] / 1e6,
                          "train time (s)": r.summary["train_s"]} for (name, s), r in runs.items()])


def split_diversities(reference: Result, model: str, data: str, nproc: int, partitions: Sequence[str],
                      seed: int) -> dict[str, float]:
    """ζ² of every split of `partitions` (`analysis.gradient_diversity`: full-part gradients) at
    the final model of the `reference` run (S-SGD on IID data), the split drawn with `seed`."""
    ds = load_data(data, seed=seed)
    ref = build_model(model, ds.input_shape, ds.num_classes)
    ref.load_state_dict(reference.state_dict())
    return {part: gradient_diversity(ref, ds, partition(ds.train_labels, nproc, part, seed)) for part in partitions}


def zeta_table(runs: Runs, zeta: Mapping[str, float], period: int, seed: int) -> pd.DataFrame:
    """Per split (its ζ²) and local method: the excess of the final train loss with k = `period`
    over S-SGD's on IID data, seed `seed`."""
    ref_loss = loss(runs, "S-SGD iid", seed)
    return pd.DataFrame([{"partition": part, "zeta2": z, "method": method,
                          "excess train loss over S-SGD": loss(runs, f"{method} {part} k={period}", seed) - ref_loss}
                         for part, z in zeta.items() for method in LOCAL])


def k_sweep_table(runs: Runs, periods: Sequence[int], seeds: Sequence[int]) -> pd.DataFrame:
    """Per k of `periods`, local method and seed, on the shards: the excess of the final train loss
    over S-SGD's."""
    return pd.DataFrame([{"k": k, "method": m, "seed": s,
                          "excess train loss over S-SGD": loss(runs, f"{m} shards k={k}", s) - loss(runs, "S-SGD shards", s)}
                         for k in periods for m in LOCAL for s in seeds])


def plot_excess(panels: Sequence[tuple[pd.DataFrame, str, str | None, str]],
                figsize: tuple[float, float]) -> plt.Figure:
    """One panel per (table, x column, x label or None for the column's name, title): each local
    method's excess train loss over S-SGD against x."""
    fig, axes = plt.subplots(1, len(panels), figsize=figsize, squeeze=False)
    for ax, (table, x, xlabel, title) in zip(axes[0], panels):
        sns.lineplot(data=table, x=x, y="excess train loss over S-SGD", hue="method", marker="o", ax=ax)
        if xlabel:
            ax.set_xlabel(xlabel)
        ax.set_title(title)
    fig.tight_layout()
    return fig


def run_synthetic(common: Mapping[str, Any], shifts: Sequence[float], seeds: Sequence[int], period: int,
                  options: Mapping[str, Any], steps: int, lr: float) -> tuple[pd.DataFrame, dict]:
    """The `synthetic-lsq-shift` runs (logistic model, one group per rank on the shards): every
    method at every shift for the first seed, local SGD and VRL-SGD at the smallest and largest shift
    for the others. Returns the first seed's table (shift, measured ζ² = `lsq_gradient_diversity`,
    S-SGD's loss and each local method's excess over it) and every final train loss by
    (method, shift, seed)."""
    nproc = common["nproc"]
    syn_common = dict(common, model="logistic", data="synthetic-lsq-shift", partition="shards", steps=steps,
                      lr=lr, log_every=max(1, steps // 30))
    rows, syn_loss = [], {}
    for s in seeds:
        for shift in (shifts if s == seeds[0] else sorted({min(shifts), max(shifts)})):
            opts = dict(options, groups=nproc, shift=shift)
            src = load_data("synthetic-lsq-shift", **opts)
            z2 = lsq_gradient_diversity(src.train_x, src.train_y, partition(src.train_labels, nproc, "shards", seeds[0]))
            for method, (algo, params) in methods(period).items():
                if method == "S-SGD" and s != seeds[0]:
                    continue
                syn_loss[method, shift, s] = run(
                    algo=algo, params=params, data_options=opts, seed=s,
                    name=f"{algo}_shift{shift:g}_k{params.get('period', 1)}_s{s}", **syn_common).summary["final_train_loss"]
            if s == seeds[0]:
                rows += [{"shift": shift, "zeta2": z2, "method": m, "S-SGD train loss": syn_loss["S-SGD", shift, s],
                          "excess train loss over S-SGD": syn_loss[m, shift, s] - syn_loss["S-SGD", shift, s]}
                         for m in LOCAL]
    return pd.DataFrame(rows), syn_loss


def run_paper_setting(paper_nproc: int, paper_epochs: int, seed: int, backend: str, dry_run: bool) -> tuple[dict, int]:
    """The authors' setting (SPECS e(2)): LeNet-5 on MNIST, `paper_nproc` workers on the label-sorted
    split, k = 20, γ = 0.005, batch 32, weight decay 1e-4, a 2-epoch S-SGD warm start and a model
    average at every epoch end, for `paper_epochs` epochs after the warm start (none when 0; 2 steps
    in a dry run), evaluated at every epoch end. Returns {method: run} and the steps per epoch."""
    ds = load_data("mnist")
    epoch = steps_per_epoch([len(i) for i in partition(ds.train_labels, paper_nproc, "shards", seed)], [32] * paper_nproc)
    steps = 2 if dry_run else (2 + paper_epochs) * epoch
    paper = {}
    if paper_epochs > 0:
        for method, (algo, params) in methods(20).items():
            paper[method] = run(
                algo=algo, params=params, model="lenet5", data="mnist", partition="shards", nproc=paper_nproc,
                steps=steps, batch_size=32, lr=0.005, weight_decay=1e-4, warm_start_epochs=2, epoch_average=True,
                seed=seed, backend=backend, log_every=epoch, eval_every=epoch, eval_samples=len(ds.test_y),
                name=f"paper_{algo}_s{seed}")
        print(f"MNIST source: {paper['VRL-SGD'].config.data_options['source']} ({len(ds.train_y)} training, "
              f"{len(ds.test_y)} test images), {epoch} steps per epoch, {steps} steps "
              f"(2 warm-start epochs + {paper_epochs})")
    return paper, epoch


def authors_curves() -> pd.DataFrame:
    """The authors' recorded LeNet/MNIST non-identical curves (reproduce/authors/), with their
    epochs and steps counted from the end of their 2-epoch warm start."""
    authors = pd.read_csv(repo_root().joinpath(*AUTHORS_CSV), comment="#")
    authors["epochs after the warm start"] = authors["epoch"] - 2
    authors["steps after the warm start"] = authors["epochs after the warm start"] * AUTHORS_STEPS_PER_EPOCH
    return authors


def paper_curves(paper: Mapping[str, Result], authors: pd.DataFrame, epoch: int) -> pd.DataFrame:
    """Test loss and accuracy (%) against the steps after the warm start, of this notebook's
    paper-setting runs (`epoch` steps per epoch) and of the authors' curves, in one table."""
    curves = []
    for method, r in paper.items():
        m = r.metrics.dropna(subset=["test_acc"])
        curves.append(pd.DataFrame({"method": method, "source": "this run", "steps after the warm start": m["step"] - 2 * epoch,
                                    "test_loss": m["test_loss"], "test_acc": 100 * m["test_acc"]}))
    curves.append(authors.assign(source="authors")[["method", "source", "steps after the warm start", "test_loss", "test_acc"]])
    return pd.concat(curves, ignore_index=True)


def plot_paper_curves(curves: pd.DataFrame, epoch: int, title: str) -> plt.Figure:
    """Test loss (log) and accuracy against the steps after the warm start (symlog), one line per
    method and source; this run's warm start shows as its 2 epochs before 0."""
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.8))
    for ax, y, label in [(axes[0], "test_loss", "test loss"), (axes[1], "test_acc", "test accuracy (%)")]:
        sns.lineplot(data=curves, x="steps after the warm start", y=y, hue="method", style="source",
                     markers=False, ax=ax, legend=ax is axes[1])
        ax.set_xscale("symlog", linthresh=100)
        ax.set_xlim(left=-2 * epoch)
        ax.set_ylabel(label)
    axes[0].set_yscale("log")
    sns.move_legend(axes[1], "upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle(title)
    fig.tight_layout()
    return fig


def paper_table(paper: Mapping[str, Result], authors: pd.DataFrame, paper_epochs: int) -> pd.DataFrame:
    """Per method: this run's test accuracy, train loss and MB sent beside the authors' test
    accuracy at the same epoch after the warm start (at most 98) and their last epoch's numbers."""
    last = authors[authors["epoch"] == authors["epoch"].max()].set_index("method")
    same = authors[authors["epochs after the warm start"] == min(paper_epochs, 98)].set_index("method")
    return pd.DataFrame({method: {"this run: test acc (%)": 100 * r.summary["final_test_acc"],
                                  "this run: final train loss": r.summary["final_train_loss"],
                                  "this run: MB sent (all ranks)": r.summary["comm_bytes"] / 1e6,
                                  f"authors, epoch {min(paper_epochs, 98)} after warm start: test acc (%)": same.loc[method, "test_acc"],
                                  "authors, epoch 98 after warm start: test acc (%)": last.loc[method, "test_acc"],
                                  "authors, epoch 98 after warm start: train loss": last.loc[method, "train_loss"]}
                         for method, r in paper.items()}).T


def bytes_invariant(runs: Runs, partitions: Sequence[str], seeds: Sequence[int], period: int) -> tuple[str, str, bool]:
    """(expected, measured, holds) of the invariant "VRL-SGD sends exactly local SGD's bytes": with
    k = `period`, on every split and seed (Δ is never sent); measured: both on the shards, first seed."""
    same = all(runs[f"VRL-SGD {p} k={period}", s].summary["comm_bytes"] == runs[f"local SGD {p} k={period}", s].summary["comm_bytes"]
               for p in partitions for s in seeds)
    mb = {m: runs[f"{m} shards k={period}", seeds[0]].summary["comm_bytes"] / 1e6 for m in LOCAL}
    return (f"equal bytes in all {len(partitions) * len(seeds)} (split, seed) pairs",
            f"{mb['VRL-SGD']:.2f} MB vs {mb['local SGD']:.2f} MB (shards, seed {seeds[0]})", same)


def loss_claim_values(runs: Runs, syn_loss: Mapping[tuple[str, float, int], float], zeta: Mapping[str, float],
                      periods: Sequence[int], period: int, shifts: Sequence[float],
                      seeds: Sequence[int]) -> dict[str, tuple[list[float], str]]:
    """claim id -> (per-seed values, their description) of every loss claim, decided on the mean
    over seeds: the log2 loss ratios against S-SGD (non-IID and IID), the k sweep's growth
    difference, and (local − VRL loss) at the highest minus at the lowest ζ² split and shift."""
    def ratios(method: str, split: str, short: str) -> tuple[list[float], str]:
        a, b = f"{method} {split} k={period}", f"S-SGD {split}"
        mean = [np.mean([loss(runs, label, s) for s in seeds]) for label in (a, b)]
        return ([log2_ratio(loss(runs, a, s), loss(runs, b, s)) for s in seeds],
                f"log2({short}/S-SGD) (mean losses {mean[0]:.3f} vs {mean[1]:.3f})")

    kmin, kmax = min(periods), max(periods)
    lo_z, hi_z = min(zeta, key=zeta.get), max(zeta, key=zeta.get)
    smin, smax = min(shifts), max(shifts)

    def gap(part: str, s: int) -> float:
        return loss(runs, f"local SGD {part} k={period}", s) - loss(runs, f"VRL-SGD {part} k={period}", s)

    def sgap(shift: float, s: int) -> float:
        return syn_loss["local SGD", shift, s] - syn_loss["VRL-SGD", shift, s]

    return {"noniid_local_worse": ratios("local SGD", "shards", "local"),
            "noniid_vrl_matches_loss": ratios("VRL-SGD", "shards", "VRL"),
            **{IID_IDS[m]: ratios(m, "iid", m) for m in LOCAL},
            "k_sweep": ([(loss(runs, f"local SGD shards k={kmax}", s) - loss(runs, f"local SGD shards k={kmin}", s))
                         - (loss(runs, f"VRL-SGD shards k={kmax}", s) - loss(runs, f"VRL-SGD shards k={kmin}", s)) for s in seeds],
                        "growth difference"),
            "zeta_digits": ([gap(hi_z, s) - gap(lo_z, s) for s in seeds],
                            f"(local − VRL) at {hi_z} (ζ² {zeta[hi_z]:.3g}) − at {lo_z} (ζ² {zeta[lo_z]:.3g})"),
            "zeta_synthetic": ([sgap(smax, s) - sgap(smin, s) for s in seeds],
                               f"(local − VRL) at shift {smax:g} − at shift {smin:g}")}


def shard_test_correct(runs: Runs, period: int, seeds: Sequence[int]) -> dict[str, list[np.ndarray]]:
    """method -> every seed's per-test-image correctness (`Result.test_correct`) on the shards
    (k = `period` for the local methods)."""
    return {m: [runs[label, s].test_correct() for s in seeds]
            for m, label in [("local SGD", f"local SGD shards k={period}"), ("VRL-SGD", f"VRL-SGD shards k={period}"),
                             ("S-SGD", "S-SGD shards")]}

"""Notebook 02's experiment (LIEC-SGD as the authors' code runs it): claims, runs, bytes, decisions.

Cheng et al. 2024: the methods, the registration, the runs, the ledger's bytes per worker, the
claims' intervals and the byte-formula invariant.

Runs of a setup are keyed (method label, seed); labels are "P-SGD", "MEM-SGD", "DoubleSqueeze"
and "LIEC-SGD({H})". Every claim compares the same object for every method: the model a user
deploys, the average of the workers' models at the end of the run (`finalize`; for P-SGD,
MEM-SGD and DoubleSqueeze every worker holds it all along), its loss on the whole training set
(`Result.summary["final_train_loss"]`) and its accuracy on the test set."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..verdicts import plots
from ..algorithms.buckets import plan_groups
from ..verdicts.claims import Claims, Test, interval_or_nan, paired_accuracy_interval, paired_interval
from ..verdicts.verdict import REPRODUCED
from ..training.results import Result
from ..training.runner import run

BN_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")
LOSS, ACC = "train loss", "test acc"     # the per-seed table's columns: the averaged model's
PREMISE = "ds_slower_than_mem"           # the premise of "better than DoubleSqueeze"
PILOT_WHERE = "reproduce/pilots/<profile>/02_liec_sgd/T/claims.csv"


def methods(compressor: str, bucket_mb: float, periods: Sequence[int],
            error_compensation: bool = True) -> dict[str, tuple[str, dict[str, Any]]]:
    """label -> (algorithm, parameters) of the authors' methods, all with the same compressor and
    buckets: P-SGD (dense), MEM-SGD (worker error feedback), DoubleSqueeze (worker and server
    error feedback) and LIEC-SGD(H) for every H of `periods`. `error_compensation=False` plants
    the ablation that reduces LIEC-SGD to uncompensated bidirectional compression (the
    algorithm's parameter of that name)."""
    shared = {"compressor": compressor, "bucket_mb": bucket_mb}
    liec = shared if error_compensation else {**shared, "error_compensation": False}
    return {"P-SGD": ("compressed_sgd", {"compressor": "none", "bucket_mb": bucket_mb}),
            "MEM-SGD": ("compressed_sgd", shared),
            "DoubleSqueeze": ("double_squeeze", shared),
            **{f"LIEC-SGD({h})": ("liec_sgd", {**liec, "period": h}) for h in periods}}


def setups(model: str, data: str, extra_setups: Sequence[Sequence[str]]) -> dict[tuple[str, str], str]:
    """(model, data) -> the suffix of its claim ids and run names: "" for the notebook's own setup,
    "_{model}_{data}" for each of `extra_setups`."""
    return {(model, data): "", **{(m, dd): f"_{m}_{dd}" for m, dd in extra_setups}}


@dataclass(frozen=True)
class Margins:
    """The non-inferiority margins, from the registered pilot (other seeds, the same budget): one
    seed standard deviation of the baseline's own result, the change that re-seeding the baseline
    alone makes. `loss`: MEM-SGD's final training loss; `acc_points`: P-SGD's test accuracy."""

    loss: float
    acc_points: float


def register_claims(claims: Claims, setups: Mapping[tuple[str, str], str], periods: Sequence[int], n_seeds: int,
                    margins: Margins | None) -> None:
    """Register, for every setup, the premise of "better than DoubleSqueeze" (DoubleSqueeze's loss
    above MEM-SGD's: bidirectional compression costs convergence) and, for every H of `periods`,
    the paper's three claims: LIEC(H)'s final training loss as good as MEM-SGD's (non-inferiority,
    the pilot's margin), below DoubleSqueeze's (superiority, decided only where the premise is
    reproduced in the same runs: `decide_setup`), and its test accuracy as good as P-SGD's
    (non-inferiority, the pilot's margin). `margins` None is the pilot itself, which measures
    them: its thresholds are 0 (no difference); its intervals, not its verdicts, give the
    registration its power."""
    paired = f"paired t 95% interval over {n_seeds} seeds"
    if margins is None:
        loss_margin, acc_margin = 0.0, 0.0
        loss_source = acc_source = "null: no difference (this run is the pilot whose seed spread gives the margin)"
    else:
        loss_margin, acc_margin = margins.loss, -margins.acc_points
        loss_source = (f"pilot: one seed SD of MEM-SGD's final training loss over the pilot's seeds "
                       f"({PILOT_WHERE} on the seeds its registration names, MEM-SGD's seed SD in liec_close_to_mem's measured)")
        acc_source = (f"pilot: one seed SD of P-SGD's test accuracy over the pilot's seeds "
                      f"({PILOT_WHERE} on the seeds its registration names, P-SGD's seed SD in liec_acc_vs_psgd's measured)")
    for (m, dd), tag in setups.items():
        where = f"{m}/{dd}: " if tag else ""
        claims.register(f"{PREMISE}{tag}", f"{where}DoubleSqueeze (bidirectional) converges slower per iteration than MEM-SGD",
                        "bidirectional compression with slower convergence rate (the abstract)",
                        Test("final train loss DoubleSqueeze - MEM-SGD", ">=", 0.0, paired,
                             form="superiority", source="null: no difference"))
        for h in periods:
            claims.register(f"liec_close_to_mem_h{h}{tag}", f"{where}LIEC-SGD({h}) converges per iteration as well as MEM-SGD",
                            "the convergence rate of unidirectional compression",
                            Test(f"final train loss LIEC({h}) - MEM-SGD", "<=", loss_margin, paired,
                                 form="non-inferiority", source=loss_source))
            claims.register(f"liec_beats_ds_h{h}{tag}", f"{where}LIEC-SGD({h}) converges faster per iteration than DoubleSqueeze",
                            "a better convergence rate than bidirectional compression",
                            Test(f"final train loss DoubleSqueeze - LIEC({h})", ">=", 0.0,
                                 f"{paired}; decided only where {PREMISE}{tag} is reproduced in the same runs",
                                 form="superiority", source="null: no difference"))
            claims.register(f"liec_acc_vs_psgd_h{h}{tag}", f"{where}LIEC-SGD({h})'s test accuracy as good as P-SGD's",
                            "improved accuracy; test accuracy close to P-SGD",
                            Test(f"test acc LIEC({h}) - P-SGD (points)", ">=", acc_margin,
                                 f"paired 95% interval, {n_seeds} seeds x the test images (paired_accuracy_interval)",
                                 form="non-inferiority", source=acc_source))


def run_setups(setups: Mapping[tuple[str, str], str], methods: Mapping[str, tuple[str, dict]], seeds: Sequence[int],
               common: Mapping[str, Any]) -> dict[str, dict[tuple[str, int], Result]]:
    """Every method on every seed of every setup: suffix -> {(method, seed): run}."""
    setup_runs = {}
    for (m, dd), tag in setups.items():
        setup_runs[tag] = {}
        for s in seeds:
            for label, (algo, params) in methods.items():
                name = label.lower().replace("(", "").replace(")", "").replace("-", "_") + f"{tag}_seed{s}"
                setup_runs[tag][(label, s)] = run(algo=algo, params=params, name=name,
                                                  **{**common, "model": m, "data": dd, "seed": s})
    return setup_runs


def worker_bytes(r: Result, steps: int) -> tuple[pd.Series, pd.Series]:
    """Bytes one worker sends up (gather, reduce) and receives down (broadcast) at each step
    0..steps-1, from the ledger of rank 1 (a worker; every rank records the same messages)."""
    c = r.comm()
    c = c[c["rank"] == 1]
    up = c[c.kind.isin(["gather", "reduce"])].groupby("step").nbytes.sum()
    down = c[c.kind == "broadcast"].groupby("step").nbytes.sum()
    return up.reindex(range(steps), fill_value=0), down.reindex(range(steps), fill_value=0)


def summary_table(runs: Mapping[str, Result], steps: int) -> pd.DataFrame:
    """Per method: the averaged model's final training loss and test accuracy, KB per step a worker
    sends up and receives down (`worker_bytes`), training seconds."""
    rows = []
    for name, r in runs.items():
        up, down = worker_bytes(r, steps)
        rows.append({"method": name, LOSS: r.summary["final_train_loss"], ACC: r.summary["final_test_acc"],
                     "up KB/step/worker": up.mean() / 1e3, "down KB/step/worker": down.mean() / 1e3,
                     "train time (s)": r.summary["train_s"]})
    return pd.DataFrame(rows)


def objective_vs_worker_bytes(runs: Mapping[str, Result], steps: int) -> pd.DataFrame:
    """Every run's evaluations of the averaged model's training objective (`plots.tidy`,
    labelled) with the cumulative bytes one worker had sent up and received down by the end of
    that step ("worker bytes")."""
    df = plots.tidy(runs).dropna(subset=["train_objective"])
    cum = {label: (lambda u, dn: (u + dn).cumsum())(*worker_bytes(r, steps)) for label, r in runs.items()}
    df["worker bytes"] = [cum[l].iloc[int(s) - 1] for l, s in zip(df.label, df.step)]
    return df


def per_seed_table(by_seed: Mapping[tuple[str, int], Result]) -> pd.DataFrame:
    """Per method and seed: the averaged model's final training loss (the whole training set) and
    test accuracy."""
    return pd.DataFrame([{"method": label, "seed": s, LOSS: r.summary["final_train_loss"],
                          ACC: r.summary["final_test_acc"]} for (label, s), r in by_seed.items()])


def values(per_seed: pd.DataFrame, label: str, column: str, seeds: Sequence[int]) -> np.ndarray:
    """`column` of `label` over `seeds`, in seed order."""
    return per_seed[per_seed.method == label].set_index("seed").loc[seeds, column].to_numpy(float)


def seed_sd(x: np.ndarray) -> float:
    """The standard deviation over seeds (ddof 1; NaN with one seed): the pilot's margins."""
    return float(np.std(x, ddof=1)) if len(x) > 1 else float("nan")


def _paired(a: np.ndarray, b: np.ndarray, what: str) -> tuple[float, float, float, str]:
    """(low, high, estimate, measured) of mean(a - b) over paired seeds (`paired_interval`)."""
    return (*interval_or_nan(paired_interval, a, b), float((a - b).mean()),
            what + "; per seed " + ", ".join(f"{v:+.4f}" for v in a - b))


def loss_claims(per_seed: pd.DataFrame, periods: Sequence[int], seeds: Sequence[int]) -> dict[str, tuple[float, float, float, str]]:
    """The loss claims, paired by seed, on the averaged model's final training loss: claim id
    (without the setup's suffix) -> (low, high, estimate, measured). `PREMISE`: DoubleSqueeze −
    MEM-SGD; for each H, "liec_close_to_mem_h{H}": LIEC(H) − MEM-SGD (measured names MEM-SGD's
    seed SD, the margin a pilot gives); "liec_beats_ds_h{H}": DoubleSqueeze − LIEC(H)."""
    mem, ds = values(per_seed, "MEM-SGD", LOSS, seeds), values(per_seed, "DoubleSqueeze", LOSS, seeds)
    out = {PREMISE: _paired(ds, mem, f"loss DoubleSqueeze {ds.mean():.4f} vs MEM-SGD {mem.mean():.4f}")}
    for h in periods:
        liec = values(per_seed, f"LIEC-SGD({h})", LOSS, seeds)
        out[f"liec_close_to_mem_h{h}"] = _paired(
            liec, mem, f"loss LIEC({h}) {liec.mean():.4f} vs MEM-SGD {mem.mean():.4f} (MEM-SGD's seed SD {seed_sd(mem):.3g})")
        out[f"liec_beats_ds_h{h}"] = _paired(ds, liec, f"loss LIEC({h}) {liec.mean():.4f} vs DoubleSqueeze {ds.mean():.4f}")
    return out


def accuracy_claim(by_seed: Mapping[tuple[str, int], Result], h: int, seeds: Sequence[int]) -> tuple[float, float, float, str]:
    """LIEC(h)'s test accuracy − P-SGD's, in points, paired per test image over the seeds
    (`paired_accuracy_interval`): (low, high, estimate, measured); measured names P-SGD's seed SD
    of its accuracy (the margin a pilot gives)."""
    a = np.asarray([by_seed[f"LIEC-SGD({h})", s].test_correct() for s in seeds], float)
    b = np.asarray([by_seed["P-SGD", s].test_correct() for s in seeds], float)
    per_seed = ", ".join(f"{100 * (x.mean() - y.mean()):+.1f}" for x, y in zip(a, b))
    return (*interval_or_nan(paired_accuracy_interval, a, b), 100 * float(a.mean() - b.mean()),
            f"LIEC({h}) {100 * a.mean():.2f}% vs P-SGD {100 * b.mean():.2f}% (P-SGD's seed SD "
            f"{100 * seed_sd(b.mean(axis=1)):.3g} points; {len(a)} seeds, {a.shape[-1]} test images); per seed {per_seed} points")


def decide_setup(claims: Claims, by_seed: Mapping[tuple[str, int], Result], periods: Sequence[int],
                 seeds: Sequence[int], tag: str = "") -> pd.DataFrame:
    """Decide every claim of one setup (ids ending in `tag`) from its runs; returns its per-seed
    table. The premise is decided first: where it is not reproduced, "better than DoubleSqueeze"
    is prechecked inconclusive (the setting does not show what the claim improves on) before its
    own interval is looked at, unless its registration already made it undecidable."""
    per_seed = per_seed_table(by_seed)
    loss = loss_claims(per_seed, periods, seeds)
    premise = claims.decide(f"{PREMISE}{tag}", *loss.pop(PREMISE))
    for h in periods:
        beats = claims.claims[f"liec_beats_ds_h{h}{tag}"]
        if premise != REPRODUCED and beats.precheck is None:
            claims.precheck(beats.id, f"premise absent: {PREMISE}{tag} is {premise} here (DoubleSqueeze's loss not shown "
                                      f"above MEM-SGD's), so there is no cost of bidirectional compression to beat")
        claims.decide(f"liec_acc_vs_psgd_h{h}{tag}", *accuracy_claim(by_seed, h, seeds))
    for id, decision in loss.items():
        claims.decide(f"{id}{tag}", *decision)
    return per_seed


def expected_bytes(sizes: Sequence[int], periods: Sequence[int], steps: int) -> dict[str, Callable[[int], tuple[int, int]]]:
    """method label -> step t -> (bytes up, bytes down) per worker by SPECS b's formula, for buckets
    of `sizes` elements: a compressed step sends ⌈d_b/8⌉ + 4 bytes per bucket, a dense one 4d; LIEC's
    averaging steps (every H-th) send 4d twice each way, and its last step also holds finalize()'s
    model average (4d more)."""
    sign, dense = sum(-(-n // 8) + 4 for n in sizes), 4 * sum(sizes)

    def liec(h: int) -> Callable[[int], tuple[int, int]]:
        def at(t: int) -> tuple[int, int]:
            if t < steps - 1:
                return (2 * dense, 2 * dense) if (t + 1) % h == 0 else (sign, sign)
            return tuple(v + dense for v in ((2 * dense, 2 * dense) if steps % h == 0 else (sign, sign)))
        return at

    return {"P-SGD": lambda t: (dense, dense), "MEM-SGD": lambda t: (sign, dense),
            "DoubleSqueeze": lambda t: (sign, sign), **{f"LIEC-SGD({h})": liec(h) for h in periods}}


def ledger_invariant(runs: Mapping[str, Result], periods: Sequence[int], steps: int,
                     bucket_mb: float) -> tuple[str, str, bool]:
    """(expected, measured, holds) of the invariant "the ledger's bytes per step and worker are SPECS
    b's formula (`expected_bytes`) bucket by bucket, and LIEC's are at most half MEM-SGD's". The
    buckets are the P-SGD model's tensors cut as the algorithms cut them (`plan_groups`). A model
    with BatchNorm buffers (also broadcast every step) checks only the ratio."""
    state = runs["P-SGD"].state_dict()
    formula_applies = not any(k.endswith(BN_BUFFERS) for k in state)
    sizes = [sum(t.numel() for t in g) for g in plan_groups(list(state.values()), bucket_mb * 2**20)]
    expected = expected_bytes(sizes, periods, steps)
    ledger = {label: worker_bytes(r, steps) for label, r in runs.items()}
    exact = all([up.tolist(), down.tolist()] == [[expected[label](t)[i] for t in range(steps)] for i in (0, 1)]
                for label, (up, down) in ledger.items())
    per_step = {label: float(sum(up + down) / steps) for label, (up, down) in ledger.items()}
    return ((f"every step: sign ceil(d_b/8)+4 per bucket ({len(sizes)} buckets), dense 4d; " if formula_applies
             else "(BatchNorm buffers: the per-step formula not checked) ") + "LIEC <= 0.5x MEM-SGD",
            ", ".join(f"{k} {v / 1e3:.1f} KB" for k, v in per_step.items()),
            (exact or not formula_applies) and all(per_step[f"LIEC-SGD({h})"] <= 0.5 * per_step["MEM-SGD"] for h in periods))

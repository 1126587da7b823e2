"""Notebook 02's experiment (LIEC-SGD as the authors' code runs it): claims, runs, bytes, decisions.

Cheng et al. 2024: the methods, the registration, the runs, the ledger's bytes per worker, the loss
claims' intervals and the byte-formula invariant.

Runs of a setup are keyed (method label, seed); labels are "P-SGD", "MEM-SGD", "DoubleSqueeze"
and "LIEC-SGD({H})"."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..verdicts import plots
from ..algorithms.buckets import plan_groups
from ..verdicts.claims import Claims, Test, interval_or_nan, mean_interval, paired_interval
from ..training.results import Result
from ..training.runner import run

BN_BUFFERS = ("running_mean", "running_var", "num_batches_tracked")


def methods(compressor: str, bucket_mb: float, periods: Sequence[int]) -> dict[str, tuple[str, dict[str, Any]]]:
    """label -> (algorithm, parameters) of the authors' methods, all with the same compressor and
    buckets: P-SGD (dense), MEM-SGD (worker error feedback), DoubleSqueeze (worker and server
    error feedback) and LIEC-SGD(H) for every H of `periods`."""
    shared = {"compressor": compressor, "bucket_mb": bucket_mb}
    return {"P-SGD": ("compressed_sgd", {"compressor": "none", "bucket_mb": bucket_mb}),
            "MEM-SGD": ("compressed_sgd", shared),
            "DoubleSqueeze": ("double_squeeze", shared),
            **{f"LIEC-SGD({h})": ("liec_sgd", {**shared, "period": h}) for h in periods}}


def setups(model: str, data: str, extra_setups: Sequence[Sequence[str]]) -> dict[tuple[str, str], str]:
    """(model, data) -> the suffix of its claim ids and run names: "" for the notebook's own setup,
    "_{model}_{data}" for each of `extra_setups`."""
    return {(model, data): "", **{(m, dd): f"_{m}_{dd}" for m, dd in extra_setups}}


def register_claims(claims: Claims, setups: Mapping[tuple[str, str], str], periods: Sequence[int], n_seeds: int) -> None:
    """Register, for every setup and H of `periods`, the paper's three claims with their tests:
    LIEC(H)'s final train loss at most 10% above MEM-SGD's, below DoubleSqueeze's, and its averaged
    model's test accuracy within 2 points of P-SGD's."""
    for (m, dd), tag in setups.items():
        where = f"{m}/{dd}: " if tag else ""
        for h in periods:
            claims.register(f"liec_close_to_mem_h{h}{tag}", f"{where}LIEC-SGD({h})'s per-iteration convergence ≈ MEM-SGD's",
                            "same rate as unidirectional compression",
                            Test("final train loss LIEC / MEM-SGD - 1", "<=", 0.10,
                                 f"mean over {n_seeds} paired seeds, t 95% interval"))
            claims.register(f"liec_beats_ds_h{h}{tag}", f"{where}LIEC-SGD({h}) converges faster per iteration than DoubleSqueeze",
                            "better rate than bidirectional compression",
                            Test("final train loss DoubleSqueeze - LIEC", ">=", 0.0,
                                 f"paired t 95% interval over {n_seeds} seeds"))
            claims.register(f"liec_acc_vs_psgd_h{h}{tag}", f"{where}LIEC-SGD({h})'s averaged model within 2 points of P-SGD's accuracy",
                            "improved accuracy; test accuracy close to P-SGD",
                            Test("test acc LIEC - P-SGD (points)", ">=", -2.0,
                                 f"paired 95% interval, {n_seeds} seeds x the test images (paired_accuracy_interval)"))


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


def final_loss(r: Result) -> float:
    """Training loss at the end: mean of the last quarter of the logged points (less noisy)."""
    tl = r.metrics["train_loss"].dropna()
    return tl.iloc[-max(1, len(tl) // 4):].mean()


def summary_table(runs: Mapping[str, Result], steps: int) -> pd.DataFrame:
    """Per method: final train loss, test accuracy, KB per step a worker sends up and receives
    down (`worker_bytes`), training seconds."""
    rows = []
    for name, r in runs.items():
        up, down = worker_bytes(r, steps)
        rows.append({"method": name, "final train loss": final_loss(r), "test acc": r.summary["final_test_acc"],
                     "up KB/step/worker": up.mean() / 1e3, "down KB/step/worker": down.mean() / 1e3,
                     "train time (s)": r.summary["train_s"]})
    return pd.DataFrame(rows)


def loss_vs_worker_bytes(runs: Mapping[str, Result], steps: int) -> pd.DataFrame:
    """Every run's logged training losses (`plots.tidy`, labelled) with the cumulative bytes one
    worker had sent up and received down by the end of that step ("worker bytes")."""
    df = plots.tidy(runs).dropna(subset=["train_loss"])
    cum = {label: (lambda u, dn: (u + dn).cumsum())(*worker_bytes(r, steps)) for label, r in runs.items()}
    df["worker bytes"] = [cum[l].iloc[int(s) - 1] for l, s in zip(df.label, df.step)]
    return df


def per_seed_table(by_seed: Mapping[tuple[str, int], Result]) -> pd.DataFrame:
    """Per method and seed: final train loss (`final_loss`) and test accuracy."""
    return pd.DataFrame([{"method": label, "seed": s, "final train loss": final_loss(r),
                          "test acc": r.summary["final_test_acc"]} for (label, s), r in by_seed.items()])


def values(per_seed: pd.DataFrame, label: str, column: str, seeds: Sequence[int]) -> np.ndarray:
    """`column` of `label` over `seeds`, in seed order."""
    return per_seed[per_seed.method == label].set_index("seed").loc[seeds, column].to_numpy(float)


def loss_claims(per_seed: pd.DataFrame, h: int, seeds: Sequence[int]) -> dict[str, tuple[float, float, float, str]]:
    """The two loss claims of LIEC-SGD(h), paired by seed: id prefix -> (low, high, estimate,
    measured). "liec_close_to_mem": loss(LIEC) / loss(MEM-SGD) − 1, its mean's t interval;
    "liec_beats_ds": loss(DoubleSqueeze) − loss(LIEC), the paired t interval."""
    mem, ds = values(per_seed, "MEM-SGD", "final train loss", seeds), values(per_seed, "DoubleSqueeze", "final train loss", seeds)
    liec = values(per_seed, f"LIEC-SGD({h})", "final train loss", seeds)
    rel = liec / mem - 1
    return {"liec_close_to_mem": (*interval_or_nan(mean_interval, rel), float(rel.mean()),
                                  f"loss {liec.mean():.4f} vs MEM-SGD {mem.mean():.4f}; per seed " + ", ".join(f"{v:+.1%}" for v in rel)),
            "liec_beats_ds": (*interval_or_nan(paired_interval, ds, liec), float((ds - liec).mean()),
                              f"loss {liec.mean():.4f} vs DoubleSqueeze {ds.mean():.4f}; per seed "
                              + ", ".join(f"{v:+.4f}" for v in ds - liec))}


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

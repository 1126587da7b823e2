"""Notebook 09's experiment (KAVG, local reductions, reduction momentum): claims, runs, tables.

Cong, Yang & Zhou, reducing global reductions: the registration, the runs, their tables, the global
reductions to a target and the per-seed values the verdicts are decided on.

Runs are keyed (optimizer, method, seed); methods are "synchronous", "KAVG K={k}" and
"local+momentum K_g={k} mu={m}"."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from ..verdicts.analysis import first_reaching
from ..verdicts.claims import Claims, Test
from ..training.results import Result
from ..training.runner import run

Runs = dict[tuple[str, str, int], Result]


def local_group_count(nproc: int, local_groups: int) -> int | None:
    """The number of groups of consecutive ranks for local reductions: `local_groups` when it is a
    count g with 1 < g < nproc dividing nproc, the smallest such g when it is 0, None (no grouping)
    when it is 0 and nproc has none (a prime nproc). Any other value raises ValueError."""
    allowed = [g for g in range(2, nproc) if nproc % g == 0]
    if local_groups == 0:
        return allowed[0] if allowed else None
    if local_groups not in allowed:
        raise ValueError(f"local_groups={local_groups} with nproc={nproc}: allowed values are 0 (derived from nproc)"
                         + (", " + ", ".join(map(str, allowed)) if allowed
                            else " only (nproc has no divisor g with 1 < g < nproc)"))
    return local_groups


def register_claims(claims: Claims, optimizers: Sequence[str], kmax: int, mu: float, n_seeds: int, n_test: int,
                    resolution: float, expected_acc: float, local_groups: int | None, nproc: int) -> None:
    """Register the notebook's claims (the abstract's: comparable accuracy with K = `kmax`, Adam
    regularized, local reductions + reduction momentum need fewer global reductions, and the μ = 0
    ablation) with their tests, and their prechecks: the accuracy claims when the paired `resolution`
    (points) is coarser than the 1-point margin, the reduction claims when there are no groups."""
    acc_stat = f"paired 95% interval, {n_seeds} seeds x {n_test} test images (paired_accuracy_interval)"
    for opt in optimizers:
        claims.register(f"{opt.lower()}_comparable_acc", f"{opt}: KAVG (K={kmax}) reaches accuracy comparable to synchronous training",
                        "> 99% fewer global reductions at comparable accuracy (6 GPUs, CIFAR-10)",
                        Test(f"KAVG − synchronous {opt} test accuracy (points)", ">=", -1.0, acc_stat))
    claims.register("adam_improves_acc", f"Adam: sparse global reductions (K={kmax}) improve generalization",
                    "regularizes adaptive optimizers, bridges the generalization gap",
                    Test("KAVG-Adam − synchronous Adam test accuracy (points)", ">=", 0.0, acc_stat))
    paired = f"mean over {n_seeds} paired seeds, t interval"
    claims.register("local_momentum_fewer_reductions",
                    "local reductions + reduction momentum reach KAVG's accuracy with fewer global reductions",
                    "up to 62% fewer (ImageNet-1K)",
                    Test("log2((global reductions to target + 1): local+momentum / KAVG)", "<=", 0.0, paired))
    claims.register("momentum_ablation", "ablation: reduction momentum lowers the global reductions needed",
                    "momentum further accelerates convergence",
                    Test(f"log2((global reductions to target + 1): mu={mu} / mu=0)", "<=", 0.0, paired))
    if resolution > 1.0:
        for opt in optimizers:
            claims.precheck(f"{opt.lower()}_comparable_acc", f"{n_seeds} seeds x {n_test} test images resolve about "
                            f"±{resolution:.1f} points at {100 * expected_acc:.0f}% accuracy, coarser than the 1-point margin")
    if local_groups is None:
        for id in ["local_momentum_fewer_reductions", "momentum_ablation"]:
            claims.precheck(id, f"nproc={nproc} has no group count 1 < g < nproc dividing it: no local reductions can run")


def run_kavg(opt_args: Mapping[str, Mapping[str, Any]], periods: Sequence[int], seeds: Sequence[int],
             common: Mapping[str, Any]) -> Runs:
    """Synchronous training and KAVG for every optimizer (`opt_args`: name -> its run fields) and
    seed: SGD at every K of `periods`, Adam at max(periods) (its other periods on the first seed only)."""
    runs: Runs = {}
    for opt, args in opt_args.items():
        for s in seeds:
            runs[opt, "synchronous", s] = run(algo="ssgd", name=f"sync-{opt}", seed=s, **common, **args)
            for k in (periods if opt == "SGD" or s == seeds[0] else [max(periods)]):
                runs[opt, f"KAVG K={k}", s] = run(algo="kavg", params={"period": k},
                                                  name=f"kavg{k}-{opt}", seed=s, **common, **args)
    return runs


def run_local_momentum(runs: Runs, periods: Sequence[int], seeds: Sequence[int], mu: float, local_groups: int,
                       local_period: int, sgd_args: Mapping[str, Any], common: Mapping[str, Any]) -> None:
    """Add to `runs` KAVG-SGD with local reductions in `local_groups` groups every `local_period`
    steps, at every global period K_g of `periods`, with reduction momentum 0 and `mu`, every seed."""
    for s in seeds:
        for k in periods:
            for m in (0.0, mu):
                runs["SGD", f"local+momentum K_g={k} mu={m}", s] = run(
                    algo="kavg", name=f"local{k}-mu{m}", seed=s, **common, **sgd_args,
                    params={"period": k, "local_groups": local_groups, "local_period": local_period,
                            "reduction_momentum": m})


def kavg_table(runs: Runs, nproc: int, seed: int) -> pd.DataFrame:
    """Per optimizer and method, seed `seed`'s global reductions per rank, final test accuracy and
    final train loss."""
    return pd.DataFrame([{"optimizer": opt, "method": method,
                          "global reductions": r.summary["global_reductions"] / nproc,
                          "test acc": r.summary["final_test_acc"],
                          "final train loss": r.summary["final_train_loss"]}
                         for (opt, method, s), r in runs.items() if s == seed])


def reductions_to(r: Result, target: float, nproc: int) -> float:
    """Global reductions per rank a run had made when its test accuracy first reached `target`
    (`analysis.first_reaching`); NaN if it never did."""
    return first_reaching(r.metrics, "test_acc", target, at="global_reductions", below=False) / nproc


def reach_table(runs: Runs, target: Mapping[int, float], nproc: int) -> pd.DataFrame:
    """Per SGD run other than synchronous: the global reductions (per rank) to reach its seed's
    `target` accuracy, its local reductions per rank and its final test accuracy."""
    return pd.DataFrame([{"method": method, "seed": s, "global reductions to target": reductions_to(r, target[s], nproc),
                          "local reductions (per rank)": r.summary["local_reductions"] / nproc,
                          "final test acc": r.summary["final_test_acc"]}
                         for (opt, method, s), r in runs.items() if opt == "SGD" and method != "synchronous"])


def sgd_curves(runs: Runs, nproc: int, seed: int) -> pd.DataFrame:
    """The evaluated rows of seed `seed`'s SGD runs, with their method and their global reductions
    per rank ("rounds")."""
    return pd.concat([r.metrics.assign(method=method, rounds=r.metrics.global_reductions / nproc)
                      for (opt, method, s), r in runs.items() if opt == "SGD" and s == seed],
                     ignore_index=True).dropna(subset=["test_acc"])


def reduction_cut(sync: Result, sparse: Result, steps: int, period: int) -> tuple[float, float]:
    """(measured, expected) fraction of synchronous training's global reductions that KAVG with
    period K removes: measured from the two runs, expected 1 − ⌊T/K⌋/T by KAVG's schedule."""
    return (1 - sparse.summary["global_reductions"] / sync.summary["global_reductions"],
            1 - (steps // period) / steps)


def best_reductions(runs: Runs, method: str, periods: Sequence[int], seed: int, target: float,
                    nproc: int) -> float:
    """The fewest global reductions per rank to reach `target`, over the SGD runs of seed `seed`
    whose method is the template `method` ("KAVG K={k}") at a K of `periods`; NaN when none reaches it."""
    vals = [reductions_to(runs["SGD", method.format(k=k), seed], target, nproc) for k in periods
            if ("SGD", method.format(k=k), seed) in runs]
    vals = [v for v in vals if math.isfinite(v)]
    return min(vals) if vals else float("nan")

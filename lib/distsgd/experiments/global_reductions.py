"""Notebook 09's experiment (KAVG, local reductions, reduction momentum): claims, runs, tables.

Cong, Yang & Zhou, reducing global reductions: the registration, the runs, their tables, the global
reductions to a target accuracy and the decisions of the claims.

Runs are keyed (optimizer, method, seed); methods are "synchronous", "KAVG K={k}" and
"local+momentum K_g={k} mu={m}" (mu = 0: local reductions without reduction momentum).

The reduction claims compare KAVG and local reductions + reduction momentum at the same global period
(K_g = K = min(periods)), evaluated at every global reduction, so that every evaluated model is the
averaged one all learners hold. Per seed, R(method) is the number of global reductions (per rank)
after which its test accuracy first reaches the registered target; the quantity is the percentage of
KAVG's reductions the method saves, 100 (1 - R(local+momentum) / R(KAVG)). The target is a fixed
accuracy taken from the registered pilot (other seeds): the mean test accuracy of KAVG after 3/4 of
its run (`target_rule`), a level KAVG achieves that each seed reaches inside its schedule, so that no
method's own noisy endpoint sets it."""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from ..verdicts.analysis import first_reaching
from ..verdicts.claims import Claims, Test, interval_or_nan, paired_accuracy_interval
from ..training.results import Result
from ..training.runner import run

Runs = dict[tuple[str, str, int], Result]
PAPER_REDUCTION = 62.0        # % fewer global reductions than KAVG, ImageNet-1K (the abstract)
TARGET_FRACTION = 0.75        # the target: KAVG's mean accuracy after this fraction of its run, on the pilot
REDUCTION_CLAIMS = ("local_momentum_fewer_reductions", "local_momentum_up_to_62", "momentum_ablation")


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


def method_name(k: int, mu: float) -> str:
    """The run key of local reductions + reduction momentum mu at global period k."""
    return f"local+momentum K_g={k} mu={float(mu)}"


def register_claims(claims: Claims, optimizers: Sequence[str], kmin: int, kmax: int, mu: float, n_seeds: int,
                    n_test: int, sync_seed_range: Mapping[str, float] | None, target: float, local_groups: int | None,
                    nproc: int) -> None:
    """Register the notebook's claims with their tests, and the precheck of the reduction claims
    when nproc has no groups (no local reductions can run).

    * `{opt}_comparable_acc` (non-inferiority): KAVG (K = `kmax`) − synchronous test accuracy, in
      points, paired per test image over the seeds, >= −(synchronous training's own seed range on the
      pilot, `sync_seed_range`[opt]; 0 in the pilot itself, `sync_seed_range` None): KAVG falls no further
      below synchronous training than synchronous training falls below itself on another seed (the
      paper gives no number).
    * `adam_improves_acc` (superiority): KAVG-Adam − synchronous Adam > 0, after the precheck that the
      setting shows a generalization gap of Adam (`precheck_adam_gap`).
    * `local_momentum_fewer_reductions` (superiority) and `local_momentum_up_to_62` (up to 62%): the %
      of KAVG's global reductions that local reductions + reduction momentum save at the same
      accuracy (`target`), K_g = K = `kmin`: > 0, and against the paper's 62%.
    * `momentum_ablation` (superiority, shown, not deciding): the same with momentum `mu` against
      mu = 0, both with local reductions."""
    acc_stat = f"paired 95% interval, {n_seeds} seeds x {n_test} test images (paired_accuracy_interval)"
    for opt in optimizers:
        r = None if sync_seed_range is None else sync_seed_range[opt]
        source = (f"pilot: synchronous {opt}'s final test accuracy, largest − smallest over the registered pilot's "
                  f"seeds ({r:.1f} points)" if r is not None else
                  "null: no difference (in the pilot itself, whose seed range sets the margin of the deciding runs)")
        claims.register(f"{opt.lower()}_comparable_acc",
                        f"{opt}: KAVG (K={kmax}) reaches accuracy comparable to synchronous training",
                        "> 99% fewer global reductions at comparable accuracy (6 GPUs, CIFAR-10)",
                        Test(f"KAVG − synchronous {opt} test accuracy (points)", ">=", -(r or 0.0), acc_stat,
                             form="non-inferiority", source=source))
    claims.register("adam_improves_acc", f"Adam: sparse global reductions (K={kmax}) improve generalization",
                    "regularizes adaptive optimizers, bridges the generalization gap",
                    Test("KAVG-Adam − synchronous Adam test accuracy (points)", ">=", 0.0,
                         acc_stat + "; premise: synchronous Adam below synchronous SGD", form="superiority",
                         source="null: no difference"))
    where = f"to reach {100 * target:.2f}% test accuracy, K_g = K = {kmin}"
    paired = (f"mean over {n_seeds} paired seeds, t interval; target from the pilot: KAVG (K={kmin})'s mean "
              f"accuracy after {TARGET_FRACTION:.0%} of its run; premise: KAVG reaches it on every seed")
    fewer = f"% fewer global reductions {where}: local+momentum (mu={mu}) vs KAVG"
    claims.register("local_momentum_fewer_reductions",
                    "local reductions + reduction momentum need fewer global reductions than KAVG for the same accuracy",
                    "can further reduce global reductions (ImageNet-1K)",
                    Test(fewer, ">=", 0.0, paired, form="superiority", source="null: no difference"))
    claims.register("local_momentum_up_to_62",
                    "local reductions + reduction momentum save up to 62% of KAVG's global reductions",
                    "up to 62% fewer global reductions for the same validation accuracy (ImageNet-1K)",
                    Test(fewer, ">=", PAPER_REDUCTION, paired, form="up-to",
                         source="paper: abstract, 'can further reduce global reductions by up to 62% for the same "
                                "validation accuracy achieved in comparison to K-step averaging'"))
    claims.register("momentum_ablation", "ablation: reduction momentum lowers the global reductions needed",
                    "momentum further accelerates convergence",
                    Test(f"% fewer global reductions {where}: mu={mu} vs mu=0, both with local reductions", ">=", 0.0,
                         paired.replace("KAVG reaches", "mu=0 reaches"), form="superiority",
                         source="null: no difference"))
    if local_groups is None:
        for id in REDUCTION_CLAIMS:
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


def run_local_momentum(runs: Runs, period: int, seeds: Sequence[int], mu: float, local_groups: int,
                       local_period: int, sgd_args: Mapping[str, Any], common: Mapping[str, Any]) -> None:
    """Add to `runs` KAVG-SGD with local reductions in `local_groups` groups every `local_period`
    steps, at the global period K_g = `period`, with reduction momentum `mu` and 0, every seed."""
    for s in seeds:
        for m in (mu, 0.0):
            runs["SGD", method_name(period, m), s] = run(
                algo="kavg", name=f"local{period}-mu{m}", seed=s, **common, **sgd_args,
                params={"period": period, "local_groups": local_groups, "local_period": local_period,
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


def target_rule(runs: Runs, kmin: int, seeds: Sequence[int], steps: int, eval_every: int) -> tuple[int, float]:
    """The target's rule on `seeds`: (the last evaluated step within `TARGET_FRACTION` of the run,
    the mean over the seeds of KAVG (K = `kmin`)'s SGD test accuracy there). On the pilot's seeds at
    T it gives the registered target."""
    step = max(eval_every, int(TARGET_FRACTION * steps) // eval_every * eval_every)
    return step, float(np.mean([runs["SGD", f"KAVG K={kmin}", s].metrics.set_index("step").test_acc[step]
                                for s in seeds]))


def reach_table(runs: Runs, methods: Sequence[str], seeds: Sequence[int], target: float, nproc: int) -> pd.DataFrame:
    """Per seed (rows) and SGD method of `methods` present in `runs` (columns): the global
    reductions per rank to first reach `target` (NaN: never)."""
    return pd.DataFrame({m: [reductions_to(runs["SGD", m, s], target, nproc) for s in seeds]
                         for m in methods if ("SGD", m, seeds[0]) in runs}, index=pd.Index(seeds, name="seed"))


def saved_percent(method: float, baseline: float, schedule: float) -> float:
    """100 (1 − R(method) / R(baseline)): the % of the baseline's global reductions to the target that
    the method saves. A method that never reaches the target (NaN) counts as reaching it one reduction
    after the last of its `schedule`, the fewest it could need."""
    return 100 * (1 - (schedule + 1 if math.isnan(method) else method) / baseline)


def precheck_adam_gap(claims: Claims, runs: Runs, seeds: Sequence[int]) -> None:
    """The premise of `adam_improves_acc`, checked on its baselines before it is decided: a
    generalization gap of Adam, synchronous Adam − synchronous SGD test accuracy with its paired
    interval strictly below 0; a precheck saying so where it is absent."""
    adam, sgd = ([runs[o, "synchronous", s].test_correct() for s in seeds] for o in ("Adam", "SGD"))
    low, high = interval_or_nan(paired_accuracy_interval, adam, sgd)
    if not high < 0:
        claims.precheck("adam_improves_acc", f"no generalization gap here for sparse reductions to bridge: synchronous "
                        f"Adam − synchronous SGD = {100 * (np.mean(adam) - np.mean(sgd)):+.2f} points, interval "
                        f"[{low:.2f}, {high:.2f}], not below 0")


def precheck_reach(claims: Claims, reach: pd.DataFrame, kmin: int) -> None:
    """The premise of each reduction claim, checked on its baseline (KAVG; local reductions with
    mu = 0 for the ablation) before it is decided: the baseline reaches the target on every seed (the
    same accuracy is achieved); a precheck naming the seeds where it does not."""
    for ids, base in ((REDUCTION_CLAIMS[:2], f"KAVG K={kmin}"), (REDUCTION_CLAIMS[2:], method_name(kmin, 0.0))):
        missing = [s for s, v in reach[base].items() if math.isnan(v)] if base in reach else []
        for id in ids if missing else ():
            if not claims.claims[id].precheck:
                claims.precheck(id, f"{base} never reaches the target on seed(s) {missing}: the same accuracy is not achieved")


def decide_reductions(claims: Claims, reach: pd.DataFrame, kmin: int, mu: float, schedule: int, target: float,
                      rule_step: int, rule_acc: float) -> None:
    """Decide the reduction claims from `reach` (`reach_table`): per seed, the % of KAVG's global
    reductions that local + momentum saves (`saved_percent`; `schedule` global reductions in a run),
    its mean's t interval over the seeds; and the same for mu against mu = 0. Shown beside the
    `target`: the target rule's value on this run's seeds, KAVG's mean accuracy `rule_acc` at
    `rule_step` (on the pilot's seeds at T, the target itself)."""
    lm, l0, kavg = method_name(kmin, mu), method_name(kmin, 0.0), f"KAVG K={kmin}"
    pairs = {"local_momentum_fewer_reductions": (lm, kavg), "local_momentum_up_to_62": (lm, kavg),
             "momentum_ablation": (lm, l0)}
    for id, (a, b) in pairs.items():
        ran = a in reach and b in reach           # no local reductions without groups (a prime nproc)
        va, vb = (reach[a], reach[b]) if ran else ([float("nan")] * len(reach),) * 2
        saved = [saved_percent(x, y, schedule) if ran else float("nan") for x, y in zip(va, vb)]
        far = (f" (mean {np.nanmean(saved):.1f}%: {np.nanmean(saved) / PAPER_REDUCTION:.0%} of the paper's "
               f"{PAPER_REDUCTION:.0f}%)" if id == "local_momentum_up_to_62" and np.isfinite(saved).any() else "")
        unit = (f"target {100 * target:.2f}% (KAVG's mean at step {rule_step} on these seeds: {100 * rule_acc:.2f}%); "
                f"global reductions to the target, {a} vs {b}: " + ", ".join(f"{x:.0f} vs {y:.0f}" for x, y in zip(va, vb)) + f"; % saved{far}")
        claims.decide_mean(id, saved, unit, fmt="{:+.1f}")


def sgd_curves(runs: Runs, methods: Sequence[str], nproc: int) -> pd.DataFrame:
    """The evaluated rows of every seed's SGD runs of `methods`, with their method, seed and global
    reductions per rank ("rounds")."""
    return pd.concat([r.metrics.assign(method=method, seed=s, rounds=r.metrics.global_reductions / nproc)
                      for (opt, method, s), r in runs.items() if opt == "SGD" and method in methods],
                     ignore_index=True).dropna(subset=["test_acc"])


def sync_accuracies(runs: Runs, opt: str, seeds: Sequence[int]) -> str:
    """Synchronous `opt`'s final test accuracy per seed and their range, in points (on the pilot's
    seeds, the range is the comparable claims' margin)."""
    acc = [100 * runs[opt, "synchronous", s].summary["final_test_acc"] for s in seeds]
    return f"synchronous (per seed {', '.join(f'{a:.1f}' for a in acc)}%, range {max(acc) - min(acc):.1f} points)"


def reduction_cut(sync: Result, sparse: Result, steps: int, period: int) -> tuple[float, float]:
    """(measured, expected) fraction of synchronous training's global reductions that KAVG with
    period K removes: measured from the two runs, expected 1 − ⌊T/K⌋/T by KAVG's schedule."""
    return (1 - sparse.summary["global_reductions"] / sync.summary["global_reductions"],
            1 - (steps // period) / steps)

"""Notebook 04's experiment (STL-SGD, stagewise local SGD): f*, claims, runs, gaps, invariants.

Shen et al. 2021, abstract: "We prove that STL-SGD can keep the same convergence rate and linear
speedup as mini-batch SGD", with fewer communication rounds than local SGD. Each part is tested in
its own form, on the averaged model of every method (`Config.eval_average`: the model a user
deploys), its gap f(x) - f* on the whole training set:

* the convergence rate: the slope of log gap against log T at the stage ends (T_s = T_0 (2^(s+1) - 1)),
  STL-SGD's minus S-SGD's, per seed (a rate, non-inferiority): at most the slope a log T factor adds
  over the same stage ends, the factor by which the paper's rate O(1/(NT)) differs from the rate it
  calls suboptimal, O(log T / (NT)) (`log_factor_margin`);
* the linear speedup: the slope of log gap at T against log N, STL-SGD's minus S-SGD's, per seed (a
  rate, non-inferiority): at most 1/4, the smallest exponent difference the abstract calls a
  significant improvement (`SPEEDUP_MARGIN`);
* fewer rounds than local SGD: log2(local SGD's rounds / STL-SGD's rounds to the same gap), the gap
  the worse of the two ends at, per seed (superiority over 0, strict), decided only where the
  premise holds: local SGD's fixed period costs it gap against S-SGD (`premise_values`).

Runs are keyed (split, method, seed, N): split "IID" or "non-IID", method "S-SGD", "local SGD k={k}"
or "STL-SGD", N the number of workers."""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..algorithms.stl_sgd import period_for
from ..data import load_data
from ..lr_schedule import stage_end, stagewise_stage
from ..models import build_model
from ..training.results import Result
from ..training.runner import run
from ..verdicts.analysis import first_reaching
from ..verdicts.claims import Claims, Test, interval_or_nan, mean_interval

Runs = dict[tuple[str, str, int, int], Result]
# (split label, partition, STL-SGD's period growth)
SPLITS = [("IID", "iid", "iid"), ("non-IID", "shards", "noniid")]
STL, SSGD = "STL-SGD", "S-SGD"
SPEEDUP_SPLIT = "IID"      # the shards' heterogeneity changes with N: non-IID runs at other N are other problems
SPEEDUP_MARGIN = 0.25
SPEEDUP_SOURCE = ("paper: abstract, \"O(N^{1/2} T^{1/2})\" (STL-SGD, Non-IID) against Local SGD's "
                  "\"O(N^{3/4} T^{3/4})\", \"achieving significant improvements\": the smallest difference of an "
                  "exponent of N the abstract calls significant, 1/4")


def split_key(split: str) -> str:
    """The claim ids' prefix of a split: "iid", "noniid"."""
    return split.lower().replace("-", "")


def stage_ends(steps: int, stage_steps: int) -> list[int]:
    """The steps T_s = stage_steps (2^(s+1) - 1) at which the stagewise schedule's stages end, up to `steps`."""
    ends, s = [], 0
    while stage_end(s, stage_steps) <= steps:
        ends.append(stage_end(s, stage_steps))
        s += 1
    return ends


def loglog_slope(x: Sequence[float], y: Sequence[float]) -> float:
    """The least-squares slope of log y against log x over the points with both finite and
    positive; NaN with fewer than 2."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(x) & np.isfinite(y) & (x > 0) & (y > 0)
    return float(np.polyfit(np.log(x[ok]), np.log(y[ok]), 1)[0]) if ok.sum() >= 2 else float("nan")


def log_factor_margin(ends: Sequence[int]) -> float:
    """The slope a log T factor adds to log gap against log T over the stage ends: the slope of
    log(log T) against log T (0.200 over T = 32 ... 992). The paper's rate is O(1/(NT)); it calls
    O(log T / (NT)) suboptimal (footnote 1 of arXiv 2006.06377v2), so a smaller slope difference is
    no rate the paper tells apart from its own. NaN with fewer than 2 stage ends."""
    return loglog_slope(ends, np.log(np.asarray(ends, float))) if len(ends) >= 2 else float("nan")


def register_claims(claims: Claims, period: int, n_seeds: int, ends: Sequence[int], nprocs: Sequence[int],
                    nproc: int) -> None:
    """Register the abstract's three claims: per split, the same convergence rate as S-SGD and fewer
    rounds than local SGD (k = `period`) for the same gap; on IID data, the same speedup in N
    (`nprocs`) as S-SGD (module docstring)."""
    paired = f"mean over {n_seeds} paired seeds, t interval"
    margin = log_factor_margin(ends)
    for split, _, _ in SPLITS:
        key = split_key(split)
        claims.register(
            f"{key}_rate",
            f"{split}: STL-SGD's gap falls with T as fast as mini-batch SGD's (stage ends T = "
            f"{', '.join(map(str, ends))}, N = {nproc})",
            "\"STL-SGD can keep the same convergence rate ... as mini-batch SGD\" (abstract): O(1/(NT))",
            Test("slope of log gap vs log T: STL-SGD - S-SGD", "<=", margin, paired, form="rate",
                 source=f"paper: footnote 1 calls \"a suboptimal O(log T/(NT)) convergence rate\" against "
                        f"O(1/(NT)): a log T factor adds {margin:.3f} to the slope over these stage ends"))
        claims.register(
            f"{key}_fewer_rounds",
            f"{split}: STL-SGD needs fewer rounds than local SGD (k={period}) to reach the gap the worse of "
            f"the two ends at; decided where local SGD's period costs it gap against S-SGD",
            "\"... with fewer communication rounds than Local SGD\": O(N log T) (IID), O(N^{1/2} T^{1/2}) "
            "(Non-IID) against O(N^{3/2} T^{1/2}), O(N^{3/4} T^{3/4}) (abstract)",
            Test(f"log2(rounds to the same gap: local SGD k={period} / STL-SGD)", ">=", 0.0, paired,
                 form="superiority", source="null: the same rounds for the same gap"))
    claims.register(
        "iid_speedup",
        f"IID: STL-SGD's gap at T falls with the workers N = {', '.join(map(str, nprocs))} as fast as "
        f"mini-batch SGD's",
        "\"STL-SGD can keep the same ... linear speedup as mini-batch SGD\" (abstract): O(1/(NT))",
        Test("slope of log gap at T vs log N: STL-SGD - S-SGD", "<=", SPEEDUP_MARGIN, paired, form="rate",
             source=SPEEDUP_SOURCE))


def optimum(data: str, model: str, wd: float) -> float:
    """f* = min over x of the mean cross-entropy + wd/2·‖x‖² on the whole training set: full-batch
    L-BFGS in float64 (strong Wolfe line search, 5 × 500 iterations)."""
    ds = load_data(data)
    x, y = ds.train_x.double(), ds.train_y
    net = build_model(model, ds.input_shape, ds.num_classes).double()
    opt = torch.optim.LBFGS(net.parameters(), lr=1, max_iter=500, tolerance_grad=1e-12,
                            tolerance_change=1e-15, history_size=50, line_search_fn="strong_wolfe")

    def objective() -> torch.Tensor:
        opt.zero_grad()
        f = F.cross_entropy(net(x), y) + 0.5 * wd * sum(p.pow(2).sum() for p in net.parameters())
        f.backward()
        return f

    for _ in range(5):
        opt.step(objective)
    return objective().item()


def methods(period: int, stl_period: int, growth: str) -> dict[str, tuple[str, dict]]:
    """{method: (algo, params)}: S-SGD, local SGD with the fixed period `period`, STL-SGD from
    period `stl_period` growing as `growth` asks."""
    return {SSGD: ("ssgd", {}), f"local SGD k={period}": ("local_sgd", {"period": period}),
            STL: ("stl_sgd", {"period": stl_period, "growth": growth})}


def run_methods(common: Mapping[str, Any], seeds: Sequence[int], period: int, stl_period: int, nproc: int,
                nprocs: Sequence[int], train: Callable[..., Result] = run) -> Runs:
    """Every seed: on each split the three `methods` with `nproc` workers, and on `SPEEDUP_SPLIT`
    S-SGD and STL-SGD with every other N of `nprocs`; all on `common`'s (stagewise) schedule,
    evaluating the averaged model. `train` runs one (`distsgd.run`)."""
    runs: Runs = {}
    for s in seeds:
        for split, partition, growth in SPLITS:
            for n in sorted({nproc, *(nprocs if split == SPEEDUP_SPLIT else ())}):
                for method, (algo, params) in methods(period, stl_period, growth).items():
                    if n == nproc or method in (SSGD, STL):
                        runs[split, method, s, n] = train(algo=algo, params=params, partition=partition, seed=s,
                                                          nproc=n, eval_average=True, **common)
    return runs


def with_gap(r: Result, f_star: float, nproc: int) -> pd.DataFrame:
    """A run's evaluated rows with its objective gap f(x) − f* (at least 1e-8) and its rounds
    (all-reduces per rank)."""
    m = r.metrics.dropna(subset=["train_objective"])
    return m.assign(gap=(m["train_objective"] - f_star).clip(lower=1e-8), rounds=m["global_reductions"] / nproc)


def gap_curves(runs: Runs, f_star: float) -> pd.DataFrame:
    """Every run's (iteration, rounds, gap) rows (`with_gap`) with its split, method, seed and N."""
    frames = [with_gap(r, f_star, n)[["step", "rounds", "gap"]].rename(columns={"step": "iteration"})
              .assign(split=split, method=method, seed=s, N=n) for (split, method, s, n), r in runs.items()]
    return pd.concat(frames, ignore_index=True)


def _curve(curves: pd.DataFrame, split: str, method: str, seed: int, n: int) -> pd.DataFrame:
    return curves[(curves.split == split) & (curves.method == method) & (curves.seed == seed) & (curves.N == n)]


def gaps_at(d: pd.DataFrame, steps: Sequence[int]) -> list[float]:
    """The gaps of one run's curve at `steps` (NaN where it has no evaluation there)."""
    at = d.set_index("iteration").gap
    return [float(at.get(t, np.nan)) for t in steps]


def rate_slopes(curves: pd.DataFrame, split: str, seeds: Sequence[int], n: int, ends: Sequence[int]) -> pd.DataFrame:
    """Per seed, S-SGD's and STL-SGD's slopes of log gap against log T at the stage ends `ends`."""
    return pd.DataFrame([{"seed": s, **{m: loglog_slope(ends, gaps_at(_curve(curves, split, m, s, n), ends))
                                        for m in (SSGD, STL)}} for s in seeds])


def speedup_slopes(curves: pd.DataFrame, seeds: Sequence[int], nprocs: Sequence[int], steps: int) -> pd.DataFrame:
    """Per seed, S-SGD's and STL-SGD's slopes of log gap at the last step against log N (`nprocs`)."""
    rows = []
    for s in seeds:
        gap = {m: [gaps_at(_curve(curves, SPEEDUP_SPLIT, m, s, n), [steps])[0] for n in nprocs] for m in (SSGD, STL)}
        rows.append({"seed": s, **{m: loglog_slope(nprocs, g) for m, g in gap.items()}})
    return pd.DataFrame(rows)


def premise_values(curves: pd.DataFrame, split: str, seeds: Sequence[int], n: int, local: str, steps: int) -> list[float]:
    """Per seed, log2(local SGD's gap / S-SGD's gap at the last step): what the fixed period costs."""
    return [float(np.log2(gaps_at(_curve(curves, split, local, s, n), [steps])[0]
                          / gaps_at(_curve(curves, split, SSGD, s, n), [steps])[0])) for s in seeds]


def rounds_to_same_gap(curves: pd.DataFrame, split: str, seeds: Sequence[int], n: int, local: str,
                       steps: int) -> pd.DataFrame:
    """Per seed, the gap eps the worse of local SGD and STL-SGD ends at (the last step), and the
    rounds each had used at its first evaluation with a gap <= eps (`analysis.first_reaching`)."""
    rows = []
    for s in seeds:
        d = {m: _curve(curves, split, m, s, n) for m in (local, STL)}
        eps = max(gaps_at(g, [steps])[0] for g in d.values())
        rows.append({"seed": s, "eps": eps, **{m: first_reaching(g, "gap", eps, at="rounds") for m, g in d.items()}})
    return pd.DataFrame(rows)


def decide_claims(claims: Claims, curves: pd.DataFrame, seeds: Sequence[int], nproc: int, nprocs: Sequence[int],
                  steps: int, ends: Sequence[int], local: str) -> None:
    """Decide every registered claim from the gap curves. A fewer-rounds claim is first prechecked:
    where the paired interval of `premise_values` does not lie above 0, local SGD's period costs
    it no gap here, rounds at the same gap only count the two schedules' averages, and the claim is
    inconclusive."""
    for split, _, _ in SPLITS:
        key = split_key(split)
        r = rate_slopes(curves, split, seeds, nproc, ends)
        claims.decide_mean(f"{key}_rate", (r[STL] - r[SSGD]).tolist(),
                           f"slopes S-SGD {r[SSGD].mean():.3f}, STL-SGD {r[STL].mean():.3f} (mean); difference")
        cost = premise_values(curves, split, seeds, nproc, local, steps)
        low, high = interval_or_nan(mean_interval, cost)
        if not low > 0:
            claims.precheck(f"{key}_fewer_rounds",
                            f"premise absent: local SGD's period costs no gap here (log2(local / S-SGD gap at "
                            f"T) = {np.mean(cost):+.3f}, interval [{low:.3g}, {high:.3g}] not above 0), so rounds "
                            f"to the same gap only count the two schedules' averages")
        h = rounds_to_same_gap(curves, split, seeds, nproc, local, steps)
        claims.decide_mean(f"{key}_fewer_rounds", np.log2(h[local] / h[STL]).tolist(),
                           f"rounds local SGD / STL-SGD ({', '.join(f'{a:g} / {b:g}' for a, b in zip(h[local], h[STL]))}"
                           f"); premise log2(local / S-SGD gap) {np.mean(cost):+.3f}; log2 ratio")
    sp = speedup_slopes(curves, seeds, nprocs, steps)
    claims.decide_mean("iid_speedup", (sp[STL] - sp[SSGD]).tolist(),
                       f"slopes in N S-SGD {sp[SSGD].mean():.3f}, STL-SGD {sp[STL].mean():.3f} (mean; linear "
                       f"speedup: -1); difference")


def schedule_rounds(n_steps: int, k0: int, t0: int, growth: str) -> list[int]:
    """Rounds STL-SGD's schedule has done after each step 1..n_steps: stage s = `stagewise_stage`
    (stages of t0·2^s steps) with period `period_for`(k0, 2^s, growth), plus the average that starts
    each stage after a partial period."""
    out, rounds, since, stage = [], 0, 0, 0
    for step in range(n_steps):
        s = stagewise_stage(step, t0)
        if s != stage and since:
            rounds, since = rounds + 1, 0
        stage, since = s, since + 1
        if since >= period_for(k0, 2 ** s, growth):
            rounds, since = rounds + 1, 0
        out.append(rounds)
    return out


def rates_invariant(runs: Runs, split: str, seeds: Sequence[int], n: int, lr: float, steps: int,
                    stage_steps: int) -> tuple[str, str, bool]:
    """(expected, measured, holds) of "the methods with `n` workers logged the same learning rate
    at every logged step, every seed": the stagewise rates from `lr` to its last stage's; measured
    on the first seed that differs, else the last."""
    for s in seeds:
        rates = {m: r.metrics.set_index("step").lr for (sp, m, seed, k), r in runs.items()
                 if (sp, seed, k) == (split, s, n)}
        same = all(r.equals(rates[SSGD]) for r in rates.values())
        if not same:
            break
    return (f"lr/2^s, {lr:g} to {lr / 2 ** stagewise_stage(steps - 1, stage_steps):g}",
            f"{rates[SSGD].iloc[0]:g} to {rates[SSGD].iloc[-1]:g}" + ("" if same else ", differ"), same)


def _logged_rounds(r: Result) -> pd.DataFrame:
    """A run's logged rows after step 0 that carry a global reduction count."""
    m = r.metrics.dropna(subset=["global_reductions"])
    return m[m.step > 0]


def stl_rounds_invariant(r: Result, growth: str, steps: int, stl_period: int, stage_steps: int,
                         nproc: int) -> tuple[str, str, bool]:
    """(expected, measured, holds) of "STL-SGD's rounds (all-reduces per rank) equal its schedule's
    count (`schedule_rounds`) at every logged step"."""
    expected = schedule_rounds(steps, stl_period, stage_steps, growth)
    m = _logged_rounds(r)
    got = (m.global_reductions / nproc).to_numpy()
    want = np.array([expected[int(t) - 1] for t in m.step])
    return (f"{want[-1] if len(want) else 0} rounds after {steps} steps (schedule)",
            f"{got[-1] if len(got) else 0:g} rounds", bool(len(got)) and np.array_equal(got, want))


def local_rounds_invariant(r: Result, steps: int, period: int, nproc: int) -> tuple[str, str, bool]:
    """(expected, measured, holds) of "fixed-period local SGD's rounds are ⌊T/k⌋ at every logged step"."""
    m = _logged_rounds(r)
    return (f"{steps // period} rounds after {steps} steps",
            f"{m.global_reductions.iloc[-1] / nproc:g} rounds" if len(m) else "no rows",
            bool(len(m)) and bool(((m.global_reductions / nproc) == m.step // period).all()))


def one_worker_invariant(curves: pd.DataFrame, seeds: Sequence[int]) -> tuple[str, str, bool]:
    """(expected, measured, holds) of "with one worker STL-SGD is S-SGD: the same gap at every
    evaluation, every seed" (an average of one model changes nothing)."""
    d = curves[(curves.split == SPEEDUP_SPLIT) & (curves.N == 1) & curves.seed.isin(seeds)]
    a, b = (d[d.method == m].set_index(["seed", "iteration"]).gap.sort_index() for m in (SSGD, STL))
    same = len(a) > 0 and a.index.equals(b.index) and bool((a == b).all())
    return "equal gaps at every evaluation", f"{len(a)} evaluations, " + ("equal" if same else "differ"), same

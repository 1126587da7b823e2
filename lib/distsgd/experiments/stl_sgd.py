"""Notebook 04's experiment (STL-SGD, stagewise local SGD): f*, claims, runs, gaps, invariants.

Shen et al. 2021: the registration, the optimum f*, the runs, sub-optimality curves, rounds to reach
a target, the schedule's round count, the invariants and the per-seed values the verdicts are
decided on.

Runs are keyed (split, method, seed): split "IID" or "non-IID", method "S-SGD", "local SGD k={k}"
or "STL-SGD"."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F

from ..algorithms.stl_sgd import period_for
from ..verdicts.analysis import first_reaching
from ..verdicts.claims import Claims, Test
from ..data import load_data
from ..models import build_model
from ..training.results import Result
from ..training.runner import run
from ..lr_schedule import stagewise_stage

Runs = dict[tuple[str, str, int], Result]
# (split label, partition, STL-SGD's period growth)
SPLITS = [("IID", "iid", "iid"), ("non-IID", "shards", "noniid")]


def split_key(split: str) -> str:
    """The claim ids' prefix of a split: "iid", "noniid"."""
    return split.lower().replace("-", "")


def register_claims(claims: Claims, period: int, n_seeds: int) -> None:
    """Register, for each split, the abstract's two claims with their tests: within STL-SGD's round
    budget STL-SGD gets closer to f* than local SGD (k = `period`) and S-SGD (log10 gap ratio ≥ 0),
    and its settled gap is at most 1.5× S-SGD's on the same stagewise schedule."""
    for split in ["IID", "non-IID"]:
        key = split_key(split)
        claims.register(f"{key}_fewer_rounds",
                        f"{split}: within STL-SGD's round budget, STL-SGD gets closer to f* than local SGD (k={period}) and S-SGD",
                        "fewer communication rounds for the same accuracy (abstract)",
                        Test("log10(best baseline gap / STL-SGD gap) within STL-SGD's rounds", ">=", 0.0,
                             f"mean over {n_seeds} paired seeds, t interval"))
        claims.register(f"{key}_per_iteration",
                        f"{split}: STL-SGD converges per iteration as well as mini-batch SGD on the same stagewise schedule",
                        "same convergence rate as mini-batch SGD (abstract)",
                        Test("log2(STL-SGD settled gap / S-SGD settled gap)", "<=", float(np.log2(1.5)),
                             f"mean over {n_seeds} paired seeds, t interval"))


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


def run_methods(common: Mapping[str, Any], seeds: Sequence[int], period: int, stl_period: int) -> Runs:
    """Every seed and split: S-SGD, local SGD with the fixed period `period`, and STL-SGD from
    period `stl_period` growing as the split asks, all on `common`'s (stagewise) schedule."""
    runs: Runs = {}
    for s in seeds:
        for split, partition, growth in SPLITS:
            runs[split, "S-SGD", s] = run(algo="ssgd", partition=partition, seed=s, **common)
            runs[split, f"local SGD k={period}", s] = run(algo="local_sgd", params={"period": period},
                                                         partition=partition, seed=s, **common)
            runs[split, "STL-SGD", s] = run(algo="stl_sgd", params={"period": stl_period, "growth": growth},
                                            partition=partition, seed=s, **common)
    return runs


def with_gap(r: Result, f_star: float, nproc: int) -> pd.DataFrame:
    """A run's evaluated rows with its objective gap f(x) − f* (at least 1e-8) and its rounds
    (all-reduces per rank)."""
    m = r.metrics.dropna(subset=["train_objective"])
    return m.assign(gap=(m["train_objective"] - f_star).clip(lower=1e-8), rounds=m["global_reductions"] / nproc)


def gap_curves(runs: Runs, f_star: float, nproc: int) -> pd.DataFrame:
    """Every run's (iteration, rounds, gap) rows (`with_gap`) with its split, method and seed."""
    frames = [with_gap(r, f_star, nproc)[["step", "rounds", "gap"]].rename(columns={"step": "iteration"})
              .assign(split=split, method=method, seed=s) for (split, method, s), r in runs.items()]
    return pd.concat(frames, ignore_index=True)


def settled_gap(d: pd.DataFrame) -> float:
    """Mean gap over the last quarter of the iterations: where a method has settled, less noisy than one point."""
    return d[d.iteration > 0.75 * d.iteration.max()].gap.mean()


def rounds_to_targets(runs: Runs, curves: pd.DataFrame, f_star: float, nproc: int, seed: int,
                      methods: Sequence[str], n_targets: int = 12) -> pd.DataFrame:
    """For `n_targets` targets ε, log-spaced from STL-SGD's first evaluated gap down to its settled
    gap (seed `seed`, each split), the first iteration T at which each of `methods` reached a gap
    ≤ ε and the rounds R it had used by then (`analysis.first_reaching`); targets a method never
    reached are left out."""
    rows = []
    for split, _, _ in SPLITS:
        d_stl = curves[(curves.split == split) & (curves.method == "STL-SGD") & (curves.seed == seed)]
        if d_stl.empty:
            continue
        for eps in np.geomspace(d_stl.gap.iloc[0], settled_gap(d_stl), n_targets):
            for method in methods:
                m = with_gap(runs[split, method, seed], f_star, nproc)
                rows.append({"split": split, "method": method, "eps": eps,
                             "T": first_reaching(m, "gap", eps, at="step"),
                             "R": first_reaching(m, "gap", eps, at="rounds")})
    return pd.DataFrame(rows, columns=["split", "method", "eps", "T", "R"]).dropna()


def slope(d: pd.DataFrame) -> float:
    """The least-squares slope of log R against log T (the rounds' growth exponent: 1 for a fixed
    period) over the distinct positive T; NaN with fewer than 3 points."""
    d = d[(d["T"] > 0) & (d["R"] > 0)].drop_duplicates("T")
    return float(np.polyfit(np.log(d["T"]), np.log(d["R"]), 1)[0]) if len(d) >= 3 else float("nan")


def slopes(hits: pd.DataFrame) -> pd.Series:
    """`slope` of every (split, method) of `rounds_to_targets`' table."""
    return pd.Series({key: slope(d) for key, d in hits.groupby(["split", "method"])},
                     name="slope of log R vs log T", dtype=float)


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


def rates_invariant(runs: Runs, split: str, seeds: Sequence[int], methods: Sequence[str], lr: float, steps: int,
                    stage_steps: int) -> tuple[str, str, bool]:
    """(expected, measured, holds) of "the methods logged the same learning rate at every logged
    step, every seed": the stagewise rates from `lr` to its last stage's; measured on the first seed
    that differs, else the last."""
    for s in seeds:
        rates = {method: runs[split, method, s].metrics.set_index("step").lr for method in methods}
        same = all(r.equals(rates["S-SGD"]) for r in rates.values())
        if not same:
            break
    return (f"lr/2^s, {lr:g} to {lr / 2 ** stagewise_stage(steps - 1, stage_steps):g}",
            f"{rates['S-SGD'].iloc[0]:g} to {rates['S-SGD'].iloc[-1]:g}" + ("" if same else ", differ"), same)


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


def claim_values(curves: pd.DataFrame, split: str, seeds: Sequence[int], local: str) -> tuple[list[float], list[float]]:
    """Per seed, the two claims' quantities on `split`: log10(best baseline gap / STL-SGD's gap),
    each method's best gap within STL-SGD's whole round budget, the better baseline of local SGD
    (label `local`) and S-SGD; and log2(STL-SGD's settled gap / S-SGD's)."""
    fewer, per_iter = [], []
    for s in seeds:
        d = curves[(curves.split == split) & (curves.seed == s)]
        budget = d[d.method == "STL-SGD"].rounds.max()          # STL-SGD's whole communication budget
        best = {m: g[g.rounds <= budget].gap.min() for m, g in d.groupby("method")}
        fewer.append(np.log10(min(best[local], best["S-SGD"]) / best["STL-SGD"]))
        per_iter.append(np.log2(settled_gap(d[d.method == "STL-SGD"]) / settled_gap(d[d.method == "S-SGD"])))
    return fewer, per_iter

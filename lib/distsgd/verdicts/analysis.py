"""Analysis the notebooks share: time to a target, gradient diversity, log ratios, timing benchmarks.

When a run first reaches a target, the gradient diversity ζ² of a data split, the log ratio of two
values: plain functions of a run's metrics, of a model and its data, or of numbers. For the timing
benchmarks (06, 07, 10): the machine checks before them, a claim decided on per-round ratios, and
the simulator's prediction of their measured steps. Tested in tests/test_analysis.py."""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from ..systems import benchmark as bs
from ..training.caps import Caps
from .claims import Claims, median_interval
from ..comm.nccl_tests import fit_collective_times
from ..data.base import TensorSource
from ..systems.timeline import validate as tv



def first_reaching(metrics: pd.DataFrame, column: str, target: float, at: str,
                   below: bool = True) -> float:
    """The value of column `at` (e.g. "wall_s", "step", "global_reductions") in the first logged
    row where `column` reaches `target`: at or below it when `below` (a loss), at or above it
    otherwise (an accuracy). NaN when the run never reaches it (rows without `column` skipped)."""
    m = metrics.dropna(subset=[column])
    hit = m[m[column] <= target] if below else m[m[column] >= target]
    return float(hit[at].iloc[0]) if len(hit) else float("nan")


def gradient_diversity(model: nn.Module, source: TensorSource, parts: Sequence[Tensor]) -> float:
    """ζ² = (1/N) Σ_i ‖∇f_i(θ) − ∇f(θ)‖² at the model's current parameters θ, where rank i holds
    the training samples `parts[i]`, f_i is the mean cross-entropy over them and ∇f the mean of
    the N local gradients (VRL-SGD's measure of non-identical data, Liang et al. 2019, Assumption 3)."""
    grads = []
    for idx in parts:
        model.zero_grad()
        x, y = source.batch(idx)
        torch.nn.functional.cross_entropy(model(x), y).backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    g = torch.stack(grads)
    return float(((g - g.mean(0)) ** 2).sum(1).mean())


def per_round(values: Iterable[float]) -> str:
    """Per-round values as a claim's measured text writes them: "[0.93, 1.02]"."""
    return "[" + ", ".join(f"{v:.2f}" for v in values) + "]"


def decide_median_ratio(claims: Claims, id: str, ratios: pd.Series, before: str = "", after: str = "") -> str:
    """Decide a timing claim on its per-round ratios (NaN rounds dropped): the median and its 95%
    distribution-free interval (`claims.median_interval`); NaN, so inconclusive, where no round is
    left. The measured text is `before` + "<n> rounds, per round [...]" + `after`. Returns the verdict."""
    r = ratios.dropna()
    low, high = median_interval(r) if len(r) else (float("nan"), float("nan"))
    est = float(r.median()) if len(r) else float("nan")
    return claims.decide(id, low, high, est, f"{before}{len(r)} rounds, per round {per_round(r)}{after}")


def machine_precheck(models: Sequence[str], nprocs: Sequence[int], out: Path, backend: str, dry_run: bool,
                     **bench: Any) -> tuple[pd.DataFrame, float, pd.DataFrame]:
    """The machine checks measured before a timing benchmark: its compute-only steps (2 interleaved
    rounds; `bench_schedules`' other options in `bench`; the rows written to `out`), their
    coefficient of variation (`timing_noise`) and the emulation headroom of its emulated networks
    on its own backend (`emulation_headroom`, 2 repetitions in a dry run, else 5).
    Returns (rows, noise, headroom)."""
    pre = bs.bench_schedules(models=list(models), cases=[{"algo": "compute", "label": "compute"}],
                             nprocs=list(nprocs), repeats=2, out=out, backend=backend, **bench)
    noise = bs.timing_noise(pre)
    return pre, noise, bs.emulation_headroom(pre, reps=2 if dry_run else 5, backend=backend)


def simulator_predictions(bench: pd.DataFrame, models: Sequence[str], cases: Sequence[dict[str, Any]],
                          nprocs: Sequence[int], backend: str, warmup: int, steps: int, fit_sizes: Sequence[int],
                          reps: int, out: Path) -> pd.DataFrame:
    """The timeline simulator's prediction of every measured step of a benchmark (`validate.predict`
    over its timed window, `warmup` and `steps`): layer profiles of `models` on the benchmark's
    device (cuda under NCCL, else cpu) at its batch size; where it ran the real network (`bs.REAL`),
    each p's real all-reduce fitted to a network (`fit_collective_times` on `real_collective_times`
    of `fit_sizes`, `reps` each, written to out/real_collectives_p<p>.csv)."""
    device = "cuda" if backend == "nccl" else "cpu"
    profiles = {m: tv.layer_profile(m, int(bench.batch_size.iloc[0]), bs.input_shape(m, Caps.from_env()), device=device)
                for m in models}
    fitted = {}                                   # (p, "real") -> the network the backend's all-reduce behaves like
    if bs.REAL in set(bench.net_name):
        for p in nprocs:
            times = bs.real_collective_times(int(p), list(fit_sizes), reps=reps, backend=backend)
            times.to_csv(out / f"real_collectives_p{p}.csv", index=False)
            fitted[int(p), bs.REAL] = fit = fit_collective_times(times)
            print(f"p = {p}: {backend}'s all-reduce behaves like {fit.bandwidth_Bps / 1e9:.1f} GB/s per link, "
                  f"{1e6 * fit.latency_s:.1f} us per message")
    return tv.predict(bench, profiles, cases, networks=fitted, warmup=warmup, steps=steps)


def log2_ratio(a: float, b: float, offset: float = 0.0) -> float:
    """log2((a + offset) / (b + offset)): a against b on a log scale (0 when equal, +1 when a is twice
    b), the per-seed quantity of ratio claims. `offset` 1 counts a zero (a target reached before any
    global reduction); NaN when either is NaN."""
    return float(np.log2((a + offset) / (b + offset)))

"""The measurements around a timing benchmark (notebooks 06, 07, 10): the machine checks measured
before it (its compute-only steps, their noise, the emulation headroom) and the simulator's
prediction of every step it measured, with the real network fitted where it ran one. The
verdicts decide on what these return (`verdicts.analysis`); they measure nothing themselves."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from . import benchmark as bs
from ..comm.nccl_tests import fit_collective_times
from ..training.caps import Caps
from .timeline import validate as tv


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

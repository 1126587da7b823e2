"""Every notebook runs with another world size and another seed: per-rank lists and group counts
follow from `nproc` (or the notebook says at once which values it allows). Dry-run length (2 steps
per run) on the quick profile, uncapped world (DISTSGD_MAX_NPROC=0), two notebooks at a time,
one kernel per slot (`--share-kernels`, reset between notebooks).
Part of `make test` (CI); `make test-params` runs just these.

- nproc 3, seed 7: all 11 notebooks; the benchmarks' worker counts (`nprocs` of 07 and 10,
  `bench_nprocs` of 06) at [3].
- nproc 8, seed 11: all 11 notebooks; 07 and 10 benchmark on 8 ranks, 06 on 3 (its benchmark
  times DeAR's pipeline at every worker count in the list, the heaviest case per rank).
"""
from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUN_PY = REPO / "reproduce" / "run.py"
NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
VARIANTS = [
    pytest.param(["nproc=3", "nprocs=[3]", "bench_nprocs=[3]", "seed=7"], id="nproc3-seed7"),
    pytest.param(["nproc=8", "nprocs=[8]", "bench_nprocs=[3]", "seed=11"], id="nproc8-seed11"),
]


@pytest.mark.parametrize("sets", VARIANTS)
def test_notebooks_run_at_another_world_size_and_seed(tmp_path, sets: list[str]) -> None:
    assert len(NOTEBOOKS) == 11
    out = tmp_path / "dry"
    env = {**os.environ, "DISTSGD_MAX_NPROC": "0"}
    proc = subprocess.run([sys.executable, str(RUN_PY), "--profile", "quick", "--dry-run", "--jobs", "2",
                           "--share-kernels",
                           "--out", str(out),
                           *(a for s in sets for a in ("--set", s))],
                          capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    with open(out / "summary.csv", newline="") as f:
        rows = {r["notebook"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == NOTEBOOKS
    assert all(r["status"] == "ok" for r in rows.values()), rows

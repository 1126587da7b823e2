"""Every notebook runs with another world size and another seed: per-rank lists and group counts
follow from `nproc` (or the notebook says at once which values it allows). Dry-run length (2 steps
per run, at most 2 seeds and repeats) on the quick profile, uncapped world (DISTSGD_MAX_NPROC=0), two
notebooks at a time, one kernel per slot (`--share-kernels`, reset between notebooks).
Part of `make test` (CI); `make test-params` runs just these.

nproc 6, seed 7: all 11 notebooks at a world size that is no power of two, has proper divisors (09's
local groups) and exceeds the cores; the benchmarks' worker counts (`nprocs` of 07 and 10,
`bench_nprocs` of 06) at [3], which is no power of two and exceeds the cores too at half the ranks
(a benchmark times every case on every network at each worker count). The full profile's dry run (tests/test_dry_run.py) checks the
paper-scale world sizes against the allocations they are planned for.
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
SETS = ["nproc=6", "nprocs=[3]", "bench_nprocs=[3]", "seed=7"]


@pytest.mark.shared_projections
def test_notebooks_run_at_another_world_size_and_seed(tmp_path) -> None:
    assert len(NOTEBOOKS) == 11
    out = tmp_path / "dry"
    env = {**os.environ, "DISTSGD_MAX_NPROC": "0"}
    proc = subprocess.run([sys.executable, str(RUN_PY), "--profile", "quick", "--dry-run", "--jobs", "2",
                           "--share-kernels",
                           "--out", str(out),
                           *(a for s in SETS for a in ("--set", s))],
                          capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    with open(out / "summary.csv", newline="") as f:
        rows = {r["notebook"]: r for r in csv.DictReader(f)}
    assert sorted(rows) == NOTEBOOKS
    assert all(r["status"] == "ok" for r in rows.values()), rows

"""The full-profile dry run: every notebook with its paper-scale parameters, 2 steps per run, on
stand-in data in the real formats (`reproduce/run.py --profile full --dry-run`).

A typo in reproduce/profiles/full.yaml or a full-profile config the library rejects fails here.
This is the slowest test of the suite: ResNet-18 runs, each capped at 2 worker processes, a per-rank
batch of 2 and 4 evaluation samples, and the benchmarks' BERT-Base and ResNet-50 at sequence length 8
and 16x16 images, one block per run of blocks, no untimed warm-up step (see reproduce/run.py).
"""
from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
RUN_PY = REPO / "reproduce" / "run.py"


def test_full_profile_lists_without_errors_and_substitutes_backend() -> None:
    proc = subprocess.run([sys.executable, str(RUN_PY), "--profile", "full", "--dry-run", "--list"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ERROR" not in proc.stdout
    assert re.search(r"dry_run +=  *True", proc.stdout)
    import torch

    if "backend: nccl" in (REPO / "reproduce/profiles/full.yaml").read_text():
        assert ("nccl -> gloo" in proc.stdout) != torch.cuda.is_available()


NOTEBOOKS = sorted(p.stem for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))


# The dry run in two halves of about equal minutes (on 2 cores: 07 5.4, 06 4.0, 01 3.1, 10 2.8,
# 02 1.8, 00 1.3, 03 1.3, 09 1.0, 08 0.6, 05 0.5, 04 0.3), so that make test (tests/run_suites.py)
# can run each beside another suite; together they are every notebook.
HALVES = {"a": ("07", "01", "02", "05", "04"), "b": ("06", "10", "00", "03", "09", "08")}


def test_the_halves_are_every_notebook_once() -> None:
    assert sorted(nb[:2] for half in HALVES.values() for nb in half) == sorted(nb[:2] for nb in NOTEBOOKS)


@pytest.mark.shared_projections
@pytest.mark.parametrize("half", sorted(HALVES))
def test_full_profile_dry_run_executes(tmp_path, half: str) -> None:
    out = tmp_path / "dry"
    notebooks = sorted(nb for nb in NOTEBOOKS if nb[:2] in HALVES[half])
    # two notebooks at a time: their 2-step runs wait on process start-up and I/O as much as on
    # the CPU (on 2 cores, 00/04/05/06 took 2.0 min instead of 3.0); nothing here is timed. One
    # kernel per slot (--share-kernels): a kernel's start is ~15 s of CPU, a dry-run notebook ~30 s
    proc = subprocess.run([sys.executable, str(RUN_PY), "--profile", "full", "--dry-run", "--only", *HALVES[half],
                           "--jobs", "2", "--share-kernels", "--out", str(out),
                           "--figures-dir", str(out / "figures")],
                          capture_output=True, text=True, timeout=2400)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    with open(out / "summary.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(NOTEBOOKS) == 11 and sorted(r["notebook"] for r in rows) == notebooks
    assert all(r["status"] == "ok" for r in rows), rows
    # every claim of the full profile has its row in reproduce/expected/full.csv, and every row its claim
    import pandas as pd

    from distsgd.verdicts.claims import NOT_IN_LEDGER, NOT_IN_RUN, ledger_differences, load_ledger

    unmatched = [f"{nb} {d.id}: {'no row in expected/full.csv' if d.ledger == NOT_IN_LEDGER else 'no such claim'}"
                 for nb in notebooks for d in ledger_differences(nb, pd.read_csv(out / "figures" / nb / "claims.csv"),
                                                                 load_ledger("full"))
                 if d.ledger == NOT_IN_LEDGER or d.run == NOT_IN_RUN]
    assert not unmatched, "\n".join(unmatched)
    data = out / "data"                               # the stand-ins, in the release layouts
    assert (data / "mnist/MNIST/raw/train-images-idx3-ubyte.gz").is_file()
    assert (data / "mnist/MNIST/raw/t10k-images-idx3-ubyte").is_file()
    assert (data / "cifar10/cifar-10-batches-py/data_batch_5").is_file()
    assert (data / "cifar100/cifar-100-python/train").is_file()
    assert list((data / "imagenet/train").glob("*/*.JPEG"))


def _listed(notebook: str) -> dict[str, str]:
    """The full profile's parameters of `notebook` as `run.py --list` prints them (name -> value)."""
    proc = subprocess.run([sys.executable, str(RUN_PY), "--profile", "full", "--list", "--only", notebook],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = (re.match(r"\s+(\w+)\s+= (.*?)\s+\[", line) for line in proc.stdout.splitlines())
    return {m[1]: m[2] for m in rows if m}


def test_full_profile_runs_the_systems_notebooks_on_gpus_with_the_papers_models() -> None:
    """Issue 17: 06, 07 and 10 measure on GPUs (NCCL, p = 8 on a node) with ResNet-50 / BERT-Base,
    on networks that include "real" (no emulation; 10 adds it itself on NCCL)."""
    gpu = {"06": ("bench_model", "'bert_base'", "bench_nprocs", "bench_nets"),
           "07": ("models", "['resnet50', 'bert_base']", "nprocs", "networks"),
           "10": ("models", "['resnet50', 'bert_base']", "nprocs", None)}
    for notebook, (model_key, models, nprocs_key, nets_key) in gpu.items():
        listed = _listed(notebook)
        assert listed.get("backend") == "'nccl'", (notebook, listed)
        assert listed[model_key] == models and listed[nprocs_key] == "[8]", (notebook, listed)
        assert nets_key is None or "'real'" in listed[nets_key], (notebook, listed)


def test_full_profile_is_checked_against_the_allocation_it_is_planned_for() -> None:
    """Rank counts relative to the allocation take the first allocation's numbers (09's 'gpus': 16
    on 2 x 8), and a notebook on NCCL whose ranks exceed any allocation's GPUs is refused before it
    executes, naming both numbers (00's 8 ranks on one node of 4)."""
    proc = subprocess.run([sys.executable, str(RUN_PY), "--profile", "full", "--list", "--only", "00", "09",
                           "--allocation", "2x8", "--allocation", "1x4"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    errors = [line for line in proc.stdout.splitlines() if "ERROR" in line]
    assert len(errors) == 1 and "nproc=8 (from profile full: notebooks.00_baselines) asks for 8 GPUs" in errors[0] \
        and "1 node x 4 GPUs (shape 1x4) has 4" in errors[0], proc.stdout
    assert re.search(r"nproc += 16 +\[profile full: notebooks.09_global_reductions; 'gpus' of 2 nodes x 8 GPUs",
                     proc.stdout), proc.stdout

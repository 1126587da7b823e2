"""The SLURM templates as scripts, with stub `python`, `srun` and `scontrol` (no SLURM needed): what
they ask SLURM for, which notebook an array task of papermill.sbatch runs, and where train.sbatch
takes its GPUs, cores and per-rank logs from. tests/test_cluster_slurm.py submits both to a real SLURM;
tests/test_survive.py checks train.sbatch's requeue."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SLURM = REPO / "reproduce" / "slurm"


def directives(script: str) -> list[str]:
    return [line.split(None, 1)[1] for line in (SLURM / script).read_text().splitlines()
            if line.startswith("#SBATCH ")]


def stub_env(tmp_path: Path, **variables: str) -> dict[str, str]:
    """A PATH whose python, srun and scontrol record their arguments in calls.log (scontrol `show
    hostnames` prints node0), an empty venv to activate, the submit directory the repository."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir(parents=True)
    for stub in ("python", "srun", "scontrol"):
        (bin_dir / stub).write_text(f'#!/usr/bin/env bash\necho "{stub} $*" >> {log}\n'
                                    '[[ "$1" == show ]] && echo node0\nexit 0\n')
        (bin_dir / stub).chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k not in ("ONLY", "PROFILE")}
    return {**env, "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}", "VENV": str(venv),
            "SLURM_SUBMIT_DIR": str(REPO), **variables}


def run(script: str, env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    proc = subprocess.run(["bash", str(SLURM / script), *args], env=env, capture_output=True, text=True, timeout=30)
    log = Path(env["PATH"].split(os.pathsep)[0]).parent / "calls.log"
    return proc, log.read_text().splitlines() if log.exists() else []


def test_papermill_template_is_an_array_job_with_cores_memory_and_requeue():
    asked = directives("papermill.sbatch")
    for directive in ("--array=0-10", "--requeue", "--open-mode=append", "--output=slurm-%x-%A_%a.out"):
        assert directive in asked, asked
    assert any(d.startswith("--cpus-per-task=") for d in asked) and any(d.startswith("--mem=") for d in asked)
    hours = int(next(d for d in asked if d.startswith("--time=")).split("=")[1].split(":")[0])
    assert hours <= 24, "a time limit for one notebook, not for all of them"


@pytest.mark.parametrize("variables,expected", [
    ({"SLURM_ARRAY_TASK_ID": "5"}, "--profile full --only 05 --dry-run"),
    ({"SLURM_ARRAY_TASK_ID": "10", "ONLY": "00,10_systems_benchmark", "PROFILE": "quick"},
     "--profile quick --only 10 --dry-run"),
    ({"ONLY": "00 10"}, "--profile full --only 00 10 --dry-run"),
    ({}, "--profile full --dry-run"),
])
def test_papermill_array_task_runs_the_notebook_of_its_number(tmp_path, variables, expected):
    proc, calls = run("papermill.sbatch", stub_env(tmp_path, **variables), "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert calls == [f"python reproduce/run.py {expected}"], calls


def test_papermill_array_task_outside_only_or_without_a_notebook(tmp_path):
    proc, calls = run("papermill.sbatch", stub_env(tmp_path, SLURM_ARRAY_TASK_ID="3", ONLY="00 10"))
    assert proc.returncode == 0 and "03_dropit is not among ONLY=00 10" in proc.stdout and calls == []
    proc, calls = run("papermill.sbatch", stub_env(tmp_path / "b", SLURM_ARRAY_TASK_ID="42"))
    assert proc.returncode == 2 and "no notebook numbered 42" in proc.stderr and "00_baselines.ipynb" in proc.stderr
    assert calls == []


JOB = {"SLURM_JOB_ID": "77", "SLURM_JOB_NAME": "distsgd-train", "SLURM_JOB_NODELIST": "node0", "SLURM_NNODES": "1"}


def test_train_template_takes_the_gpus_of_the_allocation(tmp_path):
    assert not any(d.startswith("--gpus-per-node") for d in directives("train.sbatch"))
    env = stub_env(tmp_path, **JOB, SLURM_GPUS_ON_NODE="4", SLURM_CPUS_PER_TASK="16")
    proc, calls = run("train.sbatch", env, "--algo", "ssgd")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    srun = next(c for c in calls if c.startswith("srun "))
    assert srun.startswith("srun --ntasks-per-node=1 -c 16 torchrun") and "--nproc-per-node 4" in srun
    assert "--log-dir slurm-distsgd-train-77.ranks --tee 3 --log-line-prefix-template [rank${rank}]: " in srun
    env = stub_env(tmp_path / "b", **JOB, SLURM_GPUS_PER_NODE="a100:8", SLURM_GPUS_ON_NODE="8")
    proc, calls = run("train.sbatch", env, "--algo", "ssgd")
    srun = next(c for c in calls if c.startswith("srun "))
    assert srun.startswith("srun --ntasks-per-node=1 torchrun") and "--nproc-per-node 8" in srun
    proc, calls = run("train.sbatch", stub_env(tmp_path / "c", **JOB), "--algo", "ssgd")
    assert proc.returncode == 2 and "the allocation has no GPUs" in proc.stderr
    assert not any(c.startswith("srun ") for c in calls)

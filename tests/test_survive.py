"""Long runs that survive (issue #18, beside test_checkpoint.py and test_divergence.py):

- metrics as they come: each rank appends its rows to RUN_DIR/ranks/metrics_rank<r>.csv as it
  logs them, so a killed run keeps them and `python -m distsgd show` reads a failed run and one
  still running; a resumed run's rank files (and merged metrics) are an uninterrupted run's,
  without the rows its crashed attempt logged after the checkpoint;
- `reproduce/torchrun.sh` with MAX_RESTARTS: torchrun restarts the ranks after one is killed and
  the run resumes from its checkpoint, ending bitwise as an uninterrupted run;
- `reproduce/slurm/train.sbatch`: --requeue and --signal=B:USR1@..., and a trap that forwards
  the signal to the job step and requeues the job (with stub srun and scontrol);
- the chaos test: a seeded series of runs, each with a random rank killed at a random step,
  fails fast naming the rank and, run again, resumes to the parameters of an uninterrupted run.
"""
from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch

import distsgd
from distsgd import WorkerError
from distsgd.training.liveness import run_state
from distsgd.training.metrics_log import read_metrics
from distsgd.training.worker import FAULT_ENV
from test_algorithm_state import CASES, PLAIN_SGD, SCHEDULE

REPO = Path(__file__).resolve().parent.parent
RUN = dict(model="mlp", data="digits", nproc=2, steps=12, batch_size=16, lr=0.05,
           weight_decay=1e-3, log_every=3, eval_every=6, progress=False)
CLOCK = ["wall_s", "comm_wait_s"]          # wall-clock columns: differ between any two runs
PYTHON_ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(
    [str(REPO / "lib"), *filter(None, [os.environ.get("PYTHONPATH")])])}


def _show(run_dir: Path) -> str:
    out = subprocess.run([sys.executable, "-m", "distsgd", "show", str(run_dir)], env=PYTHON_ENV,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def _same_params(want: dict, got: dict) -> None:
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), f"{key} differs"


def _rank_rows(run_dir: Path, rank: int) -> pd.DataFrame:
    return read_metrics(run_dir / "ranks" / f"metrics_rank{rank}.csv").drop(columns=CLOCK)


@pytest.mark.multiproc
def test_rows_are_on_disk_as_logged_and_a_resumed_run_rewrites_them(tmp_path, monkeypatch, capfd):
    """Rank 1 is killed at step 10: the rows of steps 3, 6 and 9 are on both ranks' disks, `show`
    says the run failed, naming the rank, and where it resumes (step 8). Resumed, it says so in
    the caller's output, and each rank's file holds an uninterrupted run's rows: row 9 of the
    killed attempt is not there twice."""
    fields = dict(RUN, algo="local_sgd", params=CASES["local_sgd"], momentum=0.9)
    straight = distsgd.run(out=str(tmp_path / "straight"), **fields)
    resumable = dict(fields, out=str(tmp_path / "resumed"), checkpoint_every=4)
    monkeypatch.setenv(FAULT_ENV, "1:10:kill")
    with pytest.raises(WorkerError, match="worker rank 1 failed"):
        distsgd.run(**resumable)
    run_dir = tmp_path / "resumed" / straight.path.name
    for rank in (0, 1):
        assert _rank_rows(run_dir, rank)["step"].tolist() == [3, 6, 9], f"rank {rank}"
    state = run_state(run_dir)
    assert (state.status, state.last_steps, state.checkpoint) == ("failed", {0: 9, 1: 9}, 8)
    shown = _show(run_dir)
    assert re.search(r"status +failed: worker rank 1 failed: process killed by signal 9", shown), shown
    assert re.search(r"logged +step 9 of 12", shown) and re.search(r"checkpoint +step 8", shown), shown
    assert re.search(r"^ +9 +\d", shown, re.M), shown            # the last row logged, merged

    monkeypatch.delenv(FAULT_ENV)
    capfd.readouterr()
    resumed = distsgd.run(**resumable)
    assert f"distsgd: {run_dir.name} resumed from the checkpoint of step 8\n" in capfd.readouterr().err
    _same_params(straight.state_dict(), resumed.state_dict())
    for rank in (0, 1):
        pd.testing.assert_frame_equal(_rank_rows(resumed.path, rank),
                                      _rank_rows(straight.path, rank), check_exact=True)
    pd.testing.assert_frame_equal(resumed.metrics.drop(columns=CLOCK),
                                  straight.metrics.drop(columns=CLOCK), check_exact=True)
    assert run_state(resumed.path).status == "finished"


@pytest.mark.multiproc
def test_show_reads_a_run_while_it_runs(tmp_path):
    """A 2-rank run on an emulated 10 Mbit/s network (about 0.3 s a step, sleeping): while it
    runs, `show` says so with the last step logged; once finished, it prints the summary. The run
    is held (SIGSTOP to its process group) while `show` reads it, so that a loaded machine, where
    `show`'s start takes longer than the run's remaining steps, still shows it running."""
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "distsgd", "train", "--nproc", "2", "--steps", "30",
           "--log-every", "2", "--eval-every", "0", "--net", "10Mbit,1ms", "--no-progress",
           "--out", str(out)]
    proc = subprocess.Popen(cmd, env=PYTHON_ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        rows = None
        while time.monotonic() < deadline and proc.poll() is None:
            rows = list(out.glob("*/ranks/metrics_rank1.csv"))
            if rows and len(rows[0].read_text().splitlines()) >= 3:      # header + 2 rows
                break
            time.sleep(0.2)
        assert rows and proc.poll() is None, "the run ended (or never logged) before show ran"
        os.killpg(proc.pid, signal.SIGSTOP)
        try:
            shown = _show(rows[0].parent.parent)
        finally:
            os.killpg(proc.pid, signal.SIGCONT)
        assert re.search(r"status +running\n", shown), shown
        step = int(re.search(r"logged +step (\d+) of 30", shown).group(1))
        assert 2 <= step < 30, shown
        output, _ = proc.communicate(timeout=180)
        assert proc.returncode == 0, output
    finally:
        _stop_group(proc)
    shown = _show(rows[0].parent.parent)
    assert re.search(r"ranks x steps +2 x 30", shown), shown


def _usr1_once_started(cmd: list[str], env: dict[str, str], started: Path, what: str
                       ) -> tuple[subprocess.Popen, str]:
    """Start `cmd` (a batch script) in its own session, send it SIGUSR1 once `started` exists (its
    stub of `what` has begun), and return the ended process with its output."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started.exists(), f"{what} was not started"
        proc.send_signal(signal.SIGUSR1)
        output, _ = proc.communicate(timeout=30)
    finally:
        _stop_group(proc)
    return proc, output


def _stop_group(proc: subprocess.Popen) -> None:
    """Kill what is left of `proc`'s session (started with start_new_session): a test that fails
    or times out leaves no rank or stub behind."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.multiproc
def test_torchrun_template_restarts_and_resumes_bitwise(tmp_path):
    """`MAX_RESTARTS=1 reproduce/torchrun.sh ...` on 2 CPU ranks, rank 1 killed at step 10 in
    the first attempt: torchrun restarts both ranks, they resume from the checkpoint of step 8
    and end with the parameters and metrics of an uninterrupted (local) run."""
    straight = distsgd.run(out=str(tmp_path / "straight"), algo="ssgd", backend="gloo", **RUN)
    env = {**PYTHON_ENV, "MAX_RESTARTS": "1", "BACKEND": "gloo", "NPROC_PER_NODE": "2",
           "MASTER_PORT": str(_free_port()), FAULT_ENV: "1:10:kill",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for key in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "LOCAL_RANK"):
        env.pop(key, None)
    args = ["--algo", "ssgd", "--model", "mlp", "--data", "digits", "--steps", "12",
            "--batch-size", "16", "--lr", "0.05", "--weight-decay", "1e-3", "--log-every", "3",
            "--eval-every", "6", "--no-progress", "--checkpoint-every", "4",
            "--out", str(tmp_path / "torchrun")]
    t0 = time.perf_counter()
    proc = subprocess.Popen(["bash", str(REPO / "reproduce" / "torchrun.sh"), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=300)
    finally:
        _stop_group(proc)
    print(f"torchrun with a restart: {time.perf_counter() - t0:.1f} s")
    assert proc.returncode == 0, log[-6000:]
    assert f"{FAULT_ENV}: kill at step 10" in log, log[-6000:]      # the first attempt did fail
    assert "up to 1 restart(s)" in log
    assert f"{straight.path.name} resumed from the checkpoint of step 8" in log, log[-6000:]
    resumed = distsgd.Result.load(tmp_path / "torchrun" / straight.path.name)
    _same_params(straight.state_dict(), resumed.state_dict())
    pd.testing.assert_frame_equal(resumed.metrics.drop(columns=CLOCK),
                                  straight.metrics.drop(columns=CLOCK), check_exact=True)


# ---------------------------------------------------------------------------------- chaos
CHAOS_SEED = 18
CHAOS_ALGOS = ["ssgd", "local_sgd", "cocod_sgd", "compressed_sgd", "kavg", "dear"]
FAIL_FAST_S = 10.0              # from the kill to WorkerError, at most


@pytest.mark.timing
@pytest.mark.multiproc
def test_chaos_a_random_rank_killed_at_a_random_step(tmp_path, monkeypatch):
    """A seeded series: per algorithm, 2 or 3 ranks, a random rank SIGKILLed at a random step
    of 12 (checkpoints every 4). Each run fails within FAIL_FAST_S of the kill, naming the
    killed rank; run again, it resumes and ends bitwise as an uninterrupted run."""
    rng = random.Random(CHAOS_SEED)
    measured = []
    for algo in CHAOS_ALGOS:
        nproc = rng.choice([2, 3])
        rank, step = rng.randrange(nproc), rng.randrange(1, RUN["steps"])
        fields = dict(RUN, algo=algo, nproc=nproc, params=CASES[algo],
                      momentum=0.0 if algo in PLAIN_SGD else 0.9, **SCHEDULE.get(algo, {}))
        monkeypatch.delenv(FAULT_ENV, raising=False)
        straight = distsgd.run(out=str(tmp_path / algo / "straight"), **fields)
        resumable = dict(fields, out=str(tmp_path / algo / "chaos"), checkpoint_every=4)
        monkeypatch.setenv(FAULT_ENV, f"{rank}:{step}:kill")
        with pytest.raises(WorkerError) as info:
            distsgd.run(**resumable)
        failed_at = time.time()
        err = info.value
        assert err.rank == rank and f"worker rank {rank} failed" in str(err), str(err)
        assert "killed by signal 9" in err.cause, err.cause
        killed_at = float(re.search(rf"{FAULT_ENV}: kill at step {step}, time ([\d.]+)",
                                    err.cause).group(1))
        assert failed_at - killed_at < FAIL_FAST_S, (algo, failed_at - killed_at)
        monkeypatch.delenv(FAULT_ENV)
        resumed = distsgd.run(**resumable)
        _same_params(straight.state_dict(), resumed.state_dict())
        pd.testing.assert_frame_equal(resumed.metrics.drop(columns=CLOCK),
                                      straight.metrics.drop(columns=CLOCK), check_exact=True)
        measured.append(f"{algo}: p={nproc} rank {rank} killed at step {step}, failed after "
                        f"{failed_at - killed_at:.2f} s, resumed bitwise")
    print("\n".join(measured))


# ---------------------------------------------------------------------------------- SLURM
SBATCH = REPO / "reproduce" / "slurm" / "train.sbatch"


def test_train_sbatch_asks_for_requeue_and_a_warning_signal():
    directives = [line.split(None, 1)[1] for line in SBATCH.read_text().splitlines()
                  if line.startswith("#SBATCH ")]
    assert "--requeue" in directives
    assert any(re.fullmatch(r"--signal=B:USR1@\d+", d) for d in directives), directives
    assert "--open-mode=append" in directives          # a requeued job's output follows the first


def _stub_slurm(tmp_path: Path, srun_exit: str = "") -> dict[str, str]:
    """A PATH with stub srun (records its arguments and $TORCHELASTIC_SIGNALS_TO_HANDLE, records
    a SIGUSR1 and exits 138 on it; with $STUB_SRUN_EXIT, exits with that at once) and scontrol (records its arguments; `show
    hostnames` prints node0), and the job's variables."""
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(f"""#!/usr/bin/env bash
echo "srun $*" >> {log}
echo "torchrun handles $TORCHELASTIC_SIGNALS_TO_HANDLE" >> {log}
[[ -n "${{STUB_SRUN_EXIT:-}}" ]] && exit "$STUB_SRUN_EXIT"
trap 'echo "srun: SIGUSR1" >> {log}; exit 138' USR1
touch {tmp_path}/started
while :; do sleep 0.05; done
""")
    (bin_dir / "scontrol").write_text(f"""#!/usr/bin/env bash
echo "scontrol $*" >> {log}
[[ "$1" == show ]] && echo node0
exit 0
""")
    for stub in ("srun", "scontrol"):
        (bin_dir / stub).chmod(0o755)
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "activate").write_text("")
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "VENV": str(venv),
           "SLURM_JOB_ID": "77", "SLURM_JOB_NODELIST": "node0", "SLURM_NNODES": "1",
           "SLURM_SUBMIT_DIR": str(REPO), "BACKEND": "gloo", "GPUS_PER_NODE": "2"}
    if srun_exit:
        env["STUB_SRUN_EXIT"] = srun_exit
    return env


def test_train_sbatch_forwards_usr1_to_the_step_and_requeues(tmp_path):
    """SIGUSR1 to the batch script (what --signal=B:USR1@120 sends): srun gets SIGUSR1 (which it
    passes to the step; srun would kill the step on a SIGTERM), torchrun is told to pass it on
    to its ranks, the script waits for the step, requeues the job and exits 0.
    test_cluster_slurm.py runs the same on a real SLURM."""
    env = _stub_slurm(tmp_path)
    proc, output = _usr1_once_started(["bash", str(SBATCH), "--algo", "ssgd", "--out", "results/x"], env,
                                      tmp_path / "started", "srun")
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert proc.returncode == 0, output
    srun = next(c for c in calls if c.startswith("srun "))
    assert "torchrun" in srun and "--max-restarts 0" in srun and "--rdzv-id 77" in srun
    assert srun.endswith("-m distsgd train --launcher env --backend gloo --algo ssgd --out results/x")
    assert calls[calls.index(srun) + 1:] == [
        "torchrun handles SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1", "srun: SIGUSR1",
        "scontrol requeue 77"], calls
    assert "requeued (the step ended with status 138)" in output, output


def test_train_sbatch_without_a_signal_exits_with_the_steps_status(tmp_path):
    env = _stub_slurm(tmp_path, srun_exit="3")
    proc = subprocess.run(["bash", str(SBATCH), "--algo", "ssgd"], env=env, capture_output=True,
                          text=True, timeout=30)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert not any("requeue" in c for c in (tmp_path / "calls.log").read_text().splitlines())


PAPERMILL_SBATCH = REPO / "reproduce" / "slurm" / "papermill.sbatch"


def test_papermill_sbatch_stops_the_runs_on_usr1_and_requeues(tmp_path):
    """SIGUSR1 to the notebooks' batch script: it creates $DISTSGD_STOP_FILE (every rank of the run
    in progress saves a checkpoint and stops at its next log step; here a stub run.py that waits for
    the file), waits for run.py, requeues the job and exits 0; the runs checkpoint by default."""
    env = _stub_slurm(tmp_path)
    stop = tmp_path / "stop"
    run_py = tmp_path / "python"
    run_py.write_text(f"""#!/usr/bin/env bash
echo "run.py $* every=$DISTSGD_CHECKPOINT_EVERY" >> {tmp_path}/calls.log
touch {tmp_path}/started
while [[ ! -e "$DISTSGD_STOP_FILE" ]]; do sleep 0.05; done
echo "run.py: stop file" >> {tmp_path}/calls.log
exit 1
""")
    run_py.chmod(0o755)
    env.update(PYTHON=str(run_py), DISTSGD_STOP_FILE=str(stop), PROFILE="rehearsal", ONLY="01")
    directives = [line.split(None, 1)[1] for line in PAPERMILL_SBATCH.read_text().splitlines()
                  if line.startswith("#SBATCH ")]
    assert "--requeue" in directives and "--open-mode=append" in directives
    assert "--ntasks=1" not in directives        # would collapse a job of several nodes to one
    proc, output = _usr1_once_started(["bash", str(PAPERMILL_SBATCH), "--jobs", "1"], env, tmp_path / "started",
                                      "run.py")
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert proc.returncode == 0, output
    assert calls == ["run.py reproduce/run.py --profile rehearsal --only 01 --jobs 1 every=250",
                     "run.py: stop file", "scontrol requeue 77"], calls
    assert "requeued (run.py ended with status 1)" in output and not stop.exists(), output


# ---------------------------------------------------------------------------------- TensorBoard
@pytest.mark.multiproc
def test_tensorboard_scalars_are_rank0s_logged_rows(tmp_path, monkeypatch):
    """--tensorboard: RUN_DIR/tensorboard holds rank 0's logged rows, one tag per column, at their
    steps; a run resumed at step 8 purges what its killed attempt wrote after it (step 9)."""
    pytest.importorskip("tensorboard", reason="the optional tensorboard package is not installed "
                                              "(pip install 'distsgd[tensorboard]')")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    fields = dict(RUN, algo="ssgd", out=str(tmp_path), checkpoint_every=4, tensorboard=True)
    monkeypatch.setenv(FAULT_ENV, "1:10:kill")
    with pytest.raises(WorkerError):
        distsgd.run(**fields)
    monkeypatch.delenv(FAULT_ENV)
    result = distsgd.run(**fields)
    board = EventAccumulator(str(result.path / "tensorboard"))
    board.Reload()
    rows = read_metrics(result.path / "ranks" / "metrics_rank0.csv")
    assert {"train_loss", "comm_bytes", "test_acc", "lr"} <= set(board.Tags()["scalars"])
    for tag in ("train_loss", "comm_bytes"):
        events = board.Scalars(tag)
        assert [e.step for e in events] == rows["step"].tolist() == [3, 6, 9, 12], tag
        assert [e.value for e in events] == pytest.approx(rows[tag].tolist(), rel=1e-6), tag
    assert [e.step for e in board.Scalars("test_acc")] == [6, 12]     # NaN between evaluations: none


def test_tensorboard_without_its_package_is_refused_before_the_run(monkeypatch):
    import importlib.util

    from distsgd import ConfigError

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "tensorboard" else real(name, *a))
    with pytest.raises(ConfigError, match=r"invalid tensorboard=True.*pip install 'distsgd\[tensorboard\]'"):
        distsgd.Config(tensorboard=True).validate()
    with pytest.raises(ConfigError, match="invalid tensorboard='yes'; allowed: true or false"):
        distsgd.Config(tensorboard="yes").validate()

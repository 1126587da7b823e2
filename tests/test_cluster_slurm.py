"""The SLURM templates on a real single-node SLURM cluster started by this test.

The fixture installs Debian's slurm-wlm and munge when `sbatch` is missing (apt-get, ~10 s),
writes a private slurm.conf (its own ports, spool and state directories under a temporary
directory; ``SLURM_CONF`` points the clients at it), starts munged (unless one already answers),
slurmctld and slurmd, and stops what it started when the module's tests are done. The recipe is
the one in ../shared/ENVIRONMENT.md. Skips with the reason when not root or without apt-get.

Then, as a user would (docs/clusters.md, "On a cluster"):
- ``PROFILE=quick sbatch --array=0 reproduce/slurm/papermill.sbatch --dry-run`` (array task 0:
  notebook 00): the executed notebook, its figures, claims table and summary.csv must exist and
  every cell must have run
  (a dry run: 2 steps a run, nothing timed, so this suite runs beside the others; notebook 00's
  timed verdicts are nbval's, in the notebooks-timed suite);
- ``BACKEND=gloo GPUS_PER_NODE=2 sbatch reproduce/slurm/train.sbatch ...``:
  srun starts torchrun, which starts 2 ranks; the run's summary must say 2 ranks;
- the same template sent the time-limit warning (SIGUSR1 to the batch shell, as
  ``--signal=B:USR1@120`` sends it): the ranks save a checkpoint and stop, the job requeues
  itself, and its second start resumes from that checkpoint and finishes the run.

"""
from __future__ import annotations

import csv
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parent.parent
SLURMCTLD_PORT, SLURMD_PORT = 16817, 16818  # not the defaults: leave any real cluster alone
JOB_TIMEOUT_S = 600


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the SLURM test installs and starts slurmctld/slurmd/munged: needs root"
    if shutil.which("sbatch") is None and shutil.which("apt-get") is None:
        return "SLURM is not installed and apt-get is not available to install it"
    return None


pytestmark = pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")


def _sh(*cmd: str, timeout: float = 120, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout, **kw)


def install_slurm() -> None:
    """apt-get install slurm-wlm and munge, unless sbatch is already there."""
    if shutil.which("sbatch") and shutil.which("slurmd") and shutil.which("munged"):
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    _sh("apt-get", "update", timeout=300, env=env)
    _sh("apt-get", "install", "-y", "slurm-wlm", "munge", timeout=600, env=env)


def _munge_works() -> bool:
    try:
        cred = subprocess.run(["munge", "-n"], capture_output=True, timeout=10)
        if cred.returncode:
            return False
        return subprocess.run(["unmunge"], input=cred.stdout, capture_output=True,
                              timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def start_munge() -> int | None:
    """Start munged as user munge unless one already answers; its pid if this started it."""
    if _munge_works():
        return None
    key = Path("/etc/munge/munge.key")
    if not key.exists():
        _sh("mungekey", "--create", "--keyfile", str(key))
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    Path("/run/munge").mkdir(parents=True, exist_ok=True)
    shutil.chown("/run/munge", "munge", "munge")
    _sh("runuser", "-u", "munge", "--", "/usr/sbin/munged")
    _wait(_munge_works, 20, "munged did not answer")
    return int(Path("/run/munge/munged.pid").read_text())


def slurm_conf(root: Path, host: str) -> str:
    """A one-node cluster: controller and node on 127.0.0.1, state under `root`."""
    cpus = os.cpu_count() or 1
    return f"""\
ClusterName=distsgdtest
SlurmctldHost={host}(127.0.0.1)
SlurmctldPort={SLURMCTLD_PORT}
SlurmdPort={SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
MpiDefault=none
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
"""


def _wait(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.5)
    raise TimeoutError(what)


def _stop_pidfile(path: Path) -> None:
    if path.exists():
        try:
            os.kill(int(path.read_text().strip()), signal.SIGTERM)
        except (ProcessLookupError, ValueError):
            pass


@pytest.fixture(scope="module")
def slurm(tmp_path_factory) -> Iterator[dict[str, str]]:
    """A running single-node SLURM; yields the environment for its clients (SLURM_CONF)."""
    install_slurm()
    root = tmp_path_factory.mktemp("slurm")
    for d in ("state", "spool"):
        (root / d).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = root / "slurm.conf"
    conf.write_text(slurm_conf(root, host))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    munged = start_munge()
    try:
        _sh("slurmctld", env=env)
        _sh("slurmd", "-N", host, env=env)

        def idle() -> bool:
            out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True)
            return out.returncode == 0 and out.stdout.strip() == "idle"

        _wait(idle, 60, f"the SLURM node did not become idle; see {root}/slurm*.log")
        yield env
    finally:
        _stop_pidfile(root / "slurmd.pid")
        _stop_pidfile(root / "slurmctld.pid")
        if munged is not None:
            os.kill(munged, signal.SIGTERM)


def sbatch(env: dict[str, str], log: Path, *args: str) -> str:
    """Submit from the repository root, wait for the job; return its log (fails on a bad exit)."""
    try:
        proc = subprocess.run(["sbatch", "--wait", f"--output={log}", *args], cwd=REPO, env=env,
                              capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        subprocess.run(["scancel", "--name", "distsgd-reproduce", "--name", "distsgd-train"],
                       env=env)
        raise
    text = log.read_text() if log.exists() else ""
    assert proc.returncode == 0, f"sbatch {args}: {proc.stdout}{proc.stderr}\njob log:\n{text}"
    return text


def test_papermill_template_runs_notebook_00(slurm, tmp_path) -> None:
    env = {**slurm, "PROFILE": "quick"}
    env.pop("DISTSGD_RESULTS", None)      # a dry run keeps its runs under --out
    runs, figures = tmp_path / "runs", tmp_path / "figures"
    # this node's cores and memory, not the template's (a GPU node's)
    log = sbatch(env, tmp_path / "papermill.out", "--array=0", "--cpus-per-task=1", "--mem=500M",
                 "reproduce/slurm/papermill.sbatch",
                 "--out", str(runs), "--figures-dir", str(figures), "--dry-run")
    assert "(array task 0)" in log and "only 00" in log, log
    assert "profile quick" in log and "dry run" in log and "all 1 notebook(s) ran" in log, log
    assert list((runs / "results").iterdir()), "the dry run's runs are not under --out"
    executed = runs / "00_baselines.ipynb"
    assert executed.exists()
    cells = [c for c in json.loads(executed.read_text())["cells"] if c["cell_type"] == "code"]
    assert all(c["execution_count"] is not None for c in cells), "a cell was not executed"
    with open(runs / "summary.csv", newline="") as f:
        (row,) = list(csv.DictReader(f))
    assert row["notebook"] == "00_baselines" and row["status"] == "ok"
    assert int(row["claims_total"]) > 0
    assert list((figures / "00_baselines").glob("*.png")), "no figures written"
    assert (figures / "00_baselines" / "claims.csv").exists()


def test_train_template_two_ranks(slurm, tmp_path) -> None:
    env = {**slurm, "BACKEND": "gloo", "GPUS_PER_NODE": "2", "LOG_DIR": str(tmp_path / "ranks")}
    out = tmp_path / "train"
    log = sbatch(env, tmp_path / "train.out", "--nodes=1", "--cpus-per-task=1", "--mem=500M",
                 "reproduce/slurm/train.sbatch",
                 "--algo", "ssgd", "--model", "mlp", "--data", "digits", "--steps", "20",
                 "--eval-every", "10", "--no-progress", "--out", str(out))
    assert "1 node(s) x 2 rank(s), backend gloo" in log, log
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["nproc"] == 2 and summary["steps"] == 20
    assert summary["collectives"] > 0
    assert len(list((tmp_path / "ranks").rglob("stderr.log"))) == 2, "each rank's output in a file of its own"


def test_plain_srun_two_tasks(slurm, tmp_path) -> None:
    """`srun -n 2 python -m distsgd train --launcher env`: ranks from SLURM's variables."""
    out = tmp_path / "srun"
    env = {k: v for k, v in slurm.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run(["srun", "--ntasks=2", "--cpus-per-task=1", "--overcommit",
                           sys.executable, "-m", "distsgd", "train", "--launcher", "env",
                           "--backend", "gloo", "--algo", "local_sgd", "--set", "period=2",
                           "--steps", "10", "--eval-every", "5", "--no-progress", "--json",
                           "--out", str(out)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=JOB_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["nproc"] == 2 and summary["collectives"] > 0


def test_a_run_in_a_job_starts_its_ranks_as_an_srun_step(slurm, tmp_path) -> None:
    """`distsgd.run` inside a batch job with the srun launcher (what a job of several nodes uses by
    default; asked for here on one node): its ranks are one job step, each rank's output in its own
    log; a rank that dies fails the run at once, naming it. A benchmark's call (`on_ranks`) is a step
    the same way, meeting at the step's TCP rendezvous, its results passed back through the results
    root; a raising rank fails it at once, naming it (reproduce/rehearse.py: three nodes)."""
    out, results = tmp_path / "step", tmp_path / "results"
    script = tmp_path / "run.sbatch"
    script.write_text(f"""#!/usr/bin/env bash
export DISTSGD_LAUNCHER=srun PYTHONPATH={REPO / 'lib'}:{REPO / 'tests'} DISTSGD_RESULTS={results}
{sys.executable} - <<'EOF'
import distsgd
from distsgd.training.launch import on_ranks
from test_launch import _environment, _fails
r = distsgd.run(algo="local_sgd", params={{"period": 2}}, nproc=2, steps=8, eval_every=4, progress=False,
                out="{out}")                         # ends before the fault's step 9
print("nproc", r.summary["nproc"], "steps", r.summary["steps"])
try:
    distsgd.run(algo="ssgd", nproc=2, steps=400, log_every=5, progress=False, out="{out}")
except distsgd.WorkerError as e:
    print("failed rank", e.rank, e.cause.splitlines()[0])
envs = on_ranks(_environment, 2, timeout=120)
print("call", [(e["RANK"], e["sum"], e["MASTER_ADDR"] is not None, e["DISTSGD_INIT_METHOD"]) for e in envs])
try:
    on_ranks(_fails, 2, "raise", timeout=120)       # rank 0 sleeps: the step must be stopped at once
except distsgd.WorkerError as e:
    print("failed call rank", e.rank, e.cause.strip().splitlines()[-1])
EOF
""")
    env = {**slurm, "DISTSGD_INJECT_FAULT": "1:9:kill"}
    log = sbatch(env, tmp_path / "step.out", "--nodes=1", "--ntasks=2", "--cpus-per-task=1", str(script))
    assert "nproc 2 steps 8" in log and "failed rank 1 process on" in log and "Killed" in log, log
    run = next(d for d in out.iterdir() if d.name.startswith("local_sgd"))
    assert (run / "ranks" / "srun.log").read_text().startswith("srun --job-name=local_sgd")
    assert all((run / "ranks" / f"rank{r}.log").exists() for r in (0, 1))
    assert "call [('0', 1.0, True, None), ('1', 1.0, True, None)]" in log, log
    assert "failed call rank 1 ValueError: planted failure on rank 1" in log, log
    (failed,) = (results / "calls").iterdir()          # the successful call's directory is gone
    assert failed.name.startswith("fails-") and (failed / "ranks" / "srun.log").read_text().startswith("srun --job-name=fails")


def test_train_template_requeues_on_the_warning_signal_and_resumes(slurm, tmp_path) -> None:
    """The signal `--signal=B:USR1@120` sends before the time limit, sent now (`scancel --signal
    USR1 --batch`): the ranks save a checkpoint and stop, the script requeues the job, and the
    job's second start resumes from that checkpoint and finishes the run."""
    env = {**slurm, "BACKEND": "gloo", "GPUS_PER_NODE": "2", "LOG_DIR": str(tmp_path / "ranks")}
    out, log = tmp_path / "requeue", tmp_path / "requeue.out"
    job = subprocess.run(["sbatch", "--parsable", f"--output={log}", "--nodes=1", "--cpus-per-task=1",
                          "--mem=500M", "reproduce/slurm/train.sbatch", "--algo", "ssgd",
                          "--model", "mlp", "--data", "digits", "--steps", "60", "--log-every", "2",
                          "--eval-every", "0", "--checkpoint-every", "50", "--net", "10Mbit,1ms",
                          "--no-progress", "--out", str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                         check=True).stdout.strip().split(";")[0]

    def state() -> str:
        """The job's state in squeue, "" once it has left the queue; an squeue that fails is
        retried, never read as "left the queue"."""
        for _ in range(10):
            proc = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env,
                                  capture_output=True, text=True, timeout=30)
            if proc.returncode == 0:
                return proc.stdout.strip()
            if "Invalid job id" in proc.stderr:      # purged from the controller: it has ended
                return ""
            time.sleep(1)
        raise RuntimeError(f"squeue failed 10 times: {proc.stderr}")

    def node_idle() -> bool:
        out = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True, timeout=30)
        return out.returncode == 0 and out.stdout.strip() == "idle"

    requeued_at: list[float] = []

    def second_start_begun() -> bool:
        # SLURM holds a requeued job back for about 2 minutes (seen here: 164 s): start it sooner,
        # but not before the first start is cleaned up and its credential's second has passed (a
        # start 0.26 s after the requeue was killed by slurmd, "Job credential revoked", in CI)
        if state() == "PENDING" and node_idle() and time.monotonic() - requeued_at[0] > 5:
            subprocess.run(["scontrol", "update", f"JobId={job}", "StartTime=now"], env=env,
                           timeout=30)
        return "start 1" in log.read_text()            # SLURM_RESTART_COUNT of the second start

    try:
        _wait(lambda: any(len(f.read_text().splitlines()) > 3
                          for f in out.glob("*/ranks/metrics_rank0.csv")), 300, "no rows logged")
        subprocess.run(["scancel", "--signal=USR1", "--batch", job], env=env, check=True, timeout=30)
        _wait(lambda: "requeued" in log.read_text(), 120, "the job did not requeue itself")
        requeued_at.append(time.monotonic())
        _wait(second_start_begun, 300, "the requeued job did not start again")
        _wait(lambda: state() == "", JOB_TIMEOUT_S, "the requeued job did not end")
    except TimeoutError as e:
        job_info = subprocess.run(["scontrol", "show", "job", job], env=env, capture_output=True,
                                  text=True, timeout=30).stdout
        raise AssertionError(f"{e}\nscontrol show job:\n{job_info}\njob log:\n"
                             f"{log.read_text() if log.exists() else ''}") from e
    finally:
        if state():
            subprocess.run(["scancel", job], env=env, timeout=30)
    text = log.read_text()
    assert "SIGUSR1 (time limit near)" in text and f"job {job}: requeued" in text, text
    (run,) = [d for d in out.iterdir() if d.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "finished" and summary["steps"] == 60
    # the ranks' own messages are in their logs (LOG_DIR; torchrun tees them to the job's log only while
    # it runs, and the warning signal ends it first)
    ranks = "\n".join(f.read_text(errors="replace") for f in sorted((tmp_path / "ranks").rglob("*")) if f.is_file())
    step = re.search(r"stopped by a signal \(SIGTERM or SIGUSR1\) after step (\d+)", text + ranks)
    assert step, text + ranks                            # the first start saved and stopped
    assert f"{run.name} resumed from the checkpoint of step {step.group(1)}" in text, text

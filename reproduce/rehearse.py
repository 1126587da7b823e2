#!/usr/bin/env python3
"""Rehearse the multi-node path on this machine: a real SLURM cluster of three nodes, notebooks
across them, one requeued once mid-run (``make rehearse``; root, Linux; 15-45 minutes on a shared 2-core machine).

1. ``reproduce/slurm/netns_cluster.sh up``: three nodes, each a network namespace with shaped links
   and its own slurmd (docs/clusters.md, "Rehearsed on one machine").
2. ``sbatch --array=1 --nodes=3 --cpus-per-task=2 --mem=0 reproduce/slurm/papermill.sbatch`` (notebook
   01's array task, on the nodes' own cores and memory) with
   ``PROFILE=rehearsal ONLY=01``: the
   kernel runs on node1 and starts every run of notebook 01 as one srun step across the three
   nodes (gloo, GLOO_SOCKET_IFNAME=eth0), checkpointing every ``--checkpoint-every`` steps.
3. Once some runs have finished and another holds a complete checkpoint: ``scontrol requeue``. The
   job is stopped at once (its ranks killed) and started again.
4. Checked after the job: it started twice and the notebook ran (summary.csv "ok"); every run
   finished before the requeue was reused (its summary.json untouched); the interrupted run
   resumed from its checkpoint (the notebook says "resumed from the checkpoint of step N") and
   finished; a run's ranks ran on node1, node2 and node3; the headline's claims were decided from
   the runs across the three nodes, the rehearsal profile's paper setting (not projected).
5. Then notebook 07 (the survey's system methods) as array task 7 of its own job: its benchmark calls
   start their ranks as srun steps across the nodes too, and the headline's claims are decided from
   the benchmark repeated on the three nodes over the real network (checked: the notebook ran, that
   benchmark's rows name node1, node2 and node3, the headline resolved as measured there).
6. ``netns_cluster.sh down``, whatever happened.

Writes ``--result`` (default reproduce/rehearsal/last_run.csv: one row per check, with the
command, commit and date in its first line) and the job's log beside it (``last_run.log``); the
job's results, executed notebook and figures stay in ``--work`` (reproduce/runs/rehearsal).
Exit status 0 when every check holds, 1 otherwise, 2 where the machine cannot host the cluster.
"""
from __future__ import annotations

import argparse
import csv
import datetime
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CLUSTER = REPO / "reproduce" / "slurm" / "netns_cluster.sh"
WORK = Path(os.environ.get("WORK", "/tmp/distsgd-slurm-netns"))   # the cluster's state, as netns_cluster.sh
NOTEBOOK = "01_cocod_sgd"                                        # requeued once mid-run
SURVEY = "07_survey_systems"                                     # a benchmark's headline measured at the setting


def sh(*cmd: str, env: dict[str, str] | None = None, timeout: float = 60, check: bool = True) -> str:
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout, check=check).stdout


def job_state(job: str, env: dict[str, str]) -> str:
    """The job's state in squeue, "" once it has left the queue (an squeue that fails is retried)."""
    for _ in range(10):
        proc = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True,
                              text=True, timeout=30)
        if proc.returncode == 0:
            return proc.stdout.strip()
        if "Invalid job id" in proc.stderr:
            return ""
        time.sleep(1)
    raise RuntimeError(f"squeue failed 10 times: {proc.stderr}")


def keep_log(log: Path, to: Path) -> None:
    """Copy a job's log to `to` with this checkout's path written as <repository>: the committed
    log names no machine's directories."""
    to.write_text(log.read_text().replace(str(REPO), "<repository>"))


def wait(predicate, timeout_s: float, what: str, every: float = 1.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(every)
    raise TimeoutError(what)


def finished_runs(results: Path) -> dict[str, int]:
    """Run directory name -> mtime (ns) of its summary.json, for every finished run."""
    return {p.parent.name: p.stat().st_mtime_ns for p in results.glob("*/summary.json")}


def checkpointed_runs(results: Path) -> dict[str, int]:
    """Run directory name -> step of its latest complete checkpoint, for every unfinished run."""
    out = {}
    for marker in results.glob("*/checkpoints/step-*/COMPLETE"):
        run = marker.parents[2]
        if not (run / "summary.json").exists():
            out[run.name] = max(out.get(run.name, 0), int(marker.parent.name.removeprefix("step-")))
    return out


def starts(log: str) -> list[int]:
    """The job's starts in its log, in order: papermill.sbatch's first line of each names its
    ``start N`` (SLURM_RESTART_COUNT)."""
    return [int(n) for n in re.findall(r"^job .*, start (\d+),", log, flags=re.M)]


def submit(notebook: str, env: dict[str, str], work: Path, log: Path, checkpoint_every: int) -> str:
    """``sbatch`` notebook `notebook`'s array task of papermill.sbatch across the three nodes with the
    rehearsal profile, its results, executed notebook and figures in `work`, its output in `log`;
    returns the job id."""
    python = Path(sys.executable)
    job_env = {**env, "PROFILE": "rehearsal", "ONLY": notebook, "PYTHON": str(python),
               "GLOO_SOCKET_IFNAME": "eth0", "DISTSGD_RESULTS": str(work / "results"), "TQDM_DISABLE": "1",
               "DISTSGD_CHECKPOINT_EVERY": str(checkpoint_every)}
    if (python.parent / "activate").exists():
        job_env["VENV"] = str(python.parent.parent)
    # the namespace nodes' cores and memory, not the template's GPU node (32 cores, 64 GB)
    cpus = os.environ.get("CPUS", "2")               # netns_cluster.sh's cores per node
    cmd = ["sbatch", "--parsable", f"--array={int(notebook[:2])}", "--nodes=3", f"--cpus-per-task={cpus}",
           "--mem=0", f"--output={log}", "reproduce/slurm/papermill.sbatch",
           "--out", str(work / "runs"), "--figures-dir", str(work / "figures")]
    print("$", " ".join(f"{k}={job_env[k]}" for k in ("PROFILE", "ONLY", "DISTSGD_CHECKPOINT_EVERY")),
          shlex.join(cmd), flush=True)
    return subprocess.run(cmd, cwd=REPO, env=job_env, capture_output=True, text=True, timeout=60,
                          check=True).stdout.strip().split(";")[0]


def notebook_status(out: Path, notebook: str) -> str:
    """The status summary.csv gives `notebook`'s last execution ("no summary.csv" without one)."""
    rows = [r for r in csv.DictReader(open(out / "summary.csv")) if r.get("notebook") == notebook] \
        if (out / "summary.csv").exists() else []
    return rows[-1]["status"] if rows else "no summary.csv row"


def rehearse(args: argparse.Namespace, env: dict[str, str], work: Path) -> list[dict[str, str]]:
    """Submit notebook 01, requeue, wait; the checks' rows."""
    results, out, figures, log = work / "results", work / "runs", work / "figures", work / "job.out"
    t0 = time.monotonic()
    job = submit(NOTEBOOK, env, work, log, args.checkpoint_every)

    def mid_run() -> bool:
        if not job_state(job, env):
            raise RuntimeError(f"job {job} ended before it could be requeued; see {log}")
        return len(finished_runs(results)) >= args.finished_before and bool(checkpointed_runs(results))

    wait(mid_run, args.timeout, "no run was mid-way with a checkpoint after enough runs finished", every=0.5)
    before, interrupted = finished_runs(results), checkpointed_runs(results)
    sh("scontrol", "requeue", job, env=env)
    requeued_at = time.monotonic()
    print(f"requeued job {job} at {requeued_at - t0:.0f} s: {len(before)} runs finished, "
          f"interrupted {interrupted}", flush=True)

    def started_again() -> bool:
        # SLURM holds a requeued job back for about two minutes: start it once its nodes are idle
        idle = sh("sinfo", "-h", "-o", "%t", env=env).split() == ["idle"]
        if job_state(job, env) == "PENDING" and idle and time.monotonic() - requeued_at > 5:
            sh("scontrol", "update", f"JobId={job}", "StartTime=now", env=env, check=False)
        return 1 in starts(log.read_text())

    wait(started_again, 300, "the requeued job did not start again", every=2)
    wait(lambda: job_state(job, env) == "", args.timeout, "the requeued job did not end", every=2)
    minutes = (time.monotonic() - t0) / 60
    keep_log(log, args.result.with_suffix(".log"))

    text = log.read_text()
    rows = [{"check": "job started twice (the requeue)", "expected": "start 0, start 1",
             "measured": ", ".join(f"start {n}" for n in starts(text)),
             "ok": str(starts(text)[:2] == [0, 1])}]
    status = notebook_status(out, NOTEBOOK)
    rows.append({"check": f"{NOTEBOOK} ran to its end", "expected": "ok", "measured": status, "ok": str(status == "ok")})
    after = finished_runs(results)
    kept = [name for name, mtime in before.items() if after.get(name) == mtime]
    rows.append({"check": "runs finished before the requeue were reused", "expected": str(len(before)),
                 "measured": str(len(kept)), "ok": str(len(kept) == len(before) > 0)})
    executed = (out / f"{NOTEBOOK}.ipynb").read_text() if (out / f"{NOTEBOOK}.ipynb").exists() else ""
    for name, step in interrupted.items():      # it may have saved later checkpoints before it was stopped
        said = [int(m) for m in re.findall(rf"{name} resumed from the checkpoint of step (\d+)", executed)]
        rows.append({"check": f"interrupted run {name} resumed and finished",
                     "expected": f"resumed from a checkpoint at step >= {step}, finished",
                     "measured": (f"resumed at step {said[0]}" if said else "not resumed") + (
                         ", finished" if name in after else ", unfinished"),
                     "ok": str(bool(said) and said[0] >= step and name in after)})
    hosts = sorted({p.read_text().split()[0] for p in results.glob(f"{next(iter(after), '-')}/ranks/pid_rank*")})
    rows.append({"check": "a run's ranks ran on the three nodes", "expected": "node1 node2 node3",
                 "measured": " ".join(hosts), "ok": str(hosts == ["node1", "node2", "node3"])})
    claims = figures / NOTEBOOK / "claims.csv"
    verdicts = [r["verdict"] for r in csv.DictReader(open(claims))] if claims.exists() else []
    rows.append({"check": "claims decided (not held to a ledger: the rehearsal is no paper's setting)",
                 "expected": "every claim", "measured": ", ".join(f"{v}: {verdicts.count(v)}" for v in sorted(set(verdicts))),
                 "ok": str(bool(verdicts))})
    rows.append(headline_check(claims, NOTEBOOK))
    rows.append({"check": "minutes from sbatch to the end of the requeued job", "expected": "-",
                 "measured": f"{minutes:.1f}", "ok": "True"})
    return rows


def rehearse_survey(args: argparse.Namespace, env: dict[str, str], work: Path) -> list[dict[str, str]]:
    """Submit notebook 07 once 01's job has ended, wait; the checks' rows: it ran, its benchmark at
    the setting ran on the three nodes, its headline was decided there."""
    import pandas as pd

    log = work / "job07.out"
    t0 = time.monotonic()
    job = submit(SURVEY, env, work, log, args.checkpoint_every)
    wait(lambda: job_state(job, env) == "", args.timeout, f"job {job} ({SURVEY}) did not end", every=2)
    minutes = (time.monotonic() - t0) / 60
    keep_log(log, args.result.with_name(args.result.stem + "_07.log"))
    status = notebook_status(work / "runs", SURVEY)
    bench = work / "figures" / SURVEY / "bench_at_setting.csv"
    hosts = sorted({h for cell in pd.read_csv(bench).hosts for h in cell.split()}) if bench.exists() else []
    return [{"check": f"{SURVEY} ran to its end", "expected": "ok", "measured": status, "ok": str(status == "ok")},
            {"check": f"{SURVEY}'s benchmark at the setting ran its ranks on the three nodes",
             "expected": "node1 node2 node3", "measured": " ".join(hosts) or "no bench_at_setting.csv",
             "ok": str(hosts == ["node1", "node2", "node3"])},
            headline_check(work / "figures" / SURVEY / "claims.csv", SURVEY),
            {"check": f"minutes from sbatch to the end of {SURVEY}'s job", "expected": "-",
             "measured": f"{minutes:.1f}", "ok": "True"}]


def headline_check(claims: Path, notebook: str) -> dict[str, str]:
    """The check that `notebook`'s headline was measured, not projected: the rehearsal profile names
    the three nodes as the paper's setting (``paper_setting``), so the claims that project the
    headline elsewhere are decided from the runs (or the benchmark) across them (`Headline.resolved_how`)."""
    import pandas as pd

    sys.path.insert(0, str(REPO / "lib"))
    from distsgd.verdicts.headlines import AT_PAPER_SETTING, load_headlines

    headline = load_headlines()[notebook]
    how = headline.resolved_how(pd.read_csv(claims)) if claims.exists() else "no claims.csv"
    return {"check": f"{notebook}: the headline's claims ({', '.join(headline.claims)}) decided at the rehearsal's "
            "paper setting", "expected": AT_PAPER_SETTING, "measured": how, "ok": str(how == AT_PAPER_SETTING)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--result", type=Path, default=REPO / "reproduce" / "rehearsal" / "last_run.csv")
    parser.add_argument("--checkpoint-every", type=int, default=20, help="steps between the runs' checkpoints")
    parser.add_argument("--finished-before", type=int, default=3,
                        help="runs that must have finished before the requeue")
    parser.add_argument("--timeout", type=float, default=1800, help="seconds for each phase")
    parser.add_argument("--work", type=Path, default=REPO / "reproduce" / "runs" / "rehearsal",
                        help="the job's results, executed notebook, figures and log (emptied first)")
    parser.add_argument("--keep", action="store_true", help="leave the cluster up (netns_cluster.sh down removes it)")
    args = parser.parse_args(argv)
    if os.geteuid() != 0 or sys.platform != "linux":
        print("rehearse.py builds network namespaces and SLURM daemons: needs root on Linux", file=sys.stderr)
        return 2
    env = {**os.environ, "SLURM_CONF": str(WORK / "slurm.conf")}
    for k in ("DISTSGD_RESULTS", "RANK", "WORLD_SIZE", "SLURM_JOB_ID"):
        env.pop(k, None)
    started = datetime.datetime.now().astimezone()
    commit = sh("git", "-C", str(REPO), "rev-parse", "--short", "HEAD").strip()
    subprocess.run(["bash", str(CLUSTER), "up"], check=True, timeout=600)
    try:
        work = args.work
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        args.result.parent.mkdir(parents=True, exist_ok=True)
        rows = []
        for step, log in ((rehearse, work / "job.out"), (rehearse_survey, work / "job07.out")):
            try:
                rows += step(args, env, work)
            except (TimeoutError, RuntimeError, subprocess.CalledProcessError) as e:
                print(f"rehearsal failed: {e}\n{log.read_text()[-5000:] if log.exists() else ''}", file=sys.stderr)
                rows.append({"check": f"rehearsal ran ({step.__name__})", "expected": "True",
                             "measured": str(e).splitlines()[0], "ok": "False"})
    finally:
        if not args.keep:
            subprocess.run(["bash", str(CLUSTER), "down"], timeout=300)
    with open(args.result, "w", newline="") as f:
        f.write(f"# python reproduce/rehearse.py (make rehearse), commit {commit}, {started:%Y-%m-%d %H:%M %Z}\n")
        writer = csv.DictWriter(f, fieldnames=["check", "expected", "measured", "ok"])
        writer.writeheader()
        writer.writerows(rows)
    for r in rows:
        print(f"{'ok  ' if r['ok'] == 'True' else 'FAIL'}  {r['check']}: {r['measured']}")
    print(f"wrote {args.result}")
    return 0 if all(r["ok"] == "True" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

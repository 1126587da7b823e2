"""Where a run stands, from its directory alone, while it runs or after it ended: each rank's pid
file (is its process gone?), the ranks' and the launcher's error files, the summary, the metrics
logged so far and the latest complete checkpoint (`run_state`; `python -m distsgd show`)."""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ..files import read_summary, write_text_atomic
from .metrics_log import merge_metrics, read_metrics


PID_FILE = "pid_rank{rank}"             # '<host> <pid>' of a rank's process, in RUN_DIR/ranks


LAUNCHER_ERROR = "launcher_error.txt"   # the local launcher's WorkerError, in RUN_DIR/ranks


def failed_ranks_errors(ranks: Path) -> list[Path]:
    """The error files of the failed ranks in RANKS (a run's ranks directory) in the order the ranks
    failed (their nanosecond stamp, `worker.record_error`): the first is the root cause, the others
    mostly failed because a peer had vanished."""
    if not ranks.is_dir():
        return []
    return sorted(ranks.glob("error_rank*.txt"), key=lambda f: f.stat().st_mtime_ns)


def write_pid_file(run_dir: Path, rank: int) -> None:
    """Note where rank `rank` runs, so that `run_state` can tell a running rank from a gone one."""
    write_text_atomic(run_dir / "ranks" / PID_FILE.format(rank=rank),
                      f"{socket.gethostname()} {os.getpid()}\n")


def _gone(pid_file: Path) -> bool:
    """Whether the rank of `pid_file` ran on this host and its process is gone (or a zombie)."""
    try:
        host, pid = pid_file.read_text().split()
    except (OSError, ValueError):
        return False
    if host != socket.gethostname():
        return False                        # another node's: cannot tell from here
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


@dataclass
class RunState:
    """What the files of a run directory say of it, finished or not (`run_state`)."""

    status: str                 # finished, diverged, stopped, failed or running
    detail: str                 # the cause of a failure or stop, where known
    metrics: pd.DataFrame       # rows logged so far, ranks merged (`merge_metrics`)
    last_steps: dict[int, int]  # rank -> its last logged step
    checkpoint: int | None      # the latest complete checkpoint's step


def run_state(run_dir: Path) -> RunState:
    """The state of the run in `run_dir` from what is on disk, also while it runs or after it
    failed: its status and detail (`status_of`), and its metrics, the rows the ranks appended so
    far (`MetricsLog`), merged by step."""
    ranks = run_dir / "ranks"
    per_rank: dict[int, pd.DataFrame] = {}
    for path in sorted(ranks.glob("metrics_rank*.csv")) if ranks.is_dir() else []:
        df = read_metrics(path)
        if len(df):
            per_rank[int(path.stem.removeprefix("metrics_rank"))] = df
    metrics = merge_metrics([per_rank[r] for r in sorted(per_rank)]) if per_rank else pd.DataFrame()
    last_steps = {r: int(df["step"].iloc[-1]) for r, df in sorted(per_rank.items())}
    steps = [int(d.name.removeprefix("step-")) for d in (run_dir / "checkpoints").glob("step-*")
             if (d / "COMPLETE").is_file()]
    return RunState(*status_of(run_dir), metrics, last_steps, max(steps) if steps else None)


def status_of(run_dir: Path) -> tuple[str, str]:
    """(status, detail) of the run in `run_dir`: "finished" or "diverged" (its summary.json);
    "stopped" (a rank saved a checkpoint on SIGTERM/SIGUSR1 and the run stopped) or "failed" (a
    rank's error file, or the local launcher's; or a rank's process on this host is gone without
    one); else "running"."""
    ranks = run_dir / "ranks"
    summary = run_dir / "summary.json"
    if summary.is_file():
        s = read_summary(summary)
        found = s.get("nonfinite")
        detail = (f"non-finite {found['quantity']} at step {found['step']} on ranks "
                  f"{', '.join(map(str, found['ranks']))}" if isinstance(found, dict) else "")
        return str(s["status"]), detail
    errors = failed_ranks_errors(ranks)
    launcher = ranks / LAUNCHER_ERROR
    cause = launcher.read_text() if launcher.is_file() else errors[0].read_text() if errors else ""
    if cause:
        lines = [line.strip() for line in cause.splitlines() if line.strip()]
        if lines[0].startswith("worker rank"):          # the launcher's: 'worker rank R failed:'
            how = lines[1].split("; last output")[0] if len(lines) > 1 and lines[1].startswith(
                "process ") else lines[-1]
            detail = f"{lines[0]} {how}"
        else:                                           # a rank's traceback: its last line
            detail = f"rank {errors[0].stem.removeprefix('error_rank')}: {lines[-1]}"
        stopped = "Preempted:" in cause or "stopped by a signal" in cause
        return ("stopped" if stopped else "failed"), detail
    gone = sorted(int(f.name.removeprefix("pid_rank")) for f in ranks.glob("pid_rank*")
                  if _gone(f)) if ranks.is_dir() else []
    if gone:
        return "failed", f"the process of rank {gone[0]} is gone without an error (killed?)"
    return "running", ""

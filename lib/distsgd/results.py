"""Run directories: layout, atomic writes, merging per-rank outputs, and loading results.

A run directory `<results>/<name>-<hash>/` holds

    config.json    the validated Config (its hash names the directory)
    env.json       versions, git commit, the library's code version, host, devices
    metrics.csv    one row per logged step, ranks merged: counts summed over ranks, losses and
                   accuracies averaged over ranks, wall_s the slowest rank's
    summary.json   final evaluation and totals, the config hash and code version that made them,
                   the status ("finished", or "diverged" at the step recorded in "nonfinite");
                   written last. Strict JSON: a NaN or infinity is written as null (read back
                   as NaN by `read_summary`)
    comm.csv       every collective of every rank (the ledger), for systems analysis
    test_correct.pt  which test examples each rank's final model classifies correctly (bool
                   [ranks, examples]; classification only): `Result.test_correct`;
                   test_correct_evaluated.pt the same of the model evaluated at the last step
    model.pt       the final model's state_dict (rank 0)
    ranks/         per-rank raw outputs and logs
    checkpoints/   while the run is unfinished: where it resumes (`distsgd.checkpoint`)

`load_results(DIR)` reads every run directory below DIR into one pandas table (one row per run,
or with metrics=True one per run and logged step); `python -m distsgd results DIR` prints it.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import io
import json
import math
import os
import platform
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from .comm.ledger import Ledger
from .config import Config

if TYPE_CHECKING:
    import torch

    from .divergence import NonFinite

SUMMED = ("comm_bytes", "collectives", "global_reductions", "local_reductions")
# per model, the file of which test examples each rank classifies correctly (`Result.test_correct`)
TEST_CORRECT = {"final": "test_correct.pt", "evaluated": "test_correct_evaluated.pt"}


def write_text_atomic(path: Path, text: str) -> None:
    """Write via a temporary file in the same directory and rename, so readers never see half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, obj: Any) -> None:
    """`obj` as strict JSON: a NaN or an infinity (a diverged run's loss) is written as null."""
    text = json.dumps(finite_or_null(obj), indent=2, sort_keys=True, default=str, allow_nan=False)
    write_text_atomic(path, text + "\n")


def read_summary(path: Path) -> dict[str, Any]:
    """A summary written by `write_json_atomic` (a run's, or a rank's final metrics): its
    top-level nulls, which are NaNs (e.g. the test accuracy of a regression), read back as NaN."""
    return {k: math.nan if v is None else v for k, v in json.loads(path.read_text()).items()}


def read_config(run_dir: Path) -> Config:
    """The Config of a run directory (its config.json)."""
    return Config.from_dict(json.loads((run_dir / "config.json").read_text()))


def finite_or_null(obj: Any) -> Any:
    """`obj` with every non-finite float, in any nested dict, list or tuple, replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    return obj


def write_csv_atomic(path: Path, df: pd.DataFrame) -> None:
    write_text_atomic(path, df.to_csv(index=False))


@functools.cache
def code_version() -> str:
    """A fingerprint of the library's source: sha256 over the path and bytes of every
    ``distsgd/**/*.py``, 12 hex digits. It changes with any edit, committed or not, and also
    where the package is installed without git. A finished run is reused only when made by the
    same code version, so an edited algorithm never shows an old result."""
    package = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def environment_info() -> dict[str, Any]:
    """What produced a result: versions, git commit, host and devices."""
    from importlib.metadata import version

    import torch

    from .paths import repo_root

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=repo_root(Path(__file__).parent),
                                  capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    cuda = torch.cuda.is_available()
    return {
        "python": sys.version.split()[0], "platform": platform.platform(),
        "torch": torch.__version__, "torchvision": version("torchvision"),
        "numpy": version("numpy"), "pandas": version("pandas"),
        "git_commit": git("rev-parse", "HEAD"), "git_dirty": bool(git("status", "--porcelain")),
        "code_version": code_version(),
        "hostname": socket.gethostname(), "cpu_count": os.cpu_count(),
        "cuda_available": cuda,
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
    }


def finished_code_version(run_dir: Path, config: Config) -> str | None:
    """The code version (`code_version`) that made the finished run of `config` in `run_dir`;
    None if there is no finished run of this config there. `distsgd.run` reuses a finished run
    only when this is the current code version: a result of edited code is stale."""
    summary = run_dir / "summary.json"
    if not summary.is_file():
        return None
    made = json.loads(summary.read_text())
    if made.get("status") != "finished" or made.get("config_hash") != config.hash():
        return None
    return str(made.get("code_version"))


def metrics_file(run_dir: Path, rank: int) -> Path:
    """Rank `rank`'s metrics rows, appended as they are logged (`MetricsLog`)."""
    return run_dir / "ranks" / f"metrics_rank{rank}.csv"


class MetricsLog:
    """One rank's metrics as they come: RUN_DIR/ranks/metrics_rank<r>.csv, its header written
    with the first row, each row appended and flushed as it is logged, so that a crash keeps
    every row logged before it and `python -m distsgd show` reads a running or failed run. The
    end-of-run merge (`merge_ranks`) reads these files. A checkpoint carries the file's text as
    it was at its step (`snapshot`), and a resumed run puts that text back (`restore`): rows a
    crashed attempt logged after the checkpoint are gone, so a resumed run's rows are an
    uninterrupted run's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] | None = None
        self._file: Any = None

    def append(self, row: dict[str, Any]) -> None:
        """Write `row` (the columns of the first row, in its order) and flush it to the OS."""
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", newline="")
            if self.columns is None:
                self.columns = list(row)
                self._file.write(",".join(self.columns) + "\n")
        if list(row) != self.columns:
            raise ValueError(f"metrics row with columns {list(row)}, the file has {self.columns}")
        self._file.write(",".join(_csv_value(row[c]) for c in self.columns) + "\n")
        self._file.flush()

    def snapshot(self) -> str:
        """The file's text now (fsynced first: a checkpoint never names rows the disk lacks)."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
        return self.path.read_text() if self.path.exists() else ""

    def restore(self, text: str) -> None:
        """Replace the file by `text` (a `snapshot`); the next rows are appended after it."""
        self.close()
        write_text_atomic(self.path, text)
        header = text.split("\n", 1)[0]
        self.columns = header.split(",") if header else None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _csv_value(value: Any) -> str:
    """One CSV field: numbers as Python writes them (the shortest text that reads back the same
    float; nan, inf), anything else quoted where it holds a comma or a quote."""
    if isinstance(value, (bool, int, float, np.number)):
        return repr(float(value)) if isinstance(value, (float, np.floating)) else str(value)
    text = str(value)
    if any(ch in text for ch in ',"\n'):
        text = '"' + text.replace('"', '""') + '"'
    return text


def read_metrics(path: Path) -> pd.DataFrame:
    """A rank's metrics file (`MetricsLog`), of a finished, running or failed run: a last line
    still being written (no newline yet) is left out."""
    text = path.read_text()
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    return pd.read_csv(io.StringIO(text)) if text.strip() else pd.DataFrame()


def board_writer(run_dir: Path, start: int) -> Any:
    """Rank 0's TensorBoard writer (`--tensorboard`) into RUN_DIR/tensorboard. A run resumed at
    step `start` purges the scalars its crashed attempt wrote after that step."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:            # validated before the run: only a changed environment
        from .config import TENSORBOARD_HINT
        raise ImportError(f"--tensorboard {TENSORBOARD_HINT}") from e
    return SummaryWriter(str(run_dir / "tensorboard"), purge_step=start + 1 if start else None)


def board_scalars(board: Any, row: dict[str, Any]) -> None:
    """A logged row as scalars, one tag per column, at its step (NaNs, no evaluation, left out)."""
    for key, value in row.items():
        if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
            board.add_scalar(key, value, row["step"])
    board.flush()


def rank_file(name: str, rank: int) -> str:
    """A rank's own file of a run-level file `name`: test_correct.pt -> test_correct_rank3.pt."""
    stem, dot, suffix = name.partition(".")
    return f"{stem}_rank{rank}{dot}{suffix}"


def write_rank_outputs(run_dir: Path, rank: int, final: dict, ledger: Ledger,
                       test_correct: "dict[str, torch.Tensor | None] | None" = None) -> None:
    """A rank's final metrics, its ledger and, per model of `TEST_CORRECT`, which test examples
    it classifies correctly (its metrics rows are on disk already: `MetricsLog`)."""
    ranks = run_dir / "ranks"
    write_json_atomic(ranks / f"final_rank{rank}.json", final)
    ledger.write_csv(ranks / f"comm_rank{rank}.csv")
    for model, correct in (test_correct or {}).items():
        if correct is not None:
            save_tensors(ranks / rank_file(TEST_CORRECT[model], rank), correct)


PID_FILE = "pid_rank{rank}"             # '<host> <pid>' of a rank's process, in RUN_DIR/ranks
LAUNCHER_ERROR = "launcher_error.txt"   # the local launcher's WorkerError, in RUN_DIR/ranks


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
    errors = sorted(ranks.glob("error_rank*.txt"), key=lambda f: f.stat().st_mtime) \
        if ranks.is_dir() else []
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


def save_tensors(path: Path, obj: Any) -> None:
    """Tensors and plain containers to `path` with torch.save, atomically (a temporary file in the
    same directory, then a rename): readers (`load_tensors`) never see half a file."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def save_model(run_dir: Path, model: "torch.nn.Module") -> None:
    """The final model (rank 0's, identical on every rank after finalize for averaging methods)."""
    save_tensors(run_dir / "model.pt", {k: v.detach().cpu() for k, v in model.state_dict().items()})


def load_tensors(path: Path | str) -> dict[str, Any]:
    """A file saved by the kit (model.pt, a checkpoint), on the CPU, read without running code: only
    tensors and plain containers are accepted (``weights_only=True``), so a tampered file that
    carries a pickled callable is refused with `pickle.UnpicklingError`, never executed."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)


def merge_metrics(per_rank: list[pd.DataFrame]) -> pd.DataFrame:
    """Rows of every rank merged by step: counts and samples summed over ranks, wall_s the
    slowest rank's, epoch and lr rank 0's, the rest averaged."""
    stacked = pd.concat(per_rank, keys=range(len(per_rank)), names=["rank", "row"])
    grouped = stacked.groupby("step", sort=True)
    merged = grouped.mean(numeric_only=True)
    for col in (*SUMMED, "samples"):
        merged[col] = grouped[col].sum()
    merged["wall_s"] = grouped["wall_s"].max()
    for col in ("epoch", "lr"):
        merged[col] = per_rank[0].set_index("step")[col]
    return merged.reset_index()


def merge_ranks(run_dir: Path, world_size: int, config: Config,
                nonfinite: "NonFinite | None" = None) -> None:
    """Rank 0, after the final barrier: merge per-rank outputs into the run's files. `nonfinite`:
    the run's first non-finite value (`distsgd.divergence`); the summary records it, and the
    status "diverged" where the run stopped there (on_nan="stop")."""
    ranks = run_dir / "ranks"
    merged = merge_metrics([read_metrics(metrics_file(run_dir, r)) for r in range(world_size)])

    finals = [read_summary(ranks / f"final_rank{r}.json") for r in range(world_size)]
    summary: dict[str, Any] = {k: sum(f[k] for f in finals) / world_size for k in finals[0]}
    for col in SUMMED:
        summary[col] = sum(f[col] for f in finals)
    summary["train_s"] = max(f["train_s"] for f in finals)
    stopped = nonfinite is not None and config.on_nan == "stop"
    done = int(merged["step"].iloc[-1])             # config.steps unless the run diverged
    summary.update({
        "status": "diverged" if stopped else "finished",
        "config_hash": config.hash(), "code_version": code_version(),
        "algo": config.algo,
        "params": config.params, "nproc": world_size, "steps": done,
        "step_time_s": summary["train_s"] / done,
        "throughput_samples_s": float(merged["samples"].iloc[-1]) / summary["train_s"],
        "bytes_per_step": summary["comm_bytes"] / done,
        "max_rank_spread_final_train_loss": float(np.ptp([f["final_train_loss"] for f in finals])),
    })
    if nonfinite is not None:
        summary["nonfinite"] = nonfinite.to_dict()
    comm = pd.concat([pd.read_csv(ranks / f"comm_rank{r}.csv").assign(rank=r)
                      for r in range(world_size)], ignore_index=True)
    write_csv_atomic(run_dir / "comm.csv", comm)
    for name in TEST_CORRECT.values():
        if (ranks / rank_file(name, 0)).exists():
            import torch
            save_tensors(run_dir / name, torch.stack([load_tensors(ranks / rank_file(name, r))
                                                      for r in range(world_size)]))
    write_csv_atomic(run_dir / "metrics.csv", merged)
    write_json_atomic(run_dir / "summary.json", summary)   # last: marks the run finished


@dataclass
class Result:
    """A finished run, read back from its directory."""

    path: Path
    config: Config
    summary: dict[str, Any]
    metrics: pd.DataFrame

    @classmethod
    def load(cls, path: Path | str) -> "Result":
        path = Path(path)
        return cls(path, read_config(path), read_summary(path / "summary.json"),
                   pd.read_csv(path / "metrics.csv"))

    @property
    def env(self) -> dict[str, Any]:
        return json.loads((self.path / "env.json").read_text())

    def state_dict(self) -> dict[str, Any]:
        """The final model's parameters and buffers (`load_tensors` of model.pt)."""
        return load_tensors(self.path / "model.pt")

    def comm(self) -> pd.DataFrame:
        """Every collective of every rank (the ledger)."""
        return pd.read_csv(self.path / "comm.csv")

    def test_correct(self, model: str = "final") -> np.ndarray:
        """Per test example (in the split's order), the fraction of ranks whose model classifies
        it correctly: 0 or 1 where the ranks hold one model. `model`: "final", the model after
        `finalize` (the mean is summary["final_test_acc"]), or "evaluated", the model the
        algorithm evaluates during the run (`Algorithm.evaluating`, e.g. SSD-SGD's local models)
        at the last step (the mean is the last metrics row's test_acc; a run with eval_every = 0
        has none). Paired accuracy tests compare these between runs (`claims.paired_accuracy_interval`)."""
        if model not in TEST_CORRECT:
            raise ValueError(f"test_correct model {model!r}: allowed values are {', '.join(TEST_CORRECT)}")
        path = self.path / TEST_CORRECT[model]
        if not path.exists():
            raise FileNotFoundError(f"{path}: no per-example test results (a regression task, a run without "
                                    "evaluations, or one finished by an older version of distsgd)")
        return load_tensors(path).double().mean(0).numpy()

    def step_seconds(self, after: int = 0) -> pd.Series:
        """Seconds per step of each logged interval (its wall-clock time over its steps), indexed
        by the interval's last step, for the intervals that end after step `after` (a warm-up to
        leave out); the first logged row only starts the clock."""
        m = self.metrics
        rate = pd.Series((m.wall_s.diff() / m.step.diff()).to_numpy(), index=m.step.to_numpy()).iloc[1:]
        return rate[rate.index > after]

    def steady_step_time(self) -> float:
        """Median seconds per step over the logged intervals (`step_seconds`, from the first logged
        step on): unlike summary["step_time_s"] (training time / steps), not moved by the first
        steps' set-up (connections, caches) or by one stall of a shared machine."""
        rate = self.step_seconds()
        return float(rate.median()) if len(rate) else float(self.summary["step_time_s"])

    @property
    def label(self) -> str:
        """A short human label: algo plus non-default parameters."""
        extras = ",".join(f"{k}={v}" for k, v in self.config.params.items()
                          if k in ("period", "ratio", "gamma"))
        return self.config.name or (f"{self.config.algo}({extras})" if extras else self.config.algo)

    def __repr__(self) -> str:
        s = self.summary
        return (f"Result({self.label}, steps={s['steps']}, final_train_loss={s['final_train_loss']:.4f}, "
                f"final_test_acc={s['final_test_acc']:.4f}, comm_bytes={s['comm_bytes']:.3g}, "
                f"train_s={s['train_s']:.1f}, path={self.path})")


# --------------------------------------------------------------------------- every run as one table

# Summary keys that repeat the config (the config's columns hold them) or are renamed.
_SUMMARY_SKIP = ("algo", "params", "nproc", "status", "config_hash", "code_version")
_ENV_COLUMNS = ("git_commit", "git_dirty", "torch", "python", "hostname", "cpu_count", "cuda_available")


def find_runs(directory: Path | str) -> list[Path]:
    """The run directories (those holding a config.json) at or anywhere below `directory`, sorted."""
    root = Path(directory)
    return sorted(p.parent for p in root.rglob("config.json")
                  if not {"ranks", "checkpoints"} & set(p.relative_to(root).parts[:-1]))


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level of dotted keys: {"params": {"period": 4}} -> {"params.period": 4}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        elif not isinstance(v, dict):
            out[f"{prefix}{k}"] = v
    return out


def run_status(run_dir: Path) -> str:
    """`status_of`'s status, with "unfinished" for "running" (still running, or not started)."""
    status = status_of(run_dir)[0]
    return "unfinished" if status == "running" else status


def _run_row(run_dir: Path) -> dict[str, Any]:
    """One row of `load_results`: run, status, the config's fields (dicts flattened: params.period),
    the summary's totals (steps_done: the steps it ran), hash, code version, env.* and path."""
    config = read_config(run_dir)
    summary = read_summary(run_dir / "summary.json") if (run_dir / "summary.json").is_file() else {}
    env = json.loads((run_dir / "env.json").read_text()) if (run_dir / "env.json").is_file() else {}
    row: dict[str, Any] = {"run": run_dir.name, "status": run_status(run_dir)}
    row.update(flatten(config.to_dict()))
    for key, value in summary.items():
        if key not in _SUMMARY_SKIP:
            row.update(flatten({"steps_done" if key == "steps" else key: value}))
    row["config_hash"] = summary.get("config_hash", config.hash())
    row["code_version"] = summary.get("code_version", env.get("code_version"))
    row.update({f"env.{k}": env[k] for k in _ENV_COLUMNS if k in env})
    row["path"] = str(run_dir)
    return row


def load_results(directory: Path | str, metrics: bool = False) -> pd.DataFrame:
    """Every run under `directory` (searched recursively: a results root, a notebook's `out`) as
    one tidy pandas table, for your own analysis and plots.

    One row per run: ``run`` (the directory's name), ``status`` ("finished", "diverged",
    "stopped", "failed", "unfinished": `run_status`), every `Config` field as a column (``algo``, ``nproc``, ``lr``, ...;
    dict fields flattened with dots: ``params.period``, ``model_options.hidden``), the summary's
    final evaluation and totals (``final_train_loss``, ``final_test_acc``, ``comm_bytes``,
    ``train_s``, ``step_time_s``, ..., ``steps_done``: the steps it ran; NaN for a run without a
    summary), ``config_hash``, ``code_version``, ``env.*`` (git commit, torch, host) and ``path``.

    ``metrics=True``: instead, the long table of every logged step (metrics.csv) of every run that
    has one (finished or diverged), one row per run and step, with the run's ``run``, ``status``
    and config columns first (a logged column named like a config field gets ``_at_step``:
    ``lr_at_step`` is the scheduled learning rate, ``lr`` the config's peak), ready for e.g. ``seaborn.lineplot(df, x="step", y="train_loss",
    hue="algo")``.

    Raises ConfigError when `directory` does not exist or holds no run."""
    root = Path(directory)
    if not root.is_dir():
        from .errors import ConfigError
        raise ConfigError("directory", str(root), hint="no such directory")
    runs = find_runs(root)
    if not runs:
        from .errors import ConfigError
        raise ConfigError("directory", str(root),
                          hint="holds no run: no folder with a config.json, as distsgd.run writes, at or below it")
    rows = [_run_row(r) for r in runs]
    if not metrics:
        return _ordered(pd.DataFrame(rows))
    fields = {f.name for f in dataclasses.fields(Config)}
    frames = []
    for run_dir, row in zip(runs, rows):
        if (run_dir / "metrics.csv").is_file():
            steps = pd.read_csv(run_dir / "metrics.csv")
            steps = steps.rename(columns={c: f"{c}_at_step" for c in steps.columns if c in fields})
            ids = {k: v for k, v in row.items() if k in ("run", "status") or k.split(".")[0] in fields}
            frames.append(pd.concat([pd.DataFrame({k: [v] * len(steps) for k, v in ids.items()},
                                                  index=steps.index), steps], axis=1))
    if not frames:
        return pd.DataFrame(columns=["run", "status", *sorted(fields), "step"])
    return _ordered(pd.concat(frames, ignore_index=True))


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """Columns in a fixed order: run, status, the config's fields in Config's order (a dict field's
    keys sorted in its place), then the rest as found (totals, or the logged metrics), then
    config_hash, code_version, env.*, path."""
    head = ["run", "status"]
    for f in dataclasses.fields(Config):
        head += [f.name] if f.name in df else sorted(c for c in df.columns if c.startswith(f.name + "."))
    tail = [c for c in ("config_hash", "code_version") if c in df]
    tail += [c for c in df.columns if c.startswith("env.")] + (["path"] if "path" in df else [])
    return df[[*head, *(c for c in df.columns if c not in head and c not in tail), *tail]]

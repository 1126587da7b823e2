"""One rank's entry point: environment -> device and process group -> `loop.Trainer` -> error file.

Every rank runs `run_worker(run_dir)`, in place under torchrun/srun or in a process started by
`distsgd.training.launch.spawn` (`main`, what `python -m distsgd worker RUN_DIR` runs). The rank and world
come from torchrun-style environment variables. What a local launcher and its ranks exchange
besides lives here too: a failed rank's traceback (`error_file`), rank 0's progress
(`progress_file`, when $DISTSGD_PROGRESS=file) and the fault injection of the tests
($DISTSGD_INJECT_FAULT). SIGTERM and SIGUSR1 (SLURM's notice of a preemption or the time limit)
are noted (`StopSignals`), and so is the file $DISTSGD_STOP_FILE once it exists (a batch
script's notice to every rank of every run, `reproduce/slurm/papermill.sbatch`); at the next log
step every rank saves a checkpoint and the run stops (`loop.Trainer`). The local launcher stops the surviving ranks of a failed run with SIGTERM,
and kills them 5 s later where they are blocked in a collective.
"""
from __future__ import annotations

import json
import os
import signal
import time
import traceback
from pathlib import Path
from typing import Callable

import torch

from .. import files
from . import liveness
from .cluster import adopt_slurm_env
from ..comm import Comm, parse_net
from .config import Config
from .loop import Trainer

FAULT_ENV = "DISTSGD_INJECT_FAULT"      # "RANK:STEP[:HOW]": that rank raises (or dies, or is signalled)
STOP_SIGNALS = {"term": signal.SIGTERM, "usr1": signal.SIGUSR1}   # what SLURM sends before the end
STOP_FILE_ENV = "DISTSGD_STOP_FILE"     # a file whose existence asks every rank to checkpoint and stop
PROGRESS_ENV = "DISTSGD_PROGRESS"       # "file": rank 0 writes its step for the launcher; else a tqdm bar
ERROR_FILE = "error_rank{rank}.txt"     # a failed rank's traceback, in RUN_DIR/ranks


def error_file(run_dir: Path, rank: int | str) -> Path:
    """Where rank `rank` leaves its traceback when it fails; the launcher reads it."""
    return run_dir / "ranks" / ERROR_FILE.format(rank=rank)


def progress_file(run_dir: Path) -> Path:
    """Where the ranks write '<step> <loss>' for the launcher's progress bar."""
    return run_dir / "ranks" / "progress"


def resolve_device(config: Config, local_rank: int) -> torch.device:
    """cuda:<local_rank> when asked for (or 'auto' and CUDA is present), else cpu."""
    want_cuda = config.device == "cuda" or (config.device == "auto" and config.backend != "gloo"
                                            and torch.cuda.is_available())
    if want_cuda:
        if not torch.cuda.is_available():
            raise RuntimeError("device=cuda but torch.cuda.is_available() is False on this host")
        torch.cuda.set_device(local_rank)
        return torch.device("cuda", local_rank)
    return torch.device("cpu")


def resolve_backend(config: Config, device: torch.device) -> str:
    """The configured backend; 'auto': nccl on a GPU, else gloo."""
    if config.backend != "auto":
        return config.backend
    return "nccl" if device.type == "cuda" else "gloo"


def injected_fault(rank: int) -> Callable[[int], None] | None:
    """Fault injection for testing the failure path: with $DISTSGD_INJECT_FAULT=RANK:STEP[:HOW],
    rank RANK raises (HOW "raise", the default), dies by SIGKILL ("kill"), or sends itself SIGTERM
    ("term") or SIGUSR1 ("usr1") and trains on, when it reaches STEP, first printing to its
    output (its log) what it does and the time; None for every other rank. Under torchrun only
    in the job's first attempt ($TORCHELASTIC_RESTART_COUNT 0), so that a job restarted by
    `torchrun --max-restarts` gets past the fault."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec or os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") != "0":
        return None
    parts = spec.split(":")
    if int(parts[0]) != rank:
        return None
    at, how = int(parts[1]), parts[2] if len(parts) > 2 else "raise"

    def fault(step: int) -> None:
        if step != at:
            return
        print(f"{FAULT_ENV}: {how} at step {step}, time {time.time():.3f}", flush=True)
        if how == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if how in STOP_SIGNALS:
            os.kill(os.getpid(), STOP_SIGNALS[how])
            return
        raise RuntimeError(f"injected fault at step {step} ({FAULT_ENV})")

    return fault


class StopSignals:
    """Notes SIGTERM and SIGUSR1 instead of dying of them, so that the loop can save a checkpoint
    with every rank at its next log step; calling it says whether one arrived or the stop file
    ($DISTSGD_STOP_FILE, where set) exists."""

    def __init__(self) -> None:
        self.received = False
        self.stop_file = os.environ.get(STOP_FILE_ENV, "")
        for sig in STOP_SIGNALS.values():
            signal.signal(sig, self._note)

    def _note(self, signum: int, frame: object) -> None:
        self.received = True

    def __call__(self) -> bool:
        return self.received or (bool(self.stop_file) and os.path.exists(self.stop_file))


def run_worker(run_dir: Path, config: Config | None = None) -> None:
    """One rank of the run in `run_dir`. The config is read from the run directory unless given."""
    if config is None:
        config = Config.from_dict(json.loads((run_dir / "config.json").read_text()))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = resolve_device(config, local_rank)
    if device.type == "cpu":
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    comm = Comm.from_env(resolve_backend(config, device), device, parse_net(config.net),
                         config.timeout_s)
    try:
        liveness.write_pid_file(run_dir, comm.rank)     # after joining: rank 0 prepared the directory
        progress = progress_file(run_dir) if os.environ.get(PROGRESS_ENV) == "file" else None
        Trainer(config, comm, run_dir, progress, injected_fault(comm.rank), StopSignals()).train()
    except BaseException:
        record_error(run_dir)        # before the group closes and the peers fail in turn
        raise
    finally:
        comm.close()


def main(run_dir: Path) -> int:
    """`python -m distsgd worker RUN_DIR`, a spawned rank or one task of an srun step (its place
    read from SLURM's variables, `cluster.adopt_slurm_env`): on any error (joining the group
    included), write the traceback where the launcher looks for it, then fail."""
    try:
        config = Config.from_dict(json.loads((run_dir / "config.json").read_text()))
        adopt_slurm_env(config.backend)
        run_worker(run_dir, config)
    except BaseException:
        record_error(run_dir)
        raise
    return 0


def record_error(run_dir: Path) -> None:
    """Write the exception being handled where the launcher looks for this rank's cause, unless
    already written: the launcher takes the earliest error file as the root cause. The file's
    modification time is the moment of the call to the nanosecond (`os.utime`): the kernel's own
    stamp ticks in jiffies, so a peer failing in turn milliseconds later could tie with it."""
    failed_ns = time.time_ns()
    path = error_file(run_dir, os.environ.get("RANK", "?"))
    if not path.exists():
        files.write_text_atomic(path, traceback.format_exc())
        os.utime(path, ns=(failed_ns, failed_ns))

"""Starting and supervising the worker processes of a run.

Two ways, one code path for the workers (`distsgd.worker.run_worker`, which reads the
torchrun-style environment: RANK, WORLD_SIZE, LOCAL_RANK, and MASTER_ADDR, MASTER_PORT or a
local rendezvous file):

- spawn (a laptop, one GPU box, a notebook kernel): start `nproc` worker processes on this
  machine, each running what `python -m distsgd worker RUN_DIR` runs (`worker.main`) with the
  torchrun variables in its environment, one intra-op thread on CPU (as torchrun sets
  OMP_NUM_THREADS=1) or its own GPU, and supervise them. When any worker fails, the others are
  stopped at once and `WorkerError` names the rank and its traceback. The ranks meet through a
  file in RUN_DIR/ranks, their sockets on the loopback interface: a local run listens on no
  address another host can reach (`local_rank_env`). The workers are forked
  from a multiprocessing *forkserver* that has imported torch and the library once (neither
  CUDA nor any thread pool is started there), so a run does not pay torch's import (seconds of
  CPU) per rank; a notebook that starts dozens of runs keeps one forkserver.
- env (torchrun or srun on a cluster): this process already is one rank; run it in place.
  torchrun does the supervising there.
"""
from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import tempfile
import time
import traceback
import types
import uuid
from contextlib import contextmanager
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Iterator
from pathlib import Path

from .comm.comm import INIT_METHOD_ENV
from .config import Config
from .errors import ConfigError, WorkerError
from .worker import PROGRESS_ENV, error_file, main as worker_main, progress_file, run_worker

# distsgd.worker: the loop, algorithms, models and data; torch._dynamo: torch.optim's first
# optimizer imports it (about 3 s of CPU per rank otherwise)
PRELOAD = ["distsgd.worker", "torch._dynamo"]


def launcher_for(config: Config) -> str:
    """'env' when this process was started by torchrun/srun with a world set, else 'spawn'."""
    if config.launcher != "auto":
        return config.launcher
    return "env" if "WORLD_SIZE" in os.environ and "RANK" in os.environ else "spawn"


def launch(config: Config, run_dir: Path) -> None:
    """Run the workers of `config` writing into `run_dir`; raise WorkerError on failure."""
    if launcher_for(config) == "env":
        run_worker(run_dir, config)
    else:
        spawn(config, run_dir)


def loopback_interface() -> str:
    """The loopback interface's name ('lo' on Linux, 'lo0' on macOS)."""
    names = [name for _, name in socket.if_nameindex()]
    return next((n for n in names if n == "lo" or (n.startswith("lo") and n[2:].isdigit())), "lo")


TCP_RENDEZVOUS = ("MASTER_ADDR", "MASTER_PORT")   # torchrun's; dropped from a local rank's environment


def rendezvous_file(directory: Path) -> Path:
    """A fresh rendezvous file in `directory` for one local group of ranks."""
    return Path(directory).resolve() / f"rendezvous-{uuid.uuid4().hex}"


def file_url(path: Path) -> str:
    """The file:// URL of `path` as torch's file rendezvous reads it: it takes the URL's path
    verbatim (`urlparse(url).path`, no percent-decoding), so `Path.as_uri()`'s escapes (' ' ->
    %20, '=' -> %3D) would name another file and the ranks would wait for each other until the
    join timeout. '?' and '#' cannot be carried (they start the query and fragment): refused."""
    text = str(path)
    if "?" in text or "#" in text:
        raise ValueError(f"a run directory for local ranks may not contain '?' or '#': {text}")
    return "file://" + text


def local_rank_env(rank: int, world_size: int, rendezvous: Path) -> dict[str, str]:
    """What local rank `rank` needs to join its group (`distsgd.comm.join_group`): the torchrun
    variables and a file rendezvous instead of a TCP store (which would listen on every interface),
    with gloo's and NCCL's bootstrap sockets on the loopback interface. A local run opens no
    socket that another host can reach."""
    lo = loopback_interface()
    return {"RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
            "LOCAL_WORLD_SIZE": str(world_size), INIT_METHOD_ENV: file_url(rendezvous),
            "GLOO_SOCKET_IFNAME": lo, "NCCL_SOCKET_IFNAME": lo}


def worker_env(rank: int, world_size: int, rendezvous: Path, gpus: int) -> dict[str, str]:
    """Environment of local worker `rank`: this process's, the local rank variables, thread limits."""
    env = {k: v for k, v in os.environ.items() if k not in TCP_RENDEZVOUS}
    env.update(local_rank_env(rank, world_size, rendezvous))
    env[PROGRESS_ENV] = "file"
    if gpus == 0:
        env["OMP_NUM_THREADS"] = "1"
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    return env


def spawn(config: Config, run_dir: Path) -> None:
    """Start `config.nproc` local workers and wait for all; fail fast if any fails."""
    import torch

    gpus = torch.cuda.device_count() if config.device != "cpu" and config.backend != "gloo" else 0
    if config.device == "cuda" and gpus < config.nproc:
        raise ConfigError("nproc", config.nproc, f"at most {gpus} (GPUs on this host, one per rank)")
    ranks_dir = run_dir / "ranks"
    ranks_dir.mkdir(parents=True, exist_ok=True)
    rendezvous = rendezvous_file(ranks_dir)
    ctx = _forkserver(config)
    procs: list[BaseProcess] = []
    try:
        for rank in range(config.nproc):
            procs.append(ctx.Process(target=_worker, name=f"distsgd-rank{rank}", args=(
                str(run_dir), worker_env(rank, config.nproc, rendezvous, gpus), str(ranks_dir / f"rank{rank}.log"))))
            with _bare_main():
                procs[-1].start()
        _supervise(procs, run_dir, config)
    finally:
        _stop(procs)
        rendezvous.unlink(missing_ok=True)


def _rank_entry(rank: int, world: int, rendezvous: Path, join: str | None, fn: Callable, args: tuple,
                queue) -> None:
    for key in TCP_RENDEZVOUS:
        os.environ.pop(key, None)
    os.environ.update(local_rank_env(rank, world, rendezvous))
    import torch
    import torch.distributed as dist

    from .comm.comm import join_group

    torch.set_num_threads(1)
    try:
        if join:
            join_group(join)
        out = fn(rank, world, *args)
        if join:
            dist.destroy_process_group()
        queue.put((rank, True, out))
    except BaseException:
        queue.put((rank, False, traceback.format_exc()))


def on_ranks(fn: Callable, world: int, *args: Any, timeout: float = 900,
             join: str | None = "gloo") -> list[Any]:
    """`fn(rank, world, *args)` on `world` fresh local processes, every rank's return value in rank
    order: the benchmarks' and the tests' rank launcher (runs use `spawn`). The ranks first join
    one `join` process group (None: `fn` joins it, e.g. with `Comm.from_env`), through a file
    rendezvous and loopback sockets like a run's. `fn` must be importable (multiprocessing spawn).
    A failing rank raises RuntimeError with its traceback, naming any rank that died."""
    import torch.multiprocessing as mp

    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    with tempfile.TemporaryDirectory(prefix="distsgd-ranks-") as tmp:
        rendezvous = rendezvous_file(Path(tmp))
        procs = [ctx.Process(target=_rank_entry, args=(r, world, rendezvous, join, fn, args, queue))
                 for r in range(world)]
        for proc in procs:
            proc.start()
        results: dict[int, Any] = {}
        try:
            for _ in range(world):
                rank, ok, value = queue.get(timeout=timeout)
                if not ok:
                    time.sleep(1)                   # a peer that vanished is the likelier cause
                    dead = [f"rank {r} exit code {q.exitcode}" for r, q in enumerate(procs)
                            if q.exitcode not in (None, 0)]
                    raise RuntimeError(f"rank {rank} failed ({', '.join(dead) or 'no rank died'}):\n{value}")
                results[rank] = value
        finally:
            for proc in procs:
                proc.join(timeout=10)
                if proc.is_alive():
                    proc.kill()
    return [results[r] for r in range(world)]


def _forkserver(config: Config) -> multiprocessing.context.BaseContext:
    """The multiprocessing context whose server process has imported `PRELOAD` and the modules
    of the first run's dataset and model (torchvision or scikit-learn take seconds to import,
    paid by every rank otherwise). The server starts with the first run of this process and
    then serves every later run; a run whose modules it lacks imports them in its workers."""
    from .data import loader_module
    from .models import builder_module

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD + [loader_module(config.data), builder_module(config.model)])
    return ctx


@contextmanager
def _bare_main() -> Iterator[None]:
    """Hide the caller's `__main__` while a worker starts. multiprocessing would otherwise re-run
    the caller's script in the worker (its "main module" preparation), so a plain script calling
    `distsgd.run` without an `if __name__ == "__main__"` guard would start runs recursively. The
    workers need nothing from `__main__`."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _worker(run_dir: str, env: dict[str, str], log: str) -> None:
    """One rank, in a process forked from the forkserver: this run's environment (the server's
    is from when it started), output to the rank's log, then `python -m distsgd worker`'s body."""
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.exit(worker_main(Path(run_dir)))


def _supervise(procs: list[BaseProcess], run_dir: Path, config: Config) -> None:
    bar = None
    if config.progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=config.steps, desc=config.run_name(), unit="step", leave=False)
    progress = progress_file(run_dir)
    try:
        while True:
            codes = [p.exitcode for p in procs]
            failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
            if failed:
                time.sleep(0.5)                     # let a peer's death (its exit code) arrive too
                codes = [p.exitcode for p in procs]
                failed = [r for r, c in enumerate(codes) if c not in (None, 0)]
                _stop(procs)
                rank = _first_failure(run_dir, failed, codes)
                raise WorkerError(rank, _cause(run_dir, rank, codes[rank]))
            if all(c == 0 for c in codes):
                return
            if bar is not None and progress.exists():
                try:
                    step, loss = progress.read_text().split()
                    bar.update(int(step) - bar.n)
                    bar.set_postfix(loss=f"{float(loss):.4f}", refresh=False)
                except (ValueError, OSError):
                    pass
            time.sleep(0.1)
    finally:
        if bar is not None:
            bar.close()


def _first_failure(run_dir: Path, failed: list[int], codes: list[int | None]) -> int:
    """The rank that failed first, the root cause; the others often fail afterwards only because
    their peer vanished. A rank killed by a signal (it could write no error file) is taken first,
    then the earliest error file."""
    killed = [r for r in failed if (codes[r] or 0) < 0 and not error_file(run_dir, r).exists()]
    if killed:
        return killed[0]
    return min(failed, key=lambda r: error_file(run_dir, r).stat().st_mtime
               if error_file(run_dir, r).exists() else float("inf"))


def _cause(run_dir: Path, rank: int, code: int | None) -> str:
    err = error_file(run_dir, rank)
    if err.exists():
        return err.read_text()
    log = run_dir / "ranks" / f"rank{rank}.log"
    tail = log.read_text()[-4000:] if log.exists() else ""
    status = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return f"process {status}; last output:\n{tail}"


def _stop(procs: list[BaseProcess], grace_s: float = 5.0) -> None:
    """Terminate the workers still running; kill them if they ignore SIGTERM."""
    alive = [p for p in procs if p.exitcode is None]
    for p in alive:
        p.terminate()
    deadline = time.time() + grace_s
    for p in alive:
        p.join(timeout=max(0.0, deadline - time.time()))
        if p.exitcode is None:
            p.kill()
            p.join()

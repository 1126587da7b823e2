"""Starting and supervising the worker processes of a run.

Three ways, one code path for the workers (`distsgd.training.worker.run_worker`, which reads the
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
- srun (a notebook's kernel inside a SLURM allocation of several nodes): start the run's ranks
  as one job step across the allocation's nodes (`srun_command`: on GPUs the fewest nodes that
  give each rank its own GPU, on CPUs one node per rank up to every node; the head node first),
  each rank running ``python -m distsgd worker RUN_DIR`` with its place read from SLURM's
  variables. One rendezvous per run: rank 0's TCP store on the first node at a port free on this
  host (the head node); gloo's and NCCL's sockets on the interfaces GLOO_SOCKET_IFNAME /
  NCCL_SOCKET_IFNAME name in this process's environment, else those the libraries choose (never
  pinned to loopback). Rank r writes RUN_DIR/ranks/rank<r>.log, srun itself RUN_DIR/ranks/srun.log;
  ``--kill-on-bad-exit`` stops the step when a rank fails, and `WorkerError` names the first rank
  srun reports failed and its cause (`step_failure`). Site-specific srun options (GPU binding, a
  partition's constraints) come from $DISTSGD_SRUN_ARGS.
- env (torchrun or srun on a cluster): this process already is one rank; run it in place.
  torchrun does the supervising there.

Which one 'auto' means (`detect_launcher`): env where RANK and WORLD_SIZE are set; else what
$DISTSGD_LAUNCHER asks (spawn or srun); else srun inside a SLURM job of several nodes (not from
within one of its steps), else spawn. Every run is checked against the GPUs it may use before any
rank starts (`distsgd.training.allocation.check_fits`, called by `distsgd.run`).

`on_ranks(fn, p, ...)` (benchmarks, tests) starts its ranks through the same mechanisms as a run,
chosen the same way: locally (`start_ranks`: forkserver, environment, file rendezvous on loopback,
output to a per-rank log; `supervise`: fail fast when a rank dies, `WorkerError` naming the rank
and its cause), or as one srun step across the allocation's nodes (`start_step`, `wait_step`: the
same command, rendezvous, per-rank logs and failure report as a run's step), each rank running
``python -m distsgd call CALL_DIR``. Only what a rank runs differs: the call's function and
arguments, pickled into the call's directory, and each rank's return value pickled back beside
them (`_call_on_rank`, `call_main`); a deadline so that nothing hangs. `on_this_rank` is its `env` counterpart.
"""
from __future__ import annotations

import functools
import json
import math
import multiprocessing
import os
import pickle
import re
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import types
import uuid
from contextlib import contextmanager, nullcontext
from multiprocessing.process import BaseProcess
from typing import Any, Callable, Iterator, Mapping, Sequence
from pathlib import Path

from ..comm.comm import INIT_METHOD_ENV
from .allocation import Allocation, wants_gpus
from .cluster import adopt_slurm_env, expand_nodelist
from .config import Config
from ..errors import ConfigError, WorkerError
from ..paths import results_root
from ..files import write_bytes_atomic, write_text_atomic
from .liveness import LAUNCHER_ERROR, failed_ranks_errors
from .worker import PROGRESS_ENV, error_file, main as worker_main, progress_file, record_error, run_worker

# distsgd.training.worker: the loop, algorithms, models and data; torch._dynamo: torch.optim's first
# optimizer imports it (about 3 s of CPU per rank otherwise)
PRELOAD = ["distsgd.training.worker", "torch._dynamo"]


LAUNCHER_ENV = "DISTSGD_LAUNCHER"     # 'spawn' or 'srun': what launcher 'auto' means in this process
SRUN_ARGS_ENV = "DISTSGD_SRUN_ARGS"   # a site's own srun options, split as a shell splits them
SRUN_LOG = "srun.log"                 # srun's own output, in RUN_DIR/ranks


def launcher_for(config: Config) -> str:
    """The launcher of `config` in this process (`detect_launcher`)."""
    return detect_launcher(config.launcher)


def detect_launcher(choice: str, env: Mapping[str, str] = os.environ) -> str:
    """`choice` ('spawn', 'srun' or 'env'), or for 'auto': 'env' when this process was started by
    torchrun/srun with a world set (RANK and WORLD_SIZE); else $DISTSGD_LAUNCHER ('spawn' or
    'srun'); else 'srun' inside a SLURM job of several nodes, from its batch script or an
    allocation's shell (not from within one of its steps, SLURM_STEP_ID); else 'spawn'."""
    if choice != "auto":
        return choice
    if "WORLD_SIZE" in env and "RANK" in env:
        return "env"
    asked = env.get(LAUNCHER_ENV, "")
    if asked:
        if asked not in ("spawn", "srun"):
            raise ConfigError(LAUNCHER_ENV, asked, ("spawn", "srun"))
        return asked
    nodelist = env.get("SLURM_JOB_NODELIST", "")
    if env.get("SLURM_JOB_ID") and nodelist and "SLURM_STEP_ID" not in env and len(expand_nodelist(nodelist)) > 1:
        return "srun"
    return "spawn"


def launch(config: Config, run_dir: Path) -> None:
    """Run the workers of `config` writing into `run_dir`; raise WorkerError on failure."""
    launcher = launcher_for(config)
    if launcher == "env":
        run_worker(run_dir, config)
    elif launcher == "srun":
        srun(config, run_dir, Allocation.detect())
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
    ctx = _forkserver(config)
    with start_ranks(ctx, run_dir, config.nproc, gpus, hide_main=True,
                     body=lambda rank: functools.partial(worker_main, run_dir)) as procs:
        _watch(config, run_dir, lambda poll: supervise(procs, run_dir, poll=poll))


def _watch(config: Config, run_dir: Path, wait: Callable[[Callable[[], None]], None]) -> None:
    """`wait(poll)` for a run's ranks, `poll` feeding its progress bar; a `WorkerError` is also
    written to RUN_DIR/ranks/launcher_error.txt, for `python -m distsgd show`."""
    bar = _ProgressBar(config, run_dir)
    try:
        wait(bar.poll)
        bar.finish()
    except WorkerError as e:
        write_text_atomic(run_dir / "ranks" / LAUNCHER_ERROR, str(e))
        raise
    finally:
        bar.close()


def free_port() -> int:
    """A TCP port free on this host now (the OS's choice)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def step_nodes(nproc: int, allocation: Allocation, gpus: bool) -> list[str]:
    """The nodes of a run's step, the head node first: on GPUs the fewest that give every rank
    its own GPU (`check_fits` has checked that they exist), on CPUs one per rank up to all."""
    count = -(-nproc // allocation.gpus_per_node) if gpus else min(nproc, len(allocation.nodes))
    return list(allocation.nodes[:count])


def srun_command(name: str, nproc: int, run_dir: Path, allocation: Allocation, gpus: bool,
                 command: Sequence[str], extra: Sequence[str] = (), cpus_on_node: int = 1) -> list[str]:
    """The srun command of one step named `name` in `run_dir` (a run's, or an `on_ranks` call's):
    `nproc` tasks, one per rank, block-distributed over `step_nodes`, that may share the
    allocation's CPUs with other steps (``--overlap``: notebooks run side by side), stopped when a
    rank fails (``--kill-on-bad-exit``), each rank's output in RUN_DIR/ranks/rank<r>.log, each
    running ``python -m distsgd COMMAND...``. GPU ranks get an equal share of a node's
    `cpus_on_node` CPUs; CPU ranks one CPU each, more ranks than CPUs allowed (``--overcommit``, as
    a local run shares the cores). `extra`: the site's options, before the command."""
    nodes = step_nodes(nproc, allocation, gpus)
    per_node = -(-nproc // len(nodes))
    cpus = max(1, cpus_on_node // per_node) if gpus else 1
    cmd = ["srun", f"--job-name={name}", f"--nodes={len(nodes)}", f"--ntasks={nproc}",
           f"--ntasks-per-node={per_node}", f"--nodelist={','.join(nodes)}", "--distribution=block",
           f"--cpus-per-task={cpus}", "--overlap", "--kill-on-bad-exit=1",
           f"--output={run_dir / 'ranks' / 'rank%t.log'}"]
    if not gpus:
        cmd.append("--overcommit")
    return cmd + list(extra) + [sys.executable, "-m", "distsgd", *command]


def srun_env(master: str, port: int, gpus: bool) -> dict[str, str]:
    """The environment srun passes to every rank of a step: this process's, without a local
    rank's variables, with the step's rendezvous (MASTER_ADDR, MASTER_PORT), rank 0's progress
    in a file, NCCL's asynchronous error handling, one intra-op thread per CPU rank, and one
    string hash seed for all (PYTHONHASHSEED, this process's where set, else 0): ranks forked
    locally share their parent's, so a set of strings iterates in one order on every rank."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", INIT_METHOD_ENV)}
    env.update({"MASTER_ADDR": master, "MASTER_PORT": str(port), PROGRESS_ENV: "file"})
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env.setdefault("PYTHONHASHSEED", "0")
    if not gpus:
        env["OMP_NUM_THREADS"] = "1"
    return env


def start_step(name: str, nproc: int, run_dir: Path, allocation: Allocation, gpus: bool,
               command: Sequence[str]) -> subprocess.Popen:
    """Start one srun step of `nproc` ranks across `allocation` (`srun_command`, with the site's
    options from $DISTSGD_SRUN_ARGS and this node's CPUs), meeting at a rendezvous of its own:
    rank 0's TCP store on the step's first node at a port free on this host (`srun_env`). srun's
    own output goes to RUN_DIR/ranks/srun.log, after the command."""
    cmd = srun_command(name, nproc, run_dir, allocation, gpus, command,
                       shlex.split(os.environ.get(SRUN_ARGS_ENV, "")),
                       int(os.environ.get("SLURM_CPUS_ON_NODE") or os.cpu_count() or 1))
    env = srun_env(step_nodes(nproc, allocation, gpus)[0], free_port(), gpus)
    ranks = run_dir / "ranks"
    ranks.mkdir(parents=True, exist_ok=True)
    with open(ranks / SRUN_LOG, "w") as log:
        log.write(shlex.join(cmd) + "\n")
        log.flush()
        return subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)


def wait_step(proc: subprocess.Popen, run_dir: Path, poll: Callable[[], None] | None = None,
              timeout: float | None = None) -> None:
    """Wait for the srun step `proc` (`start_step`) to end, calling `poll` every 0.1 s; a failed
    rank raises `WorkerError` (`step_failure`), a step still running after `timeout` s is stopped
    and raises TimeoutError. Leaving early (Ctrl-C in the kernel) stops the step."""
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while proc.poll() is None:
            if poll is not None:
                poll()
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"srun step still running after {timeout:g} s: stopped")
            time.sleep(0.1)
    finally:
        _stop_step(proc)
    if proc.returncode:
        raise step_failure(run_dir, proc.returncode)


def srun(config: Config, run_dir: Path, allocation: Allocation) -> None:
    """Start the ranks of `config` as one srun step across `allocation` (the module doc), each
    running ``python -m distsgd worker RUN_DIR``, and wait for it (`wait_step`)."""
    gpus = wants_gpus(config, allocation.gpus_per_node > 0)
    proc = start_step(config.run_name(), config.nproc, run_dir, allocation, gpus, ["worker", str(run_dir)])
    _watch(config, run_dir, lambda poll: wait_step(proc, run_dir, poll))


def _stop_step(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    """Stop an srun still running: SIGTERM (srun passes it to the ranks, which save a checkpoint
    at their next log step), SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


_SRUN_TASK = re.compile(r"srun: error: (\S+): tasks? (\d+)(?:-\d+)?: (.+)$")


def step_failure(run_dir: Path, returncode: int) -> Exception:
    """The error of an srun step that exited with `returncode`: `WorkerError` naming the first
    rank srun reports failed (RUN_DIR/ranks/srun.log, in the order the ranks ended: the root
    cause, the others were stopped after it) with its traceback (its error file) or how it
    ended, its node and its log's tail; RuntimeError with srun's output where no rank started."""
    text = (run_dir / "ranks" / SRUN_LOG).read_text()
    failed = [m for m in map(_SRUN_TASK.search, text.splitlines()) if m]
    if not failed:
        errors = failed_ranks_errors(run_dir / "ranks")
        if errors:
            rank = int(errors[0].stem.removeprefix("error_rank"))
            return WorkerError(rank, errors[0].read_text())
        return RuntimeError(f"srun exited with status {returncode} before any rank ran; its output:\n{text[-4000:]}")
    node, rank, how = failed[0].group(1), int(failed[0].group(2)), failed[0].group(3)
    err = error_file(run_dir, rank)
    if err.exists():
        return WorkerError(rank, err.read_text())
    log = run_dir / "ranks" / f"rank{rank}.log"
    tail = log.read_text()[-4000:] if log.exists() else ""
    return WorkerError(rank, f"process on {node}: {how}; last output:\n{tail}")


@contextmanager
def start_ranks(ctx: multiprocessing.context.BaseContext, run_dir: Path, world: int, gpus: int,
                hide_main: bool, body: Callable[[int], Callable[[], int | None]]) -> Iterator[list[BaseProcess]]:
    """Start `world` local ranks from `ctx`, rank r running `body(r)()` with its environment
    (`worker_env`: torchrun variables, the file rendezvous in RUN_DIR/ranks, loopback sockets) and
    its output in RUN_DIR/ranks/rank<r>.log; on leaving, stop those still running and remove the
    rendezvous file. `hide_main`: start them with the caller's `__main__` hidden (`_bare_main`)."""
    ranks_dir = run_dir / "ranks"
    ranks_dir.mkdir(parents=True, exist_ok=True)
    rendezvous = rendezvous_file(ranks_dir)
    procs: list[BaseProcess] = []
    try:
        for rank in range(world):
            procs.append(ctx.Process(target=_rank_main, name=f"distsgd-rank{rank}", args=(
                worker_env(rank, world, rendezvous, gpus), str(ranks_dir / f"rank{rank}.log"), body(rank))))
            with _bare_main() if hide_main else nullcontext():
                procs[-1].start()
        yield procs
    finally:
        _stop(procs)
        rendezvous.unlink(missing_ok=True)


def _rank_main(env: dict[str, str], log: str, body: Callable[[], int | None]) -> None:
    """One local rank, in a process forked from the forkserver: this group's environment (the
    server's is from when it started), output to the rank's log, one intra-op thread on CPU (as
    torchrun sets OMP_NUM_THREADS=1), then `body`; its return value is the exit status."""
    os.environ.clear()
    os.environ.update(env)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    if "OMP_NUM_THREADS" in env:
        import torch
        torch.set_num_threads(int(env["OMP_NUM_THREADS"]))
    sys.exit(body())


CALL_FILE = "call.pkl"                # an `on_ranks` call's function, arguments and group, in CALL_DIR


def result_file(run_dir: Path, rank: int) -> Path:
    """Where rank `rank` of an `on_ranks` call leaves its pickled return value."""
    return run_dir / "ranks" / f"result_rank{rank}.pkl"


def _call_on_rank(run_dir: Path, join: str | None, fn: Callable, args: tuple) -> int:
    """The body of an `on_ranks` rank, local or in an srun step: join the group, fn(rank, world,
    *args), its result pickled to `result_file`; on any error its traceback where the launcher
    looks for this rank's cause."""
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    try:
        if join:
            join_local_group(join)
        out = fn(rank, world, *args)
        write_bytes_atomic(result_file(run_dir, rank), pickle.dumps(out))
        if join:
            import torch.distributed as dist
            dist.destroy_process_group()
    except BaseException:
        record_error(run_dir)
        raise
    return 0


def call_main(call_dir: Path) -> int:
    """`python -m distsgd call CALL_DIR`: one rank of an `on_ranks` call's srun step, its place
    read from SLURM's variables (`cluster.adopt_slurm_env`), running the call's function on its
    arguments (CALL_DIR/call.pkl) with the local ranks' body (`_call_on_rank`)."""
    try:
        fn, args, join = pickle.loads((call_dir / CALL_FILE).read_bytes())
        adopt_slurm_env(join or "gloo")
    except BaseException:
        record_error(call_dir)
        raise
    return _call_on_rank(call_dir, join, fn, args)


def join_local_group(backend: str) -> None:
    """Join the process group of this rank's environment on `backend`; with NCCL, on the GPU
    cuda:LOCAL_RANK (one GPU per rank)."""
    from ..comm.comm import join_group

    if backend == "nccl":
        import torch
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        join_group(backend, device_id=device)
    else:
        join_group(backend)


def on_ranks(fn: Callable, world: int, *args: Any, timeout: float | None = 900,
             join: str | None = "gloo", launcher: str = "auto") -> list[Any]:
    """`fn(rank, world, *args)` on `world` fresh ranks, every rank's return value in rank order:
    the benchmarks' and the tests' rank launcher, on a run's mechanisms. `launcher` 'spawn': local
    processes (`start_ranks`, `supervise`); 'srun': one srun step across this SLURM job's nodes
    (`start_step`, `wait_step`), the call (fn, args) and the ranks' results passed as pickles through
    a directory under the results root, which every node sees (removed once every rank returned;
    kept with the ranks' logs when one failed); 'auto': as a run's (`detect_launcher`; under
    torchrun/srun, 'env', a local group of its own). The ranks first join one `join` process group
    ("gloo", or "nccl" with one GPU per rank; None: `fn` joins it, e.g. with `Comm.from_env`). `fn`
    must be importable (a module's function, or locally one of the running script's). A failing
    rank raises `WorkerError` naming the rank and its traceback (or how it died); ranks still
    running after `timeout` s raise TimeoutError (None: no deadline, for work of unknown length
    whose collectives time out on their own)."""
    how = detect_launcher(launcher)
    if how not in ("spawn", "srun", "env"):
        raise ConfigError("launcher", launcher, ("auto", "spawn", "srun"))
    if how == "srun":
        return _on_srun(fn, world, args, timeout, join, Allocation.detect())
    import torch

    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOAD)
    gpus = torch.cuda.device_count() if join == "nccl" else 0
    with tempfile.TemporaryDirectory(prefix="distsgd-ranks-") as tmp:
        run_dir = Path(tmp)
        with start_ranks(ctx, run_dir, world, gpus, hide_main=False, body=lambda rank: functools.partial(
                _call_on_rank, run_dir, join, fn, args)) as procs:
            supervise(procs, run_dir, timeout=timeout)
        return _results(run_dir, world)


def _on_srun(fn: Callable, world: int, args: tuple, timeout: float | None, join: str | None,
             allocation: Allocation) -> list[Any]:
    """`on_ranks` as one srun step across `allocation` (its 'srun' launcher)."""
    gpus = join == "nccl"
    if gpus and world > allocation.gpus:
        raise ConfigError("world", world, f"at most {allocation.gpus}",
                          f"{world} ranks of one GPU each do not fit {allocation.describe()}")
    name = getattr(fn, "__name__", "call").lstrip("_")
    call_dir = results_root() / "calls" / f"{name}-{uuid.uuid4().hex[:12]}"
    (call_dir / "ranks").mkdir(parents=True)
    write_bytes_atomic(call_dir / CALL_FILE, pickle.dumps((fn, args, join)))
    proc = start_step(name, world, call_dir, allocation, gpus, ["call", str(call_dir)])
    wait_step(proc, call_dir, timeout=timeout)
    out = _results(call_dir, world)
    shutil.rmtree(call_dir, ignore_errors=True)
    return out


def _results(run_dir: Path, world: int) -> list[Any]:
    """The ranks' return values of an `on_ranks` call (`result_file`) in rank order; `WorkerError`
    naming the first rank that exited without leaving one."""
    missing = [r for r in range(world) if not result_file(run_dir, r).exists()]
    if missing:
        raise WorkerError(missing[0], "the rank exited without returning its result")
    return [pickle.loads(result_file(run_dir, r).read_bytes()) for r in range(world)]


def on_this_rank(fn: Callable, *args: Any, join: str | None = "gloo") -> Any:
    """`on_ranks`' counterpart under torchrun/srun (`--launcher env`): this process is one rank of
    the job's group; fn(rank, world, *args) after joining it (`join`, as in `on_ranks`)."""
    import torch.distributed as dist

    if join:
        join_local_group(join)
    try:
        return fn(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), *args)
    finally:
        if join and dist.is_initialized():
            dist.destroy_process_group()


def _forkserver(config: Config) -> multiprocessing.context.BaseContext:
    """The multiprocessing context whose server process has imported `PRELOAD` and the modules
    of the first run's dataset and model (torchvision or scikit-learn take seconds to import,
    paid by every rank otherwise). The server starts with the first run of this process and
    then serves every later run; a run whose modules it lacks imports them in its workers."""
    from ..data import loader_module
    from ..models import builder_module

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


class _ProgressBar:
    """A run's progress bar (config.progress), fed from rank 0's progress file: `tqdm.auto`, so a
    widget in a Jupyter kernel with ipywidgets (JupyterLab draws it) and text in a terminal. It
    disappears when the run ends (``leave=False``); one that stopped early (failed, diverged) stays,
    red in JupyterLab, at its last step. A finished run's widget output is replaced by an empty one,
    so that a saved notebook (papermill's, or yours reopened after its kernel stopped) holds no
    reference to the closed widget ("Error displaying widget: model not found" in JupyterLab).

    The bar redraws at most once a second (`MIN_INTERVAL`): each widget redraw is two or three
    messages on the kernel's IOPub channel. tqdm's own switch `TQDM_DISABLE=1` turns it off, the
    widget too (tqdm's notebook bar ignores that variable, so it is read here): a client that reads
    IOPub only after a cell ends (nbval, `notebooks/conftest.py`) loses what exceeds ZeroMQ's queue
    of about a thousand messages, the cell's closing "idle" among them, and fails the cell."""

    MIN_INTERVAL = 1.0          # seconds between redraws

    def __init__(self, config: Config, run_dir: Path) -> None:
        self.file = progress_file(run_dir)
        self.summary = run_dir / "summary.json"
        self.bar = None
        self.display = None         # the widget's output (IPython DisplayHandle), in a notebook
        if config.progress and not _tqdm_disabled():
            from tqdm.auto import tqdm
            kwargs: dict[str, Any] = dict(total=config.steps, desc=config.run_name(), unit="step", leave=False,
                                          mininterval=self.MIN_INTERVAL)
            if _is_notebook_tqdm(tqdm):
                from IPython.display import display
                self.bar = tqdm(**kwargs, display=False)
                self.display = display(self.bar.container, display_id=True)
            else:
                self.bar = tqdm(**kwargs)

    def poll(self) -> None:
        if self.bar is not None and self.file.exists():
            try:
                step, loss = self.file.read_text().split()
                self.bar.update(int(step) - self.bar.n)
                self.bar.set_postfix(loss=f"{float(loss):.4f}", refresh=False)
            except (ValueError, OSError):
                pass

    def finish(self) -> None:
        """The ranks exited cleanly: move the bar to the step the run ended at (its summary's;
        rank 0 writes the progress file at most every 0.3 s, so its last write is often a step
        or more behind). Without this, tqdm's notebook bar closes red, as if the run had failed."""
        if self.bar is None:
            return
        try:
            done = int(json.loads(self.summary.read_text())["steps"])
        except (OSError, ValueError, KeyError, TypeError):
            return
        self.bar.update(done - self.bar.n)

    def close(self) -> None:
        if self.bar is None:
            return
        finished = bool(self.bar.total) and self.bar.n >= self.bar.total
        self.bar.close()
        if self.display is not None and finished:
            self.display.update({"text/plain": ""}, raw=True)


def _tqdm_disabled() -> bool:
    """tqdm's environment switch TQDM_DISABLE (any value but "", "0", "false")."""
    return os.environ.get("TQDM_DISABLE", "").strip().lower() not in ("", "0", "false")


def _is_notebook_tqdm(tqdm: type) -> bool:
    """Whether `tqdm.auto` chose the ipywidgets bar (a Jupyter kernel with ipywidgets)."""
    try:
        from tqdm.notebook import tqdm_notebook
    except ImportError:
        return False
    return issubclass(tqdm, tqdm_notebook)


def supervise(procs: list[BaseProcess], run_dir: Path, poll: Callable[[], None] | None = None,
              timeout: float | None = None) -> None:
    """Wait for the local ranks `procs` (of `start_ranks`) to finish, calling `poll` every 0.1 s.
    When any fails, stop the others at once and raise `WorkerError` naming the first failure (the
    root cause) with its traceback (RUN_DIR/ranks/error_rank<r>.txt) or how it died and its log's
    tail; past `timeout` s, stop them all and raise TimeoutError."""
    deadline = None if timeout is None else time.monotonic() + timeout
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
        if poll is not None:
            poll()
        if all(c == 0 for c in codes):
            return
        if deadline is not None and time.monotonic() > deadline:
            _stop(procs)
            raise TimeoutError(f"local ranks still running after {timeout:g} s: stopped")
        time.sleep(0.1)


def _first_failure(run_dir: Path, failed: list[int], codes: list[int | None]) -> int:
    """The rank that failed first, the root cause; the others often fail afterwards only because
    their peer vanished. A rank killed by a signal (it could write no error file) is taken first,
    then the earliest error file."""
    killed = [r for r in failed if (codes[r] or 0) < 0 and not error_file(run_dir, r).exists()]
    if killed:
        return killed[0]
    order = {f.name: i for i, f in enumerate(failed_ranks_errors(run_dir / "ranks"))}
    return min(failed, key=lambda r: order.get(error_file(run_dir, r).name, math.inf))


def _cause(run_dir: Path, rank: int, code: int | None) -> str:
    err = error_file(run_dir, rank)
    if err.exists():
        return err.read_text()
    log = run_dir / "ranks" / f"rank{rank}.log"
    tail = log.read_text()[-4000:] if log.exists() else ""
    status = f"killed by signal {-code}" if code is not None and code < 0 else f"exit code {code}"
    return f"process {status}; last output:\n{tail}"


def _stop(procs: list[BaseProcess], grace_s: float = 5.0) -> None:
    """Terminate the workers still running (a process that failed to start has no pid: skipped);
    kill them if they ignore SIGTERM."""
    alive = [p for p in procs if p.pid is not None and p.exitcode is None]
    for p in alive:
        p.terminate()
    deadline = time.time() + grace_s
    for p in alive:
        p.join(timeout=max(0.0, deadline - time.time()))
        if p.exitcode is None:
            p.kill()
            p.join()

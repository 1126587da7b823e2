#!/usr/bin/env python3
"""Reproduce the papers: execute every ``notebooks/NN_*.ipynb`` with papermill under a profile.

A *profile* is ``reproduce/profiles/<profile>.yaml``::

    defaults:            # parameters given to every notebook (optional)
      seed: 0
    notebooks:           # per-notebook overrides, NAME = notebook file stem
      00_baselines: {steps: 15000, backend: nccl}

A notebook's tagged ``parameters`` cell holds the quick-profile defaults; a profile only lists what
it changes. Each parameter a profile passes must be defined in that notebook's ``parameters``
cell, otherwise the notebook fails before it is executed (papermill would silently inject it).

Outputs (``OUT`` defaults to ``reproduce/runs/<profile>``, ``reproduce/runs/<profile>-dry-run``
with ``--dry-run``):

* ``OUT/<NAME>.ipynb``   the executed notebook (saved after every cell, also when it fails);
* ``OUT/<NAME>.kernel.log`` what the notebook's kernel process itself printed (its start-up
  warnings, its shutdown, a crash), kept out of this driver's output;
* ``OUT/summary.csv``    notebook, status, minutes, claims reproduced / contradicted /
  inconclusive / total, executed notebook;
* ``OUT/REPORT.md`` and ``OUT/REPORT.html``: every claim of every notebook run, with the paper's
  value, the measured value and interval, the verdict and its reason (``distsgd.verdicts.report``);
* figures, ``claims.csv`` and ``invariants.csv`` are written by the notebooks to
  ``$DISTSGD_FIGURES/<NAME>/``.

``--report-only`` writes the report from the figures directory without executing anything;
``--update-readme`` also rewrites the README's generated verdict table from it.

The kernels run with the notebooks directory as working directory and with ``DISTSGD_PROFILE``,
``DISTSGD_FIGURES`` (absolute) set and ``<repo>/lib`` prepended to ``PYTHONPATH``. Each notebook
holds its runs to its tests registered before them (``reproduce/registered/PROFILE/``, written
only by ``reproduce/register.py``); with ``--set`` (other tests than the profile's, not a dry run)
to those registered with the same ``--set`` in ``OUT/registered`` (``DISTSGD_REGISTERED``).

After the runs, every verdict that differs from the profile's ledger
(``reproduce/expected/PROFILE.csv``) is listed (notebook, claim, the ledger's verdict, this run's)
and written to ``OUT/ledger_differences.csv``; such a notebook also fails its last cell, unless the
ledger's row reads "not yet run" (a profile whose deciding runs nobody has made: reported, never failed).
``summary.csv`` and ``ledger_differences.csv`` keep the rows of notebooks not run this time (the tasks
of an array job write into one OUT), and the report covers every notebook ``summary.csv`` holds.

Figures go to ``figures/<NAME>/`` for the quick profile (committed) and to ``figures/<profile>/<NAME>/``
for any other, never over the quick ones (`distsgd.paths.figures_root`). ``--jobs`` > 1 is refused when
the notebooks run on GPUs (their runs would share them), except in a dry run.

``--kernel NAME`` executes the notebooks with the installed Jupyter kernel NAME (default
``python3``, the Python running this script); ``make kernel`` installs one named ``distsgd`` that
runs the checkout's ``.venv``. A name Jupyter does not know is an error (exit 2, the installed
kernels listed) before any notebook starts.

Dry run (``--dry-run``): every notebook gets ``dry_run=True`` (2 steps per run, claims computed
but not asserted) and otherwise the profile's parameters, so a typo in a full-profile config
fails here. What this machine cannot provide is replaced, and only that:

* data: stand-ins in the real formats (MNIST idx files, CIFAR-10/100 python pickles, an
  ImageNet-style folder of tiny JPEGs) written to ``OUT/data``, with ``DISTSGD_DATA`` pointing
  there and ``DISTSGD_DATA_VERIFY=0`` (their checksums are not the release's);
* repetitions: a notebook's seeds and repeats (``n_seeds``, ``seeds``, ``acc_seeds``, ``repeats``,
  ``control_repeats``) at most 2 (``DRY_RUN_REPETITIONS``;
  a list of seeds keeps its first two), the fewest its intervals take;
* cost: ``DISTSGD_MAX_NPROC`` (default 2) caps the worker processes of each run,
  ``DISTSGD_MAX_BATCH_SIZE`` (default 2) the per-rank batch and ``DISTSGD_MAX_EVAL_SAMPLES``
  (default 4) the samples of each evaluation, ``DISTSGD_MAX_SEQ_LEN`` (default 8) the sequence
  length of the benchmarks' BERT inputs, ``DISTSGD_MAX_IMAGE_SIDE`` (default 16) the side of their
  ResNet-50 images (parameters stay whole in both) and ``DISTSGD_MAX_DEPTH`` (default 1) the
  repeated blocks of the benchmarks' models (BERT-Base: one encoder layer, ResNet-50: one block
  per stage; every tensor keeps its shape, see ``distsgd.training.caps``). The environment is the only
  channel into the kernels: there ``distsgd.training.caps.Caps.from_env()`` reads these variables, and each config is
  validated as the profile asks before it is capped (``Caps.apply``). Set a variable to 0 to
  lift its cap (ResNet-18 at batch 128 costs ~10-20 s per rank and step on a 2-core machine);
* ``backend: nccl`` becomes ``gloo`` when torch sees no GPU (shown by ``--list --dry-run``);
* allocation: the profile is planned for 1 x 8, 2 x 8 and 4 x 4 GPUs (``DRY_RUN_SHAPES``, or the
  ``--allocation`` shapes given): its allocation-relative counts (``gpus``, ``node``) take the
  first one's numbers, and a notebook on NCCL must fit each (``fit_problems``);
* runs go to ``OUT/results`` (``DISTSGD_RESULTS``) unless ``DISTSGD_RESULTS`` is set.

Exit status: 0 when every notebook ran, 1 when any notebook failed (or, with ``--list``, would
fail parameter validation), 2 for a usage or configuration error.

Interrupting (Ctrl-C, SIGTERM): the kernels and every process they started (the runs' workers)
are stopped, the notebooks that finished and those that did not are printed (and written to
``summary.csv``), and the exit status is 128 + the signal's number (130, 143). Running the same
command again executes the notebooks again; each run that finished is reused from the results
directory (`distsgd.run`), the interrupted ones are recomputed.
"""
from __future__ import annotations

import argparse
import ast
import csv
import logging
import os
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import papermill
import psutil
import yaml

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_NOTEBOOKS_DIR = REPO_ROOT / "notebooks"
DEFAULT_PROFILES_DIR = REPO_ROOT / "reproduce" / "profiles"
DEFAULT_RUNS_DIR = REPO_ROOT / "reproduce" / "runs"
NOTEBOOK_GLOB = "[0-9][0-9]_*.ipynb"
PROFILE_KEYS = frozenset({"defaults", "notebooks", "pilots", "release_data", "fabric", "fabric_inside"})
VERDICTS = ("reproduced", "contradicted", "inconclusive")  # distsgd.verdicts.claims.VERDICTS
SUMMARY_COLUMNS = ("notebook", "status", "minutes", *VERDICTS, "claims_total", "executed")
# default caps of a dry run (distsgd.training.caps.Caps; its DISTSGD_MAX_* variables override them)
DRY_RUN_CAPS = {"nproc": 2, "batch_size": 2, "eval_samples": 4, "seq_len": 8, "image_side": 16, "depth": 1}
# the repetitions of a dry run: a notebook's seeds and timing repeats at most 2, the fewest an interval over
# them takes (a list of seeds keeps its first two); more repetitions of a 2-step run check nothing more
DRY_RUN_REPETITIONS = {"n_seeds": 2, "seeds": 2, "acc_seeds": 2, "repeats": 2, "control_repeats": 2}
# the allocations (nodes x GPUs per node) a dry run checks a profile against, the first one executed
DRY_RUN_SHAPES = ("1x8", "2x8", "4x4")
# the notebook parameters that count the ranks of runs (one GPU each where the notebook's backend is
# nccl); others that count workers do not start them (10's cluster_nprocs: a what-if of the simulator)
RANK_PARAMETERS = ("nproc", "nprocs", "bench_nprocs", "timing_nproc")
# a run whose summary was written up to this long before its notebook started counts as the notebook's
# (`record_validation`: the clocks of other nodes); a run already in the table is never added twice
VALIDATION_MARGIN_S = 60

_print_lock = threading.Lock()


class UsageError(Exception):
    """A usage or configuration error: reported on stderr, exit status 2."""


class Interrupted(Exception):
    """SIGINT (Ctrl-C) or SIGTERM arrived: raised in the main thread by `on_signal`. `run_all`
    stops the kernels and their workers and attaches every notebook's outcome."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.outcomes: list[NotebookOutcome] = []


def on_signal(signum: int, frame: Any) -> None:
    """The handler of SIGINT and SIGTERM while notebooks run; later ones are ignored while the
    batch is being stopped."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)
    raise Interrupted(signum)


def stop_descendants(grace_s: float = 5.0) -> None:
    """Stop every process started from this one: the kernels (papermill starts them in sessions
    of their own, so a Ctrl-C does not reach them) are killed, which leaves them no time to log
    their shutdown; what they started (the runs' workers) gets SIGTERM, then SIGKILL after
    `grace_s`. The whole tree is listed before any process is signalled, so that no grandchild
    is orphaned out of sight; a second round catches a process forked meanwhile."""
    me = psutil.Process()
    for _ in range(2):
        kernels, procs = set(me.children()), me.children(recursive=True)
        for proc in procs:
            try:
                proc.kill() if proc in kernels else proc.terminate()
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=grace_s)
        for proc in alive:
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass
        psutil.wait_procs(alive, timeout=grace_s)


def say(*parts: object, file: Any = None) -> None:
    """Print one line atomically (worker threads report concurrently) and flush it."""
    with _print_lock:
        print(*parts, file=file or sys.stdout, flush=True)


# --------------------------------------------------------------------------- data types


@dataclass(frozen=True)
class Profile:
    """A parsed profile file."""

    name: str
    path: Path
    defaults: dict[str, Any]
    notebooks: dict[str, dict[str, Any]]
    pilots: dict[str, dict[str, Any]] = field(default_factory=dict)   # reproduce/register.py --pilot
    release_data: bool = False      # its runs read the datasets' release files only (`check_release_data`)
    fabric: str = ""                # the real network between nodes its runs cross (`validation_fabric`)
    fabric_inside: str = ""         # and inside a node ('' the same)


@dataclass
class Plan:
    """What will be done to one notebook: the parameters it gets and why it cannot run, if so."""

    name: str
    path: Path
    declared: dict[str, dict[str, Any]]  # papermill.inspect_notebook output
    parameters: dict[str, Any]
    sources: dict[str, str]  # parameter -> where its value comes from
    problems: list[str] = field(default_factory=list)


@dataclass
class NotebookOutcome:
    """The outcome of one notebook."""

    name: str
    status: str  # "ok" or "FAILED: ..."
    minutes: float | None = None
    verdicts: dict[str, int] | None = None  # verdict -> number of claims; None: no claims table
    executed: Path | None = None

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    @property
    def claims(self) -> str:
        """e.g. '3 reproduced, 1 contradicted, 0 inconclusive', or '-' without a claims table."""
        if self.verdicts is None:
            return "-"
        return ", ".join(f"{self.verdicts[v]} {v}" for v in VERDICTS)


# --------------------------------------------------------------------------- discovery


def discover_notebooks(notebooks_dir: Path) -> dict[str, Path]:
    """The ``NN_*.ipynb`` notebooks of a directory, by stem, in sorted order."""
    if not notebooks_dir.is_dir():
        raise UsageError(f"notebooks directory {notebooks_dir} does not exist")
    return {p.stem: p for p in sorted(notebooks_dir.glob(NOTEBOOK_GLOB)) if p.is_file()}


def available_profiles(profiles_dir: Path) -> list[str]:
    """Profile names (file stems of ``*.yaml``) in a directory."""
    return sorted(p.stem for p in profiles_dir.glob("*.yaml")) if profiles_dir.is_dir() else []


def load_profile(name: str, profiles_dir: Path) -> Profile:
    """Read and check ``<profiles_dir>/<name>.yaml``."""
    path = profiles_dir / f"{name}.yaml"
    if not path.is_file():
        names = ", ".join(available_profiles(profiles_dir)) or "none"
        raise UsageError(f"unknown profile {name!r} (available in {profiles_dir}: {names})")
    try:
        data = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"profile {path} is not valid YAML: {exc}") from exc
    if not isinstance(data, dict):
        raise UsageError(f"profile {path}: expected a mapping with keys defaults, notebooks")
    unknown = set(map(str, data)) - PROFILE_KEYS
    if unknown:
        raise UsageError(
            f"profile {path}: unknown top-level key(s) {', '.join(sorted(unknown))} "
            f"(allowed: {', '.join(sorted(PROFILE_KEYS))})"
        )
    defaults = _mapping(data.get("defaults"), f"profile {path}: 'defaults'")
    notebooks_raw = _mapping(data.get("notebooks"), f"profile {path}: 'notebooks'")
    notebooks = {
        str(nb): _mapping(params, f"profile {path}: notebooks.{nb}")
        for nb, params in notebooks_raw.items()
    }
    pilots = {str(nb): _mapping(p, f"profile {path}: pilots.{nb}")
              for nb, p in _mapping(data.get("pilots"), f"profile {path}: 'pilots'").items()}
    release_data = data.get("release_data", False)
    if not isinstance(release_data, bool):
        raise UsageError(f"profile {path}: release_data must be true or false, got {release_data!r}")
    fabric = {key: data.get(key, "") or "" for key in ("fabric", "fabric_inside")}
    for key, value in fabric.items():
        if not isinstance(value, str):
            raise UsageError(f"profile {path}: {key} must be a network (a preset such as IB-EDR, or a --net spec), "
                             f"got {value!r}")
    return Profile(name=name, path=path, defaults=defaults, notebooks=notebooks, pilots=pilots,
                   release_data=release_data, **fabric)


def _mapping(value: Any, what: str) -> dict[str, Any]:
    """``value`` as a dict with string keys; ``None`` (an empty YAML entry) is ``{}``."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UsageError(f"{what} must be a mapping, got {type(value).__name__}")
    return {str(k): v for k, v in value.items()}


def select(notebooks: Mapping[str, Path], only: Sequence[str]) -> list[str]:
    """Names chosen by ``--only`` (stems or ``NN`` prefixes), in notebook order; all if empty."""
    if not only:
        return list(notebooks)
    wanted: set[str] = set()
    for item in only:
        matches = [n for n in notebooks if item in (n, n.split("_", 1)[0])]
        if not matches:
            names = ", ".join(notebooks) or "none"
            raise UsageError(f"unknown notebook {item!r} (available: {names})")
        wanted.update(matches)
    return [n for n in notebooks if n in wanted]


def parse_overrides(items: Sequence[str]) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as {KEY: VALUE parsed as YAML}."""
    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = yaml.safe_load(value)
        except yaml.YAMLError as exc:
            raise UsageError(f"--set {item!r}: VALUE is not valid YAML: {exc}") from exc
    return out


def split_names(values: Sequence[str] | None) -> list[str]:
    """``--only`` values, which may also be comma or space separated."""
    return [part for v in values or () for part in v.replace(",", " ").split()]


# --------------------------------------------------------------------------- planning


def plan_notebook(name: str, path: Path, profile: Profile, dry_run: bool,
                  overrides: Mapping[str, Any] | None = None, allocations: Sequence[Any] = ()) -> Plan:
    """Merge the profile's parameters for one notebook and check them against its parameters cell;
    `overrides` (``--set``) go last, to the notebooks whose parameters cell defines them. Rank counts
    written relative to the allocation ('gpus', 'node', 'K*node') become numbers of the first of
    `allocations` (`distsgd.training.allocation.Allocation`), and a notebook on NCCL (one GPU per
    rank) must fit every one of them (`fit_problems`)."""
    try:
        declared = papermill.inspect_notebook(str(path))
    except Exception as exc:  # an unreadable notebook fails just this notebook
        return Plan(name, path, {}, {}, {}, [f"cannot read {path.name}: {_first_line(exc)}"])

    parameters: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, value in profile.defaults.items():
        parameters[key], sources[key] = value, f"profile {profile.name}: defaults"
    for key, value in profile.notebooks.get(name, {}).items():
        parameters[key], sources[key] = value, f"profile {profile.name}: notebooks.{name}"
    for key, value in (overrides or {}).items():
        if key in declared:
            parameters[key], sources[key] = value, "--set"
    if dry_run:
        parameters["dry_run"], sources["dry_run"] = True, "--dry-run"
        for key, cap in DRY_RUN_REPETITIONS.items():
            if key in declared:
                value = parameters.get(key, ast.literal_eval(declared[key]["default"]))
                fewer = value[:cap] if isinstance(value, list) else min(value, cap)
                if fewer != value:
                    parameters[key], sources[key] = fewer, f"--dry-run: at most {cap} of {value!r}"
        if parameters.get("backend") == "nccl" and not gpu_available():
            parameters["backend"], sources["backend"] = "gloo", "--dry-run: no GPU, nccl -> gloo"

    problems = fit_problems(parameters, sources, allocations)
    if allocations and not problems:
        from distsgd.training.allocation import resolve_counts

        resolved = resolve_counts(parameters, allocations[0])
        for key in parameters:
            if resolved[key] != parameters[key]:
                sources[key] += f"; {parameters[key]!r} of {allocations[0].describe()}"
        parameters = resolved
    defined = ", ".join(declared) or "none"
    for key in parameters:
        if key not in declared:
            problems.append(
                f"parameter {key!r} (from {sources[key]}) is not defined in the parameters "
                f"cell of {path.name} (defined: {defined})"
            )
    return Plan(name, path, declared, parameters, sources, problems)


def fit_problems(parameters: Mapping[str, Any], sources: Mapping[str, str], allocations: Sequence[Any]) -> list[str]:
    """Why the parameters of a notebook do not fit each of `allocations`: an allocation-relative count
    it cannot resolve (no GPU to count), or, for a notebook on NCCL (its backend before a dry run's
    substitution), a rank count of `RANK_PARAMETERS` larger than an allocation's GPUs (one per
    rank). Allocations without GPUs are checked for the first only."""
    from distsgd import ConfigError
    from distsgd.training.allocation import resolve_counts

    problems = []
    for allocation in allocations:
        try:
            resolved = resolve_counts(parameters, allocation)
        except ConfigError as exc:
            problems.append(f"{exc}, on {allocation.describe()}")
            continue
        if parameters.get("backend") != "nccl" or allocation.gpus_per_node == 0:
            continue
        for key in RANK_PARAMETERS:
            counts = resolved.get(key, [])
            for count in counts if isinstance(counts, list) else [counts]:
                if count > allocation.gpus:
                    problems.append(f"parameter {key}={parameters[key]!r} (from {sources[key]}) asks for {count} "
                                    f"GPUs, one per rank; {allocation.describe()} has {allocation.gpus} (write it "
                                    "relative to the allocation: 'gpus', 'node', 'K*node')")
    return problems


def allocations_of(shapes: Sequence[str], dry_run: bool, listing: bool = False) -> list[Any]:
    """The allocations to plan for: the `shapes` given (``--allocation``), else for a dry run or a
    listing (which runs nothing) `DRY_RUN_SHAPES`, else the SLURM job this runs in or this host
    (`Allocation.detect`)."""
    sys.path.insert(0, str(REPO_ROOT / "lib"))
    from distsgd.training.allocation import Allocation

    if shapes or dry_run or listing:
        return [Allocation.parse(shape) for shape in shapes or DRY_RUN_SHAPES]
    return [Allocation.detect()]


def gpu_available() -> bool:
    """Whether torch sees a CUDA device (imported only when a dry run needs to know)."""
    import torch

    return torch.cuda.is_available()


def dry_run_environment(out_dir: Path) -> None:
    """Write the stand-in data sets under ``OUT/data`` and set what the kernels and their workers
    need to run full-profile configs on this machine (see the module doc); UsageError, before
    anything is written, if a ``DISTSGD_MAX_*`` cap already set is not an integer >= 0."""
    sys.path.insert(0, str(REPO_ROOT / "lib"))
    from distsgd.training.caps import Caps
    from distsgd.data.standins import write_standins

    for var, value in Caps(**DRY_RUN_CAPS).env().items():
        os.environ.setdefault(var, value)
    try:
        caps = ", ".join(f"{var}={value}" for var, value in Caps.from_env().env().items())
    except ValueError as exc:  # distsgd.ConfigError: a cap that is not an integer >= 0
        raise UsageError(str(exc)) from exc
    data = out_dir / "data"
    if not (data / ".complete").exists():
        write_standins(data)
        (data / ".complete").touch()
    os.environ["DISTSGD_DATA"] = str(data)
    os.environ["DISTSGD_DATA_VERIFY"] = "0"
    os.environ.setdefault("DISTSGD_RESULTS", str(out_dir / "results"))
    say(f"dry run: stand-in data in {data}, caps {caps}, "
        f"runs in {os.environ['DISTSGD_RESULTS']}")


def plan_datasets(plans: Sequence[Plan]) -> list[str]:
    """The file-based datasets (`distsgd.data.release.FILE_BASED`) that the plans' parameters name: any
    parameter value, or element of a list value, equal to one (``data: cifar10``, ``acc_data``,
    ``extra_setups: [[preact_resnet34, cifar100]]``); a notebook's own default counts where the profile
    leaves it. In `FILE_BASED`'s order."""
    import ast

    sys.path.insert(0, str(REPO_ROOT / "lib"))
    from distsgd.data.release import FILE_BASED

    def values(v: Any) -> Iterator[Any]:
        if isinstance(v, (list, tuple)):
            for item in v:
                yield from values(item)
        else:
            yield v

    named = set()
    for plan in plans:
        for key, spec in plan.declared.items():
            if key in plan.parameters:
                value = plan.parameters[key]
            else:
                try:
                    value = ast.literal_eval(str(spec["default"]))
                except (ValueError, SyntaxError):
                    continue
            named.update(v for v in values(value) if isinstance(v, str))
    return [name for name in FILE_BASED if name in named]


def check_release_data(profile: Profile, plans: Sequence[Plan], download: bool = False) -> list[str]:
    """The datasets the plans name (`plan_datasets`), each inspected (`distsgd.data.release.prepare`;
    `download`: fetched first where torchvision can) and reported; returns the lines of those that are
    not in place (each naming the dataset, its folder and where to put it)."""
    from distsgd.data import release

    bad = []
    names = plan_datasets(plans)
    say(f"profile {profile.name}: datasets {', '.join(names) or 'none file-based'}")
    for status in release.prepare(names, download=download):
        say(f"  {status.line()}")
        if not status.ok:
            bad.append(f"{status.line()}. {release.where_to_put(status.name, release.dataset_root(status.name))}")
    return bad


# --------------------------------------------------------------------------- execution


def read_claims(claims_csv: Path, before_ns: int | None) -> dict[str, int] | None:
    """{verdict: count} from a ``claims.csv`` written during this execution, else ``None``.

    The file counts only if it exists and its mtime differs from ``before_ns`` (its mtime
    before the notebook started, ``None`` if it did not exist then), so a table left over from
    an earlier run is never reported as this run's.
    """
    try:
        mtime_ns = claims_csv.stat().st_mtime_ns
    except FileNotFoundError:
        return None
    if before_ns is not None and mtime_ns == before_ns:
        return None
    try:
        with claims_csv.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
    except (OSError, csv.Error):
        return None
    return {v: sum(str(row.get("verdict", "")).strip() == v for row in rows) for v in VERDICTS}


def _mtime_ns(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except FileNotFoundError:
        return None


def _first_line(exc: BaseException) -> str:
    """A one-line description of an exception (papermill errors: ``ename: evalue``)."""
    if isinstance(exc, papermill.PapermillExecutionError):
        text = f"{exc.ename}: {exc.evalue}"
    else:
        text = f"{type(exc).__name__}: {exc}"
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def kernel_manager_logging_to(path: Path) -> type:
    """A kernel manager whose kernel process writes its own stdout and stderr to `path` (appended),
    not to this driver's terminal. Those are the kernel's messages, not the notebook's outputs
    (which papermill saves in the executed notebook): ipykernel's warnings at start-up and, as
    papermill shuts a kernel down, ipykernel's logged ZMQError tracebacks from its IOPub thread
    (a race inside ipykernel, harmless to the results). A kernel that crashes leaves its last words
    there; the summary's status of that notebook names the file."""
    from jupyter_client.manager import AsyncKernelManager

    class LoggingKernelManager(AsyncKernelManager):
        async def start_kernel(self, **kw: Any) -> None:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "ab") as log:      # the child keeps its own copy of the descriptor
                kw.setdefault("stdout", log)
                kw.setdefault("stderr", log)
                await super().start_kernel(**kw)

    return LoggingKernelManager


class SharedKernels:
    """One kernel per job slot (thread), reused by the notebooks that slot executes (``--share-kernels``).

    A fresh kernel costs a notebook ~15 s of CPU before its first run: ipykernel, the imports of
    its first cell, and the forkserver of its runs (torch, the library, torch._dynamo). A dry run's
    notebooks take ~30 s each, so in `make test` (33 dry-run executions) that start is half the
    work. Between two notebooks the kernel is reset as a new one would be, so that no notebook
    can lean on another's state: every name it defined is deleted (``%reset -f``: variables,
    functions, imported names; the module's own ``__spec__``, ``__name__``... are kept), its
    figures are closed, and the working directory and the environment are those the kernel
    started with. What stays is what a notebook cannot see:
    imported modules and the forkserver (whose workers import what its preload lacks). A kernel
    that died (a crashed notebook) is replaced before the next notebook. The kernel's own
    messages go to ``OUT/kernel-<slot>.log``."""

    def __init__(self, kernel: str, out_dir: Path) -> None:
        self.kernel, self.out_dir = kernel, out_dir
        self._local = threading.local()
        self._managers: list[Any] = []
        self._lock = threading.Lock()

    def log_of_this_slot(self) -> Path:
        """The kernel log of the calling thread's slot (numbered in the order slots first ask)."""
        if not hasattr(self._local, "slot"):
            with self._lock:
                self._local.slot = len(self._managers)
                self._managers.append(None)
        return self.out_dir / f"kernel-{self._local.slot}.log"

    def acquire(self, cwd: Path) -> Any:
        """This slot's kernel manager: its kernel reset when an earlier notebook used it, started
        when there is none or it died."""
        from jupyter_core.utils import run_sync

        log = self.log_of_this_slot()
        km = self._managers[self._local.slot]
        if km is not None and run_sync(km.is_alive)():
            self._reset(km, cwd)
            return km

        class SlotKernelManager(kernel_manager_logging_to(log)):  # type: ignore[misc]
            """Keeps the clients papermill opens, which it leaves running on a kernel it does not own."""
            def __init__(self, **kw: Any) -> None:
                super().__init__(**kw)
                self.opened: list[Any] = []

            def client(self, **kw: Any) -> Any:
                kc = super().client(**kw)
                self.opened.append(kc)
                return kc

        km = SlotKernelManager(kernel_name=self.kernel)
        run_sync(km.start_kernel)(cwd=str(cwd))
        self._managers[self._local.slot] = km
        return km

    @staticmethod
    def release(km: Any) -> None:
        """Close the clients a notebook's execution opened on `km` (the kernel keeps running)."""
        while km.opened:
            km.opened.pop().stop_channels()

    @staticmethod
    def _reset(km: Any, cwd: Path) -> None:
        """Make the kernel look new to the next notebook (see the class doc); RuntimeError if it
        cannot be reset."""
        code = "\n".join((   # %reset -f also deletes the module dunders (__spec__: multiprocessing reads it)
            "(lambda ip, keep: (ip.run_line_magic('reset', '-f'), ip.user_ns.update(keep)))(get_ipython(), "
            "{k: v for k, v in get_ipython().user_ns.items() if k.startswith('__') and k.endswith('__')})",
            "import os as _os, sys as _sys",
            f"_os.chdir({str(cwd)!r})",
            f"_os.environ.clear(); _os.environ.update({dict(os.environ)!r})",
            "if 'matplotlib.pyplot' in _sys.modules: _sys.modules['matplotlib.pyplot'].close('all')",
            "del _os, _sys",
        ))
        kc = km.blocking_client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=60)
            reply = kc.execute_interactive(code, timeout=60, store_history=False,
                                           output_hook=lambda msg: None)
        finally:
            kc.stop_channels()
        if reply["content"]["status"] != "ok":
            raise RuntimeError(f"resetting the shared kernel failed: {reply['content'].get('evalue')}")

    def shutdown(self) -> None:
        from jupyter_core.utils import run_sync

        for km in self._managers:
            if km is not None:
                run_sync(km.shutdown_kernel)(now=True)


def execute(
    plan: Plan,
    out_dir: Path,
    figures_dir: Path,
    kernel: str,
    log_output: bool,
    shared: SharedKernels | None = None,
    fabric: Any = None,
) -> NotebookOutcome:
    """Run one notebook with papermill (in its own kernel, or in its slot's `shared` one) and
    collect its claims; with a `fabric` (`validation_fabric`), then record its runs on several GPUs
    or nodes in the validation table (`record_validation`). Never raises."""
    output = out_dir / f"{plan.name}.ipynb"
    claims_csv = figures_dir / plan.name / "claims.csv"
    before = _mtime_ns(claims_csv)
    start = time.monotonic()
    started_ns = time.time_ns()
    status = "ok"
    kernel_log = out_dir / f"{plan.name}.kernel.log" if shared is None else shared.log_of_this_slot()
    km = None
    try:
        if shared is not None:
            km = shared.acquire(plan.path.parent)
        papermill.execute_notebook(
            str(plan.path),
            str(output),
            parameters=plan.parameters,
            kernel_name=kernel,
            cwd=str(plan.path.parent),
            progress_bar=False,
            log_output=log_output,
            **({"kernel_manager_class": kernel_manager_logging_to(kernel_log)} if km is None else {"km": km}),
        )
    except Exception as exc:  # report every failure in the summary, keep going
        status = f"FAILED: {_first_line(exc)} (the kernel's own messages: {kernel_log})"
    finally:
        if km is not None:
            shared.release(km)
    minutes = (time.monotonic() - start) / 60
    claims = read_claims(claims_csv, before)
    if fabric is not None:
        record_validation(plan.name, started_ns, fabric)
    return NotebookOutcome(
        name=plan.name,
        status=status,
        minutes=minutes,
        verdicts=claims,
        executed=output if output.exists() else None,
    )


def run_all(
    plans: Sequence[Plan],
    out_dir: Path,
    figures_dir: Path,
    jobs: int,
    kernel: str,
    log_output: bool,
    share_kernels: bool = False,
    fabric: Any = None,
) -> list[NotebookOutcome]:
    """Execute the runnable plans, ``jobs`` at a time (each in a kernel of its own, or with
    `share_kernels` in its slot's `SharedKernels` kernel), each followed by its runs' validation
    rows where a `fabric` is given (`execute`); results in notebook order.

    On `Interrupted` (SIGINT, SIGTERM): the notebooks not started are cancelled, the kernels and
    their workers stopped (`stop_descendants`), and the exception re-raised carrying every
    notebook's outcome: those that finished keep theirs, the others are "INTERRUPTED" (running
    then) or "NOT STARTED"."""
    results: dict[str, NotebookOutcome] = {}
    runnable = []
    for plan in plans:
        if plan.problems:
            results[plan.name] = NotebookOutcome(plan.name, f"FAILED: {plan.problems[0]}")
            for problem in plan.problems:
                say(f"{plan.name}: not executed: {problem}", file=sys.stderr)
        else:
            runnable.append(plan)

    total, done = len(runnable), 0
    if runnable:
        out_dir.mkdir(parents=True, exist_ok=True)
        say(f"executing {total} notebook(s), {jobs} at a time, into {out_dir}")
    shared = SharedKernels(kernel, out_dir) if share_kernels else None
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="papermill") as pool:
        futures = [
            pool.submit(execute, plan, out_dir, figures_dir, kernel, log_output, shared, fabric)
            for plan in runnable
        ]
        for plan in runnable[:jobs]:
            say(f"  started {plan.name}")
        try:
            for future in as_completed(futures):
                result = future.result()
                results[result.name] = result
                done += 1
                say(
                    f"[{done}/{total}] {result.name}: {result.status}  "
                    f"{result.minutes or 0:.1f} min  claims {result.claims}"
                )
                if done + jobs - 1 < total:
                    say(f"  started {runnable[done + jobs - 1].name}")
        except Interrupted as exc:
            finished = {f for f in futures if f.done()}
            pool.shutdown(wait=False, cancel_futures=True)
            stop_descendants()
            for plan, future in zip(runnable, futures):
                if plan.name in results:
                    continue
                if future in finished:
                    results[plan.name] = future.result()
                else:
                    results[plan.name] = NotebookOutcome(
                        plan.name, "NOT STARTED" if future.cancelled() else "INTERRUPTED")
            exc.outcomes = [results[plan.name] for plan in plans]
            raise
    if shared is not None:
        shared.shutdown()
    return [results[plan.name] for plan in plans]


# --------------------------------------------------------------------------- the simulator's validation


def validation_fabric(profile: Profile, env: Mapping[str, str] = os.environ) -> Any:
    """The fabric the notebooks' runs over the real network cross (`distsgd.systems.run_validation.
    Fabric`): $DISTSGD_FABRIC (and $DISTSGD_FABRIC_INSIDE) where set, else the profile's ``fabric``
    (and ``fabric_inside``); '' unknown. UsageError for one that is not a network."""
    sys.path.insert(0, str(REPO_ROOT / "lib"))
    from distsgd.systems.run_validation import FABRIC_ENV, INSIDE_ENV, Fabric

    between, inside = ((env[FABRIC_ENV], env.get(INSIDE_ENV, "")) if env.get(FABRIC_ENV)
                       else (profile.fabric, profile.fabric_inside))
    try:
        return Fabric(between, inside)
    except ValueError as exc:                  # distsgd.ConfigError
        raise UsageError(f"the fabric of profile {profile.name} (or ${FABRIC_ENV}): {exc}") from exc


def record_validation(name: str, started_ns: int, fabric: Any) -> None:
    """Compare the runs notebook `name` finished on several GPUs or nodes (their summaries written
    since `started_ns`, less `VALIDATION_MARGIN_S`, under the results root) with the simulator's
    prediction and record them in the validation table (`run_validation.record_runs` over `fabric`),
    saying how many were added. Never raises: a notebook's outcome does not depend on it."""
    try:
        from distsgd.paths import results_root
        from distsgd.systems.run_validation import record_runs, runs_csv

        root = results_root(REPO_ROOT)
        if not root.is_dir():
            return
        since = started_ns - VALIDATION_MARGIN_S * 10**9
        added = [told for _, told in record_runs([root], fabric, runs_csv(root), since)
                 if told.startswith(("recorded", "replaced"))]
    except Exception as exc:  # noqa: BLE001 - reported, the notebook's outcome stands
        say(f"{name}: its runs were not compared with the simulator: {_first_line(exc)}", file=sys.stderr)
        return
    if added:
        unknown = sum("fabric unknown" in told for told in added)
        say(f"{name}: {len(added)} run(s) on several GPUs or nodes compared with the simulator in {runs_csv(root)}"
            + (f" ({unknown} without a prediction: name the fabric, $DISTSGD_FABRIC or the profile's fabric)"
               if unknown else ""))


# --------------------------------------------------------------------------- reporting


def format_table(rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows
    )


def summary_table(results: Sequence[NotebookOutcome], max_status: int = 90) -> str:
    """The end-of-run table: notebook, status, minutes, claims."""
    rows = [("notebook", "status", "minutes", "claims")]
    for r in results:
        status = r.status if len(r.status) <= max_status else r.status[: max_status - 3] + "..."
        minutes = "-" if r.minutes is None else f"{r.minutes:.1f}"
        rows.append((r.name, status, minutes, r.claims))
    return format_table(rows)


def write_summary(results: Sequence[NotebookOutcome], path: Path) -> None:
    """``summary.csv``: one row per notebook (claims empty when the notebook wrote none), merged with
    the rows already there (`merge_rows`), so that the tasks of an array job, each running one
    notebook into the same OUT, and later ``--only`` runs leave one row per notebook: its latest."""
    rows = []
    for r in results:
        counts = [""] * (len(VERDICTS) + 1) if r.verdicts is None else [
            *(r.verdicts[v] for v in VERDICTS), sum(r.verdicts.values())]
        rows.append((r.name, r.status, "" if r.minutes is None else f"{r.minutes:.2f}", *counts,
                     "" if r.executed is None else r.executed))
    merge_rows(path, SUMMARY_COLUMNS, [r.name for r in results], rows)


def merge_rows(path: Path, header: Sequence[str], names: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Write CSV `path` (first column: the notebook) with `rows` in place of the rows it held for
    notebooks `names` and the others' kept, sorted by notebook; under an exclusive lock of
    ``<path>.lock`` (array tasks finish concurrently), replaced atomically."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        kept = [[row.get(h, "") for h in header] for row in csv_rows(path) if row.get(header[0]) not in set(names)]
        tmp = path.with_name(path.name + ".tmp")
        with tmp.open("w", newline="") as fh:
            writer = csv.writer(fh)
            writer.writerow(header)
            writer.writerows(sorted([*kept, *map(list, rows)], key=lambda row: str(row[0])))
        tmp.replace(path)


def list_plans(profile: Profile, plans: Sequence[Plan]) -> None:
    """``--list``: each notebook's parameters, marking the values the profile sets."""
    say(f"profile {profile.name} ({profile.path})")
    for plan in plans:
        say(f"\n{plan.name}  ({plan.path})")
        names = list(plan.declared) + [k for k in plan.parameters if k not in plan.declared]
        rows = []
        for key in names:
            if key in plan.parameters:
                rows.append((f"  {key}", f"= {plan.parameters[key]!r}", f"[{plan.sources[key]}]"))
            else:
                rows.append((f"  {key}", f"= {plan.declared[key]['default']}", "[notebook]"))
        if rows:
            say(format_table(rows))
        else:
            say("  (no parameters cell)")
        for problem in plan.problems:
            say(f"  ERROR: {problem}")


# --------------------------------------------------------------------------- command line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="reproduce/run.py",
        description=(
            "Execute the reproduction notebooks (notebooks/NN_*.ipynb) with papermill under a "
            "profile, collect each notebook's claims table and print a summary.\n\n"
            "Profiles (reproduce/profiles/<name>.yaml, keys 'defaults' and 'notebooks'):\n"
            "  quick  the defaults of each notebook's parameters cell: CPU, minutes per notebook\n"
            "  full   the papers' scale: GPUs (NCCL), CIFAR-10/ImageNet, hours per notebook\n"
            "A profile parameter that a notebook's parameters cell does not define fails that\n"
            "notebook before it runs.\n\n"
            "Outputs: OUT/<NAME>.ipynb (executed notebooks), OUT/<NAME>.kernel.log (what each kernel\n"
            "process printed itself), OUT/summary.csv, and the notebooks'\n"
            "figures and claims.csv under FIGURES/<NAME>/. The kernels see DISTSGD_PROFILE and\n"
            "DISTSGD_FIGURES."
        ),
        epilog=(
            "examples:\n"
            "  python reproduce/run.py                         # every notebook, quick profile\n"
            "  python reproduce/run.py --list --profile full   # what full would pass, run nothing\n"
            "  python reproduce/run.py --only 00 --dry-run     # smoke test: tiny steps, stand-in data\n"
            "  python reproduce/run.py --profile full --only 00_baselines --jobs 1\n"
            "  sbatch reproduce/slurm/papermill.sbatch         # full profile on a SLURM GPU node\n\n"
            "exit status: 0 all notebooks ran, 1 a notebook failed, 2 usage/configuration error,\n"
            "  130/143 interrupted (Ctrl-C/SIGTERM: kernels and workers stopped, the notebooks\n"
            "  finished and not finished printed; run again to continue, finished runs are reused)"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--profile", default="quick", metavar="NAME",
        help="profile to run: quick (default) or full, or any <NAME>.yaml in the profiles dir",
    )
    parser.add_argument(
        "--only", action="extend", nargs="+", metavar="NAME",
        help="run only these notebooks: file stems (00_baselines) or NN prefixes (00); "
        "repeatable, also accepts comma separated lists",
    )
    parser.add_argument(
        "--jobs", "-j", type=int, default=1, metavar="N",
        help="execute up to N notebooks at once (each in its own kernel unless --share-kernels); default 1. "
        "Refused above 1 when the notebooks run on GPUs (they would share them), except with --dry-run",
    )
    parser.add_argument(
        "--share-kernels", action="store_true",
        help="one kernel per --jobs slot, reset between its notebooks (names deleted, figures "
        "closed, working directory and environment restored) instead of a kernel per notebook: "
        "saves ~15 s of start-up per notebook, for dry runs (make test uses it). The kernels' "
        "messages go to OUT/kernel-N.log",
    )
    parser.add_argument(
        "--dry-run", action="store_true",
        help="pass dry_run=True (tiny steps, stand-in data) to every notebook; a notebook "
        "without a dry_run parameter fails. Writes stand-in CIFAR/ImageNet files to OUT/data, "
        "caps processes, batch and evaluation per run ($DISTSGD_MAX_NPROC=2, "
        "$DISTSGD_MAX_BATCH_SIZE=2, $DISTSGD_MAX_EVAL_SAMPLES=4 unless set) and the benchmarks' "
        "inputs and model depth ($DISTSGD_MAX_SEQ_LEN=8, $DISTSGD_MAX_IMAGE_SIDE=16, $DISTSGD_MAX_DEPTH=1), nccl -> gloo "
        "without a GPU. "
        "Default OUT becomes reproduce/runs/<profile>-dry-run "
        "and default FIGURES OUT/figures, so real results are not overwritten",
    )
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
        help="set a parameter (VALUE read as YAML: 3, [2, 4], true) in every selected notebook "
        "whose parameters cell defines KEY, after the profile; repeatable. A KEY that no selected "
        "notebook defines is an error",
    )
    parser.add_argument(
        "--report-only", action="store_true",
        help="execute nothing: write OUT/REPORT.md and OUT/REPORT.html from the claims tables "
        "under FIGURES",
    )
    parser.add_argument(
        "--update-readme", action="store_true",
        help="also rewrite the README's generated verdict table (between its verdicts markers) "
        "from the report's claims",
    )
    parser.add_argument(
        "--update-ledger", action="store_true",
        help="also rewrite the `why` of the profile's expected-verdict ledger "
        "(reproduce/expected/PROFILE.csv) from the claims tables under FIGURES; verdicts unchanged",
    )
    parser.add_argument(
        "--prepare-data", action="store_true",
        help="execute nothing: check the release files of every file-based dataset the selected notebooks "
        "name under the profile (CIFAR-10/100, MNIST, ImageNet; MD5s or counts, `python -m distsgd data "
        "check`) and say where to put those missing; exit 1 unless all are in place. A profile with "
        "release_data: true (full) runs this before any notebook and refuses to start without them",
    )
    parser.add_argument(
        "--download", action="store_true",
        help="with --prepare-data: fetch a missing CIFAR or MNIST with torchvision (needs the internet)",
    )
    parser.add_argument(
        "--list", action="store_true",
        help="print the notebooks and the parameters each gets under the profile; run nothing",
    )
    parser.add_argument(
        "--allocation", action="append", default=[], metavar="NODESxGPUS",
        help="plan for this allocation (e.g. 4x4: four nodes of four GPUs) instead of the SLURM job "
        "this runs in or this host; repeatable: every notebook on NCCL must fit each, the first "
        "gives 'gpus', 'node' and 'K*node' their numbers. A dry run checks 1x8, 2x8 and 4x4 "
        "unless given",
    )
    parser.add_argument(
        "--notebooks-dir", type=Path, default=DEFAULT_NOTEBOOKS_DIR, metavar="DIR",
        help=f"where the NN_*.ipynb notebooks are (default {DEFAULT_NOTEBOOKS_DIR})",
    )
    parser.add_argument(
        "--profiles-dir", type=Path, default=DEFAULT_PROFILES_DIR, metavar="DIR",
        help=f"where the profile YAML files are (default {DEFAULT_PROFILES_DIR})",
    )
    parser.add_argument(
        "--out", type=Path, default=None, metavar="DIR",
        help="where executed notebooks and summary.csv go (OUT; default "
        "reproduce/runs/<profile>)",
    )
    parser.add_argument(
        "--figures-dir", type=Path, default=None, metavar="DIR",
        help="figures root (FIGURES) given to the kernels as DISTSGD_FIGURES; claims are read "
        "from FIGURES/<NAME>/claims.csv (default: $DISTSGD_FIGURES, else <repo>/figures for the quick "
        "profile, <repo>/figures/<profile> for any other)",
    )
    parser.add_argument(
        "--kernel", default="python3", metavar="NAME",
        help="Jupyter kernel to execute with: python3 (the default) is the Python running this "
        "script; `make kernel` installs one named distsgd (`python -m ipykernel install --user "
        "--name distsgd`). An unknown name is an error (exit 2) listing the installed kernels",
    )
    parser.add_argument(
        "--log-output", action="store_true",
        help="stream the notebooks' cell outputs to this terminal/log",
    )
    return parser


def resolve_dirs(args: argparse.Namespace) -> tuple[Path, Path]:
    """(OUT, FIGURES) as absolute paths: --out, else reproduce/runs/<profile>[-dry-run]; --figures-dir,
    else $DISTSGD_FIGURES, else OUT/figures for a dry run, else `distsgd.paths.figures_root` of the
    profile (<repo>/figures for quick, <repo>/figures/<profile> for any other)."""
    suffix = "-dry-run" if args.dry_run else ""
    out = (args.out or DEFAULT_RUNS_DIR / f"{args.profile}{suffix}").resolve()
    if args.figures_dir is not None:
        figures = args.figures_dir
    elif args.dry_run and not os.environ.get("DISTSGD_FIGURES"):
        figures = out / "figures"
    else:
        sys.path.insert(0, str(REPO_ROOT / "lib"))
        from distsgd.paths import figures_root

        figures = figures_root(args.profile)
    return out, figures.resolve()


def uses_gpus(plan: Plan) -> bool:
    """Whether `plan`'s runs take GPUs: its backend (the profile's, else the notebook's default) is
    nccl, or auto on a machine where torch sees a GPU. A notebook without a backend parameter: no."""
    if "backend" in plan.parameters:
        backend = plan.parameters["backend"]
    elif "backend" in plan.declared:
        backend = str(plan.declared["backend"]["default"]).strip("'\"")
    else:
        return False
    return backend == "nccl" or (backend == "auto" and gpu_available())


def check_jobs(plans: Sequence[Plan], jobs: int, dry_run: bool) -> None:
    """UsageError where ``--jobs`` > 1 would put two notebooks on the same GPUs: every notebook's runs
    take the GPUs from the first (one rank per GPU), so two at a time share them and each one's times
    are the other's too. A dry run (nothing timed or decided) may share them."""
    on_gpus = [p.name for p in plans if not p.problems and uses_gpus(p)]
    if jobs > 1 and not dry_run and on_gpus:
        raise UsageError(
            f"--jobs {jobs}: {', '.join(on_gpus)} run on GPUs (backend nccl, or auto with a GPU present), "
            f"and notebooks run at the same time would share them. Use --jobs 1, or one notebook per job "
            f"(reproduce/slurm/papermill.sbatch is an array job: one notebook per task, each on its own "
            f"allocation)")


def check_kernel(name: str) -> None:
    """UsageError, before any notebook starts, if no Jupyter kernel `name` is installed where
    Jupyter looks (jupyter_client's KernelSpecManager: JUPYTER_PATH, the user's and the
    environment's data directories; python3 is always there, as the Python running this)."""
    from jupyter_client.kernelspec import KernelSpecManager

    specs = KernelSpecManager().find_kernel_specs()
    if name not in specs:
        installed = ", ".join(f"{k} ({v})" for k, v in sorted(specs.items())) or "none"
        raise UsageError(
            f"no Jupyter kernel named {name!r}; installed: {installed}. `make kernel` installs one "
            f"named distsgd for this checkout's .venv (python -m ipykernel install --user --name NAME)"
        )


def kernel_environment(profile: str, figures_dir: Path) -> None:
    """Set what the kernels (started by papermill from this process) inherit."""
    os.environ["DISTSGD_PROFILE"] = profile
    os.environ["DISTSGD_FIGURES"] = str(figures_dir)
    lib = str(REPO_ROOT / "lib")
    path = os.environ.get("PYTHONPATH", "")
    if lib not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (lib, path) if p)


def write_report(figures_dir: Path, out_dir: Path, profile: str, names: Sequence[str],
                 update_readme: bool, update_ledger: bool = False) -> None:
    """OUT/REPORT.md and OUT/REPORT.html of these notebooks' claims; with `update_readme`, the
    README's generated verdict table too; with `update_ledger`, the ledger's `why` column."""
    sys.path.insert(0, str(REPO_ROOT / "lib"))
    from distsgd.verdicts import report
    from distsgd.verdicts.claims import ledger_path

    if update_ledger:
        ledger = ledger_path(profile)
        if not ledger.is_file():
            raise UsageError(f"--update-ledger: profile {profile} has no ledger ({ledger})")
        changed = report.update_ledger_why(ledger, report.collect(figures_dir, names)[0])
        say(f"{ledger}: {changed} why(s) rewritten from the claims tables")

    say(f"report: {report.write(figures_dir, out_dir, profile, names)} (and REPORT.html)")
    if update_readme:
        claims, invariants = report.collect(figures_dir, names)
        changed = report.update_readme(REPO_ROOT / "README.md", report.readme_block(claims, invariants))
        say(f"README.md verdict table {'updated' if changed else 'unchanged'}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error("--jobs must be at least 1")
    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
    if args.log_output:
        logging.getLogger("papermill").setLevel(logging.INFO)

    try:
        profile = load_profile(args.profile, args.profiles_dir)
        notebooks = discover_notebooks(args.notebooks_dir.resolve())
        missing = sorted(set(profile.notebooks) - set(notebooks))
        if missing:
            raise UsageError(
                f"profile {profile.path} has entries for notebooks that do not exist in "
                f"{args.notebooks_dir}: {', '.join(missing)} "
                f"(available: {', '.join(notebooks) or 'none'})"
            )
        names = select(notebooks, split_names(args.only))
        if not names:
            raise UsageError(f"no notebooks matching {NOTEBOOK_GLOB} in {args.notebooks_dir}")
    except UsageError as exc:
        say(f"error: {exc}", file=sys.stderr)
        return 2

    try:
        overrides = parse_overrides(args.overrides)
    except UsageError as exc:
        say(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        allocations = allocations_of(args.allocation, args.dry_run, args.list)
    except ValueError as exc:                  # distsgd.ConfigError: a malformed --allocation
        say(f"error: {exc}", file=sys.stderr)
        return 2
    plans = [plan_notebook(n, notebooks[n], profile, args.dry_run, overrides, allocations) for n in names]
    unused = sorted(set(overrides) - {k for p in plans for k in p.declared})
    if unused:
        say(f"error: --set {', '.join(unused)}: defined by none of {', '.join(names)}", file=sys.stderr)
        return 2
    if args.list:
        list_plans(profile, plans)
        return 1 if any(p.problems for p in plans) else 0
    if args.download and not args.prepare_data:
        say("error: --download goes with --prepare-data", file=sys.stderr)
        return 2
    if args.prepare_data:
        bad = check_release_data(profile, plans, args.download)
        say(f"{len(bad)} dataset(s) not in place" if bad else "every dataset in place")
        return 1 if bad else 0

    out_dir, figures_dir = resolve_dirs(args)
    try:
        check_jobs(plans, args.jobs, args.dry_run)
    except UsageError as exc:
        say(f"error: {exc}", file=sys.stderr)
        return 2
    if args.report_only:
        try:
            write_report(figures_dir, out_dir, profile.name, names, args.update_readme, args.update_ledger)
        except UsageError as exc:
            say(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        check_kernel(args.kernel)
    except UsageError as exc:
        say(f"error: {exc}", file=sys.stderr)
        return 2
    if profile.release_data and not args.dry_run:
        from distsgd.data.release import RELEASE_ENV

        bad = check_release_data(profile, plans)
        if bad:
            say(f"error: profile {profile.name} runs on the datasets' release files (release_data: true), and "
                f"{len(bad)} is not in place:\n  " + "\n  ".join(bad) + f"\nPrepare them on this node first: "
                f"python reproduce/run.py --profile {profile.name} --prepare-data [--download]", file=sys.stderr)
            return 2
        os.environ[RELEASE_ENV] = "1"         # the kernels' runs refuse a stand-in (distsgd.data.release)
    try:
        fabric = validation_fabric(profile)
    except UsageError as exc:
        say(f"error: {exc}", file=sys.stderr)
        return 2
    kernel_environment(profile.name, figures_dir)
    if overrides and not args.dry_run:        # other tests than the profile's: their own registrations
        os.environ.setdefault("DISTSGD_REGISTERED", str(out_dir / "registered"))
    if args.dry_run:
        try:
            dry_run_environment(out_dir)
        except UsageError as exc:
            say(f"error: {exc}", file=sys.stderr)
            return 2
    say(f"profile {profile.name}{' (dry run)' if args.dry_run else ''}: {', '.join(names)}")
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        results = run_all(plans, out_dir, figures_dir, args.jobs, args.kernel, args.log_output,
                          args.share_kernels, fabric)
    except Interrupted as exc:
        return report_interrupted(exc, out_dir / "summary.csv")

    summary_csv = out_dir / "summary.csv"
    write_summary(results, summary_csv)
    differences = ledger_differences(figures_dir, profile.name, [r.name for r in results if r.verdicts is not None],
                                     out_dir / "ledger_differences.csv")
    # the report of every notebook summary.csv holds with claims: this run's and earlier ones' (array tasks)
    reported = [row["notebook"] for row in csv_rows(summary_csv) if row["claims_total"]]
    write_report(figures_dir, out_dir, profile.name, reported, args.update_readme)
    say("")
    say(summary_table(results))
    if differences:
        first = sum(d[2] == "not yet run" for d in differences)
        say(f"\n{len(differences)} verdict(s) differ from the ledger reproduce/expected/{profile.name}.csv "
            f"({out_dir / 'ledger_differences.csv'})"
            + (f"; {first} against rows 'not yet run' (reported, failing no notebook)" if first else "") + ":")
        say(format_table([("notebook", "claim", "ledger", "this run"), *differences]))
    failed = [r.name for r in results if not r.ok]
    say(f"\nsummary: {summary_csv}")
    if failed:
        say(f"{len(failed)} of {len(results)} notebook(s) failed: {', '.join(failed)}")
        return 1
    say(f"all {len(results)} notebook(s) ran")
    return 0


def ledger_differences(figures_dir: Path, profile: str, names: Sequence[str], path: Path) -> list[tuple[str, ...]]:
    """(notebook, claim, ledger's verdict, this run's verdict) for every claim of these notebooks'
    claims tables whose verdict is not the ledger's (`distsgd.verdicts.claims.ledger_differences`: a
    claim missing on either side counts; a row "not yet run" is listed, and fails no notebook), merged
    into `path` (the rows of other notebooks kept, `merge_rows`); none where the profile has no ledger."""
    import pandas as pd

    sys.path.insert(0, str(REPO_ROOT / "lib"))
    from distsgd.verdicts.claims import ledger_differences as differences, load_ledger

    ledger = load_ledger(profile)
    if ledger is None:
        return []
    rows = []
    for name in names:
        table = pd.DataFrame(csv_rows(figures_dir / name / "claims.csv"), columns=["id", "verdict"])
        rows += [(name, d.id, d.ledger, d.run) for d in differences(name, table, ledger)]
    merge_rows(path, ("notebook", "claim", "ledger", "this_run"), names, rows)
    return rows


def csv_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file as dicts (none where it does not exist)."""
    if not path.is_file():
        return []
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def report_interrupted(exc: Interrupted, summary_csv: Path) -> int:
    """Print and save which notebooks finished and which did not; the exit status 128 + the
    signal's number (130 for Ctrl-C, 143 for SIGTERM)."""
    write_summary(exc.outcomes, summary_csv)
    say("")
    say(summary_table(exc.outcomes))
    done = [r.name for r in exc.outcomes if r.status not in ("INTERRUPTED", "NOT STARTED")]
    undone = [f"{r.name} ({r.status.lower()})" for r in exc.outcomes
              if r.status in ("INTERRUPTED", "NOT STARTED")]
    say(f"\ninterrupted by {exc}: kernels and their workers stopped; summary: {summary_csv}", file=sys.stderr)
    say(f"finished: {', '.join(done) or 'none'}; not finished: {', '.join(undone) or 'none'}",
        file=sys.stderr)
    say("running the same command again executes the notebooks again; their finished runs are "
        "reused", file=sys.stderr)
    return 128 + exc.signum


if __name__ == "__main__":
    sys.exit(main())

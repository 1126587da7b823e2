"""`make test`: the suites that time wall clocks (`quiet`) one at a time at the machine's normal
priority, and beside them from the start the other suites `--jobs` at a time at idle priority
(Linux's SCHED_IDLE: a core only when no timed process wants it); a suite that times a real network
(`alone`) after all the others have ended; and at the end the minutes each
took against the budget of CI (`make test` <= 40 minutes from a clean clone on 2 cores, install
included) and the CPU minutes of each suite's processes (`CpuAccount`, where the machine allows it).

    python tests/run_suites.py [--jobs 3] [--only NAME ...] [-- PYTEST_ARGS...]

Each suite is one pytest process; its output is kept in a log and printed whole when it ends, so
that suites running together do not interleave. The longest suites start first. The exit
status is pytest's worst: 0 only when every suite passed.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BUDGET_MIN = 40.0                   # CI's budget for the whole of `make test`, install included
NO_TESTS_SELECTED = 5               # pytest's exit status when its options deselect every test


@dataclass(frozen=True)
class Suite:
    name: str
    args: tuple[str, ...]           # pytest's arguments (paths, options)
    about: str
    quiet: bool = False             # times wall clocks: the others only get the cores it leaves idle
    # times a real (shaped) network, whose packets are kernel work that no scheduling class holds back
    # from the others' loopback traffic (beside the idle suites a ring reduce-scatter over tc tbf
    # measured 24% slow twice, against 9% on a quiet machine): it runs when every other suite has ended
    alone: bool = False


# Notebooks whose verdicts rest on measured times (emulated networks, benchmarks, prechecks) run with
# nothing beside them but idle-priority suites; the others decide on losses and accuracies, the
# same under load.
NOTEBOOKS = sorted(str(p.relative_to(REPO)) for p in (REPO / "notebooks").glob("[0-9][0-9]_*.ipynb"))
TIMED_NOTEBOOKS = tuple(n for n in NOTEBOOKS if Path(n).stem[:2] in ("00", "01", "06", "07", "08", "10"))
OTHER_NOTEBOOKS = tuple(n for n in NOTEBOOKS if n not in TIMED_NOTEBOOKS)
PARAMS, DRY_RUN = "tests/test_notebook_params.py", "tests/test_dry_run.py"
DRY_RUN_A = f"{DRY_RUN}::test_full_profile_dry_run_executes[a]"    # half of the notebooks (test_dry_run.HALVES)
NOTEBOOK_RUNS = (PARAMS, DRY_RUN)
CLUSTER = ("tests/test_cluster_env.py", "tests/test_cluster_netns.py")
SLURM = ("tests/test_cluster_slurm.py",)          # a real SLURM; its notebook job is a dry run
# The library's tests in two halves of about equal minutes: those of the experiments, the timeline
# simulator and the benchmarks, and the others
LIBRARY_A = ("tests/test_experiments_*.py", "tests/test_timeline*.py", "tests/test_projection.py",
             "tests/test_dropit_memory.py", "tests/test_add_an_algorithm.py", "tests/test_bench.py")
NOT_TIMED = ("-m", "not timing and not validation")
TIMED = tuple(sorted(str(p.relative_to(REPO)) for p in (REPO / "tests").glob("test_*.py")
                     if "pytest.mark.timing" in p.read_text()))   # the files to collect for -m timing
SUITES = (    # longest first (on 2 cores, 3 at a time): each next one where a slot frees
    Suite("notebooks", ("--nbval-lax", *OTHER_NOTEBOOKS),
          "nbval: the notebooks decided on losses and accuracies"),
    Suite("library-b", ("tests", *(f"--ignore={p}" for p in NOTEBOOK_RUNS + CLUSTER + SLURM),
                        *(f"--ignore-glob={p}" for p in LIBRARY_A), *NOT_TIMED),
          "unit and multi-process tests of lib/ and reproduce/: all but the experiments' and the simulator's"),
    Suite("library-a", (*sorted(str(f.relative_to(REPO)) for g in LIBRARY_A for f in REPO.glob(g)), *NOT_TIMED),
          "unit and multi-process tests of the experiments, the timeline simulator and the benchmarks"),
    Suite("dry-run-a", (DRY_RUN_A, *NOT_TIMED), "half of the notebooks at the full profile's parameters, 2 steps a run"),
    Suite("dry-run-b", (DRY_RUN, f"--deselect={DRY_RUN_A}", *NOT_TIMED),
          "the other half at the full profile's parameters; the full profile's listing"),
    Suite("notebook-params", (PARAMS, *NOT_TIMED), "every notebook at other world sizes and seeds (dry run)"),
    Suite("slurm", (*SLURM, *NOT_TIMED), "a real SLURM: the templates, requeue"),
    Suite("cluster", (*CLUSTER, *NOT_TIMED), "torchrun over network namespaces, cluster environments"),
    Suite("notebooks-timed", ("--nbval-lax", *TIMED_NOTEBOOKS),
          "nbval: the notebooks decided on measured times", quiet=True),
    Suite("timing", (*TIMED, "-m", "timing and not validation"), "tests that assert wall-clock times",
          quiet=True, alone=True),
)


@dataclass
class Outcome:
    suite: Suite
    status: int
    minutes: float
    summary: str                    # pytest's last line ("842 passed, 2 skipped in ...")
    cpu_minutes: float | None = None   # CPU of the suite's processes, all of them (`CpuAccount`)


class CpuAccount:
    """The CPU time of a suite's pytest and every process it starts, kernels, forkservers and ranks
    included (a rank the forkserver reaps, or one left to init, is not counted by `wait4`): a cgroup
    of the `cpuacct` controller (cgroup v1) named for the suite, which the pytest process joins
    before it runs (`join`, as a `preexec_fn`) and its descendants inherit. Where the machine has
    no such controller or refuses to make the cgroup, `minutes` is None."""

    ROOT = Path("/sys/fs/cgroup/cpuacct")

    def __init__(self, name: str) -> None:
        self.path: Path | None = self.ROOT / f"distsgd-suite-{os.getpid()}-{name}"
        try:
            self.path.mkdir()
            (self.path / "cpuacct.usage").read_text()
        except OSError:
            self.path = None

    def join(self) -> None:
        """Move the calling process (a child before its exec) into the cgroup; where that fails
        the suite runs unaccounted."""
        if self.path is not None:
            try:
                (self.path / "cgroup.procs").write_text("0")
            except OSError:
                pass

    def minutes(self, linger_s: float = 10.0) -> float | None:
        """CPU minutes of the processes that joined and their descendants, once none is left or
        after `linger_s` (a forkserver that outlives its pytest by a moment ends first; a daemon a
        suite leaves behind keeps the cgroup, which is removed otherwise)."""
        if self.path is None:
            return None
        deadline = time.monotonic() + linger_s
        while time.monotonic() < deadline:
            try:
                if not (self.path / "cgroup.procs").read_text().strip():
                    break
            except OSError:
                break
            time.sleep(0.1)
        try:
            used = int((self.path / "cpuacct.usage").read_text()) / 60e9
        except (OSError, ValueError):
            return None
        try:
            self.path.rmdir()
        except OSError:
            pass
        return used


def suite_env(suite: Suite, jobs: int, scratch: Path) -> dict[str, str]:
    """The environment of a suite's pytest. A suite that runs beside others gets its share of the
    cores as torch's thread count (OMP_NUM_THREADS, unless set): the kernels' in-process work with
    a thread per core spins while another suite holds the other core (notebook 03's gradient
    comparison beside one busy core: 61.5 s with 2 threads, 3.6 s with 1). The ranks of runs use one
    thread each anyway (`launch.worker_env`); the quiet suites keep torch's default. The notebooks
    nbval executes write their figures and claims tables under `scratch` (DISTSGD_FIGURES, unless
    set), not over the committed ones that other suites' tests read while they run (the README's
    verdict table is checked against them)."""
    env = dict(os.environ)
    if not suite.quiet:
        env.setdefault("OMP_NUM_THREADS", str(max(1, len(os.sched_getaffinity(0)) // jobs)))
    if "--nbval-lax" in suite.args:
        env.setdefault("DISTSGD_FIGURES", str(scratch / "figures"))
    return env


def idle_priority() -> None:
    """Put this process, and the processes it starts, in Linux's idle scheduling class (SCHED_IDLE):
    the kernel runs it only on a core no other process wants, and a waking process of the normal
    class takes the core from it at once."""
    os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))


def idle_available() -> bool:
    """Whether this machine lets a process take the idle class (Linux; a container may refuse)."""
    if not hasattr(os, "SCHED_IDLE"):
        return False
    try:
        return subprocess.run(["true"], preexec_fn=idle_priority).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def run_suite(suite: Suite, pytest_args: list[str], logs: Path, jobs: int, idle: bool = False) -> Outcome:
    log = logs / f"{suite.name}.log"
    cpu = CpuAccount(suite.name)

    def start() -> None:
        cpu.join()
        if idle:
            idle_priority()

    t0 = time.monotonic()
    with open(log, "w") as out:
        status = subprocess.call([sys.executable, "-m", "pytest", *suite.args, *pytest_args], cwd=REPO,
                                 env=suite_env(suite, jobs, logs), stdout=out, stderr=subprocess.STDOUT,
                                 preexec_fn=start)
    minutes = (time.monotonic() - t0) / 60
    if status == NO_TESTS_SELECTED and pytest_args:      # e.g. `-k comm` selects nothing in this suite
        status = 0
    text = log.read_text()
    cpu_minutes = cpu.minutes()
    used = f", {cpu_minutes:.1f} CPU min" if cpu_minutes is not None else ""
    print(f"\n{'=' * 30} suite {suite.name} ({suite.about}): exit {status}, {minutes:.1f} min{used} {'=' * 30}\n"
          f"{text}", flush=True)
    lines = [line.strip("= ") for line in text.splitlines() if line.strip()]
    return Outcome(suite, status, minutes, lines[-1] if lines else "(no output)", cpu_minutes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=3,
                        help="suites run at a time (default 3 on CI's 2 cores: a suite alone leaves a core idle "
                             "while its processes start, sleep in emulated transfers or wait on a rendezvous)")
    parser.add_argument("--phases", action="store_true",
                        help="run the timed suites after the others instead of beside them at idle priority "
                             "(the order where the machine refuses idle priority)")
    parser.add_argument("--only", nargs="+", choices=[s.name for s in SUITES], default=None, metavar="NAME",
                        help=f"run only these suites: {', '.join(s.name for s in SUITES)}")
    parser.add_argument("pytest_args", nargs="*", help="passed to every pytest (after --)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs: a positive number of suites, got {args.jobs}")
    suites = [s for s in SUITES if args.only is None or s.name in args.only]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="distsgd-suites-") as tmp:
        # one store of projections for every notebook the suites execute and the tests marked
        # shared_projections (distsgd.verdicts.projection: the same code on the same inputs reads a
        # projection back); the other tests keep their own (tests/conftest.py)
        os.environ.setdefault("DISTSGD_PROJECTIONS", str(Path(tmp) / "projections"))

        def run(suite: Suite, idle: bool = False) -> Outcome:
            return run_suite(suite, args.pytest_args, Path(tmp), args.jobs, idle)

        others = [s for s in suites if not s.quiet]
        quiet = [s for s in suites if s.quiet and not s.alone]
        with ThreadPoolExecutor(args.jobs) as pool:
            if not args.phases and idle_available():      # the timed suites first, the others in their idle time
                futures = [pool.submit(run, s, True) for s in others]
                outcomes = [run(s) for s in quiet]
                outcomes = [f.result() for f in futures] + outcomes
            else:                                   # the others, then the timed suites alone
                outcomes = list(pool.map(run, others))
                outcomes += [run(s) for s in quiet]
        outcomes += [run(s) for s in suites if s.alone]
    total = (time.monotonic() - t0) / 60

    def cpu(minutes: float | None) -> str:
        return f"{minutes:>9.1f}" if minutes is not None else f"{'-':>9}"

    print(f"\n{'suite':<15}{'exit':>5}{'minutes':>9}{'CPU min':>9}  pytest")
    for o in outcomes:
        print(f"{o.suite.name:<15}{o.status:>5}{o.minutes:>9.1f}{cpu(o.cpu_minutes)}  {o.summary}")
    counted = [o.cpu_minutes for o in outcomes if o.cpu_minutes is not None]
    print(f"{'all':<15}{max(o.status for o in outcomes):>5}{total:>9.1f}{cpu(sum(counted) if counted else None)}  "
          f"{args.jobs} at a time; CI's budget for make test: {BUDGET_MIN:.0f} min with the install; "
          f"{os.cpu_count()} cores")
    return max(o.status for o in outcomes)


if __name__ == "__main__":
    sys.exit(main())

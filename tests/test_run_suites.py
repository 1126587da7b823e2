"""`make test`'s runner (tests/run_suites.py): the timed suites at normal priority from the start, the
others beside them at idle priority, and no suite writing over what another reads."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

import run_suites


def test_notebooks_nbval_executes_write_their_figures_to_scratch(tmp_path, monkeypatch) -> None:
    """The README's verdict table is checked against the committed figures/*/claims.csv while the
    notebook suites run: a timed notebook's new claims table there made that check fail."""
    monkeypatch.delenv("DISTSGD_FIGURES", raising=False)
    nbval = [s for s in run_suites.SUITES if "--nbval-lax" in s.args]
    assert {s.name for s in nbval} == {"notebooks", "notebooks-timed"}
    for suite in run_suites.SUITES:
        env = run_suites.suite_env(suite, 3, tmp_path)
        if suite in nbval:
            assert Path(env["DISTSGD_FIGURES"]).is_relative_to(tmp_path), suite.name
        else:
            assert "DISTSGD_FIGURES" not in env, suite.name       # the library's tests set their own


@pytest.mark.skipif(not run_suites.idle_available(), reason="no idle scheduling class here")
def test_idle_priority_holds_for_the_suites_processes_and_theirs() -> None:
    """From the normal class (this test itself may run in an idle-class suite: its children start
    from the normal class where the machine allows it)."""
    def normal_priority() -> None:
        os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))

    def idle_from_normal() -> None:
        normal_priority()
        run_suites.idle_priority()

    code = ("import os, subprocess, sys; print(os.sched_getscheduler(0) == os.SCHED_IDLE, subprocess.run("
            "[sys.executable, '-c', 'import os; print(os.sched_getscheduler(0) == os.SCHED_IDLE)'], "
            "capture_output=True, text=True).stdout.strip())")
    try:
        normal = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                preexec_fn=normal_priority)
    except subprocess.SubprocessError:
        pytest.skip("this process may not leave the idle class")
    idle = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                          preexec_fn=idle_from_normal)
    assert idle.stdout.split() == ["True", "True"] and normal.stdout.split() == ["False", "False"]


@pytest.mark.skipif(not run_suites.idle_available(), reason="no idle scheduling class here")
def test_timed_suites_start_at_once_at_normal_priority_the_others_idle_beside_them(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DISTSGD_PROJECTIONS", str(tmp_path / "projections"))   # main() sets it where unset
    started: list[tuple[str, bool, bool]] = []      # (suite, idle, another suite still running)
    running: set[str] = set()
    lock = threading.Lock()

    def fake_run_suite(suite, pytest_args, logs, jobs, idle=False):
        with lock:
            started.append((suite.name, idle, bool(running)))
            running.add(suite.name)
        time.sleep(0.05)
        with lock:
            running.discard(suite.name)
        return run_suites.Outcome(suite, 0, 0.0, "ok")

    monkeypatch.setattr(run_suites, "run_suite", fake_run_suite)
    assert run_suites.main(["--jobs", "2"]) == 0
    by_name = {name: (idle, beside) for name, idle, beside in started}
    assert sorted(by_name) == sorted(s.name for s in run_suites.SUITES)
    quiet = [s.name for s in run_suites.SUITES if s.quiet]
    assert all(not by_name[q][0] for q in quiet) and all(by_name[s.name][0] for s in run_suites.SUITES
                                                          if not s.quiet)
    assert by_name[quiet[0]][1] or started[0][0] == quiet[0]    # not after the others: beside them
    assert [n for n, _, _ in started if n in quiet] == quiet    # one at a time, in order
    assert started[-1] == ("timing", False, False)     # the real network's: last, with no other suite running


def test_a_suites_cpu_counts_the_processes_its_children_leave_behind() -> None:
    """A grandchild that outlives its parent (as a forkserver's rank can) burns ~0.6 s of CPU; the
    suite's account has it, where the rusage of the waited child would not."""
    account = run_suites.CpuAccount("test-account")
    if account.path is None:
        pytest.skip("no cpuacct cgroup this process may create here")
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    orphaning = (f"import subprocess, sys; subprocess.Popen([sys.executable, '-c', {burn!r}], "
                 "stdout=subprocess.DEVNULL)")
    subprocess.run([sys.executable, "-c", orphaning], check=True, preexec_fn=account.join)
    assert 0.6 / 60 <= account.minutes(linger_s=30) < 30 / 60     # waits for the orphan to end

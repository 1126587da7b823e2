"""End-to-end tests of reproduce/run.py on tiny stand-in notebooks (no distsgd library needed).

Every test runs the driver as a subprocess, the way users and SLURM do. Only four notebook
executions start a kernel (~2-3 s each); the other tests stop before executing anything.
"""
from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat
import psutil
import pytest
import yaml

RUN_PY = Path(__file__).resolve().parent.parent / "reproduce" / "run.py"

PARAMETERS = "x = 1\ndry_run = False"

# Writes $DISTSGD_FIGURES/<name>/claims.csv, the file the library's claims table writes.
CLAIMS_CELL = textwrap.dedent(
    """\
    import csv, os
    from pathlib import Path
    out = Path(os.environ["DISTSGD_FIGURES"]) / NAME
    out.mkdir(parents=True, exist_ok=True)
    rows = [
        ("x_pos", "x is positive", "> 0", x, "reproduced" if x > 0 else "contradicted"),
        ("x_two", "x equals 2", 2, x, "reproduced" if x == 2 else "contradicted"),
        ("dry", "dry run", True, dry_run, "reproduced" if dry_run else "inconclusive"),
    ]
    with open(out / "claims.csv", "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "claim", "paper", "measured", "verdict"])
        w.writerows(rows)
    seen = {"profile": os.environ.get("DISTSGD_PROFILE"), "cwd": os.getcwd()}
    print(seen)
    """
)


def make_notebook(path: Path, parameters: str | None, *cells: str) -> None:
    """A notebook with an optional tagged parameters cell followed by code cells."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    if parameters is not None:
        nb.cells.append(nbformat.v4.new_code_cell(parameters, metadata={"tags": ["parameters"]}))
    nb.cells.extend(nbformat.v4.new_code_cell(src) for src in cells)
    nbformat.write(nb, path)


@dataclass
class Project:
    """A throw-away notebooks/profiles/figures/out layout."""

    root: Path

    @property
    def notebooks(self) -> Path:
        return self.root / "notebooks"

    @property
    def profiles(self) -> Path:
        return self.root / "profiles"

    @property
    def figures(self) -> Path:
        return self.root / "figures"

    @property
    def out(self) -> Path:
        return self.root / "out"

    def profile(self, name: str, data: dict) -> None:
        (self.profiles / f"{name}.yaml").write_text(yaml.safe_dump(data))

    def run(self, *args: str, profile: str = "test",
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        cmd = [
            sys.executable, str(RUN_PY), "--profile", profile,
            "--notebooks-dir", str(self.notebooks), "--profiles-dir", str(self.profiles),
            "--figures-dir", str(self.figures), "--out", str(self.out), *args,
        ]
        env = {**{k: v for k, v in os.environ.items() if k != "DISTSGD_FIGURES"}, **(env or {})}
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)

    def main(self, *args: str, profile: str = "test") -> int:
        """`run.main` in this process (for what stops before any kernel starts: no interpreter to start)."""
        return run_module().main(["--profile", profile, "--notebooks-dir", str(self.notebooks), "--profiles-dir",
                                  str(self.profiles), "--figures-dir", str(self.figures), "--out", str(self.out), *args])

    def summary(self) -> dict[str, dict[str, str]]:
        with (self.out / "summary.csv").open(newline="") as fh:
            return {row["notebook"]: row for row in csv.DictReader(fh)}


@pytest.fixture
def project(tmp_path: Path) -> Project:
    """00_alpha writes claims; 01_beta asserts x < 10 and writes none; 02_gamma has no dry_run."""
    p = Project(tmp_path)
    for d in (p.notebooks, p.profiles, p.figures):
        d.mkdir()
    make_notebook(p.notebooks / "00_alpha.ipynb", PARAMETERS, 'NAME = "00_alpha"\n' + CLAIMS_CELL)
    make_notebook(p.notebooks / "01_beta.ipynb", PARAMETERS, 'assert x < 10, f"x too large: {x}"')
    make_notebook(p.notebooks / "02_gamma.ipynb", "x = 1", "y = x + 1")
    (p.notebooks / "README.md").write_text("not a notebook")
    p.profile("test", {"defaults": {}, "notebooks": {"00_alpha": {"x": 2}}})
    return p


def injected_parameters(executed: Path) -> str:
    nb = nbformat.read(executed, as_version=4)
    cells = [c for c in nb.cells if "injected-parameters" in c.metadata.get("tags", [])]
    return cells[0].source if cells else ""


def test_runs_notebooks_and_summarises_claims(project: Project) -> None:
    # A claims table left by an earlier run of 01_beta (which writes none) must not be counted.
    stale = project.figures / "01_beta" / "claims.csv"
    stale.parent.mkdir()
    stale.write_text("id,claim,paper,measured,verdict\nold,old,1,1,reproduced\n")

    proc = project.run("--only", "00", "--only", "01_beta", "--jobs", "2")
    assert proc.returncode == 0, proc.stdout + proc.stderr

    for name in ("00_alpha", "01_beta"):
        assert (project.out / f"{name}.ipynb").is_file()
    assert not (project.out / "02_gamma.ipynb").exists()  # filtered out by --only
    assert "x = 2" in injected_parameters(project.out / "00_alpha.ipynb")
    assert "x" not in injected_parameters(project.out / "01_beta.ipynb")

    executed = nbformat.read(project.out / "00_alpha.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert "'profile': 'test'" in printed
    assert str(project.notebooks) in printed  # kernel cwd is the notebooks directory

    summary = project.summary()
    assert list(summary) == ["00_alpha", "01_beta"]
    alpha, beta = summary["00_alpha"], summary["01_beta"]
    assert (alpha["status"], alpha["reproduced"], alpha["contradicted"], alpha["inconclusive"],
            alpha["claims_total"]) == ("ok", "2", "0", "1", "3")
    assert (beta["status"], beta["reproduced"], beta["claims_total"]) == ("ok", "", "")
    report = (project.out / "REPORT.md").read_text()             # the report lists 00_alpha's claims only
    assert "## 00_alpha" in report and "x equals 2" in report and "01_beta" not in report
    assert "x equals 2" in (project.out / "REPORT.html").read_text()
    table = proc.stdout[proc.stdout.index("notebook  "):]
    assert "2 reproduced, 0 contradicted, 1 inconclusive" in table and "FAILED" not in table


def test_failing_notebook_sets_exit_status(project: Project) -> None:
    project.profile("bad", {"notebooks": {"01_beta": {"x": 50}}})
    proc = project.run("--only", "01", profile="bad")
    assert proc.returncode == 1
    assert "FAILED: AssertionError: x too large: 50" in proc.stdout
    assert project.summary()["01_beta"]["status"].startswith("FAILED: AssertionError")
    assert (project.out / "01_beta.ipynb").is_file()  # the executed notebook shows the error


def test_dry_run_reaches_notebook(project: Project) -> None:
    proc = project.run("--only", "00_alpha", "--dry-run")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dry_run = True" in injected_parameters(project.out / "00_alpha.ipynb")
    assert project.summary()["00_alpha"]["reproduced"] == "3"


def test_dry_run_without_parameter_fails_before_executing(project: Project) -> None:
    proc = project.run("--only", "02", "--dry-run")
    assert proc.returncode == 1
    assert "'dry_run'" in proc.stderr and "02_gamma" in proc.stderr
    assert "FAILED" in proc.stdout
    assert not (project.out / "02_gamma.ipynb").exists()


def test_unknown_profile_parameter_fails_before_executing(project: Project) -> None:
    project.profile("typo", {"defaults": {"x": 3}, "notebooks": {"00_alpha": {"stpes": 5}}})
    proc = project.run("--only", "00", profile="typo")
    assert proc.returncode == 1
    message = proc.stderr + proc.stdout
    assert "'stpes'" in message and "00_alpha" in message and "notebooks.00_alpha" in message
    assert not (project.out / "00_alpha.ipynb").exists()
    assert not (project.figures / "00_alpha").exists()
    assert project.summary()["00_alpha"]["status"].startswith("FAILED: parameter 'stpes'")


def test_list_runs_nothing(project: Project) -> None:
    proc = project.run("--list")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for name in ("00_alpha", "01_beta", "02_gamma"):
        assert name in proc.stdout
    assert "= 2" in proc.stdout and "profile test: notebooks.00_alpha" in proc.stdout
    assert "README" not in proc.stdout
    assert not project.out.exists()
    assert not any(project.figures.iterdir())

    proc = project.run("--list", "--only", "00", "02_gamma,01")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert all(name in proc.stdout for name in ("00_alpha", "01_beta", "02_gamma"))
    proc = project.run("--list", "--only", "00", "02_gamma")
    assert "00_alpha" in proc.stdout and "02_gamma" in proc.stdout
    assert "01_beta" not in proc.stdout


def test_list_reports_invalid_parameters(project: Project) -> None:
    project.profile("typo", {"notebooks": {"01_beta": {"y": 1}}})
    proc = project.run("--list", profile="typo")
    assert proc.returncode == 1
    assert "ERROR" in proc.stdout and "'y'" in proc.stdout
    assert not project.out.exists()


def test_unknown_only_name_lists_available(project: Project) -> None:
    proc = project.run("--only", "07_nothing")
    assert proc.returncode == 2
    assert "07_nothing" in proc.stderr
    assert all(n in proc.stderr for n in ("00_alpha", "01_beta", "02_gamma"))
    assert not project.out.exists()


def test_unknown_profile_lists_available(project: Project) -> None:
    project.profile("other", {})
    proc = project.run(profile="nope")
    assert proc.returncode == 2
    assert "'nope'" in proc.stderr and "other" in proc.stderr and "test" in proc.stderr


def test_profile_entry_for_missing_notebook(project: Project) -> None:
    project.profile("stale", {"notebooks": {"05_removed": {"x": 1}}})
    proc = project.run("--list", profile="stale")
    assert proc.returncode == 2
    assert "05_removed" in proc.stderr


def test_malformed_profile(project: Project) -> None:
    (project.profiles / "broken.yaml").write_text("notebooks: [00_alpha]\n")
    proc = project.run("--list", profile="broken")
    assert proc.returncode == 2
    assert "mapping" in proc.stderr


@pytest.mark.parametrize("profile", ["quick", "full"])
def test_shipped_profiles_fit_the_shipped_notebooks(profile: str) -> None:
    """Every parameter a shipped profile sets exists in that notebook's parameters cell
    (`--list` checks them against the notebooks and fails on any mismatch)."""
    proc = subprocess.run([sys.executable, str(RUN_PY), "--list", "--profile", profile],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "ERROR" not in proc.stdout


def test_help_describes_profiles() -> None:
    proc = subprocess.run([sys.executable, str(RUN_PY), "--help"], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0
    for word in ("quick", "full", "--dry-run", "summary.csv", "examples"):
        assert word in proc.stdout


def test_set_overrides_the_notebooks_that_define_the_parameter(project: Project) -> None:
    proc = project.run("--list", "--set", "x=5")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = next(l for l in proc.stdout.splitlines() if "[--set]" in l)   # 00_alpha's and 01_beta's x
    assert line.split() == ["x", "=", "5", "[--set]"]
    proc = project.run("--list", "--set", "nope=1")
    assert proc.returncode == 2 and "--set nope: defined by none of" in proc.stderr
    proc = project.run("--list", "--set", "novalue")
    assert proc.returncode == 2 and "KEY=VALUE" in proc.stderr


def test_the_kernels_own_output_goes_to_its_log_not_to_the_driver(project: Project) -> None:
    """What a kernel process writes to its own stdout/stderr (ipykernel's warnings and shutdown
    tracebacks, a crash) lands in OUT/<NAME>.kernel.log, never in the driver's output; a failed
    notebook's status names that file."""
    make_notebook(project.notebooks / "00_alpha.ipynb", PARAMETERS,
                  "import os\nos.write(2, b'kernel-stderr-marker\\n'); os.write(1, b'kernel-stdout-marker\\n')",
                  "raise RuntimeError('boom')")
    proc = project.run("--only", "00")
    assert "marker" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    log = (project.out / "00_alpha.kernel.log").read_text()
    assert "kernel-stderr-marker" in log and "kernel-stdout-marker" in log, log
    assert proc.returncode == 1 and "00_alpha.kernel.log" in project.summary()["00_alpha"]["status"]


def _descendant_names(proc: psutil.Process) -> list[str]:
    """Names of `proc`'s descendants that still exist: one may exit between the listing and the
    reading of its name (psutil.NoSuchProcess; CI of 2f11788)."""
    names = []
    for p in proc.children(recursive=True):
        try:
            names.append(p.name())
        except psutil.NoSuchProcess:
            pass
    return names


def _running(p: psutil.Process) -> bool:
    """Whether `p` still runs (not gone, not a zombie)."""
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupt_stops_kernels_and_workers_and_names_unfinished_notebooks(project, signum) -> None:
    """Ctrl-C or SIGTERM while a notebook runs: the kernel and the process it started are
    stopped, the finished and unfinished notebooks are named, exit status 128 + signal, no
    traceback."""
    for old in project.notebooks.glob("*.ipynb"):
        old.unlink()
    make_notebook(project.notebooks / "00_fast.ipynb", PARAMETERS, "y = x + 1")
    make_notebook(project.notebooks / "01_slow.ipynb", PARAMETERS,
                  "import subprocess, time\nworker = subprocess.Popen(['sleep', '300'])\ntime.sleep(300)")
    make_notebook(project.notebooks / "02_later.ipynb", PARAMETERS, "y = x")
    project.profile("test", {})
    cmd = [sys.executable, str(RUN_PY), "--profile", "test", "--notebooks-dir", str(project.notebooks),
           "--profiles-dir", str(project.profiles), "--figures-dir", str(project.figures),
           "--out", str(project.out)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        driver = psutil.Process(proc.pid)
        deadline = time.monotonic() + 120
        while "sleep" not in _descendant_names(driver):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        tree = driver.children(recursive=True)           # the kernel and the notebook's worker
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signum, (out, err)
    assert "Traceback" not in err and "Traceback" not in out, err
    assert "finished: 00_fast; not finished: 01_slow (interrupted), 02_later (not started)" in err
    assert not [p for p in tree if _running(p)]
    rows = project.summary()
    assert rows["00_fast"]["status"] == "ok" and rows["01_slow"]["status"] == "INTERRUPTED"


def isolated_jupyter(root: Path) -> dict[str, str]:
    """Jupyter paths under `root` only, so the user's own kernels neither help nor hide anything."""
    return {"JUPYTER_PATH": str(root / "share" / "jupyter"), "JUPYTER_DATA_DIR": str(root / "data"),
            "JUPYTER_CONFIG_DIR": str(root / "config"), "JUPYTER_RUNTIME_DIR": str(root / "runtime")}


def test_unknown_kernel_fails_before_any_notebook_and_lists_the_installed(project: Project) -> None:
    proc = project.run("--only", "00", "--kernel", "no-such-kernel", env=isolated_jupyter(project.root / "jup"))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "no Jupyter kernel named 'no-such-kernel'" in proc.stderr
    assert "installed: python3 (" in proc.stderr and "make kernel" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not project.out.exists() or not list(project.out.glob("*.ipynb"))    # nothing executed


def test_named_kernel_installed_with_ipykernel_executes_the_notebooks(project: Project) -> None:
    """What `make kernel` does (ipykernel install --name), into a prefix Jupyter is pointed at; the
    kernel spec sets a variable that only a kernel started from it has."""
    jup = isolated_jupyter(project.root / "jup")
    subprocess.run([sys.executable, "-m", "ipykernel", "install", "--prefix", str(project.root / "jup"),
                    "--name", "distsgd-test", "--display-name", "Python (distsgd-test)",
                    "--env", "KERNEL_MARK", "from-distsgd-test"],
                   check=True, capture_output=True, env={**os.environ, **jup})
    make_notebook(project.notebooks / "03_kernel.ipynb", PARAMETERS,
                  "import os, sys\nprint('mark', os.environ.get('KERNEL_MARK'), sys.executable)")
    proc = project.run("--only", "03", "--kernel", "distsgd-test", env=jup)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    executed = nbformat.read(project.out / "03_kernel.ipynb", as_version=4)
    printed = "".join(o.get("text", "") for c in executed.cells for o in c.get("outputs", []))
    assert f"mark from-distsgd-test {sys.executable}" in printed
    assert project.summary()["03_kernel"]["status"] == "ok"


def test_shared_kernel_is_reset_between_notebooks_and_replaced_when_it_dies(project: Project) -> None:
    """`--share-kernels` (make test's dry runs): one kernel runs every notebook of its slot, and
    to each it looks new: no name, figure, working directory or environment variable left by the
    notebook before; a notebook that kills the kernel gets the next one a fresh kernel."""
    dunders = project.root / "dunders.json"        # a new kernel's module names (__spec__, ...), seen by 03
    make_notebook(project.notebooks / "03_leave.ipynb", PARAMETERS, textwrap.dedent(f"""\
        import json
        json.dump(sorted(k for k in dir() if k.startswith("__")), open({str(dunders)!r}, "w"))
        import os, matplotlib
        matplotlib.use("agg")
        import matplotlib.pyplot as plt
        left_behind = 1
        plt.figure()
        os.environ["DISTSGD_LEFT_BEHIND"] = "1"
        os.chdir("/")
        print("kernel pid", os.getpid())
        """))
    make_notebook(project.notebooks / "04_look.ipynb", PARAMETERS, textwrap.dedent(f"""\
        import json, os, sys
        assert sorted(k for k in dir() if k.startswith("__")) == json.load(open({str(dunders)!r})), "not a new kernel's"
        assert "left_behind" not in dir() and "plt" not in dir(), "a name of 03 is still defined"
        assert "DISTSGD_LEFT_BEHIND" not in os.environ, "03's environment variable is still set"
        assert os.path.basename(os.getcwd()) == "notebooks", os.getcwd()
        pyplot = sys.modules.get("matplotlib.pyplot")
        assert pyplot is None or not pyplot.get_fignums(), "03's figure is still open"
        print("kernel pid", os.getpid())
        """))
    make_notebook(project.notebooks / "05_crash.ipynb", PARAMETERS, "import os\nos._exit(1)")
    make_notebook(project.notebooks / "06_after.ipynb", PARAMETERS, "import os\nprint('kernel pid', os.getpid())")
    proc = project.run("--only", "03", "04", "05", "06", "--share-kernels")
    assert proc.returncode == 1, proc.stdout + proc.stderr        # 05 killed its kernel
    status = {name: row["status"] for name, row in project.summary().items()}
    assert status["03_leave"] == status["04_look"] == status["06_after"] == "ok", status
    assert status["05_crash"].startswith("FAILED") and "kernel-0.log" in status["05_crash"], status

    def kernel_pid(name: str) -> str:
        nb = nbformat.read(project.out / f"{name}.ipynb", as_version=4)
        printed = "".join(o.get("text", "") for c in nb.cells for o in c.get("outputs", []))
        return printed.split("kernel pid")[1].split()[0]

    assert kernel_pid("03_leave") == kernel_pid("04_look")       # one kernel ran both
    assert kernel_pid("04_look") != kernel_pid("06_after")      # the dead kernel was replaced
    assert not list(project.out.glob("*.kernel.log"))            # one log per slot, not per notebook


# --------------------------------------------------------------------------- batch operation

def run_module():
    """reproduce/run.py imported in this process (its helpers, without a subprocess)."""
    sys.path.insert(0, str(RUN_PY.parent))
    import run

    return run


def test_each_profile_writes_its_figures_apart_from_the_committed_quick_ones(monkeypatch, tmp_path) -> None:
    """The quick profile's figures are the committed figures/<NAME>/; any other profile's go to
    figures/<profile>/<NAME>/, in run.py's default and in the library's `figures_dir` alike."""
    from distsgd.paths import figures_dir, figures_root

    run = run_module()
    repo = RUN_PY.parent.parent
    monkeypatch.delenv("DISTSGD_FIGURES", raising=False)
    for profile, expected in (("quick", repo / "figures"), ("full", repo / "figures" / "full")):
        assert run.resolve_dirs(run.build_parser().parse_args(["--profile", profile]))[1] == expected
        assert figures_root(profile) == expected
    monkeypatch.setenv("DISTSGD_PROFILE", "full")
    monkeypatch.setattr("distsgd.paths.repo_root", lambda: tmp_path)
    assert figures_dir("05_vrl_sgd") == tmp_path / "figures" / "full" / "05_vrl_sgd"
    monkeypatch.setenv("DISTSGD_FIGURES", str(tmp_path / "elsewhere"))
    assert figures_dir("05_vrl_sgd") == tmp_path / "elsewhere" / "05_vrl_sgd"


def test_jobs_above_one_is_refused_for_notebooks_on_gpus(project: Project, capsys) -> None:
    """Two notebooks at a time would share the GPUs: refused before any kernel starts (a dry run,
    which times and decides nothing, may share them)."""
    make_notebook(project.notebooks / "03_gpu.ipynb", 'backend = "nccl"\ndry_run = False', "pass")
    assert project.main("--only", "00", "03", "--jobs", "2") == 2
    err = capsys.readouterr().err
    assert "--jobs 2: 03_gpu run on GPUs" in err and "papermill.sbatch" in err
    assert not project.out.exists()
    assert project.main("--only", "00", "03", "--jobs", "2", "--list") == 0


def test_summary_and_ledger_differences_keep_the_other_notebooks_rows(tmp_path, monkeypatch) -> None:
    """Array tasks write one notebook each into the same OUT: each summary row is the latest of its
    notebook; a ledger row "not yet run" is listed, not failed."""
    run = run_module()
    summary = tmp_path / "summary.csv"
    run.write_summary([run.NotebookOutcome("05_b", "ok", 1.0, {"reproduced": 1, "contradicted": 0,
                                                                "inconclusive": 0})], summary)
    run.write_summary([run.NotebookOutcome("01_a", "FAILED: x", 2.0)], summary)
    run.write_summary([run.NotebookOutcome("05_b", "ok", 3.0)], summary)
    rows = list(csv.DictReader(summary.open()))
    assert [(r["notebook"], r["status"], r["minutes"], r["claims_total"]) for r in rows] == [
        ("01_a", "FAILED: x", "2.00", ""), ("05_b", "ok", "3.00", "")]

    ledger = tmp_path / "ledger.csv"
    ledger.write_text("notebook,id,verdict,why\n05_b,x,not yet run,w\n05_b,y,reproduced,w\n01_a,z,reproduced,w\n")
    monkeypatch.setattr("distsgd.verdicts.claims.ledger_path", lambda profile: ledger)
    for name, table in (("05_b", "id,verdict\nx,contradicted\ny,reproduced\n"), ("01_a", "id,verdict\nz,inconclusive\n")):
        (tmp_path / "figures" / name).mkdir(parents=True)
        (tmp_path / "figures" / name / "claims.csv").write_text(table)
    out = tmp_path / "ledger_differences.csv"
    assert run.ledger_differences(tmp_path / "figures", "any", ["05_b"], out) == [
        ("05_b", "x", "not yet run", "contradicted")]
    run.ledger_differences(tmp_path / "figures", "any", ["01_a"], out)
    assert [tuple(r.values()) for r in csv.DictReader(out.open())] == [
        ("01_a", "z", "reproduced", "inconclusive"), ("05_b", "x", "not yet run", "contradicted")]


def test_a_profile_on_release_data_refuses_to_start_without_it(project: Project, tmp_path, monkeypatch,
                                                                capsys) -> None:
    """release_data: true (the full profile): the datasets the notebooks name are checked before any
    kernel starts, and a stand-in is refused naming the dataset, its folder and the command."""
    from distsgd.data.standins import write_mnist

    make_notebook(project.notebooks / "03_mnist.ipynb", 'data = "digits"\nacc_data = ["mnist"]\ndry_run = False', "pass")
    project.profile("paper", {"release_data": True, "notebooks": {"03_mnist": {"data": "cifar10"}}})
    monkeypatch.setenv("DISTSGD_DATA", str(tmp_path / "data"))
    write_mnist(tmp_path / "data" / "mnist")              # a stand-in: 1,040 / 200 images
    assert project.main("--only", "03", "--prepare-data", profile="paper") == 1
    out = capsys.readouterr().out
    assert "datasets mnist, cifar10" in out and "t10k-images-idx3-ubyte: 200 entries, the release has 10000" in out
    assert project.main("--only", "03", profile="paper") == 2
    err = capsys.readouterr().err
    assert "release_data: true" in err and "--prepare-data" in err
    assert f"cifar10: missing in {tmp_path / 'data' / 'cifar10'}" in err
    assert not project.out.exists()

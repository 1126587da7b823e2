#!/usr/bin/env python3
"""Register a notebook's tests before its deciding runs, and run the pilot that gives them power.

    python reproduce/register.py --pilot --only 05            # the pilot: other seeds, at T and at 4T
    python reproduce/register.py --only 05 --why "..." --seen no

**Registering** executes the notebook's cells up to and including its registration cell (the one
that calls ``claims.preregister``) with the profile's parameters; the notebook stages its tests, its
design (seeds, run length) and each test's power from the committed pilot
(`distsgd.verdicts.registration`), and this script writes ``reproduce/registered/<profile>/<NB>.json``
and adds a row to ``reproduce/registered/<profile>/log.csv``: the date, what changed, ``--why`` and
``--seen`` (whether the deciding runs had been seen). Nothing else writes a registration: a
notebook's run only holds itself to it. With ``--set`` the registration goes to
``reproduce/runs/<profile>/registered`` (or ``$DISTSGD_REGISTERED``), where ``reproduce/run.py --set``
reads it.

**The pilot** (``--pilot``) is the profile's ``pilots.<NB>`` entry: the parameters of its run at the
profile's length ``T`` (seeds disjoint from the deciding ones) and of its run at ``4T``, e.g.::

    pilots:
      05_vrl_sgd: {T: {seed: 100}, 4T: {seed: 100, steps: 800}}

Each is registered (``reproduce/pilots/<profile>/<NB>/registered/<T|4T>/``, logged there) and then
executed in full; its ``claims.csv`` is kept in ``reproduce/pilots/<profile>/<NB>/<T|4T>/`` (committed)
and its verdicts are asserted against no ledger. Registering the notebook afterwards reads them.

Exit status: 0 done, 1 a notebook failed, 2 a usage error.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any, Sequence
from unittest import mock

import nbformat
import papermill

sys.path.insert(0, str(Path(__file__).resolve().parent))
import run  # noqa: E402  (reproduce/run.py: profiles, plans, kernels)

sys.path.insert(0, str(run.REPO_ROOT / "lib"))
from distsgd.verdicts import registration  # noqa: E402

REGISTRATION_CALL = "claims.preregister("
PHASES = ("T", "4T")


def registration_notebook(path: Path, out: Path) -> Path:
    """A copy of notebook `path` that ends with its registration cell (the first code cell calling
    ``claims.preregister``); UsageError where it has none."""
    nb = nbformat.read(path, as_version=4)
    end = next((i for i, c in enumerate(nb.cells) if c.cell_type == "code" and REGISTRATION_CALL in c.source), None)
    if end is None:
        raise run.UsageError(f"{path.name} has no registration cell (a code cell calling {REGISTRATION_CALL}...)")
    nb.cells = nb.cells[:end + 1]
    out.parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(nb, out)
    return out


def execute(plan: run.Plan, source: Path, output: Path, kernel: str) -> None:
    """Execute `source` with `plan`'s parameters into `output` (the kernel's own messages go to
    ``<output>.kernel.log``)."""
    papermill.execute_notebook(str(source), str(output), parameters=plan.parameters, kernel_name=kernel,
                               cwd=str(plan.path.parent), progress_bar=False,
                               kernel_manager_class=run.kernel_manager_logging_to(output.with_suffix(".kernel.log")))


def register(plan: run.Plan, final: Path, work: Path, why: str, seen: bool, kernel: str,
             pilot: Path | None = None) -> str:
    """Execute `plan`'s notebook to its registration cell, staging the registration in `work`, and
    write it to `final` with its log row. `pilot`: the pilot folder whose claims give the tests their
    power (None: the profile's, `registration.pilot_folder`). Returns what changed."""
    staged = work / f"{plan.name}.registration.json"
    staged.unlink(missing_ok=True)
    env = {registration.REGISTER_ENV: str(staged)} | ({} if pilot is None else {registration.PILOT_ENV: str(pilot)})
    with mock.patch.dict(os.environ, env):            # the caller's environment is restored afterwards
        execute(plan, registration_notebook(plan.path, work / f"{plan.name}.register.ipynb"),
                work / f"{plan.name}.registered.ipynb", kernel)
    if not staged.is_file():
        raise run.UsageError(f"{plan.name}: its registration cell staged nothing (is it a dry run?)")
    return registration.write(final, json.loads(staged.read_text()), why, seen)


def run_pilot(name: str, path: Path, profile: run.Profile, out: Path, why: str, seen: bool, kernel: str) -> None:
    """Register and execute the pilot of notebook `name` at T and at 4T; keep its claims tables."""
    entry = profile.pilots.get(name)
    if entry is None or set(entry) != set(PHASES):
        raise run.UsageError(f"profile {profile.path}: pilots.{name} must give the parameters of "
                             f"{' and '.join(PHASES)} (e.g. {{T: {{seed: 100}}, 4T: {{seed: 100, steps: 800}}}})")
    folder = registration.pilot_folder(name, profile.name)
    for phase in PHASES:
        plan = run.plan_notebook(name, path, profile, False, run.parse_overrides(
            [f"{k}={json.dumps(v)}" for k, v in entry[phase].items()]))
        if plan.problems:
            raise run.UsageError(f"pilots.{name}.{phase}: {plan.problems[0]}")
        reg_folder = folder / "registered" / phase
        work = out / "pilot" / name / phase
        changed = register(plan, reg_folder / f"{name}.json", work, f"pilot at {phase}: {why}", seen, kernel,
                           pilot=work / "no-pilot")
        run.say(f"{name}: pilot {phase} registered ({changed})")
        with mock.patch.dict(os.environ, {registration.REGISTERED_ENV: str(reg_folder),
                                          "DISTSGD_PROFILE": f"{profile.name}-pilot",  # no ledger: only invariants asserted
                                          "DISTSGD_FIGURES": str(work / "figures")}):
            execute(plan, plan.path, work / f"{name}.ipynb", kernel)
        (folder / phase).mkdir(parents=True, exist_ok=True)
        for table in ("claims.csv", "invariants.csv"):
            if (work / "figures" / name / table).is_file():
                shutil.copy(work / "figures" / name / table, folder / phase / table)
        run.say(f"{name}: pilot {phase} ran; its claims in {folder / phase}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="reproduce/register.py", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", action="extend", nargs="+", metavar="NAME", required=True,
                        help="the notebooks: file stems or NN prefixes")
    parser.add_argument("--profile", default="quick", metavar="NAME", help="the profile (default quick)")
    parser.add_argument("--pilot", action="store_true", help="register and run the notebooks' pilots instead")
    parser.add_argument("--why", default="", help="why this registration (required unless --pilot)")
    parser.add_argument("--seen", choices=("yes", "no"), help="whether the deciding runs had been seen (required)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="register with other parameters, into OUT/registered (as reproduce/run.py --set)")
    parser.add_argument("--out", type=Path, default=None, metavar="DIR",
                        help="working folder (default reproduce/runs/<profile>-register)")
    parser.add_argument("--kernel", default="python3", metavar="NAME", help="the Jupyter kernel (default python3)")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.seen is None:
            raise run.UsageError("--seen yes|no: say whether the deciding runs had been seen")
        if not args.pilot and not args.why.strip():
            raise run.UsageError("--why: say why the tests are (re-)registered")
        profile = run.load_profile(args.profile, run.DEFAULT_PROFILES_DIR)
        notebooks = run.discover_notebooks(run.DEFAULT_NOTEBOOKS_DIR)
        names = run.select(notebooks, run.split_names(args.only))
        overrides = run.parse_overrides(args.overrides)
        run.check_kernel(args.kernel)
    except run.UsageError as exc:
        run.say(f"error: {exc}", file=sys.stderr)
        return 2
    out = (args.out or run.DEFAULT_RUNS_DIR / f"{profile.name}-register").resolve()
    run.kernel_environment(profile.name, out / "figures")
    if overrides:                          # where reproduce/run.py --set reads them
        os.environ.setdefault(registration.REGISTERED_ENV, str(run.DEFAULT_RUNS_DIR / profile.name / "registered"))
    failed = []
    for name in names:
        try:
            if args.pilot:
                run_pilot(name, notebooks[name], profile, out, args.why or "power and settling of the tests",
                          args.seen == "yes", args.kernel)
                continue
            plan = run.plan_notebook(name, notebooks[name], profile, False, overrides)
            if plan.problems:
                raise run.UsageError(plan.problems[0])
            final = registration.registration_folder() / f"{name}.json"
            changed = register(plan, final, out / name, args.why, args.seen == "yes", args.kernel)
            run.say(f"{name}: registered in {final} ({changed})")
        except run.UsageError as exc:
            run.say(f"error: {name}: {exc}", file=sys.stderr)
            return 2
        except Exception as exc:          # a notebook that fails: say so, go on with the others
            run.say(f"{name}: FAILED: {run._first_line(exc)}", file=sys.stderr)
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

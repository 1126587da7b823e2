"""Where results and figures go: next to the project checkout, overridable by environment."""
from __future__ import annotations

import os
from pathlib import Path


def repo_root(start: Path | None = None) -> Path:
    """The nearest directory at or above `start` (default: cwd) holding pyproject.toml, else cwd."""
    here = (start or Path.cwd()).resolve()
    for d in (here, *here.parents):
        if (d / "pyproject.toml").is_file() and (d / "lib" / "distsgd").is_dir():
            return d
    return here


def results_root(start: Path | None = None) -> Path:
    """Run directories live here: $DISTSGD_RESULTS, else <repo>/results (the repository at or above
    `start`, default the working directory)."""
    env = os.environ.get("DISTSGD_RESULTS")
    return Path(env) if env else repo_root(start) / "results"


QUICK_PROFILE = "quick"          # the profile whose figures and claims are committed in <repo>/figures
PROFILE_ENV = "DISTSGD_PROFILE"  # the profile a notebook runs under (set by reproduce/run.py)


def figures_root(profile: str | None = None) -> Path:
    """Where the notebooks' figures and claims tables go: $DISTSGD_FIGURES, else <repo>/figures for
    the quick profile (the committed results) and <repo>/figures/<profile> for any other, so that a
    run of another profile never writes over the committed quick ones. `profile` defaults to
    $DISTSGD_PROFILE, else quick."""
    env = os.environ.get("DISTSGD_FIGURES")
    if env:
        return Path(env)
    profile = profile or os.environ.get(PROFILE_ENV) or QUICK_PROFILE
    root = repo_root() / "figures"
    return root if profile == QUICK_PROFILE else root / profile


def figures_dir(notebook: str) -> Path:
    """Figures of one notebook: `figures_root()`/<notebook>, created if missing."""
    d = figures_root() / notebook
    d.mkdir(parents=True, exist_ok=True)
    return d


def data_root() -> Path:
    """Downloaded / user-provided datasets: $DISTSGD_DATA, else <repo>/data."""
    env = os.environ.get("DISTSGD_DATA")
    return Path(env) if env else repo_root() / "data"

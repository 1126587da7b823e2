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


def results_root() -> Path:
    """Run directories live here: $DISTSGD_RESULTS, else <repo>/results."""
    env = os.environ.get("DISTSGD_RESULTS")
    return Path(env) if env else repo_root() / "results"


def figures_dir(notebook: str) -> Path:
    """Figures of one notebook: $DISTSGD_FIGURES/<notebook>, else <repo>/figures/<notebook>."""
    env = os.environ.get("DISTSGD_FIGURES")
    d = (Path(env) if env else repo_root() / "figures") / notebook
    d.mkdir(parents=True, exist_ok=True)
    return d


def data_root() -> Path:
    """Downloaded / user-provided datasets: $DISTSGD_DATA, else <repo>/data."""
    env = os.environ.get("DISTSGD_DATA")
    return Path(env) if env else repo_root() / "data"

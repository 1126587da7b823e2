"""Shared fixtures: results go to a temporary directory; multi-process helpers."""
from __future__ import annotations

import os

import pytest


PROJECTIONS_ENV = "DISTSGD_PROJECTIONS"                 # distsgd.verdicts.projection's store
SHARED_PROJECTIONS = os.environ.get(PROJECTIONS_ENV)    # `make test`'s, for the suites that execute notebooks


@pytest.fixture(autouse=True)
def _isolated_results(tmp_path, monkeypatch, request):
    """Every test writes runs, figures and projections under its own temporary directory; a test
    marked `notebook_runs` reads and adds to the projections of the suites that execute notebooks
    (tests/run_suites.py), since a projection depends on nothing but the code and its inputs."""
    monkeypatch.setenv("DISTSGD_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DISTSGD_FIGURES", str(tmp_path / "figures"))
    if SHARED_PROJECTIONS and request.node.get_closest_marker("notebook_runs"):
        monkeypatch.setenv(PROJECTIONS_ENV, SHARED_PROJECTIONS)
    else:
        monkeypatch.delenv(PROJECTIONS_ENV, raising=False)
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
    yield


def pytest_configure(config):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


@pytest.fixture
def repo_figures():
    """The committed figures/ of the checkout (claims tables of the last quick-profile run)."""
    from pathlib import Path

    return Path(__file__).resolve().parent.parent / "figures"


@pytest.fixture
def notebook_defaults():
    """The defaults of a notebook's parameters cell, e.g. ``notebook_defaults("06_dear")["steps"]``
    (the quick profile's values where it sets none: the design a registration holds)."""
    from pathlib import Path

    import nbformat

    def defaults(name: str) -> dict:
        nb = nbformat.read(Path(__file__).resolve().parent.parent / "notebooks" / f"{name}.ipynb", as_version=4)
        cell = next(c for c in nb.cells if "parameters" in c.metadata.get("tags", []))
        namespace: dict = {}
        exec(cell.source, namespace)
        return {k: v for k, v in namespace.items() if not k.startswith("__")}

    return defaults

"""Shared fixtures: results go to a temporary directory; multi-process helpers."""
from __future__ import annotations

import os

import pytest


PROJECTIONS_ENV = "DISTSGD_PROJECTIONS"                 # distsgd.verdicts.projection's store
SHARED_PROJECTIONS = os.environ.get(PROJECTIONS_ENV)    # `make test`'s one store (tests/run_suites.py)


@pytest.fixture(autouse=True)
def _isolated_results(tmp_path, monkeypatch, request):
    """Every test writes runs, figures and projections under its own temporary directory; a test
    marked `shared_projections` reads and adds to the one store of `make test` (tests/run_suites.py:
    its notebooks' and those tests'), since a projection depends on nothing but the code and its
    inputs; a test that patches the simulator's code keeps its own."""
    monkeypatch.setenv("DISTSGD_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DISTSGD_FIGURES", str(tmp_path / "figures"))
    if SHARED_PROJECTIONS and request.node.get_closest_marker("shared_projections"):
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

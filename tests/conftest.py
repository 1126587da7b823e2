"""Shared fixtures: results go to a temporary directory; multi-process helpers."""
from __future__ import annotations

import os

import pytest


@pytest.fixture(autouse=True)
def _isolated_results(tmp_path, monkeypatch):
    """Every test writes runs and figures under its own temporary directory."""
    monkeypatch.setenv("DISTSGD_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DISTSGD_FIGURES", str(tmp_path / "figures"))
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

"""Run a function on p local ranks (for tests of the communication layer): the library's rank
launcher, `distsgd.training.launch.on_ranks`, with the test function joining the group itself (through
`Comm.from_env` or `distsgd.comm.join_group`). Test functions defined at module level of a test
file can be run on every rank; results are returned per rank."""
from __future__ import annotations

from typing import Any, Callable

from distsgd.training.launch import on_ranks


def run_ranks(fn: Callable, world: int, *args: Any, timeout: float = 120) -> list[Any]:
    """fn(rank, world, *args) on `world` processes; returns the per-rank results in rank order."""
    try:
        return on_ranks(fn, world, *args, timeout=timeout, join=None)
    except (RuntimeError, TimeoutError) as exc:       # a failing or hanging rank fails the test
        raise AssertionError(str(exc)) from None

"""Run a function on p local ranks over gloo (for tests of the communication layer).

Uses torch.multiprocessing so test functions defined at module level of a test file can be
run on every rank; results are returned per rank through a queue.
"""
from __future__ import annotations

import os
import socket
import traceback
from typing import Any, Callable

import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn: Callable, args: tuple, queue) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port), LOCAL_RANK=str(rank))
    import torch
    torch.set_num_threads(1)
    try:
        queue.put((rank, True, fn(rank, world, *args)))
    except BaseException:
        queue.put((rank, False, traceback.format_exc()))
        raise


def run_ranks(fn: Callable, world: int, *args: Any, timeout: float = 120) -> list[Any]:
    """fn(rank, world, *args) on `world` processes; returns the per-rank results in rank order."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_entry, args=(r, world, port, fn, args, queue)) for r in range(world)]
    for p in procs:
        p.start()
    out: dict[int, Any] = {}
    try:
        for _ in range(world):
            rank, ok, value = queue.get(timeout=timeout)
            if not ok:
                raise AssertionError(f"rank {rank} failed:\n{value}")
            out[rank] = value
    finally:
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
    return [out[r] for r in range(world)]

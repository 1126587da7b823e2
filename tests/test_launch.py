"""The one local launcher (`distsgd.training.launch.start_ranks` + `supervise`) as `on_ranks` uses it:
results in rank order, the environment of a run's rank, fail fast naming the rank and its cause,
and no hang."""
from __future__ import annotations

import os
import signal

import pytest

from distsgd import WorkerError
from distsgd.training.launch import on_ranks

pytestmark = pytest.mark.multiproc


def _environment(rank: int, world: int) -> dict:
    import torch
    import torch.distributed as dist

    t = torch.tensor([float(rank)])
    dist.all_reduce(t)
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "DISTSGD_INIT_METHOD", "GLOO_SOCKET_IFNAME", "MASTER_ADDR")
    return {"sum": t.item(), "threads": torch.get_num_threads(), **{k: os.environ.get(k) for k in keys}}


def test_on_ranks_returns_in_rank_order_with_a_runs_environment(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "10.0.0.1")          # torchrun's TCP rendezvous: not inherited
    out = on_ranks(_environment, 3, timeout=120)
    assert [o["RANK"] for o in out] == ["0", "1", "2"] and [o["LOCAL_RANK"] for o in out] == ["0", "1", "2"]
    assert all(o["sum"] == 3.0 and o["WORLD_SIZE"] == "3" and o["threads"] == 1 for o in out)
    assert all(o["DISTSGD_INIT_METHOD"].startswith("file://") and o["MASTER_ADDR"] is None for o in out)
    assert all(o["GLOO_SOCKET_IFNAME"].startswith("lo") for o in out)


def _fails(rank: int, world: int, how: str) -> None:
    import time

    if rank == 1 and how == "raise":
        raise ValueError("planted failure on rank 1")
    if rank == 1 and how == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)                     # a long computation that would notice no peer's death


@pytest.mark.parametrize("how,cause", [("raise", "ValueError: planted failure on rank 1"),
                                       ("kill", "killed by signal 9")])
def test_a_failing_rank_fails_fast_naming_the_rank_and_cause(how, cause):
    """The peers are busy for minutes and would notice nothing: the launcher must stop them at
    once, not wait for them (its own deadline here, 120 s, would raise TimeoutError)."""
    with pytest.raises(WorkerError, match="worker rank 1 failed") as info:
        on_ranks(_fails, 3, how, timeout=120)
    assert info.value.rank == 1 and cause in info.value.cause


def test_ranks_past_the_deadline_are_stopped_not_waited_for():
    with pytest.raises(TimeoutError, match="still running after 5 s"):
        on_ranks(_fails, 2, "hang", timeout=5)


def test_a_rank_that_cannot_start_raises_its_own_error():
    """A body the start method cannot send to the process (here a lambda: not picklable) fails at
    start; the error is that one, not one from stopping the rank that never started."""
    with pytest.raises(Exception) as info:
        on_ranks(lambda rank, world: None, 2, timeout=60)
    assert "pickle" in str(info.value) and "terminate" not in str(info.value), repr(info.value)

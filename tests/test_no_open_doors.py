"""No open doors: a local run listens on loopback only, and reading a run back never runs code."""
from __future__ import annotations

import os
import pickle
import threading
import time

import psutil
import pytest
import torch

import distsgd
from distsgd import WorkerError
from distsgd.files import load_tensors
from distsgd.training.worker import FAULT_ENV

LOOPBACK = {"127.0.0.1", "::1"}


def _listening(pids: set[int]) -> set[tuple[str, int]]:
    """(address, port) of every TCP socket in LISTEN state held by one of `pids`."""
    out = set()
    for c in psutil.net_connections(kind="inet"):
        if c.pid in pids and c.status == psutil.CONN_LISTEN:
            out.add((c.laddr.ip, c.laddr.port))
    return out


def test_a_local_run_listens_on_loopback_only(tmp_path) -> None:
    """Sample the listening sockets of this process and its children (the ranks, the forkserver)
    while a 2-rank run trains: none may be bound to a reachable address (0.0.0.0, ::, an
    interface's address). Before the file rendezvous, rank 0's TCP store listened on *:PORT."""
    me = psutil.Process()
    seen: set[tuple[str, int]] = set()
    ranks_seen = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal ranks_seen
        while not done.is_set():
            pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
            ranks_seen = max(ranks_seen, len(pids) - 1)
            seen.update(_listening(pids))
            time.sleep(0.05)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        distsgd.run(algo="ssgd", model="mlp", data="digits", nproc=2, steps=60, batch_size=8,
                    eval_every=30, progress=False, out=str(tmp_path))
    finally:
        done.set()
        sampler.join()
    assert ranks_seen >= 2, "the sampler never saw the ranks"
    assert seen, "no listening socket seen at all: the sampler did not see the gloo pairs"
    assert {ip for ip, _ in seen} <= LOOPBACK, sorted(seen)


class _RunsCode:
    """A pickle payload that would run `command` by os.system when loaded by plain pickle."""

    def __init__(self, command: str = "echo planted > /dev/null") -> None:
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_reading_a_tampered_model_file_refuses_to_run_code(tmp_path) -> None:
    path = tmp_path / "model.pt"
    torch.save({"w": torch.ones(2)}, path)
    assert torch.equal(load_tensors(path)["w"], torch.ones(2))
    torch.save({"w": torch.ones(2), "payload": _RunsCode()}, path)
    with pytest.raises(pickle.UnpicklingError, match="(?i)weights.only"):
        load_tensors(path)


@pytest.mark.multiproc
def test_resuming_from_a_tampered_checkpoint_refuses_to_run_code(tmp_path, monkeypatch) -> None:
    """A run fails after its checkpoint of step 4; rank 1's file there is replaced by a pickle
    that would create a marker file. Resuming fails naming that file, and no marker appears."""
    fields = dict(algo="local_sgd", params={"period": 3}, model="mlp", data="digits", nproc=2,
                  steps=8, batch_size=16, checkpoint_every=4, progress=False, out=str(tmp_path))
    monkeypatch.setenv(FAULT_ENV, "1:5")
    with pytest.raises(WorkerError, match="injected fault at step 5"):
        distsgd.run(**fields)
    monkeypatch.delenv(FAULT_ENV)
    planted = next(tmp_path.glob("*/checkpoints/step-4/rank1.pt"))
    marker = tmp_path / "MARKER"
    torch.save({"step": 4, "payload": _RunsCode(f"touch {marker}")}, planted)
    with pytest.raises(WorkerError) as info:
        distsgd.run(**fields)
    assert info.value.rank == 1
    assert f"refusing to resume from checkpoint file {planted}" in str(info.value)
    assert not marker.exists(), "loading the checkpoint ran the planted code"

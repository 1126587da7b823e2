"""A diverged run (NaN or infinite loss or parameter) stops on every rank at the same log step,
records status "diverged" in strict JSON and fails naming the step, the ranks and the quantity;
with on_nan="continue" it trains on."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import distsgd
from distsgd import DivergedError, WorkerError
from distsgd.files import write_json_atomic
from distsgd.training.liveness import run_state
from distsgd.training.provenance import finished_code_version
from gloo import run_ranks

DIVERGING = dict(algo="ssgd", model="mlp", data="digits", nproc=2, steps=300, batch_size=16, lr=1e4,
                 log_every=10, eval_every=0, progress=False)


def _strict_json(path: Path) -> dict:
    """The file parsed as JSON that has no NaN or Infinity (Python's json accepts both)."""
    def refuse(name: str) -> None:
        raise ValueError(f"{path.name} holds {name}: not valid JSON")
    return json.loads(path.read_text(), parse_constant=refuse)


def test_json_files_are_strict_with_nan_as_null(tmp_path) -> None:
    path = tmp_path / "x.json"
    write_json_atomic(path, {"a": math.nan, "b": [1.0, math.inf, {"c": -math.inf}], "d": 2.5})
    assert _strict_json(path) == {"a": None, "b": [1.0, None, {"c": None}], "d": 2.5}


@pytest.mark.multiproc
def test_diverged_run_stops_every_rank_and_fails_naming_step_rank_quantity() -> None:
    t0 = time.perf_counter()
    with pytest.raises(DivergedError) as info:
        distsgd.run(**DIVERGING)
    assert time.perf_counter() - t0 < 60
    err = info.value
    assert isinstance(err, WorkerError)
    assert err.step == 10 and err.ranks == [0, 1] and err.quantity == "train_loss"
    assert "training diverged: non-finite train_loss at step 10 on ranks 0, 1" in str(err)
    run_dir = next(Path(os.environ["DISTSGD_RESULTS"]).iterdir())
    summary = _strict_json(run_dir / "summary.json")
    assert summary["status"] == "diverged" and summary["steps"] == 10
    assert summary["nonfinite"] == {"step": 10, "ranks": [0, 1], "quantity": "train_loss"}
    assert summary["final_train_loss"] is None
    for rank in (0, 1):
        _strict_json(run_dir / "ranks" / f"final_rank{rank}.json")
    state = run_state(run_dir)                               # what `python -m distsgd show` prints
    assert (state.status, state.detail) == ("diverged", "non-finite train_loss at step 10 on ranks 0, 1")
    assert state.metrics["step"].tolist() == [10] and state.metrics["train_loss"].isna().all()
    config = distsgd.Config.from_dict(_strict_json(run_dir / "config.json"))
    assert finished_code_version(run_dir, config) is None     # never reused as finished
    with pytest.raises(DivergedError):
        distsgd.run(**DIVERGING)                           # recomputed, and fails again


@pytest.mark.multiproc
def test_on_nan_continue_trains_on_and_records_nan_as_null() -> None:
    result = distsgd.run(**dict(DIVERGING, steps=30, on_nan="continue"))
    summary = _strict_json(result.path / "summary.json")
    assert summary["status"] == "finished" and summary["steps"] == 30
    assert summary["nonfinite"] == {"step": 10, "ranks": [0, 1], "quantity": "train_loss"}
    assert summary["final_train_loss"] is None and math.isnan(result.summary["final_train_loss"])
    assert result.metrics["step"].tolist() == [10, 20, 30]
    assert result.metrics["train_loss"].isna().all()


@pytest.mark.multiproc
def test_cli_diverged_run_exits_nonzero_without_traceback(tmp_path) -> None:
    out = subprocess.run([sys.executable, "-m", "distsgd", "train", "--lr", "1e4", "--nproc", "2",
                          "--steps", "300", "--eval-every", "0", "--no-progress", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 1, out.stderr
    assert "error: training diverged: non-finite train_loss at step 10 on ranks 0, 1" in out.stderr
    assert "Traceback" not in out.stderr


def _check_on_ranks(rank: int, world: int) -> tuple[object, bool]:
    """Rank 1's second parameter turns NaN before the second check: both ranks find it there."""
    from distsgd.comm import Comm
    from distsgd.training.divergence import DivergenceCheck

    comm = Comm.from_env("gloo", torch.device("cpu"), None, timeout_s=60)
    model = torch.nn.Linear(3, 2)
    check = DivergenceCheck(model, comm, "stop")
    first = check.check(5, torch.tensor(1.0))
    if rank == 1:
        with torch.no_grad():
            model.bias[0] = math.nan
    second = check.check(10, torch.tensor(2.0))
    bytes_counted = comm.ledger.bytes_sent
    comm.close()
    return check.found, (first, second, bytes_counted)


def test_ranks_agree_on_where_a_single_rank_diverged() -> None:
    for found, (first, second, bytes_counted) in run_ranks(_check_on_ranks, 2):
        assert (first, second) == (False, True)
        assert found.step == 10 and found.ranks == [1] and found.quantity == "parameter bias"
        assert bytes_counted == 0                          # the check is not in the ledger

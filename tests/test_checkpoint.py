"""Checkpoint and resume of a whole run (`distsgd.training.checkpoint`): a 2-rank run that fails at step 9,
run again, resumes from its checkpoint of step 8 and ends with the parameters of an uninterrupted
run, bit for bit, and with its metrics (but the wall-clock columns), for every algorithm; and for
a model that draws from torch's global generator as it trains (DropIT's random selection)."""
from __future__ import annotations

import pandas as pd
import pytest
import torch

import distsgd
from distsgd import WorkerError
from distsgd.training.liveness import run_state
from distsgd.training.worker import FAULT_ENV
from test_algorithm_state import CASES, PLAIN_SGD, SCHEDULE

RUN = dict(model="mlp", data="digits", nproc=2, steps=12, batch_size=16, lr=0.05,
           weight_decay=1e-3, log_every=3, eval_every=6, progress=False)
CLOCK = ["wall_s", "comm_wait_s"]          # wall-clock columns: differ between any two runs
# MG-WFBP merges buckets by measured gradient-ready times: its numbers of collectives and
# all-reduces differ between two uninterrupted runs too (its parameters and bytes do not)
TIMED = {"mgwfbp": ["collectives", "global_reductions"]}
# (algorithm, model options): every algorithm, and S-SGD on a model whose training draws from
# torch's global generator, so that the checkpoint must carry the RNG state
CASES_RUN = [(name, {}) for name in sorted(CASES)] + [
    ("ssgd", {"dropit": {"gamma": 0.5, "strategy": "random"}})]


@pytest.mark.multiproc
@pytest.mark.parametrize("name, model_options", CASES_RUN,
                         ids=[name + "-dropit" * bool(options) for name, options in CASES_RUN])
def test_a_resumed_run_ends_bitwise_as_an_uninterrupted_one(tmp_path, monkeypatch, name,
                                                            model_options):
    fields = dict(RUN, algo=name, params=CASES[name], model_options=model_options,
                  momentum=0.0 if name in PLAIN_SGD else 0.9, **SCHEDULE.get(name, {}))
    straight = distsgd.run(out=str(tmp_path / "straight"), **fields)

    resumable = dict(fields, out=str(tmp_path / "resumed"), checkpoint_every=4)
    monkeypatch.setenv(FAULT_ENV, "1:9")
    with pytest.raises(WorkerError, match="injected fault at step 9"):
        distsgd.run(**resumable)
    checkpoints = tmp_path / "resumed" / straight.path.name / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-8"]
    assert sorted(p.name for p in (checkpoints / "step-8").iterdir()) == [
        "COMPLETE", "rank0.pt", "rank1.pt"]
    monkeypatch.setenv(FAULT_ENV, "1:7")    # a fault the resumed run, from step 8 on, never meets
    resumed = distsgd.run(**resumable)
    assert not checkpoints.exists(), "a finished run keeps no checkpoint"

    want, got = straight.state_dict(), resumed.state_dict()
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key]), f"{key} differs"
    untimed = CLOCK + TIMED.get(name, [])
    pd.testing.assert_frame_equal(resumed.metrics.drop(columns=untimed),
                                  straight.metrics.drop(columns=untimed), check_exact=True)
    assert resumed.metrics["step"].tolist() == [3, 6, 9, 12]


@pytest.mark.multiproc
@pytest.mark.parametrize("signal_name", ["term", "usr1"])
def test_a_signalled_run_saves_a_checkpoint_and_resumes_from_it(tmp_path, monkeypatch, signal_name):
    """Rank 1 receives SIGTERM (or SIGUSR1) at step 7 of a run that saves no periodic checkpoint:
    at the next log step (9) every rank saves one and the run stops, saying so; run again, it
    resumes there and ends bitwise as an uninterrupted run (CoCoD-SGD: an average in flight)."""
    fields = dict(RUN, algo="cocod_sgd", params=CASES["cocod_sgd"], momentum=0.9)
    straight = distsgd.run(out=str(tmp_path / "straight"), **fields)
    monkeypatch.setenv(FAULT_ENV, f"1:7:{signal_name}")
    with pytest.raises(WorkerError, match="stopped by a signal .* after step 9"):
        distsgd.run(out=str(tmp_path / "resumed"), **fields)
    checkpoints = tmp_path / "resumed" / straight.path.name / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step-9"]
    state = run_state(checkpoints.parent)           # what `python -m distsgd show` prints
    assert (state.status, state.checkpoint, state.last_steps) == ("stopped", 9, {0: 9, 1: 9})
    assert "stopped by a signal (SIGTERM or SIGUSR1) after step 9" in state.detail
    monkeypatch.setenv(FAULT_ENV, "1:7:raise")      # never met by a run resumed at step 9
    resumed = distsgd.run(out=str(tmp_path / "resumed"), **fields)
    want, got = straight.state_dict(), resumed.state_dict()
    assert all(torch.equal(want[key], got[key]) for key in want)
    pd.testing.assert_frame_equal(resumed.metrics.drop(columns=CLOCK),
                                  straight.metrics.drop(columns=CLOCK), check_exact=True)


@pytest.mark.multiproc
def test_force_starts_a_stopped_run_afresh(tmp_path, monkeypatch):
    """force=True ignores the checkpoint of a stopped run: it starts at step 0, so a fault at
    step 7 that a resumed run (from step 8) would never meet stops it again."""
    resumable = dict(RUN, algo="local_sgd", out=str(tmp_path), checkpoint_every=4)
    monkeypatch.setenv(FAULT_ENV, "1:9")
    with pytest.raises(WorkerError, match="injected fault at step 9"):
        distsgd.run(**resumable)
    monkeypatch.setenv(FAULT_ENV, "1:7")
    with pytest.raises(WorkerError, match="injected fault at step 7"):
        distsgd.run(force=True, **resumable)

"""`distsgd.load_results(DIR)` and `python -m distsgd results DIR`: every run under a directory as
one tidy table, on real runs (MLP on digits, 2 ranks, 20 steps): two finished, one diverged, one
stopped by a signal (checkpointed, resumable), one failed, and one prepared but not yet started."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import distsgd
from distsgd.training.config import Config
from distsgd.training.provenance import code_version
from distsgd.training.runner import prepare_run_dir

SMALL = dict(model="mlp", data="digits", nproc=2, steps=20, batch_size=8, lr=0.1, log_every=5,
             eval_every=10, eval_samples=64, progress=False)
LIB = Path(__file__).resolve().parent.parent / "lib"


def _run_expecting(error: type[BaseException], fault: str | None = None, **fields) -> None:
    old = os.environ.pop("DISTSGD_INJECT_FAULT", None)
    if fault:
        os.environ["DISTSGD_INJECT_FAULT"] = fault
    try:
        with pytest.raises(error):
            distsgd.run(**fields)
    finally:
        os.environ.pop("DISTSGD_INJECT_FAULT", None)
        if old is not None:
            os.environ["DISTSGD_INJECT_FAULT"] = old


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """DIR/ holds the finished and diverged runs, DIR/more/ the stopped, failed and prepared ones
    (load_results searches below DIR)."""
    root = tmp_path_factory.mktemp("load_results")
    out, more = str(root), str(root / "more")
    made = {"ssgd": distsgd.run(algo="ssgd", out=out, **SMALL),
            "local": distsgd.run(algo="local_sgd", params={"period": 4}, out=out, **SMALL)}
    _run_expecting(distsgd.DivergedError, algo="ssgd", name="boom", out=out, **{**SMALL, "lr": 1e6})
    _run_expecting(distsgd.WorkerError, "0:10:term", algo="ssgd", name="stopped", out=more, **SMALL)
    _run_expecting(distsgd.WorkerError, "1:5", algo="ssgd", name="failed", out=more, **SMALL)
    waiting = Config(algo="ssgd", name="waiting", out=more, **SMALL).validate()
    prepare_run_dir(root / "more" / waiting.run_name(), waiting)        # what distsgd.run does before launching
    return {"root": root, **made}


@pytest.mark.multiproc
def test_one_row_per_run_with_status_config_and_totals(runs) -> None:
    df = distsgd.load_results(runs["root"])
    assert len(df) == 6 and df.run.is_unique
    status = dict(zip(df.name.replace("", None).fillna(df.algo), df.status))
    assert status == {"ssgd": "finished", "local_sgd": "finished", "boom": "diverged",
                      "stopped": "stopped", "failed": "failed", "waiting": "unfinished"}
    assert list(df.columns[:3]) == ["run", "status", "algo"]
    row = df.set_index("run")
    for result in (runs["ssgd"], runs["local"]):               # the same numbers as the Result
        r = row.loc[result.path.name]
        assert r.path == str(result.path)
        for key in ("final_train_loss", "final_test_acc", "comm_bytes", "train_s", "step_time_s"):
            assert r[key] == pytest.approx(result.summary[key]), key
        assert (r.nproc, r.steps, r.steps_done, r.lr, r.model) == (2, 20, 20, 0.1, "mlp")
        assert r.config_hash == result.config.hash() and result.path.name.endswith(r.config_hash)
        correct = result.test_correct()                      # per test example, over the ranks
        assert correct.shape == (SMALL["eval_samples"],)       # the first eval_samples test images
        assert correct.mean() == pytest.approx(result.summary["final_test_acc"])
        evaluated = result.test_correct("evaluated")         # the last step's evaluation (before finalize)
        assert evaluated.shape == correct.shape
        assert evaluated.mean() == pytest.approx(result.metrics.test_acc.iloc[-1])
        assert r.code_version == code_version() and r["env.torch"]
    local = row.loc[runs["local"].path.name]
    assert local["params.period"] == 4 and math.isnan(row.loc[runs["ssgd"].path.name, "params.period"])
    assert row.loc[runs["ssgd"].path.name, "params.bucket_mb"] == 25.0
    boom = df[df.name == "boom"].iloc[0]
    assert boom.steps == 20 and boom.steps_done == boom["nonfinite.step"] < 20 and boom.lr == 1e6
    assert math.isnan(boom.final_train_loss)
    for name in ("stopped", "failed", "waiting"):             # no summary: totals are NaN, config is there
        r = df[df.name == name].iloc[0]
        assert math.isnan(r.final_train_loss) and math.isnan(r.steps_done) and r.algo == "ssgd"
        assert r.code_version == code_version()                   # from env.json


@pytest.mark.multiproc
def test_metrics_is_the_long_table_of_every_logged_step(runs) -> None:
    long = distsgd.load_results(runs["root"], metrics=True)
    assert set(long.status) == {"finished", "diverged"}           # only runs with a metrics.csv
    for result in (runs["ssgd"], runs["local"]):
        mine = long[long.run == result.path.name].reset_index(drop=True)
        assert mine.step.tolist() == result.metrics.step.tolist() == [5, 10, 15, 20]
        assert mine.train_loss.tolist() == pytest.approx(result.metrics.train_loss.tolist())
        assert (mine.algo == result.config.algo).all() and (mine.lr == 0.1).all()
        assert mine.lr_at_step.tolist() == pytest.approx(result.metrics.lr.tolist())   # the logged lr, renamed
    assert (long[long.algo == "local_sgd"]["params.period"] == 4).all()
    assert len(long[long.status == "diverged"]) >= 1
    assert list(long.columns[:3]) == ["run", "status", "algo"]


@pytest.mark.multiproc
def test_cli_prints_the_table_and_writes_every_column(runs, tmp_path) -> None:
    csv = tmp_path / "all.csv"
    proc = subprocess.run([sys.executable, "-m", "distsgd", "results", str(runs["root"]), "--csv", str(csv)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(LIB)})
    assert proc.returncode == 0, proc.stderr
    assert "6 run(s)" in proc.stdout and "2 finished" in proc.stdout and "1 stopped" in proc.stdout
    assert "params.period" in proc.stdout and runs["local"].path.name in proc.stdout   # a config column that varies
    written = pd.read_csv(csv)
    assert list(written.columns) == list(distsgd.load_results(runs["root"]).columns) and len(written) == 6
    proc = subprocess.run([sys.executable, "-m", "distsgd", "results", str(runs["root"]), "--metrics"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(LIB)})
    assert proc.returncode == 0 and "logged steps" in proc.stdout, proc.stderr


@pytest.mark.parametrize("make, says", [
    (lambda p: p / "missing", "no such directory"),
    (lambda p: (p / "empty").mkdir() or p / "empty", "holds no run"),
])
def test_missing_or_empty_directory_is_a_clear_error(tmp_path, make, says) -> None:
    directory = make(tmp_path)
    with pytest.raises(distsgd.ConfigError, match=says):
        distsgd.load_results(directory)
    proc = subprocess.run([sys.executable, "-m", "distsgd", "results", str(directory)],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(LIB)})
    assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_step_seconds_are_each_logged_intervals_time_per_step_after_a_warmup():
    """`Result.step_seconds` (notebooks 01 and 08 pair runs interval by interval with it) and the
    median that `steady_step_time` takes of it; no run needed."""
    from distsgd.training.results import Result
    metrics = pd.DataFrame({"step": [5, 10, 20, 30], "wall_s": [1.0, 2.0, 2.5, 4.5]})
    r = Result(Path("."), Config(), {"step_time_s": 9.0}, metrics)
    assert list(r.step_seconds().index) == [10, 20, 30]
    assert list(r.step_seconds()) == pytest.approx([0.2, 0.05, 0.2])
    assert list(r.step_seconds(after=10).index) == [20, 30]
    assert r.steady_step_time() == pytest.approx(0.2)
    one_row = Result(Path("."), Config(), {"step_time_s": 9.0}, metrics.iloc[:1])
    assert one_row.step_seconds().empty and one_row.steady_step_time() == 9.0

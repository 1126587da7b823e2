"""End-to-end training runs over gloo: equivalences between algorithms, failure handling,
bad configurations, reuse of finished runs, the CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch

import distsgd
from distsgd import ConfigError, WorkerError

SMALL = dict(model="mlp", data="digits", nproc=2, steps=20, batch_size=16, lr=0.1, log_every=5,
             eval_every=0, progress=False)


def _params(result) -> dict[str, torch.Tensor]:
    return result.state_dict()


def _assert_same_model(a, b, atol=1e-6):
    pa, pb = _params(a), _params(b)
    assert pa.keys() == pb.keys()
    for k in pa:
        torch.testing.assert_close(pa[k], pb[k], atol=atol, rtol=1e-5, msg=f"parameter {k}")


@pytest.mark.multiproc
def test_ssgd_ddp_and_local_sgd_period1_give_the_same_model():
    """Same seed and data: S-SGD (ours), PyTorch DDP, and local SGD with period 1 (momentum SGD)
    end at the same parameters after 20 steps; a different seed does not."""
    cfg = dict(SMALL, nproc=3, momentum=0.9, weight_decay=1e-4)
    ssgd = distsgd.run(algo="ssgd", params={"bucket_mb": 0.05}, **cfg)   # several buckets
    ddp = distsgd.run(algo="ddp", **cfg)
    local1 = distsgd.run(algo="local_sgd", params={"period": 1}, **cfg)
    _assert_same_model(ssgd, ddp)
    _assert_same_model(ssgd, local1)
    other = distsgd.run(algo="ssgd", params={"bucket_mb": 0.05}, **dict(cfg, seed=1))
    with pytest.raises(AssertionError):
        _assert_same_model(ssgd, other)
    # one all-reduce of the whole gradient per step: bytes = steps * ranks * 2(p-1)/p * 4 * d
    d = sum(p.numel() for p in _params(ssgd).values())
    expected = cfg["steps"] * 3 * round(2 * 2 / 3 * 4 * d)
    assert ssgd.summary["comm_bytes"] == pytest.approx(expected, rel=1e-3)
    assert ddp.summary["comm_bytes"] == pytest.approx(expected, rel=1e-3)


@pytest.mark.multiproc
def test_eval_average_evaluates_the_average_of_the_ranks_models():
    """Local SGD evaluated at step 18, two steps after its last average: with eval_average the
    logged objective is the averaged model's, which `finalize` then makes every rank's model (the
    final train loss); without, it is the mean of the ranks' own models' objectives, higher (the
    loss is convex in the logistic model's weights). The evaluation sends nothing counted."""
    cfg = dict(SMALL, model="logistic", steps=18, log_every=18, eval_every=18, eval_train=True)
    own = distsgd.run(algo="local_sgd", params={"period": 8}, **cfg)
    avg = distsgd.run(algo="local_sgd", params={"period": 8}, eval_average=True, **cfg)
    at_18 = lambda r: r.metrics.set_index("step").train_objective[18]      # noqa: E731
    assert at_18(avg) == pytest.approx(avg.summary["final_train_loss"], abs=1e-6)
    assert at_18(own) > at_18(avg) + 1e-4
    assert avg.summary["comm_bytes"] == own.summary["comm_bytes"]
    assert avg.summary["final_train_loss"] == own.summary["final_train_loss"]     # training untouched


@pytest.mark.multiproc
def test_local_sgd_sends_period_times_fewer_bytes_and_ranks_agree():
    r1 = distsgd.run(algo="local_sgd", params={"period": 1}, **SMALL)
    r4 = distsgd.run(algo="local_sgd", params={"period": 4}, **SMALL)
    assert r1.summary["comm_bytes"] == pytest.approx(4 * r4.summary["comm_bytes"])
    assert r4.summary["global_reductions"] == 2 * (20 // 4)          # 2 ranks x 5 averagings
    assert r4.summary["max_rank_spread_final_train_loss"] == pytest.approx(0, abs=1e-6)
    m = r4.metrics
    assert list(m.columns[:10]) == ["step", "epoch", "samples", "wall_s", "comm_bytes", "collectives",
                                    "global_reductions", "local_reductions", "comm_wait_s", "train_loss"]
    assert m["step"].tolist() == [5, 10, 15, 20]
    assert m["comm_bytes"].is_monotonic_increasing


@pytest.mark.multiproc
@pytest.mark.parametrize("how", ["raise", "kill"])
def test_failing_worker_fails_the_run_fast_naming_its_rank(monkeypatch, how):
    monkeypatch.setenv("DISTSGD_INJECT_FAULT", f"1:5:{how}")
    t0 = time.perf_counter()
    with pytest.raises(WorkerError) as info:
        distsgd.run(algo="ssgd", **dict(SMALL, nproc=3, steps=200, timeout_s=600))
    assert time.perf_counter() - t0 < 60
    assert info.value.rank == 1
    expected = "injected fault at step 5" if how == "raise" else "killed by signal 9"
    assert expected in str(info.value)


def test_the_root_cause_is_the_rank_that_failed_first_by_a_nanosecond(tmp_path, monkeypatch):
    """Rank 1 fails, then rank 0 (its peer gone) a nanosecond later: a clock of a kernel jiffy
    would stamp both error files alike; the launcher, the srun path and `show` name rank 1."""
    from distsgd.training import launch, liveness, worker
    (tmp_path / "ranks").mkdir()
    start = 1_795_000_000_000_000_000
    for rank, offset in [(1, 0), (0, 1)]:
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setattr(worker.time, "time_ns", lambda: start + offset)
        try:
            raise RuntimeError(f"rank {rank} fails")
        except RuntimeError:
            worker.record_error(tmp_path)
    assert worker.error_file(tmp_path, 1).stat().st_mtime_ns == start
    assert [p.name for p in liveness.failed_ranks_errors(tmp_path / "ranks")] == [
        "error_rank1.txt", "error_rank0.txt"]
    assert launch._first_failure(tmp_path, [0, 1], [1, 1]) == 1
    (tmp_path / "ranks" / launch.SRUN_LOG).write_text("")
    assert launch.step_failure(tmp_path, 1).rank == 1


@pytest.mark.parametrize("fields, field", [
    (dict(algo="nope"), "algo"), (dict(nproc=0), "nproc"), (dict(data="svhn"), "data"),
    (dict(net="bandwidth=fast"), "net"), (dict(model="gpt"), "model"),
    (dict(partition="dirichlet:-1"), "partition"), (dict(algo="local_sgd", params={"period": 0}), "params.period"),
    (dict(algo="ssgd", params={"period": 4}), "params"), (dict(optimizer="lion"), "optimizer"),
])
def test_bad_config_fails_before_spawning(tmp_path, fields, field):
    with pytest.raises(ConfigError) as info:
        distsgd.run(out=str(tmp_path / "runs"), **fields)
    assert info.value.field == field
    assert "allowed" in str(info.value)
    assert not (tmp_path / "runs").exists()


@pytest.mark.multiproc
def test_finished_run_is_reused_and_force_recomputes():
    cfg = dict(SMALL, steps=10)
    first = distsgd.run(algo="ssgd", **cfg)
    stamp = (first.path / "summary.json").stat().st_mtime_ns
    again = distsgd.run(algo="ssgd", **cfg)
    assert again.path == first.path and (again.path / "summary.json").stat().st_mtime_ns == stamp
    forced = distsgd.run(algo="ssgd", force=True, **cfg)
    assert (forced.path / "summary.json").stat().st_mtime_ns != stamp
    env = json.loads((first.path / "env.json").read_text())
    assert env["torch"] == torch.__version__ and "git_commit" in env
    assert env["code_version"] == distsgd.training.provenance.code_version()
    assert json.loads((first.path / "config.json").read_text())["params"] == {
        "bucket_mb": 25.0, "overlap": True, "cycle_ms": 0.0, "cycle_mb": 128.0}


@pytest.mark.multiproc
def test_a_run_made_by_other_code_is_recomputed(capfd):
    """A finished run whose summary records another code version (the library was edited since)
    is stale: run() recomputes it instead of showing the old result."""
    cfg = dict(SMALL, steps=10)
    first = distsgd.run(algo="ssgd", **cfg)
    summary = first.path / "summary.json"
    made = json.loads(summary.read_text())
    assert made["code_version"] == distsgd.training.provenance.code_version()
    summary.write_text(json.dumps({**made, "code_version": "edited-since"}))
    kept = distsgd.run(algo="ssgd", reuse_stale=True, **cfg)           # explicitly reused
    assert json.loads((kept.path / "summary.json").read_text())["code_version"] == "edited-since"
    again = distsgd.run(algo="ssgd", **cfg)
    assert again.path == first.path
    assert json.loads(summary.read_text())["code_version"] == distsgd.training.provenance.code_version()
    assert "recomputing" in capfd.readouterr().err


def test_code_version_follows_the_source(tmp_path, monkeypatch):
    """The fingerprint covers every module's bytes: one edited file changes it."""
    from distsgd.training import provenance

    package = tmp_path / "distsgd"
    (package / "algorithms").mkdir(parents=True)
    module = package.joinpath(*provenance.__name__.split(".")[1:]).with_suffix(".py")   # where it sits in the package
    module.parent.mkdir(parents=True, exist_ok=True)
    module.write_text("x = 1\n")
    (package / "algorithms" / "local_sgd.py").write_text("period = 4\n")
    monkeypatch.setattr(provenance, "__file__", str(module))
    provenance.code_version.cache_clear()
    try:
        before = provenance.code_version()
        (package / "algorithms" / "local_sgd.py").write_text("period = 8\n")
        provenance.code_version.cache_clear()
        assert provenance.code_version() != before
    finally:
        provenance.code_version.cache_clear()


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "distsgd", *args], capture_output=True, text=True,
                          timeout=300, env=dict(os.environ))


@pytest.mark.multiproc
def test_cli_train_list_and_errors(tmp_path):
    out = _cli("train", "--algo", "local_sgd", "--set", "period=2", "--nproc", "2", "--steps", "10",
               "--out", str(tmp_path), "--no-progress")
    assert out.returncode == 0, out.stderr
    assert "final test loss / acc" in out.stdout and "local_sgd {'period': 2}" in out.stdout
    bad = _cli("train", "--algo", "nope", "--out", str(tmp_path))
    from distsgd.algorithms import REGISTRY
    assert bad.returncode == 2
    assert "invalid algo='nope'; allowed: " + ", ".join(sorted(REGISTRY)) in bad.stderr
    listing = _cli("list")
    assert listing.returncode == 0
    for name, cls in REGISTRY.items():
        assert f"  {name:<15} {cls.summary}" in listing.stdout
    assert "period = 4" in listing.stdout and "bucket_mb = 25.0" in listing.stdout


@pytest.mark.multiproc
def test_a_script_without_main_guard_runs_once(tmp_path):
    """The workers are forked from a forkserver; the caller's script must not be re-run in them
    (multiprocessing's main-module preparation), or an unguarded script would recurse."""
    script = tmp_path / "plain.py"
    script.write_text("import distsgd\n"
                      f"r = distsgd.run(algo='ssgd', model='logistic', data='digits', nproc=2, steps=3, "
                      f"out={str(tmp_path / 'out')!r}, progress=False)\n"
                      "print('RUNS', len(list(r.path.parent.iterdir())))\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("RUNS") == 1 and "RUNS 1" in proc.stdout, proc.stdout


def test_a_run_directory_with_a_space_and_an_equals_sign(tmp_path):
    """The ranks meet through a file in the run directory: its URL must name that very file
    (a percent-escaped path made them wait for each other until the 5-minute join timeout)."""
    out = tmp_path / "my runs" / "nproc=2"
    from urllib.parse import urlparse

    from distsgd.comm.comm import INIT_METHOD_ENV
    from distsgd.training.launch import local_rank_env, rendezvous_file
    rendezvous = rendezvous_file(out)
    assert urlparse(local_rank_env(0, 2, rendezvous)[INIT_METHOD_ENV]).path == str(rendezvous)   # as torch reads it
    r = distsgd.run(out=str(out), **{**SMALL, "steps": 3, "timeout_s": 30.0})   # fails, not hangs
    assert r.summary["status"] == "finished" and str(r.path).startswith(str(out))


def test_every_module_of_an_algorithms_package_is_imported_so_its_algorithms_register(tmp_path, monkeypatch):
    """An algorithm added as a new module of `distsgd.algorithms` needs no edit elsewhere: the
    package imports all its modules (`import_modules`), and `@register` does the rest."""
    import pathlib

    from distsgd.algorithms import REGISTRY, import_modules

    package = tmp_path / "more_algorithms"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "alpha.py").write_text("HELPER = True\n")
    (package / "zeta_rule.py").write_text(
        "from distsgd.algorithms import register\nfrom distsgd.algorithms.ssgd import SSGD\n\n\n"
        "@register\nclass Zeta(SSGD):\n    name = 'zeta_test_rule'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        assert import_modules("more_algorithms", [str(package)]) == ["alpha", "zeta_rule"]
        assert REGISTRY["zeta_test_rule"].__module__ == "more_algorithms.zeta_rule"
    finally:
        REGISTRY.pop("zeta_test_rule", None)
    # the kit's own package: every module that registers an algorithm is among the registered ones
    folder = pathlib.Path(distsgd.algorithms.__file__).parent
    registering = {p.stem for p in folder.glob("*.py") if "\n@register" in p.read_text()}
    assert registering == {cls.__module__.rsplit(".", 1)[1] for cls in REGISTRY.values()}

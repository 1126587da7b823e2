"""Runs across a SLURM allocation's nodes, without SLURM: which launcher 'auto' means, the
allocation a run may use and the refusal of a run that does not fit it, the allocation-relative
counts of a profile, the srun command of a run, how a failed step names its rank, and the
defaults a batch job gives its runs (checkpoints, the stop file). Seconds, no process started."""
from __future__ import annotations

import shlex
import signal
import sys
from pathlib import Path

import pytest

from distsgd import ConfigError, Config, WorkerError
from distsgd.training import checkpoint
from distsgd.training.allocation import Allocation, check_fits, resolve_count, resolve_counts
from distsgd.training.launch import (SRUN_LOG, detect_launcher, srun_command, srun_env, step_failure,
                                     step_nodes)
from distsgd.training.worker import STOP_FILE_ENV, StopSignals

JOB = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "gpu[01-04]", "SLURMD_NODENAME": "gpu02"}


def test_auto_launcher_spans_the_nodes_of_a_multi_node_job_only():
    assert detect_launcher("auto", {}) == "spawn"
    assert detect_launcher("auto", JOB) == "srun"
    assert detect_launcher("auto", {**JOB, "SLURM_JOB_NODELIST": "gpu01"}) == "spawn"
    assert detect_launcher("auto", {**JOB, "SLURM_STEP_ID": "0"}) == "spawn"        # within a step
    assert detect_launcher("auto", {**JOB, "RANK": "0", "WORLD_SIZE": "2"}) == "env"
    assert detect_launcher("auto", {"DISTSGD_LAUNCHER": "srun"}) == "srun"           # asked for
    assert detect_launcher("spawn", JOB) == "spawn"
    with pytest.raises(ConfigError, match="DISTSGD_LAUNCHER='ssh'; allowed: spawn, srun"):
        detect_launcher("auto", {"DISTSGD_LAUNCHER": "ssh"})


def test_the_allocation_of_a_slurm_job_puts_the_head_node_first():
    a = Allocation.detect({**JOB, "SLURM_GPUS_ON_NODE": "4"})
    assert a.nodes == ("gpu02", "gpu01", "gpu03", "gpu04") and a.gpus_per_node == 4 and a.gpus == 16
    assert Allocation.detect({**JOB, "SLURM_GPUS_PER_NODE": "a100:8"}).gpus_per_node == 8
    assert a.this_host().nodes == ("gpu02",) and a.describe() == "4 nodes x 4 GPUs (SLURM job 42)"
    assert Allocation.parse("2x8").gpus == 16
    with pytest.raises(ConfigError, match="allocation='8'; allowed: NODESxGPUS"):
        Allocation.parse("8")


@pytest.mark.parametrize("device, backend, refused", [
    ("auto", "auto", True),       # auto resolves to CUDA where there are GPUs: one per rank
    ("cuda", "nccl", True),
    ("auto", "gloo", False),      # CPU ranks share the cores
    ("cpu", "gloo", False)])
def test_a_run_larger_than_the_allocation_is_refused_naming_both_numbers(device, backend, refused):
    config = Config(nproc=32, device=device, backend=backend)
    node = Allocation(("gpu01",), 8, "this host")
    if refused:
        with pytest.raises(ConfigError, match=r"invalid nproc=32; allowed: at most 8 \(32 ranks of one GPU "
                                              r"each do not fit 1 node x 8 GPUs \(this host\)"):
            check_fits(config, node)
    else:
        check_fits(config, node)
    check_fits(config, Allocation.parse("4x8"))                   # 32 GPUs: fits
    check_fits(Config(nproc=32), Allocation(("cpu01",), 0))       # no GPU: CPU ranks


def test_profile_counts_relative_to_the_allocation():
    for shape, gpus, node in (("1x8", 8, 8), ("2x8", 16, 8), ("4x4", 16, 4)):
        a = Allocation.parse(shape)
        assert resolve_count("nproc", "gpus", a) == gpus and resolve_count("nproc", "node", a) == node
        assert resolve_count("nproc", "2*node", a) == 2 * node and resolve_count("nproc", 3, a) == 3
    a = Allocation.parse("4x4")
    assert resolve_counts({"nproc": "gpus", "nprocs": [2, "node"], "model": "mlp"}, a) == {
        "nproc": 16, "nprocs": [2, 4], "model": "mlp"}
    with pytest.raises(ConfigError, match="invalid nproc='all'"):
        resolve_count("nproc", "all", a)
    with pytest.raises(ConfigError, match="has no GPU to count"):
        resolve_count("nproc", "gpus", Allocation(("cpu01",), 0))


def _options(cmd: list[str]) -> dict[str, str]:
    return dict(o.removeprefix("--").split("=", 1) for o in cmd if o.startswith("--") and "=" in o)


def test_srun_command_of_gpu_ranks_fills_the_fewest_nodes(tmp_path):
    a = Allocation(("gpu02", "gpu01", "gpu03", "gpu04"), 4, "SLURM job 42")
    config = Config(nproc=8, backend="nccl")
    cmd = srun_command(config.run_name(), config.nproc, tmp_path, a, True, ["worker", str(tmp_path)],
                       extra=["--gpus-per-task=1"], cpus_on_node=32)
    opts = _options(cmd)
    assert opts["nodes"] == "2" and opts["ntasks"] == "8" and opts["ntasks-per-node"] == "4"
    assert opts["nodelist"] == "gpu02,gpu01" and opts["cpus-per-task"] == "8"
    assert opts["kill-on-bad-exit"] == "1" and opts["output"] == str(tmp_path / "ranks" / "rank%t.log")
    assert "--overlap" in cmd and "--overcommit" not in cmd
    assert cmd[-5:] == [sys.executable, "-m", "distsgd", "worker", str(tmp_path)]
    assert cmd.index("--gpus-per-task=1") < cmd.index(sys.executable)


def test_srun_command_of_cpu_ranks_spreads_them_over_the_nodes(tmp_path):
    a = Allocation(("node1", "node2", "node3"), 0, "SLURM job 7")
    assert step_nodes(3, a, gpus=False) == ["node1", "node2", "node3"]
    assert step_nodes(2, a, gpus=False) == ["node1", "node2"]
    opts = _options(cmd := srun_command("bench", 6, tmp_path, a, False, ["call", str(tmp_path)]))
    assert opts["nodes"] == "3" and opts["ntasks-per-node"] == "2" and opts["cpus-per-task"] == "1"
    assert "--overcommit" in cmd and opts["job-name"] == "bench"
    assert cmd[-5:] == [sys.executable, "-m", "distsgd", "call", str(tmp_path)]


def test_srun_env_meets_on_the_first_node_never_on_loopback(monkeypatch):
    monkeypatch.setenv("RANK", "3")                              # a local rank's: not passed on
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", "ib0")              # the user's choice: passed on
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    env = srun_env("gpu02", 29611, gpus=False)
    assert env["MASTER_ADDR"] == "gpu02" and env["MASTER_PORT"] == "29611" and "RANK" not in env
    assert env["GLOO_SOCKET_IFNAME"] == "ib0" and env["OMP_NUM_THREADS"] == "1"
    assert env["PYTHONHASHSEED"] == "0"                          # one string order on every rank
    assert "DISTSGD_INIT_METHOD" not in env


def _step(tmp_path: Path, srun_output: str, errors: dict[int, str] = {}, logs: dict[int, str] = {}) -> Path:
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    (ranks / SRUN_LOG).write_text(shlex.join(["srun", "..."]) + "\n" + srun_output)
    for rank, text in errors.items():
        (ranks / f"error_rank{rank}.txt").write_text(text)
    for rank, text in logs.items():
        (ranks / f"rank{rank}.log").write_text(text)
    return tmp_path


def test_a_failed_step_names_the_first_rank_srun_reports_and_its_cause(tmp_path):
    run = _step(tmp_path, "srun: error: node2: task 1: Killed\nsrun: Terminating StepId=7.3\n"
                          "srun: error: node1: task 0: Exited with exit code 1\n",
                errors={0: "RuntimeError: Connection closed by peer"}, logs={1: "step 12 ...\n"})
    err = step_failure(run, 137)
    assert isinstance(err, WorkerError) and err.rank == 1
    assert "process on node2: Killed; last output:\nstep 12" in err.cause


def test_a_failed_step_gives_the_ranks_own_traceback(tmp_path):
    run = _step(tmp_path, "srun: error: node3: task 2: Exited with exit code 1\n",
                errors={2: "Traceback ...\nValueError: planted"})
    err = step_failure(run, 1)
    assert err.rank == 2 and err.cause.endswith("ValueError: planted")


def test_a_step_that_never_started_says_what_srun_said(tmp_path):
    run = _step(tmp_path, "srun: error: Unable to create step for job 7: Requested node configuration "
                          "is not available\n")
    err = step_failure(run, 1)
    assert not isinstance(err, WorkerError) and "Requested node configuration" in str(err)


def test_a_batch_job_gives_its_runs_checkpoints():
    config = Config()
    assert checkpoint.with_default_every(config, {}).checkpoint_every == 0
    assert checkpoint.with_default_every(config, {"DISTSGD_CHECKPOINT_EVERY": "50"}).checkpoint_every == 50
    own = Config(checkpoint_every=7)
    assert checkpoint.with_default_every(own, {"DISTSGD_CHECKPOINT_EVERY": "50"}).checkpoint_every == 7
    assert checkpoint.with_default_every(config, {"DISTSGD_CHECKPOINT_EVERY": "50"}).hash() == config.hash()
    with pytest.raises(ConfigError, match="DISTSGD_CHECKPOINT_EVERY='often'"):
        checkpoint.with_default_every(config, {"DISTSGD_CHECKPOINT_EVERY": "often"})


def test_the_stop_file_asks_every_rank_to_stop(tmp_path, monkeypatch):
    stop = tmp_path / "stop"
    monkeypatch.setenv(STOP_FILE_ENV, str(stop))
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGUSR1)}
    try:
        asked = StopSignals()
        assert not asked()
        stop.touch()
        assert asked()
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def test_distsgd_run_refuses_a_run_too_large_for_this_hosts_gpus_before_any_rank(tmp_path, monkeypatch):
    """Device "auto" on a host of 2 GPUs: 4 NCCL ranks are refused before any directory or rank."""
    import distsgd
    from distsgd.training import allocation

    monkeypatch.setattr(allocation, "local_gpus", lambda: 2)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    with pytest.raises(ConfigError, match=r"invalid nproc=4; allowed: at most 2 \(4 ranks of one GPU each"):
        distsgd.run(nproc=4, backend="nccl", steps=2, out=str(tmp_path), progress=False)
    assert not any(tmp_path.iterdir())

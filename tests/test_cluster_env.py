"""Cluster environment handling without a cluster or a GPU: SLURM/torchrun variables ->
rank/world/local rank, the launch environment of a fake 2-node x 4-GPU allocation, the NCCL path
(one process per GPU, set_device(local_rank), timeout and device_id given to
init_process_group), and the dry run's stand-in data."""
from __future__ import annotations

import os
from datetime import timedelta
from types import SimpleNamespace

import pytest
import torch

from distsgd.training import cluster, runner, worker
from distsgd.comm import comm as comm_module
from distsgd.training.config import Config
from distsgd.data import load_data
from distsgd.data.standins import write_standins


def fake_slurm_task(procid: int, nodes: int = 2, gpus: int = 4) -> dict[str, str]:
    """What srun sets for task `procid` of `sbatch --nodes=2 --ntasks-per-node=4` (job 4321)."""
    return {"SLURM_JOB_ID": "4321", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_NNODES": str(nodes),
            "SLURM_NTASKS": str(nodes * gpus), "SLURM_TASKS_PER_NODE": f"{gpus}(x{nodes})",
            "SLURM_PROCID": str(procid), "SLURM_LOCALID": str(procid % gpus),
            "SLURM_NODEID": str(procid // gpus)}


def test_expand_slurm_lists() -> None:
    assert cluster.expand_nodelist("gpu[01-03,07],login1") == ["gpu01", "gpu02", "gpu03", "gpu07",
                                                                 "login1"]
    assert cluster.expand_nodelist("node9") == ["node9"]
    assert cluster.expand_tasks_per_node("4(x2),2") == [4, 4, 2]
    with pytest.raises(ValueError):
        cluster.expand_tasks_per_node("four")


def test_launch_env_of_fake_two_node_four_gpu_allocation() -> None:
    envs = [cluster.launch_env(cluster.from_slurm(fake_slurm_task(i)), "nccl") for i in range(8)]
    assert [e["RANK"] for e in envs] == [str(i) for i in range(8)]
    assert {e["WORLD_SIZE"] for e in envs} == {"8"}
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2", "3"] * 2
    assert [e["GROUP_RANK"] for e in envs] == ["0"] * 4 + ["1"] * 4
    assert {e["LOCAL_WORLD_SIZE"] for e in envs} == {"4"}
    assert {e["MASTER_ADDR"] for e in envs} == {"gpu07"}           # the first node of the job
    assert {e["MASTER_PORT"] for e in envs} == {str(29500 + 4321 % 1000)}
    assert {e["TORCH_NCCL_ASYNC_ERROR_HANDLING"] for e in envs} == {"1"}
    devices = [cluster.from_slurm(fake_slurm_task(i)).device for i in range(8)]
    assert devices == [f"cuda:{i}" for i in range(4)] * 2           # one process per GPU
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" not in cluster.launch_env(
        cluster.from_slurm(fake_slurm_task(0)), "gloo")


def test_torchrun_variables_win_over_slurm() -> None:
    env = {**fake_slurm_task(5), "RANK": "2", "WORLD_SIZE": "16", "LOCAL_RANK": "2",
           "LOCAL_WORLD_SIZE": "8", "GROUP_RANK": "0", "MASTER_ADDR": "gpu07", "MASTER_PORT": "29999"}
    p = cluster.detect(env)
    assert (p.rank, p.world_size, p.local_rank, p.nnodes, p.master_port) == (2, 16, 2, 2, 29999)
    assert cluster.detect({}) is None


def test_plain_srun_sets_torchrun_variables(monkeypatch, tmp_path) -> None:
    """`srun python -m distsgd train --launcher env` (no torchrun): runner.run fills in RANK etc."""
    for k, v in fake_slurm_task(6).items():
        monkeypatch.setenv(k, v)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
              "MASTER_PORT"):                   # absent now, and restored to that afterwards
        monkeypatch.setenv(k, "")
        monkeypatch.delenv(k)
    seen = {}
    monkeypatch.setattr(runner, "launch", lambda config, run_dir: seen.update(
        nproc=config.nproc, rank=os.environ["RANK"]))
    monkeypatch.setattr(runner.Result, "load", staticmethod(
        lambda run_dir: SimpleNamespace(path=run_dir, summary={"status": "finished"})))
    runner.run(launcher="env", backend="gloo", steps=1, out=str(tmp_path))
    assert seen == {"nproc": 8, "rank": "6"}


def test_nccl_path_device_and_process_group(monkeypatch) -> None:
    """Rank with LOCAL_RANK=3 on a (mocked) GPU node: cuda:3 selected with set_device, and NCCL's
    process group gets the run's timeout and the rank's device."""
    chosen = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    device = worker.resolve_device(Config(backend="nccl"), local_rank=3)
    assert device == torch.device("cuda", 3) and chosen == [3]
    assert worker.resolve_backend(Config(), device) == "nccl"

    calls = {}
    monkeypatch.setattr(comm_module.dist, "init_process_group", lambda **kw: calls.update(kw))
    monkeypatch.setattr(comm_module.dist, "get_rank", lambda: 3)
    monkeypatch.setattr(comm_module.dist, "get_world_size", lambda: 8)
    c = comm_module.Comm.from_env("nccl", device, None, timeout_s=120)
    assert calls == {"backend": "nccl", "timeout": timedelta(seconds=120), "device_id": device}
    assert (c.rank, c.world_size, c.device) == (3, 8, device)


def test_standins_load_through_real_loaders(tmp_path, monkeypatch) -> None:
    write_standins(tmp_path)
    monkeypatch.setenv("DISTSGD_DATA", str(tmp_path))
    with pytest.raises(RuntimeError, match="corrupted"):     # torchvision's md5 check
        load_data("cifar10")
    monkeypatch.setenv("DISTSGD_DATA_VERIFY", "0")
    c10, c100 = load_data("cifar10"), load_data("cifar100")
    assert (len(c10.train_labels), c10.num_classes, c10.input_shape) == (1040, 10, (3, 32, 32))
    assert (len(c100.train_labels), c100.num_classes) == (520, 100)
    inet = load_data("imagenet", image_size=32)
    x, y = next(inet.train_batches(torch.arange(16), 8, 0, torch.device("cpu")))
    assert x.shape == (8, 3, 32, 32) and inet.num_classes == 4

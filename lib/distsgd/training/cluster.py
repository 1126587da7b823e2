"""Where this process sits in a cluster job: rank, world, local rank, from torchrun or SLURM.

The workers (`distsgd.training.worker.run_worker`) read torchrun's variables: RANK, WORLD_SIZE,
LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. torchrun sets them; a plain
``srun python -m distsgd train --launcher env`` (one task per GPU, no torchrun) sets only SLURM's
own, which `from_slurm` translates:

    SLURM_PROCID -> RANK           SLURM_NTASKS -> WORLD_SIZE     SLURM_LOCALID -> LOCAL_RANK
    SLURM_NODEID -> node rank      SLURM_NNODES -> nodes
    SLURM_TASKS_PER_NODE ("4(x2)" or "4,4") -> LOCAL_WORLD_SIZE of this node
    first host of SLURM_JOB_NODELIST ("gpu[01-02]") -> MASTER_ADDR
    29500 + SLURM_JOB_ID mod 1000 -> MASTER_PORT (as reproduce/slurm/train.sbatch)

`adopt_slurm_env` sets them in a rank started by a plain srun (an srun step of
`distsgd.training.launch.srun`, or ``srun python -m distsgd train --launcher env``). `launch_env`
builds the environment of one rank, including the NCCL settings the project runs
with: one process per GPU (rank `local_rank` uses ``cuda:<local_rank>``, which
`worker.resolve_device` selects with ``torch.cuda.set_device``), TORCH_NCCL_ASYNC_ERROR_HANDLING=1
(a failed or timed-out collective aborts the communicator and the process instead of hanging;
the timeout is the run's ``timeout_s``, given to ``init_process_group`` by `Comm.from_env`) and
NCCL_DEBUG=WARN.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Mapping

DEFAULT_PORT = 29500
NCCL_ENV = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "NCCL_DEBUG": "WARN"}


@dataclass(frozen=True)
class Placement:
    """One rank's place in the job."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    node_rank: int
    nnodes: int
    master_addr: str
    master_port: int

    @property
    def device(self) -> str:
        """The GPU this rank uses when it runs on GPUs: one process per GPU."""
        return f"cuda:{self.local_rank}"


def expand_nodelist(nodelist: str) -> list[str]:
    """SLURM's compressed host list: ``"gpu[01-03,07],login1"`` -> gpu01, gpu02, gpu03, gpu07, login1."""
    hosts: list[str] = []
    for m in re.finditer(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist):
        prefix, ranges = m.group(1), m.group(2)
        if ranges is None:
            hosts.append(prefix)
            continue
        for part in ranges.split(","):
            lo, _, hi = part.partition("-")
            for i in range(int(lo), int(hi or lo) + 1):
                hosts.append(f"{prefix}{i:0{len(lo)}d}")
    return hosts


def expand_tasks_per_node(spec: str) -> list[int]:
    """``SLURM_TASKS_PER_NODE``: ``"4(x2),2"`` -> [4, 4, 2]."""
    counts: list[int] = []
    for part in spec.split(","):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part.strip())
        if not m:
            raise ValueError(f"cannot parse SLURM_TASKS_PER_NODE={spec!r}")
        counts += [int(m.group(1))] * int(m.group(2) or 1)
    return counts


def from_torchrun(env: Mapping[str, str]) -> Placement | None:
    """The placement torchrun (or `launch.spawn`) set, else None."""
    if "RANK" not in env or "WORLD_SIZE" not in env:
        return None
    world = int(env["WORLD_SIZE"])
    local_world = int(env.get("LOCAL_WORLD_SIZE", world))
    return Placement(rank=int(env["RANK"]), world_size=world,
                     local_rank=int(env.get("LOCAL_RANK", 0)), local_world_size=local_world,
                     node_rank=int(env.get("GROUP_RANK", 0)),
                     nnodes=max(1, world // max(1, local_world)),
                     master_addr=env.get("MASTER_ADDR", "127.0.0.1"),
                     master_port=int(env.get("MASTER_PORT", DEFAULT_PORT)))


def from_slurm(env: Mapping[str, str]) -> Placement | None:
    """The placement of an ``srun`` task (one task per rank), else None outside SLURM steps."""
    if "SLURM_PROCID" not in env or "SLURM_NTASKS" not in env:
        return None
    node_rank = int(env.get("SLURM_NODEID", 0))
    per_node = expand_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", env["SLURM_NTASKS"]))
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "127.0.0.1"
    port = int(env["MASTER_PORT"]) if "MASTER_PORT" in env else (
        DEFAULT_PORT + int(env.get("SLURM_JOB_ID", 0)) % 1000)
    return Placement(rank=int(env["SLURM_PROCID"]), world_size=int(env["SLURM_NTASKS"]),
                     local_rank=int(env.get("SLURM_LOCALID", 0)),
                     local_world_size=per_node[min(node_rank, len(per_node) - 1)],
                     node_rank=node_rank, nnodes=int(env.get("SLURM_NNODES", len(per_node))),
                     master_addr=env.get("MASTER_ADDR") or expand_nodelist(nodelist)[0],
                     master_port=port)


def detect(env: Mapping[str, str]) -> Placement | None:
    """torchrun's variables when set (torchrun under srun sets both), else SLURM's, else None."""
    return from_torchrun(env) or from_slurm(env)


def launch_env(p: Placement, backend: str) -> dict[str, str]:
    """The variables rank `p` needs (to add to its environment) for `backend` gloo or nccl."""
    env = {"RANK": str(p.rank), "WORLD_SIZE": str(p.world_size), "LOCAL_RANK": str(p.local_rank),
           "LOCAL_WORLD_SIZE": str(p.local_world_size), "GROUP_RANK": str(p.node_rank),
           "MASTER_ADDR": p.master_addr, "MASTER_PORT": str(p.master_port)}
    if backend == "nccl":
        env.update(NCCL_ENV)
    return env


def adopt_slurm_env(backend: str) -> None:
    """Under a plain `srun` (no torchrun: no RANK), set this process's torchrun variables from
    SLURM's (`from_slurm`, `launch_env`), so that a rank finds its place; nothing elsewhere."""
    if "RANK" not in os.environ:
        placement = from_slurm(os.environ)
        if placement is not None:
            os.environ.update(launch_env(placement, backend))

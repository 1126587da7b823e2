"""The machines a run's ranks may start on, and whether a run fits them.

An `Allocation` is a list of nodes (host names, the head node first: the one whose process
starts the runs, a notebook's kernel) and the GPUs of each node. `Allocation.detect` reads it
from the environment:

- inside a SLURM job (SLURM_JOB_ID and SLURM_JOB_NODELIST set): the job's nodes
  (``gpu[01-04]`` expanded), SLURMD_NODENAME first, and its GPUs per node from SLURM_GPUS_ON_NODE,
  else the count of SLURM_GPUS_PER_NODE (``a100:4`` -> 4), else the GPUs torch sees on the head
  node (allocations are taken to be alike on every node);
- elsewhere: this host and the GPUs torch sees on it.

`Allocation.parse("4x4")` is a shape written by hand (nodes x GPUs per node), for checking a
profile against an allocation one does not have (``reproduce/run.py --allocation``).

`check_fits` refuses, before any rank starts, a run whose ranks would run on GPUs (one GPU per
rank: ``device="cuda"``, or "auto" where the run resolves to CUDA, `wants_gpus`) and that asks for
more ranks than the allocation (or, started locally, this host) has GPUs. `resolve_count` turns
the allocation-relative counts of a profile (``gpus``: every GPU of the allocation; ``node``: the
GPUs of one node; ``K*node``) into numbers, so that one profile serves 1 x 8, 2 x 8 and 4 x 4
GPUs.
"""
from __future__ import annotations

import os
import re
import socket
from dataclasses import dataclass
from typing import Any, Mapping

from .cluster import expand_nodelist
from .config import Config
from ..errors import ConfigError

COUNT_WORDS = "an integer >= 1, 'gpus' (every GPU of the allocation), 'node' (the GPUs of one node) or 'K*node'"
_COUNT = re.compile(r"(?:(\d+)\s*\*\s*)?node|gpus")      # an allocation-relative count, stripped


@dataclass(frozen=True)
class Allocation:
    """Nodes (host names, the head node first) and the GPUs of each; `source` says where from."""

    nodes: tuple[str, ...]
    gpus_per_node: int
    source: str = "this host"

    @property
    def gpus(self) -> int:
        """Every GPU of the allocation."""
        return len(self.nodes) * self.gpus_per_node

    @property
    def is_slurm(self) -> bool:
        return self.source.startswith("SLURM")

    def describe(self) -> str:
        """E.g. '2 nodes x 8 GPUs (SLURM job 42)'."""
        n = len(self.nodes)
        return f"{n} node{'s' * (n != 1)} x {self.gpus_per_node} GPU{'s' * (self.gpus_per_node != 1)} ({self.source})"

    @classmethod
    def parse(cls, shape: str) -> "Allocation":
        """A shape 'NODESxGPUS' ('4x4': four nodes of four GPUs), nodes named node0, node1, ..."""
        m = re.fullmatch(r"\s*(\d+)\s*[xX]\s*(\d+)\s*", shape)
        if not m or int(m.group(1)) < 1:
            raise ConfigError("allocation", shape, "NODESxGPUS, e.g. 1x8 or 4x4 (nodes >= 1)")
        return cls(tuple(f"node{i}" for i in range(int(m.group(1)))), int(m.group(2)), f"shape {shape.strip()}")

    @classmethod
    def detect(cls, env: Mapping[str, str] = os.environ) -> "Allocation":
        """The SLURM job this process runs in, else this host (see the module doc)."""
        if env.get("SLURM_JOB_ID") and env.get("SLURM_JOB_NODELIST"):
            nodes = expand_nodelist(env["SLURM_JOB_NODELIST"])
            head = env.get("SLURMD_NODENAME")
            if head in nodes:
                nodes = [head] + [n for n in nodes if n != head]
            return cls(tuple(nodes), slurm_gpus_per_node(env), f"SLURM job {env['SLURM_JOB_ID']}")
        return cls((socket.gethostname(),), local_gpus())

    def this_host(self) -> "Allocation":
        """The head node alone: what a run started locally (spawn) may use."""
        return Allocation(self.nodes[:1], self.gpus_per_node, self.source)


def local_gpus() -> int:
    """The CUDA devices torch sees on this host."""
    import torch

    return torch.cuda.device_count()


def slurm_gpus_per_node(env: Mapping[str, str]) -> int:
    """The GPUs of each node of a SLURM job: SLURM_GPUS_ON_NODE, else SLURM_GPUS_PER_NODE's count
    (a type may come first: 'a100:4'), else those torch sees on this node."""
    if env.get("SLURM_GPUS_ON_NODE", "").isdigit():
        return int(env["SLURM_GPUS_ON_NODE"])
    per_node = env.get("SLURM_GPUS_PER_NODE", "").rsplit(":", 1)[-1]
    if per_node.isdigit():
        return int(per_node)
    return local_gpus()


def wants_gpus(config: Config, cuda_available: bool) -> bool:
    """Whether the ranks of `config` run on GPUs, one each: as `worker.resolve_device` decides,
    device 'cuda', or 'auto' with a backend other than gloo where CUDA is available."""
    return config.device == "cuda" or (config.device == "auto" and config.backend != "gloo" and cuda_available)


def check_fits(config: Config, allocation: Allocation) -> None:
    """Raise ConfigError naming both numbers where `config`'s ranks run on GPUs (`wants_gpus`)
    and ask for more than the allocation's GPUs; nothing for CPU ranks (they share cores)."""
    if wants_gpus(config, allocation.gpus_per_node > 0) and config.nproc > allocation.gpus:
        raise ConfigError("nproc", config.nproc, f"at most {allocation.gpus}",
                          f"{config.nproc} ranks of one GPU each do not fit {allocation.describe()}; "
                          "ask for fewer ranks, 'gpus' in a profile, or a larger allocation")


def resolve_count(field: str, value: Any, allocation: Allocation) -> int:
    """A rank count of a profile: an integer as it is, 'gpus' every GPU of the allocation, 'node'
    the GPUs of one node, 'K*node' K nodes' GPUs; ConfigError naming `field` otherwise (or where
    the allocation has no GPUs to count)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = value.strip() if isinstance(value, str) else ""
    m = _COUNT.fullmatch(text)
    if not m:
        raise ConfigError(field, value, COUNT_WORDS)
    count = allocation.gpus if text == "gpus" else int(m.group(1) or 1) * allocation.gpus_per_node
    if count < 1:
        raise ConfigError(field, value, "an integer here", f"{allocation.describe()} has no GPU to count")
    return count


def resolve_counts(parameters: Mapping[str, Any], allocation: Allocation) -> dict[str, Any]:
    """`parameters` with every allocation-relative count (`resolve_count`), alone or in a list,
    replaced by its number; other values unchanged."""
    def is_word(v: Any) -> bool:
        return isinstance(v, str) and _COUNT.fullmatch(v.strip()) is not None

    out: dict[str, Any] = {}
    for key, value in parameters.items():
        if is_word(value):
            out[key] = resolve_count(key, value, allocation)
        elif isinstance(value, list) and any(is_word(v) for v in value):
            out[key] = [resolve_count(key, v, allocation) if is_word(v) else v for v in value]
        else:
            out[key] = value
    return out

"""Which link a collective uses and what it costs: a flat network or two levels (nodes of
`gpus_per_node` ranks, an intra-node link inside a node and an inter-node link between nodes).

Costs are `NetModel.cost` (comm/netmodel.py), the alpha-beta formulas `Comm` emulates, so the
simulator and the emulation share one network model. Ranks fill the nodes in order (rank r is on
node r // gpus_per_node), and a group is consecutive ranks (KAVG's local groups):

- a group inside one node: the intra-node link's formula over the group's p ranks;
- a group spanning nodes (the world, as soon as p > gpus_per_node): a flat ring over all its
  ranks. Every ring step moves n/p bytes over every hop at once and ends when its slowest hop does
  (Patarasuk & Yuan, "Bandwidth optimal all-reduce algorithms for clusters of workstations",
  JPDC 2009; NCCL's ring bus bandwidth is its slowest link's), so the ring costs the flat formula
  with the inter-node link's alpha and bandwidth: `inter.cost(kind, n, p)`. In a ring with the
  ranks in node order one edge leaves each node, so the NIC is not shared.

With gpus_per_node = 1 every group spans nodes and the flat formulas of `inter` are reproduced
exactly; with all ranks in one node, those of `intra`. Hierarchical collectives and a NIC shared
by a node's GPUs are not modeled.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..comm.netmodel import NetModel
from ..errors import ConfigError

INTRA, INTER = "intra", "inter"      # the links' names (threads of the timeline)


@dataclass(frozen=True)
class Topology:
    """Nodes of `gpus_per_node` ranks; `intra` inside a node, `inter` between nodes."""

    gpus_per_node: int
    intra: NetModel
    inter: NetModel

    def __post_init__(self) -> None:
        if not (isinstance(self.gpus_per_node, int) and self.gpus_per_node >= 1):
            raise ConfigError("gpus_per_node", self.gpus_per_node, "an integer >= 1")

    @classmethod
    def flat(cls, net: NetModel) -> Topology:
        """One network between all ranks (every rank its own node)."""
        return cls(1, net, net)

    def link(self, first: int, size: int) -> str:
        """INTRA if the ranks first..first+size-1 are on one node, else INTER."""
        g = self.gpus_per_node
        return INTRA if first // g == (first + size - 1) // g else INTER

    def group_link(self, size: int, nproc: int) -> str:
        """The link of the groups of `size` consecutive ranks partitioning `nproc`: INTER if any
        of them spans nodes (the ranks are then bound by the slowest group)."""
        spans = any(self.link(first, size) == INTER for first in range(0, nproc, size))
        return INTER if spans else INTRA

    def cost(self, link: str, kind: str, nbytes: int, p: int) -> float:
        """Seconds of collective `kind` on `nbytes` over a group of `p` ranks on `link`."""
        return (self.intra if link == INTRA else self.inter).cost(kind, nbytes, p)

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
  ranks in node order one edge leaves each node, so the world's ring does not share the NIC; groups
  smaller than the world (KAVG's) that span nodes do when k of them have ranks on one node: their
  rings run at once through its NIC, each at bandwidth / k (`nic_sharers`);
- a group of ranks that are not consecutive (the machines' roots of `ps`'s BytePS placement: one
  rank per node) uses the inter-node link when it spans nodes, its NIC not shared
  (`ranks_link`); a push or pull to servers costs `NetModel.cost`'s formula on that link.

With gpus_per_node = 1 every group spans nodes and the flat formulas of `inter` are reproduced
exactly; with all ranks in one node, those of `intra`.

A choice a cluster makes, off by default (the model `Comm` emulates, and what the projections of
notebooks 01/06/07/08/10 use): `hierarchical` (default False: NCCL's flat ring over all ranks, and
Horovod's default HOROVOD_HIERARCHICAL_ALLREDUCE=0): every all-reduce of a group spanning nodes is
the hierarchical one of `netmodel.hierarchical_all_reduce` (intra-node reduce, ring among node
leaders, intra-node broadcast). It applies to every schedule that all-reduces (ssgd, fusion,
no_overlap, wfbp, mgwfbp, ddp, bytescheduler, the local-update algorithms, KAVG's spanning groups);
reduce-scatter / all-gather schedules (ps, dear) stay flat rings, as NCCL runs them. Inside one node
it changes nothing (the intra-node ring).

The runtime whose collectives are priced, `backend` (`netmodel.BACKENDS`): the root collectives'
formulas are the backend's (`NetModel.cost`: gloo's binomial trees, NCCL's pipelined chain), as
`Comm` prices them on that backend. Default gloo, the emulation's on this machine's CPU; the
predictions of GPU clusters (the survey's and the public tables' rows, projections, what-ifs) and a
user's run on GPUs use NCCL.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...comm.netmodel import BACKENDS, GLOO, NetModel, hierarchical_all_reduce
from ...errors import ConfigError

INTRA, INTER = "intra", "inter"      # the links' names (threads of the timeline)


@dataclass(frozen=True)
class Topology:
    """Nodes of `gpus_per_node` ranks; `intra` inside a node, `inter` between nodes;
    `hierarchical` all-reduces; the collectives of `backend` (module doc)."""

    gpus_per_node: int
    intra: NetModel
    inter: NetModel
    hierarchical: bool = False
    backend: str = GLOO

    def __post_init__(self) -> None:
        if not (isinstance(self.gpus_per_node, int) and self.gpus_per_node >= 1):
            raise ConfigError("gpus_per_node", self.gpus_per_node, "an integer >= 1")
        if not isinstance(self.hierarchical, bool):
            raise ConfigError("hierarchical", self.hierarchical, "True or False")
        if self.backend not in BACKENDS:
            raise ConfigError("backend", self.backend, sorted(BACKENDS))

    @classmethod
    def flat(cls, net: NetModel, backend: str = GLOO) -> Topology:
        """One network between all ranks (every rank its own node), `backend`'s collectives."""
        return cls(1, net, net, backend=backend)

    def family(self) -> str:
        """The topology's family, as an error band keys it (`simulator.RuntimeModel.topology`): the
        ranks per node, e.g. "1 rank per node" (every collective on the inter-node link: a flat ring)
        or "4 ranks per node" (an intra-node link inside, the inter-node one between). The links'
        speeds are not in it: the fabric is compared on its own (`error_band`)."""
        return f"{self.gpus_per_node} rank{'s' * (self.gpus_per_node != 1)} per node"

    def link(self, first: int, size: int) -> str:
        """INTRA if the ranks first..first+size-1 are on one node, else INTER."""
        g = self.gpus_per_node
        return INTRA if first // g == (first + size - 1) // g else INTER

    def group_link(self, size: int, nproc: int) -> str:
        """The link of the groups of `size` consecutive ranks partitioning `nproc`: INTER if any
        of them spans nodes (the ranks are then bound by the slowest group)."""
        spans = any(self.link(first, size) == INTER for first in range(0, nproc, size))
        return INTER if spans else INTRA

    def ranks_link(self, ranks: tuple[int, ...], nproc: int) -> tuple[str, int]:
        """The link of a group of `ranks` out of `nproc` and the groups sharing its NIC: consecutive
        ranks as `group_link` and `nic_sharers` say (the group one of a partition of the ranks
        into groups of its size); other ranks on INTER when they span nodes (else INTRA), the NIC
        not shared (module doc)."""
        first, size = ranks[0], len(ranks)
        if ranks == tuple(range(first, first + size)):
            link = self.group_link(size, nproc)
            return link, self.nic_sharers(size, nproc) if link == INTER else 1
        g = self.gpus_per_node
        return (INTRA if len({r // g for r in ranks}) == 1 else INTER), 1

    def nic_sharers(self, size: int, nproc: int) -> int:
        """The most groups of `size` consecutive ranks (partitioning `nproc`) that span nodes and
        have ranks on one node: their concurrent rings share that node's NIC (1 for the world)."""
        g, most = self.gpus_per_node, 1
        if size >= nproc:
            return 1
        for first in range(0, nproc, g):
            groups = {r // size for r in range(first, min(first + g, nproc))}
            most = max(most, sum(1 for q in groups if self.link(q * size, size) == INTER))
        return most

    def cost(self, link: str, kind: str, nbytes: int, p: int, sharers: int = 1, servers: int = 0) -> float:
        """Seconds of collective `kind` on `nbytes` over a group of `p` ranks on `link`, the NIC
        shared by `sharers` concurrent groups (an all-reduce spanning nodes is the hierarchical
        one when `hierarchical`), a push or pull to `servers` server machines, as `backend` runs it
        (`NetModel.cost`)."""
        g = self.gpus_per_node
        inter = self.inter if sharers == 1 else NetModel(self.inter.bandwidth_Bps / sharers, self.inter.latency_s)
        if self.hierarchical and link == INTER and kind == "all_reduce" and 1 < g < p:
            return hierarchical_all_reduce(self.intra, inter, nbytes, g, -(-p // g), self.backend)
        return (self.intra if link == INTRA else inter).cost(kind, nbytes, p, servers, self.backend)

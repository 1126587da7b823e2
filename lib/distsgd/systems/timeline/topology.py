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
  rings run at once through its NIC, each at bandwidth / k (`nic_sharers`).

With gpus_per_node = 1 every group spans nodes and the flat formulas of `inter` are reproduced
exactly; with all ranks in one node, those of `intra`.

Two choices a cluster makes, both off by default (the model `Comm` emulates, and what the
projections of notebooks 01/06/07/08/10 use):

- `hierarchical` (default False: NCCL's flat ring over all ranks, and Horovod's default
  HOROVOD_HIERARCHICAL_ALLREDUCE=0): every all-reduce of a group spanning nodes is the
  hierarchical one of `netmodel.hierarchical_all_reduce` (intra-node reduce, ring among node
  leaders, intra-node broadcast). It applies to every schedule that all-reduces (ssgd, fusion,
  no_overlap, wfbp, mgwfbp, ddp, bytescheduler, the local-update algorithms, KAVG's spanning
  groups); reduce-scatter / all-gather schedules (ps with `servers` None, dear) stay flat rings,
  as NCCL runs them. Inside one node it changes nothing (the intra-node ring).
- `servers` (the PS; default None: the PS as `Comm` runs it, a reduce-scatter push and an
  all-gather pull over the ranks' ring). Otherwise the PS as BytePS runs it (`schedules.PS`):
  each partition is reduced inside the machine, pushed to and pulled from the servers by the
  machine, and broadcast inside it. `PER_NODE` ("nodes"): as many separate server machines as
  worker machines (the survey's nservers = nworkers / 4 with 4 GPUs per machine,
  HKBU-HPML/ddl-benchmarks byteps/launch.sh); N >= 1: N separate server machines; 0: servers
  colocated on the worker machines. Costs: `netmodel.byteps_local`, `netmodel.byteps_remote`.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...comm.netmodel import NetModel, byteps_local, byteps_remote, hierarchical_all_reduce
from ...errors import ConfigError

INTRA, INTER = "intra", "inter"      # the links' names (threads of the timeline)
PER_NODE = "nodes"                  # `Topology.servers`: one server machine per worker machine


@dataclass(frozen=True)
class Topology:
    """Nodes of `gpus_per_node` ranks; `intra` inside a node, `inter` between nodes;
    `hierarchical` all-reduces and the PS's `servers` placement (module doc)."""

    gpus_per_node: int
    intra: NetModel
    inter: NetModel
    hierarchical: bool = False
    servers: int | str | None = None

    def __post_init__(self) -> None:
        if not (isinstance(self.gpus_per_node, int) and self.gpus_per_node >= 1):
            raise ConfigError("gpus_per_node", self.gpus_per_node, "an integer >= 1")
        if not isinstance(self.hierarchical, bool):
            raise ConfigError("hierarchical", self.hierarchical, "True or False")
        if self.servers is not None and self.servers != PER_NODE and (
                isinstance(self.servers, bool) or not isinstance(self.servers, int) or self.servers < 0):
            raise ConfigError("servers", self.servers, f"None (PS as Comm runs it), {PER_NODE!r} (one server "
                              "machine per worker machine), 0 (colocated) or N >= 1 separate servers")

    @classmethod
    def flat(cls, net: NetModel) -> Topology:
        """One network between all ranks (every rank its own node)."""
        return cls(1, net, net)

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

    def cost(self, link: str, kind: str, nbytes: int, p: int, sharers: int = 1) -> float:
        """Seconds of collective `kind` on `nbytes` over a group of `p` ranks on `link`, the NIC
        shared by `sharers` concurrent groups (an all-reduce spanning nodes is the hierarchical
        one when `hierarchical`)."""
        g = self.gpus_per_node
        inter = self.inter if sharers == 1 else NetModel(self.inter.bandwidth_Bps / sharers, self.inter.latency_s)
        if self.hierarchical and link == INTER and kind == "all_reduce" and 1 < g < p:
            return hierarchical_all_reduce(self.intra, inter, nbytes, g, -(-p // g))
        return (self.intra if link == INTRA else inter).cost(kind, nbytes, p)

    def machines(self, p: int) -> int:
        """Worker machines holding `p` ranks."""
        return -(-p // self.gpus_per_node)

    def server_machines(self, p: int) -> int:
        """Separate BytePS server machines for `p` ranks under `servers` (0: colocated)."""
        if self.servers is None:
            raise ValueError("server_machines needs a BytePS placement (servers not None)")
        return self.machines(p) if self.servers == PER_NODE else int(self.servers)

    def byteps_local(self, nbytes: float, p: int) -> float:
        """Seconds of BytePS's reduce (or broadcast) of a partition inside a machine of `p` ranks' world."""
        return byteps_local(self.intra, nbytes, min(self.gpus_per_node, p))

    def byteps_remote(self, nbytes: float, p: int) -> float:
        """Seconds of BytePS's push (or pull) of a partition by every machine of `p` ranks' world."""
        return byteps_remote(self.inter, nbytes, self.machines(p), self.server_machines(p))

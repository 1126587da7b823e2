"""The alpha-beta network model used to emulate a slower network, and the bytes each rank sends.

A collective over a group of p ranks on a tensor of n bytes, with per-message latency alpha (s)
and per-link bandwidth B (bytes/s), costs (ring algorithms, as NCCL and gloo use for large
messages; Thakur, Rabenseifner & Gropp 2005):

    all_reduce      2(p-1)*alpha + 2(p-1)/p * n/B        sends 2(p-1)/p * n per rank
    reduce_scatter   (p-1)*alpha +  (p-1)/p * n/B        sends  (p-1)/p * n per rank (n = input)
    all_gather       (p-1)*alpha +  (p-1)/p * n/B        sends  (p-1)/p * n per rank (n = output)
    broadcast     gloo: ceil(log2 p) * (alpha + n/B)     (binomial tree) sends (p-1)/p * n per rank
                  NCCL: (p-1)*alpha + n/B                (pipelined chain) on average: each non-root
                                                         receives n once
    reduce        gloo: ceil(log2 p) * (alpha + n/B)     (binomial tree, a broadcast reversed) sends
                  NCCL: (p-1)*alpha + n/B                (pipelined chain) (p-1)/p * n per rank on
                                                         average: the p-1 partial sums of n bytes
                                                         travel once each
    gather        ceil(log2 p) * alpha + (p-1) * n/B     (n = one rank's message) the root receives
                                                         (p-1)*n whatever the tree; sends (p-1)/p * n
                                                         per rank on average: each non-root's n once

The root collectives' price is a property of the backend that runs them (`BACKENDS`; `cost`'s
`backend`): gloo's are binomial trees (the emulation on the CPU), NCCL runs reduce and broadcast only
with its ring algorithm (nccl src/graph/tuning.cc, ncclTopoTuneModel: Broadcast and Reduce skip every
algorithm but NCCL_ALGO_RING), a chain pipelined in chunks: each byte crosses each of the p-1 links
once (nccl-tests' bus bandwidth of both is their algorithm bandwidth) after p-1 hops of latency.
`Comm` passes its process group's backend, the simulator its topology's (`Topology.backend`), so the
emulation and the simulator price a collective alike. Every other kind has one formula for both.

For the root collectives (gather, reduce, broadcast) `bytes_sent` is the per-rank average, so a
rank's ledger shows the same number on the root and on the others; the message a worker sends up
(gather, reduce) or receives down (broadcast) is the entry's `nbytes`.

A parameter server's push and pull (`Comm.push`, `Comm.pull`: BytePS's placement of `ps`), over p
worker machines (the group: one rank per machine) and S separate server machines (S = 0: as many
as the workers), the partition of n bytes spread over the servers:

    push / pull      alpha + load * n/B,   load = max(1, p/S)   (the machine's one stream to the
                                           servers, or a server's from all machines, whichever NIC
                                           is busier); a push sends n per rank, a pull none

With p = 1 a collective costs nothing and sends nothing.

Two-level formulas (simulator-only: `Comm` emulates one flat network, so these are built from the
same alpha-beta costs above and used by `distsgd.systems.timeline.Topology`; nodes of g ranks, `intra`
the link inside a node, `inter` the NIC between nodes):

    hierarchical all_reduce   intra.reduce(n, g) + inter.all_reduce(n, nodes) + intra.broadcast(n, g)
                              (the reduce and broadcast priced for the backend, as above)
                              (reduce to the node's leader, ring among the leaders, broadcast back:
                              Horovod's HOROVOD_HIERARCHICAL_ALLREDUCE shape, as issue #23 states it)

Networks are named on the command line (``--net``, and ``--intra`` for the link inside a node):
a preset below; ``bandwidth=<B>,latency=<L>`` or the short ``<B>,<L>``; or a user's own network
with a label for tables, ``NAME:bandwidth=9.9Gbps,latency=50us`` (`named_net` returns the label).
Bandwidth units: bits per second ``bit Kbit Mbit Gbit`` or ``bps Kbps Mbps Gbps``; bytes per
second ``B KB MB GB`` or ``Bps KBps MBps GBps`` (decimal prefixes, b = bit, B = byte). Latency:
``s ms us ns``. The bandwidth is B of the formulas above: what one rank sends per second on its
link in a ring, which is what nccl-tests calls the bus bandwidth (`distsgd.comm.nccl_tests` fits
both numbers from an ``all_reduce_perf`` log). The presets are peak figures:

  preset   bandwidth   latency  source
  1GbE     1Gbit       50us     IEEE 802.3ab (1 Gb/s); latency: the kit's original value, no cited figure
  10GbE    10Gbit      20us     IEEE 802.3ae (10 Gb/s); 20 us end-to-end TCP latency measured by Hurwitz &
                                Feng, "Initial end-to-end performance evaluation of 10-Gigabit Ethernet", HOTI 2003
  25GbE    25Gbit      10us     IEEE 802.3by (25 Gb/s); latency: the kit's original value, no cited figure
  IB-EDR   100Gbit     2us      EDR 4x 25.78125 Gb/s, 64b/66b = 100 Gb/s (NVIDIA ConnectX-5 VPI user manual);
                                adapter < 0.6 us (ConnectX-5 product brief) and NCCL's 2.7 us per inter-node ring
                                step (nccl src/graph/tuning.cc, hwLat NET/Ring/LL) bracket the kit's 2 us, kept
  IB-HDR   200Gbit     2us      HDR 200 Gb/s, sub-600 ns adapter latency (NVIDIA ConnectX-6 VPI user manual);
                                latency as IB-EDR
  PCIe3    15.75GB     1us      PCIe 3.0 x16: 8 GT/s x 16 lanes x 128b/130b = 15.75 GB/s per direction (PCI-SIG
                                base specification 3.0); 1.0 us per ring step over PCI (tuning.cc, hwLat PCI/Ring/LL)
  PCIe4    31.5GB      1us      PCIe 4.0 x16: 16 GT/s x 16 x 128b/130b = 31.5 GB/s per direction (PCI-SIG base
                                specification 4.0); latency as PCIe3
  NVLink   150GB       0.47us   V100 NVLink 2.0: 6 links x 25 GB/s per direction (NVIDIA DGX-1 with Tesla V100
                                system architecture white paper); 0.47 us per ring step (tuning.cc, NVLINK/Ring/LL)
  NVLink3  300GB       0.47us   A100 NVLink 3.0: 12 links, 600 GB/s both directions = 300 GB/s per direction (NVIDIA
                                A100 Tensor Core GPU architecture white paper); latency as NVLink

Measured bus bandwidths stay below these peaks (a V100's six NVLinks deliver about 96% of 150 GB/s
in p2pBandwidthLatencyTest, Dell EMC's V100-SXM2 study): fit your own with ``--nccl-tests``.
"""
from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import ConfigError

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather", "push", "pull")
GLOO, NCCL = "gloo", "nccl"
BACKENDS = {GLOO: "gloo", NCCL: "NCCL"}         # the backends whose collectives `cost` prices -> their names

# Named networks (--net 10GbE, --intra NVLink): values and sources in the module doc's table.
PRESETS = {
    "1GbE": "bandwidth=1Gbit,latency=50us",
    "10GbE": "bandwidth=10Gbit,latency=20us",
    "25GbE": "bandwidth=25Gbit,latency=10us",
    "IB-EDR": "bandwidth=100Gbit,latency=2us",
    "IB-HDR": "bandwidth=200Gbit,latency=2us",
    "PCIe3": "bandwidth=15.75GB,latency=1us",
    "PCIe4": "bandwidth=31.5GB,latency=1us",
    "NVLink": "bandwidth=150GB,latency=0.47us",
    "NVLink3": "bandwidth=300GB,latency=0.47us",
}
_PRESET_NAMES = {name.lower(): name for name in PRESETS}    # presets are matched case-insensitively

_PREFIXES = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_LATENCY_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
_NAME = re.compile(r"[A-Za-z0-9][\w.+-]*")
NET_FORMAT = ("'' (no emulation), a preset (" + ", ".join(PRESETS) + "), "
              "'bandwidth=<number><bit|Kbit|Mbit|Gbit|bps|Kbps|Mbps|Gbps|B|KB|MB|GB|Bps|KBps|MBps|GBps>,"
              "latency=<number><s|ms|us|ns>', the short form '<bandwidth>,<latency>' (e.g. 100Mbit,100us), "
              "either one after a label 'NAME:' (e.g. mine:bandwidth=9.9Gbps,latency=50us)")


@dataclass(frozen=True)
class NetModel:
    """A network with per-message latency `latency_s` and per-link bandwidth `bandwidth_Bps`."""

    bandwidth_Bps: float
    latency_s: float

    def cost(self, kind: str, nbytes: int, p: int, servers: int = 0, backend: str = GLOO) -> float:
        """Modeled seconds for collective `kind` over `p` ranks on `nbytes` run by `backend` (one of
        `BACKENDS`; see module doc); `servers`: a push's or pull's separate server machines (0: p)."""
        if backend not in BACKENDS:
            raise ConfigError("backend", backend, sorted(BACKENDS))
        if p <= 1:
            return 0.0
        a, inv_b = self.latency_s, 1.0 / self.bandwidth_Bps
        if kind == "all_reduce":
            return 2 * (p - 1) * a + 2 * (p - 1) / p * nbytes * inv_b
        if kind in ("reduce_scatter", "all_gather"):
            return (p - 1) * a + (p - 1) / p * nbytes * inv_b
        if kind in ("broadcast", "reduce"):
            if backend == NCCL:
                return (p - 1) * a + nbytes * inv_b
            return math.ceil(math.log2(p)) * (a + nbytes * inv_b)
        if kind == "gather":
            return math.ceil(math.log2(p)) * a + (p - 1) * nbytes * inv_b
        if kind in ("push", "pull"):
            return a + max(1.0, p / (servers or p)) * nbytes * inv_b
        raise ValueError(f"unknown collective kind {kind!r}; known: {KINDS}")


def hierarchical_all_reduce(intra: NetModel, inter: NetModel, nbytes: int, gpus_per_node: int,
                            nodes: int, backend: str = GLOO) -> float:
    """Seconds of an all-reduce of `nbytes` over `nodes` nodes of `gpus_per_node` ranks: reduce
    to each node's leader on `intra`, ring all-reduce among the leaders on `inter`, broadcast on
    `intra`, each as `backend` runs it (module doc). One NIC transfer per node at a time: the NIC
    is not shared."""
    return (intra.cost("reduce", nbytes, gpus_per_node, backend=backend)
            + inter.cost("all_reduce", nbytes, nodes, backend=backend)
            + intra.cost("broadcast", nbytes, gpus_per_node, backend=backend))


def backend_of(name: str, device: str) -> str:
    """The `BACKENDS` key whose collectives a process group of backend `name` (torch's
    `dist.get_backend`: "gloo", "nccl", or per device "cpu:gloo,cuda:nccl") runs on tensors of
    `device` ("cpu", "cuda"): NCCL for CUDA tensors on an NCCL backend, gloo otherwise (gloo, or a
    backend whose root collectives the model does not distinguish: priced as gloo's)."""
    per_device = dict(part.split(":", 1) for part in name.split(",") if ":" in part)
    return NCCL if per_device.get(device, name) == NCCL and device == "cuda" else GLOO


def bytes_sent(kind: str, nbytes: int, p: int) -> int:
    """Bytes one rank sends in collective `kind` over `p` ranks on `nbytes` (see module doc)."""
    if p <= 1:
        return 0
    if kind == "all_reduce":
        return round(2 * (p - 1) * nbytes / p)
    if kind in ("reduce_scatter", "all_gather", "broadcast", "reduce", "gather"):
        return round((p - 1) * nbytes / p)
    if kind in ("push", "pull"):
        return nbytes if kind == "push" else 0
    raise ValueError(f"unknown collective kind {kind!r}; known: {KINDS}")


def parse_net(spec: str | None, field: str = "net") -> NetModel | None:
    """Parse ``--net``: '' -> None (no emulation); a preset name; 'bandwidth=..,latency=..';
    the short positional form 'BANDWIDTH[,LATENCY]' (e.g. '100Mbit,100us'), which also fits
    places where '=' is awkward (papermill's parameter parser rejects it inside strings); any of
    these after a label 'NAME:'. A bad spec raises ConfigError naming `field` (e.g. 'intra')."""
    return named_net(spec, field)[1]


def named_net(spec: str | None, field: str = "net") -> tuple[str, NetModel | None]:
    """(label, network) of a ``--net`` spec (see `parse_net`): the label is NAME of 'NAME:spec',
    else the preset's name, else the spec itself; '' -> ('', None)."""
    text = "" if spec is None else str(spec).strip()
    label, sep, body = text.partition(":")
    if not sep:
        label, body = "", text
    else:
        label, body = label.strip(), body.strip()
        if not _NAME.fullmatch(label) or not body:
            raise ConfigError(field, text, NET_FORMAT,
                              "a label is letters, digits, '_', '.', '+', '-' followed by ':' and a network")
    if not body:
        return "", None
    preset = _PRESET_NAMES.get(body.lower())
    if preset is not None:
        return (label or preset), _parse_fields(PRESETS[preset], text, field)
    if "=" not in body and "," not in body and not re.match(r"[-+.0-9]", body):
        raise ConfigError(field, text, NET_FORMAT, f"{body!r} is neither a preset nor <number><unit>")
    return (label or body), _parse_fields(body, text, field)


def _parse_fields(body: str, spec: str, field: str) -> NetModel:
    """NetModel of 'bandwidth=..,latency=..' or 'BANDWIDTH[,LATENCY]' (`spec` is quoted in errors)."""
    fields: dict[str, str] = {}
    for position, part in enumerate(body.split(",")):
        key, sep, value = part.partition("=")
        if not sep:                                  # positional: bandwidth, then latency
            key, value = ("bandwidth", "latency")[min(position, 1)], part
            if position > 1:
                raise ConfigError(field, spec, NET_FORMAT, "at most two positional values")
        key = key.strip()
        if key not in ("bandwidth", "latency") or key in fields:
            raise ConfigError(field, spec, NET_FORMAT, f"unknown or repeated key {key!r}")
        fields[key] = value.strip()
    if "bandwidth" not in fields:
        raise ConfigError(field, spec, NET_FORMAT, "bandwidth is required")
    bandwidth = _quantity(fields["bandwidth"], _bandwidth_unit, spec, field)
    latency = _quantity(fields.get("latency", "0s"), _latency_unit, spec, field)
    if bandwidth <= 0:
        raise ConfigError(field, spec, NET_FORMAT, "bandwidth must be > 0")
    if latency < 0:
        raise ConfigError(field, spec, NET_FORMAT, "latency must be >= 0")
    return NetModel(bandwidth_Bps=bandwidth, latency_s=latency)


def _bandwidth_unit(unit: str) -> float | None:
    """Bytes per second in one `unit`: b is a bit, B a byte (case matters there, not in prefixes)."""
    for suffix, per_second in (("bps", 1 / 8), ("Bps", 1.0), ("B", 1.0)):
        if unit.endswith(suffix):
            prefix = unit[:-len(suffix)]
            break
    else:
        if not unit.lower().endswith("bit"):
            return None
        prefix, per_second = unit[:-3], 1 / 8
    factor = _PREFIXES.get(prefix.lower())
    return None if factor is None else factor * per_second


def _latency_unit(unit: str) -> float | None:
    """Seconds in one `unit` (s, ms, us, ns; any case)."""
    return _LATENCY_UNITS.get(unit.lower())


def _quantity(text: str, unit_value: Callable[[str], float | None], spec: str, field: str) -> float:
    """The number of '<number><unit>' `text` times `unit_value(unit)` (ConfigError on `field` if bad)."""
    m = re.fullmatch(r"\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]+)\s*", text)
    if not m:
        raise ConfigError(field, spec, NET_FORMAT, f"{text!r} is not <number><unit>")
    factor = unit_value(m.group(2))
    if factor is None:
        raise ConfigError(field, spec, NET_FORMAT, f"unknown unit {m.group(2)!r}")
    return float(m.group(1)) * factor

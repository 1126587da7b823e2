"""The alpha-beta network model used to emulate a slower network, and the bytes each rank sends.

A collective over a group of p ranks on a tensor of n bytes, with per-message latency alpha (s)
and per-link bandwidth B (bytes/s), costs (ring algorithms, as NCCL and gloo use for large
messages; Thakur, Rabenseifner & Gropp 2005):

    all_reduce      2(p-1)*alpha + 2(p-1)/p * n/B        sends 2(p-1)/p * n per rank
    reduce_scatter   (p-1)*alpha +  (p-1)/p * n/B        sends  (p-1)/p * n per rank (n = input)
    all_gather       (p-1)*alpha +  (p-1)/p * n/B        sends  (p-1)/p * n per rank (n = output)
    broadcast     ceil(log2 p) * (alpha + n/B)           (binomial tree) sends (p-1)/p * n per rank
                                                         on average: each non-root receives n once
    reduce        ceil(log2 p) * (alpha + n/B)           (binomial tree, a broadcast reversed) sends
                                                         (p-1)/p * n per rank on average: the p-1
                                                         partial sums of n bytes travel once each
    gather        ceil(log2 p) * alpha + (p-1) * n/B     (n = one rank's message) the root receives
                                                         (p-1)*n whatever the tree; sends (p-1)/p * n
                                                         per rank on average: each non-root's n once

For the root collectives (gather, reduce, broadcast) `bytes_sent` is the per-rank average, so a
rank's ledger shows the same number on the root and on the others; the message a worker sends up
(gather, reduce) or receives down (broadcast) is the entry's `nbytes`.

With p = 1 a collective costs nothing and sends nothing.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass

from ..errors import ConfigError

KINDS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "gather")

# Named networks, for convenience: --net 10GbE
PRESETS = {
    "1GbE": "bandwidth=1Gbit,latency=50us",
    "10GbE": "bandwidth=10Gbit,latency=20us",
    "25GbE": "bandwidth=25Gbit,latency=10us",
    "IB-EDR": "bandwidth=100Gbit,latency=2us",
}

_BANDWIDTH_UNITS = {  # -> bytes per second
    "bit": 1 / 8, "kbit": 1e3 / 8, "mbit": 1e6 / 8, "gbit": 1e9 / 8,
    "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9,
}
_LATENCY_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
NET_FORMAT = ("'' (no emulation), a preset (" + ", ".join(PRESETS) + "), "
              "'bandwidth=<number><bit|Kbit|Mbit|Gbit|B|KB|MB|GB>,latency=<number><s|ms|us|ns>', "
              "or the short form '<bandwidth>,<latency>' (e.g. 100Mbit,100us)")


@dataclass(frozen=True)
class NetModel:
    """A network with per-message latency `latency_s` and per-link bandwidth `bandwidth_Bps`."""

    bandwidth_Bps: float
    latency_s: float

    def cost(self, kind: str, nbytes: int, p: int) -> float:
        """Modeled seconds for collective `kind` over `p` ranks on `nbytes` (see module doc)."""
        if p <= 1:
            return 0.0
        a, inv_b = self.latency_s, 1.0 / self.bandwidth_Bps
        if kind == "all_reduce":
            return 2 * (p - 1) * a + 2 * (p - 1) / p * nbytes * inv_b
        if kind in ("reduce_scatter", "all_gather"):
            return (p - 1) * a + (p - 1) / p * nbytes * inv_b
        if kind in ("broadcast", "reduce"):
            return math.ceil(math.log2(p)) * (a + nbytes * inv_b)
        if kind == "gather":
            return math.ceil(math.log2(p)) * a + (p - 1) * nbytes * inv_b
        raise ValueError(f"unknown collective kind {kind!r}; known: {KINDS}")


def bytes_sent(kind: str, nbytes: int, p: int) -> int:
    """Bytes one rank sends in collective `kind` over `p` ranks on `nbytes` (see module doc)."""
    if p <= 1:
        return 0
    if kind == "all_reduce":
        return round(2 * (p - 1) * nbytes / p)
    if kind in ("reduce_scatter", "all_gather", "broadcast", "reduce", "gather"):
        return round((p - 1) * nbytes / p)
    raise ValueError(f"unknown collective kind {kind!r}; known: {KINDS}")


def parse_net(spec: str | None) -> NetModel | None:
    """Parse ``--net``: '' -> None (no emulation); a preset name; 'bandwidth=..,latency=..';
    or the short positional form 'BANDWIDTH[,LATENCY]' (e.g. '100Mbit,100us'), which also fits
    places where '=' is awkward (papermill's parameter parser rejects it inside strings)."""
    if spec is None or not str(spec).strip():
        return None
    spec = PRESETS.get(str(spec).strip(), str(spec).strip())
    fields: dict[str, str] = {}
    for position, part in enumerate(spec.split(",")):
        key, sep, value = part.partition("=")
        if not sep:                                  # positional: bandwidth, then latency
            key, value = ("bandwidth", "latency")[min(position, 1)], part
            if position > 1:
                raise ConfigError("net", spec, NET_FORMAT)
        key = key.strip()
        if key not in ("bandwidth", "latency") or key in fields:
            raise ConfigError("net", spec, NET_FORMAT)
        fields[key] = value.strip()
    if "bandwidth" not in fields:
        raise ConfigError("net", spec, NET_FORMAT, "bandwidth is required")
    bandwidth = _quantity(fields["bandwidth"], _BANDWIDTH_UNITS, spec)
    latency = _quantity(fields.get("latency", "0s"), _LATENCY_UNITS, spec)
    if bandwidth <= 0 or latency < 0:
        raise ConfigError("net", spec, NET_FORMAT, "bandwidth must be > 0 and latency >= 0")
    return NetModel(bandwidth_Bps=bandwidth, latency_s=latency)


def _quantity(text: str, units: dict[str, float], spec: str) -> float:
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-z]+)\s*", text)
    if not m:
        raise ConfigError("net", spec, NET_FORMAT)
    number, unit = float(m.group(1)), m.group(2)
    # Bandwidth units are case-sensitive in the b/B sense (bit vs byte); prefixes are not.
    key = unit.lower() if unit.lower().endswith("bit") or units is _LATENCY_UNITS else (
        unit[:-1].lower() + "b" if unit.endswith("B") else None)
    if key is None or key not in units:
        raise ConfigError("net", spec, NET_FORMAT, f"unknown unit {unit!r}")
    return number * units[key]

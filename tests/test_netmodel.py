"""--net specs (units, presets, a user's named network) and the nccl-tests fit of bandwidth and latency."""
from __future__ import annotations

import re

import numpy as np
import pytest

from distsgd.comm import PRESETS, NetModel, named_net, netmodel, parse_net
from distsgd.errors import ConfigError


# ------------------------------------------------------------------------------------ --net specs
@pytest.mark.parametrize("spec, bandwidth_Bps, latency_s", [
    ("bandwidth=9.9Gbps,latency=50us", 9.9e9 / 8, 50e-6),
    ("bandwidth=100Mbps,latency=1ms", 100e6 / 8, 1e-3),
    ("bandwidth=64Kbps,latency=2s", 64e3 / 8, 2.0),
    ("bandwidth=800bps", 100.0, 0.0),
    ("bandwidth=2GBps,latency=500ns", 2e9, 500e-9),
    ("bandwidth=3MBps,latency=1us", 3e6, 1e-6),
    ("bandwidth=4KBps", 4e3, 0.0),
    ("12.5GBps,2us", 12.5e9, 2e-6),
    ("10Gbit,20us", 10e9 / 8, 20e-6),            # the spellings that already worked still do
    ("bandwidth=100MB,latency=2ms", 100e6, 2e-3),
])
def test_bandwidth_and_latency_units(spec, bandwidth_Bps, latency_s):
    m = parse_net(spec)
    assert (m.bandwidth_Bps, m.latency_s) == pytest.approx((bandwidth_Bps, latency_s), rel=1e-12)


def test_named_network_label_and_model():
    assert named_net("mine:bandwidth=9.9Gbps,latency=50us") == ("mine", parse_net("9.9Gbps,50us"))
    assert parse_net("mine:bandwidth=9.9Gbps,latency=50us") == parse_net("9.9Gbps,50us")  # Comm takes it too
    assert named_net("ib-edr") == ("IB-EDR", parse_net("IB-EDR"))       # a preset's canonical name
    assert named_net("lab:10GbE") == ("lab", parse_net("10GbE"))
    assert named_net("100Mbit,100us") == ("100Mbit,100us", parse_net("100Mbit,100us"))
    assert named_net("") == ("", None)


def _doc_table() -> dict[str, tuple[str, str]]:
    """The presets table of netmodel's docstring: {name: (bandwidth, latency)}."""
    rows = re.findall(r"^  (\S+) +(\S+) +(\S+) +\S", netmodel.__doc__.split("preset   bandwidth")[1], re.M)
    return {name: (bw, lat) for name, bw, lat in rows}


def test_every_preset_is_in_the_sourced_table_with_its_values():
    assert _doc_table() == {name: tuple(v.split("=")[1] for v in spec.split(","))
                            for name, spec in PRESETS.items()}
    for name in ("10GbE", "25GbE", "IB-EDR", "IB-HDR", "PCIe3", "PCIe4", "NVLink", "NVLink3"):
        assert isinstance(parse_net(name), NetModel)
    assert parse_net("PCIe3").bandwidth_Bps == pytest.approx(15.75e9)
    assert parse_net("NVLink").bandwidth_Bps == pytest.approx(150e9)


@pytest.mark.parametrize("bad, says", [
    ("10GbF", "unknown unit 'GbF'"),
    ("Infiniband", "'Infiniband' is neither a preset nor <number><unit>"),
    ("bandwidth=0Gbps,latency=1us", "bandwidth must be > 0"),
    ("bandwidth=-1Gbps", "bandwidth must be > 0"),
    ("bandwidth=1Gbps,latency=-5us", "latency must be >= 0"),
    ("bandwidth=1Gb", "unknown unit 'Gb'"),
    ("bandwidth=1Gbps,latency=5min", "unknown unit 'min'"),
    ("bandwidth=fast", "'fast' is not <number><unit>"),
    ("bandwidth=1Gbps,jitter=1us", "unknown or repeated key 'jitter'"),
    ("latency=1us", "bandwidth is required"),
    ("my net:10GbE", "a label is"),
    ("mine:", "a label is"),
])
def test_bad_net_is_one_clear_line(bad, says):
    with pytest.raises(ConfigError) as e:
        parse_net(bad)
    message = str(e.value)
    assert message.startswith(f"invalid net={bad!r}; allowed: ") and says in message and "\n" not in message
    assert "IB-EDR" in message and "Gbps" in message            # what is allowed


def test_bad_intra_names_its_own_field():
    with pytest.raises(ConfigError, match=r"^invalid intra='PCIe9'"):
        parse_net("PCIe9", field="intra")

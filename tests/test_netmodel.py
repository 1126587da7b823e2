"""--net specs (units, presets, a user's named network) and the nccl-tests fit of bandwidth and latency."""
from __future__ import annotations

import re

import numpy as np
import pytest

from distsgd.comm import PRESETS, NetModel, named_net, netmodel, parse_net
from distsgd.comm.nccl_tests import fit_nccl_tests
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


# ------------------------------------------------------------------- nccl-tests all_reduce_perf fit
def _time_str(us: float) -> str:
    """all_reduce_perf's time column (src/common.cu): %7.0f from 10 ms, %7.1f from 100 us, else %7.2f."""
    return f"{us:7.0f}" if us >= 10000.0 else f"{us:7.1f}" if us >= 100.0 else f"{us:7.2f}"


def _all_reduce_perf_log(times_us: dict[int, float], nranks: int, in_place_us: float | None = None,
                         rows_extra: str = "", footer_bw: float = 70.742) -> str:
    """The stdout of `all_reduce_perf -b 8 -e 1G -f 2 -g 1` over `nranks` MPI ranks, printed with
    the printf formats of nccl-tests' src/common.cu; out-of-place times `times_us` by size in bytes,
    in-place times `in_place_us` when given (else the same)."""
    sizes = sorted(times_us)
    lines = [f"# nThread 1 nGpus 1 minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) warmup iters: 5 "
             f"iters: 20 agg iters: 1 validation: 1 graph: 0", "#", "# Using devices"]
    lines += [f"#  Rank {r:2d} Group {0:2d} Pid {4242 + r:6d} on {'node%d' % (r // 8):>10} device {r % 8:2d} "
              f"[0x{0x1b + r % 8:02x}] NVIDIA A100-SXM4-80GB" for r in range(nranks)]
    lines += ["#",
              "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          "
              % ("", "", "", "", ""),
              "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s %6s  %7s  %6s  %6s %6s"
              % ("size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong",
                 "time", "algbw", "busbw", "#wrong"),
              "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %5s  %7s  %6s  %6s  %5s"
              % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "")]
    for n in sizes:
        row = "%12li  %12li  %8s  %6s  %6i" % (n, n // 4, "float", "sum", -1)
        for us in (times_us[n], in_place_us or times_us[n]):
            algbw = n / (us * 1e-6) / 1e9
            row += "  %7s  %6.2f  %6.2f  %5li" % (_time_str(us), algbw, algbw * 2 * (nranks - 1) / nranks, 0)
        lines.append(row)
    lines.append(rows_extra)
    lines += ["# Out of bounds values : 0 OK", f"# Avg bus bandwidth    : {footer_bw:g} ", "#", ""]
    return "\n".join(lines)


SIZES = [8 * 2**k for k in range(28)]                           # 8 B .. 1 GiB, -f 2


def _model_times_us(alpha: float, bandwidth: float, p: int) -> dict[int, float]:
    net = NetModel(bandwidth_Bps=bandwidth, latency_s=alpha)
    return {n: net.cost("all_reduce", n, p) * 1e6 for n in SIZES}


def test_fit_recovers_bandwidth_and_latency_of_a_clean_log(tmp_path):
    alpha, bandwidth, p = 7e-6, 11e9, 16
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text(_all_reduce_perf_log(_model_times_us(alpha, bandwidth, p), p))
    fit = fit_nccl_tests(log)                                   # p counted from '# Using devices'
    assert fit.nranks == p and len(fit.table) == len(SIZES)
    assert fit.net.latency_s == pytest.approx(alpha, rel=0.01)
    assert fit.net.bandwidth_Bps == pytest.approx(bandwidth, rel=0.01)
    assert fit.rel_rms < 0.005                                  # what is left is the log's rounding
    spec = fit.describe().split(": ")[1].split("\n")[0]       # describe() gives a --net spec
    assert spec.startswith("bandwidth=") and parse_net(spec).bandwidth_Bps == pytest.approx(bandwidth, rel=1e-3)


def test_fit_with_noise_stays_within_its_bound(tmp_path):
    """5% multiplicative noise on every time: latency and bandwidth within 8% of the truth (over
    seeds 0-199 the worst was 6.0% on latency, 5.2% on bandwidth; relative RMS 3.1-6.8%)."""
    alpha, bandwidth, p = 20e-6, 1.25e9, 8
    rng = np.random.default_rng(0)
    clean = _model_times_us(alpha, bandwidth, p)
    noisy = {n: t * (1 + 0.05 * rng.standard_normal()) for n, t in clean.items()}
    log = tmp_path / "noisy.txt"
    log.write_text(_all_reduce_perf_log(noisy, p))
    fit = fit_nccl_tests(log)
    assert fit.net.latency_s == pytest.approx(alpha, rel=0.08)
    assert fit.net.bandwidth_Bps == pytest.approx(bandwidth, rel=0.08)
    assert 0.02 < fit.rel_rms < 0.08
    assert abs(fit.worst["rel_err"]) == pytest.approx(fit.table["rel_err"].abs().max())


def test_in_place_columns_footer_and_noise_lines_are_ignored(tmp_path):
    alpha, bandwidth, p = 5e-6, 20e9, 4
    times = _model_times_us(alpha, bandwidth, p)
    plain, odd = tmp_path / "plain.txt", tmp_path / "odd.txt"
    plain.write_text(_all_reduce_perf_log(times, p))
    odd.write_text(_all_reduce_perf_log(times, p, in_place_us=99999.0, footer_bw=1e6,
                                        rows_extra="node0:4242:4300 [0] NCCL INFO comm 0x55 rank 0 nranks 4"))
    assert fit_nccl_tests(odd).net == fit_nccl_tests(plain).net


def test_given_nranks_overrides_the_count_and_is_required_without_device_lines(tmp_path):
    times = _model_times_us(10e-6, 5e9, 8)
    text = _all_reduce_perf_log(times, 8)
    log = tmp_path / "log.txt"
    log.write_text("\n".join(line for line in text.splitlines() if "Rank" not in line))
    with pytest.raises(ConfigError, match=r"invalid nranks=None; allowed: an integer >= 2 \(.*give nranks"):
        fit_nccl_tests(log)
    fit = fit_nccl_tests(log, nranks=8)
    assert fit.net.latency_s == pytest.approx(10e-6, rel=0.01)


def test_log_without_data_rows_says_what_a_row_looks_like(tmp_path):
    text = _all_reduce_perf_log(_model_times_us(10e-6, 5e9, 2), 2)
    log = tmp_path / "empty.txt"
    log.write_text("\n".join(line for line in text.splitlines() if line.startswith("#")))
    with pytest.raises(ConfigError, match=r"^invalid --nccl-tests='.*empty.txt'; allowed: an all_reduce_perf "
                                          r"data row: size\(B\) count .* \(the log has no data rows\)$"):
        fit_nccl_tests(log)


@pytest.mark.parametrize("row", ["     1048576        262144     float     sum      -1    180.5    5.81",
                                 "     1048576        262144     float     sum      -1    180.5    5.81   10.89"
                                 "      0    181.0    5.79",                   # in-place cut short
                                 "     1048576        262144     float     sum      -1    fast    5.81   10.89"
                                 "      0    181.0    5.79   10.86      0"])
def test_malformed_row_names_its_line(tmp_path, row):
    log = tmp_path / "bad.txt"
    log.write_text(_all_reduce_perf_log(_model_times_us(10e-6, 5e9, 2), 2, rows_extra=row))
    with pytest.raises(ConfigError, match=r"invalid --nccl-tests=.*\(line \d+: '1048576 .*"):
        fit_nccl_tests(log)


def test_a_size_range_fits_the_regime_a_schedule_uses(tmp_path):
    """Below 1 MiB the log follows a low-latency small-message protocol (1 us, 2 GB/s), from 1 MiB
    on another (15 us, 20 GB/s), as NCCL's LL and Simple protocols differ: the whole log fits
    neither, the range from 1 MiB recovers the large-message network."""
    p = 8
    small, large = NetModel(2e9, 1e-6), NetModel(20e9, 15e-6)
    times = {n: (small if n < 2**20 else large).cost("all_reduce", n, p) * 1e6 for n in SIZES}
    log = tmp_path / "two_regimes.txt"
    log.write_text(_all_reduce_perf_log(times, p))
    whole, big = fit_nccl_tests(log), fit_nccl_tests(log, min_bytes=2**20)
    assert whole.rel_rms > 0.2
    assert big.net.latency_s == pytest.approx(15e-6, rel=0.01)
    assert big.net.bandwidth_Bps == pytest.approx(20e9, rel=0.01)
    assert big.table["size_B"].min() == 2**20 and big.rel_rms < 0.005
    with pytest.raises(ConfigError, match=r"--nccl-tests=.*\(1 size\(s\) in \[1073741824, inf\] bytes\)"):
        fit_nccl_tests(log, min_bytes=2**30)

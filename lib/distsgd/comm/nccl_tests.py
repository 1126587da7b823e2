"""Fit a network's bandwidth and latency from NCCL's `all_reduce_perf` (nccl-tests) output.

`all_reduce_perf` (github.com/NVIDIA/nccl-tests, printed by src/common.cu) writes comment lines
starting with '#': the run's parameters, one '#  Rank  N Group  G Pid ... device ...' line per rank
under '# Using devices', three column-header lines, and after the data the footer ('# Out of
bounds values', '# Avg bus bandwidth'). Each data row is

    size (B)  count (elements)  type  redop  root  | time (us)  algbw (GB/s)  busbw (GB/s)  #wrong
                                                   |   out-of-place              | in-place, the same four

This module reads the OUT-OF-PLACE time of every row (the in-place columns and the footer are not
used) and fits the two numbers of `NetModel` by non-negative least squares
(`scipy.optimize.nnls`) on the collective formula that `Comm`'s emulation and the simulator use,

    time = 2(p-1) * alpha + 2(p-1)/p * n / B                  (NetModel.cost("all_reduce", n, p))

with p the number of ranks: the '# Using devices' rank lines count them (each rank prints one,
under MPI too), or the caller gives it. The fit is linear in (alpha, 1/B); each row is divided by
its measured time, so the fit minimises the *relative* error and an 8-byte message counts as much
as a 1 GB one (least squares on absolute times would leave the latency to the rounding of the
largest rows). `NcclFit` keeps the residual: the relative RMS error over the rows, and the worst row.
Lines that do not start with '#' or a number (NCCL_DEBUG output, mpirun's messages) are skipped;
a line that starts with a number and is not a data row is an error.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import nnls

from ..errors import ConfigError
from .netmodel import NetModel

FIELD = "--nccl-tests"
ROW_FORMAT = ("an all_reduce_perf data row: size(B) count type redop root, then time(us) algbw busbw "
              "#wrong out-of-place and the same in-place, e.g. "
              "'1048576 262144 float sum -1 180.5 5.81 10.89 0 181.0 5.79 10.86 0'")
_RANK_LINE = re.compile(r"#\s+Rank\s+(\d+)\s+Group\b")
_COLUMNS = 13                       # size count type redop root + 2 x (time algbw busbw #wrong)
_TIME = 5                           # the out-of-place time's column


@dataclass(frozen=True)
class NcclFit:
    """A network fitted to an all_reduce_perf log: `net`, its ranks, the residual, the rows."""

    source: str
    nranks: int
    net: NetModel
    rel_rms: float                  # sqrt(mean(((predicted - measured) / measured)^2)) over the rows
    table: pd.DataFrame             # size_B, measured_s, predicted_s, rel_err, busbw_GBps

    @property
    def worst(self) -> pd.Series:
        """The row with the largest relative error."""
        return self.table.loc[self.table["rel_err"].abs().idxmax()]

    def describe(self) -> str:
        """Two lines: the fitted network (a --net spec) and the residual."""
        w = self.worst
        return (f"nccl-tests fit of {self.source} (all_reduce, {self.nranks} ranks, {len(self.table)} sizes): "
                f"bandwidth={self.net.bandwidth_Bps / 1e9:.4g}GBps,latency={self.net.latency_s * 1e6:.4g}us\n"
                f"residual: {self.rel_rms:.1%} relative RMS; worst {w['rel_err']:+.1%} at "
                f"{int(w['size_B'])} B ({w['measured_s'] * 1e6:.4g} us measured, "
                f"{w['predicted_s'] * 1e6:.4g} us predicted)")


def parse_all_reduce_perf(text: str, source: str = "log") -> tuple[pd.DataFrame, int | None]:
    """The data rows (size_B, measured_s: the out-of-place time, busbw_GBps) and the ranks counted in the
    '# Using devices' lines (None when the log has none) of all_reduce_perf's stdout `text`."""
    ranks: set[int] = set()
    rows: list[tuple[int, float, float]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("#"):
            if m := _RANK_LINE.match(stripped):
                ranks.add(int(m.group(1)))
            continue
        if not stripped[:1].isdigit():
            continue                                            # NCCL INFO lines, mpirun's warnings
        fields = stripped.split()
        try:
            if len(fields) != _COLUMNS:
                raise ValueError(f"{len(fields)} columns, not {_COLUMNS}")
            size, time_us, busbw = int(fields[0]), float(fields[_TIME]), float(fields[_TIME + 2])
        except ValueError as e:
            raise ConfigError(FIELD, source, ROW_FORMAT, f"line {number}: {stripped!r}: {e}") from None
        if size < 0 or not time_us > 0:
            raise ConfigError(FIELD, source, ROW_FORMAT,
                              f"line {number}: size must be >= 0 and time > 0: {stripped!r}")
        rows.append((size, time_us * 1e-6, busbw))
    if not rows:
        raise ConfigError(FIELD, source, ROW_FORMAT, "the log has no data rows")
    table = pd.DataFrame(rows, columns=["size_B", "measured_s", "busbw_GBps"])
    return table, (max(ranks) + 1 if ranks else None)


def fit_all_reduce(sizes: np.ndarray, times: np.ndarray, nranks: int, source: str = "log") -> NetModel:
    """NetModel(B, alpha) minimising sum(((cost(n_i) - t_i) / t_i)^2) with alpha, 1/B >= 0, where
    cost(n) = NetModel.cost("all_reduce", n, nranks); the formula's two coefficients are read from
    NetModel.cost itself (a unit latency, then a unit bandwidth), not written out again."""
    latency_coef = np.array([NetModel(math.inf, 1.0).cost("all_reduce", int(n), nranks) for n in sizes])
    per_byte_coef = np.array([NetModel(1.0, 0.0).cost("all_reduce", int(n), nranks) for n in sizes])
    design = np.column_stack([latency_coef, per_byte_coef]) / times[:, None]
    scale = np.linalg.norm(design, axis=0)                      # seconds and s/B differ by ~1e5
    scale[scale == 0] = 1.0
    x, _ = nnls(design / scale, np.ones(len(times)))
    latency_s, inv_bandwidth = x / scale
    if inv_bandwidth <= 0:
        raise ConfigError(FIELD, source, "a log whose times grow with the message size",
                          "no bandwidth fits these rows")
    return NetModel(bandwidth_Bps=float(1.0 / inv_bandwidth), latency_s=float(latency_s))


def fit_nccl_tests(path: str | Path, nranks: int | None = None, min_bytes: int = 0,
                   max_bytes: int | None = None) -> NcclFit:
    """Fit bandwidth and latency to the all_reduce_perf stdout saved at `path` (see module doc);
    `nranks` overrides the count of the log's '# Using devices' lines. Only the rows of sizes in
    [min_bytes, max_bytes] are fitted: NCCL switches protocol and algorithm with the size, so one
    (alpha, B) rarely fits 8 B to 8 GB; fit the sizes your schedule sends (DDP's 25 MB buckets,
    a model's largest tensors) and read the residual."""
    path = Path(path)
    try:
        text = path.read_text(errors="replace")
    except OSError as e:
        raise ConfigError(FIELD, str(path), "a readable file with all_reduce_perf's stdout", str(e)) from None
    table, counted = parse_all_reduce_perf(text, str(path))
    p = counted if nranks is None else nranks
    if p is None or p < 2:
        raise ConfigError("nranks", p, "an integer >= 2",
                          f"{path} has no '# Using devices' rank lines to count: give nranks"
                          if p is None else "an all-reduce over one rank costs nothing")
    table = table[(table["size_B"] >= min_bytes) & (table["size_B"] <= (max_bytes or math.inf))]
    if table["size_B"].nunique() < 2:
        raise ConfigError(FIELD, str(path),
                          "a log of at least two message sizes (all_reduce_perf -b 8 -e 1G -f 2)",
                          f"{table['size_B'].nunique()} size(s) in [{min_bytes}, {max_bytes or 'inf'}] bytes")
    sizes, times = table["size_B"].to_numpy(), table["measured_s"].to_numpy()
    net = fit_all_reduce(sizes, times, p, str(path))
    table = table.assign(predicted_s=[net.cost("all_reduce", int(n), p) for n in sizes])
    table["rel_err"] = table["predicted_s"] / table["measured_s"] - 1
    rel_rms = float(np.sqrt(np.mean(table["rel_err"] ** 2)))
    return NcclFit(source=str(path), nranks=p, net=net, rel_rms=rel_rms,
                   table=table[["size_B", "measured_s", "predicted_s", "rel_err", "busbw_GBps"]]
                   .reset_index(drop=True))


def fit_collective_times(times: pd.DataFrame) -> NetModel:
    """The same least-squares fit on measured all-reduce times of the kit's own table
    (`benchmark.real_collective_times`: columns kind, nbytes, p, measured_s; its all_reduce
    rows of one p, at least two sizes): the network a real backend (NCCL on GPUs, gloo here)
    behaves like, for the simulator."""
    rows = times[times.kind == "all_reduce"]
    if rows.p.nunique() != 1 or rows.nbytes.nunique() < 2:
        raise ConfigError("times", f"{len(rows)} all_reduce rows, p={sorted(rows.p.unique())}",
                          "all_reduce times of one p at two or more message sizes")
    return fit_all_reduce(rows.nbytes.to_numpy(), rows.measured_s.to_numpy(), int(rows.p.iloc[0]),
                          "real_collective_times")

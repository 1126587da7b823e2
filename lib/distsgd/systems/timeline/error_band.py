"""The simulator's error measured on a real cluster, as a band around its predictions.

The survey's benchmark (Shi et al.; HKBU-HPML/ddl-benchmarks) predicted row by row
(`timeline.survey`, the committed `reproduce/validation/survey_error.csv`, docs/simulator_error.md)
gives, per schedule and fabric, the extremes of predicted / measured - 1. The rule, fixed before
any projection is made:

- A projected step time of schedule `algo` on fabric `net` is covered when the survey measured
  that schedule (`timeline.survey.METHODS`: no_overlap, wfbp, mgwfbp, bytescheduler, ps) on that
  fabric (`net`, a preset or a network spec, is the network a survey connection's fit starts from,
  `timeline.survey.FABRICS`: 10GbE, 100GbE-TCP = 100 Gbit/s with 20 us, or IB-EDR; compared by bandwidth
  and latency, not by name). Its band
  is [lo, hi], the smallest and largest error (predicted / measured - 1) of every row of that
  schedule and fabric (all models, p = 4 to 32), so measured = predicted / (1 + e), e in [lo, hi].
- A ratio of step times (each with exponent +1 or -1, e.g. DDP / DeAR, or a ratio of two gains)
  is decided on the interval its terms' bands give in the worst case (`RatioBand.interval`).
- A setting that a term's schedule or fabric leaves uncovered is inconclusive with that reason,
  known before the projection (`register`: a precheck). The band is named in the row's test.

`distsgd.verdicts.projection` decides projected claims within these bands; `distsgd.systems.whatif` prints them
beside each prediction (`with_measured_error`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from ...comm.netmodel import NetModel, parse_net
from ...errors import ConfigError
from .survey import FABRICS, METHODS, load_error


@dataclass(frozen=True)
class ErrorBand:
    """The simulator's measured error on one schedule and fabric: the extremes of predicted /
    measured - 1 over `rows` rows of the survey's table."""

    algo: str
    net: str
    low: float
    high: float
    rows: int
    methods: tuple[str, ...]

    def describe(self) -> str:
        return (f"{self.algo} on {self.net}: {self.low:+.1%}..{self.high:+.1%} "
                f"({self.rows} rows: {', '.join(self.methods)})")


class Uncovered(ValueError):
    """No real-cluster measurement covers a projected setting (the reason is the message)."""


_error_table = functools.cache(load_error)           # read once per path


def measured_error(algo: str, net: str, table: Path | None = None, network: NetModel | None = None) -> ErrorBand:
    """The measured error band of schedule `algo` on fabric `net` (a network spec, or the label of
    `network`; module doc), from the committed `survey_error.csv` (or `table`); `Uncovered` with the
    reason where no row covers them."""
    methods = tuple(m for m, spec in METHODS.items() if spec.algo == algo)
    if not methods:
        measured = sorted({spec.algo for spec in METHODS.values()})
        raise Uncovered(f"the survey measured no {algo} (its schedules: {', '.join(measured)})")
    connection = {parse_net(spec): c for c, spec in FABRICS.items()}.get(network or _network(net))
    if connection is None:
        raise Uncovered(f"the survey measured no network {net!r} (its fabrics: {', '.join(FABRICS.values())})")
    df = _error_table(Path(table) if table else None)
    rows = df[df.method.isin(methods) & (df.connection == connection)]
    return ErrorBand(algo, net, float(rows.error.min()), float(rows.error.max()), len(rows), methods)


def _network(net: str) -> NetModel | None:
    """The network of spec `net`; None for a bare label (a sweep's "mine")."""
    try:
        return parse_net(net)
    except ConfigError:
        return None


@dataclass(frozen=True)
class RatioBand:
    """The measured error carried to a ratio of projected step times: each term a band and its
    exponent (+1: a step time in the numerator, -1: in the denominator)."""

    terms: tuple[tuple[ErrorBand, int], ...]

    def interval(self, ratio: float) -> tuple[float, float]:
        """Where the measured ratio lies when each measured step time is predicted / (1 + e), e in
        its band: worst case over the terms."""
        low = high = 1.0
        for band, exponent in self.terms:
            a, b = (1 + band.low) ** -exponent, (1 + band.high) ** -exponent
            low, high = low * min(a, b), high * max(a, b)
        return min(ratio * low, ratio * high), max(ratio * low, ratio * high)

    def describe(self) -> str:
        bands = {band.describe() for band, _ in self.terms}
        return "simulator's measured error on the survey's cluster: " + "; ".join(sorted(bands))


def ratio_band(numerator: Sequence[tuple[str | tuple[str, ...], str]],
               denominator: Sequence[tuple[str | tuple[str, ...], str]]) -> RatioBand:
    """The `RatioBand` of a ratio whose numerator multiplies the step times of the (algo, net)
    settings `numerator` and whose denominator those of `denominator`; an algo given as a tuple is
    the fastest of those schedules (its band the union of theirs). `Uncovered` if any setting is."""
    def band(algo: str | tuple[str, ...], net: str) -> ErrorBand:
        if isinstance(algo, str):
            return measured_error(algo, net)
        bands = [measured_error(a, net) for a in algo]
        return ErrorBand("fastest of " + "/".join(algo), net, min(b.low for b in bands), max(b.high for b in bands),
                         sum(b.rows for b in bands), tuple(m for b in bands for m in b.methods))

    return RatioBand(tuple((band(a, n), 1) for a, n in numerator) + tuple((band(a, n), -1) for a, n in denominator))


def with_measured_error(table: pd.DataFrame, nets: Mapping[str, NetModel] | None = None) -> pd.DataFrame:
    """A `timeline.sweep` table (columns algo, net, step_s) with the simulator's measured error
    beside each prediction: `measured_error` (the band, or why none covers the row) and the
    step-time range it gives, `step_s_low`..`step_s_high` (= step_s / (1 + e)), NaN where uncovered.
    `nets`: the network of each label of the `net` column (else the label is read as a spec)."""
    bands, lows, highs = [], [], []
    for algo, net, step in zip(table.algo, table.net, table.step_s):
        try:
            band = measured_error(algo, net, network=(nets or {}).get(net))
        except Uncovered as exc:
            bands.append(f"not measured: {str(exc).split(' (')[0]}")
            lows.append(float("nan"))
            highs.append(float("nan"))
            continue
        bands.append(f"{band.low:+.0%}..{band.high:+.0%} ({band.rows} survey rows)")
        lows.append(step / (1 + band.high))
        highs.append(step / (1 + band.low))
    return table.assign(measured_error=bands, step_s_low=lows, step_s_high=highs)

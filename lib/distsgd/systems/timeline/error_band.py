"""The simulator's error measured on a real cluster, as a band around its predictions.

The survey's benchmark (Shi et al.; HKBU-HPML/ddl-benchmarks) predicted row by row
(`timeline.survey`, the committed `reproduce/validation/survey_error.csv`, docs/simulator_error.md)
gives, per runtime model and fabric, the extremes of predicted / measured - 1. Every row of that
table carries the runtime model that predicted it (`simulate.RuntimeModel`: the schedule, the kit's
class or the stated model of another library's runtime that charged it, its resolved parameters,
the compute contention, the per-call overheads and the topology's family, its ranks per node). The rule, fixed before any projection is made:

- A projected step time is covered when the survey's rows hold predictions of the *same runtime
  model* (`simulate.runtime_model` of the projection's schedule, parameters, topology (its family:
  nodes of 4 GPUs for every survey row), effects and overheads, known before it is simulated; every field equal) on the same fabric (`net`, a preset or
  a network spec, is the network a survey connection's fit starts from, `timeline.survey.FABRICS`:
  10GbE, 100GbE-TCP = 100 Gbit/s with 20 us, or IB-EDR; compared by bandwidth and latency, not by
  name). Its band is [lo, hi], the smallest and largest error (predicted / measured - 1) of every
  such row (all models, p = 4 to 32), so measured = predicted / (1 + e), e in [lo, hi]. A band of
  one runtime model says nothing of another's: the survey's PS rows are BytePS's stated model
  (separate server machines, 4,096,000-byte partitions), not the kit's own `ps` class; its WFBP rows
  are Horovod's fusion cycle, not the kit's `wfbp` class.
- A ratio of step times (each with exponent +1 or -1, e.g. DDP / DeAR, or a ratio of two gains)
  is decided on the interval its terms' bands give in the worst case (`RatioBand.interval`).
- A setting that a term's runtime model or fabric leaves uncovered is inconclusive with that reason,
  known before the projection (`projection.register`: a precheck). The band is named in the row's test.

`distsgd.verdicts.projection` decides projected claims within these bands; `distsgd.systems.whatif` prints them
beside each prediction (`with_measured_error`).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Mapping, Sequence

import pandas as pd

from ...comm.netmodel import NetModel, parse_net
from ...errors import ConfigError
from .simulator import RuntimeModel
from .survey import FABRICS, MODEL_COLUMNS, load_error


@dataclass(frozen=True)
class ErrorBand:
    """The simulator's measured error for one runtime model (`models`: one, or the candidates of a
    fastest-of term) on one fabric: the extremes of predicted / measured - 1 over `rows` rows of the
    survey's table, its `methods`."""

    models: tuple[RuntimeModel, ...]
    net: str
    low: float
    high: float
    rows: int
    methods: tuple[str, ...]

    @property
    def algo(self) -> str:
        """The schedule (the fastest of several: their names joined by '/')."""
        return "/".join(m.algo for m in self.models)

    def describe(self) -> str:
        runtimes = "; ".join(f"{m.algo} by {m.runtime}" for m in self.models)
        return (f"{runtimes} on {self.net}: {self.low:+.1%}..{self.high:+.1%} "
                f"({self.rows} rows: {', '.join(self.methods)})")


class Uncovered(ValueError):
    """No real-cluster measurement covers a projected setting (the reason is the message)."""


_error_table = functools.cache(load_error)           # read once per path


def measured_models(table: pd.DataFrame) -> list[RuntimeModel]:
    """The runtime model of each row of an error table (its `MODEL_COLUMNS`)."""
    return [RuntimeModel(**{f.name: getattr(r, f.name) for f in fields(RuntimeModel)})
            for r in table[MODEL_COLUMNS].itertuples(index=False)]


def measured_error(model: RuntimeModel, net: str, table: Path | None = None,
                   network: NetModel | None = None) -> ErrorBand:
    """The measured error band of runtime model `model` on fabric `net` (a network spec, or the
    label of `network`; module doc), from the committed `survey_error.csv` (or `table`); `Uncovered`
    with the reason where no row of that runtime model and fabric exists."""
    df = _error_table(Path(table) if table else None)
    models = measured_models(df)
    same_algo = sorted({m for m in models if m.algo == model.algo}, key=str)
    if not same_algo:
        raise Uncovered(f"the survey measured no {model.algo} (its schedules: {', '.join(sorted(df.algo.unique()))})")
    if model not in same_algo:
        raise Uncovered(f"no survey row was predicted by this runtime model ({_differs(model, same_algo)})")
    connection = {parse_net(spec): c for c, spec in FABRICS.items()}.get(network or _network(net))
    if connection is None:
        raise Uncovered(f"the survey measured no network {net!r} (its fabrics: {', '.join(FABRICS.values())})")
    rows = df[pd.Series([m == model for m in models], index=df.index) & (df.connection == connection)]
    return ErrorBand((model,), net, float(rows.error.min()), float(rows.error.max()), len(rows),
                     tuple(dict.fromkeys(rows.method)))


def _differs(model: RuntimeModel, measured: Sequence[RuntimeModel]) -> str:
    """What `model` has that none of the survey's runtime models of its schedule has: each field
    (runtime, params, contention, overheads) whose value no measured model shares, with the values
    the survey's rows have."""
    parts = []
    for f in fields(RuntimeModel)[1:]:
        mine, theirs = getattr(model, f.name), list(dict.fromkeys(getattr(m, f.name) for m in measured))
        if mine not in theirs:
            parts.append(f"{f.name} {mine}; the survey's {model.algo} rows: {' or '.join(map(str, theirs))}")
    return "; ".join(parts) or f"no measured {model.algo} model has all of {model.describe()}"


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


Term = tuple[RuntimeModel | tuple[RuntimeModel, ...], str]     # (runtime model(s), net) of one step time


def ratio_band(numerator: Sequence[Term], denominator: Sequence[Term]) -> RatioBand:
    """The `RatioBand` of a ratio whose numerator multiplies the step times of the (runtime model,
    net) settings `numerator` and whose denominator those of `denominator`; a tuple of runtime
    models is the fastest of those (its band the union of theirs). `Uncovered` if any setting is."""
    def band(model: RuntimeModel | tuple[RuntimeModel, ...], net: str) -> ErrorBand:
        if isinstance(model, RuntimeModel):
            return measured_error(model, net)
        bands = [measured_error(m, net) for m in model]
        return ErrorBand(tuple(m for b in bands for m in b.models), net, min(b.low for b in bands),
                         max(b.high for b in bands), sum(b.rows for b in bands),
                         tuple(m for b in bands for m in b.methods))

    return RatioBand(tuple((band(m, n), 1) for m, n in numerator) + tuple((band(m, n), -1) for m, n in denominator))


def with_measured_error(table: pd.DataFrame, nets: Mapping[str, NetModel] | None = None) -> pd.DataFrame:
    """A `timeline.sweep` table (columns runtime_model, net, step_s) with the simulator's measured
    error beside each prediction: `measured_error` (the band of its runtime model on its network, or
    why none covers the row) and the step-time range it gives, `step_s_low`..`step_s_high`
    (= step_s / (1 + e)), NaN where uncovered. `nets`: the network of each label of the `net`
    column (else the label is read as a spec)."""
    bands, lows, highs = [], [], []
    for model, net, step in zip(table.runtime_model, table.net, table.step_s):
        try:
            band = measured_error(model, net, network=(nets or {}).get(net))
        except Uncovered as exc:
            bands.append(f"not measured: {str(exc).split(' (')[0]}")
            lows.append(float("nan"))
            highs.append(float("nan"))
            continue
        bands.append(f"{band.low:+.0%}..{band.high:+.0%} ({band.rows} survey rows)")
        lows.append(step / (1 + band.high))
        highs.append(step / (1 + band.low))
    return table.assign(measured_error=bands, step_s_low=lows, step_s_high=highs)

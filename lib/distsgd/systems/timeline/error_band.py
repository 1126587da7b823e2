"""The simulator's error measured on a real cluster, as a band around its predictions.

The survey's benchmark (Shi et al.; HKBU-HPML/ddl-benchmarks) predicted row by row
(`timeline.survey`, the committed `reproduce/validation/survey_error.csv`, docs/simulator_error.md)
gives, per runtime model and fabric, the extremes of predicted / measured - 1. Every row of that
table carries the runtime model that predicted it (`simulate.RuntimeModel`: the schedule, the kit's
class that charged it, its resolved parameters (another library's runtime among them),
the compute contention, the per-call overheads and the topology's family, its ranks per node). The rule, fixed before any projection is made:

- A projected step time is covered when the survey's rows hold predictions of the *same runtime
  model* (`simulate.runtime_model` of the projection's schedule, parameters, topology (its family:
  nodes of 4 GPUs for every survey row), effects and overheads, known before it is simulated; every field equal) on the same fabric (`net`, a preset or
  a network spec, is the network a survey connection's fit starts from, `timeline.survey.FABRICS`:
  10GbE, 100GbE-TCP = 100 Gbit/s with 20 us, or IB-EDR; compared by bandwidth and latency, not by
  name). Its band is [lo, hi], the smallest and largest error (predicted / measured - 1) of every
  such row (all models, p = 4 to 32), so measured = predicted / (1 + e), e in [lo, hi]. A band of
  one runtime model says nothing of another's: the survey's PS rows are `ps` on BytePS's placement
  (separate server machines, 4,096,000-byte partitions), not `ps` with its servers on the ranks; its WFBP rows
  are the `wfbp` class with Horovod's fusion cycle as its parameters, not the `wfbp` class without it.
- A ratio of step times (each with exponent +1 or -1, e.g. DDP / DeAR, or a ratio of two gains)
  is decided on the interval its terms' bands give in the worst case (`RatioBand.interval`).
- A setting that a term's runtime model or fabric leaves uncovered is inconclusive with that reason,
  known before the projection (`projection.register`: a precheck). The band is named in the row's test.
- A user's cluster extends the survey's: the rows of their own runs on several GPUs or nodes
  (`systems.run_validation`, <results root>/validation/runs.csv, each with the runtime model that
  predicted it and the fabric the run crossed) join the survey's by the same rule: a row counts for
  a projection of the same runtime model on the same fabric (its `fabric` spec, compared by
  bandwidth and latency); rows whose fabric is unknown count for none. A band that your rows join
  is another band, so the projections' registered tests change: register them again
  (docs/simulator_error.md).

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
    fastest-of term) on one fabric: the extremes of predicted / measured - 1 over `rows` rows, the
    survey's (its `methods`) and `runs` of the user's own runs (`systems.run_validation`)."""

    models: tuple[RuntimeModel, ...]
    net: str
    low: float
    high: float
    rows: int
    methods: tuple[str, ...]
    runs: int = 0

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
YOUR_RUNS = "of your runs"                           # how a band names the user's rows (`ErrorBand.methods`)


@functools.cache
def _runs_table(path: Path, mtime_ns: int, size: int) -> pd.DataFrame:
    """The rows of the user's runs that a band may read (a named fabric, a prediction), read once
    per version of the file."""
    from ..run_validation import load_runs
    table = load_runs(path)
    return table[(table.fabric != "") & table.predicted_s.notna()]


def users_rows(model: RuntimeModel, network: NetModel | None, path: Path | None = None) -> pd.DataFrame:
    """The rows of the user's runs (`run_validation.runs_csv()`, or `path`) predicted by runtime model
    `model` on the fabric `network` (None: a bare label, which no row names)."""
    from ..run_validation import runs_csv
    path = Path(path or runs_csv())
    if network is None or not path.is_file():
        return pd.DataFrame()
    stat = path.stat()
    table = _runs_table(path, stat.st_mtime_ns, stat.st_size)
    same = [m == model and parse_net(f, "fabric") == network for m, f in zip(measured_models(table), table.fabric)]
    return table[pd.Series(same, index=table.index, dtype=bool)]


def measured_models(table: pd.DataFrame) -> list[RuntimeModel]:
    """The runtime model of each row of an error table (its `MODEL_COLUMNS`)."""
    return [RuntimeModel(**{f.name: getattr(r, f.name) for f in fields(RuntimeModel)})
            for r in table[MODEL_COLUMNS].itertuples(index=False)]


def measured_error(model: RuntimeModel, net: str, table: Path | None = None,
                   network: NetModel | None = None, runs: Path | None = None) -> ErrorBand:
    """The measured error band of runtime model `model` on fabric `net` (a network spec, or the
    label of `network`; module doc), from the committed `survey_error.csv` (or `table`) and the
    rows of the user's runs (`users_rows`, from `runs` if given); `Uncovered` with the survey's
    reason where neither holds a row of that runtime model and fabric."""
    target = network or _network(net)
    mine = users_rows(model, target, runs)
    try:
        survey = survey_error_band(model, net, table, target)
    except Uncovered:
        if not len(mine):
            raise
        survey = None
    if not len(mine):
        assert survey is not None
        return survey
    errors = list(mine.error) + ([survey.low, survey.high] if survey else [])
    return ErrorBand((model,), net, float(min(errors)), float(max(errors)), len(mine) + (survey.rows if survey else 0),
                     (survey.methods if survey else ()) + (f"{len(mine)} {YOUR_RUNS}",), len(mine))


def survey_error_band(model: RuntimeModel, net: str, table: Path | None, network: NetModel | None) -> ErrorBand:
    """`measured_error` from the survey's rows alone."""
    df = _error_table(Path(table) if table else None)
    models = measured_models(df)
    same_algo = sorted({m for m in models if m.algo == model.algo}, key=str)
    if not same_algo:
        raise Uncovered(f"the survey measured no {model.algo} (its schedules: {', '.join(sorted(df.algo.unique()))})")
    if model not in same_algo:
        raise Uncovered(f"no survey row was predicted by this runtime model ({_differs(model, same_algo)})")
    connection = {parse_net(spec): c for c, spec in FABRICS.items()}.get(network)
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
        where = "the survey's cluster" + (" and yours" if any(band.runs for band, _ in self.terms) else "")
        return f"simulator's measured error on {where}: " + "; ".join(sorted(bands))


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
                         tuple(m for b in bands for m in b.methods), sum(b.runs for b in bands))

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
        rows = f"{band.rows - band.runs} survey rows" + (f", {band.runs} {YOUR_RUNS}" if band.runs else "")
        bands.append(f"{band.low:+.0%}..{band.high:+.0%} ({rows})")
        lows.append(step / (1 + band.high))
        highs.append(step / (1 + band.low))
    return table.assign(measured_error=bands, step_s_low=lows, step_s_high=highs)

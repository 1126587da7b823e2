"""The simulator's error measured on real clusters, as a band around its predictions.

Every real-cluster table the kit predicts row by row gives, per runtime model and fabric, the
extremes of predicted / measured - 1 (`real_rows`, `TABLES`):

- the survey's benchmark (Shi et al.; HKBU-HPML/ddl-benchmarks; `timeline.survey`, the committed
  `reproduce/validation/survey_error.csv`): every row, p = 4 to 32, on its connection's network
  (`survey.FABRICS`);
- the public tables (`timeline.public_tables`, the committed `reproduce/validation/public_error.csv`:
  PyTorch's DDP benchmark, Horovod's first README table, GRACE's released throughputs, DLPerf's tables): every row
  that was predicted (fitted or held out; the survey's band holds its fitted rows too), on the stated
  inter-node network of its connection (`public_tables.Connection.inter`);
- the user's own runs on several GPUs or nodes (`systems.run_validation`, <results root>/validation/
  runs.csv), on the fabric each run crossed (rows whose fabric is unknown count for none).

Every row carries the runtime model that predicted it (`simulate.RuntimeModel`: the schedule, the
kit's class that charged it and the backend whose collectives it priced, its resolved parameters
(another library's runtime among them), the compute contention, the per-call overheads and the
topology's family, its ranks per node). The rule, fixed before any projection is made:

- A projected step time is covered when some table holds predictions of the *same runtime model*
  (`simulate.runtime_model` of the projection's schedule, parameters, topology, effects and overheads,
  known before it is simulated; every field equal) on the same fabric (`net`, a preset or a network
  spec, compared by bandwidth and latency, not by name). Its band is [lo, hi], the smallest and
  largest error of every such row of every table, so measured = predicted / (1 + e), e in [lo, hi].
  A band of one runtime model says nothing of another's: the survey's PS rows are `ps` on BytePS's
  placement (separate server machines, 4,096,000-byte partitions), not `ps` with its servers on the
  ranks; the WFBP rows of the survey, Horovod's and GRACE's tables are the `wfbp` class with Horovod's
  fusion cycle as its parameters, not the `wfbp` class without it; PyTorch's DDP benchmark measured
  `ddp` in machines of 8, not of 4.
- Where no table covers it, the reason names the nearest measurement of the schedule (the table and
  runtime model whose fields and fabric differ from the projection's in the fewest places) and each
  field in which it differs (`Uncovered`), or that no table measured the schedule at all.
- A ratio of step times (each with exponent +1 or -1, e.g. DDP / DeAR, or a ratio of two gains)
  is decided on the interval its terms' bands give in the worst case (`RatioBand.interval`).
- A setting that a term's runtime model or fabric leaves uncovered is inconclusive with that reason,
  known before the projection (`projection.register`: a precheck). The band is named in the row's test.
- A band that the user's rows join is another band, so the projections' registered tests change:
  register them again (docs/simulator_error.md).

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
from . import public_tables
from .simulator import RuntimeModel
from .survey import FABRICS, MODEL_COLUMNS, load_error

SURVEY, YOURS = "survey", "your runs"               # the tables' names beside `public_tables.TABLES`'
TABLES = {SURVEY: "the survey's benchmark (Shi et al.)",
          **{name: table.title for name, table in public_tables.TABLES.items()},
          YOURS: "your runs"}                       # every table a band reads -> how a reason names it
YOUR_RUNS = "of your runs"                          # how a band names the user's rows (`ErrorBand.methods`)
REAL_COLUMNS = ["table", "method", "fabric", "network", "error", *MODEL_COLUMNS]


@dataclass(frozen=True)
class ErrorBand:
    """The simulator's measured error for one runtime model (`models`: one, or the candidates of a
    fastest-of term) on one fabric: the extremes of predicted / measured - 1 over `rows` rows of the
    `tables` (`TABLES`' names) by their `methods`, `runs` of them the user's own runs."""

    models: tuple[RuntimeModel, ...]
    net: str
    low: float
    high: float
    rows: int
    methods: tuple[str, ...]
    runs: int = 0
    tables: tuple[str, ...] = (SURVEY,)

    @property
    def algo(self) -> str:
        """The schedule (the fastest of several: their names joined by '/')."""
        return "/".join(m.algo for m in self.models)

    def describe(self) -> str:
        runtimes = "; ".join(f"{m.algo} by {m.runtime}" for m in self.models)
        return (f"{runtimes} over {self.net}: {self.low:+.1%}..{self.high:+.1%} "
                f"({self.rows} rows: {', '.join(self.methods)})")


class Uncovered(ValueError):
    """No real-cluster measurement covers a projected setting (the reason is the message; `short`,
    a few words of it for a table's cell)."""

    def __init__(self, reason: str, short: str) -> None:
        super().__init__(reason)
        self.short = short


def _with_networks(table: pd.DataFrame, name: str | Sequence[str], method: Sequence[str],
                   fabric: Sequence[str]) -> pd.DataFrame:
    """`table`'s rows in `REAL_COLUMNS`: from table `name` (or each row's), each with its method and
    fabric spec."""
    networks = {spec: parse_net(spec, "fabric") for spec in set(fabric)}
    return table.assign(table=name, method=list(method), fabric=list(fabric),
                        network=[networks[f] for f in fabric])[REAL_COLUMNS]


@functools.cache
def committed_rows(survey: Path | None = None, public: Path | None = None) -> pd.DataFrame:
    """The predicted rows of the committed real-cluster tables (`REAL_COLUMNS`): the survey's
    (`survey.load_error()` or `survey`) and the public tables' fitted and held-out rows
    (`public_tables.load_error()` or `public`), each with its fabric's spec and network."""
    s = load_error(survey)
    rows = [_with_networks(s, SURVEY, list(s.method), list(s.connection.map(FABRICS)))]
    p = public_tables.load_error(public)
    p = p[p.split.isin(public_tables.PREDICTED)]
    rows.append(_with_networks(p, list(p.table), [f"{t}: {m} ({c})" for t, m, c in zip(p.table, p.method, p.connection)],
                               [public_tables.TABLES[t].connections[c].inter for t, c in zip(p.table, p.connection)]))
    return pd.concat(rows, ignore_index=True)


@functools.cache
def _runs_table(path: Path, mtime_ns: int, size: int) -> pd.DataFrame:
    """The rows of the user's runs that a band may read (a named fabric, a prediction), in
    `REAL_COLUMNS`, read once per version of the file."""
    from ..run_validation import load_runs
    table = load_runs(path)
    table = table[(table.fabric != "") & table.predicted_s.notna()]
    return _with_networks(table, YOURS, [YOURS] * len(table), list(table.fabric))


def users_rows(path: Path | None = None) -> pd.DataFrame:
    """The rows of the user's runs (`run_validation.runs_csv()`, or `path`) that a band reads
    (`REAL_COLUMNS`); none when there is no such file."""
    from ..run_validation import runs_csv
    path = Path(path or runs_csv())
    if not path.is_file():
        return pd.DataFrame(columns=REAL_COLUMNS)
    stat = path.stat()
    return _runs_table(path, stat.st_mtime_ns, stat.st_size)


def real_rows(table: Path | None = None, runs: Path | None = None, public: Path | None = None) -> pd.DataFrame:
    """Every row a band reads (`REAL_COLUMNS`): the committed tables' (`committed_rows`, the
    survey's from `table`, the public ones' from `public` if given) and the user's runs'
    (`users_rows`, from `runs` if given)."""
    committed = committed_rows(Path(table) if table else None, Path(public) if public else None)
    mine = users_rows(runs)
    return pd.concat([committed, mine], ignore_index=True) if len(mine) else committed


def measured_models(table: pd.DataFrame) -> list[RuntimeModel]:
    """The runtime model of each row of an error table (its `MODEL_COLUMNS`)."""
    return [RuntimeModel(**{f.name: getattr(r, f.name) for f in fields(RuntimeModel)})
            for r in table[MODEL_COLUMNS].itertuples(index=False)]


def measured_error(model: RuntimeModel, net: str, table: Path | None = None,
                   network: NetModel | None = None, runs: Path | None = None) -> ErrorBand:
    """The measured error band of runtime model `model` on fabric `net` (a network spec, or the
    label of `network`; module doc), from every real row (`real_rows`: the committed survey's table,
    or `table`, the public tables' and the user's runs', from `runs` if given); `Uncovered`, naming
    the nearest measurement and how it differs, where no row is of that runtime model and fabric."""
    target = network or _network(net)
    rows = real_rows(table, runs)
    same_model = _of_model(rows, model)
    here = rows[same_model & pd.Series([n == target for n in rows.network], index=rows.index, dtype=bool)]
    if target is None or not len(here):
        raise _uncovered(rows, model, net, target)
    runs_here = int((here.table == YOURS).sum())
    methods = tuple(dict.fromkeys(m for m in here.method if m != YOURS))
    return ErrorBand((model,), net, float(here.error.min()), float(here.error.max()), len(here),
                     methods + ((f"{runs_here} {YOUR_RUNS}",) if runs_here else ()), runs_here,
                     tuple(dict.fromkeys(here.table)))


def _of_model(rows: pd.DataFrame, model: RuntimeModel) -> pd.Series:
    """Which of `rows` were predicted by runtime model `model` (every field equal)."""
    same = pd.Series(True, index=rows.index)
    for f in fields(RuntimeModel):
        same &= rows[f.name] == getattr(model, f.name)
    return same


def _uncovered(rows: pd.DataFrame, model: RuntimeModel, net: str, target: NetModel | None) -> Uncovered:
    """Why no row of `rows` covers `model` on `net` (`target`): no table measured the schedule, or
    the nearest measurement of it (the table, runtime model and fabric differing from the projection
    in the fewest places; ties: the table listed first in `TABLES`, then the most rows) and each
    place it differs."""
    ours = rows[rows.algo == model.algo]
    if not len(ours):
        return Uncovered(f"no real-cluster table measured {model.algo} (their schedules: "
                         f"{', '.join(sorted(rows.algo.unique()))}; {', '.join(TABLES[t] for t in rows.table.unique())})",
                         f"no table measured {model.algo}")
    order = list(TABLES)
    candidates = []
    for (name, fabric, *values), group in ours.groupby(["table", "fabric", *MODEL_COLUMNS[1:]], sort=False):
        theirs = dict(zip(MODEL_COLUMNS[1:], values))
        differs = [f"{f} {theirs[f]} (this: {getattr(model, f)})" for f in MODEL_COLUMNS[1:]
                   if theirs[f] != getattr(model, f)]
        if group.network.iloc[0] != target:
            differs.append(f"fabric {fabric} (this: {net})")
        candidates.append((len(differs), order.index(name), -len(group), name, differs))
    _, _, count, name, differs = min(candidates, key=lambda c: c[:3])
    return Uncovered(f"the nearest measurement of {model.algo}, {TABLES[name]} ({-count} rows), is not this runtime "
                     f"model on this fabric: its {'; its '.join(differs)}",
                     f"nearest {name} differs in {', '.join(d.split(' ')[0] for d in differs)}")


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
        tables = dict.fromkeys(t for band, _ in self.terms for t in band.tables)
        return f"simulator's measured error on {', '.join(TABLES[t] for t in tables)}: " + "; ".join(sorted(bands))


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
                         tuple(m for b in bands for m in b.methods), sum(b.runs for b in bands),
                         tuple(dict.fromkeys(t for b in bands for t in b.tables)))

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
            bands.append(f"not measured: {exc.short}")
            lows.append(float("nan"))
            highs.append(float("nan"))
            continue
        bands.append(f"{band.low:+.0%}..{band.high:+.0%} ({band.rows} rows: {', '.join(band.tables)})")
        lows.append(step / (1 + band.high))
        highs.append(step / (1 + band.low))
    return table.assign(measured_error=bands, step_s_low=lows, step_s_high=highs)

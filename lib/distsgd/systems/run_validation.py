"""Every run on several GPUs or nodes against the simulator's prediction of it: the rows a user's
cluster adds to the simulator's validation, which the error bands read (`timeline.error_band`).

For a finished run (`training.results.Result`) whose ranks ran on more than one GPU or on more
than one host (`why_not` says why another run gets no row), `row` takes:

- measured_s: the run's steady step time (`Result.steady_step_time`: the median over its logged
  intervals, evaluations left out);
- compute_s: the same median of the step less the time its ranks were blocked waiting for
  collectives (`Result.steady_step_time(waited=False)`): the run's own single-step compute;
- its topology: `nodes` hosts (`Result.hosts`) of nproc / nodes ranks each (ranks fill the nodes
  in order, as `Topology` places them; ranks spread unevenly get no row);
- its fabric (`Fabric`): the network between its nodes and the one inside a node (by default the
  same). An emulated run's network is its `Config.net`, both. A run over the real network crossed
  the fabric its user names (`--fabric`, a profile's ``fabric``, ``$DISTSGD_FABRIC``; inside a node
  ``--inside``, ``fabric_inside``, ``$DISTSGD_FABRIC_INSIDE``: a preset or a --net spec). The row's
  `fabric` is the link its collectives crossed: between the nodes, or on one node the one inside
  it. Unnamed, the row is recorded with the fabric unknown and no prediction, and no band reads it:
  name the fabric and record the run again;
- a layer profile of the run's own model (its options, its data's input shape and classes, its
  batch): each layer's forward and backward time in proportion to its FLOPs
  (`profiler.flop_profile`), scaled to compute_s (`Profile.scaled`, as the survey's and the public
  tables' profiles are scaled to their own single-GPU step), on the run's device (cpu or cuda: the
  per-call costs `simulate` charges by default, `costs.for_profile`);
- predicted_s: `timeline.simulate` of the run's algorithm with its resolved parameters on that
  topology, with the collectives of the backend the run used (`Topology.backend`: NCCL on GPUs, gloo
  on CPUs), and nothing else (no effects, the profile's overheads): the runtime model a projection
  is made with (`verdicts.projection.runtime`), so that the rows of one runtime model and fabric
  give a projection's band. Nothing is fitted: the fabric is the network as named, as a projection
  names it.

The row (`COLUMNS`: the run's id and code version, the code version that predicted it, the
setting, measured_s, compute_s, predicted_s, error = predicted / measured - 1 and the runtime
model's columns, `survey.MODEL_COLUMNS`) goes to the table of the user's runs, `runs_csv()`:
<results root>/validation/runs.csv (`paths.results_root`, ``$DISTSGD_RESULTS``). One row per run
(its directory's name and the code version that made it): `record` rewrites the table atomically
under a lock (notebooks run two at a time); a recorded run keeps its row unless it is recorded
again with another named fabric (a correction; an unknown fabric never replaces a named one).

``python -m distsgd validate-run RUN_DIR...`` records runs by hand (`systems.commands`); ``reproduce/run.py`` records
the runs each notebook finished (`record_runs` with `since_ns`).
"""
from __future__ import annotations

import datetime
import fcntl
import functools
import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence

import pandas as pd
import torch

from ..algorithms.registry import REGISTRY
from ..comm.netmodel import NET_FORMAT, NetModel, backend_of, parse_net
from ..errors import ConfigError
from ..files import write_csv_atomic
from ..paths import results_root
from ..training.allocation import wants_gpus
from ..training.config import Config
from ..training.provenance import code_version
from ..training.results import Result, find_runs
from ..training.worker import resolve_backend
from .profiler import flop_profile
from .timeline.simulator import runtime_model, simulate
from .timeline.survey import MODEL_COLUMNS
from .timeline.topology import Topology

RUNS_CSV = Path("validation") / "runs.csv"          # under the results root
FABRIC_ENV, INSIDE_ENV = "DISTSGD_FABRIC", "DISTSGD_FABRIC_INSIDE"
COLUMNS = ["run", "code_version", "predicted_by", "recorded", "algo_label", "model", "data", "batch_size", "nproc",
           "nodes", "hosts", "device", "fabric", "inside", "steps", "measured_s", "compute_s", "predicted_s",
           "error", *MODEL_COLUMNS, "path"]
TEXT_COLUMNS = ("run", "code_version", "predicted_by", "hosts", "fabric", "inside")   # read as text; '' not NaN
NOMINAL_FLOPS = 1e12     # the FLOP rate of the unscaled profile: only its proportions are used


@dataclass(frozen=True)
class Fabric:
    """The network a run over the real network crossed: `between` its nodes and `inside` one
    (a preset or a --net spec; '' unknown; `inside` '' is `between`)."""

    between: str = ""
    inside: str = ""

    def __post_init__(self) -> None:
        parse_net(self.between, "fabric")
        parse_net(self.inside, "fabric_inside")
        if self.inside and not self.between:
            raise ConfigError("fabric", "", NET_FORMAT, f"fabric_inside {self.inside!r} needs the fabric between nodes")

    @classmethod
    def named(cls, between: str | None = None, inside: str | None = None,
              env: Mapping[str, str] = os.environ) -> "Fabric":
        """The fabric given, else the environment's (`FABRIC_ENV`, `INSIDE_ENV`)."""
        return cls(between if between is not None else env.get(FABRIC_ENV, ""),
                   inside if inside is not None else env.get(INSIDE_ENV, ""))

    def of(self, config: Config) -> "Fabric":
        """The fabric a run of `config` crossed: its emulated network (`Config.net`) if it has one, else this."""
        return Fabric(config.net, config.net) if config.net else self

    @property
    def link_inside(self) -> str:
        return self.inside or self.between


def runs_csv(root: Path | None = None) -> Path:
    """The table of the user's runs: <results root (`paths.results_root`, or `root`)>/validation/runs.csv."""
    return Path(root or results_root()) / RUNS_CSV


def load_runs(path: Path | None = None) -> pd.DataFrame:
    """The table of the user's runs (`runs_csv()`, or `path`): `COLUMNS`, no rows if it does not exist."""
    path = Path(path or runs_csv())
    if not path.is_file():
        return pd.DataFrame(columns=COLUMNS)
    df = pd.read_csv(path, keep_default_na=False, na_values=[""], dtype=dict.fromkeys(TEXT_COLUMNS, str))
    return df.reindex(columns=COLUMNS).fillna(dict.fromkeys(TEXT_COLUMNS, ""))


def why_not(result: Result) -> str:
    """'' when `result` gets a row (module doc), else why not: not finished, one GPU or CPU ranks
    on one host, hosts not recorded, ranks spread unevenly over its hosts, per-rank parameters (which
    the simulator's identical ranks cannot have), or metrics without the ledger's wait."""
    c, s = result.config, result.summary
    if s.get("status") != "finished":
        return f"its status is {s.get('status')!r}, not finished"
    hosts = result.hosts()
    gpus = _on_gpus(result)
    if len(hosts) <= 1 and not (gpus and c.nproc > 1):
        return f"{c.nproc} {'GPU' if gpus else 'CPU'} rank(s) on {'one host' if hosts else 'no recorded host'}"
    if not hosts:
        return f"{c.nproc} GPU ranks whose hosts are not recorded (no pid files in its ranks/)"
    if c.nproc % len(hosts):
        return f"{c.nproc} ranks on {len(hosts)} hosts: not the same number on each"
    per_rank = [p.name for p in REGISTRY[c.algo].params if p.per_rank and c.params.get(p.name)]
    if per_rank:
        return f"per-rank parameters ({', '.join(per_rank)}): the simulator's ranks are identical"
    if "comm_wait_s" not in result.metrics:
        return "its metrics have no comm_wait_s (made by an older version of distsgd)"
    return ""


def _on_gpus(result: Result) -> bool:
    """Whether the run's ranks ran on GPUs, one each (`allocation.wants_gpus`, CUDA as its env.json saw it)."""
    env = result.env if (result.path / "env.json").is_file() else {}
    return wants_gpus(result.config, bool(env.get("cuda_available", False)))


@functools.cache
def _data_shape(data: str, options: str, seed: int) -> tuple[tuple[int, ...], int]:
    """(input shape, classes) of a run's dataset (loaded once per dataset and options)."""
    from ..data import load_data
    ds = load_data(data, seed=seed, **json.loads(options))
    return tuple(ds.input_shape), int(ds.num_classes)


def row(result: Result, fabric: Fabric) -> dict[str, Any]:
    """The row of a run `why_not` accepts (module doc, `COLUMNS`) over `fabric` (`Fabric.of` the run)."""
    c = result.config
    fabric = fabric.of(c)
    hosts = result.hosts()
    nodes = max(1, len(hosts))
    per_node = c.nproc // nodes
    crossed = fabric.between if nodes > 1 else fabric.link_inside
    device = "cuda" if _on_gpus(result) else "cpu"
    measured, compute = result.steady_step_time(), result.steady_step_time(waited=False)
    placeholder = NetModel(1.0, 0.0)
    backend = backend_of(resolve_backend(c, torch.device(device)), device)     # whose collectives it ran
    topology = (Topology(per_node, parse_net(fabric.link_inside), parse_net(fabric.between), backend=backend)
                if fabric.between else Topology(per_node, placeholder, placeholder, backend=backend))
    model = runtime_model(c.algo, c.params, topology)
    predicted = float("nan")
    if fabric.between:
        shape, classes = _data_shape(c.data, json.dumps(c.data_options, sort_keys=True), c.seed)
        profile = flop_profile(c.model, shape, c.batch_size, device, NOMINAL_FLOPS,
                               f"FLOP proportions of the run {result.path.name}", c.model_options, classes)
        predicted = simulate(profile.scaled(compute), c.algo, c.nproc, params=c.params, topology=topology).step_s
    return dict(run=result.path.name, code_version=result.summary.get("code_version", ""),
                predicted_by=code_version(), recorded=datetime.datetime.now().isoformat(timespec="seconds"),
                algo_label=result.label, model=c.model, data=c.data, batch_size=c.batch_size, nproc=c.nproc,
                nodes=nodes, hosts=" ".join(hosts), device=device, fabric=crossed, inside=fabric.link_inside,
                steps=int(result.summary["steps"]), measured_s=measured, compute_s=compute, predicted_s=predicted,
                error=predicted / measured - 1, **asdict(model), path=str(result.path))


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive lock on the table `path` (a lock file beside it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(f".{path.name}.lock"), "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def record(rows: Sequence[Mapping[str, Any]], path: Path | None = None) -> list[str]:
    """Add `rows` (`row`) to the table at `path` (default `runs_csv()`), one row per (run, code
    version): a recorded run keeps its row unless a new row names another fabric (an unknown
    fabric never replaces a named one). Returns, per row, "recorded", "replaced" or "kept"."""
    path = Path(path or runs_csv())
    actions = []
    with _locked(path):
        table = load_runs(path)
        for new in rows:
            same = (table.run == new["run"]) & (table.code_version == str(new["code_version"]))
            if not same.any():
                table = pd.concat([table, pd.DataFrame([new], columns=COLUMNS)], ignore_index=True)
                actions.append("recorded")
            elif new["fabric"] and (table.loc[same, "fabric"] != new["fabric"]).any():
                table = pd.concat([table[~same], pd.DataFrame([new], columns=COLUMNS)], ignore_index=True)
                actions.append("replaced")
            else:
                actions.append("kept")
        if any(a != "kept" for a in actions):
            write_csv_atomic(path, table)
    return actions


def record_runs(paths: Iterable[Path | str], fabric: Fabric, table: Path | None = None,
                since_ns: int | None = None) -> list[tuple[str, str]]:
    """Record every run at or below `paths` (`find_runs`) that `why_not` accepts, over `fabric`,
    in `table` (default `runs_csv()`); with `since_ns`, only runs whose summary was written at or
    after that time (`time.time_ns()`: a notebook's start). Returns (run directory, what happened:
    `record`'s action, or why it has no row) per run looked at."""
    results, outcomes = [], []
    for run_dir in (r for p in paths for r in find_runs(p)):
        summary = run_dir / "summary.json"
        if not summary.is_file():
            outcomes.append((str(run_dir), "no row: unfinished (no summary.json)"))
            continue
        if since_ns is not None and summary.stat().st_mtime_ns < since_ns:
            continue
        result = Result.load(run_dir)
        reason = why_not(result)
        if reason:
            outcomes.append((str(run_dir), f"no row: {reason}"))
        else:
            results.append(result)
    rows = [row(r, fabric) for r in results]
    for r, new, action in zip(results, rows, record(rows, table) if rows else []):
        told = f"{action} ({new['nodes']} x {new['nproc'] // new['nodes']}, "
        told += (f"fabric {new['fabric']}: measured {1e3 * new['measured_s']:.3g} ms, predicted "
                 f"{1e3 * new['predicted_s']:.3g} ms, error {new['error']:+.1%})" if new["fabric"]
                 else "fabric unknown: no prediction, no band reads it)")
        outcomes.append((str(r.path), told))
    return outcomes

"""`simulate`: the steady-state step time of an algorithm on a layer profile, p ranks and a network.

The rank's streams (`streams.Rank`) run the algorithm's own class (`driver`: its hooks over the
profile, its collectives charged on the network model); another library's runtime is one of its
parameters (Horovod's fusion cycle: `ssgd`'s cycle_ms; BytePS's placement: `ps`'s machine_size;
PyTorch DDP's reducer: `ddp`, torch's own). From the first step of its steady state (`Algorithm.steady_state`: start, cycle) they run
`warmup + measured` more iterations, both multiples of the cycle (its averaging period, 1 for S-SGD),
`warmup` at least two cycles and two steps so that cross-iteration overlap (DeAR's all-gathers,
ByteScheduler's partitions, CoCoD-SGD's average) has reached its steady state; the measured
iterations and the cycle before them must issue the same collectives every cycle (`check_steady`).
An algorithm whose collectives follow the clock instead of the steps (cycle 0: Horovod's fusion
cycle, whose ticks fall anywhere in a step) is measured over two steps after two, unchecked.
The steps before `start` (`transient`) are driven in full, or, when long and repeating themselves
(SSD-SGD's S-SGD warm-up), by their first and last steps.
With T_i the compute clock when iteration i starts:

    step_s         = (T_{w+m} - T_w) / m                 (w = warmup, m = measured)
    compute_s      = compute seconds in that window / m  (forward + backward + updates)
    exposed_comm_s = step_s - compute_s                  (communication the compute waited for)
    comm_s         = link-busy seconds of the window's collectives / m

DeAR with `tune=true` runs its own tuner, as in a run: the class's `GridTuner` (`algorithms.dear`)
times each window of `tune_window` steps on the simulated clock (`comm.now()`, `driver.SimComm`)
during the transient, `Algorithm.steady_state`'s first (tune_trials + 1) x tune_window steps, and
keeps the fastest threshold; the prediction is the steady state that follows. Those tuning steps
(a fixed cost at the start of training) are not in step_s. `Prediction.tuning` holds the class's
trials (threshold_mb, seconds per step of its window) in the order tried, and
`params["threshold_mb"]` its choice.

Every prediction carries the runtime model that made it (`Prediction.model`, `runtime_model`): the
schedule, the kit's class that charges it, its resolved parameters, the simulator's settings that change its times (scale effects, per-call
overheads, hierarchical all-reduce) and the topology's family (ranks per node). The simulator's error
measured on a real cluster is keyed on it (`timeline.error_band`): a band measured for one runtime
model says nothing of another's.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from ...algorithms.registry import REGISTRY
from ...algorithms.tuner import GridTuner
from ...comm.netmodel import BACKENDS, NET_FORMAT, NetModel, parse_net
from ...errors import ConfigError
from ..layer_profile import Profile
from .driver import Driven, drive, issued_collectives
from .effects import OFF, Effects
from .costs import Overheads, for_profile
from .streams import COMPUTE, Interval, Rank
from .topology import Topology

ALGORITHMS = REGISTRY          # every registered algorithm is simulated
TRANSIENT_ENDS = 2             # steps driven at each end of a long transient that repeats itself (`transient`)


@dataclass(frozen=True)
class RuntimeModel:
    """What a predicted step time comes from (module doc): the schedule `algo`; the `runtime` that
    charges it, "class <Name> on <backend>" (the kit's algorithm class, driven: `driver`; the backend
    whose collectives are priced, `Topology.backend`), with the topology's choice that changes its cost
    formulas (hierarchical all-reduce); its resolved parameters (`params`,
    JSON with sorted keys); the compute `contention` (`Effects`); the per-call `overheads` given to
    `simulate` ("the profile's": none given, `costs.for_profile`); and the `topology` family
    (`Topology.family`: the ranks per node). Two predictions share a measured error band only when
    they share all of it (`timeline.error_band`)."""

    algo: str
    runtime: str
    params: str
    contention: float
    overheads: str
    topology: str

    def describe(self) -> str:
        """One line, e.g. "ps by class PS on NCCL {...}, contention 0.189, the profile's overheads, 4
        ranks per node"."""
        return (f"{self.algo} by {self.runtime} {self.params}, contention {self.contention:g}, "
                f"{self.overheads} overheads, {self.topology}")

    __str__ = describe


PROFILE_OVERHEADS = "the profile's"        # `RuntimeModel.overheads` when simulate is given none


def runtime_model(algo: str, params: dict[str, Any] | None, topology: Topology, effects: Effects | None = None,
                  overheads: Overheads | None = None) -> RuntimeModel:
    """The `RuntimeModel` `simulate` runs for `algo` with `params` (resolved here, as simulate
    resolves them) on `topology` with `effects` and `overheads`: the algorithm's own class. Known
    before anything is simulated."""
    if algo not in ALGORITHMS:
        raise ConfigError("algo", algo, sorted(ALGORITHMS))
    effects = effects or OFF
    resolved = dict(REGISTRY[algo].resolve_params(dict(params or {})))
    runtime = f"class {REGISTRY[algo].__name__} on {BACKENDS[topology.backend]}"
    if topology.hierarchical:
        runtime += ", hierarchical all-reduce"
    return RuntimeModel(algo, runtime, json.dumps(resolved, sort_keys=True), float(effects.contention),
                        PROFILE_OVERHEADS if overheads is None else repr(overheads), topology.family())


@dataclass
class Prediction:
    """A simulated configuration: steady-state times per iteration and the rank's timeline."""

    algo: str
    nproc: int
    net: str
    params: dict[str, Any]
    step_s: float
    compute_s: float
    exposed_comm_s: float
    comm_s: float
    window: tuple[int, int]                      # measured iterations [first, last)
    events: list[Interval] = field(repr=False, default_factory=list)
    model: RuntimeModel | None = None               # what made it (`runtime_model`)
    tuning: list[tuple[float, float]] = field(default_factory=list)   # DeAR's tuner's (threshold_mb, s); [] untuned

    def to_chrome_trace(self, path: str | Path) -> Path:
        """Write the timeline in the Chrome trace format (JSON `traceEvents`, complete events
        "X" in microseconds; pid = the rank, every rank being alike; tid = the stream: compute,
        then the links), which Perfetto (ui.perfetto.dev) and chrome://tracing open."""
        streams = [COMPUTE] + sorted({e.stream for e in self.events} - {COMPUTE})
        tid = {s: i for i, s in enumerate(streams)}
        meta = [{"ph": "M", "name": "process_name", "pid": 0,
                 "args": {"name": f"rank 0 of {self.nproc} (all alike): {self.algo}, {self.net}"}}]
        meta += [{"ph": "M", "name": "thread_name", "pid": 0, "tid": tid[s], "args": {"name": s}}
                 for s in streams]
        events = [{"ph": "X", "name": e.name, "cat": e.stream, "pid": 0, "tid": tid[e.stream],
                   "ts": e.start * 1e6, "dur": (e.end - e.start) * 1e6, "args": {"step": e.step}}
                  for e in self.events]
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"traceEvents": meta + events, "displayTimeUnit": "ms"}))
        return path


def resolve_network(net: NetModel | str | None, topology: Topology | None) -> Topology:
    """The topology to simulate on: `topology`, or a flat one of `net` (a NetModel or a --net
    string); ConfigError when neither gives a network or both are given."""
    if topology is not None:
        if net is not None:
            raise ConfigError("net", net, "None when a topology is given (it holds the networks)")
        return topology
    model = parse_net(net) if isinstance(net, str) else net
    if model is None:
        raise ConfigError("net", net, NET_FORMAT, "the simulator needs a network")
    return Topology.flat(model)


def simulate(profile: Profile, algo: str, nproc: int, net: NetModel | str | None = None,
             params: dict[str, Any] | None = None, topology: Topology | None = None,
             label: str = "", overheads: Overheads | None = None,
             effects: Effects | None = None) -> Prediction:
    """Steady-state step of `algo` (with `params`, the algorithm's `Param`s; defaults filled in)
    on `nproc` ranks with `profile`'s per-layer times over `net` (flat) or `topology`.
    `overheads` (`timeline.costs.Overheads`; default None: `costs.for_profile`, none on a
    CPU profile, the committed GPU host's costs on a GPU profile) charges per-collective issue costs
    and copy passes, by one rule for every schedule; on the compute stream they count in `compute_s`. `effects` (`timeline.effects.Effects`; default
    None: off, the original model) adds compute contention (the slowed compute counts in `compute_s`). DeAR with tune=true runs its own tuner (module
    doc). The prediction carries its `RuntimeModel` (`runtime_model`)."""
    if algo not in ALGORITHMS:
        raise ConfigError("algo", algo, sorted(ALGORITHMS))
    if isinstance(nproc, bool) or not isinstance(nproc, int) or nproc < 1:
        raise ConfigError("nproc", nproc, "an integer >= 1")
    topo = resolve_network(net, topology)
    resolved = REGISTRY[algo].resolve_params(dict(params or {}))
    for param in REGISTRY[algo].params:
        if param.per_rank and resolved[param.name]:
            raise ConfigError(f"params.{param.name}", resolved[param.name], "[]", "the simulator's ranks are identical")
    label = label or str(net if topology is None else topology)
    model = runtime_model(algo, resolved, topo, effects, overheads)
    rank = Rank(topo, nproc, overheads if overheads is not None else for_profile(profile), effects or OFF)
    run, start, cycle = stepper(profile, algo, rank, resolved)
    periodic, cycle = cycle > 0, cycle or 1
    warmup = start + cycle * max(2, -(-2 // cycle))
    measured = cycle * max(1, -(-2 // cycle))
    transient(run, start)
    run.steps(start, warmup - start)
    t0, busy0 = rank.t, rank.busy
    run.steps(warmup, measured)
    if periodic:
        check_steady(run, algo, resolved, warmup - cycle, measured + cycle, cycle)
    step_s = (rank.t - t0) / measured
    compute_s = (rank.busy - busy0) / measured
    comm_s = sum(e.end - e.start for e in rank.events
                 if e.stream != COMPUTE and warmup <= e.step < warmup + measured) / measured
    tuner = tuner_of(run)
    if tuner is not None:                            # DeAR's own tuner chose the threshold (module doc)
        resolved = {**resolved, "threshold_mb": run.algorithm.fusion_mb}
    return Prediction(algo=algo, nproc=nproc, net=label, params=resolved, step_s=step_s, compute_s=compute_s,
                      exposed_comm_s=max(0.0, step_s - compute_s), comm_s=comm_s,
                      window=(warmup, warmup + measured), events=rank.events, model=model,
                      tuning=list(tuner.history) if tuner is not None else [])


def collectives(profile: Profile, algo: str, nproc: int, steps: int, net: NetModel | str | None = None,
                params: dict[str, Any] | None = None, topology: Topology | None = None) -> pd.DataFrame:
    """Every collective the simulator charges for a run of `steps` steps of `algo` from a fresh
    start (its `finalize` included), one row each in issue order, with the columns of a run's
    comm.csv that do not depend on wall time (`driver.COLLECTIVE_COLUMNS`): its own class driven
    (`driver.issued_collectives`)."""
    if algo not in REGISTRY:
        raise ConfigError("algo", algo, sorted(REGISTRY))
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ConfigError("steps", steps, "an integer >= 1")
    cls = REGISTRY[algo]
    rank = Rank(resolve_network(net, topology), nproc)
    return issued_collectives(profile, cls, cls.resolve_params(dict(params or {})), rank, steps)


def stepper(profile: Profile, algo: str, rank: Rank, params: dict[str, Any]) -> tuple[Driven, int, int]:
    """What runs `algo` (resolved `params`) on `rank`'s streams, with (start, cycle) of its steady
    state: the algorithm's own class (`driver.drive`, `Algorithm.steady_state`)."""
    cls = REGISTRY[algo]
    start, cycle = cls.steady_state(params)
    return drive(profile, cls, params, rank), start, cycle


def transient(run: Driven, start: int) -> None:
    """Steps 0 .. start - 1, before the steady state (module doc), whose times `simulate` does not
    measure: in full up to 2 * `TRANSIENT_ENDS` steps; a longer one (SSD-SGD's `warmup` S-SGD steps,
    500 by default) by its first `TRANSIENT_ENDS` steps and, when those issued the same collectives
    each step (a transient that repeats itself), its last `TRANSIENT_ENDS` steps only: the steps
    between would repeat them, and the algorithm enters `start` as after a repeated step. A transient
    that does not repeat is driven in full, and so is the transient of an algorithm that tunes itself
    in it (`tuner_of`: its later steps depend on the times it measured). `check_steady` checks the
    steady state that follows."""
    if start <= 2 * TRANSIENT_ENDS or tuner_of(run) is not None:
        run.steps(0, start)
        return
    run.steps(0, TRANSIENT_ENDS)
    sig = run.signature(range(TRANSIENT_ENDS))
    first = start - TRANSIENT_ENDS if all(s == sig[0] for s in sig) else TRANSIENT_ENDS
    run.steps(first, start - first)


def tuner_of(run: Driven) -> GridTuner | None:
    """The tuner of a driven algorithm that tunes itself from timed windows (DeAR with tune=true:
    its `tuner`), else None."""
    return getattr(run.algorithm, "tuner", None)


def check_steady(run: Driven, algo: str, params: dict[str, Any], first: int, count: int, cycle: int) -> None:
    """RuntimeError unless steps first .. first + count - 1 issued the same collectives every
    `cycle` steps (the algorithm's declared `steady_state`)."""
    sig = run.signature(range(first, first + count))
    if any(sig[i] != sig[i % cycle] for i in range(len(sig))):
        raise RuntimeError(f"{algo} {params}: the collectives of steps {first}..{first + count - 1} do not repeat "
                           f"every {cycle} steps; its class's steady_state() must say when they do")

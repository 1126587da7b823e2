"""Projected claims: a paper's timing claim decided at the paper's own scale by the timeline
simulator (`distsgd.systems.timeline`) on a committed layer profile of the paper's model on the paper's
GPU (`reproduce/layer_profiles/`, FLOP-scaled and calibrated as `distsgd.systems.profiler` documents;
why a CPU profile cannot stand in: ../shared/papers/SCALE.md, summarised in docs/simulator.md).

A projection is deterministic (committed profile, closed-form timeline), so its interval does not
come from repeats. It comes from the simulator's error *measured on real clusters*: the survey's
benchmark and the public tables (PyTorch's DDP benchmark, Horovod's first table, GRACE's
throughputs, DLPerf's tables) predicted row by row (`timeline.survey`, `timeline.public_tables`, the committed
`reproduce/validation/survey_error.csv` and `public_error.csv`, docs/simulator_error.md), and the
user's own runs, as bands keyed on the runtime model that made each prediction. The rule, fixed
before any projection is made (`timeline.error_band`'s module docstring states it): a step time's
band is the extremes of the errors of every real row of *the same runtime model* (schedule, the
kit's class that charges it and its backend, resolved parameters, contention, overheads, ranks per
node: `runtime`, known before anything is simulated) on the same fabric; a ratio is decided on the
worst case of its terms' bands. A term whose runtime model or fabric no table measured leaves the
claim inconclusive, "not covered", with that reason (the nearest measurement and how it differs),
known before the projection (`register`: a precheck). The band is named in the row's test.

A projected claim's threshold is the paper's (its number quoted in the test's source) or its null
(no difference); its interval's width is the band's, so it needs no pilot.

Where a notebook's runs span the paper's setting (`verdicts.setting`: its workers on its nodes over
the real network between them), the same registered test decides the claim from the run's own
measurement instead (`register`'s `at_setting`; `decide_at_setting` on the median of per-period
ratios, e.g. `period_ratios` of two runs' step times).

The simulator's bound against this machine's own measured step times (`timeline.validate.
RESOLUTION`, 15%) decides no projected claim.

A projection is stored once made (`project`, `simulate_case`: `stored`): the simulator is
deterministic, so the same code (`provenance.code_version`) on the same inputs reads it back from
`projections_dir()` instead of simulating again, as a finished run of the same code is reused. Two
processes that ask for the same projection at once (two notebooks, two test suites) make it once:
the second waits on the first's lock and reads what it stored.
"""
from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence, TypeVar

import pandas as pd
from filelock import FileLock

from .claims import PROJECTED_PREFIX, Claims, Test, interval_or_nan, is_projected, median_interval
from .setting import AT_SETTING, PaperSetting
from .. import files
from ..paths import results_root
from ..training.provenance import code_version
from ..comm.netmodel import NCCL, parse_net
from ..systems.layer_profile import Profile
from ..systems.timeline.simulator import Prediction, RuntimeModel, runtime_model, simulate
from ..systems.timeline.error_band import RatioBand, Term, Uncovered, ratio_band
from ..systems.timeline.sweep import find_profile, sweep
from ..systems.timeline.topology import Topology
from ..training.results import Result


def register(claims: Claims, id: str, claim: str, paper: str, quantity: str, side: str, threshold: float,
             form: str, source: str, numerator: Sequence[Term], denominator: Sequence[Term],
             at_setting: tuple[PaperSetting, str, bool] | None = None) -> RatioBand | None:
    """Register projected claim `id` (`Claims.register`) with its `Test(quantity, side, threshold,
    statistic, form, source)`, whose statistic names its band (`ratio_band` of the (runtime model,
    net) terms whose step times make the ratio, each from `runtime`), before the projection; where a
    term is not covered, mark the claim inconclusive by that precheck and return None. The band goes
    to `decide`. `at_setting` (setting, statistic, reachable): the claim is measured instead where the
    notebook's runs span that paper's setting (`verdicts.setting`; `decide_at_setting`, the run's own
    interval by that statistic), which the test's statistic states; the precheck then applies only
    where the allocation cannot span it (`reachable` False)."""
    if not is_projected(id):
        raise ValueError(f"projected claim {id!r}: its id starts with {PROJECTED_PREFIX!r} (counted apart from measured ones)")
    try:
        band, uncovered = ratio_band(numerator, denominator), ""
        stat = f"{BAND_STAT}: {band.describe().split(': ', 1)[1]}"
    except Uncovered as exc:
        band, uncovered = None, str(exc)
        stat = f"{BAND_STAT}; none covers it"
    if at_setting is not None:
        setting, measured_stat, _ = at_setting
        stat += f"; {AT_SETTING} instead where this notebook's runs span it ({setting.describe()}): {measured_stat}"
    claims.register(id, claim, paper, Test(quantity, side, threshold, stat, form=form, source=source))
    if band is None and (at_setting is None or not at_setting[2]):
        claims.precheck(id, NOT_COVERED + uncovered)
    return band


NOT_COVERED = "not covered: no real-cluster measurement of this runtime model: "


BAND_STAT = ("deterministic projection, decided within the simulator's error measured on real clusters (the "
             "survey's and the public tables') for the same runtime model on the same fabric")


def topology(net: str, gpus_per_node: int = 1, intra: str = "") -> Topology:
    """The topology of a projection on `net` (the inter-node link) with nodes of `gpus_per_node`
    ranks over `intra`, NCCL's collectives (the GPU cluster of a paper; as `project`'s sweep builds it)."""
    return Topology(gpus_per_node, parse_net(intra) if intra else parse_net(net), parse_net(net), backend=NCCL)


def runtime(case: dict[str, Any], net: str, gpus_per_node: int = 1, intra: str = "") -> RuntimeModel:
    """The runtime model `project` and `simulate_case` run for a labelled case (dict: algo,
    optional params) on `net` (`simulate.runtime_model`), known before anything is simulated: the
    key of its measured error band (`register`'s terms)."""
    return runtime_model(case["algo"], case.get("params"), topology(net, gpus_per_node, intra))


def load_profile(model: str, device: str, batch_size: int | None = None) -> Profile:
    """The committed profile of `model` on `device` (e.g. "V100-fp32"), with `batch_size` if
    several exist: reproduce/layer_profiles/<device>/<model>_b<batch>.csv."""
    return Profile.from_csv(find_profile(model, device, batch_size))


def describe(profile: Profile, nproc: int, net: str, gpus_per_node: int = 1, intra: str = "") -> str:
    """The label every projected number carries: profile (device, source, calibration), worker
    count and network, e.g. "projection: resnet50 b64 on V100-fp32 (flops-scaled), 64 workers,
    16 nodes x 4 (PCIe3 inside, 10GbE between)"."""
    where = (f"{nproc // gpus_per_node} nodes x {gpus_per_node} ({intra} inside, {net} between)"
             if gpus_per_node > 1 else f"{net} ring")
    return (f"projection: {profile.model} b{profile.batch_size} on {profile.device} ({profile.source}), "
            f"{nproc} workers, {where}")


PROJECTIONS_ENV = "DISTSGD_PROJECTIONS"


def projections_dir() -> Path:
    """Where projections are stored (`project`): $DISTSGD_PROJECTIONS, else <results root>/projections."""
    env = os.environ.get(PROJECTIONS_ENV)
    return Path(env) if env else results_root() / "projections"


def project(profile: Profile, cases: Iterable[dict[str, Any]], nprocs: Iterable[int], nets: Iterable[str],
            gpus_per_node: int = 1, intra: str = "") -> pd.DataFrame:
    """`timeline.sweep` over labelled cases (dicts: algo, optional params and label, as the
    benchmark's cases): one row per (label, nproc, net) with the sweep's columns (step_s, compute_s,
    exposed_comm_s, throughput, ...) plus `label` and `efficiency` = compute_s / step_s. Read back
    from `projections_dir()` where the same code projected the same inputs before (`stored`)."""
    cases, nprocs, nets = list(cases), list(nprocs), list(nets)
    return stored(profile, ("sweep", cases, nprocs, nets, gpus_per_node, intra),
                  lambda: _project(profile, cases, nprocs, nets, gpus_per_node, intra))


T = TypeVar("T")


def stored(profile: Profile, inputs: tuple[Any, ...], simulate_them: Callable[[], T]) -> T:
    """What `simulate_them` returns for `profile` and `inputs` (the arguments it simulates), made
    once per code version (`provenance.code_version`): read back from `projections_dir()` where this
    code made it before, else simulated and stored (module doc). A committed file the simulator reads
    (a host's costs) is not in the key: one that changes without the library's code needs the store
    emptied."""
    key = repr((code_version(), profile, *inputs))
    path = projections_dir() / f"{profile.model}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pkl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(path.with_suffix(".lock")):                # one maker per key; the others wait and read
        if path.is_file():
            return pickle.loads(path.read_bytes())
        out = simulate_them()
        files.write_bytes_atomic(path, pickle.dumps(out))   # the kit's own store, read by no one else
    return out


def _project(profile: Profile, cases: list[dict[str, Any]], nprocs: list[int], nets: list[str],
             gpus_per_node: int, intra: str) -> pd.DataFrame:
    frames = []
    for case in cases:
        df = sweep(profile, [case["algo"]], nprocs, nets, params=case.get("params"),
                   gpus_per_node=gpus_per_node, intra=intra, profile_name=f"{profile.model} on {profile.device}")
        df.insert(0, "label", case.get("label", case["algo"]))
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out["efficiency"] = out.compute_s / out.step_s
    return out


def decide(claims: Claims, id: str, ratio: float, label: str, band: RatioBand | None, detail: str = "") -> str:
    """Decide projected claim `id` on `ratio` within `band` (`register`'s; None: no measurement
    covers it, and it is inconclusive by that precheck, made here if `register` left it to the run);
    `label` is `describe`'s text, `detail` the numbers a reader needs. Returns the verdict."""
    if band is None and not claims.claims[id].precheck:
        claims.precheck(id, NOT_COVERED + "and this notebook's runs did not span the paper's setting")
    low, high = band.interval(ratio) if band is not None else (ratio, ratio)
    where = band.describe() if band is not None else "no measured error covers it"
    measured = f"{label}; ratio {ratio:.3f}; {where}"
    return claims.decide(id, low, high, ratio, measured + (f"; {detail}" if detail else ""))


def period_ratios(numerator: Result, denominator: Result, after: int = 0) -> pd.Series:
    """Per logged period that both runs logged (`Result.step_seconds` of the periods ending after
    step `after`), `numerator`'s seconds per step over `denominator`'s: a step-time ratio measured
    at the paper's setting, one value per period (`decide_at_setting`)."""
    return (numerator.step_seconds(after) / denominator.step_seconds(after)).dropna()


def decide_at_setting(claims: Claims, id: str, ratios: pd.Series, spanned: str, detail: str = "",
                      unit: str = "logged periods") -> str:
    """Decide claim `id`, registered with `register(..., at_setting=...)`, by the run's own
    measurement at the paper's setting: `ratios`, one per logged period (e.g. `period_ratios`) or
    per benchmark round (`unit` names which), their median and its distribution-free 95% interval
    (`claims.median_interval`); `spanned` says which runs spanned the setting (`PaperSetting.
    spanned_by`, `spanned_by_benchmark`). Its measured text starts with `setting.AT_SETTING` and
    ends with the number of `unit`. Returns the verdict."""
    low, high = interval_or_nan(median_interval, ratios)
    estimate = float(ratios.median())
    return claims.decide(id, low, high, estimate, f"{AT_SETTING} ({spanned}); ratio {estimate:.3f}"
                         + (f"; {detail}" if detail else "") + f"; {len(ratios)} {unit}")


def simulate_case(profile: Profile, case: dict[str, Any], nproc: int, net: str, gpus_per_node: int = 1,
                  intra: str = "") -> Prediction:
    """The simulator's `Prediction` of one labelled case (dict: algo, optional params and label) at
    `nproc` workers on `net` (inter-node link; `intra` inside nodes of `gpus_per_node`), labelled
    with `describe`; e.g. for what a table row lacks (a tuned DeAR's trials, `Prediction.tuning`).
    Read back where this code simulated it before (`stored`)."""
    return stored(profile, ("case", case, nproc, net, gpus_per_node, intra), lambda: simulate(
        profile, case["algo"], nproc, params=case.get("params"), topology=topology(net, gpus_per_node, intra),
        label=f"{case.get('label', case['algo'])}, {describe(profile, nproc, net, gpus_per_node, intra)}"))


def write_trace(path: str | Path, profile: Profile, case: dict[str, Any], nproc: int, net: str,
                gpus_per_node: int = 1, intra: str = "", iterations: int = 1) -> Path:
    """The Chrome trace (Perfetto, chrome://tracing) of one labelled case (`simulate_case`), cut to
    `iterations` steady-state iterations (the first of the simulator's measured window, plus the
    collectives those iterations issued), so that it stays small."""
    pred = simulate_case(profile, case, nproc, net, gpus_per_node, intra)
    first = pred.window[0]
    pred.events = [e for e in pred.events if first <= e.step < first + iterations]
    return pred.to_chrome_trace(path)


def write_profile_note(path: str | Path, profile: Profile) -> Path:
    """A one-line note of which profile a notebook's projection used (beside its figures)."""
    path = Path(path)
    path.write_text(f"{profile.model} b{profile.batch_size} {profile.input_shape} on {profile.device} "
                    f"({profile.source}): {profile.machine}\n")
    return path


def size_stats(sizes: Iterable[int]) -> dict[str, float]:
    """Statistics of a model's gradient tensors (bytes each): the number of tensors, gradient MB,
    mean and largest tensor MB (MB = 2**20 bytes). Known before anything is timed, e.g. from
    `bench_schedules.grad_tensor_bytes`."""
    sizes = list(sizes)
    mb = 2**20
    return {"tensors": len(sizes), "grad_mb": sum(sizes) / mb, "mean_tensor_mb": sum(sizes) / len(sizes) / mb,
            "largest_tensor_mb": max(sizes) / mb}


def tensor_stats(profile: Profile) -> dict[str, float]:
    """A profile's gradient-tensor statistics (`size_stats`), known before any step time is
    projected, and the intensity I = C/D (compute seconds per gradient byte of one iteration, in
    ms per MB)."""
    stats = size_stats(profile.tensor_bytes)
    return {**stats, "intensity_ms_per_mb": 1e3 * profile.compute_s / stats["grad_mb"]}

"""Projected claims: a paper's timing claim decided at the paper's own scale by the timeline
simulator (`distsgd.timeline`) on a committed layer profile of the paper's model on the paper's
GPU (`reproduce/layer_profiles/`, FLOP-scaled and calibrated as `distsgd.profiling` documents;
why a CPU profile cannot stand in: /work/shared/papers/SCALE.md, summarised in docs/simulator.md).

A projection is deterministic (committed profile, closed-form timeline), so its "interval" does
not come from repeats. It comes from the accuracy the simulator is to hold against measured step
times, `RESOLUTION` (15%, checked pair by pair by tests/test_timeline_validation.py, `make
validate`; on this machine not yet met by every schedule: docs/validation.md). The rule, fixed before any
projection is made, is that a projected ratio r of two step times (or of two gains) is decided on
the interval

    [r / (1 + RESOLUTION), r * (1 + RESOLUTION)]

so a ratio within 15% of its threshold is inconclusive. A projection is labelled with its profile
and network (`describe`), and stands beside the small-scale measurement, never replacing it.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from .claims import Claims
from .comm.netmodel import parse_net
from .layer_profile import Profile
from .algorithms.dear import fusion_counts
from .algorithms.tuner import GridTuner
from .timeline.simulate import Prediction, simulate
from .timeline.sweep import find_profile, sweep
from .timeline.topology import Topology

RESOLUTION = 0.15   # the simulator's target bound on a step time (tests/test_timeline_validation.py)


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


def project(profile: Profile, cases: Iterable[dict[str, Any]], nprocs: Iterable[int], nets: Iterable[str],
            gpus_per_node: int = 1, intra: str = "") -> pd.DataFrame:
    """`timeline.sweep` over labelled cases (dicts: algo, optional params and label, as the
    benchmark's cases): one row per (label, nproc, net) with the sweep's columns (step_s, compute_s,
    exposed_comm_s, throughput, ...) plus `label` and `efficiency` = compute_s / step_s."""
    frames = []
    for case in cases:
        df = sweep(profile, [case["algo"]], list(nprocs), list(nets), params=case.get("params"),
                   gpus_per_node=gpus_per_node, intra=intra, profile_name=f"{profile.model} on {profile.device}")
        df.insert(0, "label", case.get("label", case["algo"]))
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out["efficiency"] = out.compute_s / out.step_s
    return out


def interval(ratio: float, resolution: float = RESOLUTION) -> tuple[float, float]:
    """The decision interval of a projected ratio (module docstring), low <= high."""
    a, b = ratio / (1 + resolution), ratio * (1 + resolution)
    return min(a, b), max(a, b)


def decide(claims: Claims, id: str, ratio: float, label: str, detail: str = "",
           resolution: float = RESOLUTION) -> str:
    """Decide projected claim `id` on `ratio` with the fixed resolution; `label` is `describe`'s
    text, `detail` the numbers a reader needs. Returns the verdict."""
    low, high = interval(ratio, resolution)
    measured = f"{label}; ratio {ratio:.3f}, ±{resolution:.0%} simulator resolution"
    return claims.decide(id, low, high, ratio, measured + (f"; {detail}" if detail else ""))


def simulate_case(profile: Profile, case: dict[str, Any], nproc: int, net: str, gpus_per_node: int = 1,
                  intra: str = "") -> Prediction:
    """The simulator's `Prediction` of one labelled case (dict: algo, optional params and label) at
    `nproc` workers on `net` (inter-node link; `intra` inside nodes of `gpus_per_node`), labelled
    with `describe`; e.g. for what a table row lacks (a tuned DeAR's trials, `Prediction.tuning`)."""
    topo = Topology(gpus_per_node, parse_net(intra) if intra else parse_net(net), parse_net(net))
    return simulate(profile, case["algo"], nproc, params=case.get("params"), topology=topo,
                    label=f"{case.get('label', case['algo'])}, {describe(profile, nproc, net, gpus_per_node, intra)}")


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



def grid_twins(profile: Profile, threshold_mb: float, low: float, high: float, trials: int) -> list[float]:
    """The thresholds of DeAR's tuner grid (`GridTuner(low, high, trials)`) whose fusion groups on
    `profile` are those of `threshold_mb` (`dear.fusion_counts`, group by size). Known before any
    step time: if there is one, "tuned at least as fast as threshold_mb" holds by construction
    (the tuner keeps the fastest grid point), an identity, not a claim that can fail."""
    forward = [layer.grad_bytes for layer in reversed(profile.layers)]
    fixed = fusion_counts(forward, threshold_mb * 2**20, 1)
    return [x for x in GridTuner(low, high, trials).candidates if fusion_counts(forward, x * 2**20, 1) == fixed]

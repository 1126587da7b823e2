"""The simulator against measured runs: predicted vs measured step time of the same cases.

Measured: the schedule benchmark (`distsgd.systems.benchmark`) times every case (the S-SGD
schedules, PS (+ partition), DDP, DeAR and the local-update algorithms it can run) on p ranks
over emulated networks, median of its repeats, and the compute-only step time of that p.
Predicted: `timeline.simulate` on a layer profile of the same model, input shape and batch,
scaled (`Profile.scaled`) so that its compute equals the measured compute-only step time of that
p (all p ranks busy: on this machine ranks share cores, so a single process's profile is too
fast), over exactly the network string the benchmark used (the same `NetModel`). Only the
networks that pass `bench_schedules.emulation_headroom` are compared (decided before any
prediction): elsewhere the real loopback collective, not the model, sets the measured time. And
only p <= this machine's cores (`os.cpu_count()`, known before anything runs) is validation: with
more ranks than cores, a rank blocked in an emulated (sleeping) collective hands its core to
another rank, so the measured step no longer tells hidden from blocked communication, which is
what the schedules differ in. Those pairs are measured, predicted and reported, not asserted.

What is predicted is what the benchmark times (`bench_schedules.time_case`): `warmup` untimed
steps, then `steps` timed ones and the algorithm's `finalize`, which waits for every collective
still in flight (CoCoD-SGD's last average, SSD-SGD's pushes, DeAR's all-gathers) — the seconds
from the first timed step's start to the link's last ready time (or the compute stream's end),
divided by `steps` (`window_step`). With a short window this is not the steady state
(`simulate`'s step_s): a period whose average overlaps the next period shows its drain.

Per-call overheads (`timeline.costs`: the issue cost per collective and the copy passes, on
the compute stream) are measured by `measure_costs.measure()` at the start of `validate`, before the
benchmark, and charged by the same rule in every case; the table keeps the plain prediction
(`predicted_plain_s`) beside it.

The rule is fixed in advance and the same for every case: no per-schedule knob. Residual =
predicted / measured - 1; `RESOLUTION` (15%) is the bound the validation test asserts on every
pair (tests/test_timeline_validation.py, `make validate`). It decides no projected claim: those are
decided within the simulator's error measured on a real cluster (`distsgd.verdicts.projection`).
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

import pandas as pd

from .. import benchmark as bs
from ...training.caps import Caps
from ...comm.netmodel import NetModel
from ..layer_profile import Profile
from ...paths import repo_root
from ..cases import DEFAULT_CASES, KAVG_CASE, LOCAL_CASES
from ..measure_costs import measure, work_passes
from .costs import NONE, Overheads, for_profile, gpu_overheads
from .simulator import simulate
from .sweep import PROFILE_DIR
from .topology import Topology

# A network whose modeled all-reduce of the whole gradient is 4x the compute (bandwidth term) with
# the 10GbE-like latency share: communication dominates, so the emulation has headroom here.
NETWORKS = {"comm-bound (4x)": (4.0, 0.015)}
COLUMNS = ["model", "label", "algo", "nproc", "net_name", "net", "compute_s", "measured_s", "predicted_s",
           "residual", "repeats"]
RESOLUTION = 0.15   # the simulator's target bound on this machine's step times (module doc)


def cases_for(p: int) -> list[dict[str, Any]]:
    """Every validated case at p ranks (KAVG with 2 groups needs p >= 4, even)."""
    return DEFAULT_CASES + LOCAL_CASES + ([KAVG_CASE] if p >= 4 and p % 2 == 0 else [])


def committed_profile(model: str, batch_size: int, input_shape: tuple[int, ...], device: str = "cpu") -> Profile | None:
    """The committed profile (reproduce/layer_profiles/<device>/) of exactly this model, batch
    and input shape, or None."""
    folder = repo_root(Path(__file__).parent) / PROFILE_DIR / device
    for path in sorted(folder.glob(f"{model}_b{batch_size}*.csv")):
        profile = Profile.from_csv(path)
        if profile.model == model and profile.batch_size == batch_size and tuple(profile.input_shape) == tuple(input_shape):
            return profile
    return None


def layer_profile(model: str, batch_size: int, input_shape: tuple[int, ...], device: str = "cpu") -> Profile:
    """A layer profile of the benchmark's `model` at this batch and shape on `device`: the
    committed one if it exists (cpu), else measured now (`profiler.measure`, 1 thread on cpu as
    the benchmark's ranks run, the benchmark's model options)."""
    found = committed_profile(model, batch_size, input_shape, device) if device == "cpu" else None
    if found is not None:
        return found
    from ..profiler import measure
    return measure(model, tuple(input_shape), batch_size, device=device, reps=5, warmup=2,
                   threads=1 if device == "cpu" else None, options=bs.MODEL_OPTIONS.get(model, {})).profile


def window_step(profile: Profile, algo: str, nproc: int, net: NetModel | str, params: dict[str, Any] | None,
                warmup: int, steps: int, overheads: Overheads | None = None) -> float:
    """Seconds per timed step of the benchmark's window (module docstring): `warmup` iterations,
    then `steps` iterations and a drain of every collective in flight, divided by `steps`."""
    from ...algorithms.registry import REGISTRY
    from .simulator import resolve_network, stepper
    from .streams import Rank
    rank = Rank(resolve_network(net, None), nproc, overheads if overheads is not None else for_profile(profile))
    run, _, _ = stepper(profile, algo, rank, REGISTRY[algo].resolve_params(dict(params or {})))
    run.steps(0, warmup)
    t0 = rank.t
    run.steps(warmup, steps)
    return (max([rank.t, *rank.free.values()]) - t0) / steps


def predict(bench: pd.DataFrame, profiles: dict[str, Profile], cases: Iterable[dict[str, Any]] | None = None,
            networks: dict[tuple[int, str], NetModel] | None = None, warmup: int | None = None,
            steps: int | None = None, overheads: Overheads | None = None, scale: bool = True) -> pd.DataFrame:
    """Predicted vs measured step time of every (model, label, nproc, network) of a
    `bench_schedules` result (`COLUMNS`): measured = median over repeats; predicted =
    `simulate` on `profiles[model]` scaled to that (model, p)'s measured compute-only step time,
    on the benchmark's own --net string, with the case's algorithm and parameters. `networks`
    maps (p, net_name) to the NetModel to simulate instead (a network without emulation, e.g.
    NCCL's own, fitted from its measured collective times: `comm.nccl_tests.fit_collective_times`).
    With `warmup` and `steps` (the benchmark's), the prediction is of its timed window
    (`window_step`); without, the steady state (`simulate`). `overheads`: the per-call costs
    charged on the compute stream (`timeline.costs`; None: none). `scale` False: the profile's
    own compute, not scaled to the measured one (a profile taken where the benchmark ran: the GPU
    check, `validate_gpu`)."""
    params = {c.get("label", c["algo"]): c.get("params", {}) for c in (cases or [])}
    timed = bench[bench.algo != "compute"]
    rows = []
    for (model, label, p, net_name), g in timed.groupby(["model", "label", "nproc", "net_name"], sort=False):
        algo, net = g.algo.iloc[0], g.net.iloc[0]
        case_params = params.get(label, _params(g.params.iloc[0]))
        compute = float(g.compute_s.iloc[0])
        model_net = (networks or {}).get((int(p), net_name)) or net
        scaled = profiles[model].scaled(compute) if scale else profiles[model]
        predicted = (window_step(scaled, algo, int(p), model_net, case_params, warmup, steps, overheads) if steps
                     else simulate(scaled, algo, int(p), net=model_net, params=case_params,
                                   overheads=overheads).step_s)
        measured = float(g.step_s.median())
        rows.append(dict(model=model, label=label, algo=algo, nproc=int(p), net_name=net_name, net=net,
                         compute_s=compute, measured_s=measured, predicted_s=predicted,
                         residual=predicted / measured - 1, repeats=len(g)))
    return pd.DataFrame(rows, columns=COLUMNS)


def _params(text: Any) -> dict[str, Any]:
    import ast
    return ast.literal_eval(text) if isinstance(text, str) and text else dict(text or {})


def validate(models: Iterable[str] = ("mlp",), nprocs: Iterable[int] = (2, 4),
             networks: dict[str, tuple[float, float]] | None = None, batch_size: int = 16, steps: int = 32,
             warmup: int = 8, repeats: int = 5, headroom_reps: int = 3, caps: Caps | None = None,
             overheads: Overheads | str | None = "measure"
             ) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Measure the per-call overheads ("measure": `measure_costs.measure()` now, at the start, before
    the benchmark; or given; None: none), run the benchmark on every case of `cases_for(p)`,
    run the benchmark on every case of `cases_for(p)`, decide which networks are emulable here
    (`emulation_headroom`, before predicting), predict every pair with those overheads. Returns
    (table, bench, headroom): the table (`COLUMNS` + `emulable`, `predicted_plain_s`: without
    overheads, the load average at the start and end, the overheads used, `cores`) has every pair;
    the validated ones (`validated`) are those with emulable true and no more ranks than this
    machine's cores (module docstring); `table.attrs["overheads"]` holds the overheads."""
    caps = Caps.from_env() if caps is None else caps
    networks = dict(networks or NETWORKS)
    load_start = os.getloadavg()[0]
    models = list(models)
    if isinstance(overheads, str):
        overheads = measure(model=models[0], batch_size=batch_size, nprocs=tuple(sorted(set(nprocs))))
    frames = []
    for p in sorted(set(nprocs)):
        frames.append(bs.bench_schedules(models=models, cases=cases_for(p), nprocs=[p], networks=networks,
                                         batch_size=batch_size, steps=steps, warmup=warmup,
                                         repeats=repeats, caps=caps))
    bench = pd.concat(frames, ignore_index=True)
    headroom = bs.emulation_headroom(bench, reps=headroom_reps)
    batch = int(bench.batch_size.iloc[0])
    profiles = {m: layer_profile(m, batch, bs.input_shape(m, caps)) for m in bench.model.unique()}
    cases = [c for p in nprocs for c in cases_for(p)]
    table = predict(bench, profiles, cases, warmup=warmup, steps=steps, overheads=overheads)
    table["predicted_plain_s"] = predict(bench, profiles, cases, warmup=warmup, steps=steps).predicted_s
    table.attrs["overheads"] = overheads or NONE
    table["load_start"], table["load_end"] = load_start, os.getloadavg()[0]
    table["issue_s"], table["copy_Bps"] = table.attrs["overheads"].issue_s, table.attrs["overheads"].copy_Bps
    ov = table.attrs["overheads"]
    for name in work_passes():
        table[name] = ov.work.get(name)
    table["transfer"] = "; ".join(f"p={q}: {m.bandwidth_Bps / 1e9:.2f} GB/s, {1e6 * m.latency_s:.0f} us"
                                  for q, m in sorted(ov.transfer.items()))
    ok = headroom.set_index(["model", "nproc", "net_name"]).emulable
    table["emulable"] = [bool(ok.get((m, p, n), False)) for m, p, n in zip(table.model, table.nproc, table.net_name)]
    table["cores"] = os.cpu_count() or 1
    table["validated"] = table.emulable & (table.nproc <= table.cores)
    return table, bench, headroom


def compute_step(profile: Profile, overheads: Overheads, steps: int = 8) -> float:
    """Seconds per step of the profile's compute alone (forward, backward, update of every layer)
    on a rank with `overheads`: on a GPU host, the device's time or the host's, whichever paces."""
    from .streams import Rank
    rank = Rank(Topology.flat(NetModel(bandwidth_Bps=1e12, latency_s=0.0)), 1, overheads)
    for _ in range(steps):
        for phase in ("forward_s", "backward_s", "update_s"):
            for layer in profile.layers:
                rank.compute(phase, getattr(layer, phase))
    return rank.t / steps


def predict_gpu(bench: pd.DataFrame, profiles: dict[str, Profile], calls: pd.DataFrame, host: pd.DataFrame,
                warmup: int, steps: int) -> pd.DataFrame:
    """The GPU check's predictions (`validate_gpu`): per model, the profile scaled to the device's own
    step time (`host.device_s`: a profile timed by events on a host-bound device also holds the
    host's gaps) on a GPU host with that model's `gpu_overheads`; the first row per model (label
    "compute") is the compute-only step. `predicted_plain_s`: the unscaled profile without host
    costs (the rule before issue 33 item 2)."""
    any_net = {(1, bs.REAL): NetModel(bandwidth_Bps=1e12, latency_s=0.0)}   # p = 1: nothing is sent
    measured_compute = bench[bench.algo == "compute"].groupby("model").step_s.median()
    frames = []
    for model, h in host.set_index("model").iterrows():
        ov = gpu_overheads(calls, h)
        device = profiles[model].scaled(float(h["device_s"]))
        mine = bench[bench.model == model]
        table = predict(mine, {model: device}, cases_for(1), networks=any_net, warmup=warmup, steps=steps, scale=False,
                        overheads=ov)
        table["predicted_plain_s"] = predict(mine, profiles, cases_for(1), networks=any_net, warmup=warmup, steps=steps,
                                             scale=False, overheads=NONE).predicted_s.values
        compute = float(measured_compute[model])
        first = pd.DataFrame([dict(model=model, label="compute", algo="compute", nproc=1, net_name="none", net="",
                                   compute_s=compute, measured_s=compute, predicted_s=compute_step(device, ov),
                                   predicted_plain_s=profiles[model].compute_s, repeats=int((mine.algo == "compute").sum()))])
        table = pd.concat([first, table], ignore_index=True)
        table["residual"] = table.predicted_s / table.measured_s - 1
        table["issue_s"], table["host_share"], table["device_s"] = ov.issue_s, ov.host_share, float(h["device_s"])
        frames.append(table)
    return pd.concat(frames, ignore_index=True)


def host_table(models: Iterable[str], batch_size: int, device: str = "cuda") -> pd.DataFrame:
    """`profiler.host_and_device` of each benchmark model (its shape and options) at `batch_size`,
    one row per model, with the device's name: the GPU check's `gpu_host.csv`."""
    import torch

    from ..profiler import host_and_device
    rows = [dict(model=m, batch_size=batch_size,
                 **host_and_device(m, bs.input_shape(m, Caps()), batch_size, device=device,
                                   options=bs.MODEL_OPTIONS.get(m, {})))
            for m in models]
    return pd.DataFrame(rows).assign(device=torch.cuda.get_device_name(0) if device == "cuda" else "cpu")


def validate_gpu(models: Iterable[str] = ("resnet50", "bert_base"), batch_size: int = 32, steps: int = 32,
                 warmup: int = 8, repeats: int = 3, calls: pd.DataFrame | None = None,
                 host: pd.DataFrame | None = None, device: str = "cuda"
                 ) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, Any]]:
    """The check on one GPU (issues 17 and 33): p = 1 on NCCL, no emulation. The per-call costs
    (`calls`: `measure_costs.measure_gpu_calls`) and each model's host and device time (`host`:
    `profiler.host_and_device`) are measured first unless given; each model's layer profile is
    measured now on this GPU (`profiler.measure`, 10 rounds after 3 warm-up, the benchmark's model
    options, shape and batch); the benchmark times every case of `cases_for(1)` on one NCCL rank;
    the prediction is `predict_gpu`'s. Reported, not asserted. Returns (table, bench, {"profiles":
    {model: Profile}, "references": {model: (un-hooked, hooked forward + backward seconds of the
    profile's own call)}, "calls": calls, "host": host}). `device` "cpu" (gloo) runs the same steps
    on the CPU, where host and device are one: the check of the check, not a GPU result."""
    import torch

    from ..profiler import measure
    from ..measure_costs import measure_gpu_calls
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("validate_gpu needs a CUDA GPU")
    models, cases = list(models), cases_for(1)
    if calls is None:
        calls = measure_gpu_calls(device=device)
    if host is None:
        host = host_table(models, batch_size, device)
    bench = bs.bench_schedules(models=models, cases=cases, nprocs=[1], networks={bs.REAL: None},
                               batch_size=batch_size, steps=steps, warmup=warmup, repeats=repeats,
                               backend="nccl" if device == "cuda" else "gloo", caps=Caps())
    profiles, refs = {}, {}
    for m in models:
        got = measure(m, bs.input_shape(m, Caps()), batch_size, device=device, reps=10, warmup=3,
                      options=bs.MODEL_OPTIONS.get(m, {}))
        profiles[m], refs[m] = got.profile, (got.unhooked_s, got.hooked_s)
    table = predict_gpu(bench, profiles, calls, host, warmup, steps)
    table["device"] = torch.cuda.get_device_name(0) if device == "cuda" else "cpu"
    table["validated"] = False
    return table, bench, {"profiles": profiles, "references": refs, "calls": calls, "host": host}


def save(table: pd.DataFrame, path: Path) -> Path:
    """Write a `validate` table (every pair, the load average at its start and end, the overheads
    used) to the CSV `path` atomically, with this machine's name and the date (`make validate`
    writes figures/10_systems_benchmark/timeline_validation.csv, which notebook 10 draws)."""
    import datetime

    from ..profiler import cpu_name
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    table.assign(machine=cpu_name(),
                 date=datetime.date.today().isoformat()).to_csv(tmp, index=False)
    tmp.replace(path)
    return path


def plot(table: pd.DataFrame, path: Path, title: str = "simulator vs benchmark", label: str = "validated") -> Path:
    """Simulated against measured step time of every pair (log-log), the ±`RESOLUTION` band around
    the diagonal; pairs not validated here (`validated` false: not emulable, or p > cores) hollow.
    `label`: the legend of the solid points (a table without `validated` or `emulable` has only those)."""
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(5.5, 5))
    col = "validated" if "validated" in table else "emulable"
    validated = table[col] if col in table else pd.Series(True, index=table.index)
    for ok, g in table.groupby(validated):
        ax.scatter(1e3 * g.measured_s, 1e3 * g.predicted_s,
                   label=label if ok else "not validated here (not emulable, or p > cores)",
                   facecolors=None if ok else "none", edgecolors="C0" if ok else "C1")
    lim = np.array([0.5e3 * min(table.measured_s.min(), table.predicted_s.min()),
                    2e3 * max(table.measured_s.max(), table.predicted_s.max())])
    ax.plot(lim, lim, "k-", lw=0.8)
    ax.fill_between(lim, lim / (1 + RESOLUTION), lim * (1 + RESOLUTION), color="grey", alpha=0.2,
                    label=f"±{RESOLUTION:.0%}")
    ax.set(xscale="log", yscale="log", xlabel="measured step (ms)", ylabel="simulated step (ms)", title=title)
    ax.legend()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Max and median |residual| per schedule and p (docs/validation.md's table)."""
    t = table.assign(abs_residual=table.residual.abs())
    return (t.groupby(["label", "nproc"]).abs_residual.agg(["max", "median"]).unstack("nproc"))


def report(table: pd.DataFrame, bound: float) -> str:
    """Every pair, one line each, marked where |residual| > bound (with `predicted_plain_s`: the
    residual without overheads too, unjudged)."""
    plain = "predicted_plain_s" in table
    lines = [f"{'model':12} {'schedule':16} {'p':>2} {'network':18} {'measured':>10} {'predicted':>10} {'residual':>9}"
             + (f" {'plain':>9}" if plain else "")]
    for r in table.itertuples():
        flag = "" if abs(r.residual) <= bound else f"  > {bound:.0%}"
        lines.append(f"{r.model:12} {r.label:16} {r.nproc:>2} {r.net_name:18} {1e3 * r.measured_s:8.2f}ms "
                     f"{1e3 * r.predicted_s:8.2f}ms {r.residual:+9.1%}"
                     + (f" {r.predicted_plain_s / r.measured_s - 1:+9.1%}" if plain else "") + flag
                     + ("" if getattr(r, "emulable", True) else "  (not emulable)")
                     + ("  (p > cores: reported, not validated)"
                        if getattr(r, "emulable", True) and not getattr(r, "validated", True) else ""))
    return "\n".join(lines)

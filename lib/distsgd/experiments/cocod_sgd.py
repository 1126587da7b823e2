"""Notebook 01 (CoCoD-SGD, Shen et al., IJCAI 2019): its claims' registration (measured and projected
to the paper's scale), the network sweep derived from the measured compute time, its tables (step
times beside their arithmetic, time to a target), the paired seeds of the per-iteration claim, the
interleaved pairs of the hidden-communication claim and its control, the heterogeneous-workers
invariant, the projection and the decisions."""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import torch

from ..verdicts import plots, projection
from ..algorithms.cocod_sgd import proportional_batches
from ..verdicts.analysis import first_reaching
from ..verdicts.claims import Claims, Test, interval_or_nan, median_interval, paired_interval
from ..comm import parse_net
from ..systems.layer_profile import Profile
from ..training.results import Result
from ..training.runner import run
from ..systems.timeline.error_band import RatioBand
from ..training.allocation import Allocation
from ..verdicts.setting import PaperSetting

# the paper's setting (SPECS.md a, its abstract), fixed here before the projection; not parameters of the notebook
PROJ_DEVICE, PROJ_BATCH, PROJ_NPROC = "GTX1080Ti-fp32", 128, 16
PROJ_MODELS = {"resnet18": "", "vgg16": "_vgg16"}      # model -> claim id suffix
PROJ_NET = "10GbE"                                      # [assumption]: the paper's network is not in the text we have
PAPER_NODES = 2          # [assumption]: the paper's layout is not in the text we have; its 16 workers span machines
AT_SETTING_STAT = ("95% interval of the median over the logged periods (median_interval) of the time-to-target ratio "
                   "of this notebook's three methods on the real network")
NULL_ORDER = "null: no difference, ratio 1 (Fig. 1 orders the methods, it gives no size)"
UP_TO = ("paper: abstract, \"when training ResNet18 and VGG16 with 16 Geforce GTX 1080Ti GPUs, CoCoD-SGD is up to "
         "2-3x faster than traditional synchronous SGD\": the lower end, 2")
# the projected claims: id, claim, the paper's words, the slower and the faster method, threshold of slower / faster,
# the test's form and the threshold's source
PROJ_CLAIMS = (
    ("proj_time_to_target_vs_local", "CoCoD-SGD reaches the target before local SGD",
     "CoCoD fastest (Fig. 1 ordering CoCoD-SGD < local SGD < S-SGD)", "local_sgd", "cocod_sgd", 1.0,
     "superiority", NULL_ORDER),
    ("proj_time_to_target_local_vs_ssgd", "local SGD reaches the target before S-SGD",
     "Fig. 1 ordering CoCoD-SGD < local SGD < S-SGD", "ssgd", "local_sgd", 1.0, "superiority", NULL_ORDER),
    ("proj_time_to_target_vs_ssgd", "CoCoD-SGD reaches the target >= 2x faster than S-SGD", "2-3x (16 GPUs)",
     "ssgd", "cocod_sgd", 2.0, "up-to", UP_TO))
SHORT_NAME = {"ssgd": "S-SGD", "local_sgd": "local SGD", "cocod_sgd": "CoCoD-SGD"}
PROJ_COLUMNS = ["model", "label", "step_s", "compute_s", "comm_s", "exposed_comm_s", "hidden",
                "steps to target (this notebook)", "projected time to target (s)"]


def method_names(period: int) -> dict[str, str]:
    """Each method's label in the tables, by algorithm: S-SGD, local SGD and CoCoD-SGD with `period`."""
    return {"ssgd": "S-SGD", "local_sgd": f"local SGD k={period}", "cocod_sgd": f"CoCoD-SGD k={period}"}


def check_parameters(nproc: int, slow_speed: float, seeds: int) -> list[float]:
    """Check the parameters a run would not reject itself (ValueError) and return the ranks' relative
    speeds in the heterogeneous runs: 1 for every rank but the last, which runs at `slow_speed`."""
    if not (isinstance(slow_speed, (int, float)) and 0 < slow_speed <= 1):
        raise ValueError(f"slow_speed = {slow_speed!r}: must be a number in (0, 1], the last rank's relative speed")
    if not (isinstance(seeds, int) and seeds >= 2):
        raise ValueError(f"seeds = {seeds!r}: must be an integer >= 2 (paired seeds of the per-iteration claim)")
    return [1.0] * (nproc - 1) + [float(slow_speed)]


PILOT_WHERE = "reproduce/pilots/<profile>/01_cocod_sgd/T/claims.csv"
# the margin without a pilot's (the pilot itself, or a profile without one: full, rehearsal)
LIKE_LOCAL = "null: no difference, ratio 1 (the paper states the same iteration complexity, no tolerance)"
LIKE_LOCAL_PILOT = ("pilot: exp of one seed SD of local SGD's log final training loss over the pilot's seeds "
                    f"({PILOT_WHERE} on the seeds its registration names, local SGD's seed SD in "
                    "per_iteration_like_local's measured)")


def pilot_claims(extra_models: list[str]) -> list[str]:
    """The claims whose expected width (and undecidability) the registered pilot gives: the
    per-iteration ones, paired over seeds; not the wall-clock one, whose spread is this machine's, nor
    the projections, which the seeds do not vary."""
    return ["per_iteration_like_local"] + [f"per_iteration_like_local_{m}" for m in extra_models]


def register_claims(claims: Claims, period: int, seeds: int, extra_models: list[str], repeats: int,
                    margins: Mapping[str, float] | None = None) -> None:
    """Register the measured claims: CoCoD-SGD's final training loss over local SGD's (same `period`) at
    most `margins["loss_ratio"]` on the notebook's model and on each of `extra_models` (paired seeds;
    non-inferiority: the paper gives no tolerance for "the same iteration complexity", so the margin
    is exp of one seed SD of local SGD's log final training loss over the registered pilot's seeds,
    whose power the registration holds; None is the pilot itself, or a profile without one: the null,
    ratio 1), and more than nothing of its modeled communication hidden (superiority over the null 0,
    the median over `repeats` interleaved pairs; the blocking control's precheck is its premise)."""
    margin, source = (1.0, LIKE_LOCAL) if margins is None else (float(margins["loss_ratio"]), LIKE_LOCAL_PILOT)
    claims.pilot_claims = pilot_claims(extra_models)
    models = [("per_iteration_like_local", "")] + [(f"per_iteration_like_local_{m}", f"{m}: ") for m in extra_models]
    for cid, prefix in models:
        claims.register(
            cid, f"{prefix}per iteration, CoCoD-SGD converges like local SGD with the same period (k={period})",
            "same iteration complexity as local SGD",
            Test("final training loss ratio CoCoD-SGD / local SGD", "<=", margin,
                 f"95% paired t interval over {seeds} seeds of the log ratio, exponentiated", form="non-inferiority",
                 source=source))
    claims.register(
        "hidden_communication", "CoCoD-SGD hides its communication behind computation (comm-bound network)",
        "communication off the critical path",
        Test("fraction of the modeled communication hidden", ">=", 0.0,
             f"95% interval of the median over {repeats} interleaved pairs (quantile_test)", form="superiority",
             source="null: nothing hidden, 0 (a blocking average, local SGD's)"))


def precheck_cores(claims: Claims, timing_nproc: int) -> tuple[int, bool]:
    """Precheck (a) of `hidden_communication`, a machine condition known before any run: on a CPU, more
    timing ranks than cores makes it inconclusive (a rank's emulated transfer, a sleep, hands its core
    to another, so blocked time would look hidden). Returns the cores and whether they are oversubscribed."""
    cores = len(os.sched_getaffinity(0))
    oversubscribed = not torch.cuda.is_available() and timing_nproc > cores
    if oversubscribed:
        claims.precheck("hidden_communication", f"{timing_nproc} timing ranks on {cores} cores: a rank's emulated "
                        "transfer hands its core to another, so blocked time would look hidden")
    return cores, oversubscribed


def paper_setting(value: dict[str, Any] | None, model: str) -> PaperSetting:
    """The paper's setting (`verdicts.setting`): `PROJ_NPROC` workers on `PAPER_NODES` nodes, the
    notebook's `model` standing for its own claims where it is one of `PROJ_MODELS`; a profile's
    ``paper_setting`` parameter `value` names a stand-in (the rehearsal's three nodes)."""
    return PaperSetting.parse(value, PROJ_NPROC, PAPER_NODES, [model] if model in PROJ_MODELS else [])


def register_projection(claims: Claims, period: int, setting: PaperSetting,
                        allocation: Allocation | None = None) -> tuple[dict[str, Profile], dict[str, RatioBand | None]]:
    """Load the committed layer profile of each model of `PROJ_MODELS` on `PROJ_DEVICE` at `PROJ_BATCH`
    and register its projected claims (`PROJ_CLAIMS`), each to be decided within the simulator's error
    measured on a real cluster for the same runtime models (`projection_cases` with `period`) on
    `PROJ_NET` (`projection.register`: a runtime model no measurement covers leaves the claim
    inconclusive by that precheck, before the projection). The claims of the models `setting` names
    are measured instead where the runs span it (`AT_SETTING_STAT`); their precheck applies only
    where `allocation` (default: this process's, `Allocation.detect`) cannot span it. Returns the
    profiles and each claim id's band."""
    profiles = {m: projection.load_profile(m, PROJ_DEVICE, PROJ_BATCH) for m in PROJ_MODELS}
    model = {c["algo"]: projection.runtime(c, PROJ_NET) for c in projection_cases(period)}
    reachable = setting.reachable(allocation or Allocation.detect())
    bands = {}
    for m, sfx in PROJ_MODELS.items():
        label = projection.describe(profiles[m], PROJ_NPROC, PROJ_NET)
        at_setting = (setting, AT_SETTING_STAT, reachable) if m in setting.models else None
        for cid, claim, paper, slower, faster, threshold, form, source in PROJ_CLAIMS:
            bands[cid + sfx] = projection.register(
                claims, cid + sfx, f"{m} at the paper's scale: {claim}", paper,
                f"{label}: time to target ratio {SHORT_NAME[slower]} / {SHORT_NAME[faster]} (steps to target from "
                "this notebook's runs x projected s/iteration)", ">=", threshold, form, source,
                [(model[slower], PROJ_NET)], [(model[faster], PROJ_NET)], at_setting)
    return profiles, bands


def runs_at_setting(setting: PaperSetting, common: dict[str, Any], period: int,
                    allocation: Allocation | None = None) -> dict[str, Result] | None:
    """S-SGD, local SGD and CoCoD-SGD (`run_methods`) on the real network (no emulation) where
    `common`'s runs can span `setting` (its workers, and `allocation`'s nodes: `PaperSetting.can_run`),
    else None (nothing run)."""
    if not setting.can_run(common["nproc"], allocation):
        return None
    return run_methods("", common, period)


def projection_cases(period: int) -> list[dict[str, Any]]:
    """The projected methods (labelled cases): the kit's S-SGD, local SGD and CoCoD-SGD with `period`."""
    names = method_names(period)
    return [{"algo": "ssgd", "label": names["ssgd"]},
            {"algo": "local_sgd", "params": {"period": period}, "label": names["local_sgd"]},
            {"algo": "cocod_sgd", "params": {"period": period}, "label": names["cocod_sgd"]}]


def design(seed: int, seeds: int, steps: int, nproc: int, batch_size: int, model: str, data: str, extra_models: list[str],
           period: int, comm_ratios: list[float], latency: str, repeats: int, control_repeats: int, pair_steps: int,
           timing_nproc: int, timing_batch_size: int, backend: str,
           paper_setting: dict[str, Any] | None = None) -> dict[str, Any]:
    """What fixes the deciding runs (`Claims.preregister`'s design): seeds, steps, ranks, batch, model,
    data, period, the network sweep's rule, the timing pairs and the backend; the projection's
    setting (device, models, batch, workers, network); and a profile's stand-in `paper_setting`
    where it names one."""
    return ({"paper_setting": dict(paper_setting)} if paper_setting else {}) | {"seed": seed, "seeds": seeds, "steps": steps, "nproc": nproc, "batch_size": batch_size, "model": model,
            "data": data, "extra_models": list(extra_models), "period": period, "comm_ratios": list(comm_ratios),
            "latency": latency, "repeats": repeats, "control_repeats": control_repeats, "pair_steps": pair_steps,
            "timing_nproc": timing_nproc, "timing_batch_size": timing_batch_size, "backend": backend,
            "projection": {"device": PROJ_DEVICE, "models": list(PROJ_MODELS), "batch_size": PROJ_BATCH,
                           "nproc": PROJ_NPROC, "net": PROJ_NET}}


def net_for(ratio: float, c: float, nbytes: int, p: int, latency: str) -> str:
    """The network (its bandwidth, with `latency`) on which the alpha-beta model of one ring all-reduce
    of `nbytes` over `p` ranks, 2(p-1) α + 2(p-1)/p · n/B, takes `ratio` · `c` seconds."""
    alpha = parse_net(f"1Gbit,{latency}").latency_s
    transfer = ratio * c - 2 * (p - 1) * alpha
    assert transfer > 0, "latency alone exceeds the target all-reduce time"
    return f"{2 * (p - 1) / p * nbytes * 8 / transfer / 1e6:.3f}Mbit,{latency}"


def sweep_networks(compute_only: Result, comm_ratios: list[float], latency: str,
                   nproc: int) -> tuple[float, int, dict[str, str]]:
    """From the un-emulated CoCoD-SGD run `compute_only`: its compute time per step c
    (`Result.steady_step_time`: its all-reduce is in the background, so its step time is computation),
    the bytes of one model all-reduce, and per ratio r of `comm_ratios` (labelled "r=..") the network
    on which that all-reduce over `nproc` ranks takes r · c (`net_for`, `latency`)."""
    c = compute_only.steady_step_time()
    nbytes = int(compute_only.comm().nbytes.iloc[0])
    nets = {f"r={ratio:g}": net_for(ratio, c, nbytes, nproc, latency) for ratio in comm_ratios}
    return c, nbytes, nets


def run_methods(net: str, common: dict[str, Any], period: int) -> dict[str, Result]:
    """S-SGD, local SGD and CoCoD-SGD (same `period`) on one emulated network, run CoCoD-SGD first (the
    compute-only run is CoCoD-SGD's) and returned in the order S-SGD, local SGD, CoCoD-SGD."""
    names = method_names(period)
    runs = {names["cocod_sgd"]: run(algo="cocod_sgd", params={"period": period}, name=f"cocod_k{period}",
                                    net=net, **common),
            names["local_sgd"]: run(algo="local_sgd", params={"period": period}, name=f"local_sgd_k{period}",
                                    net=net, **common),
            names["ssgd"]: run(algo="ssgd", name="ssgd", net=net, **common)}
    return {names[a]: runs[names[a]] for a in ("ssgd", "local_sgd", "cocod_sgd")}


def run_sweep(nets: dict[str, str], common: dict[str, Any], period: int) -> dict[str, dict[str, Result]]:
    """The three methods (`run_methods`) on each network of `nets`, run from the slow network (the last)
    to the fast one, so that the runs compared on wall-clock time follow each other and the compute-only
    run (a drift of a shared machine's load between them matters least); returned in `nets`' order."""
    sweep = {label: run_methods(nets[label], common, period) for label in reversed(nets)}
    return {label: sweep[label] for label in nets}


def modeled_comm_per_step(r: Result) -> float:
    """Modeled communication seconds per step of one rank (rank 0's collectives in the ledger)."""
    cm = r.comm()
    return cm[cm["rank"] == 0].modeled_s.sum() / r.config.steps


def arithmetic_step(overlapped: bool, c: float, comm: float) -> float:
    """Seconds per step the arithmetic gives: compute `c` plus the modeled communication per step
    `comm`, or, for a method that overlaps its communication with the next period's steps (CoCoD-SGD,
    `overlapped`), the larger of the two."""
    return max(c, comm) if overlapped else c + comm


def hidden_fraction(r: Result, compute_only: Result) -> float:
    """The fraction of `r`'s modeled communication hidden: 1 - (its time per step - that of the same run
    without emulation, `compute_only`) / its modeled communication per step; NaN where none is modeled."""
    modeled = modeled_comm_per_step(r)
    extra = r.steady_step_time() - compute_only.steady_step_time()
    return 1 - extra / modeled if modeled > 0 else float("nan")


def sweep_table(sweep: dict[str, dict[str, Result]], nets: dict[str, str], c: float, nproc: int) -> pd.DataFrame:
    """One row per network and method of `run_sweep`: the measured median time per step beside the
    arithmetic (`arithmetic_step`, compute `c`), loss, accuracy, bytes, blocked time per rank (of
    `nproc`) and modeled communication."""
    rows = []
    for label, runs in sweep.items():
        for name, r in runs.items():
            arithmetic = arithmetic_step(name.startswith("CoCoD"), c, modeled_comm_per_step(r))
            rows.append({"network": f"{label} ({nets[label]})", "method": name,
                         "median time per step (ms)": 1e3 * r.steady_step_time(),
                         "arithmetic (ms/step)": 1e3 * arithmetic,
                         "measured / arithmetic": r.steady_step_time() / arithmetic,
                         "final train loss": r.summary["final_train_loss"],
                         "test acc": r.summary["final_test_acc"],
                         "MB sent (all ranks)": r.summary["comm_bytes"] / 1e6,
                         "blocked on communication (s/rank)": r.summary["comm_wait_s"] / nproc,
                         "modeled communication (ms/step)": 1e3 * modeled_comm_per_step(r)})
    return pd.DataFrame(rows)


def time_to_target(runs: dict[str, Result]) -> tuple[float, dict[str, dict[str, float]], pd.DataFrame]:
    """The target (the highest of the runs' best logged training losses, so that every run reaches it),
    each run's first logged step and wall-clock time at or below it (`analysis.first_reaching`), and
    their table with each run's median time per step."""
    target = max(r.metrics.train_loss.min() for r in runs.values())
    reach = {name: {at: first_reaching(r.metrics, "train_loss", target, at=at) for at in ("step", "wall_s")}
             for name, r in runs.items()}
    ttt = pd.DataFrame([{"method": name, "time to target (s)": reach[name]["wall_s"],
                         "steps to target": reach[name]["step"],
                         "median time per step (ms)": 1e3 * r.steady_step_time()} for name, r in runs.items()])
    return target, reach, ttt


def ratio_table(runs: dict[str, Result], reach: dict[str, dict[str, float]], c: float, period: int) -> pd.DataFrame:
    """Each time-to-target ratio slower / faster (local SGD / CoCoD-SGD, S-SGD / local SGD, S-SGD /
    CoCoD-SGD): measured (the median over the logged periods of steps to the target x that period's
    seconds per step) beside the arithmetic of the step times at the same steps, with nothing hidden and
    with CoCoD-SGD's average hidden (`arithmetic_step`, compute `c`)."""
    names = method_names(period)
    period_times = pd.DataFrame({name: reach[name]["step"] * r.step_seconds() for name, r in runs.items()}).dropna()

    def arithmetic_time(name: str, hidden: bool) -> float:
        comm = modeled_comm_per_step(runs[name])
        return reach[name]["step"] * arithmetic_step(hidden and name == names["cocod_sgd"], c, comm)

    return pd.DataFrame([{"time to target": f"{slower} / {faster}",
                          "measured (median over logged periods)": (period_times[slower] / period_times[faster]).median(),
                          "arithmetic, nothing hidden": arithmetic_time(slower, False) / arithmetic_time(faster, False),
                          "arithmetic, average hidden": arithmetic_time(slower, True) / arithmetic_time(faster, True)}
                         for slower, faster in ((names[a], names[b]) for _, _, _, a, b, *_ in PROJ_CLAIMS)])


def per_iteration_pairs(model: str, seeds: int, common: dict[str, Any], period: int,
                        first: Result | None = None, tag: str = "") -> pd.DataFrame:
    """CoCoD-SGD and local SGD (same `period`) on `model`, un-emulated, one pair per seed of the `seeds`
    seeds from `common`'s on (seed, seed + 1, ...; each pair shares the seed's initialisation and data
    order); `first`, where given, is CoCoD-SGD's run of the first seed, already made; `tag` goes into the
    run names. Their final training losses and test accuracies, and the loss ratio CoCoD-SGD / local SGD."""
    rows = []
    for s_ in range(common["seed"], common["seed"] + seeds):
        cfg = {**common, "model": model, "seed": s_}
        c_run = first if (first is not None and s_ == common["seed"]) else run(
            algo="cocod_sgd", params={"period": period}, name=f"cocod_k{period}_nonet{tag}_s{s_}", net="", **cfg)
        l_run = run(algo="local_sgd", params={"period": period}, name=f"local_sgd_k{period}_nonet{tag}_s{s_}",
                    net="", **cfg)
        rows.append({"seed": s_, "CoCoD-SGD final train loss": c_run.summary["final_train_loss"],
                     "local SGD final train loss": l_run.summary["final_train_loss"],
                     "CoCoD-SGD test acc": c_run.summary["final_test_acc"],
                     "local SGD test acc": l_run.summary["final_test_acc"]})
    out = pd.DataFrame(rows)
    out["loss ratio"] = out["CoCoD-SGD final train loss"] / out["local SGD final train loss"]
    return out


def timing_network(common: dict[str, Any], nproc: int, batch_size: int, steps: int, period: int, nbytes: int,
                   ratio: float, latency: str) -> tuple[dict[str, Any], str]:
    """The setting of the hidden-communication pairs: `common` on `nproc` ranks with `batch_size` per
    rank for `steps` steps, logged once per period and evaluated once, at the end; and its
    communication-bound network, set by `net_for` at `ratio` from the compute time per step of its own
    un-emulated CoCoD-SGD run (run here)."""
    timing = {**common, "nproc": nproc, "batch_size": batch_size, "steps": steps, "log_every": period}
    timing["eval_every"] = timing["steps"]           # one evaluation, at the end
    ref = run(algo="cocod_sgd", params={"period": period}, name=f"cocod_k{period}_nonet_timing", net="", **timing)
    return timing, net_for(ratio, ref.steady_step_time(), nbytes, nproc, latency)


def hidden_pairs(algo: str, method: str, n: int, timing: dict[str, Any], net: str, period: int) -> pd.DataFrame:
    """`n` pairs of runs of `algo` (with `period`) in the `timing` setting, un-emulated and on `net`, which
    one runs first alternating from pair to pair: each pair's median times per step, modeled
    communication and hidden fraction (`hidden_fraction`); `method` labels the rows."""
    rows = []
    for i in range(n):
        order = [("", "nonet_"), (net, "")][::1 if i % 2 == 0 else -1]
        done = {nt: run(algo=algo, params={"period": period}, name=f"{algo}_k{period}_{tag}pair{i}",
                        net=nt, **timing) for nt, tag in order}
        base, onnet = done[""], done[net]
        rows.append({"pair": i, "method": method, "un-emulated (ms/step)": 1e3 * base.steady_step_time(),
                     "comm-bound network (ms/step)": 1e3 * onnet.steady_step_time(),
                     "modeled communication (ms/step)": 1e3 * modeled_comm_per_step(onnet),
                     "hidden": hidden_fraction(onnet, base)})
    return pd.DataFrame(rows)


def plot_hidden_pairs(cocod_pairs: pd.DataFrame, control_pairs: pd.DataFrame, nproc: int, net: str,
                      path: Path) -> plt.Figure:
    """The hidden fraction (%) of each pair (`hidden_pairs`, on `nproc` ranks and `net`) of CoCoD-SGD and
    of the control, beside the claim's 80%; saved to `path`."""
    pairs = pd.concat([cocod_pairs, control_pairs], ignore_index=True)
    return plots.bars(pairs.assign(**{"hidden (%)": 100 * pairs.hidden}), x="pair", y="hidden (%)", hue="method",
                      reference=(80, "claim: 80%"), path=path,
                      title=f"communication hidden, {nproc} ranks, network {net}")


def precheck_control(claims: Claims, control_pairs: pd.DataFrame, oversubscribed: bool) -> float:
    """Precheck (b) of `hidden_communication`, from the blocking control's (local SGD's) own pairs, run
    before CoCoD-SGD's: a median of 50% or more hidden means the machine cannot tell hiding from a
    handed-over core, and the claim is inconclusive (unless precheck (a) already made it so). Returns
    the control's median."""
    control = control_pairs.hidden.median()
    if control >= 0.5 and not oversubscribed:
        claims.precheck("hidden_communication", f"the blocking control (local SGD) shows {100 * control:.0f}% hidden "
                        "(>= 50%), measured before CoCoD-SGD's pairs: the machine cannot tell hiding from a handed-over core")
    return control


def heterogeneous_runs(common: dict[str, Any], period: int, speeds: list[float], sample_ms: float,
                       net: str) -> dict[str, Result]:
    """CoCoD-SGD on `net` with emulated rank speeds `speeds` (each rank sleeps `sample_ms` per sample of
    its batch over its speed), with equal batches and with batches proportional to speed."""
    return {"CoCoD-SGD, equal batches": run(
                algo="cocod_sgd", params={"period": period, "speeds": speeds, "sample_ms": sample_ms},
                name="cocod_hetero_equal", net=net, **common),
            "CoCoD-SGD, batches proportional to speed": run(
                algo="cocod_sgd", params={"period": period, "speeds": speeds, "sample_ms": sample_ms,
                                          "batch_weights": speeds},
                name="cocod_hetero_prop", net=net, **common)}


def check_heterogeneous(claims: Claims, hetero: dict[str, Result], batch_size: int, sample_ms: float,
                        speeds: list[float], dry_run: bool) -> pd.DataFrame:
    """The invariant of `heterogeneous_runs`: batches proportional to speed equalise the emulated sleep
    b_i · sample_ms / s_i per rank (within 10%, the batches' rounding), and the run with them trains no
    slower than with equal batches (unless the last, slow rank's speed is 1, or a dry run). Returns both runs' table."""
    sleep_equal = [batch_size * sample_ms / s for s in speeds]                               # ms per step
    sleep_prop = [b * sample_ms / s for b, s in zip(proportional_batches(batch_size, speeds), speeds)]
    h_equal, h_prop = (r.summary["train_s"] for r in hetero.values())
    balanced = max(sleep_prop) <= 1.1 * min(sleep_prop)                   # equal up to rounding of the batches
    claims.invariant("heterogeneous workers: proportional batches equalise the emulated compute per rank",
                     f"per-rank sleep b_i*sample_ms/s_i equal (±10% rounding); train time not above equal batches' "
                     f"(sleep of the slowest rank {max(sleep_equal):.1f} -> {max(sleep_prop):.1f} ms/step)",
                     f"sleeps {', '.join(f'{v:.1f}' for v in sleep_prop)} ms/step; train time {h_prop:.2f} s vs "
                     f"{h_equal:.2f} s with equal batches ({h_equal / h_prop:.2f}x)",
                     balanced and (dry_run or speeds[-1] == 1 or h_prop < h_equal))
    return pd.DataFrame([{"setting": name, "final train loss": r.summary["final_train_loss"],
                          "test acc": r.summary["final_test_acc"], "train time (s)": r.summary["train_s"]}
                         for name, r in hetero.items()])


def projection_table(profiles: dict[str, Profile], period: int, reach: dict[str, dict[str, float]],
                     out: Path) -> pd.DataFrame:
    """At the paper's scale (`PROJ_NPROC` ranks on `PROJ_NET`), per model of `profiles`: each method's
    projected seconds per iteration (`projection.project`), the steps to the target measured in this
    notebook (`reach`, from `time_to_target`), their product (the projected time to the target) and the
    fraction of the communication hidden in the timeline (1 - exposed / link-busy). Writes the table to
    `out`/projection.csv and each profile's note beside it (`projection.write_profile_note`)."""
    proj = pd.concat([projection.project(profiles[m], projection_cases(period), [PROJ_NPROC], [PROJ_NET])
                      for m in PROJ_MODELS],
                     ignore_index=True)
    proj["steps to target (this notebook)"] = proj.label.map({name: reach[name]["step"] for name in reach})
    proj["projected time to target (s)"] = proj["steps to target (this notebook)"] * proj.step_s
    proj["hidden"] = 1 - proj.exposed_comm_s / proj.comm_s
    proj.to_csv(out / "projection.csv", index=False)
    for m in PROJ_MODELS:
        projection.write_profile_note(out / f"projection_profile_{m}.txt", profiles[m])
    return proj


def plot_projection(proj: pd.DataFrame, setting: str, path: Path) -> plt.Figure:
    """The projected time to the target (`projection_table`) per model and method at the paper's scale;
    `setting` names the model and data the steps come from; saved to `path`."""
    return plots.bars(proj, x="model", y="projected time to target (s)", hue="label", path=path,
                      title=f"projection: {PROJ_DEVICE} b{PROJ_BATCH}, {PROJ_NPROC} workers, {PROJ_NET}; "
                      f"steps from {setting}")


def decide_projection(claims: Claims, proj: pd.DataFrame, profiles: dict[str, Profile],
                      bands: dict[str, RatioBand | None], reach: dict[str, dict[str, float]],
                      target: float, period: int, setting_name: str, setting: PaperSetting,
                      real: dict[str, Result] | None = None) -> None:
    """Decide the projected claims (`register_projection`) on the ratios of projected times to the target
    (`projection_table`), within their bands (`projection.decide`); `setting_name` names the model and data
    the steps to the `target` come from. The claims of the models `setting` names are decided instead
    by the runs on the real network `real` (`runs_at_setting`) where they span it (`decide_at_setting`).
    Asserts, per model, the simulator's own model of CoCoD-SGD as an invariant: at least 80% of its
    communication hidden."""
    names = method_names(period)
    cocod = names["cocod_sgd"]
    spanned, why = setting.spanned_by((real or {}).values())
    for m, sfx in PROJ_MODELS.items():
        row = proj[proj.model == m].set_index("label")
        label = projection.describe(profiles[m], PROJ_NPROC, PROJ_NET)
        t, st = row["projected time to target (s)"], row.step_s
        for cid, _, _, slow_algo, fast_algo, *_ in PROJ_CLAIMS:
            slower, faster = names[slow_algo], names[fast_algo]
            if spanned and m in setting.models:
                decide_at_setting(claims, cid + sfx, real, slower, faster, why)
                continue
            projection.decide(claims, cid + sfx, float(t[slower] / t[faster]), label, bands[cid + sfx],
                              f"steps to loss {target:.3f} ({setting_name}): {reach[slower]['step']:.0f} vs "
                              f"{reach[faster]['step']:.0f}; projected {1e3 * st[slower]:.1f} vs "
                              f"{1e3 * st[faster]:.1f} ms/iteration")
        claims.invariant(f"simulator, {label}: CoCoD-SGD's average overlaps the next period's steps",
                         "fraction hidden (1 - exposed / link-busy) >= 0.8",
                         f"{row.hidden[cocod]:.3f}: {1e3 * row.comm_s[cocod]:.1f} ms/iteration on the link, "
                         f"{1e3 * row.exposed_comm_s[cocod]:.1f} exposed; compute {1e3 * row.compute_s[cocod]:.1f} ms/iteration",
                         bool(row.hidden[cocod] >= 0.8))


def decide_at_setting(claims: Claims, cid: str, real: dict[str, Result], slower: str, faster: str, spanned: str) -> str:
    """Decide claim `cid` from the runs on the real network at the paper's setting (`runs_at_setting`):
    the time-to-target ratio `slower` / `faster` of each logged period (steps to the target x that
    period's seconds per step, `time_to_target`: the steps' ratio x `projection.period_ratios`), its
    median and distribution-free interval (`AT_SETTING_STAT`, `projection.decide_at_setting`).
    Returns the verdict."""
    target, reach, _ = time_to_target(real)
    ratios = reach[slower]["step"] / reach[faster]["step"] * projection.period_ratios(real[slower], real[faster])
    return projection.decide_at_setting(
        claims, cid, ratios, spanned,
        f"steps to loss {target:.3f}: {reach[slower]['step']:.0f} vs {reach[faster]['step']:.0f}; median "
        f"{1e3 * real[slower].steady_step_time():.1f} vs {1e3 * real[faster].steady_step_time():.1f} ms/step")


def decide_per_iteration(claims: Claims, cid: str, per_seed: pd.DataFrame, model: str | None = None) -> str:
    """Decide a per-iteration claim from `per_iteration_pairs`: the geometric mean of the loss ratio
    CoCoD-SGD / local SGD, with the paired t interval of the mean log ratio, exponentiated. `model`
    (an extra model) prefixes the per-seed ratios; without it the test accuracies are added. The
    measured text ends with local SGD's seed SD of its log final training loss (ddof 1) and its exp,
    the margin a pilot gives. Returns the verdict."""
    log_c, log_l = np.log(per_seed["CoCoD-SGD final train loss"]), np.log(per_seed["local SGD final train loss"])
    lo, hi = interval_or_nan(paired_interval, log_c, log_l)
    ratios = f"loss ratio per seed {', '.join(f'{v:.2f}' for v in per_seed['loss ratio'])}"
    measured = (f"{model}: {ratios}" if model else
                f"{ratios}; test acc CoCoD-SGD {per_seed['CoCoD-SGD test acc'].mean():.4f} vs local SGD "
                f"{per_seed['local SGD test acc'].mean():.4f} (mean of {len(per_seed)} seeds)")
    sd = float(np.std(log_l, ddof=1)) if len(log_l) > 1 else float("nan")
    measured += f"; local SGD's seed SD of log final training loss {sd:.3g} (exp {np.exp(sd):.4f})"
    return claims.decide(cid, np.exp(lo), np.exp(hi), float(np.exp((log_c - log_l).mean())), measured)


def decide_hidden(claims: Claims, cocod_pairs: pd.DataFrame, control: float, timing_nproc: int) -> str:
    """Decide `hidden_communication` from CoCoD-SGD's pairs (`hidden_pairs`): their median hidden
    fraction with its distribution-free interval (`median_interval`). Returns the verdict."""
    lo, hi = interval_or_nan(median_interval, cocod_pairs.hidden)
    return claims.decide("hidden_communication", lo, hi, float(cocod_pairs.hidden.median()),
                         f"{cocod_pairs['modeled communication (ms/step)'].median():.1f} ms/step modeled communication on "
                         f"{timing_nproc} ranks, {len(cocod_pairs)} pairs: " + ", ".join(f"{100 * h:.0f}%" for h in cocod_pairs.hidden)
                         + f"; control (local SGD, run first) median {100 * control:.0f}%")

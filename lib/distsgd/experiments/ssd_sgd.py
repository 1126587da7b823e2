"""Notebook 08 (SSD-SGD, stale synchronous / delayed global updates with a local rule): the claims'
registration, the networks scaled to this machine, the runs on the high-latency network and on
paired seeds, their tables, the latency gain, the accuracy decisions and the projection at the
paper's setting (ResNet-20 b128 on V100-fp32, 4 workers, 10 Gbit/s at 2 us .. 2 ms latency). Where
the notebook's runs span the paper's setting (`verdicts.setting`: its 4 workers on 4 machines over
the real network), the projected latency claim is decided from S-SGD and SSD-SGD trained on the real
network and on it with the projection's highest latency added instead (`runs_at_setting`)."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..verdicts import projection as pj
from ..verdicts.claims import Claims, Test
from ..systems.layer_profile import Profile
from ..training.allocation import Allocation
from ..training.results import Result
from ..training.runner import run
from ..systems.timeline.error_band import RatioBand
from ..verdicts.setting import PaperSetting, added_latency

# the paper's setting (SPECS.md h), fixed before the projection; not parameters of the notebook
PROJ_MODEL, PROJ_DEVICE, PROJ_BATCH = "resnet20", "V100-fp32", 128
PROJ_NPROC = 4                                  # the 4 worker machines (each reduces its 4 GPUs' gradients inside)
PROJ_PERIOD = 5                                 # the paper's k
PROJ_LATENCIES_US = [2, 20, 200, 2000]          # alpha per message at 10GbE's bandwidth
PROJ_NETS = {us: f"bandwidth=10Gbit,latency={us}us" for us in PROJ_LATENCIES_US}
PROJ_CASES = [{"algo": "ssgd", "label": "S-SGD"},
              {"algo": "ssd_sgd", "params": {"period": PROJ_PERIOD}, "label": f"SSD-SGD k={PROJ_PERIOD}"}]
PAPER_NODES = PROJ_NPROC                         # one worker per machine
HIGH_LATENCY = added_latency(f"{PROJ_LATENCIES_US[-1]}us")   # at the setting: the real network with the highest latency added
AT_SETTING_STAT = ("95% interval of the median over the logged periods after the warm-up (median_interval) of the "
                   f"speedup S-SGD / SSD-SGD (k={PROJ_PERIOD}) trained on the real network with {PROJ_LATENCIES_US[-1]} us "
                   "added per message over that on the real network")


def paper_setting(value: dict[str, Any] | None, model: str) -> PaperSetting:
    """The paper's setting (`verdicts.setting`): `PROJ_NPROC` workers on `PAPER_NODES` machines, the
    notebook's `model` standing for `PROJ_MODEL` where it is that model; a profile's
    ``paper_setting`` parameter `value` names a stand-in."""
    return PaperSetting.parse(value, PROJ_NPROC, PAPER_NODES, [model] if model == PROJ_MODEL else [])


def check_parameters(periods: Sequence[int], seeds: Any) -> tuple[int, list[int]]:
    """Check the periods (at least one k <= 5: the paper's claims are about k <= 5) and the paired
    seeds (an integer >= 2); ValueError otherwise. Returns the largest k <= 5 (the ablations') and
    the periods k <= 5 (the accuracy claims')."""
    if not any(k <= 5 for k in periods):
        raise ValueError(f"periods = {periods!r}: must contain at least one k <= 5 (the paper's claims are about k <= 5)")
    if not (isinstance(seeds, int) and seeds >= 2):
        raise ValueError(f"seeds = {seeds!r}: must be an integer >= 2 (paired seeds of the accuracy claims)")
    return max(k for k in periods if k <= 5), [k for k in periods if k <= 5]


def end_acc(r: Result, pulled: bool = False) -> float:
    """Final test accuracy: of the model evaluated at the last step (the average of the ranks' models in the
    accuracy runs, `Config.eval_average`; in the timing runs each rank's own, mean over ranks), or of the model
    after the kit's final pull (`summary`); the same for methods without a local copy."""
    return r.summary["final_test_acc"] if pulled else float(r.metrics.test_acc.iloc[-1])


PILOT_WHERE = "reproduce/pilots/<profile>/08_ssd_sgd/T/claims.csv"
ACC_CLAIMS = ("warmup_needed", "local_rule_needed")   # with acc_close_k*: the claims whose power the pilot gives
CLOSE = ("null: no difference, 0 points (the paper: \"good convergence accuracy\", no tolerance; this run is the "
         "pilot whose seed spread gives the margin)")
CLOSE_PILOT = ("pilot: one seed SD of S-SGD's final test accuracy (points) over the pilot's seeds "
               f"({PILOT_WHERE} on the seeds its registration names, S-SGD's seed SD in acc_close_k*'s measured)")
GROWS = "null: no difference between the networks, 0 (the paper: \"up to 110%\", its maximum, not a growth)"
GROWS_RATIO = "null: no difference between the latencies, ratio 1 (the paper: \"up to 110%\", its maximum, not a growth)"
COSTS = "null: no difference, 0 points (the paper: \"GLU is critical\", no size)"


def pilot_claims(acc_periods: Sequence[int]) -> list[str]:
    """The claims whose expected width (and undecidability) the registered pilot gives: the accuracy
    claims, paired over seeds; not the wall-clock ones, whose spread is this machine's, not the seeds'."""
    return [f"acc_close_k{k}" for k in acc_periods] + list(ACC_CLAIMS)


def register_claims(claims: Claims, acc_periods: Sequence[int], kmax: int, local_rule: str, seeds: int, n_test: int,
                    acc_data: str, resolution: float, expected_acc: float, setting: PaperSetting | None = None,
                    allocation: Allocation | None = None,
                    margins: Mapping[str, float] | None = None) -> tuple[Profile, RatioBand | None]:
    """Register the notebook's claims before any run. On accuracy (paired test over `seeds` seeds x
    `n_test` test images): S-SGD - SSD-SGD <= `margins["acc_points"]` for each k <= 5 (non-inferiority; the
    margin is one seed SD of S-SGD's final test accuracy over the registered pilot's seeds, whose
    power the registration holds), and at k = `kmax` the warm-up and the local rule each cost
    accuracy when removed (superiority over the null, > 0). `margins` None is the pilot itself
    (or a profile without one): the margin is the null, 0 points, and the statistic states the
    expected half-width `resolution` points at `expected_acc` instead. On time: the throughput gain over S-SGD grows with the
    network's latency (superiority over the null; measured, and projected at the paper's setting
    within the simulator's error measured for the same runtime models, `projection.register`; measured
    instead where the runs span `setting` and it names `PROJ_MODEL`, `AT_SETTING_STAT`, its precheck
    applying only where `allocation`, default this process's, cannot). Returns the projection's
    profile and band (None: not covered)."""
    paired = f"paired 95% interval, {seeds} seeds x {n_test} {acc_data} test images (paired_accuracy_interval"
    paired += (f"; expected half-width {resolution:.1f} points at {100 * expected_acc:.0f}% accuracy)"
               if margins is None else ")")
    margin, close = (0.0, CLOSE) if margins is None else (float(margins["acc_points"]), CLOSE_PILOT)
    claims.pilot_claims = pilot_claims(acc_periods)
    for k in acc_periods:
        claims.register(f"acc_close_k{k}", f"SSD-SGD (k={k}) reaches S-SGD's accuracy", "close to S-SGD for small k",
                        Test(f"test accuracy of the averaged model, S-SGD - SSD-SGD k={k} (points)", "<=", margin, paired,
                             form="non-inferiority", source=close))
    claims.register("latency_gain_grows", "SSD-SGD's throughput gain over S-SGD (the faster of the kit's S-SGD and "
                    "PyTorch DDP on each network) grows with network latency",
                    "up to +110%", Test("throughput gain over the faster baseline, high- minus low-latency network", ">=",
                                        0.0, "95% interval of the median over logged periods after warm-up (quantile_test)",
                                        form="superiority", source=GROWS))
    claims.register("warmup_needed", f"removing the warm-up costs accuracy (k={kmax})", "warm-up and GLU are critical",
                    Test("test accuracy of the averaged model, with - without warm-up (points)", ">=", 0.0, paired,
                         form="superiority", source=COSTS))
    claims.register("local_rule_needed", f"replacing the local rule {local_rule} by a plain local step costs accuracy (k={kmax})",
                    "warm-up and GLU are critical",
                    Test(f"test accuracy of the averaged model, {local_rule} - none (points)", ">=", 0.0, paired,
                         form="superiority", source=COSTS))
    profile = pj.load_profile(PROJ_MODEL, PROJ_DEVICE, PROJ_BATCH)
    hi_net, lo_net = PROJ_NETS[PROJ_LATENCIES_US[-1]], PROJ_NETS[PROJ_LATENCIES_US[0]]
    model = {(c["algo"], net): pj.runtime(c, net) for c in PROJ_CASES for net in (hi_net, lo_net)}
    band = pj.register(
        claims, "proj_latency_gain_grows",
        "at the paper's scale, SSD-SGD's throughput gain over S-SGD grows with network latency",
        "gain grows with latency; up to +110%",
        f"{pj.describe(profile, PROJ_NPROC, '10Gbit')}, alpha "
        f"{PROJ_LATENCIES_US[-1]} vs {PROJ_LATENCIES_US[0]} us: speedup S-SGD/SSD-SGD (k={PROJ_PERIOD}) "
        "at the highest latency / at the lowest", ">=", 1.0, "superiority",
        GROWS_RATIO,
        [(model["ssgd", hi_net], hi_net), (model["ssd_sgd", lo_net], lo_net)],
        [(model["ssd_sgd", hi_net], hi_net), (model["ssgd", lo_net], lo_net)],
        (setting, AT_SETTING_STAT, setting.reachable(allocation or Allocation.detect()))
        if setting is not None and setting.covers(PROJ_MODEL) else None)
    return profile, band


def design(seed: int, seeds: int, steps: int, nproc: int, batch_size: int, model: str, data: str, acc_data: str,
           periods: Sequence[int], warmup: int, local_lr_scale: float, local_rule: str, bandwidth_ratio: float,
           low_latency: str, latency_ratio: float, backend: str, paper_setting: dict[str, Any] | None = None) -> dict[str, Any]:
    """What fixes the deciding runs (`Claims.preregister`'s design): seeds, steps, ranks, batch, the
    timing and accuracy data, the periods, SSD-SGD's warm-up, local lr and rule, the networks' rule
    and the backend; the projection's setting (device, model, batch, workers, period, latencies);
    and a profile's stand-in `paper_setting` where it names one."""
    return ({"paper_setting": dict(paper_setting)} if paper_setting else {}) | {"seed": seed, "seeds": seeds, "steps": steps, "nproc": nproc, "batch_size": batch_size, "model": model,
            "data": data, "acc_data": acc_data, "periods": list(periods), "warmup": warmup,
            "local_lr_scale": local_lr_scale, "local_rule": local_rule, "bandwidth_ratio": bandwidth_ratio,
            "low_latency": low_latency, "latency_ratio": latency_ratio, "backend": backend,
            "projection": {"device": PROJ_DEVICE, "model": PROJ_MODEL, "batch_size": PROJ_BATCH, "nproc": PROJ_NPROC,
                           "period": PROJ_PERIOD, "latencies_us": PROJ_LATENCIES_US}}


def scaled_networks(claims: Claims, common: Mapping[str, Any], kmax: int, bandwidth_ratio: float, low_latency: str,
                    latency_ratio: float) -> tuple[str, str, float]:
    """The two networks, scaled to this machine before any run on an emulated one: local SGD (k =
    `kmax`) without a network gives the compute time per step c, and S-SGD without one its own
    synchronization cost; both networks' bandwidth term of one gradient all-reduce is
    `bandwidth_ratio` x c, the low-latency one's alpha `low_latency`, the high-latency one's latency
    term 2(p-1)·alpha = `latency_ratio` x c. The latency claim is inconclusive by precheck where
    un-emulated S-SGD already spends more than `bandwidth_ratio` of c synchronizing. Returns (low-
    latency network, high-latency network, S-SGD's synchronization overhead)."""
    compute_only = run(algo="local_sgd", params={"period": kmax}, name=f"local_sgd_k{kmax}_nonet", net="", **common)
    reference = run(algo="ssgd", name="ssgd_nonet", net="", **common)
    c = compute_only.steady_step_time()
    sync_overhead = reference.steady_step_time() / c - 1
    if sync_overhead > bandwidth_ratio:
        claims.precheck("latency_gain_grows", f"un-emulated S-SGD already spends {sync_overhead:+.0%} of c synchronizing "
                        f"(> {bandwidth_ratio:.0%}, the low-latency network's modeled share), measured before the network runs")
    nproc = common["nproc"]
    nbytes = int(reference.comm().nbytes.iloc[0])
    mbit = 2 * (nproc - 1) / nproc * nbytes * 8 / (bandwidth_ratio * c) / 1e6
    low_latency_net = f"{mbit:.1f}Mbit,{low_latency}"
    high_latency_net = f"{mbit:.1f}Mbit,{1e6 * latency_ratio * c / (2 * (nproc - 1)):.0f}us"
    print(f"un-emulated: local SGD c = {1e3 * c:.1f} ms/step, S-SGD {1e3 * reference.steady_step_time():.1f} ms/step "
          f"(synchronization {sync_overhead:+.0%}); gradient all-reduce {nbytes / 1e3:.0f} kB; "
          f"networks {low_latency_net} and {high_latency_net}")
    return low_latency_net, high_latency_net, sync_overhead


def network_runs(common: Mapping[str, Any], ssd: Mapping[str, Any], kmax: int, periods: Sequence[int],
                 net: str) -> dict[str, Result]:
    """Every method on network `net`: S-SGD (the kit's and PyTorch DDP: `baselines`), local SGD and OD-SGD
    (SSD-SGD at k = 1), SSD-SGD at each period, and at k = `kmax` without warm-up, with the plain local rule
    ("none") and with "dc" (shown only). Returns the results by method name."""
    runs = {**baselines(common, net),
            f"local SGD k={kmax}": run(algo="local_sgd", params={"period": kmax}, name=f"local_sgd_k{kmax}", net=net,
                                       **common),
            "OD-SGD (k=1)": run(algo="ssd_sgd", params={**ssd, "period": 1}, name="od_sgd", net=net, **common)}
    for k in periods:
        runs[f"SSD-SGD k={k}"] = run(algo="ssd_sgd", params={**ssd, "period": k}, name=f"ssd_k{k}", net=net, **common)
    for suffix, name, change in [("no warm-up", "nowarm", {"warmup": 0}), ("rule none", "none", {"local_rule": "none"}),
                                 ("rule dc (shown)", "dc", {"local_rule": "dc"})]:
        runs[f"SSD-SGD k={kmax}, {suffix}"] = run(algo="ssd_sgd", params={**ssd, "period": kmax, **change},
                                                  name=f"ssd_k{kmax}_{name}", net=net, **common)
    return runs


BASELINES = ("S-SGD", "DDP")      # S-SGD as the kit runs it (`ssgd`) and as PyTorch does (`ddp`)


def baselines(common: Mapping[str, Any], net: str) -> dict[str, Result]:
    """The S-SGD baselines on network `net` (`BASELINES`): the kit's `ssgd` and PyTorch DDP, the same
    update; a gain "over S-SGD" is over the faster of the two (`latency_gain`, issue 37 item 2)."""
    return {"S-SGD": run(algo="ssgd", name="ssgd", net=net, **common),
            "DDP": run(algo="ddp", name="ddp", net=net, **common)}


def summary_table(runs: Mapping[str, Result], nproc: int) -> pd.DataFrame:
    """One row per run: final train loss, test accuracy of the local models and after the final pull
    (`end_acc`), throughput, MB sent by all ranks, and seconds per rank blocked on communication."""
    return pd.DataFrame([{"method": name, "final train loss": r.summary["final_train_loss"],
                          "test acc (local)": end_acc(r), "test acc (pulled)": end_acc(r, pulled=True),
                          "throughput (samples/s)": r.summary["throughput_samples_s"],
                          "MB sent (all ranks)": r.summary["comm_bytes"] / 1e6,
                          "blocked on communication (s/rank)": r.summary["comm_wait_s"] / nproc}
                         for name, r in runs.items()])


def latency_gain(groups: Mapping[str, Mapping[str, Result]], low_net: str, high_net: str, kmax: int,
                 warmup: int) -> tuple[pd.Series, pd.Series, pd.DataFrame]:
    """SSD-SGD's (k = `kmax`) gain over S-SGD on each network (`groups`: network -> runs), S-SGD being the
    faster of `BASELINES` on that network by whole-run throughput: over whole runs, throughput / the
    baseline's - 1; per logged period after the warm-up, the baseline's step time / SSD-SGD's - 1.
    Returns the whole-run gains per network (index: network, and the baseline used), the per-period gain
    on `high_net` minus that on `low_net` (the latency claim's values, NaN periods dropped) and the
    throughputs (network, method)."""
    gain, per_period, rows = {}, {}, []
    ssd = f"SSD-SGD k={kmax}"
    for label, group in groups.items():
        tp = {m: group[m].summary["throughput_samples_s"] for m in (*BASELINES, ssd)}
        base = max(BASELINES, key=lambda m: tp[m])
        gain[(label, base)] = tp[ssd] / tp[base] - 1
        per_period[label] = group[base].step_seconds(after=warmup) / group[ssd].step_seconds(after=warmup) - 1
        rows += [{"network": label, "method": m, "throughput (samples/s)": v} for m, v in tp.items()]
    growth = (per_period[high_net] - per_period[low_net]).dropna()
    index = pd.MultiIndex.from_tuples(list(gain), names=["network", "baseline"])
    return pd.Series(list(gain.values()), index=index, name="SSD-SGD throughput gain over the faster S-SGD"), growth, \
        pd.DataFrame(rows)


def accuracy_runs(common: Mapping[str, Any], ssd: Mapping[str, Any], acc_periods: Sequence[int], kmax: int,
                  acc_data: str, seeds: Sequence[int]) -> tuple[pd.DataFrame, pd.DataFrame, dict[tuple[int, str], Result]]:
    """The accuracy runs without a network, on `acc_data`, for each of the paired `seeds`: S-SGD,
    SSD-SGD at each k <= 5, and at k = `kmax` without warm-up and with the plain local rule; every
    run evaluates the average of its ranks' models (`Config.eval_average`: S-SGD's one model,
    SSD-SGD's local models averaged, the same object for every method). Returns the final test
    accuracy in % of the averaged model at the last step and after the final pull (seeds x
    methods), and the runs by (seed, method)."""
    variants = {"S-SGD": ("ssgd", {}), **{f"SSD-SGD k={k}": ("ssd_sgd", {**ssd, "period": k}) for k in acc_periods},
                f"SSD-SGD k={kmax}, no warm-up": ("ssd_sgd", {**ssd, "period": kmax, "warmup": 0}),
                f"SSD-SGD k={kmax}, rule none": ("ssd_sgd", {**ssd, "period": kmax, "local_rule": "none"})}
    acc, pulled, runs = {}, {}, {}
    for s in seeds:
        for name, (algo, p) in variants.items():
            r = runs[s, name] = run(
                algo=algo, params=p, name=f"{algo}_" + "_".join(f"{a}{b}" for a, b in p.items()) + f"_{acc_data}_s{s}",
                net="", eval_average=True, **{**common, "data": acc_data, "seed": s})
            acc[(s, name)], pulled[(s, name)] = 100 * end_acc(r), 100 * end_acc(r, pulled=True)
    acc = pd.Series(acc).unstack()[list(variants)]
    acc.index.name = "seed"
    return acc, pd.Series(pulled).unstack()[list(variants)], runs


def decide_accuracy(claims: Claims, runs: Mapping[tuple[int, str], Result], seeds: Sequence[int],
                    acc_periods: Sequence[int], kmax: int) -> None:
    """Decide the accuracy claims on accuracy a - b (points), per test image of the evaluated model
    (the average of the ranks' models at the last step, `accuracy_runs`) over the paired seeds
    (`Claims.decide_paired_accuracy`): S-SGD - SSD-SGD at each k <= 5, and at k = `kmax` SSD-SGD -
    without warm-up and - with the plain local rule."""
    pairs = [(f"acc_close_k{k}", "S-SGD", f"SSD-SGD k={k}") for k in acc_periods]
    pairs += [("warmup_needed", f"SSD-SGD k={kmax}", f"SSD-SGD k={kmax}, no warm-up"),
              ("local_rule_needed", f"SSD-SGD k={kmax}", f"SSD-SGD k={kmax}, rule none")]
    for cid, a, b in pairs:
        claims.decide_paired_accuracy(cid, *([runs[s, m].test_correct("evaluated") for s in seeds] for m in (a, b)), a, b)
    ssgd = [100 * float(runs[s, "S-SGD"].test_correct("evaluated").mean()) for s in seeds]
    sd = float(np.std(ssgd, ddof=1)) if len(ssgd) > 1 else float("nan")
    for k in acc_periods:                          # the margin a pilot gives: S-SGD's own seed spread
        c = claims.claims[f"acc_close_k{k}"]
        c.measured += f"; S-SGD's seed SD {sd:.3g} points"


def runs_at_setting(setting: PaperSetting, common: Mapping[str, Any], ssd: Mapping[str, Any],
                    allocation: Allocation | None = None) -> dict[str, dict[str, Result]] | None:
    """S-SGD and SSD-SGD (k = `PROJ_PERIOD`, `ssd`'s warm-up and local rule), trained like `common`
    on the real network ("real") and on it with the projection's highest latency added
    (`HIGH_LATENCY`), where the runs can span `setting` (`PaperSetting.can_run`: `common`'s
    workers, `allocation`'s nodes) and it names `PROJ_MODEL`; else None (nothing run)."""
    if not (setting.covers(PROJ_MODEL) and setting.can_run(common["nproc"], allocation)):
        return None
    return {label: {"S-SGD": run(algo="ssgd", name=f"ssgd_at_setting_{label}", net=net, **common),
                    "SSD-SGD": run(algo="ssd_sgd", params={**ssd, "period": PROJ_PERIOD},
                                   name=f"ssd_k{PROJ_PERIOD}_at_setting_{label}", net=net, **common)}
            for label, net in (("real", ""), ("high_latency", HIGH_LATENCY))}


def decide_at_setting(claims: Claims, setting: PaperSetting, real: Mapping[str, Mapping[str, Result]] | None,
                      warmup: int) -> bool:
    """Decide `proj_latency_gain_grows` from the runs of `runs_at_setting` where they span `setting`
    (the high-latency ones adding only a latency, `PaperSetting.spanned_by`'s `latency_added`) and
    it names `PROJ_MODEL`: per logged period after SSD-SGD's `warmup`, the speedup S-SGD / SSD-SGD
    with the latency added over that on the real network (`projection.period_ratios`), its median
    and distribution-free interval (`AT_SETTING_STAT`). Returns whether it was decided so."""
    runs = [r for group in (real or {}).values() for r in group.values()]
    spanned, why = setting.spanned_by(runs, latency_added=True)
    if not (spanned and setting.covers(PROJ_MODEL)):
        return False
    speedup = {label: pj.period_ratios(group["S-SGD"], group["SSD-SGD"], after=warmup) for label, group in real.items()}
    pj.decide_at_setting(claims, "proj_latency_gain_grows", (speedup["high_latency"] / speedup["real"]).dropna(), why,
                         f"speedup S-SGD / SSD-SGD (median) {speedup['real'].median():.3f} on the real network, "
                         f"{speedup['high_latency'].median():.3f} with {PROJ_LATENCIES_US[-1]} us added")
    return True


def decide_projection(claims: Claims, profile: Profile, band: RatioBand | None, out: Path,
                      setting: PaperSetting | None = None, real: Mapping[str, Mapping[str, Result]] | None = None,
                      warmup: int = 0) -> tuple[pd.DataFrame, pd.DataFrame]:
    """S-SGD and SSD-SGD (k = 5) projected at the paper's setting on 10 Gbit/s at each latency
    (out/projection.csv, the profile note), and the projected latency claim decided within its band:
    the speedup S-SGD / SSD-SGD at the highest latency / at the lowest; or, where the runs `real`
    span the paper's `setting`, from them (`decide_at_setting`, after `warmup`). Returns the
    projection (with `latency (us)`) and its table per latency (ms per step, speedup, gain)."""
    proj = pj.project(profile, PROJ_CASES, [PROJ_NPROC], list(PROJ_NETS.values()))
    proj["latency (us)"] = proj.net.map({v: k for k, v in PROJ_NETS.items()})
    step = proj.pivot(index="latency (us)", columns="label", values="step_s")
    ssd = f"SSD-SGD k={PROJ_PERIOD}"
    speedup = step["S-SGD"] / step[ssd]
    table = pd.DataFrame({"S-SGD (ms/step)": 1e3 * step["S-SGD"], f"{ssd} (ms/step)": 1e3 * step[ssd],
                          "speedup": speedup, "gain": speedup - 1})
    proj.to_csv(out / "projection.csv", index=False)
    pj.write_profile_note(out / "projection_profile.txt", profile)
    lo_us, hi_us = PROJ_LATENCIES_US[0], PROJ_LATENCIES_US[-1]
    if setting is not None and decide_at_setting(claims, setting, real, warmup):
        return proj, table
    pj.decide(claims, "proj_latency_gain_grows", float(speedup[hi_us] / speedup[lo_us]),
              pj.describe(profile, PROJ_NPROC, "10Gbit"), band,
              "gain " + ", ".join(f"{g:+.0%} at {us} us" for us, g in (speedup - 1).items())
              + f"; largest {speedup.max() - 1:+.0%} (paper: up to +110%, not tested)")
    return proj, table

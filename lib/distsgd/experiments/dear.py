"""Notebook 06 (DeAR, Zhang et al., ICDCS 2023): its benchmark cases, machine checks, trajectory
comparison, per-round ratios and the projection at the paper's scale (64 V100-fp32 workers as
16 nodes x 4, PCIe3 inside, 10GbE or IB-EDR between), with the projected claims' registration and
decisions. Where the notebook's runs span the paper's setting (`verdicts.setting`: its 64 workers
on 16 nodes over the real network, standing for the paper's 10GbE), DeAR's speedup over DDP is
decided from DDP and DeAR trained on the real network instead (`runs_at_setting`); the gain's
shrinking on IB compares two networks and stays projected."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from ..systems import benchmark as bs
from ..verdicts import projection as pj
from ..algorithms.dear import grid_twins
from ..algorithms.tuner import GridTuner
from ..systems.cases import SURVEY_OVERLAP_CASES
from ..systems.bench_checks import machine_precheck
from ..verdicts.claims import Claims, Test
from ..systems.layer_profile import Profile
from ..training.allocation import Allocation
from ..training.results import Result
from ..training.runner import run
from ..systems.timeline.error_band import RatioBand
from ..verdicts.setting import PaperSetting

# the paper's setting, fixed before the projection (not a parameter of the notebook)
PROJ_DEVICE, PROJ_GPUS, PROJ_NODES, PROJ_INTRA = "V100-fp32", 4, 16, "PCIe3"
PROJ_P = PROJ_GPUS * PROJ_NODES                      # 64 workers
PROJ_NPROCS = [8, 16, 32, PROJ_P]
PROJ_NETS = ["10GbE", "IB-EDR"]
PROJ_MODELS = {"resnet50": 64, "bert_base": 64}      # batch per GPU (BERT at sequence length 64)
PROJ_MB = 25.0                                       # DeAR's default threshold; DDP's default buckets
PROJ_TUNE = {"tune": True, "tune_min_mb": 1.0, "tune_max_mb": 100.0, "tune_trials": 10}   # the tuner at the paper's values
NET_ID = {"10GbE": "10gbe", "IB-EDR": "ib_edr"}
PROJ_CASES = [
    {"algo": "no_overlap", "params": {"bucket_mb": PROJ_MB}, "label": "no overlap"},
    *SURVEY_OVERLAP_CASES,
    {"algo": "ddp", "params": {"bucket_mb": PROJ_MB}, "label": "DDP"},
    {"algo": "dear", "params": {"threshold_mb": 0.0, "nearby_layers": 1}, "label": "DeAR w/o TF"},
    {"algo": "dear", "params": {"threshold_mb": PROJ_MB}, "label": "DeAR"},
    {"algo": "dear", "params": PROJ_TUNE, "label": "DeAR tuned"},
]
SENSITIVITY_MB = (1, 2, 5, 10, 25, 50, 100)          # the post-hoc thresholds
AT_SETTING_NET = "10GbE"                             # the paper's network the real one stands for (its 83%)
AT_SETTING_STAT = ("95% interval of the median over the logged periods (median_interval) of DDP / DeAR seconds per "
                   f"step, both at {PROJ_MB:g} MB, trained on the real network")


def paper_setting(value: dict[str, Any] | None, model: str) -> PaperSetting:
    """The paper's setting (`verdicts.setting`): `PROJ_P` workers on `PROJ_NODES` nodes, the real
    network standing for `AT_SETTING_NET` (one of `PROJ_NETS`), the notebook's `model` standing for
    its own claims where it is one of `PROJ_MODELS`; a profile's ``paper_setting`` parameter `value`
    names a stand-in."""
    return PaperSetting.parse(value, PROJ_P, PROJ_NODES, [model] if model in PROJ_MODELS else [], AT_SETTING_NET,
                              PROJ_NETS)


def where(profile: Profile, net: str) -> str:
    """The label of a projected number at the paper's 64 workers on `net` (`projection.describe`)."""
    return pj.describe(profile, PROJ_P, net, PROJ_GPUS, PROJ_INTRA)


UP_TO = ("paper: abstract, \"DeAR achieves up to 83% and 15% training speedup over the state-of-the-art "
         "solutions on a 64-GPU cluster with 10Gb/s Ethernet and 100Gb/s InfiniBand\": DDP / DeAR 1.83 on 10GbE")
SHRINKS = ("null: no difference between the networks, ratio 1 (the paper: 1.15x on 100 Gb/s InfiniBand "
           "against 1.83x on 10GbE)")
FASTER = "null: no difference, DDP / DeAR = 1 (the paper's 1.83x is its 64-GPU cluster's, not this machine's)"
AS_FAST = "null: no difference, 25 MB / tuned = 1 (SPECS f: BO within ~10 trials <= the default)"


def register_claims(claims: Claims, setting: PaperSetting | None = None,
                    allocation: Allocation | None = None) -> tuple[dict[str, Profile], dict[str, RatioBand | None]]:
    """Register the notebook's claims, before any run. Measured (per-round ratios of step times on
    the emulated networks): DDP / DeAR > 1 on 10GbE-like (superiority over the null; the paper's 1.83x
    is its cluster's), the gain on IB-like / on 10GbE-like < 1 (superiority over the null; the paper:
    1.15x vs 1.83x), DeAR 25 MB / DeAR tuned >= 1 (non-inferiority at the null). Projected
    (`projection.register`, each within the simulator's error measured for the same runtime model),
    per model at 64 workers: DDP / DeAR against the paper's "up to 83%" on 10GbE (1.83), the gain
    shrinking on IB-EDR (< 1), and on each network DeAR 25 MB / DeAR tuned >= 1, only where it can
    fail: no grid point of the tuner makes 25 MB's fusion groups (`algorithms.dear.grid_twins`), else
    ValueError. DDP / DeAR of the models `setting` names on its network is measured instead where the
    runs span it (`AT_SETTING_STAT`; its precheck applies only where `allocation`, default this
    process's, cannot). Returns the committed profiles and each projected claim's band (None: not covered)."""
    stat = "median of per-round ratios, 95% quantile_test interval"
    claims.register("dear_vs_ddp_10gbe", "on the comm-bound network DeAR is faster than DDP",
                    "up to 1.83x (64 GPUs, 10GbE)",
                    Test("DDP / DeAR step time, 10GbE-like", ">=", 1.0, stat, form="superiority", source=FASTER))
    claims.register("dear_gain_shrinks_ib", "DeAR's gain over DDP shrinks on the fast network",
                    "1.15x on 100 Gb/s IB vs 1.83x on 10GbE",
                    Test("gain on IB-like / gain on 10GbE-like", "<=", 1.0, stat, form="superiority", source=SHRINKS))
    claims.register("dear_tuned_vs_default", "the tuned threshold is at least as fast as the fixed default (25 MB)",
                    "BO within ~10 trials <= default",
                    Test("DeAR 25 MB / DeAR tuned step time, 10GbE-like", ">=", 1.0, stat, form="non-inferiority",
                         source=AS_FAST))
    profiles = {m: pj.load_profile(m, PROJ_DEVICE, b) for m, b in PROJ_MODELS.items()}
    model = {(label, net): pj.runtime(case, net, PROJ_GPUS, PROJ_INTRA)
             for case in PROJ_CASES for label in [case["label"]] for net in PROJ_NETS}
    bands = {}
    reachable = setting is not None and setting.reachable(allocation or Allocation.detect())
    for m, prof in profiles.items():
        label = {net: where(prof, net) for net in PROJ_NETS}
        at_setting = (setting, AT_SETTING_STAT, reachable) if setting is not None and setting.covers(m, "10GbE") else None
        bands[f"proj_dear_vs_ddp_10gbe_{m}"] = pj.register(
            claims, f"proj_dear_vs_ddp_10gbe_{m}", f"{m} at the paper's scale: DeAR's speedup over DDP on 10GbE "
            "reaches the paper's 83%", "up to 1.83x (64 GPUs, 10GbE)", f"DDP / DeAR step time, {label['10GbE']}",
            ">=", 1.83, "up-to", UP_TO, [(model["DDP", "10GbE"], "10GbE")], [(model["DeAR", "10GbE"], "10GbE")],
            at_setting)
        bands[f"proj_dear_gain_shrinks_ib_{m}"] = pj.register(
            claims, f"proj_dear_gain_shrinks_ib_{m}", f"{m} at the paper's scale: DeAR's gain over DDP shrinks on IB",
            "1.15x on 100 Gb/s IB vs 1.83x on 10GbE",
            f"gain on IB-EDR / gain on 10GbE, gain = DDP / DeAR step time, {label['IB-EDR']}", "<=", 1.0,
            "superiority", SHRINKS, [(model["DDP", "IB-EDR"], "IB-EDR"), (model["DeAR", "10GbE"], "10GbE")],
            [(model["DeAR", "IB-EDR"], "IB-EDR"), (model["DDP", "10GbE"], "10GbE")])
    for m, prof in profiles.items():
        forward = [layer.grad_bytes for layer in reversed(prof.layers)]
        twins = grid_twins(forward, PROJ_MB, PROJ_TUNE["tune_min_mb"], PROJ_TUNE["tune_max_mb"], PROJ_TUNE["tune_trials"])
        if twins:
            raise ValueError(f"{m}: grid points {twins} make 25 MB's fusion groups: tuned >= 25 MB is an identity here")
        for net in PROJ_NETS:
            cid = f"proj_dear_tuned_vs_default_{NET_ID[net]}_{m}"
            bands[cid] = pj.register(
                claims, cid, f"{m} at the paper's scale: DeAR's tuned threshold is at least as fast as 25 MB on {net}",
                "BO within ~10 trials <= default", f"DeAR 25 MB / DeAR tuned (1..100 MB, 10 trials) step time, "
                f"{where(prof, net)}", ">=", 1.0, "non-inferiority", AS_FAST, [(model["DeAR", net], net)],
                [(model["DeAR tuned", net], net)])
    grid = GridTuner(PROJ_TUNE["tune_min_mb"], PROJ_TUNE["tune_max_mb"], PROJ_TUNE["tune_trials"]).candidates
    print("tuner grid (MB):", ", ".join(f"{x:.3g}" for x in sorted(grid)),
          "- no grid point makes 25 MB's fusion groups on either profile: the tuned-vs-default claims can fail")
    return profiles, bands


def design(nproc: int, steps: int, model: str, data: str, bench_model: str, bench_nprocs: list[int],
           bench_batch_size: int, bench_nets: list[str], bench_steps: int, bench_warmup: int, repeats: int,
           threshold_mb: float, tune: dict[str, Any], backend: str,
           paper_setting: dict[str, Any] | None = None) -> dict[str, Any]:
    """What fixes the deciding runs (`Claims.preregister`'s design): the trajectory runs' ranks,
    steps, model and data; the benchmark's model, worker counts, batch, networks, timed and warm-up
    steps, rounds, threshold, tuner and backend; the projection's setting (device, models and
    batches, workers, nodes, networks, DeAR's threshold and tuner); and a profile's stand-in
    `paper_setting` where it names one."""
    return ({"paper_setting": dict(paper_setting)} if paper_setting else {}) | {"nproc": nproc, "steps": steps, "model": model, "data": data, "bench_model": bench_model,
            "bench_nprocs": list(bench_nprocs), "bench_batch_size": bench_batch_size, "bench_nets": list(bench_nets),
            "bench_steps": bench_steps, "bench_warmup": bench_warmup, "repeats": repeats, "threshold_mb": threshold_mb,
            "tune": dict(tune), "backend": backend,
            "projection": {"device": PROJ_DEVICE, "models": PROJ_MODELS, "nprocs": PROJ_NPROCS, "claims_at": PROJ_P,
                           "gpus_per_node": PROJ_GPUS, "intra": PROJ_INTRA, "nets": PROJ_NETS,
                           "threshold_mb": PROJ_MB, "tune": PROJ_TUNE}}


def machine_checks(claims: Claims, model: str, p: int, batch_size: int, steps: int, warmup: int,
                   threshold_mb: float, noise_max: float, max_decoupling: float, backend: str, dry_run: bool,
                   out: Path) -> float:
    """The three machine checks, measured before the benchmark (`bench_checks.machine_precheck`):
    steady clock, emulable networks, and the decoupling cost, the backend's real (reduce-scatter +
    all-gather) / all-reduce time at the fusion-group size and the whole gradient's (DeAR's premise
    is that it is 1, as for NCCL's ring). A failed check marks the timing claims it concerns
    inconclusive (`Claims.precheck`; the tuned-vs-default claim does not depend on the
    decoupling). Returns the decoupling ratio."""
    pre, noise, headroom = machine_precheck([model], [p], out / "precheck.csv", backend, dry_run,
                                            batch_size=batch_size, steps=steps, warmup=warmup)
    headroom = headroom.set_index("net_name")
    grad = int(pre.grad_bytes.iloc[0])
    real = bs.real_collective_times(p, [int(threshold_mb * 1e6), grad], reps=2 if dry_run else 5, backend=backend)
    t_real = real.pivot_table(index="nbytes", columns="kind", values="measured_s")
    decoupling = ((t_real.reduce_scatter + t_real.all_gather) / t_real.all_reduce).max()
    print(f"compute-time CV {noise:.1%} (max {noise_max:.0%}); (reduce-scatter + all-gather) / all-reduce "
          f"{decoupling:.2f} (max {max_decoupling})")
    print(t_real.round(5)); print(headroom.round(5))
    for cid, nets, decoupled in [("dear_vs_ddp_10gbe", ["10GbE-like"], True),
                                 ("dear_gain_shrinks_ib", ["10GbE-like", "IB-like"], True),
                                 ("dear_tuned_vs_default", ["10GbE-like"], False)]:
        why = bs.timing_problem(noise, noise_max, headroom.loc[nets].reset_index(),
                                decoupling if decoupled else 0.0, max_decoupling)
        if why:
            claims.precheck(cid, why)
            print(f"{cid}: inconclusive before measuring ({why})")
    return decoupling


def trajectory_gaps(a: Result, b: Result) -> tuple[float, float, float]:
    """How far run `b` is from run `a` (DeAR from S-SGD: identical by construction): the largest
    |parameter difference| at the end, the largest |train-loss difference| over the logged steps,
    and b's bytes sent / a's."""
    pa, pb = a.state_dict(), b.state_dict()
    param_gap = max((pa[k] - pb[k]).abs().max().item() for k in pa)
    loss_gap = (a.metrics.train_loss - b.metrics.train_loss).abs().max()
    return param_gap, loss_gap, b.summary["comm_bytes"] / a.summary["comm_bytes"]


def check_invariants(claims: Claims, ssgd: Result, dear: Result) -> bool:
    """The invariants (true by construction, not counted as claims): DeAR's trajectory is S-SGD's
    (max |parameter| and |train-loss| differences <= 1e-5, flush included) and it sends S-SGD's
    bytes (ratio 1 +- 1e-3: reduce-scatter + all-gather is one ring all-reduce on the wire).
    Returns whether both hold."""
    param_gap, loss_gap, bytes_ratio = trajectory_gaps(ssgd, dear)
    print(f"max |parameter difference| {param_gap:.1e}, max |train-loss difference| {loss_gap:.1e}, "
          f"bytes ratio {bytes_ratio:.5f}")
    same = claims.invariant("DeAR's trajectory is identical to S-SGD's (flush included)",
                            "max |param diff|, |train-loss diff| <= 1e-5", f"{param_gap:.1e}, {loss_gap:.1e}",
                            param_gap <= 1e-5 and loss_gap <= 1e-5)
    return claims.invariant("zero extra bytes vs all-reduce (groups padded to a multiple of p)",
                            "bytes DeAR / S-SGD = 1 (+-1e-3)", f"{bytes_ratio:.5f}", abs(bytes_ratio - 1) <= 1e-3) and same


def runs_at_setting(setting: PaperSetting, common: dict[str, Any],
                    allocation: Allocation | None = None) -> dict[str, Result] | None:
    """DDP and DeAR, both at the paper's `PROJ_MB` (DDP's buckets, DeAR's fusion threshold), trained
    like the trajectory runs (`common`) on the real network (no emulation) where they can span
    `setting` (`PaperSetting.can_run`: `common`'s workers, `allocation`'s nodes) and it names one of
    `PROJ_MODELS` on 10GbE; else None (nothing run)."""
    if not (any(setting.covers(m, "10GbE") for m in PROJ_MODELS) and setting.can_run(common["nproc"], allocation)):
        return None
    return {"DDP": run(algo="ddp", params={"bucket_mb": PROJ_MB}, name="ddp_at_setting", net="", **common),
            "DeAR": run(algo="dear", params={"threshold_mb": PROJ_MB}, name="dear_at_setting", net="", **common)}


def decide_at_setting(claims: Claims, setting: PaperSetting, real: dict[str, Result] | None) -> list[str]:
    """Decide DDP / DeAR of the models `setting` names (`proj_dear_vs_ddp_10gbe_<model>`, where its
    network is 10GbE) from the runs on the real network (`runs_at_setting`) where they span it:
    the per-period ratio of their seconds per step (`projection.period_ratios`, its median and
    distribution-free interval, `AT_SETTING_STAT`). Returns the claim ids so decided."""
    spanned, why = setting.spanned_by((real or {}).values())
    if not spanned:
        return []
    decided = [f"proj_dear_vs_ddp_10gbe_{m}" for m in PROJ_MODELS if setting.covers(m, "10GbE")]
    for cid in decided:
        pj.decide_at_setting(claims, cid, pj.period_ratios(real["DDP"], real["DeAR"]), why,
                             f"median {1e3 * real['DDP'].steady_step_time():.1f} vs "
                             f"{1e3 * real['DeAR'].steady_step_time():.1f} ms/step")
    return decided


def bench_cases(threshold_mb: float, tune_min_mb: float, tune_max_mb: float, tune_trials: int,
                tune_window: int) -> list[dict[str, Any]]:
    """The benchmark's schedules: DDP and S-SGD fusing at `threshold_mb`, WFBP, DeAR at it, without
    tensor fusion, at the paper's fixed 25 MB, and tuned (its tuning steps, (trials + 1) x window,
    added to the warm-up)."""
    t = threshold_mb
    return [
        {"algo": "ddp", "params": {"bucket_mb": t}, "label": "DDP"},
        {"algo": "ssgd", "params": {"bucket_mb": t}, "label": "S-SGD (fusion)"},
        {"algo": "wfbp", "label": "WFBP (no fusion)"},
        {"algo": "dear", "params": {"threshold_mb": t}, "label": "DeAR"},
        {"algo": "dear", "params": {"threshold_mb": 0.0, "nearby_layers": 1}, "label": "DeAR w/o TF"},
        {"algo": "dear", "params": {"threshold_mb": 25.0}, "label": "DeAR 25 MB"},
        {"algo": "dear", "params": {"tune": True, "tune_min_mb": tune_min_mb, "tune_max_mb": tune_max_mb,
                                    "tune_trials": tune_trials, "tune_window": tune_window},
         "label": "DeAR tuned", "warmup": (tune_trials + 1) * tune_window},
    ]


def round_ratios(bench: pd.DataFrame, p: int) -> tuple[dict[str, pd.Series], pd.DataFrame]:
    """The measured claims' per-round ratios at `p` workers: DDP / DeAR on 10GbE-like, the gain on
    IB-like / on 10GbE-like (each gain DDP / DeAR of the same round), DeAR 25 MB / DeAR tuned on
    10GbE-like; and the gains DDP / DeAR per round (rows) and network (columns)."""
    per = bench[bench.nproc == p].pivot_table(index=["repeat", "net_name"], columns="label", values="step_s")
    gain = (per["DDP"] / per["DeAR"]).unstack("net_name")
    return {"dear_vs_ddp_10gbe": gain["10GbE-like"],
            "dear_gain_shrinks_ib": gain["IB-like"] / gain["10GbE-like"],
            "dear_tuned_vs_default": (per["DeAR 25 MB"] / per["DeAR tuned"]).xs("10GbE-like", level="net_name")}, gain


def decide_projection(claims: Claims, profiles: dict[str, Profile], bands: dict[str, RatioBand | None],
                      out: Path, setting: PaperSetting | None = None,
                      real: dict[str, Result] | None = None) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Project every schedule (`PROJ_CASES`) at 8..64 workers on both networks, decide the projected
    claims at 64 workers within their bands (`projection.decide`; those the runs on the real network
    `real` decide at the paper's `setting` instead, `decide_at_setting`) and write projection.csv, the
    profile notes and the tuner's trials (projection_tuning.csv) to `out`. Returns the projection,
    the tuner's trials (step ms per trial and threshold; model and network in columns), and DeAR against every schedule at 64 workers (`versus_dear`)."""
    proj = pd.concat([pj.project(prof, PROJ_CASES, PROJ_NPROCS, PROJ_NETS, PROJ_GPUS, PROJ_INTRA)
                      for prof in profiles.values()], ignore_index=True)
    proj.drop(columns=["params"]).to_csv(out / "projection.csv", index=False)
    at = proj[proj.nproc == PROJ_P].set_index(["model", "net", "label"]).sort_index()
    tuning = []                                      # the tuner's trials at 64 workers
    measured = decide_at_setting(claims, setting, real) if setting is not None else []
    for m, prof in profiles.items():
        pj.write_profile_note(out / f"projection_profile_{m}.txt", prof)
        step = {net: at.loc[(m, net)].step_s for net in PROJ_NETS}
        gain = {net: step[net]["DDP"] / step[net]["DeAR"] for net in PROJ_NETS}
        ms = lambda net: ", ".join(f"{k} {1e3 * v:.0f} ms" for k, v in step[net].items())   # noqa: E731
        if f"proj_dear_vs_ddp_10gbe_{m}" not in measured:
            pj.decide(claims, f"proj_dear_vs_ddp_10gbe_{m}", gain["10GbE"], where(prof, "10GbE"),
                      bands[f"proj_dear_vs_ddp_10gbe_{m}"], f"step times {ms('10GbE')}")
        pj.decide(claims, f"proj_dear_gain_shrinks_ib_{m}", gain["IB-EDR"] / gain["10GbE"], where(prof, "IB-EDR"),
                  bands[f"proj_dear_gain_shrinks_ib_{m}"],
                  f"gain DDP/DeAR {gain['IB-EDR']:.3f}x on IB-EDR vs {gain['10GbE']:.3f}x on 10GbE; step times {ms('IB-EDR')}")
        for net in PROJ_NETS:
            tuned = pj.simulate_case(prof, PROJ_CASES[-1], PROJ_P, net, PROJ_GPUS, PROJ_INTRA)
            assert tuned.step_s == step[net]["DeAR tuned"]                # the table's row
            tuning.append(pd.DataFrame(tuned.tuning, columns=["threshold_mb", "step_s"]).assign(
                model=m, net=net, trial=range(1, len(tuned.tuning) + 1),
                chosen=lambda d: d.threshold_mb == tuned.params["threshold_mb"]))
            pj.decide(claims, f"proj_dear_tuned_vs_default_{NET_ID[net]}_{m}", step[net]["DeAR"] / step[net]["DeAR tuned"],
                      where(prof, net), bands[f"proj_dear_tuned_vs_default_{NET_ID[net]}_{m}"],
                      f"tuned {tuned.params['threshold_mb']:.3g} MB {1e3 * tuned.step_s:.1f} ms vs 25 MB "
                      f"{1e3 * step[net]['DeAR']:.1f} ms; trials " +
                      ", ".join(f"{x:.3g} MB {1e3 * s:.1f} ms" for x, s in tuned.tuning))
        print(f"{m}: compute {1e3 * prof.compute_s:.0f} ms, DDP / DeAR at {PROJ_P} workers: "
              f"10GbE {gain['10GbE']:.3f}x, IB-EDR {gain['IB-EDR']:.3f}x")
    tuning = pd.concat(tuning, ignore_index=True)
    tuning.to_csv(out / "projection_tuning.csv", index=False)
    trials = (tuning.pivot_table(index=["trial", "threshold_mb"], columns=["model", "net"], values="step_s", sort=False)
              .mul(1e3).rename_axis(columns=["step ms: model", "net"]))
    return proj, trials, versus_dear(at)


def versus_dear(at: pd.DataFrame) -> pd.DataFrame:
    """DeAR against every schedule (rows of `at`, indexed by model, net and label, one worker count):
    each schedule's step time / DeAR's (> 1: DeAR faster), DeAR's own step, compute, throughput and
    efficiency, and DDP / DeAR's compute time (the bound on any schedule's gain over DDP)."""
    vs = at.step_s.unstack("label")
    table = (vs.drop(columns="DeAR").div(vs["DeAR"], axis=0).rename(columns=lambda c: f"{c} / DeAR")
             .join(at.xs("DeAR", level="label")[["step_s", "compute_s", "throughput", "efficiency"]].add_prefix("DeAR ")))
    table["DDP / compute (bound on any gain over DDP)"] = vs["DDP"] / table["DeAR compute_s"]
    return table


def write_traces(out: Path, profiles: dict[str, Profile]) -> list[Path]:
    """Chrome traces (Perfetto, chrome://tracing) of one steady iteration of DeAR and DDP at 64
    workers on 10GbE, per model (`projection.write_trace`)."""
    return [pj.write_trace(out / f"trace_{m}_{case['algo']}_p{PROJ_P}_10GbE.json", prof, case, PROJ_P, "10GbE",
                           PROJ_GPUS, PROJ_INTRA)
            for m, prof in profiles.items() for case in PROJ_CASES if case["label"] in ("DeAR", "DDP")]


def threshold_sensitivity(profiles: dict[str, Profile], out: Path) -> pd.DataFrame:
    """Post hoc (decides nothing): DeAR's projected step time at 64 workers for thresholds of 1 to
    100 MB (`SENSITIVITY_MB`) and DDP's, per model and network (rows: the labels; written to
    out/projection_threshold.csv)."""
    cases = [{"algo": "dear", "params": {"threshold_mb": t}, "label": f"DeAR {t:g} MB"} for t in SENSITIVITY_MB]
    ddp = next(c for c in PROJ_CASES if c["label"] == "DDP")
    sens = pd.concat([pj.project(prof, cases + [ddp], [PROJ_P], PROJ_NETS, PROJ_GPUS, PROJ_INTRA)
                      for prof in profiles.values()])
    sens = sens.pivot_table(index="label", columns=["model", "net"], values="step_s", sort=False)
    sens.to_csv(out / "projection_threshold.csv")
    return sens

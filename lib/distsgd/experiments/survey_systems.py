"""Notebook 07 (the survey's system-level comparison: "Communication-Efficient Distributed Deep
Learning: A Comprehensive Survey", its evaluation of the scheduling methods): the models' roles,
the claims' registration, the machine checks, the per-round ratios, the simulator's check of the
benchmark, and the projection at the survey's own setting (32 V100-fp32 workers as 8 nodes x 4,
PCIe3 inside; 10GbE, 100GbE TCP or IB-EDR between) against its published throughputs. Where the
notebook's benchmark can span the survey's setting (`verdicts.setting`: its 32 workers on 8 nodes
over the real network, standing for the survey's 10GbE), the projected claims on that network are
decided from the benchmark repeated there instead (`bench_at_setting`, `decide_at_setting`), the
notebook's models in the survey's roles by the same rule; the other networks stay projected."""
from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..systems import benchmark as bs
from ..verdicts import projection as pj
from ..systems.cases import SURVEY_BSP_CASE, SURVEY_OVERLAP_CASES, SURVEY_PS_PARTITION_MB
from ..systems.bench_checks import machine_precheck, simulator_predictions
from ..verdicts.claims import Claims, Test
from ..comm import named_net
from ..systems.layer_profile import Profile
from ..systems.timeline import survey, validate as tv
from ..systems.timeline.error_band import RatioBand
from ..training.allocation import Allocation
from ..verdicts.analysis import per_round
from ..verdicts.setting import PaperSetting

# the survey's setting, fixed before the projection (not a parameter of the notebook)
PROJ_DEVICE = "V100-fp32"
PROJ_MODELS = {"resnet50": 64, "densenet201": 32, "bert_base": 64, "bert_large": 8}   # model: batch per GPU
PROJ_P, PROJ_NPROCS = 32, [4, 8, 16, 32]               # the survey's worker counts; claims at 32
PROJ_GPUS_PER_NODE, PROJ_INTRA = 4, "PCIe3"
PROJ_NETS = {"10gbe": "10GbE", "100gbe_tcp": survey.FABRICS["100GbE with TCP/IP"], "ib_edr": "IB-EDR"}   # claim suffix: network
FABRICS = [named_net(spec)[0] for spec in PROJ_NETS.values()]   # the networks' names, as the projection labels them
PROJ_CASES = [
    SURVEY_BSP_CASE,                                                                      # BSP: one 512 MiB buffer
    *SURVEY_OVERLAP_CASES,
    {"algo": "ps", "params": {"bucket_mb": 25.0, "partition_mb": 0.0}, "label": "PS"},
    {"algo": "ps", "params": {"bucket_mb": 25.0, "partition_mb": SURVEY_PS_PARTITION_MB}, "label": "PS + partition"},
]
PROJ_NODES = PROJ_P // PROJ_GPUS_PER_NODE              # 8 nodes of 4 GPUs
AT_SETTING_NET = "10GbE"                               # the survey's network the real one stands for (the headline's)
AT_SETTING_STAT = ("95% interval of the median of per-round ratios (median_interval) of this notebook's benchmark "
                   "repeated across the setting's nodes on the real network (no emulation), its models in the survey's "
                   "roles by the same rule")
ALLREDUCE = ["no overlap", "WFBP", "tensor fusion", "MG-WFBP", "ByteScheduler"]   # the best all-reduce schedule's candidates
PUBLISHED = {"BSP-A2A": "no overlap", "WFBP-A2A": "WFBP", "MG-WFBP": "MG-WFBP"}   # survey method: the kit's label


def bench_networks(models: Sequence[str], net_reference: str, networks: Sequence[str],
                   backend: str) -> dict[str, tuple[float, float] | None]:
    """The benchmark's networks (name: `bs.NETWORKS`' scaling, None for `bs.REAL`: no emulation),
    after checking the parameters: two or more models and the reference from `bs.INPUT_SHAPES`,
    networks including "10GbE-like" (the claims'), a known backend; ValueError otherwise."""
    if len(set(models)) < 2 or not {*models, net_reference} <= set(bs.INPUT_SHAPES):
        raise ValueError(f"models={models}, net_reference={net_reference!r}: two or more models from {sorted(bs.INPUT_SHAPES)}")
    if "10GbE-like" not in networks or not set(networks) <= {*bs.NETWORKS, bs.REAL}:
        raise ValueError(f"networks={networks}: must include '10GbE-like', from {sorted(bs.NETWORKS) + [bs.REAL]}")
    if backend not in bs.BACKENDS:
        raise ValueError(f"backend={backend!r}: one of {bs.BACKENDS}")
    return {n: None if n == bs.REAL else bs.NETWORKS[n] for n in networks}


def roles(stats: pd.DataFrame) -> tuple[str, str]:
    """The models' roles by the rule fixed before anything is timed, from their gradient-tensor
    statistics (`projection.size_stats` columns): many small tensors = the smallest mean gradient
    tensor, large tensors = the largest single gradient tensor. Returns (small, large)."""
    return stats.mean_tensor_mb.idxmin(), stats.largest_tensor_mb.idxmax()


def model_roles(models: Sequence[str]) -> tuple[pd.DataFrame, str, str]:
    """The benchmark models' gradient-tensor statistics (`bs.grad_tensor_bytes`, nothing timed) and
    their roles (`roles`). Returns (statistics per model, small, large)."""
    stats = pd.DataFrame({m: pj.size_stats(bs.grad_tensor_bytes(m)) for m in models}).T
    return (stats, *roles(stats))


NULL = "null: no difference, ratio 1 (the survey states which helps most, not by how much)"
PROJ_CASE = {c["label"]: c for c in PROJ_CASES}
MEASURED_IDS = ("fusion_beats_wfbp", "ps_partition_helps", "ranking_follows_intensity")   # each proj_<id>_<fabric>


def paper_setting(value: dict[str, Any] | None, models: Sequence[str]) -> PaperSetting:
    """The survey's setting (`verdicts.setting`): `PROJ_P` workers on `PROJ_NODES` nodes, the real
    network standing for `AT_SETTING_NET` (one of `FABRICS`); the benchmark's `models` that are the
    survey's own (`PROJ_MODELS`) count as its models, each in the role the notebook's rule gives it
    (`roles`). A profile's ``paper_setting`` parameter `value` names a stand-in (its `models`: the
    benchmark's models that count as the survey's)."""
    return PaperSetting.parse(value, PROJ_P, PROJ_NODES, [m for m in models if m in PROJ_MODELS], AT_SETTING_NET,
                              FABRICS)


def covered(setting: PaperSetting, models: Sequence[str], small_model: str, large_model: str) -> list[str]:
    """The projected claims a benchmark spanning `setting` measures, known before any run: on the
    fabric the setting's network stands for, `proj_fusion_beats_wfbp_<f>` where it names
    `small_model` (the benchmark's many-small-tensors model), `proj_ps_partition_helps_<f>` where
    it names `large_model`, `proj_ranking_follows_intensity_<f>` where it names every one of `models`."""
    ids = []
    for f, spec in PROJ_NETS.items():
        net = named_net(spec)[0]
        for cid, about in zip(MEASURED_IDS, ([small_model], [large_model], list(models))):
            if all(setting.covers(m, net) for m in about):
                ids.append(f"proj_{cid}_{f}")
    return ids


def register_claims(claims: Claims, small_model: str, large_model: str, setting: PaperSetting | None = None,
                    models: Sequence[str] = (), allocation: Allocation | None = None) -> dict[str, RatioBand | None]:
    """Register the notebook's claims before any run, each "better than" (superiority over the null,
    a ratio of 1; the survey gives no size). Measured (per-round ratios on 10GbE-like): WFBP / fusion
    > 1 for `small_model` ("fusion helps most for all-reduce with many small tensors"), PS / PS +
    partition > 1 for `large_model`, and the ranking follows the intensity I = C/D (the smallest
    best-efficiency ratio of I-neighbours, higher-I / lower-I, > 1). Projected (`projection.register`,
    each within the simulator's error measured on real clusters for the same runtime models
    on that fabric, `projection.runtime` of `PROJ_CASES`), the same three at 32 workers on each
    fabric; those a benchmark of `models` spanning `setting` measures (`covered`) are measured
    instead where it does (`AT_SETTING_STAT`; their precheck applies only where `allocation`,
    default this process's, cannot span it). Returns each projected claim's band (None: not covered)."""
    stat = "median of per-round ratios, 95% quantile_test interval"
    claims.register("fusion_beats_wfbp", "tensor fusion beats WFBP for the model with many small tensors (all-reduce)",
                    "fusion helps most for all-reduce with many small tensors",
                    Test(f"WFBP / fusion step time, {small_model} (smallest mean gradient tensor), 10GbE-like", ">=", 1.0,
                         stat, form="superiority", source=NULL))
    claims.register("ps_partition_helps", "partitioning helps the parameter server on the model with large tensors",
                    "partitioning helps most for PS with large tensors",
                    Test(f"PS / PS + partition step time, {large_model} (largest gradient tensor), 10GbE-like", ">=", 1.0,
                         stat, form="superiority", source=NULL))
    claims.register("ranking_follows_intensity", "the ranking (scaling efficiency) follows intensity I = C/D",
                    "higher intensity scales better",
                    Test("min over I-neighbours: best efficiency higher-I / lower-I, 10GbE-like", ">=", 1.0, stat,
                         form="superiority", source=NULL))
    where = f"{PROJ_P} workers, {PROJ_NODES} nodes x {PROJ_GPUS_PER_NODE} ({PROJ_INTRA} inside"
    bands = {}
    measured = covered(setting, models, small_model, large_model) if setting is not None else []
    reachable = bool(measured) and setting.reachable(allocation or Allocation.detect())
    at = lambda cid: (setting, AT_SETTING_STAT, reachable) if cid in measured else None   # noqa: E731
    for f, spec in PROJ_NETS.items():
        net = named_net(spec)[0]
        q = f"projection: {PROJ_DEVICE} (flops-scaled, survey 1-GPU calibration), {where}, {net} between)"
        model = lambda label: pj.runtime(PROJ_CASE[label], spec, PROJ_GPUS_PER_NODE, PROJ_INTRA)   # noqa: E731
        bands[f"proj_fusion_beats_wfbp_{f}"] = pj.register(
            claims, f"proj_fusion_beats_wfbp_{f}", f"tensor fusion beats WFBP for the model with many small tensors ({net}, 32 GPUs)",
            "fusion helps most for all-reduce with many small tensors",
            f"{q}: WFBP / fusion step time, smallest-mean-tensor model", ">=", 1.0, "superiority", NULL,
            [(model("WFBP"), spec)], [(model("tensor fusion"), spec)], at(f"proj_fusion_beats_wfbp_{f}"))
        bands[f"proj_ps_partition_helps_{f}"] = pj.register(
            claims, f"proj_ps_partition_helps_{f}", f"partitioning helps PS on the model with large tensors ({net}, 32 GPUs)",
            "partitioning helps most for PS with large tensors",
            f"{q}: PS / PS + partition step time, largest-tensor model", ">=", 1.0, "superiority", NULL,
            [(model("PS"), spec)], [(model("PS + partition"), spec)], at(f"proj_ps_partition_helps_{f}"))
        # efficiency = compute / step time: higher-I / lower-I efficiency = step(lower-I) / step(higher-I) x compute ratio
        fastest = tuple(model(label) for label in ALLREDUCE)
        bands[f"proj_ranking_follows_intensity_{f}"] = pj.register(
            claims, f"proj_ranking_follows_intensity_{f}", f"the ranking (scaling efficiency) follows I = C/D ({net}, 32 GPUs)",
            "higher intensity scales better",
            f"{q}: min over I-neighbours, best all-reduce efficiency higher-I / lower-I", ">=", 1.0, "superiority", NULL,
            [(fastest, spec)], [(fastest, spec)], at(f"proj_ranking_follows_intensity_{f}"))
    return bands


def design(models: Sequence[str], nprocs: Sequence[int], net_reference: str, batch_size: int, bench_steps: int,
           bench_warmup: int, repeats: int, networks: Sequence[str], backend: str,
           paper_setting: dict[str, Any] | None = None) -> dict[str, Any]:
    """What fixes the deciding runs (`Claims.preregister`'s design): the benchmark's models, worker
    counts, reference model of the networks, batch, timed and warm-up steps, rounds, networks and
    backend; the projection's setting (device, models and batches, workers, nodes, networks); and a
    profile's stand-in `paper_setting` where it names one."""
    return ({"paper_setting": dict(paper_setting)} if paper_setting else {}) | {"models": list(models), "nprocs": list(nprocs), "net_reference": net_reference, "batch_size": batch_size,
            "bench_steps": bench_steps, "bench_warmup": bench_warmup, "repeats": repeats, "networks": list(networks),
            "backend": backend, "projection": {"device": PROJ_DEVICE, "models": PROJ_MODELS, "nprocs": PROJ_NPROCS,
                                              "claims_at": PROJ_P, "gpus_per_node": PROJ_GPUS_PER_NODE,
                                              "intra": PROJ_INTRA, "nets": PROJ_NETS}}


def machine_checks(claims: Claims, models: Sequence[str], p: int, small_model: str, large_model: str,
                   noise_max: float, backend: str, dry_run: bool, out: Path, **bench: Any) -> tuple[pd.DataFrame, list[str]]:
    """The machine checks before the benchmark (`bench_checks.machine_precheck` on the 10GbE-like
    network; `bench`: batch_size, steps, warmup, net_reference): a failed one marks inconclusive the
    claims whose models it concerns. Also the intensity I = C/D of each model (compute-only step
    time per gradient MB), which orders the models for the ranking claim before the benchmark.
    Returns the headroom (indexed by model and network) and the models by increasing I."""
    pre, noise, headroom = machine_precheck(models, [p], out / "precheck.csv", backend, dry_run,
                                            networks={"10GbE-like": bs.NETWORKS["10GbE-like"]}, **bench)
    headroom = headroom.set_index(["model", "net_name"])
    intensity = (pre[pre.net_name == "none"].groupby("model").step_s.median()
                 / pre.groupby("model").grad_bytes.first() * 1e6).rename("I (s per MB)")
    by_intensity = list(intensity.sort_values().index)
    print(f"compute-time CV {noise:.1%} (max {noise_max:.0%}); models by intensity: {' < '.join(by_intensity)}")
    print(intensity); print(headroom.round(5))
    for cid, needed in [("fusion_beats_wfbp", [small_model]), ("ps_partition_helps", [large_model]),
                        ("ranking_follows_intensity", list(models))]:
        why = bs.timing_problem(noise, noise_max, headroom.loc[needed].reset_index())
        if why:
            claims.precheck(cid, why)
            print(f"{cid}: inconclusive before measuring ({why})")
    return headroom, by_intensity


def round_ratios(bench: pd.DataFrame, p: int, small_model: str, large_model: str,
                 by_intensity: Sequence[str], net_name: str = "10GbE-like") -> dict[str, tuple[pd.Series, str]]:
    """The measured claims' per-round ratios at `p` workers on the benchmark's network `net_name`,
    each with the text that names it: WFBP / fusion of `small_model`, PS / PS + partition of
    `large_model`, and the smallest ratio of best all-reduce efficiencies (compute / fastest
    all-reduce schedule's step) of intensity neighbours, higher-I / lower-I."""
    ten = bench[(bench.nproc == p) & (bench.net_name == net_name)]
    per = ten.pivot_table(index=["repeat", "model"], columns="label", values="step_s")
    best_eff = (ten.groupby("model").compute_s.first() / per[ALLREDUCE].min(axis=1)).unstack("model")
    ranking = pd.concat([best_eff[hi] / best_eff[lo] for lo, hi in zip(by_intensity, by_intensity[1:])], axis=1).min(axis=1)
    return {"fusion_beats_wfbp": ((per["WFBP"] / per["tensor fusion"]).xs(small_model, level="model"),
                                  f"{small_model} WFBP / fusion"),
            "ps_partition_helps": ((per["PS"] / per["PS + partition"]).xs(large_model, level="model"),
                                   f"{large_model} PS / PS + partition"),
            "ranking_follows_intensity": (ranking, "by I: " + " < ".join(by_intensity) + "; best efficiency (median) "
                                          + ", ".join(f"{m} {best_eff[m].median():.2f}" for m in by_intensity))}


def bench_at_setting(setting: PaperSetting, measured: Sequence[str], models: Sequence[str],
                     cases: Sequence[dict[str, Any]], out: Path, allocation: Allocation | None = None,
                     **bench: Any) -> pd.DataFrame | None:
    """The benchmark of `models` and `cases` repeated at the survey's `setting`: its workers on the
    real network (`bs.REAL`, no emulation), started as a run's ranks are (one srun step across the
    job's nodes; `bench`: batch_size, steps, warmup, repeats, backend of `bs.bench_schedules`), its
    rows written to `out`; only where some claim is `measured` there (`covered`) and the runs can
    span it (`PaperSetting.can_run`: `allocation`, default this process's), else None (nothing run)."""
    if not measured:
        print("at the survey's setting: no projected claim is about this benchmark's models "
              f"({', '.join(models)}; paper_setting names {', '.join(setting.models) or 'none'})")
        return None
    if not setting.can_run(setting.nproc, allocation):
        print(f"at the survey's setting: not run, this allocation cannot span {setting.describe()}")
        return None
    return bs.bench_schedules(models=list(models), cases=list(cases), nprocs=[setting.nproc], networks={bs.REAL: None},
                              out=out, **bench)


def decide_at_setting(claims: Claims, setting: PaperSetting, bench: pd.DataFrame | None, measured: Sequence[str],
                      small_model: str, large_model: str, by_intensity: Sequence[str]) -> list[str]:
    """Decide the projected claims `measured` (`covered`) from the benchmark at the survey's setting
    (`bench_at_setting`) where its timings span it (`PaperSetting.spanned_by_benchmark`): the
    measured claim's per-round ratios on the real network (`round_ratios`), their median and
    distribution-free interval (`AT_SETTING_STAT`). Returns the claim ids so decided."""
    if bench is None:
        return []
    spanned, why = setting.spanned_by_benchmark(bench)
    if not spanned:
        print(f"at the survey's setting: the benchmark did not span it ({why}); the claims stay projected")
        return []
    p = int(bench.nproc.max())
    ratios = round_ratios(bench, p, small_model, large_model, by_intensity, bs.REAL)
    decided = []
    for cid in measured:
        base = next(m for m in MEASURED_IDS if cid.startswith(f"proj_{m}_"))
        r, what = ratios[base]
        pj.decide_at_setting(claims, cid, r.dropna(), why, f"{what}, p = {p}, {bench.backend.iloc[0]}, on "
                             f"{bench.hosts.iloc[0]}; per round {per_round(r.dropna())}", unit="rounds")
        decided.append(cid)
    return decided


def simulator_check(bench: pd.DataFrame, models: Sequence[str], cases: Sequence[dict[str, Any]],
                    headroom: pd.DataFrame, backend: str, warmup: int, steps: int, dry_run: bool,
                    out: Path) -> pd.DataFrame:
    """The simulator's prediction of every measured step (`bench_checks.simulator_predictions`; the real
    network fitted on 64 KiB .. the whole gradient, 4x apart) with `emulable`: the real network, or
    an emulated one the precheck found emulable for that model (other emulated networks unchecked);
    written to out/validation.csv, every pair printed (`validate.report`)."""
    top = int(bench.grad_bytes.max())
    sizes = sorted({4**k for k in range(8, 16) if 4**k < top} | {top})
    val = simulator_predictions(bench, models, cases, sorted(bench.nproc.unique()), backend, warmup, steps,
                                sizes, 2 if dry_run else 5, out)
    emulable = headroom.emulable.to_dict()          # the precheck's (model, 10GbE-like)
    val["emulable"] = [n == bs.REAL or bool(emulable.get((m, n), False)) for m, n in zip(val.model, val.net_name)]
    val.to_csv(out / "validation.csv", index=False)
    print(tv.report(val, tv.RESOLUTION))
    return val


def projection_roles(out: Path) -> tuple[dict[str, Profile], pd.DataFrame, str, str, list[str]]:
    """The committed profiles of the survey's models (`PROJ_MODELS`, notes written to `out`), their
    gradient-tensor statistics and intensity (`projection.tensor_stats`), and the roles by the same
    rule as the benchmark's (`roles`) and the models by increasing intensity, all known before any
    step time is projected. Returns (profiles, statistics, small, large, by intensity)."""
    profiles = {m: pj.load_profile(m, PROJ_DEVICE, b) for m, b in PROJ_MODELS.items()}
    stats = pd.DataFrame({m: pj.tensor_stats(p) for m, p in profiles.items()}).T
    by_i = list(stats.intensity_ms_per_mb.sort_values().index)
    for m, p in profiles.items():
        pj.write_profile_note(out / f"projection_profile_{m}.txt", p)
    small, large = roles(stats)
    print(f"many small tensors: {small}; large tensors: {large}; by intensity: {' < '.join(by_i)}")
    return profiles, stats, small, large, by_i


def decide_projection(claims: Claims, bands: dict[str, RatioBand | None], profiles: dict[str, Profile],
                      small_model: str, large_model: str, by_i: Sequence[str],
                      out: Path, measured: Sequence[str] = ()) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Project every method (`PROJ_CASES`) at 4..32 workers on each fabric (out/projection.csv) and
    decide the projected claims at 32 workers within their bands, but those decided at the survey's
    setting (`measured`, `decide_at_setting`): WFBP / fusion of `small_model`, PS / PS + partition
    of `large_model`, the smallest best all-reduce efficiency ratio of intensity neighbours
    (`by_i`), higher-I / lower-I. Returns the projection (`fabric`: the network's name) and the
    efficiency of every method at 32 workers (rows: fabric and model)."""
    proj = pd.concat([pj.project(p, PROJ_CASES, PROJ_NPROCS, list(PROJ_NETS.values()), PROJ_GPUS_PER_NODE, PROJ_INTRA)
                      .assign(fabric=lambda d: d.net) for p in profiles.values()],   # the sweep labels each network by its name
                     ignore_index=True)
    proj.drop(columns=["params"]).to_csv(out / "projection.csv", index=False)
    at = proj[proj.nproc == PROJ_P].set_index(["fabric", "model", "label"])
    for f, spec in PROJ_NETS.items():
        net = named_net(spec)[0]
        step, eff = at.loc[net].step_s, at.loc[net].efficiency
        lab = lambda m: pj.describe(profiles[m], PROJ_P, net, PROJ_GPUS_PER_NODE, PROJ_INTRA)   # noqa: E731
        if f"proj_fusion_beats_wfbp_{f}" not in measured:
            r = step[(small_model, "WFBP")] / step[(small_model, "tensor fusion")]
            pj.decide(claims, f"proj_fusion_beats_wfbp_{f}", r, lab(small_model), bands[f"proj_fusion_beats_wfbp_{f}"],
                      f"WFBP {1e3 * step[(small_model, 'WFBP')]:.1f} ms, fusion {1e3 * step[(small_model, 'tensor fusion')]:.1f} ms")
        if f"proj_ps_partition_helps_{f}" not in measured:
            r = step[(large_model, "PS")] / step[(large_model, "PS + partition")]
            pj.decide(claims, f"proj_ps_partition_helps_{f}", r, lab(large_model), bands[f"proj_ps_partition_helps_{f}"],
                      f"PS {1e3 * step[(large_model, 'PS')]:.1f} ms, PS + partition {1e3 * step[(large_model, 'PS + partition')]:.1f} ms")
        if f"proj_ranking_follows_intensity_{f}" not in measured:
            best = {m: eff[m][ALLREDUCE].max() for m in by_i}
            r, lo, hi = min((best[hi] / best[lo], lo, hi) for lo, hi in zip(by_i, by_i[1:]))
            label = "projection: " + ", ".join(f"{m} b{profiles[m].batch_size}" for m in by_i) + " on " + lab(by_i[0]).split(" on ", 1)[1]
            pj.decide(claims, f"proj_ranking_follows_intensity_{f}", r, label, bands[f"proj_ranking_follows_intensity_{f}"],
                      f"by I: {' < '.join(by_i)}; best efficiency " + ", ".join(f"{m} {best[m]:.2f}" for m in by_i)
                      + f"; smallest neighbour ratio {hi}/{lo}")
    return proj, at.efficiency.unstack("label")[ALLREDUCE + ["PS", "PS + partition"]]


def versus_published(proj: pd.DataFrame, out: Path) -> pd.DataFrame:
    """The projected throughput at 32 workers against the survey's published one (`PUBLISHED`:
    BSP-A2A, WFBP-A2A and MG-WFBP per fabric and model, from `timeline.survey`'s measured table),
    with projected / published; written to out/projection_vs_published.csv."""
    at = proj[proj.nproc == PROJ_P].set_index(["fabric", "model", "label"])
    fabric = {c: named_net(spec)[0] for c, spec in survey.FABRICS.items()}
    rows = survey.load_measured().query("nproc == @PROJ_P and method in @PUBLISHED")
    check = pd.DataFrame({"fabric": rows.connection.map(fabric), "model": rows.model.map(survey.MODELS),
                          "method": rows.method.map(PUBLISHED), "published": rows.throughput})
    order = {key: i for i, key in enumerate([*FABRICS, *survey.MODELS.values(), *PUBLISHED.values()])}
    check = check.sort_values(["fabric", "model", "method"], key=lambda c: c.map(order), ignore_index=True)
    check["projected"] = [at.throughput[key] for key in zip(check.fabric, check.model, check.method)]
    check["projected / published"] = check.projected / check.published
    check.to_csv(out / "projection_vs_published.csv", index=False)
    return check

"""Notebook 10 (the kit's own systems benchmark, no paper): its parameters, the machine checks, the
benchmark through the command line, the simulator's check of it and of the committed validation
runs, the projection at the papers' setting (V100-fp32 profiles, 32 and 64 workers, 10GbE and
IB-EDR) with its invariants, and the overlap claim's decision."""
from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ..systems import benchmark as bs
from ..verdicts import projection as pj
from ..systems.cases import SURVEY_BSP_CASE, SURVEY_OVERLAP_CASES, SURVEY_PS_PARTITION_MB
from ..systems.bench_checks import machine_precheck, simulator_predictions
from ..verdicts.analysis import decide_median_ratio
from ..verdicts.claims import Claims
from ..paths import repo_root
from ..systems.timeline import public_tables, survey, validate as tv

# the projection's setting, the same in every profile; the survey's settings (timeline.survey): BSP's 512 MiB
# buffer, Horovod's 64 MB fusion, ByteScheduler 4 MB / 16 MB, BytePS's 4,096,000-byte partitions; DDP and DeAR
# at their papers' 25 MB
PROJ_DEVICE, PROJ_MODELS, PROJ_NPROCS, PROJ_NETS = "V100-fp32", {"resnet50": 64, "bert_base": 64}, [32, 64], ["10GbE", "IB-EDR"]
PROJ_SWEEP = [2, 4, 8, 16, 32, 64]                   # the worker counts drawn; the invariants at PROJ_NPROCS
PROJ_CASES = [SURVEY_BSP_CASE, *SURVEY_OVERLAP_CASES,
              {"algo": "ps", "label": "PS"},
              {"algo": "ps", "params": {"partition_mb": SURVEY_PS_PARTITION_MB}, "label": "PS + partition"},
              {"algo": "ddp", "label": "DDP"}, {"algo": "dear", "label": "DeAR"}]
FIDELITY_BAND = (0.97, 1.3)                          # an emulated collective's measured / modeled time, >= 1 MiB


def as_list(value: Any) -> list[str]:
    """A list parameter, given as a list or as a comma-separated string."""
    return [str(v).strip() for v in (value if isinstance(value, (list, tuple)) else str(value).split(",")) if str(v).strip()]


def check_parameters(models: Any, nprocs: Any) -> tuple[list[str], list[int]]:
    """The benchmark's models (a subset of `bs.INPUT_SHAPES`) and worker counts (each >= 2), given as
    lists or comma-separated strings; ValueError otherwise."""
    model_list, p_list = as_list(models), [int(p) for p in as_list(nprocs)]
    if not model_list or not set(model_list) <= set(bs.INPUT_SHAPES):
        raise ValueError(f"models={models!r}: a comma-separated subset of {sorted(bs.INPUT_SHAPES)}")
    if not p_list or min(p_list) < 2:
        raise ValueError(f"nprocs={nprocs!r}: comma-separated worker counts, each >= 2")
    return model_list, p_list


def machine_checks(claims: Claims, models: Sequence[str], nprocs: Sequence[int], steps: int, warmup: int,
                   noise_max: float, backend: str, dry_run: bool, out: Path) -> list[tuple[str, int]]:
    """The machine checks before the benchmark (`bench_checks.machine_precheck` on the 10GbE-like
    network): the overlap claim is inconclusive if the clock is not steady or no (model, p) can be
    emulated. Returns the emulable (model, p), fixed before the benchmark."""
    _, noise, headroom = machine_precheck(models, nprocs, out / "precheck.csv", backend, dry_run,
                                          networks={"10GbE-like": bs.NETWORKS["10GbE-like"]}, steps=steps, warmup=warmup)
    ok = list(headroom[headroom.emulable].set_index(["model", "nproc"]).index)
    print(f"compute-time CV {noise:.1%} (max {noise_max:.0%}); emulable (model, p): {ok}")
    print(headroom.round(5))
    if noise > noise_max:
        claims.precheck("overlap_beats_no_overlap", f"compute-time CV {noise:.0%} > {noise_max:.0%}: the clock was "
                        "not steady (other work, or a shared virtual CPU)")
    elif not ok:
        claims.precheck("overlap_beats_no_overlap", "no model and p whose 10GbE-like network can be emulated here: "
                        + "; ".join(f"{r.model} p={r.nproc}: real {1e3 * r.real_s:.1f} ms vs modeled {1e3 * r.modeled_s:.1f} ms"
                                    for r in headroom.itertuples()))
    return ok


def bench_command(models: Sequence[str], nprocs: Sequence[int], backend: str, nets: Sequence[str], reps: int,
                  steps: int, warmup: int, csv: Path) -> list[str]:
    """The command line of the benchmark (`python -m distsgd bench`), as a user runs it."""
    return [sys.executable, "-m", "distsgd", "bench", "--models", ",".join(models),
            "--nprocs", ",".join(map(str, nprocs)), "--backend", backend, "--nets", ",".join(nets),
            "--reps", str(reps), "--steps", str(steps), "--warmup", str(warmup), "--csv", str(csv)]


def run_bench(models: Sequence[str], nprocs: Sequence[int], backend: str, nets: Sequence[str], reps: int,
              steps: int, warmup: int, csv: Path) -> pd.DataFrame:
    """Run the benchmark through its command line (`bench_command`) and read its rows from `csv`."""
    subprocess.run(bench_command(models, nprocs, backend, nets, reps, steps, warmup, csv), check=True)
    return pd.read_csv(csv)


def simulator_check(bench: pd.DataFrame, models: Sequence[str], nprocs: Sequence[int], ok: Sequence[tuple[str, int]],
                    backend: str, warmup: int, steps: int, dry_run: bool, out: Path) -> pd.DataFrame:
    """The simulator's prediction of every measured step (`bench_checks.simulator_predictions` with every
    schedule, `bs.DEFAULT_CASES`; the real network fitted on 1..64 MiB and the gradients' sizes, 10
    repetitions, 2 in a dry run), with `emulable`: the real network, or 10GbE-like where the
    precheck found (model, p) emulable (`ok`); written to out/validation.csv, every pair printed."""
    sizes = sorted({2**20, 2**22, 2**24, 2**26} | {int(b) for b in bench.grad_bytes.unique()})
    val = simulator_predictions(bench, models, bs.DEFAULT_CASES, nprocs, backend, warmup, steps, sizes,
                                2 if dry_run else 10, out)
    val["emulable"] = [n == bs.REAL or ((m, p) in ok and n == "10GbE-like")
                       for m, p, n in zip(val.model, val.nproc, val.net_name)]
    val.to_csv(out / "validation.csv", index=False)
    print(tv.report(val, tv.RESOLUTION))
    return val


def show_timeline_validation(out: Path, path: Path | None = None) -> pd.DataFrame | None:
    """The committed validation run (`make validate`: figures/10_systems_benchmark/timeline_validation.csv
    unless `path`): its machine, load and overheads, how many pairs are within the simulator's
    resolution (validated ones and all), every pair, and its plot (out/timeline_validation.png).
    None, saying so, where there is none."""
    path = path or repo_root() / "figures" / "10_systems_benchmark" / "timeline_validation.csv"
    if not path.exists():
        print(f"no validation run yet: make validate writes {path}")
        return None
    table = pd.read_csv(path)
    within = (table.residual.abs() <= tv.RESOLUTION)
    validated = table["validated"] if "validated" in table else table["emulable"]
    print(f"{table.machine.iloc[0]}, {table.date.iloc[0]}, load average {table.load_start.iloc[0]:.2f} -> "
          f"{table.load_end.iloc[0]:.2f}; overheads: issue {1e6 * table.issue_s.iloc[0]:.1f} us, "
          f"copy {table.copy_Bps.iloc[0] / 1e9:.2f} GB/s")
    print(f"validated pairs: {(within & validated).sum()} of {validated.sum()} within ±{tv.RESOLUTION:.0%}; "
          f"all pairs: {within.sum()} of {len(table)}")
    print(tv.report(table, tv.RESOLUTION))
    tv.plot(table, out / "timeline_validation.png", "make validate: simulator vs benchmark")
    return table


def show_gpu_validation(out: Path, path: Path | None = None) -> pd.DataFrame | None:
    """The committed GPU check (`reproduce/gpu_check.py`: figures/10_systems_benchmark/gpu_validation.csv
    unless `path`): per model, how many pairs are within the simulator's resolution, every pair, and
    its plot (out/gpu_validation.png). None, saying so, where there is none."""
    path = path or repo_root() / "figures" / "10_systems_benchmark" / "gpu_validation.csv"
    if not path.exists():
        print("no GPU check committed: python reproduce/gpu_check.py OUT on a GPU writes OUT/gpu_validation.csv")
        return None
    table = pd.read_csv(path).drop(columns=["validated"], errors="ignore")
    print(table.machine.iloc[0])
    for model, g in table.groupby("model", sort=False):
        within = g.residual.abs() <= tv.RESOLUTION
        print(f"{model}: {within.sum()} of {len(g)} pairs within ±{tv.RESOLUTION:.0%} ({g.run.iloc[0]})")
    print(tv.report(table, tv.RESOLUTION))
    tv.plot(table, out / "gpu_validation.png", f"{table.device.iloc[0]}, p = 1, NCCL: profile vs step",
            label="reported (one GPU)")
    return table


def show_survey_error(out: Path) -> pd.DataFrame:
    """The simulator's committed error on the survey's real cluster (`timeline.survey`,
    reproduce/validation/survey_error.csv): median and max |error| per p range, fabric and schedule
    family, and predicted vs measured per row (out/survey_error.png). Returns the summary."""
    table = survey.load_error()
    survey.plot(table, out / "survey_error.png")
    return survey.summary(table)


def show_public_error() -> pd.DataFrame:
    """The simulator's committed error on every public real-cluster table (`timeline.public_tables`,
    reproduce/validation/public_error.csv, and the survey's 32-GPU rows): median and max |error| of the
    held-out rows per table and schedule, and per schedule over all tables, against the targets."""
    return public_tables.summary(public_tables.load_error())


def project_with_invariants(claims: Claims, out: Path) -> pd.DataFrame:
    """Every schedule (`PROJ_CASES`) projected on the committed profiles (`PROJ_MODELS`) at 2..64
    workers on 10GbE and IB-EDR (out/projection.csv and the profile notes), and at 32 and 64
    workers the simulator's invariant: the best overlapping schedule's step is no longer than no
    overlap's (`Claims.invariant`, one per model, network and p). Returns the projection."""
    profiles = {m: pj.load_profile(m, PROJ_DEVICE, b) for m, b in PROJ_MODELS.items()}
    proj = pd.concat([pj.project(prof, PROJ_CASES, PROJ_SWEEP, PROJ_NETS) for prof in profiles.values()],
                     ignore_index=True)
    proj.drop(columns=["params"]).to_csv(out / "projection.csv", index=False)
    for m, prof in profiles.items():
        pj.write_profile_note(out / f"projection_profile_{m}.txt", prof)
        for net in PROJ_NETS:
            for p in PROJ_NPROCS:
                rows = proj[(proj.model == prof.model) & (proj.net == net) & (proj.nproc == p)].set_index("label")
                best = rows.drop(index="no overlap").step_s
                ratio = rows.step_s["no overlap"] / best.min()
                claims.invariant(f"simulator, {pj.describe(prof, p, net)}: the best overlapping schedule's step is "
                                 "no longer than no overlap's", "no-overlap / best overlapping step time >= 1",
                                 f"{ratio:.2f} (no overlap {1e3 * rows.step_s['no overlap']:.1f} ms, best {best.idxmin()} "
                                 f"{1e3 * best.min():.1f} ms)", bool(ratio >= 1))
    return proj


def check_emulation(claims: Claims, fidelity: pd.DataFrame) -> bool:
    """The emulation's invariant (a check of the kit, not a claim): every emulated collective of 1 MiB
    or more (`bs.emulation_fidelity` rows) takes its modeled time, measured / modeled within
    `FIDELITY_BAND`. Returns whether it holds."""
    big = fidelity[fidelity.nbytes >= 2**20]
    lo, hi = FIDELITY_BAND
    return claims.invariant("an emulated collective takes its modeled time (messages >= 1 MiB; a check of our emulation)",
                            f"measured / modeled in [{lo}, {hi}]", f"{big.ratio.min():.2f} .. {big.ratio.max():.2f}",
                            bool(((big.ratio >= lo) & (big.ratio <= hi)).all()))


def decide_overlap(claims: Claims, bench: pd.DataFrame, ok: Sequence[tuple[str, int]]) -> str:
    """Decide `overlap_beats_no_overlap` on its per-round ratios (`analysis.decide_median_ratio`): per
    round, the smallest over the emulable (model, p) (`ok`; all of them where none is, and the
    precheck decides) of no-overlap / the best overlapping schedule's step time on 10GbE-like.
    Returns the verdict."""
    ten = bench[(bench.net_name == "10GbE-like") & (bench.label != "compute")]
    per = ten.pivot_table(index=["repeat", "model", "nproc"], columns="label", values="step_s")
    overlap = [c for c in per.columns if c != "no overlap"]
    gain = (per["no overlap"] / per[overlap].min(axis=1)).unstack(["model", "nproc"])
    tested = [k for k in gain.columns if k in ok] or list(gain.columns)
    return decide_median_ratio(claims, "overlap_beats_no_overlap", gain[tested].min(axis=1), "",
                               "; median no-overlap / best per (model, p): "
                               + ", ".join(f"{m} p={p} {gain[m, p].median():.2f}" + ("" if (m, p) in ok else " (not emulable here)")
                                           for m, p in gain.columns))

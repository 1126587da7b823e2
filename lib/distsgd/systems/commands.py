"""The commands of the systems side: `bench`, `profile`, `simulate`, `validate-run` (`distsgd.cli`
dispatches).

`register(sub)` adds their parsers to the command line's subparsers and returns each command's
handler: the schedule benchmark and its modes (`benchmark`, `emulation_check` for --validate-emulation,
`timeline.sweep` for --sweep), a layer profile (`profiler`), the simulator's what-if (`whatif`), a
finished run against the simulator's prediction, recorded in the validation table (`run_validation`)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from ..algorithms.registry import DEFAULT
from ..training.config import parse_assignments
from ..errors import ConfigError


def register(sub: "argparse._SubParsersAction") -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add the parsers of bench, profile, simulate and validate-run to `sub`; their handlers by name."""
    b = sub.add_parser("bench", help="benchmarks; --validate-emulation: the emulated network vs a "
                                     "real shaped one (root: network namespaces + tc tbf)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    b.add_argument("--validate-emulation", action="store_true",
                   help="time collectives over p shaped namespaces and under Comm's emulation")
    b.add_argument("--sweep", action="store_true",
                   help="time the simulator: every algorithm x 3 models x p = 2..1024 x 3 networks "
                        "(distsgd.systems.timeline.sweep.time_sweep)")
    b.add_argument("--hook-overlap", action="store_true",
                   help="DDP + the top-k compression hook returning its pending future vs a finished one "
                        "(distsgd.systems.benchmark.hook_overlap; --nproc, --models' first, --reps, --steps)")
    b.add_argument("--nproc", type=int, default=4, help="hosts / ranks p")
    b.add_argument("--bandwidth", default="200Mbit", help="per-host bandwidth of both sides")
    b.add_argument("--sizes", default="1,8", help="message sizes in MiB, comma separated")
    b.add_argument("--reps", type=int, default=3, help="repetitions (the median is reported)")
    b.add_argument("--tolerance", type=float, default=0.15, help="allowed relative difference")
    add_schedule_bench_args(b)

    p = sub.add_parser("profile", help="per-layer forward/backward/update times and gradient bytes in "
                                       "backward order (distsgd.systems.profiler), written as a tidy CSV",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_profile_args(p)
    add_simulate_parser(sub)
    add_validate_run_parser(sub)

    return {"bench": cmd_bench, "profile": cmd_profile, "simulate": cmd_simulate, "validate-run": cmd_validate_run}


def cmd_bench(args: argparse.Namespace) -> int:
    """`python -m distsgd bench`: the schedule benchmark, or one of its modes (--sweep,
    --hook-overlap, --validate-emulation)."""
    if args.sweep:
        return cmd_bench_sweep()
    if args.hook_overlap:
        return cmd_bench_hook_overlap(args)
    if args.validate_emulation:
        from .emulation_check import main as bench_main
        return bench_main(args)
    return cmd_bench_schedules(args)


def add_schedule_bench_args(b: argparse.ArgumentParser) -> None:
    """Options of `bench` without --validate-emulation: the schedule benchmark."""
    g = b.add_argument_group("schedule benchmark (without --validate-emulation)")
    g.add_argument("--models", default="mlp,transformer", help="comma-separated: mlp, resnet18, transformer, bert_base")
    g.add_argument("--algos", default="",
                   help="comma-separated schedule labels to keep (default: all of "
                        "distsgd.systems.cases.DEFAULT_CASES)")
    g.add_argument("--nprocs", default="2,4", help="comma-separated worker counts p (--launcher env: the job's)")
    g.add_argument("--nets", default="",
                   help="comma-separated networks: 10GbE-like, IB-like (emulated, scaled to the measured "
                        "compute), real (no emulation); default: the two emulated ones, and real with nccl")
    g.add_argument("--backend", default="gloo", choices=["gloo", "nccl"],
                   help="nccl: one GPU per rank (cuda:LOCAL_RANK)")
    g.add_argument("--launcher", default="auto", choices=["auto", "spawn", "srun", "env"],
                   help="spawn: local ranks; srun: one srun step per p across this SLURM job's nodes; env: "
                        "this process is a rank of torchrun/srun (auto: as a run's, env when RANK and "
                        "WORLD_SIZE are set, srun in a job of several nodes, else spawn)")
    g.add_argument("--steps", type=int, default=8, help="timed iterations per case")
    g.add_argument("--warmup", type=int, default=3, help="untimed iterations per case")
    g.add_argument("--batch-size", type=int, default=16, help="per rank")
    g.add_argument("--csv", default="bench_schedules.csv", help="the tidy CSV, appended row by row as measured")


def _bench_cases(algos: str) -> list[dict]:
    """The cases of DEFAULT_CASES named (label or algorithm) in the comma-separated `algos`."""
    from .cases import DEFAULT_CASES

    keep = [a.strip() for a in algos.split(",") if a.strip()]
    known = {c["label"] for c in DEFAULT_CASES} | {c["algo"] for c in DEFAULT_CASES}
    for name in keep:
        if name not in known:
            raise ConfigError("algos", name, sorted(known))
    return [c for c in DEFAULT_CASES if not keep or c["label"] in keep or c["algo"] in keep]


def _bench_networks(nets: str, backend: str) -> dict[str, tuple[float, float] | None]:
    """The networks named in the comma-separated `nets` (default: see --nets)."""
    from .benchmark import NETWORKS, REAL

    known = {**NETWORKS, REAL: None}
    names = [n.strip() for n in nets.split(",") if n.strip()] or \
        ([REAL] if backend == "nccl" else []) + list(NETWORKS)
    for name in names:
        if name not in known:
            raise ConfigError("nets", name, sorted(known))
    return {name: known[name] for name in names}


def add_simulate_parser(sub: "argparse._SubParsersAction") -> None:
    """`simulate`: the timeline simulator over algorithms x worker counts x networks, on a
    committed profile or on your own compute and network (`distsgd.systems.whatif`)."""
    m = sub.add_parser("simulate", help="predict step times from a layer profile (distsgd.systems.timeline); "
                                        "what-if for your own cluster (distsgd.systems.whatif)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    c = m.add_argument_group("your compute")
    c.add_argument("--model", default="",
                   help="resnet50, densenet201, vgg16, bert_base, bert_large (a committed profile of that batch "
                        "and input, else built from FLOPs), or a model with a profile in "
                        "reproduce/layer_profiles/<device>/<model>_b*.csv")
    c.add_argument("--device", default="cpu", help="profile device folder: cpu, cuda, V100-fp32, ...")
    c.add_argument("--batch-size", type=int, default=None, help="samples per worker and iteration")
    c.add_argument("--seq-len", type=int, default=None, help="tokens per sample of bert_base/bert_large (None: 64)")
    c.add_argument("--iter-time", type=float, default=None, metavar="S",
                   help="your measured single-device seconds per iteration at --batch-size: the profile's "
                        "per-layer times are scaled to sum to S")
    c.add_argument("--throughput", type=float, default=None, metavar="X",
                   help="instead of --iter-time: your single-device samples/s (S = batch size / X)")
    c.add_argument("--profile", type=Path, default=None, help="a profile CSV (instead of --model)")
    n = m.add_argument_group("your network")
    n.add_argument("--net", action="append", default=None,
                   help="networks: comma-separated presets (10GbE,IB-EDR) or one spec "
                        "(mine:bandwidth=9.9Gbps,latency=50us); repeat or separate with ';' "
                        "(default 10GbE unless --nccl-tests)")
    n.add_argument("--nccl-tests", type=Path, default=None, metavar="LOG",
                   help="fit bandwidth and latency to all_reduce_perf's output and add that network")
    n.add_argument("--nccl-min-bytes", type=int, default=0, help="fit only the log's sizes from this many bytes")
    n.add_argument("--gpus-per-node", type=int, default=1, help="ranks per node (two-level topology)")
    n.add_argument("--intra", default="PCIe3", help="intra-node link (a --net spec) when --gpus-per-node > 1")
    n.add_argument("--hierarchical", action="store_true",
                   help="all-reduces spanning nodes: intra reduce, ring among node leaders, intra broadcast")
    e = m.add_argument_group("effects at scale (timeline.effects; each on by default)")
    e.add_argument("--no-contention", action="store_true", help="no compute slow-down during collectives")
    e.add_argument("--no-message-latency", action="store_true", help="no per-collective call cost")
    w = m.add_argument_group("what to simulate and write")
    w.add_argument("--algos", default=DEFAULT, help="comma-separated algorithm names (python -m distsgd list)")
    w.add_argument("--nprocs", default="2,4", help="comma-separated worker counts p")
    w.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="algorithm parameter, given to the chosen algorithms that have it")
    w.add_argument("--csv", default="simulate.csv", help="where to write the table")
    w.add_argument("--plot", type=Path, default=None, metavar="F.png",
                   help="throughput vs workers per schedule (.png, .pdf, .svg)")
    w.add_argument("--trace", type=Path, default=None, help="folder for one Chrome trace per configuration")
    w.add_argument("--steps", type=int, default=0, metavar="N",
                   help="with --collectives: list every collective of a run of N steps from a fresh start")
    w.add_argument("--collectives", type=Path, default=None, metavar="F.csv",
                   help="write every collective the simulator charges (the columns of a run's comm.csv that "
                        "do not depend on wall time), per configuration, for --steps N")


def cmd_simulate(args: argparse.Namespace) -> int:
    """`python -m distsgd simulate`: check everything, simulate, write the CSV (and the plot),
    print a table and the recommendation."""
    from . import whatif
    from .timeline.effects import whatif as scale_effects
    from .timeline.sweep import split_list

    nprocs = []
    for p in split_list(args.nprocs, "nprocs"):
        if not p.isdigit() or int(p) < 1:
            raise ConfigError("nprocs", p, "integers >= 1")
        nprocs.append(int(p))
    effects, overheads = scale_effects(not args.no_contention, not args.no_message_latency)
    if args.plot is not None:
        whatif.check_plot_path(args.plot)
    if (args.collectives is None) != (args.steps == 0):
        raise ConfigError("steps", args.steps, "N >= 1 together with --collectives FILE (and 0 without it)")
    answer = whatif.what_if(args.model, args.batch_size, split_list(args.algos, "algos"), nprocs, args.net,
                            iter_time=args.iter_time, throughput=args.throughput, device=args.device,
                            seq_len=args.seq_len, profile_csv=args.profile, nccl_log=args.nccl_tests,
                            nccl_min_bytes=args.nccl_min_bytes, gpus_per_node=args.gpus_per_node,
                            intra=args.intra,
                            params=parse_assignments(args.set, "set"), trace_dir=args.trace,
                            hierarchical=args.hierarchical, effects=effects,
                            overheads=overheads, collectives_steps=args.steps if args.collectives else 0)
    if answer.fit is not None:
        print(answer.fit.describe())
    print(f"profile: {answer.source}")
    df = answer.table
    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    df.to_csv(args.csv, index=False)
    shown = df[["algo", "nproc", "net", "step_s", "exposed_comm_s", "throughput", "measured_error"]]
    print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    print("measured_error: the simulator's error (predicted / measured - 1) on the survey's 4-32 V100 cluster for that "
          "runtime model (schedule, parameters, effects, overheads) and fabric (docs/simulator_error.md); the CSV has "
          "the step-time range it gives")
    if args.plot is not None:
        answer.plot(args.plot)
    if answer.collectives is not None:
        args.collectives.parent.mkdir(parents=True, exist_ok=True)
        answer.collectives.to_csv(args.collectives, index=False)
        print(f"wrote {args.collectives}: {len(answer.collectives)} collectives")
    print(f"wrote {args.csv}" + (f" and {args.plot}" if args.plot else "")
          + (f" and traces in {args.trace}" if args.trace else ""))
    for line in answer.recommend():
        print(line)
    return 0


def cmd_bench_sweep() -> int:
    """`python -m distsgd bench --sweep`: how long the simulator takes for the sweep of
    `timeline.sweep.time_sweep` on this machine (a figure for the docs, not a test)."""
    from .timeline.sweep import SPEED_MODELS, SPEED_NETS, SPEED_NPROCS, time_sweep

    df, seconds = time_sweep()
    print(f"{len(df)} configurations ({df.algo.nunique()} algorithms x {', '.join(SPEED_MODELS)} x "
          f"p = {SPEED_NPROCS[0]}..{SPEED_NPROCS[-1]} x {', '.join(SPEED_NETS)}) simulated in {seconds:.1f} s "
          f"({1e3 * seconds / len(df):.1f} ms each)")
    return 0


def cmd_bench_hook_overlap(args: argparse.Namespace) -> int:
    """`python -m distsgd bench --hook-overlap`: the compression hook's pending vs finished future."""
    from .benchmark import hook_overlap

    df, ratio = hook_overlap(model=args.models.split(",")[0], nproc=args.nproc, batch_size=args.batch_size,
                             steps=args.steps, warmup=args.warmup, repeats=args.reps)
    print(df.to_string(index=False))
    print(f"step time, finished / pending future: {ratio:.3f} (median of {args.reps} rounds each, p = {args.nproc}, "
          f"network {df.net.iloc[0]})")
    return 0


def cmd_bench_schedules(args: argparse.Namespace) -> int:
    """`python -m distsgd bench`: time every schedule (repeats = --reps), append each row to the
    CSV as it is measured, print the medians (rank 0)."""
    from .benchmark import bench_schedules, medians

    df = bench_schedules(models=args.models.split(","), cases=_bench_cases(args.algos),
                         nprocs=[int(p) for p in args.nprocs.split(",")],
                         networks=_bench_networks(args.nets, args.backend), batch_size=args.batch_size,
                         steps=args.steps, warmup=args.warmup, repeats=args.reps, out=args.csv,
                         backend=args.backend, launcher=args.launcher)
    if len(df):
        print(medians(df).to_string(index=False))
        print(f"wrote {args.csv} (peak resident memory of a rank: {df.peak_rss_mb.max():.0f} MiB)")
    return 0


def add_profile_args(p: argparse.ArgumentParser) -> None:
    """Options of `profile`."""
    p.add_argument("--model", required=True, help="a model of `python -m distsgd list`")
    p.add_argument("--batch-size", type=int, default=16, help="samples per iteration")
    p.add_argument("--input-shape", default="",
                   help="one sample's shape, e.g. 3x32x32 or 64 (token ids); default 64 for bert_*, else 3x32x32")
    p.add_argument("--model-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a model option (repeatable), e.g. hidden=[512,512]")
    p.add_argument("--device", default="cpu", help="measure on: cpu or cuda")
    p.add_argument("--project", default="", metavar="DEVICE",
                   help="instead of measuring, scale FLOPs to DEVICE (distsgd.systems.profiler.DEVICES)")
    p.add_argument("--reps", type=int, default=5, help="timed rounds (medians are reported)")
    p.add_argument("--warmup", type=int, default=2, help="untimed iterations first")
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads (default: torch's)")
    p.add_argument("--seed", type=int, default=0, help="model initialization and inputs")
    p.add_argument("--out", default="", help="CSV path (default: <model>_b<batch>.csv)")


def cmd_profile(args: argparse.Namespace) -> int:
    """`python -m distsgd profile`: measure (or project) a layer profile and write its CSV."""
    from .layer_profile import parse_shape
    from ..models import check_options
    from .profiler import DEVICES, measure, project

    options = parse_assignments(args.model_opt, "model_options")
    check_options(args.model, options)
    shape = parse_shape(args.input_shape or ("64" if args.model.startswith("bert_") else "3x32x32"))
    if args.project and args.project not in DEVICES:
        raise ConfigError("project", args.project, DEVICES)
    if args.project:
        profile = project(args.model, shape, args.batch_size, args.project, options)
    else:
        m = measure(args.model, shape, args.batch_size, device=args.device, reps=args.reps,
                    warmup=args.warmup, threads=args.threads, seed=args.seed, options=options)
        profile = m.profile
        print(f"forward+backward: sum of per-layer medians / un-hooked median {m.hook_ratio:.3f}, "
              f"hooked median / un-hooked median {m.hooked_s / m.unhooked_s:.3f}")
    path = profile.to_csv(args.out or f"{args.model}_b{args.batch_size}.csv")
    print(f"{profile.model} b{profile.batch_size} {args.project or args.device} ({profile.source}): "
          f"{len(profile.layers)} layers, {profile.grad_bytes / 2**20:.2f} MiB of gradients, forward "
          f"{1e3 * profile.forward_s:.2f} ms, backward {1e3 * profile.backward_s:.2f} ms, update "
          f"{1e3 * profile.update_s:.2f} ms per iteration")
    print(f"wrote {path}")
    return 0


VALIDATE_RUN_EPILOG = """examples:
  python -m distsgd validate-run results/ --fabric IB-EDR --inside NVLink
  DISTSGD_FABRIC=25GbE python -m distsgd validate-run results/ssgd-0123456789ab
  python -m distsgd validate-run results/ --fabric "mine:bandwidth=9.9Gbps,latency=50us" --table my_runs.csv

A run gets a row when it finished on more than one GPU or more than one host (ranks evenly on them):
its measured step time (the median over its logged intervals), the simulator's prediction of the same
algorithm, parameters and topology (hosts x ranks per host) on the fabric, and their error. Runs on one
host's CPUs, and runs already recorded, are listed with why no row was added. The rows extend the
simulator's measured error bands (docs/simulator_error.md): a projection whose runtime model and fabric
your runs measured is decided within their band too."""


def add_validate_run_parser(sub: "argparse._SubParsersAction") -> None:
    """`validate-run`: finished multi-GPU or multi-node runs against the simulator (`run_validation`)."""
    p = sub.add_parser(
        "validate-run", help="compare finished multi-GPU or multi-node runs with the simulator's prediction and "
                             "record them in the validation table the error bands read (distsgd.systems.run_validation)",
        description="Compare finished runs on several GPUs or nodes with the simulator's prediction of them and "
                    "record each in the table of your runs, <results root>/validation/runs.csv, which the "
                    "simulator's error bands read beside the committed ones.",
        epilog=VALIDATE_RUN_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="a run directory, or a directory searched for runs (e.g. a results root)")
    p.add_argument("--fabric", default=None, metavar="NET",
                   help="the real network between the nodes (on one node: between its GPUs): a preset (10GbE, "
                        "25GbE, IB-EDR, IB-HDR, ...) or a --net spec, e.g. 'mine:bandwidth=9.9Gbps,latency=50us'; "
                        "default $DISTSGD_FABRIC; none: rows without a prediction, read by no band. An emulated "
                        "run's network is its own --net")
    p.add_argument("--inside", default=None, metavar="NET",
                   help="the network inside a node (e.g. NVLink, PCIe4); default $DISTSGD_FABRIC_INSIDE, else --fabric")
    p.add_argument("--table", type=Path, default=None,
                   help="the table to add to (default: <results root>/validation/runs.csv, the results root "
                        "being $DISTSGD_RESULTS or ./results)")


def cmd_validate_run(args: argparse.Namespace) -> int:
    """`python -m distsgd validate-run`: `run_validation.record_runs`, one line per run looked at."""
    from .run_validation import Fabric, record_runs, runs_csv

    fabric = Fabric.named(args.fabric, args.inside)
    for path in args.runs:
        if not Path(path).is_dir():
            raise ConfigError("RUN_DIR", path, "an existing directory (a run, or one holding runs)")
    for run_dir, told in record_runs(args.runs, fabric, args.table):
        print(f"{run_dir}: {told}")
    print(f"table: {args.table or runs_csv()}")
    return 0

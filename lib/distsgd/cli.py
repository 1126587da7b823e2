"""Command line: `python -m distsgd {train,list,show,bench,worker}`."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

from .config import BACKENDS, DEVICES, DROPIT_STRATEGIES, LAUNCHERS, OPTIMIZERS, SCHEDULES, Config, parse_assignments
from .errors import ConfigError, WorkerError

EXAMPLES = """examples:
  python -m distsgd train --algo ssgd --model mlp --data digits --nproc 4 --steps 300
  python -m distsgd train --algo local_sgd --set period=8 --net bandwidth=100Mbit,latency=100us
  python -m distsgd train --algo ddp --partition dirichlet:0.3 --out /tmp/runs
  torchrun --nproc-per-node 8 -m distsgd train --launcher env --backend nccl --model resnet18 --data cifar10
  python -m distsgd list
"""


def _defaults() -> Config:
    return Config()


def build_parser() -> argparse.ArgumentParser:
    d = _defaults()
    parser = argparse.ArgumentParser(
        prog="python -m distsgd",
        description="distsgd: communication-efficient distributed training over torch.distributed.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="train one configuration and print its summary",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    t.add_argument("--algo", default=d.algo, help="algorithm (see `list`)")
    t.add_argument("--set", dest="params", action="append", default=[], metavar="KEY=VALUE",
                   help="an algorithm parameter, repeatable (e.g. --set period=8)")
    t.add_argument("--model", default=d.model, help="logistic, mlp, cnn, resnet18, resnet50, vgg16, transformer")
    t.add_argument("--model-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a model option, repeatable (e.g. --model-opt hidden=[512,512])")
    t.add_argument("--dropit-gamma", type=float, default=d.dropit_gamma,
                   help="DropIT: drop this fraction of each Linear/Conv2d input kept for backward (0: off)")
    t.add_argument("--dropit-strategy", default=d.dropit_strategy, choices=DROPIT_STRATEGIES)
    t.add_argument("--data", default=d.data,
                   help="digits, synthetic-logistic, synthetic-lsq, cifar10, cifar100, imagenet")
    t.add_argument("--data-opt", action="append", default=[], metavar="KEY=VALUE",
                   help="a dataset option, repeatable (e.g. --data-opt download=true)")
    t.add_argument("--partition", default=d.partition, help="iid, shards, shards:K, dirichlet:ALPHA")
    t.add_argument("--nproc", type=int, default=d.nproc, help="number of worker processes (ranks); under torchrun/srun (--launcher env) the job's WORLD_SIZE is used instead")
    t.add_argument("--steps", type=int, default=d.steps, help="training steps (iterations)")
    t.add_argument("--batch-size", type=int, default=d.batch_size, help="mini-batch size per rank")
    t.add_argument("--lr", type=float, default=d.lr, help="learning rate")
    t.add_argument("--optimizer", default=d.optimizer, choices=OPTIMIZERS)
    t.add_argument("--momentum", type=float, default=d.momentum)
    t.add_argument("--weight-decay", type=float, default=d.weight_decay)
    t.add_argument("--schedule", default=d.schedule, choices=SCHEDULES, help="learning-rate schedule")
    t.add_argument("--warmup-steps", type=int, default=d.warmup_steps)
    t.add_argument("--seed", type=int, default=d.seed)
    t.add_argument("--net", default=d.net,
                   help="emulated network: '' (none), 1GbE, 10GbE, 25GbE, IB-EDR, '100Mbit,50us', or "
                        "'bandwidth=1Gbit,latency=50us'")
    t.add_argument("--backend", default=d.backend, choices=BACKENDS)
    t.add_argument("--device", default=d.device, choices=DEVICES)
    t.add_argument("--launcher", default=d.launcher, choices=LAUNCHERS,
                   help="spawn local workers, or 'env': this process is one rank of torchrun/srun")
    t.add_argument("--log-every", type=int, default=d.log_every)
    t.add_argument("--eval-every", type=int, default=d.eval_every, help="0: only at the end")
    t.add_argument("--eval-samples", type=int, default=d.eval_samples)
    t.add_argument("--eval-train", action="store_true",
                   help="also log the training objective (loss + weight_decay/2 |x|^2) at evaluations")
    t.add_argument("--timeout", dest="timeout_s", type=float, default=d.timeout_s,
                   help="seconds a collective may wait for a peer before the run fails")
    t.add_argument("--name", default=d.name, help="run name (default: the algorithm)")
    t.add_argument("--out", default=d.out, help="results directory (default: $DISTSGD_RESULTS or ./results)")
    t.add_argument("--force", action="store_true", help="recompute even if a finished run exists")
    t.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")
    t.add_argument("--json", action="store_true", help="print the summary as JSON")

    sub.add_parser("list", help="algorithms with their parameters, models, datasets, networks")

    s = sub.add_parser("show", help="print the summary of a finished run directory")
    s.add_argument("run_dir", type=Path)

    b = sub.add_parser("bench", help="benchmarks; --validate-emulation: the emulated network vs a "
                                     "real shaped one (root: network namespaces + tc tbf)",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    b.add_argument("--validate-emulation", action="store_true",
                   help="time collectives over p shaped namespaces and under Comm's emulation")
    b.add_argument("--nproc", type=int, default=4, help="hosts / ranks p")
    b.add_argument("--bandwidth", default="200Mbit", help="per-host bandwidth of both sides")
    b.add_argument("--sizes", default="1,8", help="message sizes in MiB, comma separated")
    b.add_argument("--reps", type=int, default=3, help="repetitions (the median is reported)")
    b.add_argument("--tolerance", type=float, default=0.15, help="allowed relative difference")
    add_schedule_bench_args(b)

    w = sub.add_parser("worker", help="(internal) run one rank of a prepared run directory")
    w.add_argument("run_dir", type=Path)
    return parser


def config_from_args(args: argparse.Namespace) -> Config:
    fields = {f.name for f in dataclasses.fields(Config)}
    values = {k: v for k, v in vars(args).items() if k in fields}
    values["params"] = parse_assignments(args.params, "params")
    values["model_options"] = parse_assignments(args.model_opt, "model_options")
    values["data_options"] = parse_assignments(args.data_opt, "data_options")
    return Config(**values)


def cmd_train(args: argparse.Namespace) -> int:
    from .runner import run

    config = config_from_args(args)
    t0 = time.perf_counter()
    result = run(config, force=args.force)
    if os.environ.get("RANK", "0") == "0":        # under torchrun, only rank 0 reports
        if args.json:
            print(json.dumps(result.summary, indent=2, default=str))
        else:
            _print_summary(result.path, result.summary)
            print(f"({time.perf_counter() - t0:.1f} s including start-up)")
    return 0


def _print_summary(path: Path, s: dict) -> None:
    rows = [("run", str(path)), ("algo", f"{s['algo']} {s['params']}"),
            ("ranks x steps", f"{s['nproc']} x {s['steps']}"),
            ("final train loss", f"{s['final_train_loss']:.4f}"),
            ("final test loss / acc", f"{s['final_test_loss']:.4f} / {s['final_test_acc']:.4f}"),
            ("bytes sent (all ranks)", f"{s['comm_bytes']:,.0f}"),
            ("collectives (all ranks)", f"{s['collectives']:,.0f}"),
            ("train time", f"{s['train_s']:.2f} s ({1e3 * s['step_time_s']:.1f} ms/step)"),
            ("throughput", f"{s['throughput_samples_s']:,.0f} samples/s")]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")


def cmd_list() -> int:
    from . import data, models
    from .algorithms import REGISTRY
    from .comm import PRESETS

    print("algorithms (--algo NAME, parameters with --set KEY=VALUE):")
    for name in sorted(REGISTRY):
        cls = REGISTRY[name]
        print(f"  {name:<15} {cls.summary}")
        for p in cls.params:
            print(f"      {p.name} = {p.default!r:<8} {p.help}")
    print("\nmodels:     " + ", ".join(models.MODELS))
    print("datasets:   " + ", ".join(data.DATASETS))
    print("partitions: " + data.PARTITIONS)
    print("networks:   " + ", ".join(f"{k} ({v})" for k, v in PRESETS.items()))
    return 0


def cmd_show(run_dir: Path) -> int:
    from .results import Result

    r = Result.load(run_dir)
    _print_summary(r.path, r.summary)
    return 0


def cmd_worker(run_dir: Path) -> int:
    """One rank of a prepared run directory (`distsgd.worker.main`)."""
    from .worker import main as worker_main

    return worker_main(run_dir)


def add_schedule_bench_args(b: argparse.ArgumentParser) -> None:
    """Options of `bench` without --validate-emulation: the schedule benchmark."""
    g = b.add_argument_group("schedule benchmark (without --validate-emulation)")
    g.add_argument("--models", default="mlp,transformer", help="comma-separated: mlp, resnet18, transformer")
    g.add_argument("--algos", default="",
                   help="comma-separated schedule labels to keep (default: all of distsgd.bench_schedules.DEFAULT_CASES)")
    g.add_argument("--nprocs", default="2,4", help="comma-separated worker counts p")
    g.add_argument("--steps", type=int, default=8, help="timed iterations per case")
    g.add_argument("--warmup", type=int, default=3, help="untimed iterations per case")
    g.add_argument("--batch-size", type=int, default=16, help="per rank")
    g.add_argument("--csv", default="bench_schedules.csv", help="where to write the tidy CSV")


def cmd_bench_schedules(args: argparse.Namespace) -> int:
    """`python -m distsgd bench`: time every schedule (repeats = --reps), write the CSV, print medians."""
    from .bench_schedules import DEFAULT_CASES, bench_schedules, medians

    keep = [a.strip() for a in args.algos.split(",") if a.strip()]
    cases = [c for c in DEFAULT_CASES if not keep or c["label"] in keep or c["algo"] in keep]
    df = bench_schedules(models=args.models.split(","), cases=cases,
                         nprocs=[int(p) for p in args.nprocs.split(",")], batch_size=args.batch_size,
                         steps=args.steps, warmup=args.warmup, repeats=args.reps, out=args.csv)
    print(medians(df).to_string(index=False))
    print(f"wrote {args.csv}")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "train":
            return cmd_train(args)
        if args.command == "list":
            return cmd_list()
        if args.command == "bench" and not args.validate_emulation:
            return cmd_bench_schedules(args)
        if args.command == "bench":
            from .bench import main as bench_main
            return bench_main(args)
        if args.command == "show":
            return cmd_show(args.run_dir)
        return cmd_worker(args.run_dir)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except WorkerError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1

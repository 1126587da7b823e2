"""Command line: `python -m distsgd {train,list,show,results,data,bench,profile,simulate,validate-run,worker,call}`.

This module only dispatches: the commands of runs are `run_commands`'s, the datasets' release files
`data_commands`'s, those of the systems side (benchmarks, profiles, the simulator)
`systems_commands`'s; each adds its parsers and returns its handlers. Errors a user can act on end the process with a message and status 2 (bad input) or 1
(a rank failed)."""
from __future__ import annotations

import argparse
import sys

from .data import commands as data_commands
from .training import commands as run_commands
from .systems import commands as systems_commands
from .errors import ConfigError, WorkerError

EXAMPLES = """examples:
  python -m distsgd train --algo ssgd --model mlp --data digits --nproc 4 --steps 300
  python -m distsgd train --algo local_sgd --set period=8 --net bandwidth=100Mbit,latency=100us
  python -m distsgd train --algo ddp --partition dirichlet:0.3 --out /tmp/runs
  torchrun --nproc-per-node 8 -m distsgd train --launcher env --backend nccl --model resnet18 --data cifar10
  python -m distsgd list
  python -m distsgd data check                   # CIFAR-10/100, MNIST, ImageNet: release files in place?
  python -m distsgd data prepare cifar10 mnist --download
  python -m distsgd results results/ --csv runs.csv
  python -m distsgd profile --model resnet18 --batch-size 16 --threads 1 --out resnet18.csv
  python -m distsgd profile --model resnet50 --batch-size 64 --input-shape 3x224x224 --project V100-fp32
  python -m distsgd simulate --model resnet50 --device V100-fp32 --algos ssgd,dear --nprocs 16,64 --net 10GbE,IB-EDR --csv sim.csv
  python -m distsgd simulate --model resnet50 --batch-size 64 --iter-time 0.2529 --algos no_overlap,wfbp,mgwfbp,ps \\
      --nprocs 4,8,16,32 --gpus-per-node 4 --net "mine:bandwidth=9.9Gbps,latency=50us" --csv out.csv --plot out.png
  python -m distsgd simulate --model bert_large --batch-size 8 --throughput 49 --nccl-tests all_reduce_perf.txt
  python -m distsgd validate-run results/ --fabric IB-EDR --inside NVLink   # your runs extend the error bands
"""


def build_parser() -> argparse.ArgumentParser:
    """The parser of every command; a command's parsed arguments carry its handler (`handler`)."""
    parser = argparse.ArgumentParser(
        prog="python -m distsgd",
        description="distsgd: communication-efficient distributed training over torch.distributed.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=EXAMPLES)
    sub = parser.add_subparsers(dest="command", required=True)
    for name, handler in {**run_commands.register(sub), **data_commands.register(sub),
                          **systems_commands.register(sub)}.items():
        sub.choices[name].set_defaults(handler=handler)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (WorkerError, TimeoutError) as e:     # a rank failed, or local ranks ran past their deadline
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:                    # Ctrl-C: the launcher has stopped the local ranks
        kept = f"; the rows measured so far are in {args.csv}" if args.command == "bench" and getattr(args, "csv", "") else ""
        print(f"interrupted: {args.command} stopped{kept}", file=sys.stderr)
        return 130

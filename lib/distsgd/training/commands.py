"""The commands of runs: `train`, `list`, `show`, `results`, `worker`, `call` (`distsgd.cli` dispatches).

`register(sub)` adds their parsers to the command line's subparsers and returns each command's
handler; `add_config_options` gives `train` one option per `Config` field (its help, choices and
flag from the field's metadata), `config_from_args` turns them back into a `Config`."""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
import typing
from pathlib import Path
from typing import Callable

from .config import Config, parse_assignments
from ..errors import ConfigError

_CONFIG_TYPES = typing.get_type_hints(Config)   # field name -> type (the annotations are strings)


def register(sub: "argparse._SubParsersAction") -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add the parsers of train, list, show, results, worker and call to `sub`; their handlers by name."""
    t = sub.add_parser("train", help="train one configuration and print its summary",
                       formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add_config_options(t)
    g = t.add_argument_group("DropIT", "shorthand for --model-opt dropit='{\"gamma\": G, \"strategy\": S, "
                                       "\"all_layers\": A}'")
    g.add_argument("--dropit-gamma", type=float, default=argparse.SUPPRESS, metavar="G",
                   help="drop this fraction of each Linear/Conv2d input kept for backward (0: off)")
    g.add_argument("--dropit-strategy", default=argparse.SUPPRESS, metavar="S",
                   help="mink (keep the largest entries, the default) or random")
    g.add_argument("--dropit-all-layers", action="store_true", default=argparse.SUPPRESS,
                   help="also drop in the stem and the classifier head (the authors leave them exact)")
    r = t.add_argument_group("this command")
    r.add_argument("--force", action="store_true", help="recompute even if a finished run exists")
    r.add_argument("--reuse-stale", action="store_true",
                   help="reuse a finished run of the same config made by an earlier code version")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")

    sub.add_parser("list", help="algorithms with their parameters, models, datasets, networks")

    s = sub.add_parser("show", help="print the summary of a finished run directory; of a running, "
                                    "failed, stopped or diverged one its status and last rows")
    s.add_argument("run_dir", type=Path)

    res = sub.add_parser("results", help="every run under a directory as one table (distsgd.load_results)")
    res.add_argument("directory", type=Path, help="searched recursively for run directories")
    res.add_argument("--csv", type=Path, default=None, metavar="F",
                     help="write the whole table (every column) to this CSV file")
    res.add_argument("--metrics", action="store_true",
                     help="the per-step table instead: one row per run and logged step")

    w = sub.add_parser("worker", help="(internal) run one rank of a prepared run directory")
    w.add_argument("run_dir", type=Path)
    c = sub.add_parser("call", help="(internal) run one rank of a prepared on_ranks call (a benchmark's)")
    c.add_argument("call_dir", type=Path)
    return {"train": cmd_train, "list": lambda _args: cmd_list(), "show": lambda a: cmd_show(a.run_dir),
            "results": lambda a: cmd_results(a.directory, a.csv, a.metrics), "worker": lambda a: cmd_worker(a.run_dir),
            "call": lambda a: cmd_call(a.call_dir)}


def _kind(f: dataclasses.Field) -> type:
    """The type of Config field `f` without its parameters (``dict[str, Any]`` -> dict)."""
    hint = _CONFIG_TYPES[f.name]
    return typing.get_origin(hint) or hint


def add_config_options(parser: argparse.ArgumentParser) -> None:
    """One option per `Config` field, with the help (and choices) of its metadata: ``--field-name``
    (or the metadata's ``flag``) of the field's type; a dict field takes KEY=VALUE, repeatable; a
    list field one or more values of its item type; a bool field is a switch, ``--no-field-name``
    where it defaults to True."""
    group = parser.add_argument_group("run configuration (distsgd.Config)")
    for f in dataclasses.fields(Config):
        kind, help_ = _kind(f), f.metadata["help"].replace("%", "%%")
        negated = kind is bool and f.default is True
        flag = f.metadata.get("flag") or "--" + "no-" * negated + f.name.replace("_", "-")
        if kind is dict:
            group.add_argument(flag, dest=f.name, action="append", default=[], metavar="KEY=VALUE", help=help_)
        elif kind is list:
            (item,) = typing.get_args(_CONFIG_TYPES[f.name])
            group.add_argument(flag, dest=f.name, nargs="+", type=item, default=[], metavar="N", help=help_)
        elif negated:                       # no default shown: it would read "do not ... (default: True)"
            group.add_argument(flag, dest=f.name, action="store_false", default=argparse.SUPPRESS,
                               help=f"do not {help_}")
        elif kind is bool:
            group.add_argument(flag, dest=f.name, action="store_true", help=help_)
        else:
            group.add_argument(flag, dest=f.name, type=kind, default=f.default,
                               choices=f.metadata.get("choices"), help=help_)


def config_from_args(args: argparse.Namespace) -> Config:
    """The Config of parsed `train` options: KEY=VALUE lists become dicts, the DropIT shorthand
    the model option ``dropit``; fields not given (a ``--no-`` switch) keep Config's default."""
    from ..models import DROPIT

    given = vars(args)
    values = {f.name: given[f.name] for f in dataclasses.fields(Config) if f.name in given}
    for f in dataclasses.fields(Config):
        if _kind(f) is dict:
            values[f.name] = parse_assignments(values[f.name], f.name)
    dropit = {key: given[f"dropit_{key}"] for key in ("gamma", "strategy", "all_layers")
              if f"dropit_{key}" in given}
    if dropit:
        values["model_options"][DROPIT] = dropit
    return Config(**values)


def cmd_train(args: argparse.Namespace) -> int:
    from ..files import finite_or_null
    from .runner import run

    config = config_from_args(args)
    t0 = time.perf_counter()
    result = run(config, force=args.force, reuse_stale=args.reuse_stale)
    if os.environ.get("RANK", "0") == "0":        # under torchrun, only rank 0 reports
        if args.json:
            print(json.dumps(finite_or_null(result.summary), indent=2, default=str, allow_nan=False))
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
    from .. import data, models
    from ..algorithms import REGISTRY
    from ..comm import PRESETS

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


SHOWN = ["step", "train_loss", "test_loss", "test_acc", "comm_bytes", "wall_s"]


def cmd_show(run_dir: Path, last: int = 5) -> int:
    """The summary of a finished run; of any other (running, failed, stopped, diverged): its
    status from what is on disk and the last `last` rows logged so far (`liveness.run_state`)."""
    from .liveness import run_state
    from .results import Result

    if not (run_dir / "config.json").is_file():
        raise ConfigError("run_dir", str(run_dir), "a run directory (one with a config.json)")
    state = run_state(run_dir)
    if state.status == "finished":
        r = Result.load(run_dir)
        _print_summary(r.path, r.summary)
        return 0
    config = json.loads((run_dir / "config.json").read_text())
    rows = [("run", str(run_dir)), ("status", state.status + (f": {state.detail}" if state.detail else "")),
            ("algo", f"{config['algo']} {config['params']}"),
            ("logged", f"step {max(state.last_steps.values())} of {config['steps']} (" + ", ".join(
                f"rank {r}: {s}" for r, s in state.last_steps.items()) + ")"
             if state.last_steps else f"no step yet of {config['steps']}")]
    if state.checkpoint is not None:
        rows.append(("checkpoint", f"step {state.checkpoint} (run the same config again to resume there)"))
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        print(f"{k:<{width}}  {v}")
    if len(state.metrics):
        shown = state.metrics[[c for c in SHOWN if c in state.metrics]].tail(last)
        print(shown.to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    return 0


# what `results` prints of the run table (the CSV has every column)
RESULT_COLUMNS = ("run", "status", "algo", "nproc", "steps", "steps_done", "final_train_loss", "final_test_acc",
                  "comm_bytes", "train_s")


def cmd_results(directory: Path, csv: Path | None, metrics: bool) -> int:
    """`python -m distsgd results DIR`: print the runs (the config columns that differ between
    them and the main totals; every column with --csv F) or, with --metrics, the per-step table."""
    import pandas as pd

    from .results import load_results

    df = load_results(directory, metrics=metrics)
    if csv is not None:
        csv.parent.mkdir(parents=True, exist_ok=True)
        df.to_csv(csv, index=False)
    if metrics:
        with pd.option_context("display.width", 200, "display.max_columns", 12):
            print(df)
    else:
        config = {f.name for f in dataclasses.fields(Config)}
        varying = [c for c in df.columns if c.split(".")[0] in config and c not in RESULT_COLUMNS
                   and df[c].map(repr).nunique() > 1]
        shown = [c for c in RESULT_COLUMNS if c in df.columns]
        shown = shown[:3] + varying + shown[3:]
        print(df[shown].to_string(index=False, float_format=lambda v: f"{v:.4g}"))
    states = df.drop_duplicates("run").status.value_counts()
    print(f"{df.run.nunique()} run(s) under {directory}: "
          + ", ".join(f"{n} {status}" for status, n in states.items())
          + (f"; {len(df)} logged steps" if metrics else "")
          + (f"; wrote {csv} ({len(df.columns)} columns)" if csv is not None else ""))
    return 0


def cmd_worker(run_dir: Path) -> int:
    """One rank of a prepared run directory (`distsgd.training.worker.main`)."""
    from .worker import main as worker_main

    return worker_main(run_dir)


def cmd_call(call_dir: Path) -> int:
    """One rank of an `on_ranks` call's srun step (`distsgd.training.launch.call_main`)."""
    from .launch import call_main

    return call_main(call_dir)

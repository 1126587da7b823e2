"""What-if for your own cluster: the timeline simulator fed with the numbers a user already has.

`python -m distsgd simulate` uses these (the simulator itself is `distsgd.systems.timeline`):

**Your compute** (`iteration_seconds`, `choose_profile`). ``--iter-time S`` is the measured
single-device time of one training iteration at ``--batch-size B``; ``--throughput X`` (samples/s)
means S = B / X. The chosen profile's per-layer times are multiplied by one factor so that their
sum (forward + backward + update) is S (`Profile.scaled`): the proportions between layers and the
forward/backward split are the profile's. The profile is, in this order:

1. ``--profile CSV``;
2. for the papers' models (`PAPER_MODELS`: ResNet-50, DenseNet-201, VGG-16 on 3x224x224 images;
   BERT-Base and BERT-Large, the kit's encoder with BERT's dimensions, on ``--seq-len`` tokens,
   default 64 as the DeAR and survey benchmark scripts use): the committed profile
   ``reproduce/layer_profiles/<device>/<model>_b*.csv`` of that batch size and input shape, else
   one built from the model's FLOPs (`profiler.project`: FlopCounterMode on the meta device, the
   exact gradient tensors in backward order, nothing timed) on ``--device`` if it is a projection
   device, else on the family's calibration device (V100; with ``--iter-time`` only its
   proportions matter). Without ``--iter-time`` / ``--throughput`` on a device that is not a
   projection device there is no time to scale a FLOP count to: the model's committed profile of
   that batch on another input (cpu/resnet50_b8.csv: CIFAR's 32x32) if there is one, else an error;
3. any other model: its committed profile on ``--device`` (`timeline.sweep.find_profile`).

**Your network** (`your_networks`). ``--net`` presets and ``NAME:bandwidth=9.9Gbps,latency=50us``
(`comm.netmodel`); ``--nccl-tests LOG`` fits bandwidth and latency to NCCL's ``all_reduce_perf``
output (`comm.nccl_tests.fit_nccl_tests`, the simulator's own all-reduce formula) and adds that
network under the label ``nccl-tests:<file name>``.

`what_if` does all of it: every argument checked first (one ConfigError, before anything runs),
then the profile, then `timeline.sweep`; the command line and notebook 10's "your cluster" call it.

**Answers** (`recommend`, `plot`). One line per network: the schedule with the highest
throughput at the largest worker count, and its gain over ``no_overlap`` (over the slowest
schedule when ``no_overlap`` was not simulated). The plot: throughput against workers (log
scale) for every schedule, one panel per network, and the ideal line p x B / S (every worker at
its single-device speed, no communication).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ..comm.nccl_tests import NcclFit, fit_nccl_tests
from ..comm.netmodel import NetModel
from ..errors import ConfigError
from .layer_profile import Profile, format_shape
from ..paths import repo_root
from .timeline.error_band import with_measured_error
from .timeline.effects import MESSAGE_OVERHEADS, WHATIF, Effects
from .cases import WHATIF_BASELINE
from .timeline.costs import Overheads
from .timeline.driver import COLLECTIVE_COLUMNS
from .timeline.simulator import collectives
from .timeline.sweep import PROFILE_DIR, check_sweep, find_profile, resolve_nets, split_nets, sweep

__all__ = ["DEFAULT_SEQ_LEN", "PAPER_MODELS", "WhatIf", "choose_profile", "input_shape", "iteration_seconds",
           "plot", "recommend", "what_if", "your_networks"]

IMAGE = (3, 224, 224)
DEFAULT_SEQ_LEN = 64
PAPER_MODELS = ("resnet50", "densenet201", "vgg16", "bert_base", "bert_large")
_PROFILE_NAME = re.compile(r"(.+)_b\d+(?:_[0-9x]+)?")           # <model>_b<batch>[_<input shape>]
PLOT_FORMATS = (".png", ".pdf", ".svg")


def input_shape(model: str, seq_len: int | None = None) -> tuple[int, ...]:
    """One sample's shape for a model of `PAPER_MODELS`: (seq_len,) tokens for the BERTs (default
    `DEFAULT_SEQ_LEN`), 3x224x224 images for the others (`seq_len` must then be None)."""
    if model not in PAPER_MODELS:
        raise ConfigError("model", model, PAPER_MODELS)
    if not model.startswith("bert_"):
        if seq_len is not None:
            raise ConfigError("seq_len", seq_len, "only with bert_base or bert_large")
        return IMAGE
    seq = DEFAULT_SEQ_LEN if seq_len is None else seq_len
    if isinstance(seq, bool) or not isinstance(seq, int) or seq < 1:
        raise ConfigError("seq_len", seq_len, "an integer >= 1")
    return (seq,)


def iteration_seconds(batch_size: int | None, iter_time: float | None = None,
                      throughput: float | None = None) -> float | None:
    """Seconds of one single-device iteration: `iter_time`, or batch_size / `throughput`; None
    when neither is given. Both given, a non-positive value or a missing batch size: ConfigError."""
    if iter_time is not None and throughput is not None:
        raise ConfigError("iter_time", iter_time, "either --iter-time or --throughput, not both")
    if iter_time is None and throughput is None:
        return None
    if batch_size is None:
        raise ConfigError("batch_size", None, "an integer >= 1 with --iter-time or --throughput")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError("batch_size", batch_size, "an integer >= 1")
    for field, value in (("iter_time", iter_time), ("throughput", throughput)):
        if value is not None and not (isinstance(value, (int, float)) and 0 < value < float("inf")):
            raise ConfigError(field, value, "a positive number (seconds per iteration)" if field == "iter_time"
                              else "a positive number (samples per second)")
    return float(iter_time) if iter_time is not None else batch_size / float(throughput)


def committed_profile(model: str, device: str, batch_size: int, shape: tuple[int, ...],
                      root: Path | None = None) -> Path | None:
    """The committed profile of `model` on `device` at `batch_size` and input `shape`, or None."""
    folder = (root or repo_root(Path(__file__).parent)) / PROFILE_DIR / device
    for path in sorted(folder.glob(f"{model}_b{batch_size}*.csv")):
        head = pd.read_csv(path, nrows=1, dtype=str, keep_default_na=False)
        if (head["model"].iloc[0] == model and int(head["batch_size"].iloc[0]) == batch_size
                and head["input_shape"].iloc[0] == format_shape(shape)):
            return path
    return None


def _shown(path: Path) -> str:
    """A committed profile's path relative to the repository (the same on every machine)."""
    try:
        return str(path.resolve().relative_to(repo_root(Path(__file__).parent).resolve()))
    except ValueError:
        return str(path)


def choose_profile(model: str = "", batch_size: int | None = None, device: str = "cpu",
                   seq_len: int | None = None, compute_s: float | None = None,
                   profile_csv: str | Path | None = None, root: Path | None = None) -> tuple[Profile, str]:
    """(profile, where it came from) by the rule of the module docstring, scaled so that its
    compute is `compute_s` seconds when given (`iteration_seconds`)."""
    from .profiler import CALIBRATIONS, DEVICES, family, project

    if profile_csv is not None:
        if not Path(profile_csv).is_file():
            raise ConfigError("profile", str(profile_csv), "an existing profile CSV")
        profile, source = Profile.from_csv(profile_csv), str(profile_csv)
    elif not model:
        raise ConfigError("model", "", PAPER_MODELS, "or a model with a committed profile, or --profile CSV")
    elif model in PAPER_MODELS and batch_size is not None:
        shape = input_shape(model, seq_len)
        path = committed_profile(model, device, batch_size, shape, root)
        if path is not None:
            profile, source = Profile.from_csv(path), _shown(path)
        elif compute_s is None and device not in DEVICES:
            try:                                        # the model's committed profile of another input
                path = find_profile(model, device, batch_size, root)
            except ConfigError:
                raise ConfigError("device", device, list(DEVICES),
                                  f"no committed {model} b{batch_size} {format_shape(shape)} profile on {device}: "
                                  "give --iter-time or --throughput, or a projection device") from None
            profile, source = Profile.from_csv(path), _shown(path)
        else:
            target = device if device in DEVICES else CALIBRATIONS[family(model)].device
            profile = project(model, shape, batch_size, target)
            source = f"FLOP-built ({model} b{batch_size} {format_shape(shape)}, proportions of {target})"
    else:
        if seq_len is not None:
            input_shape(model, seq_len)                 # the papers' BERTs only
        folder = (root or repo_root(Path(__file__).parent)) / PROFILE_DIR / device
        if model not in PAPER_MODELS and not any(folder.glob(f"{model}_b*.csv")):
            have = sorted({m.group(1) for p in folder.glob("*.csv") if (m := _PROFILE_NAME.fullmatch(p.stem))})
            raise ConfigError("model", model, sorted(set(PAPER_MODELS) | set(have)),
                              f"the papers' models, or one with a profile in {PROFILE_DIR / device}")
        path = find_profile(model, device, batch_size, root)
        profile, source = Profile.from_csv(path), _shown(path)
    if compute_s is not None:
        profile = profile.scaled(compute_s)
        source += f", scaled to {compute_s:.6g} s per iteration"
    return profile, source


def your_networks(specs: list[str] | None, nccl_log: str | Path | None = None,
                  min_bytes: int = 0) -> tuple[dict[str, NetModel], NcclFit | None]:
    """({label: network}, the nccl-tests fit or None): the --net specs (default 10GbE when neither
    --net nor a log is given), plus the network fitted to `nccl_log` (sizes >= `min_bytes`)
    labelled ``nccl-tests:<file name>``."""
    nets = resolve_nets(split_nets(specs)) if specs else {} if nccl_log is not None else resolve_nets(["10GbE"])
    if nccl_log is None:
        return nets, None
    fit = fit_nccl_tests(nccl_log, min_bytes=min_bytes)
    label = f"nccl-tests:{Path(nccl_log).name}"
    if label in nets:
        raise ConfigError("net", label, "networks with distinct labels", "also the label of the nccl-tests fit")
    return {**nets, label: fit.net}, fit


@dataclass(frozen=True)
class WhatIf:
    """The answer of `what_if`: the sweep's table, the profile it ran on and where that came
    from, and the nccl-tests fit (None without a log)."""

    table: pd.DataFrame
    profile: Profile
    source: str
    fit: NcclFit | None
    collectives: pd.DataFrame | None = None    # with collectives_steps: every configuration's

    def recommend(self) -> list[str]:
        """`recommend` of the table."""
        return recommend(self.table)

    def plot(self, path: str | Path) -> Path:
        """`plot` of the table, the ideal line at the profile's single-device compute."""
        return plot(self.table, path, self.profile.compute_s)


def what_if(model: str, batch_size: int | None, algos: list[str], nprocs: list[int],
            nets: list[str] | None = None, *, iter_time: float | None = None, throughput: float | None = None,
            device: str = "cpu", seq_len: int | None = None, profile_csv: str | Path | None = None,
            nccl_log: str | Path | None = None, nccl_min_bytes: int = 0, gpus_per_node: int = 1,
            intra: str = "", params: dict[str, Any] | None = None, trace_dir: Path | None = None,
            hierarchical: bool = False, effects: Effects = WHATIF,
            overheads: Overheads | None = MESSAGE_OVERHEADS, collectives_steps: int = 0) -> WhatIf:
    """Your compute (`iteration_seconds`, `choose_profile`), your network(s) (`your_networks`) and
    topology (`gpus_per_node` ranks per node over `intra`, which one GPU per node ignores;
    `hierarchical` all-reduces as `Topology`'s), `algos` x `nprocs` x networks
    simulated (`timeline.sweep`, with the scale `effects` and per-call `overheads`, by default the
    what-if defaults of `timeline.effects`, `OFF` / None to switch them off; Chrome traces in
    `trace_dir`), each prediction with the simulator's error measured on a real cluster for its
    runtime model and network beside it (`timeline.error_band.with_measured_error`: none for the
    what-if defaults, which the survey's predictions did not use). With `collectives_steps` N > 0,
    also every collective each configuration charges in a run of N steps (`timeline.simulator.collectives`,
    columns algo, nproc, net first). Every argument is checked before the profile is built or
    anything is simulated."""
    intra = intra if gpus_per_node != 1 else ""
    compute_s = iteration_seconds(batch_size, iter_time, throughput)
    if isinstance(nccl_min_bytes, bool) or not isinstance(nccl_min_bytes, int) or nccl_min_bytes < 0:
        raise ConfigError("nccl_min_bytes", nccl_min_bytes, "an integer >= 0")
    if isinstance(collectives_steps, bool) or not isinstance(collectives_steps, int) or collectives_steps < 0:
        raise ConfigError("steps", collectives_steps, "an integer >= 0 (0: no list of collectives)")
    networks, fit = your_networks(nets, nccl_log, nccl_min_bytes)
    per_algo, topologies = check_sweep(algos, nprocs, networks, params, gpus_per_node, intra, hierarchical)
    profile, source = choose_profile(model, batch_size, device, seq_len, compute_s, profile_csv)
    table = sweep(profile, algos, nprocs, networks, params, gpus_per_node, intra, source, trace_dir,
                  hierarchical, effects, overheads)
    issued = None
    if collectives_steps:
        issued = pd.concat([collectives(profile, algo, p, collectives_steps, params=per_algo[algo], topology=topo)
                            .assign(algo=algo, nproc=p, net=net)
                            for algo in algos for net, topo in topologies.items() for p in nprocs], ignore_index=True)
        issued = issued[["algo", "nproc", "net", *COLLECTIVE_COLUMNS]]
    return WhatIf(with_measured_error(table, {net: topo.inter for net, topo in topologies.items()}), profile, source,
                  fit, issued)


def recommend(df: pd.DataFrame) -> list[str]:
    """One line per network of a `timeline.sweep` table: at its largest worker count, the schedule
    with the highest throughput and its gain over no_overlap (or over the slowest schedule), e.g.
    "best: mgwfbp, 1.38x over no_overlap at 32 workers on mine"; with one schedule, its throughput."""
    lines = []
    for net, rows in df.groupby("net", sort=False):
        top = rows[rows.nproc == rows.nproc.max()].set_index("algo")["throughput"]
        best = top.idxmax()
        base = WHATIF_BASELINE if WHATIF_BASELINE in top.index else top.idxmin()
        gain = f"{top[best] / top[base]:.2f}x over {base}" if len(top) > 1 else \
            f"the only schedule simulated, {top[best]:.4g} samples/s"
        lines.append(f"best: {best}, {gain} at {rows.nproc.max()} workers on {net}")
    return lines


def check_plot_path(path: str | Path) -> Path:
    """`path` if its suffix is one of `PLOT_FORMATS`, else ConfigError (checked before running)."""
    path = Path(path)
    if path.suffix.lower() not in PLOT_FORMATS:
        raise ConfigError("plot", str(path), PLOT_FORMATS, "a file name ending in one of these")
    return path


def plot(df: pd.DataFrame, path: str | Path, single_s: float) -> Path:
    """Throughput (samples/s) against workers, log-scaled, a line per schedule, a panel per
    network of `df` (a `timeline.sweep` table), and the ideal p x batch / `single_s` (dashed)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    path = check_plot_path(path)
    nets = list(dict.fromkeys(df.net))
    fig, axes = plt.subplots(1, len(nets), figsize=(5.2 * len(nets), 4.2), squeeze=False, sharey=True)
    workers = sorted(df.nproc.unique())
    batch = int(df.batch_size.iloc[0])
    for ax, net in zip(axes[0], nets):
        rows = df[df.net == net]
        for algo, g in rows.groupby("algo", sort=False):
            ax.plot(g.nproc, g.throughput, marker="o", label=algo)
        ax.plot(workers, [p * batch / single_s for p in workers], "k--", label="ideal (linear)")
        ax.set_xscale("log", base=2)
        ax.set_xticks(workers, [str(p) for p in workers])
        ax.set(title=f"{df.model.iloc[0]} b{batch}, {net}", xlabel="workers", ylabel="samples / s")
        ax.grid(alpha=0.3)
    axes[0][-1].legend(fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return path

"""The simulator's error on the other public real-cluster tables: PyTorch's DDP benchmark, Horovod's
first benchmark table, GRACE's released ResNet-50 throughputs and DLPerf's tables of torch DDP and Horovod
runs, each read from its committed CSV
(`reproduce/validation/*_measured.csv`, sources and stated settings in `TABLES` and
reproduce/validation/README.md), predicted row by row by the path the survey's table uses
(`timeline.survey`: `cases.Method`, `fit_link`, a committed V100 profile scaled to the table's own
single-GPU step, `simulate` on a two-level `Topology`).

The tables (`TABLES`, one `PublicTable` each):

- `pytorch_ddp`: PyTorch's DDP benchmark (pytorch/pytorch `benchmarks/distributed/ddp/README.md`): ResNet-50,
  ResNet-101, ResNeXt-50 (32x4d), ResNeXt-101 (32x8d) at batch 32 on 1-16 V100s in DGX-1 machines of 8
  (NVLink inside, 4 x 100 Gb/s InfiniBand per machine between), PyTorch 1.4.0a0 with NCCL; DDP with
  25 MB buckets (the example output) and 1 MB buckets (`diff.py`'s test run). Step: the p75 sec/iter,
  the one statistic both outputs print. Schedule: `ddp` with `bucket_mb`.
- `horovod`: Horovod's first README table (horovod/horovod `README.md`, from d54e3a88 until its removal
  in #44): Inception V3, ResNet-101, VGG-16 (tf_cnn_benchmarks, synthetic ImageNet, batch 64) on
  16 Pascal GPUs (4 servers of 4, RoCE-capable 25 Gb/s) and 64 (16 servers of 4, plain 40 Gb/s), each
  with its own single-GPU baseline. Schedule: `wfbp` under Horovod's tensor fusion (its 5 ms cycle and
  64 MiB threshold then) for Horovod with NCCL and with MPI's all-reduce on the CPU; each transport on
  each cluster is a connection of its own (as the survey's TCP and RDMA over one InfiniBand NIC are).
  The Distributed TensorFlow rows (parameter servers whose number and placement the table does not
  state) are not predicted.
- `grace`: GRACE's released data (sands-lab/grace-data `GRACE_data_release.pickle`, DataFrame
  "imagenet-classification", `throughput`: the last 99 logged images/s of a worker times the workers):
  ResNet-50 (tf_cnn_benchmarks, Horovod 0.18.2, momentum SGD) on 1-8 V100 workers, one per machine,
  at 1, 10 and 25 Gb/s, Horovod's all-reduce through MPI or NCCL; batch 64 per worker, tf_cnn_benchmarks'
  default for resnet50 (sands-lab/grace-benchmarks `models/resnet_model.py`; the command line of these
  runs is not published). Schedule: `wfbp` under Horovod 0.18.2's fusion (5 ms, 64 MiB). Only the rows
  without compression are predicted; the compressed rows are committed, not predicted (the profile has
  no compression kernels).
- `dlperf`: Oneflow-Inc/DLPerf's READMEs (samples/s, median of 5 or 7 runs) on one cluster: 4 nodes of 8
  V100-SXM2-16GB (NVLink inside), one InfiniBand EDR 100 Gb/s NIC per node, each sub-table with its own
  1-GPU row. Predicted: torch's DistributedDataParallel of PyTorch 1.6 (pytorch/examples imagenet,
  bucket_cap_mb left at its default 25: `ddp` with 25 MB buckets) on ResNet-50 in the configuration DLPerf's
  report publishes (torch.utils.data.DataLoader, 48 workers), and Horovod 0.19.0 (NGC TensorFlow 20.03-tf1:
  ResNet-50, BERT-base) and 0.19.5 (gluon-cv ResNet-50 v1b, gluon-nlp BERT-base), fp32, their cycle and
  threshold left at the defaults (5 ms, 64 MiB: `wfbp` under Horovod's cycle). Not predicted (`DLPERF_NOT_PREDICTED`):
  apex's DDP (NGC PyTorch), Horovod in NGC MXNet with its 16 gradient groups and two NCCL streams, every AMP or
  fp16 row, and pytorch/examples' other input pipelines. ResNet-50 (v1.5 and v1b) is the torchvision profile,
  BERT-base the committed one at sequence 64 (DLPerf's: 128); only their proportions are used
  (`PublicTable.profile_batch`).

Which rows may be fitted (`split`, written down before any row of these tables was predicted;
docs/simulator_error.md, "The public tables"), in the survey's rule extended to tables that measured
no schedule without overlap:

1. compute: each model's profile is scaled to the table's single-GPU step without the distributed
   runtime (`PublicTable.compute_method`, per cluster): these rows are inputs, not predictions;
2. fitted: per connection, the bandwidth of each link (latency the preset's, never fitted), by least
   squares on the relative step error (`survey.fit_link`), on the table's anchor (`anchor_model`
   with `anchor_method`) only: the intra-node link on the anchor's smallest single-machine
   configuration with p >= 2, then the inter-node link on its smallest multi-machine configuration;
   a link is fitted only if a held-out row of its connection crosses it afterwards, else it keeps its
   preset (the stated line rate) and every row on it is held out;
3. inconsistent: a multi-machine row whose measured step is shorter than one all-reduce of the
   model's gradient takes at the connection's stated line rate per machine (2 (p - 1) / p x gradient
   bytes / line rate) cannot be predicted by any schedule on that network: reported with both
   numbers, neither fitted nor counted;
4. not predicted: the methods the kit does not model (`PublicTable.not_predicted`, with why);
5. held out: every other row; its error is computed once, after the fit.
"""
from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from typing import Any
from pathlib import Path

import pandas as pd

from ...comm.netmodel import NCCL, NetModel, parse_net
from ...errors import ConfigError
from ...paths import repo_root
from ..layer_profile import Profile
from .effects import WHATIF, Effects
from .simulator import Prediction, simulate
from ..cases import DDP_TABLE_METHODS, DLPERF_TABLE_METHODS, GRACE_TABLE_METHODS, HOROVOD_TABLE_METHODS, Method
from .survey import MODEL_COLUMNS, SURVEY_EFFECTS, fit_link, net_label
from .survey import load_error as survey_error
from .sweep import find_profile
from .topology import Topology

MiB = 2**20
VALIDATION = Path("reproduce") / "validation"
DEVICE = "V100-fp32"                  # the profiles' device: only their proportions are used (scaled)
COMMON = ["table", "cluster", "connection", "model", "method", "batch_size", "nproc", "nodes", "step_s",
          "source", "row"]            # `read`'s columns; `row` is the row's index in its measured CSV
FIT_INTRA, FIT_INTER = "fit intra", "fit inter"
COMPUTE, HELD_OUT, NOT_PREDICTED, INCONSISTENT = "compute", "held out", "not predicted", "inconsistent"
SPLITS = (COMPUTE, FIT_INTRA, FIT_INTER, HELD_OUT, NOT_PREDICTED, INCONSISTENT)


@dataclass(frozen=True)
class Connection:
    """A table's network as it states it: the presets the links start from (`intra` inside a
    machine, `inter` between machines: a preset or a --net spec) and the stated line rate of one
    machine's network in bytes/s (the feasibility bound of `split`, rule 3)."""

    intra: str
    inter: str
    line_rate_Bps: float


@dataclass(frozen=True)
class PublicTable:
    """One public table (`title`, a few words naming it): where it comes from (`source`: repo, path,
    commit), its stated setting in words, its CSV and how its rows map to the simulator (`reader` to
    the `COMMON` columns, models to committed profiles, methods to the kit's schedules, connections to
    presets, the runtime's `effects`), its single-GPU `compute_method` and its fit anchor (module doc)."""

    name: str
    title: str                                   # how a band's reason names it (`error_band`)
    source: dict[str, str]
    setting: str
    measured_csv: Path
    reader: Callable[[pd.DataFrame], pd.DataFrame]
    gpus_per_node: int
    models: dict[str, str]                       # the table's model name -> the kit's model
    methods: dict[str, Method]
    not_predicted: dict[str, str]                # method -> why it is not predicted
    connections: dict[str, Connection]
    effects: Effects
    compute_method: str
    anchor_model: str
    anchor_method: str
    notes: tuple[str, ...] = field(default_factory=tuple)
    profile_batch: dict[str, int] = field(default_factory=dict)   # the kit's model -> the batch of the committed
                                                                  # profile used, where the table's batch has none

    def path(self) -> Path:
        """The measured CSV in this checkout."""
        return repo_root(Path(__file__).parent) / self.measured_csv


def _source(s: dict[str, str]) -> str:
    return f"{s['repo']}:{s['path']}@{s['commit']}"


# ------------------------------------------------------------------ PyTorch's DDP benchmark
DDP_SOURCE = {"repo": "pytorch/pytorch", "path": "benchmarks/distributed/ddp/README.md",
              "commit": "bf69c149b872e3c19ad493406a6d67ce3e97d716"}
DDP_CONNECTION = "NVLink inside, 4 x 100 Gb/s InfiniBand between"
DDP_MODELS = {"resnet50": "resnet50", "resnet101": "resnet101", "resnext50_32x4d": "resnext50_32x4d",
              "resnext101_32x8d": "resnext101_32x8d"}


def _read_ddp(df: pd.DataFrame) -> pd.DataFrame:
    method = [m if m == "no ddp" else f"DDP {b:g} MB buckets" for m, b in zip(df.method, df.bucket_cap_mb)]
    return pd.DataFrame(dict(cluster="DGX-1 V100", connection=DDP_CONNECTION, model=df.model, method=method,
                             batch_size=df.batch_size, nproc=df.nproc, nodes=df.machines, step_s=df.p75_s,
                             source=df.source, row=df.index))


DDP_TABLE = PublicTable(
    name="pytorch_ddp", title="PyTorch's DDP benchmark", source=DDP_SOURCE,
    setting=("PyTorch's DDP benchmark: sec/iter (p50/p75/p90/p95) of ResNet-50/101, ResNeXt-50 32x4d and "
             "ResNeXt-101 32x8d (torchvision, batch 32) on 1, 2, 4, 8 V100s in one DGX-1 (NVLink) and 16 in two "
             "(4 x 100 Gb/s InfiniBand per machine), PyTorch 1.4.0a0+05140f0, CUDA 10.0, NCCL; the example output "
             "with bucket_cap_mb 25 (the default; its bucket is not printed, its ResNet-50 rows agree with the "
             "diff's baseline within rounding) and diff.py's test run with bucket_cap_mb 1 (p75, p95)"),
    measured_csv=VALIDATION / "ddp_benchmark_measured.csv", reader=_read_ddp, gpus_per_node=8,
    models=DDP_MODELS,
    methods=DDP_TABLE_METHODS,
    not_predicted={}, connections={DDP_CONNECTION: Connection("NVLink", "IB-EDR", 4 * 100e9 / 8)},
    effects=Effects(contention=WHATIF.contention), compute_method="no ddp",
    anchor_model="resnet50", anchor_method="DDP 25 MB buckets",
    notes=("the step is the p75 sec/iter: the one statistic both outputs print",))

# ------------------------------------------------------------------ Horovod's first README table
HOROVOD_SOURCE = {"repo": "horovod/horovod", "path": "README.md",
                  "commit": "849ef0a636302d7e734a47c9c9bb80b3fa5597aa"}
HOROVOD_FIRST, HOROVOD_REMOVED = "d54e3a886486decc8cd21f5fbdfc34da9b16d7ee", "6bb6a2dbc0d49120f78fcca824326b9f1cc58693"
HOROVOD_CLUSTERS = {"4 servers x 4 Pascal GPUs, RoCE-capable 25 Gbit/s": ("25GbE", 25e9 / 8),
                    "16 servers x 4 Pascal GPUs, plain 40 Gbit/s": ("40GbE:40Gbit,10us", 40e9 / 8)}
HOROVOD_SETUPS = {"TCP Horovod (allreduce on GPU with NCCL)": "NCCL over TCP",
                  "RDMA Horovod (allreduce on GPU with NCCL)": "NCCL over RDMA",
                  "TCP Horovod (allreduce on CPU)": "MPI on the CPU over TCP",
                  "RDMA Horovod (allreduce on CPU)": "MPI on the CPU over RDMA"}
HOROVOD_BASELINE = "Baseline single-GPU (batch size=64)"
HOROVOD_PS = ("Distributed TensorFlow", "Distributed TensorFlow (variables on CPU)")


def _horovod_connection(cluster: str, setup: str) -> str:
    return f"{cluster.split(',')[1].strip()}, {HOROVOD_SETUPS.get(setup, setup)}"


def _read_horovod(df: pd.DataFrame) -> pd.DataFrame:
    method = ["Horovod" if s in HOROVOD_SETUPS else s for s in df.setup]
    connection = [_horovod_connection(c, s) if s in HOROVOD_SETUPS else c.split(",")[1].strip()
                  for c, s in zip(df.cluster, df.setup)]
    return pd.DataFrame(dict(cluster=df.cluster, connection=connection, model=df.model, method=method,
                             batch_size=df.batch_size, nproc=df.nproc, nodes=df.servers,
                             step_s=df.batch_size * df.nproc / df.throughput, source=df.source, row=df.index))


HOROVOD_TABLE = PublicTable(
    name="horovod", title="Horovod's first README table", source=HOROVOD_SOURCE,
    setting=("Horovod's first benchmark table (README.md from d54e3a88, 2017-09-05, until #44): images/s of "
             "Inception V3, ResNet-101 and VGG-16 (tf_cnn_benchmarks, synthetic data, batch 64 per GPU) on 16 "
             "Pascal GPUs (4 servers x 4, RoCE-capable 25 Gbit/s) and on 64 (16 servers x 4, plain 40 Gbit/s), "
             "each cluster with its own single-GPU baseline; Horovod with NCCL or with MPI's all-reduce on the "
             "CPU, over TCP or RDMA (25 Gbit/s only), and Distributed TensorFlow's parameter servers"),
    measured_csv=VALIDATION / "horovod_readme_measured.csv", reader=_read_horovod, gpus_per_node=4,
    models={"Inception V3": "inception_v3", "ResNet-101": "resnet101", "VGG-16": "vgg16"},
    methods=HOROVOD_TABLE_METHODS,
    not_predicted={s: "parameter servers: their number and placement are not stated" for s in HOROVOD_PS},
    connections={_horovod_connection(c, s): Connection("PCIe3", spec, rate)
                 for c, (spec, rate) in HOROVOD_CLUSTERS.items() for s in HOROVOD_SETUPS
                 if "RDMA" not in s or "25 Gbit" in c},
    effects=SURVEY_EFFECTS, compute_method=HOROVOD_BASELINE, anchor_model="ResNet-101", anchor_method="Horovod",
    notes=("Horovod's cycle then: 5 ms (mpi_ops.cc's background loop), fusion threshold 64 MiB",
           "the intra-node link is never crossed alone (no single-machine row): PCIe3's preset"))

# ------------------------------------------------------------------ GRACE's released throughputs
GRACE_SOURCE = {"repo": "sands-lab/grace-data", "path": "GRACE_data_release.pickle",
                "commit": "41915bbd5009c378ba3ea1cb43cf27c6db25dfa4"}
GRACE_BATCH = 64                      # tf_cnn_benchmarks' default for resnet50 (module doc)
GRACE_LINKS = {"1g": ("1GbE", 1e9 / 8), "10g": ("10GbE", 10e9 / 8), "25g": ("25GbE", 25e9 / 8)}
GRACE_BACKENDS = {"mpi": "MPI", "nccl": "NCCL"}


def _read_grace(df: pd.DataFrame) -> pd.DataFrame:
    method = ["no compression" if m == "none" else f"{m} (compressed)" for m in df.method]
    connection = [f"{bw.replace('g', ' Gb/s')}, {GRACE_BACKENDS[b]}" for bw, b in zip(df.bw, df.backend)]
    model = ["ResNet-50" if m == "resnet50" else m for m in df.model]
    return pd.DataFrame(dict(cluster="V100 workers", connection=connection, model=model, method=method,
                             batch_size=GRACE_BATCH, nproc=df.workers, nodes=df.workers,
                             step_s=GRACE_BATCH * df.workers / df.throughput, source=df.source, row=df.index))


GRACE_TABLE = PublicTable(
    name="grace", title="GRACE's released throughputs", source=GRACE_SOURCE,
    setting=("GRACE's released throughputs: ResNet-50 on ImageNet (tf_cnn_benchmarks, Horovod 0.18.2, momentum "
             "SGD) on 1, 2, 4, 8 V100 workers of one GPU per machine at 1, 10 and 25 Gb/s, Horovod's all-reduce "
             "through MPI or NCCL, without and with 16 compression methods; batch 64 per worker "
             "(tf_cnn_benchmarks' default for resnet50; not published with the data)"),
    measured_csv=VALIDATION / "grace_measured.csv", reader=_read_grace, gpus_per_node=1,
    models={"ResNet-50": "resnet50"},
    methods=GRACE_TABLE_METHODS,
    not_predicted={},                 # every compressed method: `_not_predicted`
    connections={f"{bw.replace('g', ' Gb/s')}, {name}": Connection("PCIe3", spec, rate)
                 for bw, (spec, rate) in GRACE_LINKS.items() for name in GRACE_BACKENDS.values()},
    effects=SURVEY_EFFECTS, compute_method="no compression", anchor_model="ResNet-50", anchor_method="no compression",
    notes=("Horovod 0.18.2's defaults: 5 ms cycle, 64 MiB fusion threshold (operations.cc)",
           "the single-GPU step: the one 1-worker run (10 Gb/s, MPI)"))

# ------------------------------------------------------------------ DLPerf's torch DDP and Horovod tables
DLPERF_SOURCE = {"repo": "Oneflow-Inc/DLPerf", "path": "reports/dlperf_benchmark_test_report_v1.md",
                 "commit": "c89430bac64f64caabb0445ff7eb80175641454c"}   # the cluster; each row names its README
DLPERF_CONNECTION = "NVLink inside, 1 x 100 Gb/s InfiniBand EDR per node between"
DLPERF_SINGLE = "1 GPU"              # a predicted sub-table's own 1-GPU row: its compute
DLPERF_REPORTED = "DataLoader, 48 workers"     # pytorch/examples' input pipeline in DLPerf's report (348.62 at 1 GPU)
DLPERF_PRECISION = "fp32"
_INPUT_PIPELINE = ("an input pipeline of pytorch/examples other than the one DLPerf's report publishes for PyTorch "
                   "(DataLoader, 48 workers); the simulator models no input pipeline, and the runtime is the same")
_MIXED = ("mixed or half precision: DLPerf does not state the all-reduce's dtype, and the committed V100 profiles "
          "are fp32 (their gradient bytes and per-layer proportions)")
DLPERF_NOT_PREDICTED = {
    **{f"DDP 25 MB buckets, {v}": _INPUT_PIPELINE
       for v in ("DataLoader, 8 workers", "DALI, 8 workers", "DALI, 48 workers")},
    "apex DDP": ("apex's DistributedDataParallel (NGC PyTorch 20.03; DeepLearningExamples' ConvNets training.py and "
                 "BERT run_pretraining.py wrap the model in apex.parallel.DistributedDataParallel): a runtime the kit "
                 "does not model"),
    "Horovod in NGC MXNet": ("Horovod as DLPerf's runner.sh sets it inside NGC MXNet 20.03: MXNET_HOROVOD_NUM_GROUPS=16 "
                             "(the container's MXNet all-reduces the gradients in 16 groups) and "
                             "HOROVOD_NUM_NCCL_STREAMS=2, with a 0.1 ms cycle: grouping and streams the kit's "
                             "per-gradient all-reduce under Horovod's cycle does not model"),
    "Horovod, amp": _MIXED, "Horovod, fp16": _MIXED}


def _dlperf_method(runtime: str, precision: str, variant: str, nproc: int) -> str:
    """The method of a DLPerf row: a schedule of `DLPERF_TABLE_METHODS` (its 1-GPU row `DLPERF_SINGLE`)
    or a key of `DLPERF_NOT_PREDICTED`."""
    if runtime == "torch DDP":
        method = "DDP 25 MB buckets" + ("" if variant == DLPERF_REPORTED else f", {variant}")
    elif runtime == "apex DDP":
        method = runtime
    elif "MXNET_HOROVOD_NUM_GROUPS" in runtime:
        method = "Horovod in NGC MXNet"
    elif runtime.startswith("Horovod 0.19."):
        method = "Horovod" + ("" if precision == DLPERF_PRECISION else f", {precision}")
    else:
        method = runtime
    return DLPERF_SINGLE if nproc == 1 and method in DLPERF_TABLE_METHODS else method


def _read_dlperf(df: pd.DataFrame) -> pd.DataFrame:
    variant = df.variant.fillna("")
    method = [_dlperf_method(r, p, v, n) for r, p, v, n in zip(df.runtime, df.precision, variant, df.nproc)]
    cluster = [f"{f}: {m} {p} batch {b}" + (f", {v}" if v else "")
               for f, m, p, b, v in zip(df.framework, df.model, df.precision, df.batch_size, variant)]
    return pd.DataFrame(dict(cluster=cluster, connection=DLPERF_CONNECTION, model=df.model, method=method,
                             batch_size=df.batch_size, nproc=df.nproc, nodes=df.nodes,
                             step_s=df.batch_size * df.nproc / df.throughput, source=df.source, row=df.index))


DLPERF_TABLE = PublicTable(
    name="dlperf", title="DLPerf's tables (Oneflow-Inc/DLPerf)", source=DLPERF_SOURCE,
    setting=("DLPerf (Oneflow-Inc/DLPerf): samples/s (median of 5 or 7 runs of 100 logged iterations) of ResNet-50 "
             "v1.5 / v1b (batch 128 fp32) and BERT-base pretraining (sequence 128, batch 32/48/64 fp32) on 1, 2, 4, 8 "
             "V100-SXM2-16GB in one node (NVLink) and 16, 32 in 2 and 4 (one Mellanox InfiniBand EDR 100 Gb/s NIC per "
             "node), each sub-table with its own 1-GPU row; torch DDP of PyTorch 1.6 (pytorch/examples, NCCL 2.7.3), "
             "apex DDP (NGC PyTorch 20.03), Horovod 0.19.0 (NGC TensorFlow 20.03-tf1, NGC MXNet 20.03) and 0.19.5 "
             "(MXNet 1.6.0 with gluon-cv and gluon-nlp, NCCL 2.7.3), fp32 and AMP / fp16"),
    measured_csv=VALIDATION / "dlperf_measured.csv", reader=_read_dlperf, gpus_per_node=8,
    models={"ResNet-50 v1.5": "resnet50", "ResNet-50 v1b": "resnet50", "BERT-base": "bert_base"},
    methods=DLPERF_TABLE_METHODS, not_predicted=DLPERF_NOT_PREDICTED,
    connections={DLPERF_CONNECTION: Connection("NVLink", "IB-EDR", 100e9 / 8)},
    effects=SURVEY_EFFECTS, compute_method=DLPERF_SINGLE,
    anchor_model="ResNet-50 v1.5", anchor_method="DDP 25 MB buckets",
    notes=("Horovod 0.19.0 and 0.19.5: operations.cc sets the cycle to 5 ms and the fusion threshold to 64 MiB; "
           "DLPerf's scripts for these rows set no HOROVOD_* variable (the container's environment is taken not "
           "to either)",
           "torch DDP: pytorch/examples' main.py wraps the model in DistributedDataParallel(model, device_ids=...), "
           "bucket_cap_mb its default 25",
           "the transport between nodes is taken as NCCL over the InfiniBand NIC (DLPerf installs MLNX_OFED in the "
           "NGC containers for it); the network is fitted on the DDP anchor, not assumed",
           "profiles: ResNet-50 at batch 64 and BERT-base at batch 64 and sequence 64 (the committed V100 ones), "
           "only their proportions"),
    profile_batch={"resnet50": 64, "bert_base": 64})

TABLES = {t.name: t for t in (DDP_TABLE, HOROVOD_TABLE, GRACE_TABLE, DLPERF_TABLE)}


def _not_predicted(table: PublicTable, method: str) -> str:
    """Why `method` of `table` is not predicted, or "" if it is."""
    if method in table.not_predicted:
        return table.not_predicted[method]
    if method.endswith("(compressed)"):
        return "gradient compression: the profile holds no compression or decompression kernels"
    return ""


def read(table: PublicTable, path: Path | None = None) -> pd.DataFrame:
    """`table`'s measured CSV (or the one at `path`) in the `COMMON` columns: one row per measured
    configuration, `step_s` the seconds per step (module doc; from images/s: batch x p / throughput).
    ConfigError naming the method when a row's method is neither a schedule, a not-predicted method
    nor the table's single-GPU method."""
    df = table.reader(pd.read_csv(path or table.path()))
    df.insert(0, "table", table.name)
    known = {*table.methods, table.compute_method}
    for method in df.method.unique():
        if method not in known and not _not_predicted(table, method):
            raise ConfigError(f"{table.name}.method", method, sorted(known | set(table.not_predicted)))
    return df[COMMON]


def gradient_bytes(table: PublicTable, model: str, batch_size: int) -> int:
    """Bytes of one gradient of `table`'s `model` (the committed profile's, `DEVICE`)."""
    kit_model = table.models[model]
    return _gradient_bytes(kit_model, table.profile_batch.get(kit_model, batch_size))


@lru_cache(maxsize=None)
def _gradient_bytes(model: str, batch_size: int) -> int:
    profile = Profile.from_csv(find_profile(model, DEVICE, batch_size))
    return sum(b for layer in profile.layers for b in layer.tensor_bytes)


def split(table: PublicTable, rows: pd.DataFrame) -> pd.DataFrame:
    """`rows` (`read`) with `split` (one of `SPLITS`) and `why`, by the rule of the module doc: the
    single-GPU rows are compute; the anchor's smallest configurations fit the links; infeasible rows
    are inconsistent; methods the kit does not model are not predicted; every other row is held out."""
    out = rows.assign(split=HELD_OUT, why="")
    single = (out.method == table.compute_method) & (out.nproc == 1)
    out.loc[single, ["split", "why"]] = [COMPUTE, "the single-GPU step the profile is scaled to"]
    for i, r in out.iterrows():
        why = _not_predicted(table, r.method)
        if why:
            out.loc[i, ["split", "why"]] = [NOT_PREDICTED, why]
        elif r.nodes > 1 and r.split == HELD_OUT:
            link = table.connections[r.connection]
            bound = 2 * (r.nproc - 1) / r.nproc * gradient_bytes(table, r.model, r.batch_size) / link.line_rate_Bps
            if r.step_s < bound:
                out.loc[i, ["split", "why"]] = [INCONSISTENT, (
                    f"measured step {r.step_s:.3f} s < {bound:.3f} s, one all-reduce of the gradient at the "
                    f"stated {8 * link.line_rate_Bps / 1e9:g} Gb/s")]
    anchor = (out.model == table.anchor_model) & (out.method == table.anchor_method) & (out.split == HELD_OUT)
    for connection in out.connection.unique():
        here = out.connection == connection
        for name, on_link in ((FIT_INTRA, (out.nodes == 1) & (out.nproc >= 2)), (FIT_INTER, out.nodes > 1)):
            if name == FIT_INTRA and table.gpus_per_node == 1:
                continue
            candidates = out[here & anchor & on_link]
            if candidates.empty:
                continue
            fit_rows = candidates.index[candidates.nproc == candidates.nproc.min()]
            rest = out[here & on_link & (out.split == HELD_OUT)].index.difference(fit_rows)
            if len(rest):
                out.loc[fit_rows, ["split", "why"]] = [name, f"the anchor's smallest configuration on the "
                                                             f"{name.split()[1]}-node link"]
    return out


def start_networks(table: PublicTable, connection: str) -> tuple[NetModel, NetModel]:
    """The (intra, inter) presets `connection` starts from (`Connection`)."""
    spec = table.connections[connection]
    intra, inter = parse_net(spec.intra), parse_net(spec.inter)
    assert intra is not None and inter is not None
    return intra, inter


# ------------------------------------------------------------------ fit, predict, error
ERROR_CSV = VALIDATION / "public_error.csv"
PREDICTED = (FIT_INTRA, FIT_INTER, HELD_OUT)
COLUMNS = ["table", "cluster", "connection", "model", "method", "family", "nproc", "nodes", "split", "why",
           "measured_s", "predicted_s", "error", "intra", "inter", *MODEL_COLUMNS]
TARGET_MEDIAN, TARGET_MAX = 0.08, 0.25          # the targets on held-out rows, per schedule


def profiles(table: PublicTable, rows: pd.DataFrame) -> dict[tuple[str, str], Profile]:
    """{(model, cluster): the model's committed profile scaled to that cluster's single-GPU step}
    from the `COMPUTE` rows of `rows` (`split`)."""
    def batch(r: Any) -> int:
        return table.profile_batch.get(table.models[r.model], r.batch_size)
    return {(r.model, r.cluster): Profile.from_csv(find_profile(table.models[r.model], DEVICE, batch(r)))
            .scaled(float(r.step_s)) for r in rows[rows.split == COMPUTE].itertuples()}


def predict(table: PublicTable, profs: dict[tuple[str, str], Profile], row: Any, intra: NetModel,
            inter: NetModel) -> Prediction:
    """The simulator's prediction of `row` (a `split` row of `table`): its method's schedule on its
    model's scaled profile, `row.nproc` ranks in machines of `table.gpus_per_node` over `intra` inside
    and `inter` between, NCCL's collectives (the models of every table's runtime have no root
    collective: their all-reduces are priced alike on any backend), with the runtime's effects."""
    method = table.methods[row.method]
    return simulate(profs[(row.model, row.cluster)], method.algo, int(row.nproc), params=method.params,
                    topology=Topology(table.gpus_per_node, intra, inter, backend=NCCL), effects=table.effects)


def fit(table: PublicTable, rows: pd.DataFrame, profs: dict[tuple[str, str], Profile]) -> dict[str, tuple[NetModel, NetModel]]:
    """{connection: (intra, inter)}: each link's bandwidth fitted (`survey.fit_link`, latency the
    preset's) on the rows `split` marks `FIT_INTRA`, then `FIT_INTER`, and no other; a link without
    such rows keeps its preset."""
    nets = {}
    for connection in table.connections:
        intra, inter = start_networks(table, connection)
        here = rows[rows.connection == connection]
        if (here.split == FIT_INTRA).any():
            intra = fit_link(here[here.split == FIT_INTRA],
                             lambda r, net, inter=inter: predict(table, profs, r, net, inter).step_s, intra, False)
        if (here.split == FIT_INTER).any():
            inter = fit_link(here[here.split == FIT_INTER],
                             lambda r, net, intra=intra: predict(table, profs, r, intra, net).step_s, inter, False)
        nets[connection] = (intra, inter)
    return nets


def error_table(tables: Sequence[PublicTable] | None = None) -> pd.DataFrame:
    """Every row of `tables` (default all, `TABLES`) with its split and, for the fitted and held-out
    rows, the prediction (`COLUMNS`; error = predicted / measured step - 1) and the runtime model
    that made it (`survey.MODEL_COLUMNS`)."""
    out = []
    for table in tables or list(TABLES.values()):
        rows = split(table, read(table))
        profs = profiles(table, rows)
        nets = fit(table, rows, profs)
        for r in rows.itertuples():
            entry = dict(table=table.name, cluster=r.cluster, connection=r.connection, model=r.model, method=r.method,
                         family=table.methods[r.method].algo if r.method in table.methods else "",
                         nproc=r.nproc, nodes=r.nodes, split=r.split, why=r.why, measured_s=r.step_s)
            if r.split in PREDICTED:
                intra, inter = nets[r.connection]
                pred = predict(table, profs, r, intra, inter)
                entry.update(predicted_s=pred.step_s, error=pred.step_s / r.step_s - 1, intra=net_label(intra),
                             inter=net_label(inter), **asdict(pred.model))
            out.append(entry)
    return pd.DataFrame(out, columns=COLUMNS)


def held_out(public: pd.DataFrame, surveyed: pd.DataFrame | None = None) -> pd.DataFrame:
    """The held-out rows of every real table: `public`'s (`error_table`) and the survey's 32-GPU
    rows (`survey.load_error()` or `surveyed`), with `table`, `family` (the schedule, `algo`),
    `runtime` and `error`."""
    surveyed = survey_error() if surveyed is None else surveyed
    check = surveyed[surveyed.split == "check"].assign(table="survey")
    rows = public[public.split == HELD_OUT]
    return pd.concat([rows.assign(family=rows.algo), check.assign(family=check.algo)],
                     ignore_index=True)[["table", "family", "runtime", "connection", "model", "nproc", "error"]]


def summary(public: pd.DataFrame, surveyed: pd.DataFrame | None = None) -> pd.DataFrame:
    """Median and max |error| of the held-out rows (`held_out`) per table and schedule, then per
    schedule over all tables, with whether each meets the targets (median <= 8%, max <= 25%)."""
    rows = held_out(public, surveyed).assign(abs_error=lambda t: t.error.abs())
    by = rows.groupby(["table", "family"]).abs_error.agg(["median", "max", "count"]).reset_index()
    total = rows.groupby("family").abs_error.agg(["median", "max", "count"]).reset_index().assign(table="all")
    out = pd.concat([by, total], ignore_index=True)
    return out.assign(meets=(out["median"] <= TARGET_MEDIAN) & (out["max"] <= TARGET_MAX))


def markdown(public: pd.DataFrame, surveyed: pd.DataFrame | None = None) -> str:
    """docs/simulator_error.md's table of the held-out errors (`summary`)."""
    lines = ["| held-out rows of | schedule | median | max | rows | targets (<= 8%, <= 25%) |",
             "|---|---|---|---|---|---|"]
    for r in summary(public, surveyed).itertuples():
        lines.append(f"| {r.table} | {r.family} | {100 * r.median:.1f}% | {100 * r.max:.1f}% | {r.count} | "
                     f"{'met' if r.meets else 'not met'} |")
    return "\n".join(lines)


def error_csv() -> Path:
    """Where the committed error table lies (`ERROR_CSV` in this checkout)."""
    return repo_root(Path(__file__).parent) / ERROR_CSV


def load_error(path: Path | None = None) -> pd.DataFrame:
    """The committed error table (`error_csv()`, written by `main`), or the one at `path`."""
    return pd.read_csv(path or error_csv(), keep_default_na=False, na_values=[""])


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m distsgd.systems.timeline.public_tables [--csv PATH] [--markdown]`: compute the error
    table once, write it (default `ERROR_CSV`), print each fitted network and the held-out summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=None, help=f"where to write the table (default {ERROR_CSV})")
    parser.add_argument("--markdown", action="store_true", help="also print docs/simulator_error.md's table")
    args = parser.parse_args(argv)
    table = error_table()
    path = Path(args.csv or error_csv())
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False, float_format="%.6g")
    fitted = table[table.split.isin(PREDICTED)].drop_duplicates(["table", "connection"])
    for r in fitted.itertuples():
        print(f"{r.table}, {r.connection}: intra {r.intra}; inter {r.inter}")
    with pd.option_context("display.width", 200):
        print(summary(table).to_string(float_format=lambda v: f"{v:.3f}"))
    if args.markdown:
        print(markdown(table))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The named cases the kit runs outside the notebooks: an algorithm with its parameters and a label.

The one module of the library, besides `algorithms/` (the classes and their registry) and
`experiments/` (each notebook's runs), that names algorithms (`tests/test_algorithm_names.py`):
the schedule benchmark's cases (`DEFAULT_CASES`, sizes scaled to its small models), the local-update
cases the validation adds (`LOCAL_CASES`, `KAVG_CASE`), the survey's seven methods as its launch
scripts configure them (`SURVEY_METHODS`, documented in `timeline.survey`) and the cases the
projections of 06, 07 and 10 take from them (`SURVEY_OVERLAP_CASES`, `SURVEY_BSP_CASE`), the
schedule whose per-gradient all-reduce measures a collective's cost in place (`HOOKED_PROBE`) and
the what-if's baseline (`WHATIF_BASELINE`). Each setting is written here once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

MiB = 2**20

DEFAULT_CASES = [
    {"algo": "no_overlap", "label": "no overlap"},
    {"algo": "wfbp", "label": "WFBP"},
    {"algo": "fusion", "params": {"bucket_mb": 2.0}, "label": "tensor fusion"},
    {"algo": "mgwfbp", "params": {"profile_steps": 2}, "label": "MG-WFBP"},
    {"algo": "bytescheduler", "params": {"partition_mb": 0.5, "credit_mb": 2.0}, "label": "ByteScheduler"},
    {"algo": "ps", "params": {"bucket_mb": 2.0}, "label": "PS"},
    {"algo": "ps", "params": {"bucket_mb": 2.0, "partition_mb": 0.25}, "label": "PS + partition"},
    {"algo": "ddp", "params": {"bucket_mb": 2.0}, "label": "DDP"},
    {"algo": "dear", "params": {"threshold_mb": 2.0}, "label": "DeAR"},
]

# The cases validated besides the benchmark's schedules: the local-update algorithms it can time.
# Periods of 4 and a benchmark warm-up and step count that are multiples of 4 put the same number
# of averages in every timed window; SSD-SGD skips its S-SGD warm-up (the steps-delay stage is
# what the simulator models).
LOCAL_CASES = [
    {"algo": "local_sgd", "params": {"period": 4}, "label": "local SGD"},
    {"algo": "cocod_sgd", "params": {"period": 4}, "label": "CoCoD-SGD"},
    {"algo": "ssd_sgd", "params": {"period": 4, "warmup": 0}, "label": "SSD-SGD"},
]
KAVG_CASE = {"algo": "kavg", "params": {"period": 4, "local_groups": 2, "local_period": 2}, "label": "KAVG (2 groups)"}


@dataclass(frozen=True)
class Method:
    """A survey method as the simulator runs it: algorithm, parameters, schedule family."""

    algo: str
    params: dict[str, Any]
    family: str                      # "all-reduce" or "PS"


HOROVOD_FUSION_MB = 64.0             # the fusion buffer of the Horovod the survey ran (< 0.21)
# Horovod's tensor fusion cycle before 0.21 (5 ms, 64 MiB; since 0.21 1 ms and 128 MiB, horovod #2468):
# the per-gradient schedule as the survey's and the public tables' Horovod ran it (`ssgd`'s cycle)
HOROVOD_CYCLE = {"cycle_ms": 5.0, "cycle_mb": HOROVOD_FUSION_MB}
_BSP_MB = 536870912 / MiB            # Horovod's and BytePS's threshold in BSP: one buffer after backward
SURVEY_GPUS_PER_MACHINE = 4          # the survey's machines of 4 V100s (its BytePS: one root and one server each)
# BytePS as the survey ran it: its 4,096,000-byte partitions, machines of 4 GPUs, one server machine per
# worker machine (`ps`'s placement: machine_size, servers 0)
_PS = {"partition_mb": 4096000 / MiB, "machine_size": SURVEY_GPUS_PER_MACHINE, "servers": 0}
SURVEY_METHODS = {
    "BSP-A2A": Method("no_overlap", {"bucket_mb": _BSP_MB}, "all-reduce"),
    "WFBP-A2A": Method("wfbp", HOROVOD_CYCLE, "all-reduce"),
    "MG-WFBP": Method("mgwfbp", {}, "all-reduce"),
    "ByteScheduler-A2A": Method("bytescheduler", {"partition_mb": 4e6 / MiB, "credit_mb": 16e6 / MiB}, "all-reduce"),
    "BSP-PS": Method("ps", {**_PS, "bucket_mb": _BSP_MB}, "PS"),
    "WFBP-PS": Method("ps", {**_PS, "bucket_mb": 0.0}, "PS"),
    "ByteScheduler-PS": Method("ps", {**_PS, "bucket_mb": 0.0}, "PS"),
}


# The methods of the other public real-cluster tables (`timeline.public_tables`), as the sources ran them:
# PyTorch's DDP benchmark (its default 25 MB buckets and the 1 MB rows), Horovod's first README table,
# GRACE's uncompressed baseline (both Horovod's hook-driven all-reduce) and DLPerf's torch DDP (PyTorch 1.6,
# bucket_cap_mb left at its default 25) and Horovod 0.19.0 / 0.19.5 rows (their defaults: 5 ms, 64 MiB).
DDP_TABLE_METHODS = {"DDP 25 MB buckets": Method("ddp", {"bucket_mb": 25.0}, "all-reduce"),
                     "DDP 1 MB buckets": Method("ddp", {"bucket_mb": 1.0}, "all-reduce")}
HOROVOD_TABLE_METHODS = {"Horovod": Method("wfbp", HOROVOD_CYCLE, "all-reduce")}
GRACE_TABLE_METHODS = {"no compression": Method("wfbp", HOROVOD_CYCLE, "all-reduce")}
DLPERF_TABLE_METHODS = {"DDP 25 MB buckets": DDP_TABLE_METHODS["DDP 25 MB buckets"],
                        "Horovod": HOROVOD_TABLE_METHODS["Horovod"]}


def _case(method: str, label: str) -> dict[str, Any]:
    """A labelled case of survey `method` as the projections list it (no params key when it has none)."""
    m = SURVEY_METHODS[method]
    return {"algo": m.algo, **({"params": dict(m.params)} if m.params else {}), "label": label}


# BSP as the projections run it: no overlap, one 512 MiB buffer
SURVEY_BSP_CASE = _case("BSP-A2A", "no overlap")
# The overlapping schedules as the survey's launch scripts ran them, in the order the projections of
# 06, 07 and 10 list them, between no overlap and the parameter server / DDP / DeAR: WFBP (the kit's,
# without Horovod's fusion cycle), Horovod's fusion buffer (the kit's fusion schedule), MG-WFBP (the
# authors' greedy merge), ByteScheduler's 4,000,000-byte partitions and 16,000,000-byte credit.
SURVEY_OVERLAP_CASES = [
    {"algo": SURVEY_METHODS["WFBP-A2A"].algo, "label": "WFBP"},
    {"algo": "fusion", "params": {"bucket_mb": HOROVOD_FUSION_MB}, "label": "tensor fusion"},
    _case("MG-WFBP", "MG-WFBP"),
    _case("ByteScheduler-A2A", "ByteScheduler"),
]
SURVEY_PS_PARTITION_MB = _PS["partition_mb"]      # BytePS's 4,096,000-byte partitions

HOOKED_PROBE = "wfbp"                # one all-reduce per gradient from its hook (`measure_costs.measure_hooked_calls`)
WHATIF_BASELINE = "no_overlap"       # what the what-if's recommendation compares the best schedule with

"""A table of simulated configurations (algo x nproc x network), as `python -m distsgd simulate`
writes it, and the committed profile of a model (reproduce/layer_profiles/<device>/<model>_b*.csv).

Every argument is checked before the first configuration runs: bad input is one ConfigError.
"""
from __future__ import annotations

import re
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from ...algorithms.registry import REGISTRY
from ...comm.netmodel import NCCL, PRESETS, NetModel, named_net, parse_net
from ...errors import ConfigError
from ..layer_profile import Profile
from ...paths import repo_root
from .effects import Effects
from .costs import Overheads
from .simulator import ALGORITHMS, simulate
from .topology import Topology

PROFILE_DIR = Path("reproduce") / "layer_profiles"
COLUMNS = ["model", "algo", "nproc", "net", "batch_size", "step_s", "compute_s", "exposed_comm_s",
           "comm_s", "throughput", "gpus_per_node", "intra", "profile", "params", "runtime_model"]


def find_profile(model: str, device: str, batch_size: int | None = None,
                 root: Path | None = None) -> Path:
    """The committed profile of `model` on `device` (with `batch_size` if given, else the only
    one); ConfigError listing what exists otherwise."""
    folder = (root or repo_root(Path(__file__).parent)) / PROFILE_DIR / device
    found = sorted(folder.glob(f"{model}_b*.csv"))
    if batch_size is not None:
        found = [f for f in found if f.stem == f"{model}_b{batch_size}"]
    if len(found) != 1:
        have = sorted(f.stem for f in folder.glob("*.csv")) if folder.is_dir() else []
        raise ConfigError("model", f"{model} (device {device}, batch {batch_size or 'any'})",
                          have or f"none: no profiles in {folder}",
                          "several batch sizes: give --batch-size" if len(found) > 1 else
                          "or give --profile CSV")
    return found[0]


def split_list(text: str, field: str) -> list[str]:
    """'a,b' -> ['a', 'b']; ConfigError if empty."""
    items = [s.strip() for s in str(text).split(",") if s.strip()]
    if not items:
        raise ConfigError(field, text, "a comma-separated list")
    return items


def split_nets(specs: list[str]) -> list[str]:
    """--net values: each is a comma-separated list of presets (10GbE,IB-EDR), or one network
    spec ('bandwidth=..,latency=..' or '100Mbit,100us'); several lists may be given with ';'."""
    out = []
    for spec in specs:
        for part in str(spec).split(";"):
            names = [s.strip() for s in part.split(",") if s.strip()]
            out += names if names and all(n in PRESETS for n in names) else [part.strip()] if part.strip() else []
    if not out:
        raise ConfigError("net", specs, "one or more networks: " + ", ".join(PRESETS) + " or a spec")
    return out


Networks = Sequence[str] | Mapping[str, NetModel]


def resolve_nets(nets: Networks) -> dict[str, NetModel]:
    """{label: network} of `nets`: --net specs (a preset, 'bandwidth=..,latency=..', or either
    after 'NAME:'; the label is NAME, the preset's name or the spec, `comm.named_net`), or a
    mapping {label: NetModel} as given (a network fitted to nccl-tests). ConfigError for an
    empty spec or a label given twice."""
    if isinstance(nets, Mapping):
        for label, model in nets.items():
            if not isinstance(model, NetModel):
                raise ConfigError("net", label, "a NetModel per label")
        return dict(nets)
    out: dict[str, NetModel] = {}
    for spec in nets:
        label, model = named_net(spec)
        if model is None:
            raise ConfigError("net", spec, "a network, not ''")
        if label in out:
            raise ConfigError("net", spec, "networks with distinct labels", f"{label!r} given twice")
        out[label] = model
    return out


def check_sweep(algos: list[str], nprocs: list[int], nets: Networks, params: dict[str, Any] | None = None,
                gpus_per_node: int = 1, intra: str = "",
                hierarchical: bool = False) -> tuple[dict[str, dict[str, Any]], dict[str, Topology]]:
    """Every argument of `sweep` checked (one ConfigError for the first bad one), before anything
    runs: (the parameters of each algorithm, {net label: its topology: a GPU cluster's, NCCL's
    collectives}); `hierarchical` as `Topology`'s."""
    for algo in algos:
        if algo not in ALGORITHMS:
            raise ConfigError("algos", algo, sorted(ALGORITHMS))
    for p in nprocs:
        if isinstance(p, bool) or not isinstance(p, int) or p < 1:
            raise ConfigError("nprocs", p, "integers >= 1")
    params = dict(params or {})
    known = {q.name for a in algos for q in REGISTRY[a].params}
    for key in params:
        if key not in known:
            raise ConfigError("set", key, sorted(known) or "none", "no chosen algorithm has this parameter")
    per_algo = {a: {k: v for k, v in params.items() if k in {q.name for q in REGISTRY[a].params}}
                for a in algos}
    for a in algos:
        REGISTRY[a].resolve_params(per_algo[a])
    intra_net = parse_net(intra, "intra") if intra else None
    if gpus_per_node > 1 and intra_net is None:
        raise ConfigError("intra", intra, "a network spec (the intra-node link) when gpus_per_node > 1")
    return per_algo, {label: Topology(gpus_per_node, intra_net or model, model, hierarchical, NCCL)
                      for label, model in resolve_nets(nets).items()}


def sweep(profile: Profile, algos: list[str], nprocs: list[int], nets: Networks,
          params: dict[str, Any] | None = None, gpus_per_node: int = 1, intra: str = "",
          profile_name: str = "", trace_dir: Path | None = None, hierarchical: bool = False,
          effects: Effects | None = None,
          overheads: Overheads | None = None) -> pd.DataFrame:
    """One row per (algo, nproc, net) (`COLUMNS`; throughput = samples/s over all ranks;
    runtime_model: the `simulate.RuntimeModel` that made the row's prediction); with
    `trace_dir`, a Chrome trace per configuration. `params` go to the algorithms that have them
    (a name no algorithm has is an error); `nets` are --net specs or {label: NetModel}
    (`resolve_nets`; the `net` column is the label); `intra` (a --net spec) is the intra-node
    link of nodes of `gpus_per_node` ranks, the networks `nets` being the inter-node link;
    `hierarchical` as `Topology`'s, `effects` and `overheads` as `simulate`'s
    (defaults: off). Everything is checked first (`check_sweep`)."""
    per_algo, topologies = check_sweep(algos, nprocs, nets, params, gpus_per_node, intra, hierarchical)
    rows = []
    for algo in algos:
        for net, topo in topologies.items():
            for p in nprocs:
                pred = simulate(profile, algo, p, params=per_algo[algo], topology=topo, label=net,
                                effects=effects, overheads=overheads)
                rows.append({"model": profile.model, "algo": algo, "nproc": p, "net": net,
                             "batch_size": profile.batch_size, "step_s": pred.step_s,
                             "compute_s": pred.compute_s, "exposed_comm_s": pred.exposed_comm_s,
                             "comm_s": pred.comm_s,
                             "throughput": profile.batch_size * p / pred.step_s,
                             "gpus_per_node": gpus_per_node, "intra": intra or net,
                             "profile": profile_name, "params": per_algo[algo], "runtime_model": pred.model})
                if trace_dir is not None:
                    safe = re.sub(r"[^\w.+-]", "_", net)
                    pred.to_chrome_trace(Path(trace_dir) / f"{algo}_p{p}_{safe}.json")
    return pd.DataFrame(rows, columns=COLUMNS)


# The sweep `python -m distsgd bench --sweep` times (issue 23, item 7: every algorithm x 3 models x
# p = 2 .. 1024 x 3 networks): the committed V100 profiles of a CNN, a CNN with large tensors, a
# transformer, all algorithms with their defaults, one GPU per node.
SPEED_MODELS = {"resnet50": 64, "vgg16": 32, "bert_base": 64}
SPEED_NPROCS = [2**k for k in range(1, 11)]
SPEED_NETS = ["10GbE", "25GbE", "IB-EDR"]


def time_sweep(device: str = "V100-fp32", models: dict[str, int] | None = None,
               nprocs: list[int] | None = None, nets: list[str] | None = None) -> tuple[pd.DataFrame, float]:
    """(the table, wall seconds) of every algorithm x `models` ({model: batch}, committed profiles on
    `device`; loading them is not timed) x `nprocs` x `nets`; by default the sweep above."""
    profiles = [Profile.from_csv(find_profile(m, device, b)) for m, b in (models or SPEED_MODELS).items()]
    t0 = time.perf_counter()
    df = pd.concat([sweep(p, list(ALGORITHMS), nprocs or SPEED_NPROCS, nets or SPEED_NETS) for p in profiles],
                   ignore_index=True)
    return df, time.perf_counter() - t0

"""The simulator's error on a real cluster: the survey's benchmark (Shi et al., "Communication-
Efficient Distributed Deep Learning: Survey, Evaluation, and Challenges", arXiv 2005.13247, IEEE
Network 2021) predicted row by row and compared with its published throughputs.

Measured (`MEASURED_CSV`, from `SOURCE`): throughput (samples/s over all GPUs, mean of 5 runs) of
7 methods x ResNet-50 (batch 64 per GPU) / BERT-Base (64, sentence length 64) / BERT-Large (8) x
three connections (`FABRICS`: 10GbE with TCP/IP; 100 Gb/s InfiniBand with RDMA; "100GbE with TCP/IP",
TCP over the same InfiniBand NICs, `rdma=2` in the survey's `benchmarks.py`) x 4, 8, 16, 32 V100-PCIe
GPUs in machines of 4, and each model's single-GPU throughput. Step time = batch x p / throughput.

Predicted (`predict`): `timeline.simulate` of the method as the survey's launch scripts configure
it (`cases.SURVEY_METHODS`, HKBU-HPML/ddl-benchmarks `benchmarks.py`, `mgwfbp/horovod_mpi_cj.sh`,
`bytescheduler/horovod_mpi_cj.sh`, `byteps/launch.sh`, `byteps/byteps_distributed_optimizer.py`):

- BSP-A2A: Horovod, threshold 536870912: all gradients in one all-reduce after backward
  (`no_overlap`, bucket 512 MiB);
- WFBP-A2A: threshold 0: one all-reduce per gradient as it is ready, under the fusion cycle of the
  Horovod the survey ran (`wfbp` with `cases.HOROVOD_CYCLE`: 5 ms, 64 MiB; Horovod < 0.21);
- MG-WFBP: merged-gradient WFBP (`mgwfbp`, its merge planned on the profile and the network);
- ByteScheduler-A2A: `BYTESCHEDULER_PARTITION=4000000`, `BYTESCHEDULER_CREDIT=16000000`, credit
  tuning off (`bytescheduler`, partition_mb = 4e6 / 2**20, credit_mb = 16e6 / 2**20);
- BSP-PS: BytePS with `BYTEPS_FUSION_THRESHOLD=536870912` (one fused push_pull after backward),
  WFBP-PS: threshold 0 (one push_pull per gradient), ByteScheduler-PS: threshold 0 and
  `BYTEPS_SERVER_ENABLE_SCHEDULE=1` (the order of the servers' summing, which the model does not
  distinguish: the same prediction as WFBP-PS); all with `BYTEPS_PARTITION_BYTES=4096000` and
  nworkers / 4 separate server machines (`ps` on BytePS's placement: machine_size 4, servers 0).

Each row of the error table carries the runtime model that predicted it (`simulate.RuntimeModel`:
the schedule, the kit's class that charged it, its resolved parameters, the
compute contention and the per-call overheads; columns `MODEL_COLUMNS`): the key of the error band
that decides a projection (`error_band`). Every method is a kit's class: WFBP-A2A the `ssgd` class
with Horovod's fusion cycle as its parameters, the PS methods the `ps` class with BytePS's placement
as its parameters.

On nodes of 4 GPUs: the intra-node link is PCIe (V100-PCIe), the inter-node link the fabric. The
compute of a step is the model's committed V100 layer profile (`reproduce/layer_profiles/V100-fp32`)
scaled to the survey's own single-GPU step (batch / its 1-GPU throughput). Effects
(`SURVEY_EFFECTS`, the same for every row): the what-if CLI's compute contention (0.189,
`effects.WHATIF`, arXiv 2507.03114); no per-call cost.

Fitted (`fit`), and nothing else: per fabric the bandwidth of the inter-node link, and the
bandwidth of PCIe, each by least squares on the relative error of the ResNet-50 BSP-A2A (no
overlap) rows: p = 4 for PCIe (every fabric's row), p = 8 and 16 for each fabric. The latencies
stay the presets' (10GbE 20 us, IB-EDR 2 us, PCIe3 1 us; `comm.netmodel`; TCP over InfiniBand: the
10GbE preset's TCP latency): these rows carry one message size, so a latency is identified only by
the 2(p-1) growth from p = 8 to 16, and fitted so (`fit(fit_latency=True)`, the CLI's
--fit-latency) it reads 154 us on 10GbE and 71 us on IB, which makes every per-partition all-reduce
of ByteScheduler pay 2(p-1) of them (+164% at p = 16 on ResNet-50 over 10GbE). The 32-GPU rows are
never fitted to: they are the final check (`split` "check"). No per-schedule or per-model factor.
"""
from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy.optimize import least_squares

from ...comm.netmodel import NCCL, NetModel, parse_net
from ..cases import SURVEY_GPUS_PER_MACHINE, SURVEY_METHODS
from ..layer_profile import Profile
from ...paths import repo_root
from .effects import WHATIF, Effects
from .simulator import Prediction, RuntimeModel, runtime_model, simulate
from .sweep import find_profile
from .topology import Topology

MiB = 2**20
SOURCE = {"repo": "HKBU-HPML/ddl-benchmarks", "path": "results/2020-05-29/README.md",
          "commit": "30de09bc38a599d213f5568acf9efeb79505aa42"}
MEASURED_CSV = Path("reproduce") / "validation" / "survey_measured.csv"
ERROR_CSV = Path("reproduce") / "validation" / "survey_error.csv"
MODELS = {"ResNet-50": "resnet50", "BERT-Base": "bert_base", "BERT-Large": "bert_large"}
# connection -> the network the fit starts from (a preset, or NAME:bandwidth,latency: TCP over the
# InfiniBand NIC at its peak rate with TCP's latency); a projection on that network is covered by the
# connection's rows (`error_band`)
FABRICS = {"10GbE with TCP/IP": "10GbE", "100GbE with TCP/IP": "100GbE-TCP:100Gbit,20us",
           "100GbIB with RDMA": "IB-EDR"}
INTRA_PRESET = "PCIe3"
GPUS_PER_NODE = SURVEY_GPUS_PER_MACHINE
FIT_METHOD = "BSP-A2A"
FIT_MODEL = "ResNet-50"
CHECK_NPROC = 32
SURVEY_EFFECTS = Effects(contention=WHATIF.contention)


MODEL_COLUMNS = [f.name for f in fields(RuntimeModel)]      # the runtime model that predicted a row
COLUMNS = ["model", "method", "family", "connection", "nproc", "split", "measured_throughput",
           "measured_s", "predicted_s", "error", "intra", "inter", *MODEL_COLUMNS]


@dataclass(frozen=True)
class Fit:
    """The fitted networks: PCIe inside a machine, and each fabric's inter-node link."""

    intra: NetModel
    inter: dict[str, NetModel]

    def describe(self) -> str:
        """One line per fitted network."""
        lines = [f"PCIe (intra-node): {net_label(self.intra)} (latency: the {INTRA_PRESET} preset's)"]
        lines += [f"{c}: {net_label(m)}" for c, m in self.inter.items()]
        return "\n".join(lines)


def net_label(m: NetModel) -> str:
    """The label "<bandwidth> GB/s, <latency> us" of a network, as the error tables write it."""
    return f"{m.bandwidth_Bps / 1e9:.4g} GB/s, {1e6 * m.latency_s:.4g} us"


def load_measured(path: Path | None = None) -> pd.DataFrame:
    """The survey's table (`MEASURED_CSV`) with `step_s` = batch x p / throughput."""
    df = pd.read_csv(path or repo_root(Path(__file__).parent) / MEASURED_CSV)
    return df.assign(step_s=df.batch_size * df.nproc / df.throughput)


def single_gpu(measured: pd.DataFrame) -> pd.DataFrame:
    """Each model's single-GPU row (its first p = 1 row): `batch_size` and `step_s`, by model."""
    return measured[measured.nproc == 1].groupby("model")[["batch_size", "step_s"]].first()


def profiles(measured: pd.DataFrame, device: str = "V100-fp32") -> dict[str, Profile]:
    """Each model's committed profile scaled to the survey's single-GPU step (`single_gpu`)."""
    return {model: Profile.from_csv(find_profile(MODELS[model], device, int(r.batch_size))).scaled(float(r.step_s))
            for model, r in single_gpu(measured).iterrows()}


def topology(intra: NetModel, inter: NetModel) -> Topology:
    """The survey's machines of 4 GPUs over `intra` inside and `inter` between (every method), NCCL's
    collectives (Horovod's all-reduce and BytePS's machine-local reduce and broadcast run on NCCL)."""
    return Topology(GPUS_PER_NODE, intra, inter, backend=NCCL)


def predict(profile: Profile, method: str, p: int, intra: NetModel, inter: NetModel) -> Prediction:
    """The simulator's prediction of a survey `method` on `p` GPUs in machines of 4 (module doc),
    with the runtime model that made it (`Prediction.model`)."""
    m = SURVEY_METHODS[method]
    return simulate(profile, m.algo, p, params=m.params, topology=topology(intra, inter),
                    effects=SURVEY_EFFECTS)


def runtime(method: str) -> RuntimeModel:
    """The runtime model that predicts a survey `method`'s rows (`predict`), known without
    simulating: the key of its error band (`error_band`)."""
    net = parse_net(INTRA_PRESET)
    assert net is not None
    return runtime_model(SURVEY_METHODS[method].algo, SURVEY_METHODS[method].params, topology(net, net), SURVEY_EFFECTS)


def predict_step(profile: Profile, method: str, p: int, intra: NetModel, inter: NetModel) -> float:
    """Simulated step seconds of a survey `method` (`predict`)."""
    return predict(profile, method, p, intra, inter).step_s


def fit_link(rows: pd.DataFrame, step: Callable[[pd.Series, NetModel], float], start: NetModel,
             fit_latency: bool = True) -> NetModel:
    """The NetModel (bandwidth, and latency if `fit_latency`, else `start`'s) minimizing the sum
    of squared relative errors step(row, net) / row.step_s - 1 over `rows`: least squares in
    (log bandwidth, latency in us), latency in [0, 1000] us."""
    def net(x: Sequence[float]) -> NetModel:
        return NetModel(math.exp(x[0]), x[1] * 1e-6 if fit_latency else start.latency_s)

    def residuals(x: Sequence[float]) -> list[float]:
        return [step(r, net(x)) / r.step_s - 1 for r in rows.itertuples()]

    x0 = [math.log(start.bandwidth_Bps)] + ([1e6 * start.latency_s] if fit_latency else [])
    bounds = ([-math.inf] + ([0.0] if fit_latency else []), [math.inf] + ([1000.0] if fit_latency else []))
    return net(least_squares(residuals, x0, bounds=bounds, x_scale="jac").x)


def fit(measured: pd.DataFrame, profs: dict[str, Profile], fit_latency: bool = False) -> Fit:
    """Fit PCIe's bandwidth on the p = 4 rows, then each fabric's bandwidth (and latency if
    `fit_latency`) on the p = 8, 16 rows, of ResNet-50 BSP-A2A (module doc); the 32-GPU rows take
    no part."""
    rows = measured[(measured.model == FIT_MODEL) & (measured.method == FIT_METHOD)]
    start_intra = parse_net(INTRA_PRESET)
    assert start_intra is not None
    intra = fit_link(rows[rows.nproc == GPUS_PER_NODE],
                     lambda r, net: predict_step(profs[r.model], r.method, r.nproc, net, net), start_intra,
                     fit_latency=False)
    inter = {}
    for connection, spec in FABRICS.items():
        fabric_rows = rows[(rows.connection == connection) & (rows.nproc > GPUS_PER_NODE) & (rows.nproc < CHECK_NPROC)]
        start = parse_net(spec)
        assert start is not None
        inter[connection] = fit_link(fabric_rows,
                                     lambda r, net: predict_step(profs[r.model], r.method, r.nproc, intra, net), start,
                                     fit_latency)
    return Fit(intra, inter)


def error_table(measured: pd.DataFrame | None = None, fit_latency: bool = False) -> tuple[pd.DataFrame, Fit]:
    """(every row of the survey's table with p >= 4: measured vs predicted
    (`COLUMNS`; error = predicted / measured step - 1; split "fit", "develop" (p <= 16) or "check"
    (p = 32); the runtime model that predicted it, `MODEL_COLUMNS`), the fit); `fit_latency` as `fit`'s."""
    measured = load_measured() if measured is None else measured
    profs = profiles(measured)
    fitted = fit(measured, profs, fit_latency)
    rows = []
    for r in measured[(measured.nproc >= GPUS_PER_NODE) & measured.connection.isin(FABRICS)].itertuples():
        inter = fitted.inter[r.connection]
        pred = predict(profs[r.model], r.method, r.nproc, fitted.intra, inter)
        fitted_row = r.model == FIT_MODEL and r.method == FIT_METHOD and r.nproc < CHECK_NPROC
        rows.append(dict(model=r.model, method=r.method, family=SURVEY_METHODS[r.method].family,
                         connection=r.connection, nproc=r.nproc,
                         split="check" if r.nproc == CHECK_NPROC else "fit" if fitted_row else "develop",
                         measured_throughput=r.throughput, measured_s=r.step_s, predicted_s=pred.step_s,
                         error=pred.step_s / r.step_s - 1, intra=net_label(fitted.intra), inter=net_label(inter),
                         **asdict(pred.model)))
    return pd.DataFrame(rows, columns=COLUMNS), fitted


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Median and max |error| per fabric, schedule family and p range (p <= 16; p = 32)."""
    t = table.assign(abs_error=table.error.abs(),
                     range=["p = 32" if p == CHECK_NPROC else "p <= 16" for p in table.nproc])
    by = t.groupby(["range", "connection", "family"]).abs_error.agg(["median", "max", "count"])
    total = t.groupby(["range"]).abs_error.agg(["median", "max", "count"])
    total.index = pd.MultiIndex.from_tuples([(i, "all", "all") for i in total.index], names=by.index.names)
    return pd.concat([by, total]).sort_index()


NETWORK_NAMES = {"10GbE with TCP/IP": "10GbE", "100GbE with TCP/IP": "TCP over IB", "100GbIB with RDMA": "IB (RDMA)",
                 "all": "all"}                 # the short names of docs/simulator_error.md's tables


def markdown(table: pd.DataFrame) -> str:
    """docs/simulator_error.md's two tables, from the error table: median and max |error| per p
    range, connection and family (`summary`), and the signed error (%) of every 32-GPU row."""
    lines = ["| rows | network | family | median | max | rows |", "|---|---|---|---|---|---|"]
    order = {c: i for i, c in enumerate([*FABRICS, "all"])}
    rows = summary(table).sort_index(key=lambda level: level.map(order) if level.name == "connection" else level)
    for (rng, connection, family), r in rows.iterrows():
        lines.append(f"| {rng} | {NETWORK_NAMES[connection]} | {family} | {100 * r['median']:.1f}% | "
                     f"{100 * r['max']:.1f}% | {int(r['count'])} |")
    check = table[table.nproc == CHECK_NPROC].pivot_table(index=["connection", "model"], columns="method",
                                                         values="error").reindex(list(FABRICS), level="connection")
    lines += ["", "| network | model | " + " | ".join(SURVEY_METHODS) + " |", "|---|---|" + "---|" * len(SURVEY_METHODS)]
    for (connection, model), r in check.iterrows():
        lines.append(f"| {NETWORK_NAMES[connection]} | {model} | "
                     + " | ".join(f"{100 * r[m]:+.1f}" for m in SURVEY_METHODS) + " |")
    return "\n".join(lines)


OVERLAPPING = ("WFBP-A2A", "MG-WFBP", "ByteScheduler-A2A")   # the all-reduce schedules that overlap BSP-A2A's bytes


def gains_over_bsp(table: pd.DataFrame, measured: pd.DataFrame | None = None) -> pd.DataFrame:
    """Where the overlapping all-reduce schedules (`OVERLAPPING`) miss, read from the table alone:
    per row, the gain over BSP-A2A on the same model, connection and p (BSP's step / the
    schedule's), measured and predicted, and the measured step over the least any schedule of
    BSP's bytes reaches on the network BSP's row measured: max(c, s_BSP - c), with c the survey's
    single-GPU step (BSP computes, then all-reduces; the best overlap hides the shorter of the
    two). A measured step below that bound (ratio < 1) would be one no single network explains
    together with BSP's row; at or above it the row is consistent with BSP's network and a miss is
    the schedule model's. Columns: model, connection, nproc, method, error, measured_gain,
    predicted_gain, over_bound."""
    single = single_gpu(measured if measured is not None else load_measured()).step_s
    key = ["model", "connection", "nproc"]
    bsp = table[table.method == "BSP-A2A"].set_index(key)
    rows = table[table.method.isin(OVERLAPPING)].set_index(key)
    b = bsp.reindex(rows.index)
    c = single.reindex(rows.index.get_level_values("model")).to_numpy()
    out = pd.DataFrame({"method": rows.method, "error": rows.error,
                        "measured_gain": b.measured_s / rows.measured_s,
                        "predicted_gain": b.predicted_s / rows.predicted_s,
                        "over_bound": rows.measured_s / np.maximum(c, b.measured_s - c)})
    return out.reset_index()


def gains_markdown(table: pd.DataFrame) -> str:
    """docs/simulator_error.md's table of the overlapping schedules at 32 GPUs (`gains_over_bsp`):
    gain over BSP-A2A measured / predicted, and the measured step over the bound, per row."""
    g = gains_over_bsp(table).query("nproc == @CHECK_NPROC")
    g = g.set_index(["connection", "model", "method"])
    lines = ["| network | model | " + " | ".join(f"{m}: gain measured / predicted, step / bound" for m in OVERLAPPING) + " |",
             "|---|---|" + "---|" * len(OVERLAPPING)]
    for connection in FABRICS:
        for model in MODELS:
            cells = [g.loc[(connection, model, m)] for m in OVERLAPPING]
            lines.append(f"| {NETWORK_NAMES[connection]} | {model} | " + " | ".join(
                f"{r.measured_gain:.2f} / {r.predicted_gain:.2f}, {r.over_bound:.2f}" for r in cells) + " |")
    return "\n".join(lines)


def error_csv() -> Path:
    """Where the committed error table lies (`ERROR_CSV` in this checkout)."""
    return repo_root(Path(__file__).parent) / ERROR_CSV


def load_error(path: Path | None = None) -> pd.DataFrame:
    """The committed error table (`error_csv()`, written by `write`), or the one at `path`."""
    return pd.read_csv(path or error_csv())


def plot(table: pd.DataFrame, path: Path, band: float = 0.15) -> Path:
    """Predicted against measured step time of every row (log-log), one panel per connection: the
    all-reduce and PS families in two colours, the 32-GPU check rows as triangles, the diagonal
    and a ±`band` region around it."""
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FixedLocator, NullFormatter, ScalarFormatter

    connections = list(FABRICS)
    fig, axes = plt.subplots(1, len(connections), figsize=(5 * len(connections), 4.6), sharex=True, sharey=True)
    lim = np.array([0.8 * min(table.measured_s.min(), table.predicted_s.min()),
                    1.25 * max(table.measured_s.max(), table.predicted_s.max())])
    for ax, connection in zip(axes, connections):
        rows = table[table.connection == connection]
        for (family, check), g in rows.groupby(["family", rows.split == "check"]):
            ax.scatter(g.measured_s, g.predicted_s, marker="^" if check else "o", s=28,
                       color="C0" if family == "all-reduce" else "C3", alpha=0.8,
                       label=f"{family}, {'p = 32 (check)' if check else 'p <= 16'}")
        ax.plot(lim, lim, "k-", lw=0.8)
        ax.fill_between(lim, lim * (1 - band), lim * (1 + band), color="grey", alpha=0.2, label=f"±{band:.0%}")
        ax.set(xscale="log", yscale="log", xlabel="measured step (s)", title=f"{connection}, {rows.inter.iloc[0]}")
        for axis in (ax.xaxis, ax.yaxis):
            axis.set_major_locator(FixedLocator([0.25, 0.5, 1, 2, 4]))
            axis.set_major_formatter(ScalarFormatter())
            axis.set_minor_formatter(NullFormatter())
    axes[0].set_ylabel("simulated step (s)")
    axes[0].legend(fontsize=8)
    fig.suptitle("the simulator against the survey's 4-32 V100 cluster (ResNet-50, BERT-Base, BERT-Large)")
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return Path(path)


def write(path: Path | None = None, fit_latency: bool = False) -> tuple[Path, pd.DataFrame, Fit]:
    """Compute the error table and write it (default `ERROR_CSV`, floats to 6 significant digits)."""
    table, fitted = error_table(fit_latency=fit_latency)
    path = Path(path or error_csv())
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, index=False, float_format="%.6g")
    return path, table, fitted


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m distsgd.systems.timeline.survey [--csv PATH]`: write the table, print the fit and summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--csv", type=Path, default=None, help=f"where to write the table (default {ERROR_CSV})")
    parser.add_argument("--markdown", action="store_true", help="also print docs/simulator_error.md's tables")
    parser.add_argument("--fit-latency", action="store_true",
                        help="fit each fabric's latency too (module doc; not the committed table)")
    args = parser.parse_args(argv)
    path, table, fitted = write(args.csv, args.fit_latency)
    print(fitted.describe())
    with pd.option_context("display.width", 200):
        print(summary(table).to_string(float_format=lambda v: f"{v:.3f}"))
    if args.markdown:
        print(markdown(table), gains_markdown(table), sep="\n\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

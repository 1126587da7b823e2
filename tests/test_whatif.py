"""What-if for your own cluster (`distsgd.systems.whatif`, `python -m distsgd simulate`): your compute scales
the profile, the papers' models are built from FLOPs when no profile matches, your network from a
spec or an nccl-tests log, the CSV / plot / recommendation, and bad input as one line, exit 2."""
from __future__ import annotations

import pandas as pd
import pytest
from test_netmodel import _all_reduce_perf_log, _model_times_us

from distsgd import cli

from distsgd.systems import whatif
from distsgd.comm.netmodel import NetModel
from distsgd.errors import ConfigError
from distsgd.systems.layer_profile import Layer, Profile
from distsgd.systems.timeline.sweep import sweep

LAYERS = [Layer(f"layer{i}", f, b, u, [f"layer{i}.weight"], [4 * n], [n])
          for i, (f, b, u, n) in enumerate([(1e-3, 3e-3, 1e-4, 300_000), (4e-3, 5e-3, 2e-4, 2_000_000),
                                            (2e-3, 1e-3, 0.0, 50_000)])]


def _toy(model: str = "toy", batch: int = 32, shape: tuple[int, ...] = (3, 32, 32)) -> Profile:
    return Profile(model, batch, shape, "cpu", "measured", "test", LAYERS)


@pytest.mark.parametrize("iter_time, throughput, seconds", [(0.25, None, 0.25), (None, 256.0, 0.125), (None, None, None)])
def test_iteration_seconds_from_time_or_throughput(iter_time, throughput, seconds) -> None:
    assert whatif.iteration_seconds(32, iter_time, throughput) == seconds


def test_your_time_scales_every_layer_by_one_factor(tmp_path) -> None:
    path = _toy().to_csv(tmp_path / "toy_b32.csv")
    profile, source = whatif.choose_profile(profile_csv=path, compute_s=0.5)
    assert profile.compute_s == pytest.approx(0.5) and "scaled to 0.5 s" in source
    factor = 0.5 / _toy().compute_s
    for mine, theirs in zip(profile.layers, LAYERS):
        assert (mine.forward_s, mine.backward_s, mine.update_s) == pytest.approx(
            (theirs.forward_s * factor, theirs.backward_s * factor, theirs.update_s * factor))
        assert mine.tensor_bytes == theirs.tensor_bytes


def test_a_paper_model_without_a_profile_is_built_from_its_flops(tmp_path) -> None:
    from distsgd.models import build_model
    from distsgd.systems.profiler import NUM_CLASSES

    profile, source = whatif.choose_profile("bert_base", 2, "cpu", seq_len=8, compute_s=0.3, root=tmp_path)
    assert source.startswith("FLOP-built (bert_base b2 8") and profile.source == "flops-scaled"
    assert profile.input_shape == (8,) and profile.batch_size == 2
    assert profile.compute_s == pytest.approx(0.3)
    assert profile.forward_s / profile.backward_s == pytest.approx(profile.forward_flops / profile.backward_flops)
    net = build_model("bert_base", (8,), NUM_CLASSES)
    assert sorted(profile.tensor_bytes) == sorted(4 * p.numel() for p in net.parameters())   # the exact gradients


def test_a_committed_profile_of_the_same_batch_and_input_is_preferred(tmp_path) -> None:
    folder = tmp_path / "reproduce" / "layer_profiles" / "cpu"
    _toy("resnet50", 8, (3, 32, 32)).to_csv(folder / "resnet50_b8.csv")                 # CIFAR input: not it
    path = _toy("resnet50", 8, (3, 224, 224)).to_csv(folder / "resnet50_b8_3x224x224.csv")
    profile, source = whatif.choose_profile("resnet50", 8, "cpu", compute_s=0.1, root=tmp_path)
    assert source.startswith(str(path)) and profile.layers[0].name == "layer0"
    with pytest.raises(ConfigError, match="invalid device='cpu'.*give --iter-time or --throughput"):
        whatif.choose_profile("resnet50", 16, "cpu", root=tmp_path)      # no profile, no time to scale to


def test_recommendation_names_the_best_schedule_and_its_gain_at_the_largest_p() -> None:
    df = pd.DataFrame({"net": ["a"] * 4 + ["b"] * 2, "nproc": [8, 8, 32, 32, 8, 8],
                       "algo": ["no_overlap", "wfbp", "no_overlap", "wfbp", "ps", "dear"],
                       "throughput": [100.0, 90.0, 200.0, 276.0, 50.0, 80.0]})
    assert whatif.recommend(df) == ["best: wfbp, 1.38x over no_overlap at 32 workers on a",
                                    "best: dear, 1.60x over ps at 8 workers on b"]
    assert whatif.recommend(df[df.algo == "ps"]) == ["best: ps, the only schedule simulated, 50 samples/s at 8 workers on b"]


def test_sweep_labels_named_networks_and_takes_fitted_ones() -> None:
    fitted = NetModel(1.2e9, 40e-6)
    df = sweep(_toy(), ["wfbp"], [4], ["mine:bandwidth=9.6Gbps,latency=40us", "10GbE"])
    assert list(df.net) == ["mine", "10GbE"]
    same = sweep(_toy(), ["wfbp"], [4], {"fit": fitted})
    assert same.step_s.iloc[0] == df.step_s.iloc[0]                 # 9.6 Gbit/s = 1.2 GB/s


def _nccl_log(tmp_path, alpha: float = 30e-6, bandwidth: float = 1.2e9, p: int = 8):
    log = tmp_path / "all_reduce_perf.txt"
    log.write_text(_all_reduce_perf_log(_model_times_us(alpha, bandwidth, p), p))
    return log


def test_simulate_your_cluster_writes_csv_plot_and_recommendation(tmp_path, capsys) -> None:
    out, png = tmp_path / "out.csv", tmp_path / "out.png"
    rc = cli.main(["simulate", "--profile", str(_toy().to_csv(tmp_path / "toy_b32.csv")), "--batch-size", "32",
                   "--throughput", "64", "--algos", "no_overlap,wfbp,mgwfbp,ps", "--nprocs", "4,8,16,32",
                   "--gpus-per-node", "4", "--net", "mine:bandwidth=9.9Gbps,latency=50us",
                   "--nccl-tests", str(_nccl_log(tmp_path)), "--csv", str(out), "--plot", str(png)])
    text = capsys.readouterr().out
    assert rc == 0 and png.stat().st_size > 0
    df = pd.read_csv(out)
    assert {"model", "algo", "nproc", "net", "batch_size", "step_s", "throughput", "compute_s",
            "exposed_comm_s"} <= set(df.columns)
    assert len(df) == 4 * 4 * 2 and set(df.net) == {"mine", "nccl-tests:all_reduce_perf.txt"}
    # 32 samples at 64 samples/s, plus the per-message cost (8.4 us per collective) the CLI charges
    assert df.compute_s.min() == pytest.approx(0.5, abs=1e-4) and df.compute_s.min() > 0.5
    assert "bandwidth=1.2GBps,latency=30us" in text and "residual: 0.0% relative RMS" in text
    best = df[(df.net == "mine") & (df.nproc == 32)].set_index("algo").throughput
    gain = best.max() / best["no_overlap"]
    assert f"best: {best.idxmax()}, {gain:.2f}x over no_overlap at 32 workers on mine" in text


@pytest.mark.parametrize("argv, field", [
    (["--model", "resnet51"], "model"),
    (["--net", "10GbX"], "net"),
    (["--net", "mine:bandwidth=fast"], "net"),
    (["--net", "bandwidth=0Gbps,latency=5us"], "net"),
    (["--iter-time", "0"], "iter_time"),
    (["--throughput", "-3"], "throughput"),
    (["--iter-time", "0.2", "--throughput", "250"], "iter_time"),
    (["--iter-time", "0.2", "--batch-size", "0"], "batch_size"),
    (["--nccl-tests", "EMPTY"], "--nccl-tests"),
    (["--plot", "out.txt"], "plot"),
    (["--model", "resnet50", "--batch-size", "64", "--seq-len", "128", "--iter-time", "0.2"], "seq_len"),
    (["--gpus-per-node", "4", "--intra", "PCIe9"], "intra"),
])
def test_bad_input_is_one_line_naming_the_field_exit_2(tmp_path, capsys, argv, field) -> None:
    empty = tmp_path / "empty.txt"
    empty.write_text("# nThread 1 nGpus 1\n# Out of bounds values : 0 OK\n")
    argv = [str(empty) if a == "EMPTY" else a for a in argv]
    base = [] if "--model" in argv else ["--profile", str(_toy().to_csv(tmp_path / "toy_b32.csv"))]
    out = tmp_path / "sim.csv"
    rc = cli.main(["simulate", *base, "--batch-size", "32", "--csv", str(out), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"invalid {field}" in err and "allowed" in err, err
    assert not out.exists()


def test_the_speed_sweep_runs_every_algorithm_on_the_committed_profiles() -> None:
    from distsgd.systems.timeline import ALGORITHMS
    from distsgd.systems.timeline.sweep import time_sweep

    df, seconds = time_sweep(models={"resnet50": 64}, nprocs=[2, 1024], nets=["10GbE"])
    assert len(df) == len(ALGORITHMS) * 2 and set(df.algo) == set(ALGORITHMS) and seconds > 0
    assert (df.step_s >= df.compute_s * (1 - 1e-12)).all()      # equal where communication is all hidden (ssd_sgd)


def test_the_measured_error_beside_a_prediction_is_that_of_its_runtime_model(tmp_path) -> None:
    """A what-if prediction carries the band measured for its own runtime model, or none: with the
    survey's settings (Horovod's 5 ms cycle as wfbp's parameters, contention 0.189) and no extra
    per-call cost, wfbp on 10GbE in nodes of 4 is the survey's WFBP-A2A model and gets its band; with
    the what-if defaults (no cycle, 8.4 us per message) it is another runtime model, which no survey
    row measured (the nearest, the survey's, differs in its parameters and per-call costs)."""
    from distsgd.systems.cases import HOROVOD_CYCLE
    from distsgd.systems.timeline import survey
    from distsgd.systems.timeline.error_band import measured_error

    csv = _toy().to_csv(tmp_path / "toy_b32.csv")
    kw = dict(iter_time=0.5, profile_csv=csv, gpus_per_node=4, intra="PCIe3")
    same = whatif.what_if("toy", 32, ["wfbp"], [8], ["10GbE"], params=dict(HOROVOD_CYCLE),
                          effects=survey.SURVEY_EFFECTS, overheads=None, **kw).table
    band = measured_error(survey.runtime("WFBP-A2A"), "10GbE")
    assert same.runtime_model[0] == survey.runtime("WFBP-A2A")
    assert same.measured_error[0] == f"{band.low:+.0%}..{band.high:+.0%} (12 rows: survey)"
    defaults = whatif.what_if("toy", 32, ["wfbp"], [8], ["10GbE"], **kw).table
    assert defaults.measured_error[0] == "not measured: nearest survey differs in params, overheads"

"""The schedule benchmark: network scaling rule, the tidy CSV of `python -m distsgd bench` (rows
kept when interrupted), medians, the timing-noise gauge and the emulation-headroom check."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch

from distsgd.verdicts import projection as pj
from distsgd.systems.benchmark import (compute_models, emulation_headroom, grad_bytes, grad_tensor_bytes, hook_overlap, medians,
                                     real_collective_times, scaled_net, timing_noise)
from distsgd.comm import parse_net
from distsgd.errors import ConfigError


@pytest.mark.parametrize("p", [2, 4, 8])
def test_scaled_net_gives_the_stated_comm_and_latency_share(p):
    compute, nbytes = 0.05, 4_000_000
    net = parse_net(scaled_net(compute, nbytes, p, comm_ratio=1.0, latency_ratio=0.015))
    latency_term = 2 * (p - 1) * net.latency_s
    assert latency_term == pytest.approx(0.015 * compute, rel=1e-3)
    assert net.cost("all_reduce", nbytes, p) - latency_term == pytest.approx(compute, rel=1e-3)
    fast = parse_net(scaled_net(compute, nbytes, p, comm_ratio=0.1, latency_ratio=0.0015))
    assert fast.bandwidth_Bps == pytest.approx(10 * net.bandwidth_Bps, rel=1e-3)


def test_medians_and_noise():
    df = pd.DataFrame({"model": ["m"] * 4, "nproc": [2] * 4, "net_name": ["none", "none", "x", "x"],
                       "label": ["compute", "compute", "a", "a"], "step_s": [1.0, 1.2, 2.0, 4.0],
                       "throughput": [1, 1, 1, 1], "efficiency": [1, 1, .5, .25], "compute_s": [1.1] * 4,
                       "grad_bytes": [8] * 4})
    med = medians(df)
    assert med.set_index("label").step_s.to_dict() == {"a": 3.0, "compute": 1.1}
    assert timing_noise(df) == pytest.approx(pd.Series([1.0, 1.2]).std() / 1.1)


@pytest.mark.multiproc
def test_bench_cli_writes_a_tidy_csv(tmp_path):
    csv = tmp_path / "bench.csv"
    out = subprocess.run([sys.executable, "-m", "distsgd", "bench", "--models", "transformer", "--nprocs", "2",
                          "--algos", "WFBP,DeAR", "--reps", "1", "--steps", "1", "--warmup", "1",
                          "--batch-size", "4", "--csv", str(csv)],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 0, out.stderr
    df = pd.read_csv(csv)
    assert {"model", "label", "algo", "nproc", "net_name", "net", "repeat", "step_s", "compute_s",
            "efficiency", "throughput", "grad_bytes"} <= set(df.columns)
    assert set(df.label) == {"WFBP", "DeAR", "compute"}
    assert set(df[df.label != "compute"].net_name) == {"10GbE-like", "IB-like"}
    assert (df.step_s > 0).all() and "DeAR" in out.stdout
    assert (df.backend == "gloo").all() and (df.peak_rss_mb > 0).all()
    assert set(df.hosts) == {socket.gethostname()}                       # both ranks on this host


def test_every_rank_measures_the_models_compute_in_one_order():
    """The order is the list's on every rank, whatever the process's string hashing (an srun step's
    ranks are separate processes: a set's order would differ and the ranks would time different
    models at once)."""
    assert compute_models(["transformer", "mlp"], "resnet18") == ["transformer", "mlp", "resnet18"]
    assert compute_models(["transformer", "mlp"], "mlp") == ["transformer", "mlp"]
    assert compute_models(["transformer", "mlp"], None) == ["transformer", "mlp"]


@pytest.mark.multiproc
def test_an_interrupted_bench_keeps_the_rows_it_measured(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it) once some rows are in the
    CSV: the command stops (no hang, no rank left) with exit status 130 and a line saying where the
    rows are, no traceback, and the CSV keeps those rows, header once."""
    csv = tmp_path / "bench.csv"
    proc = subprocess.Popen([sys.executable, "-m", "distsgd", "bench", "--models", "mlp", "--nprocs", "2",
                             "--algos", "WFBP", "--nets", "IB-like", "--reps", "50", "--steps", "1",
                             "--warmup", "1", "--batch-size", "4", "--csv", str(csv)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=dict(os.environ),
                            # as from a terminal: a shell's background job (CI started with `&`)
                            # inherits SIGINT ignored, and Python then keeps it ignored
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 240
        while not (csv.exists() and len(csv.read_text().splitlines()) >= 4):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[0]
            time.sleep(0.2)
        os.killpg(proc.pid, signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130 and "interrupted: bench stopped; the rows measured so far are in" in out, out
    assert "Traceback" not in out, out
    df = pd.read_csv(csv)
    assert len(df) >= 3 and (df.step_s > 0).all() and set(df.label) <= {"WFBP", "compute"}
    assert len(df) < 100, "the benchmark was not interrupted"


@pytest.mark.multiproc
def test_real_collective_times_and_emulation_headroom():
    real = real_collective_times(2, [2**20, 2**16], reps=2)
    assert sorted(real.kind.unique()) == ["all_gather", "all_reduce", "reduce_scatter"]
    assert set(real.backend) == {"gloo"}
    assert sorted(real.nbytes.unique()) == [2**16, 2**20] and (real.measured_s > 0).all()
    # a network far slower than any real all-reduce of 1 MiB is emulable, one far faster is not
    nets = {"slow": "1Mbit,10ms", "fast": "1000000Gbit,1ns"}
    df = pd.DataFrame([{"model": "m", "nproc": 2, "net_name": name, "net": net, "grad_bytes": 2**20}
                       for name, net in nets.items()])
    head = emulation_headroom(df, reps=2).set_index("net_name")
    assert bool(head.emulable["slow"]) and not bool(head.emulable["fast"])
    assert head.modeled_s["slow"] == pytest.approx(parse_net(nets["slow"]).cost("all_reduce", 2**20, 2))
    assert (head.real_s > 0).all()
    # a row without emulation (the "real" network, net "") is not judged
    real_row = pd.DataFrame([{"model": "m", "nproc": 2, "net_name": "real", "net": "", "grad_bytes": 2**20}])
    assert emulation_headroom(pd.concat([df, real_row]), reps=1).net_name.tolist() == ["fast", "slow"]


def test_grad_tensor_bytes_give_the_models_tensor_roles():
    # the MLP 3072-512-512-10: weights and biases in parameter order, fp32
    assert grad_tensor_bytes("mlp") == [4 * n for n in (3072 * 512, 512, 512 * 512, 512, 512 * 10, 10)]
    assert grad_bytes("resnet50") == sum(grad_tensor_bytes("resnet50"))
    stats = pd.DataFrame({m: pj.size_stats(grad_tensor_bytes(m)) for m in ("mlp", "transformer")}).T
    # notebook 07's rule: many small tensors = smallest mean tensor, large tensors = largest single one
    assert stats.mean_tensor_mb.idxmin() == "transformer" and stats.largest_tensor_mb.idxmax() == "mlp"
    stats = pd.DataFrame({m: pj.size_stats(grad_tensor_bytes(m)) for m in ("resnet50", "bert_base")}).T
    assert stats.mean_tensor_mb.idxmin() == "resnet50" and stats.largest_tensor_mb.idxmax() == "bert_base"
    # ResNet-50: 161 tensors, 23.5 M parameters with the benchmark's 10-class head (25.6 M with 1000)
    assert stats.tensors["resnet50"] == 161 and 23.5e6 < stats.grad_mb["resnet50"] * 2**20 / 4 < 23.6e6


def test_real_collective_times_refuses_an_unknown_backend():
    with pytest.raises(ConfigError, match="backend"):
        real_collective_times(2, [2**16], reps=1, backend="mpi")


@pytest.mark.multiproc
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="NCCL collectives need two GPUs")
def test_real_collective_times_on_nccl():
    """With backend="nccl" the collectives run on the GPUs (timed to a synchronize), and the
    table fits a network as the gloo one does."""
    from distsgd.comm.nccl_tests import fit_collective_times
    real = real_collective_times(2, [2**16, 2**22], reps=2, backend="nccl")
    assert set(real.backend) == {"nccl"} and (real.measured_s > 0).all()
    assert fit_collective_times(real).cost("all_reduce", 2**22, 2) > 0


@pytest.mark.multiproc
def test_bench_runs_on_the_ranks_torchrun_started(tmp_path):
    """`torchrun ... -m distsgd bench --launcher env`: the job's ranks are the group (p = the
    job's world size, --nprocs ignored), rank 0 writes the CSV and prints the medians."""
    csv = tmp_path / "bench.csv"
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                          "-m", "distsgd", "bench", "--launcher", "env", "--models", "mlp", "--nprocs", "4",
                          "--algos", "WFBP", "--nets", "IB-like,real", "--reps", "1", "--steps", "1",
                          "--warmup", "1", "--batch-size", "4", "--csv", str(csv)],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stderr[-3000:]
    df = pd.read_csv(csv, keep_default_na=False)
    assert set(df.nproc) == {2} and set(df.net_name) == {"IB-like", "real", "none"}
    assert (df[df.net_name == "real"].net == "").all() and (df.step_s > 0).all()
    assert out.stdout.count("wrote ") == 1


@pytest.mark.multiproc
def test_hook_overlap_times_both_futures_and_reports_their_ratio():
    """`bench --hook-overlap` (the compression hook returning its pending or its finished future):
    every round times both forms on an emulated network, and the ratio is finished / pending of
    their medians; the CLI prints it."""
    df, ratio = hook_overlap(model="mlp", nproc=2, batch_size=4, steps=1, warmup=1, repeats=2)
    assert sorted(zip(df.repeat, df.future)) == [(0, "finished"), (0, "pending"), (1, "finished"), (1, "pending")]
    assert (df.step_s > 0).all() and (df.nproc == 2).all() and parse_net(df.net.iloc[0]).bandwidth_Bps > 0
    med = df.groupby("future").step_s.median()
    assert ratio == pytest.approx(med["finished"] / med["pending"])
    out = subprocess.run([sys.executable, "-m", "distsgd", "bench", "--hook-overlap", "--models", "mlp", "--nproc", "2",
                          "--reps", "1", "--steps", "1", "--warmup", "1", "--batch-size", "4"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "finished / pending future:" in out.stdout, out.stdout + out.stderr


@pytest.mark.multiproc
def test_gpu_checks_baseline_step_times_ssgd_and_ddp_in_pairs(tmp_path):
    """reproduce/gpu_check.py's `baseline` (S-SGD against PyTorch DDP), in its CPU form: one row per
    case and network, both pairs present, and the pairs' ratios printed (it runs on a GPU session
    only otherwise, where a defect would cost device time)."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    proc = subprocess.run([sys.executable, os.path.join(repo, "reproduce", "gpu_check.py"), str(tmp_path),
                           "--device", "cpu", "--models", "mlp", "--steps", "baseline"],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": os.path.join(repo, "lib")})
    assert proc.returncode == 0 and "baseline FAILED" not in proc.stdout, proc.stdout[-3000:] + proc.stderr[-3000:]
    table = pd.read_csv(tmp_path / "baseline.csv", keep_default_na=False)
    timed = table[table.label != "compute"]
    assert sorted(set(timed.label)) == ["DDP", "DDP 2 MB", "S-SGD", "tensor fusion"]
    assert sorted(set(timed.net_name)) == ["10GbE-like", "IB-like"] and len(timed) == 8
    assert (timed.step_s > 0).all()
    assert "S-SGD / DDP" in proc.stdout and "tensor fusion / DDP 2 MB" in proc.stdout


def test_timing_problem_names_the_first_check_that_fails():
    """The precheck of 06's and 07's timing claims (`bench_schedules.timing_problem`): the clock's
    noise first, then a network that cannot be emulated, then the decoupled collectives' cost."""
    from distsgd.systems.benchmark import timing_problem
    ok = pd.DataFrame([dict(model="mlp", net_name="10GbE-like", real_s=0.001, modeled_s=0.01, emulable=True)])
    bad = ok.assign(model="resnet18", real_s=0.008, emulable=False)
    assert timing_problem(0.01, 0.05, ok) is None
    assert timing_problem(0.10, 0.05, bad).startswith("compute-time CV 10% > 5%")
    assert timing_problem(0.01, 0.05, pd.concat([ok, bad])) == (
        "10GbE-like not emulable here for resnet18: real all-reduce 8.0 ms vs modeled 10.0 ms")
    assert timing_problem(0.01, 0.05, ok, decoupling=2.5, max_decoupling=2.0).startswith(
        "this backend's reduce-scatter + all-gather take 2.5x its all-reduce")
    assert timing_problem(0.01, 0.05, ok, decoupling=1.5, max_decoupling=2.0) is None
    assert timing_problem(0.01, 0.05, ok.iloc[:0], decoupling=2.5) is None     # no decoupled schedule

"""The GPU checks (issues 17, 33 and 34) on one CUDA GPU, in one call (reproduce/README.md, "GPU check").

Steps (all by default; `--steps` picks some, in this order):

0. `calls`: the per-collective cost on NCCL (issue 33 item 2): 1 to 512 async all-reduces of 4 KB to
   64 MB through the kit's `Comm` and through torch.distributed alone, host issue time and device
   time per call (`measure_costs.measure_gpu_calls`), and the cost in place, per all-reduce issued
   from a gradient hook inside a training step (WFBP on a chain of 8 to 256 layers of 4 KB to 1 MB,
   `measure_hooked_calls`; what the validation step charges per collective since the third run) -> OUT/gpu_calls.csv.
1. `host`: where a training step's time goes (`profiler.host_and_device`): the host's time to issue
   forward, backward and update, the device's own time, and the step, for the validated models at the
   validation's batch -> OUT/gpu_host.csv.
2. `profiles`: layer profiles of the papers' models measured on this GPU at the papers' batches and inputs
   (the list of `reproduce/layer_profiles/make_profiles.sh projected`), `profiler.measure`:
   medians of 10 rounds after 3 warm-up iterations -> OUT/profiles/<GPU>/<model>_b<batch>[_<input>].csv
3. `validation`: the simulator against the schedule benchmark on one NCCL rank (`timeline.validate.validate_gpu`:
   p = 1, no emulation, the profile measured there, unscaled) -> OUT/gpu_validation.csv, and the
   benchmark's rows -> OUT/gpu_bench.csv; the profiles it measured -> OUT/profiles/<GPU>/.
4. `training`: training over NCCL end to end (`python -m distsgd train --backend nccl --device cuda --nproc 1`),
   S-SGD and DeAR -> their summaries in OUT/train_<algo>.json.
5. `dropit_memory`: DropIT's memory at the paper's setting (`dropit_paper_scale.dropit_memory_table` on
   "cuda"): one training step per row, the saved-for-backward bytes and the allocator's peak, beside the
   count on fake tensors made without a GPU (column ``fake_count_equal``) -> OUT/dropit_memory_gpu.csv,
   which notebook 03 shows as figures/03_dropit/paper_scale_memory_gpu.csv. About 30 s on an H200.
6. `baseline`: the kit's S-SGD against PyTorch DDP (issue 37 item 2: a speedup over S-SGD is only as
   honest as its baseline), `bench_schedules` with ssgd and ddp at their defaults (25 MB buckets) and
   the benchmark's 2 MB pair (fusion, DDP): on this GPU (p = 1, NCCL; the host's cost of each) and on
   this machine's otherwise idle CPU cores (gloo, p = 2, 4 and 8 up to the cores, one thread per rank,
   both emulated networks; the MLP at p = 2, 4, 8, ResNet-18 with the default pair at p = 2, 4), where
   the 2-core development machine cannot time p = 4 -> OUT/baseline.csv, and the ratio of each pair's
   step times per repeat (the repeats interleave the cases) printed. About 4 minutes.

7. `full_profile`: a notebook's full-profile configuration on NCCL (`FULL_NOTEBOOK`'s entry of
   reproduce/profiles/full.yaml: ResNet-18 on CIFAR-10, batch 128 per GPU) for `FULL_STEPS` steps at
   min(its nproc, the GPUs here) ranks, S-SGD and local SGD, on the release CIFAR-10 where
   `python -m distsgd data check cifar10` finds it, else on stand-ins (recorded); the refusal of an
   nproc larger than the GPUs (`distsgd train --nproc <GPUs + 1>`, with --device cuda and with the
   device left auto, as the notebooks leave it: exit status 2 and a message naming nproc, before any
   rank starts); and the emulated network timed from the device (`comm.device_sync`): a modeled
   2-rank all-reduce issued behind queued GPU compute must take the compute plus the modeled time,
   not the larger of the two -> OUT/full_profile.json, with the machine (GPUs, driver, torch, CUDA,
   host) recorded. About 2 minutes on one H200.

Usage (repository root, the library on PYTHONPATH): python reproduce/gpu_check.py OUT [--steps calls host ...]
`--device cpu --models mlp` runs steps 0, 1, 3, 6 and 7 on the CPU (gloo; step 6 with the MLP only, one
repeat; step 7 capped at 2 ranks, a batch of 2 and 2 steps, its refusal check asking for a GPU where
there is none): the script's own check before device time is spent, not a result.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# (model, batch, input shape): DeAR and the survey (ImageNet 224x224, BERT at sequence length 64),
# SSD-SGD (ResNet-20 / CIFAR-10), CoCoD-SGD (ResNet-18, VGG-16 / CIFAR-10, batch 128 per GPU).
PAPER_PROFILES = [
    ("resnet50", 64, (3, 224, 224)), ("densenet201", 32, (3, 224, 224)), ("vgg16", 32, (3, 224, 224)),
    ("bert_base", 64, (64,)), ("bert_large", 8, (64,)), ("resnet20", 128, (3, 32, 32)),
    ("resnet18", 128, (3, 32, 32)), ("vgg16", 128, (3, 32, 32)),
]


def gpu_folder(out: Path) -> Path:
    """OUT/profiles/<GPU> (e.g. H200): the folder name of reproduce/layer_profiles/."""
    import torch

    name = torch.cuda.get_device_name(0).replace("NVIDIA ", "").split()[0] if torch.cuda.is_available() else "cpu"
    folder = out / "profiles" / name
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def profile_name(model: str, batch: int, shape: tuple[int, ...]) -> str:
    """<model>_b<batch>[_<input>].csv, the input named unless it is the default (3x32x32, or 64 tokens)."""
    suffix = "" if shape in ((3, 32, 32), (64,)) else "_" + "x".join(map(str, shape))
    return f"{model}_b{batch}{suffix}.csv"


VALIDATED = ["resnet50", "bert_base"]     # validate_gpu's models (default of --models), at its batch
VALIDATION_BATCH = 32


def calls(out: Path, args: argparse.Namespace) -> None:
    import pandas as pd

    from distsgd.systems.measure_costs import measure_gpu_calls, measure_hooked_calls
    # 512 x 64 MB is 32 GB: on the CPU check (this machine's memory) the sizes up to 1 MB
    table = pd.concat([measure_gpu_calls(device=args.device,
                                         **({} if args.device == "cuda" else {"sizes": (2**12, 2**16, 2**20)})),
                       measure_hooked_calls(device=args.device)], ignore_index=True)
    table.to_csv(out / "gpu_calls.csv", index=False)
    print(table.to_string(), flush=True)


def host(out: Path, args: argparse.Namespace) -> None:
    from distsgd.systems.timeline.validate import host_table
    table = host_table(args.models, VALIDATION_BATCH, args.device)
    table.to_csv(out / "gpu_host.csv", index=False)
    print(table.to_string(), flush=True)


def profiles(out: Path, args: argparse.Namespace) -> None:
    from distsgd.systems.profiler import measure
    folder = gpu_folder(out)
    for model, batch, shape in PAPER_PROFILES:
        t = time.perf_counter()
        m = measure(model, shape, batch, device="cuda", reps=10, warmup=3)
        path = m.profile.to_csv(folder / profile_name(model, batch, shape))
        print(f"{path.name}: compute {1e3 * m.profile.compute_s:.2f} ms (forward {1e3 * m.profile.forward_s:.2f}, "
              f"backward {1e3 * m.profile.backward_s:.2f}, update {1e3 * m.profile.update_s:.2f}); "
              f"sum of layers / un-hooked {m.hook_ratio:.3f}; {time.perf_counter() - t:.1f} s", flush=True)


def validation(out: Path, args: argparse.Namespace) -> None:
    import pandas as pd

    from distsgd.systems.timeline.validate import validate_gpu
    measured = {name: pd.read_csv(out / f"gpu_{name}.csv") for name in ("calls", "host")
                if (out / f"gpu_{name}.csv").exists()}        # this run's steps 0 and 1, else measured now
    table, bench, extra = validate_gpu(models=args.models, batch_size=VALIDATION_BATCH, steps=16, warmup=8,
                                       repeats=3, device=args.device, **measured)
    table.to_csv(out / "gpu_validation.csv", index=False)
    bench.to_csv(out / "gpu_bench.csv", index=False)
    for model, profile in extra["profiles"].items():
        profile.to_csv(gpu_folder(out) / profile_name(model, profile.batch_size, tuple(profile.input_shape)))
    print(table[["model", "label", "measured_s", "predicted_s", "residual", "predicted_plain_s"]].to_string(),
          flush=True)
    print("profiles' own references (un-hooked, hooked forward+backward s):", extra["references"], flush=True)


def training(out: Path, args: argparse.Namespace) -> None:
    for algo in ("ssgd", "dear"):
        with tempfile.TemporaryDirectory() as tmp:
            cmd = [sys.executable, "-m", "distsgd", "train", "--algo", algo, "--backend", "nccl", "--device", "cuda",
                   "--nproc", "1", "--model", "mlp", "--data", "digits", "--steps", "60", "--out", tmp, "--json"]
            t = time.perf_counter()
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
            print(f"train {algo}: rc {done.returncode}, {time.perf_counter() - t:.1f} s", flush=True)
            print(done.stdout[-2000:], done.stderr[-2000:], flush=True)
            (out / f"train_{algo}.json").write_text(json.dumps(
                {"rc": done.returncode, "stdout": done.stdout[-4000:], "stderr": done.stderr[-4000:]}))


def dropit_memory(out: Path, args: argparse.Namespace) -> None:
    from distsgd.experiments.dropit_paper_scale import dropit_memory_table
    measured = dropit_memory_table(args.device, fake=False)
    counted = dropit_memory_table(args.device, fake=True)
    measured["fake_count_equal"] = ((measured.saved_bytes == counted.saved_bytes)
                                    & (measured.layer_bytes == counted.layer_bytes))
    measured.to_csv(out / "dropit_memory_gpu.csv", index=False)
    print(measured.to_string(index=False), flush=True)


BASELINE_CASES = [{"algo": "ssgd", "label": "S-SGD"}, {"algo": "ddp", "label": "DDP"},
                  {"algo": "fusion", "params": {"bucket_mb": 2.0}, "label": "tensor fusion"},
                  {"algo": "ddp", "params": {"bucket_mb": 2.0}, "label": "DDP 2 MB"}]
BASELINE_PAIRS = [("S-SGD", "DDP"), ("tensor fusion", "DDP 2 MB")]


def baseline(out: Path, args: argparse.Namespace) -> None:
    import pandas as pd

    from distsgd.systems.benchmark import NETWORKS, bench_schedules
    cores = len(os.sched_getaffinity(0))
    nprocs = [p for p in (2, 4, 8) if p <= cores] or [2]
    frames = []
    if args.device == "cuda":
        frames.append(bench_schedules(models=args.models, cases=BASELINE_CASES, nprocs=[1], networks={"real": None},
                                      batch_size=VALIDATION_BATCH, steps=16, warmup=8, repeats=3, backend="nccl"))
    # the MLP (few large tensors) with both pairs at every p; ResNet-18 (62 small tensors, ~0.3 s a step on
    # one core) with the defaults' pair at p <= 4 (~2 minutes)
    for model, cases, ps in (("mlp", BASELINE_CASES, nprocs), ("resnet18", BASELINE_CASES[:2], nprocs[:2])):
        if args.device == "cuda" or model == "mlp":
            frames.append(bench_schedules(models=[model], cases=cases, nprocs=ps, networks=NETWORKS, batch_size=16,
                                          steps=8, warmup=3, repeats=3 if args.device == "cuda" else 1))
    table = pd.concat(frames, ignore_index=True)
    table.to_csv(out / "baseline.csv", index=False)
    keys = ["backend", "model", "nproc", "net_name", "repeat"]
    step = table[table.label != "compute"].set_index(keys + ["label"]).step_s.unstack("label")
    ratios = pd.DataFrame({f"{a} / {b}": step[a] / step[b] for a, b in BASELINE_PAIRS})
    print(ratios.groupby(level=keys[:-1]).agg(["median", "min", "max"]).round(3).to_string(), flush=True)


FULL_NOTEBOOK = "00_baselines"   # its full-profile entry names Config fields only (model, data, batch, ...)
FULL_STEPS = 20
FULL_ALGOS = [("ssgd", {}), ("local_sgd", {"period": 4})]


def machine(device: str) -> dict[str, object]:
    """What the numbers were measured on: host, GPUs (nvidia-smi's name, memory, driver), torch, CUDA."""
    import torch

    record: dict[str, object] = {"host": platform.node(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                                 "device": device, "torch": torch.__version__, "cuda": torch.version.cuda,
                                 "cpus": len(os.sched_getaffinity(0))}
    if device == "cuda":
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True)
        record["gpus"] = smi.stdout.strip().splitlines() or [torch.cuda.get_device_name(i)
                                                             for i in range(torch.cuda.device_count())]
    return record


def refusal(nproc: int, device_args: list[str], backend: str) -> dict[str, object]:
    """`distsgd train --nproc N` on a machine with fewer GPUs: refused (exit status 2, a message naming
    nproc) before any rank starts, or not."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "distsgd", "train", "--backend", backend, *device_args, "--nproc", str(nproc),
               "--model", "mlp", "--data", "digits", "--steps", "2", "--out", tmp, "--no-progress"]
        t = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        started = any(Path(tmp).rglob("rank*.log"))
    error = next((line for line in done.stderr.splitlines() if line.startswith("error:")), done.stderr[-300:])
    return {"nproc": nproc, "args": " ".join(device_args) or "(device auto)", "rc": done.returncode,
            "error": error, "seconds": round(time.perf_counter() - t, 2), "ranks_started": started,
            "refused": done.returncode == 2 and "nproc" in error and not started}


def emulation_on_device(device: str, backend: str) -> dict[str, float]:
    """A modeled 2-rank all-reduce (over a 1-rank group: the real collective is trivial) issued behind
    queued compute: its wait must end no earlier than the compute plus the modeled time (the emulated
    transfer starts when the device reaches it), where timing from the host's issue gave the larger of
    the two. Times in seconds; `overlap` = 1 - (total - compute) / modeled is about 0 when it holds."""
    import torch
    import torch.distributed as dist

    from distsgd.comm import Comm, parse_net
    from distsgd.comm.comm import Group

    dev = torch.device("cuda", 0) if device == "cuda" else torch.device(device)
    with tempfile.TemporaryDirectory() as tmp:
        dist.init_process_group(backend, init_method=f"file://{tmp}/rendezvous", rank=0, world_size=1,
                                **({"device_id": dev} if backend == "nccl" else {}))
        try:
            x = torch.randn(2048 if device == "cuda" else 256, 2048 if device == "cuda" else 256, device=dev)

            def compute() -> None:
                for _ in range(200 if device == "cuda" else 20):
                    torch.mm(x, x, out=torch.empty_like(x))

            def sync() -> None:
                if device == "cuda":
                    torch.cuda.synchronize(dev)

            compute(), sync()                                   # warm-up
            t = time.perf_counter(); compute(); sync(); compute_s = time.perf_counter() - t
            payload = torch.ones(1 << 20, device=dev)           # 4 MB, modeled at about the compute's time
            bandwidth = 2 * 0.5 * payload.numel() * 4 * 8 / compute_s
            comm = Comm.on_group(dev, net=parse_net(f"{bandwidth / 1e6:.3f}Mbit,0us"))
            t = time.perf_counter()
            compute()
            comm.all_reduce(payload, group=Group((0, 1), None, "global"), async_op=True).wait()
            sync()
            total_s = time.perf_counter() - t
            modeled_s = comm.ledger.entries[-1].modeled_s
        finally:
            dist.destroy_process_group()
    return {"compute_s": compute_s, "modeled_s": modeled_s, "total_s": total_s,
            "overlap": 1 - (total_s - compute_s) / modeled_s, "holds": total_s >= 0.95 * (compute_s + modeled_s)}


def full_profile(out: Path, args: argparse.Namespace) -> None:
    import torch
    import yaml

    import distsgd
    from distsgd.data import release
    from distsgd.data.standins import write_standins

    cuda = args.device == "cuda"
    gpus = torch.cuda.device_count() if cuda else 0
    backend = "nccl" if cuda else "gloo"
    record: dict[str, object] = {"machine": machine(args.device), "notebook": FULL_NOTEBOOK}
    # over-large nproc: with --device cuda, and with the device left auto as the notebooks leave it (a GPU machine)
    record["refusal"] = [refusal(gpus + 1, device_args, "nccl" if cuda else "auto")
                         for device_args in ([["--device", "cuda"], []] if cuda else [["--device", "cuda"]])]
    for r in record["refusal"]:
        print(f"nproc {r['nproc']} on {gpus} GPU(s), {r['args']}: rc {r['rc']}, refused {r['refused']}: {r['error']}",
              flush=True)
    record["emulation"] = emulation_on_device("cuda" if cuda else "cpu", backend)
    print(f"emulated all-reduce behind queued compute: {record['emulation']}", flush=True)

    entry = yaml.safe_load((REPO / "reproduce" / "profiles" / "full.yaml").read_text())["notebooks"][FULL_NOTEBOOK]
    data_state = release.inspect(entry["data"])
    caps = distsgd.Caps() if cuda else distsgd.Caps(nproc=2, batch_size=2, eval_samples=4)
    env = {}
    if not data_state.ok:                       # the release is not here: stand-ins in its format, recorded
        env = {"DISTSGD_DATA": str(write_standins(out / "data")), "DISTSGD_DATA_VERIFY": "0"}
    record["data"] = "release" if data_state.ok else f"stand-ins ({data_state.line()})"
    runs = []
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for algo, params in FULL_ALGOS:
            config = distsgd.Config(**{**entry, "nproc": max(1, min(entry["nproc"], gpus or 2)), "backend": backend,
                                       "steps": FULL_STEPS if cuda else 2, "log_every": 5 if cuda else 1,
                                       "eval_every": 0, "eval_samples": 512, "algo": algo, "params": params,
                                       "progress": False, "out": str(out / "runs")})
            t = time.perf_counter()
            result = distsgd.run(config, caps=caps, force=True)
            s = result.summary
            runs.append({"algo": algo, "params": params, "nproc": s.get("nproc"), "batch_size": s.get("batch_size"),
                         "steps": s.get("steps"), "seconds": round(time.perf_counter() - t, 1),
                         "train_s": s.get("train_s"), "step_s": s["train_s"] / s["steps"] if s.get("steps") else None,
                         "comm_wait_s": s.get("comm_wait_s"), "collectives": s.get("collectives"),
                         "final_train_loss": s.get("final_train_loss")})
            print(f"{FULL_NOTEBOOK} full profile, {algo}: {runs[-1]}", flush=True)
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    record["runs"] = runs
    (out / "full_profile.json").write_text(json.dumps(record, indent=1, default=str) + "\n")


STEPS = {f.__name__: f for f in (calls, host, profiles, validation, training, dropit_memory, baseline, full_profile)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", type=Path, help="folder for the results")
    parser.add_argument("--steps", nargs="+", choices=list(STEPS), default=list(STEPS),
                        help="which checks to run (default: all, in the order listed)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu: the script's own check on the CPU (gloo), before device time is spent")
    parser.add_argument("--models", nargs="+", default=VALIDATED, help="the models of `host` and `validation`")
    args = parser.parse_args()
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    for step in (STEPS[name] for name in STEPS if name in args.steps):
        t = time.perf_counter()
        try:
            step(out, args)
        except Exception as e:         # keep going: each step's result is worth having alone
            import traceback
            traceback.print_exc()
            print(f"{step.__name__} FAILED: {e}", flush=True)
        print(f"== {step.__name__}: {time.perf_counter() - t:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

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

Usage (repository root, the library on PYTHONPATH): python reproduce/gpu_check.py OUT [--steps calls host ...]
`--device cpu --models mlp` runs steps 0, 1, 3 and 6 on the CPU (gloo; step 6 with the MLP only, one
repeat): the script's own check before device time is spent, not a result.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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


STEPS = {f.__name__: f for f in (calls, host, profiles, validation, training, dropit_memory, baseline)}


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

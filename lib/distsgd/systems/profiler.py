"""Measure a model's layer profile on this machine, or project it to a named GPU from its FLOPs.

`python -m distsgd profile` runs these; the result is a `distsgd.systems.layer_profile.Profile`.

**Layers and order.** A layer is a module that owns parameters directly
(``module.parameters(recurse=False)``; the root module, if it owns any, is named ``(model)``).
The order is the order in which backward actually makes the gradients ready: every parameter gets
a ``register_post_accumulate_grad_hook`` that stamps the moment its ``.grad`` is written; a layer
is ready when its last tensor is, layers are sorted by that, and a layer's tensors by their own
stamps. Parameters that get no gradient come last with zero backward time.

**Attribution rule (every second and every FLOP goes to some layer).** One iteration is stamped at
its start t0, the end of the forward and loss t1, and the end of backward t2. Forward: each layer's
forward hook stamps the end of its forward; a layer gets the interval from the previous stamp (t0
for the first) to its own, so a parameter-free module (ReLU, pooling, residual add, attention
softmax) counts towards the next parameterized layer to finish its forward; what follows the last
stamp (the loss, trailing functional ops) goes to the last layer. A module called twice gets both
intervals. Backward likewise: a layer gets the interval from the previous layer's ready stamp (t1
for the first) to its own ready stamp, so the backward of parameter-free modules counts towards the
next layer whose gradients become ready, and the tail (after the last gradient) goes to the last
layer. Hence the per-layer forward times sum to t1 - t0 and the backward times to t2 - t1 exactly;
what the hooks cost is inside these intervals (a perf_counter call and a list append per hook,
about 1 us each, against layers of 0.1-100 ms here).

**Clocks.** The same stamps are read from three clocks: ``time.perf_counter`` (CPU), CUDA events
recorded on the current stream (``--device cuda``: elapsed times after a synchronize; PyTorch's
default precision, recorded in the profile's machine: fp32 tensors, cuDNN convolutions in TF32,
matmuls in fp32), and the running
total of ``torch.utils.flop_counter.FlopCounterMode`` (FLOPs: forward and backward FLOPs per layer
by the same rule, no hand-written FLOP formulas; counted on the meta device, so no compute runs).

**Measurement.** `measure`: `warmup` untimed iterations, then `reps` rounds of one hooked
iteration (per-layer times) and one un-hooked iteration (forward + loss + backward as one interval,
then SGD with momentum 0.9 timed as the update); per-layer times are medians over the rounds, the
update median is apportioned to the layers by gradient bytes. Interleaving puts load from other
processes on both kinds alike. `Measurement.hook_ratio` = (sum of the per-layer medians) /
(median un-hooked forward + backward): the check that the hooks neither lose nor add time.

**Projection (SCALE.md, option 2).** `project`: t = FLOPs / (peak x efficiency) per layer, forward
and backward, on a device of `DEVICES`; the update is not a FLOP count (elementwise) and is
absorbed by the efficiency, which is calibrated per model family so that the whole-model
forward + backward time of the calibration model equals a published single-GPU iteration time:

=================  ==============================================================================
family             calibration (`CALIBRATIONS`)
=================  ==============================================================================
convolutional      ResNet-50, batch 64, 3x224x224 synthetic ImageNet, 253.1 images/s on 1 GPU =
                   0.2529 s/iteration. Shi et al., "Communication-Efficient Distributed Deep
                   Learning: Survey, Evaluation, and Challenges" (arXiv 2005.13247; IEEE Network
                   2021), benchmark code HKBU-HPML/ddl-benchmarks, results/2020-05-29/README.md,
                   "1 GPU" column (Horovod, PyTorch, SGD). GPU: Tesla V100 (the repository's
                   nvprof profile horovod/resnet50.prof names "Tesla V100-PCIE-32GB").
transformer        BERT-Base pre-training, batch 64, sequence 64, 212.8 sentences/s on 1 GPU =
                   0.3008 s/iteration; same source and GPU (horovod/bert_benchmark.py:
                   BertForPreTraining, AdamW, --sentence-len 64).
=================  ==============================================================================

The same table has BERT-Large, batch 8, 49 sentences/s (0.163 s): not used for calibration, it is
the check of the transformer efficiency on a second model (reproduce/layer_profiles/README.md).
The efficiency absorbs what FLOPs do not count: the optimizer step, memory-bound layers
(BatchNorm, LayerNorm, embeddings get no FLOPs, hence no time, in a projection), and differences
between the paper's model and ours (the survey's BERT has the masked-LM head over the 30522-word
vocabulary; ours a classification head). No published single-GPU time was found for DeAR's GPUs
(64 GPUs, GPU model not in the text we could reach) nor CoCoD-SGD's (GeForce GTX 1080 Ti, its
abstract): a device without its own calibration uses the V100 efficiency of the family with its
own peak (named in the profile's ``machine``). Peaks (fp32, NVIDIA's published figures; SCALE.md):
V100 15.7 TFLOP/s, A100 19.5, RTX 2080 Ti 13.4, GTX 1080 Ti 11.3.
"""
from __future__ import annotations

import os
import platform
import statistics
import time
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .layer_profile import Layer, Profile

__all__ = ["CALIBRATIONS", "DEVICES", "Calibration", "CudaClock", "FlopClock", "Iteration", "Measurement",
           "WallClock", "count_flops", "efficiency", "hooked_iteration",
           "family", "flop_profile", "measure", "project"]

NUM_CLASSES = 10
ROOT = "(model)"                        # the layer name of parameters owned by the root module
DEVICES: dict[str, float] = {           # peak FLOP/s
    "V100-fp32": 15.7e12,
    "A100-fp32": 19.5e12,
    "RTX2080Ti-fp32": 13.4e12,
    "GTX1080Ti-fp32": 11.3e12,
}
TRANSFORMERS = ("transformer", "vit_tiny", "bert_base", "bert_large")
SURVEY = ("Shi et al., arXiv 2005.13247 (IEEE Network 2021), HKBU-HPML/ddl-benchmarks "
          "results/2020-05-29/README.md, 1-GPU column; GPU Tesla V100-PCIE-32GB")


@dataclass(frozen=True)
class Calibration:
    """A published single-GPU iteration: `model` at `batch_size` on inputs `input_shape` took
    `iteration_s` on `device` (`source` says where that is written)."""

    model: str
    batch_size: int
    input_shape: tuple[int, ...]
    device: str
    iteration_s: float
    source: str


CALIBRATIONS: dict[str, Calibration] = {
    "convolutional": Calibration("resnet50", 64, (3, 224, 224), "V100-fp32", 64 / 253.1,
                                 f"ResNet-50 b64 224x224 at 253.1 images/s: {SURVEY}"),
    "transformer": Calibration("bert_base", 64, (64,), "V100-fp32", 64 / 212.8,
                               f"BERT-Base b64 seq64 at 212.8 sentences/s: {SURVEY}"),
}


def family(model: str) -> str:
    """The calibration family of `model`: transformer or convolutional (every other model)."""
    return "transformer" if model in TRANSFORMERS else "convolutional"


# ---------------------------------------------------------------------------- stamps and clocks
class WallClock:
    """Stamps of time.perf_counter; seconds between two stamps."""

    def mark(self) -> float:
        return time.perf_counter()

    def between(self, a: float, b: float) -> float:
        return b - a

    def settle(self) -> None:
        """Nothing to wait for on the CPU."""


class CudaClock:
    """Stamps as CUDA events on the current stream (the autograd engine's backward thread records
    on the same, default, stream)."""

    def mark(self) -> torch.cuda.Event:
        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def between(self, a: torch.cuda.Event, b: torch.cuda.Event) -> float:
        return a.elapsed_time(b) / 1e3

    def settle(self) -> None:
        torch.cuda.synchronize()


class FlopClock:
    """Stamps of FlopCounterMode's running total: "elapsed" FLOPs between two stamps."""

    def __init__(self, counter: Any) -> None:
        self.counter = counter

    def mark(self) -> int:
        return self.counter.get_total_flops()

    def between(self, a: int, b: int) -> float:
        return float(b - a)

    def settle(self) -> None:
        """Counts are exact at once."""


@dataclass
class Iteration:
    """One hooked iteration: layers in backward order with their tensors, forward and backward
    amounts per layer (seconds or FLOPs, by the clock)."""

    order: list[str]
    tensors: dict[str, list[str]]
    forward: dict[str, float]
    backward: dict[str, float]


def _layer_of(tensor: str) -> str:
    module, _, _ = tensor.rpartition(".")
    return module or ROOT


def hooked_iteration(model: nn.Module, x: torch.Tensor, y: torch.Tensor, clock: Any) -> Iteration:
    """Run forward, loss and backward once with the stamps of the module docstring."""
    modules = {name or ROOT: m for name, m in model.named_modules() if any(True for _ in m.parameters(recurse=False))}
    fwd_stamps: list[tuple[str, Any]] = []
    grad_stamps: list[tuple[str, Any]] = []
    handles = [m.register_forward_hook(lambda m, i, o, name=name: fwd_stamps.append((name, clock.mark())))
               for name, m in modules.items()]
    handles += [p.register_post_accumulate_grad_hook(lambda p, name=name: grad_stamps.append((name, clock.mark())))
                for name, p in model.named_parameters()]
    try:
        t0 = clock.mark()
        loss = F.cross_entropy(model(x), y)
        t1 = clock.mark()
        loss.backward()
        t2 = clock.mark()
        clock.settle()
    finally:
        for h in handles:
            h.remove()
    forward = dict.fromkeys(modules, 0.0)
    prev, last = t0, None
    for name, stamp in fwd_stamps:
        forward[name] += clock.between(prev, stamp)
        prev, last = stamp, name
    if last is not None:
        forward[last] += clock.between(prev, t1)
    ready: dict[str, int] = {}                  # tensor -> position of its stamp
    for i, (name, _) in enumerate(grad_stamps):
        ready[name] = i
    names = [n for n, _ in model.named_parameters()]
    never = len(grad_stamps)                    # parameters without a gradient come last
    tensors: dict[str, list[str]] = {}
    for name in sorted(names, key=lambda n: ready.get(n, never)):
        tensors.setdefault(_layer_of(name), []).append(name)
    layer_ready = {layer: max(ready.get(t, never) for t in ts) for layer, ts in tensors.items()}
    order = sorted(tensors, key=lambda layer: layer_ready[layer])
    backward = dict.fromkeys(order, 0.0)
    prev = t1
    for layer in order:
        if layer_ready[layer] < never:
            stamp = grad_stamps[layer_ready[layer]][1]
            backward[layer] += clock.between(prev, stamp)
            prev = stamp
    backward[order[-1]] += clock.between(prev, t2)
    return Iteration(order, tensors, forward, backward)


# ---------------------------------------------------------------------------- building blocks
def _build(model: str, input_shape: tuple[int, ...], options: dict[str, Any],
           num_classes: int = NUM_CLASSES) -> nn.Module:
    from ..models import build_model

    return build_model(model, input_shape, num_classes, **options)


def _batch(model: str, input_shape: tuple[int, ...], batch_size: int, options: dict[str, Any],
           seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic inputs of the model's shape: token ids for BERT, normal noise otherwise."""
    from .benchmark import synthetic_batches
    from ..models.transformer import BERT_VOCAB

    vocab = options.get("vocab", BERT_VOCAB) if model.startswith("bert_") else None
    return synthetic_batches(tuple(input_shape), batch_size, seed, vocab)(0)


def _check(batch_size: int, reps: int = 1, warmup: int = 0, threads: int | None = None) -> None:
    for field, value, low in (("batch_size", batch_size, 1), ("reps", reps, 1), ("warmup", warmup, 0)):
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ConfigError(field, value, f"an integer >= {low}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ConfigError("threads", threads, "an integer >= 1")


def _tensor_sizes(model: nn.Module) -> dict[str, tuple[int, int]]:
    """name -> (numel, gradient bytes) of every parameter."""
    return {n: (p.numel(), p.numel() * p.element_size()) for n, p in model.named_parameters()}


def _layers(it: Iteration, sizes: dict[str, tuple[int, int]], fwd_s: dict[str, float],
            bwd_s: dict[str, float], update_s: dict[str, float], flops: Iteration | None) -> list[Layer]:
    return [Layer(name=layer, forward_s=fwd_s[layer], backward_s=bwd_s[layer], update_s=update_s[layer],
                  tensors=it.tensors[layer], tensor_bytes=[sizes[t][1] for t in it.tensors[layer]],
                  tensor_numel=[sizes[t][0] for t in it.tensors[layer]],
                  forward_flops=flops.forward.get(layer, 0.0) if flops else 0.0,
                  backward_flops=flops.backward.get(layer, 0.0) if flops else 0.0)
            for layer in it.order]


def count_flops(model: str, input_shape: tuple[int, ...], batch_size: int,
                options: dict[str, Any] | None = None, num_classes: int = NUM_CLASSES) -> Iteration:
    """Forward and backward FLOPs per layer (FlopCounterMode, on the meta device: nothing runs) of
    `model` with `num_classes` outputs."""
    from torch.utils.flop_counter import FlopCounterMode

    options = dict(options or {})
    _check(batch_size)
    with torch.device("meta"):
        net = _build(model, input_shape, options, num_classes)
    x, y = (t.to("meta") for t in _batch(model, input_shape, batch_size, options, seed=0))
    with FlopCounterMode(display=False) as counter:
        return hooked_iteration(net, x, y, FlopClock(counter))


def _machine(device: torch.device, threads: int) -> str:
    if device.type == "cuda":
        tf32 = lambda on: "TF32" if on else "fp32"   # noqa: E731
        where = (f"{torch.cuda.get_device_name(device)}, CUDA {torch.version.cuda}, convolutions "
                 f"{tf32(torch.backends.cudnn.allow_tf32)}, matmuls {tf32(torch.backends.cuda.matmul.allow_tf32)}")
    else:
        where = cpu_name()
    return f"{where}; torch {torch.__version__}; {threads} thread{'s' * (threads > 1)}; {platform.system()}"


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} ({os.cpu_count()} cores)"
    except OSError:
        pass
    return platform.processor() or platform.machine()


# ---------------------------------------------------------------------------- measurement
@dataclass(frozen=True)
class Measurement:
    """A measured profile and the references measured in the same call: median forward + loss +
    backward seconds of the iterations without hooks and of the hooked ones (`hook_ratio` can
    differ from hooked_s / unhooked_s: a sum of per-layer medians is not the median of the sums)."""

    profile: Profile
    unhooked_s: float
    hooked_s: float             # median forward + loss + backward of the hooked iterations

    @property
    def hook_ratio(self) -> float:
        """Sum of the per-layer forward and backward medians / the un-hooked median."""
        return (self.profile.forward_s + self.profile.backward_s) / self.unhooked_s


def measure(model: str, input_shape: tuple[int, ...], batch_size: int, *, device: str = "cpu",
            reps: int = 5, warmup: int = 2, threads: int | None = None, seed: int = 0,
            options: dict[str, Any] | None = None) -> Measurement:
    """Measure `model`'s layer profile (module docstring): medians of `reps` rounds after `warmup`
    iterations, `threads` intra-op threads (default: torch's current setting), fixed `seed`."""
    options = dict(options or {})
    _check(batch_size, reps, warmup, threads)
    if device not in ("cpu", "cuda"):
        raise ConfigError("device", device, ("cpu", "cuda"), "or --project DEVICE for a projection")
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device", device, ("cpu",), "no CUDA device on this machine")
    if threads is not None:
        torch.set_num_threads(threads)
    threads = torch.get_num_threads()
    dev = torch.device(device)
    flops = count_flops(model, input_shape, batch_size, options)
    torch.manual_seed(seed)
    net = _build(model, input_shape, options).to(dev)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    x, y = (t.to(dev) for t in _batch(model, input_shape, batch_size, options, seed))
    clock = CudaClock() if dev.type == "cuda" else WallClock()
    rounds: list[Iteration] = []
    whole: list[float] = []
    update: list[float] = []
    for i in range(warmup + reps):
        optimizer.zero_grad(set_to_none=True)
        it = hooked_iteration(net, x, y, clock)
        optimizer.zero_grad(set_to_none=True)
        t0 = clock.mark()
        F.cross_entropy(net(x), y).backward()
        t1 = clock.mark()
        optimizer.step()
        t2 = clock.mark()
        clock.settle()
        if i >= warmup:
            rounds.append(it)
            whole.append(clock.between(t0, t1))
            update.append(clock.between(t1, t2))
    it = rounds[-1]
    sizes = _tensor_sizes(net)
    fwd = {layer: statistics.median(r.forward[layer] for r in rounds) for layer in it.order}
    bwd = {layer: statistics.median(r.backward[layer] for r in rounds) for layer in it.order}
    total_bytes = sum(b for _, b in sizes.values())
    upd = {layer: statistics.median(update) * sum(sizes[t][1] for t in it.tensors[layer]) / total_bytes
           for layer in it.order}
    unhooked = statistics.median(whole)
    hooked = statistics.median(sum(r.forward.values()) + sum(r.backward.values()) for r in rounds)
    machine = (f"{_machine(dev, threads)}; medians of {reps} reps after {warmup} warm-up; forward+backward "
               f"medians: un-hooked {unhooked:.6g} s, hooked {hooked:.6g} s")
    profile = Profile(model=model, batch_size=batch_size, input_shape=tuple(input_shape), device=device,
                      source="measured", machine=machine, layers=_layers(it, sizes, fwd, bwd, upd, flops))
    return Measurement(profile, unhooked, hooked)


def host_and_device(model: str, input_shape: tuple[int, ...], batch_size: int, *, device: str = "cuda",
                    reps: int = 20, warmup: int = 5, options: dict[str, Any] | None = None) -> dict[str, float]:
    """Where a training step's time goes on a GPU host: medians over `reps` steps (forward, loss,
    backward, SGD with momentum), each started on an idle device, of
    `host_forward_s` / `host_backward_s` / `host_update_s`: the host's time to issue each phase (the
    Python calls return before the device is done unless the host must wait for it);
    `step_s`: the whole step until the device is done (``synchronize``);
    `device_s`: the device's own time for the step, events recorded around it while the device is
    held busy first (``torch.cuda._sleep``) so that the host issues ahead and no gap waits for it;
    `host_layerwise_update_s`: the host's time to issue the same update tensor by tensor
    (`algorithms.layerwise.sgd_update`, as DeAR and ByteScheduler apply it) instead of
    ``optimizer.step()``. On the CPU every one of them is wall time (host and device are one)."""
    from ..algorithms.layerwise import group_hyper, sgd_update

    options = dict(options or {})
    _check(batch_size, reps, warmup)
    dev = torch.device(device)
    cuda = dev.type == "cuda"
    torch.manual_seed(0)
    net = _build(model, input_shape, options).to(dev)
    optimizer = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9)
    x, y = (t.to(dev) for t in _batch(model, input_shape, batch_size, options, 0))
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step() -> list[float]:
        stamps = [time.perf_counter()]
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(net(x), y)
        stamps.append(time.perf_counter())
        loss.backward()
        stamps.append(time.perf_counter())
        optimizer.step()
        stamps.append(time.perf_counter())
        return stamps

    rows: list[dict[str, float]] = []
    for i in range(warmup + reps):
        sync()
        stamps = step()
        sync()
        row = dict(host_forward_s=stamps[1] - stamps[0], host_backward_s=stamps[2] - stamps[1],
                   host_update_s=stamps[3] - stamps[2], step_s=time.perf_counter() - stamps[0])
        if cuda:
            torch.cuda._sleep(int(2e9 * 3 * row["step_s"]))    # about 3 steps' time at ~2 GHz
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            sync()
            row["device_s"] = start.elapsed_time(end) / 1e3
        else:
            row["device_s"] = row["step_s"]
        sync()
        optimizer.zero_grad(set_to_none=True)
        F.cross_entropy(net(x), y).backward()
        params = [q for q in net.parameters() if q.grad is not None]
        lrs = {id(g): g["lr"] for g in optimizer.param_groups}
        sync()
        t0 = time.perf_counter()
        sgd_update(optimizer, params, [q.grad for q in params], lrs, group_hyper(optimizer))
        row["host_layerwise_update_s"] = time.perf_counter() - t0
        if i >= warmup:
            rows.append(row)
    return {k: statistics.median(r[k] for r in rows) for k in rows[0]}


# ---------------------------------------------------------------------------- projection
def efficiency(model_family: str) -> float:
    """Fraction of its device's peak at which the family's calibration model runs, so that its
    FLOPs / (peak x efficiency) equals the published iteration time (`CALIBRATIONS`)."""
    cal = CALIBRATIONS[model_family]
    it = count_flops(cal.model, cal.input_shape, cal.batch_size)
    total = sum(it.forward.values()) + sum(it.backward.values())
    return total / (DEVICES[cal.device] * cal.iteration_s)


def flop_profile(model: str, input_shape: tuple[int, ...], batch_size: int, device: str, rate: float,
                 machine: str, options: dict[str, Any] | None = None, num_classes: int = NUM_CLASSES) -> Profile:
    """The profile of `model` (with `options` and `num_classes` outputs) timed by its FLOPs alone:
    each layer's forward and backward time is its FLOPs (`count_flops`) / `rate` FLOP/s, its update
    0; its exact gradient tensors in backward order, nothing timed; labelled with `device` and
    `machine`. `project` gives it a calibrated rate; a caller that scales it to a measured time
    (`Profile.scaled`) uses only its proportions."""
    options = dict(options or {})
    flops = count_flops(model, input_shape, batch_size, options, num_classes)
    with torch.device("meta"):
        sizes = _tensor_sizes(_build(model, input_shape, options, num_classes))
    fwd = {layer: flops.forward[layer] / rate for layer in flops.order}
    bwd = {layer: flops.backward[layer] / rate for layer in flops.order}
    return Profile(model=model, batch_size=batch_size, input_shape=tuple(input_shape), device=device,
                   source="flops-scaled", machine=machine,
                   layers=_layers(flops, sizes, fwd, bwd, dict.fromkeys(flops.order, 0.0), flops))


def project(model: str, input_shape: tuple[int, ...], batch_size: int, device: str,
            options: dict[str, Any] | None = None) -> Profile:
    """The FLOP-scaled profile of `model` on `device` (a key of `DEVICES`), module docstring."""
    if device not in DEVICES:
        raise ConfigError("project", device, DEVICES)
    cal = CALIBRATIONS[family(model)]
    eff = efficiency(family(model))
    borrowed = "" if device == cal.device else f" (no published time on {device}: {cal.device}'s efficiency with {device}'s peak)"
    machine = (f"flops-scaled: t = FLOPs / ({DEVICES[device] / 1e12:g} TFLOP/s x {eff:.4f}); {family(model)} "
               f"efficiency calibrated on {cal.device} to {cal.iteration_s:.4f} s/iteration, {cal.source}"
               f"{borrowed}; FLOPs by torch.utils.flop_counter, torch {torch.__version__}")
    return flop_profile(model, input_shape, batch_size, device, DEVICES[device] * eff, machine, options)

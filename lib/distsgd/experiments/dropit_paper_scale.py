"""DropIT's memory headline at the paper's setting: ViT-B/16, DeiT-Ti and ResNet-18 on ImageNet inputs.

Chen et al., "DropIT: Dropping Intermediate Tensors for Memory-Efficient DNN Training", ICLR 2023,
arXiv 2202.13808; v1 abstract: "saving 20% GPU memory". `dropit_memory_table` gives, per model,
precision and method (the baseline, DropIT min-k at γ = 0.9 with the stem and head exempt as the
authors run it), the bytes autograd saves for backward in one training step (`dropit.measure`):

- counted on fake tensors (``fake=True``): exact and without running a kernel, for the kernel and
  autocast choices of `device` (``"cuda"`` on a machine without a GPU too), in seconds;
- measured in a real step on `device` (``fake=False``): the same counts and, on CUDA, the peak of
  ``torch.cuda.max_memory_allocated`` over forward, backward and an SGD step, above what was
  allocated before (the model already on the device).

The setting (`PAPER_BATCH`, 224x224 inputs, 1000 classes, fp32 and fp16 autocast):

- ViT-B/16 (`vit_base`: `vit_tiny`'s encoder at DeiT-B's width, dim 768, depth 12, heads 12,
  `PAPER_ARCH`), the model of the v1 abstract's 20% (the authors' early README: ViT-B/16 at
  224x224, intermediate-tensor cache 20,290 -> 16,052 MB): batch 384 per GPU, the ``--batch-size``
  of their README's DeiT-B command (fine-tuning on CIFAR-100 at γ = 0.9).
- DeiT-Ti (`vit_tiny`, patch 16 at 224x224): batch 512 per GPU, the default ``--batch-size`` of the
  authors' ``benchmarks/deit/main.py``, which their README's DeiT-Ti command (2 GPUs) leaves as it is.
- ResNet-18: the authors' current repository has no ResNet-18 run (their early README reports
  ResNet-18 at 224x224, 2,826 -> 2,600 MB, without its batch); 256, ImageNet ResNet's standard
  batch (He et al. 2016; torchvision's reference recipe, 8 GPUs x 32), on one GPU.

The released ``main.py`` trains under fp16 autocast (``--autocast`` defaults to on); the early
README does not state the precision of its numbers.

Attention runs PyTorch's math kernel (``SDPBackend.MATH``): it keeps the attention probabilities,
as the explicit attention of the timm DeiT the authors trained does, and it is the kernel on every
device, where the fused kernels (flash, memory-efficient) are chosen per GPU and keep less.
"""
from __future__ import annotations

from collections.abc import Mapping

import pandas as pd
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from ..dropit.measure import ActivationMemory, count_activation_memory, measure_activation_memory
from ..models import build_model

PAPER_BATCH = {"vit_base": 384, "vit_tiny": 512, "resnet18": 256}      # per GPU; sources in the module doc
PAPER_ARCH = {"vit_base": ("vit_tiny", {"dim": 768, "depth": 12, "heads": 12})}   # name -> (model, options)
PAPER_INPUT = (3, 224, 224)
PAPER_CLASSES = 1000
PAPER_GAMMA = 0.9
PRECISIONS: dict[str, torch.dtype | None] = {"fp32": None, "fp16 autocast": torch.float16}
SGD_LR = 0.01                  # the step's learning rate: what the step updates, not its memory


def _one(model_name: str, batch: int, input_shape: tuple[int, ...], num_classes: int,
         gamma: float, autocast_dtype: torch.dtype | None, device: torch.device,
         fake: bool) -> ActivationMemory:
    """One model (DropIT at `gamma`, or the baseline at 0) counted on fake tensors or measured in a
    real training step on `device`."""
    torch.manual_seed(0)
    arch, options = PAPER_ARCH.get(model_name, (model_name, {}))
    model = build_model(arch, input_shape, num_classes, dropit={"gamma": gamma}, **options).train()
    with sdpa_kernel(SDPBackend.MATH):
        if fake:
            return count_activation_memory(model, (batch, *input_shape), F.cross_entropy, device,
                                           autocast_dtype)
        model.to(device)
        x = torch.randn(batch, *input_shape, device=device)
        y = torch.randint(0, num_classes, (batch,), device=device)
        optimizer = torch.optim.SGD(model.parameters(), lr=SGD_LR)
        return measure_activation_memory(model, x, y, F.cross_entropy, autocast_dtype, optimizer)


def device_name(device: torch.device, fake: bool) -> str:
    """What did the counting: the GPU's name for a real CUDA run, else the device type, noting
    fake tensors."""
    if fake:
        return f"{device.type} rules on fake tensors (no kernel run)"
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def dropit_memory_table(device: str | torch.device = "cuda", fake: bool = True,
                        batches: Mapping[str, int] = PAPER_BATCH,
                        input_shape: tuple[int, ...] = PAPER_INPUT, num_classes: int = PAPER_CLASSES,
                        gamma: float = PAPER_GAMMA,
                        precisions: Mapping[str, torch.dtype | None] = PRECISIONS) -> pd.DataFrame:
    """Saved-for-backward bytes of each model of `batches` (name -> batch) at each precision, without
    DropIT and with min-k at `gamma` (stem and head exempt), on `device` (fake tensors or a real step,
    module doc). Columns: model, batch, input, precision, method, saved_bytes (every distinct saved
    tensor, parameters excluded), layer_bytes (those of the Linear and Conv2d layers),
    cuda_peak_bytes (NaN unless measured on CUDA), device (`device_name`)."""
    device = torch.device(device)
    rows = []
    for model_name, batch in batches.items():
        for precision, dtype in precisions.items():
            for method, g in (("baseline", 0.0), (f"dropit min-k gamma {gamma}", gamma)):
                m = _one(model_name, batch, tuple(input_shape), num_classes, g, dtype, device, fake)
                rows.append({"model": model_name, "batch": batch,
                             "input": "x".join(map(str, input_shape)), "precision": precision,
                             "method": method, "saved_bytes": m.saved_bytes,
                             "layer_bytes": m.layer_bytes,
                             "cuda_peak_bytes": float("nan") if m.cuda_peak_bytes is None
                             else m.cuda_peak_bytes,
                             "device": device_name(device, fake)})
    return pd.DataFrame(rows)


def summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per model, batch, input and precision of a `dropit_memory_table`: the baseline's and DropIT's
    saved bytes (GiB) and the fraction of the baseline's bytes DropIT frees (1 - DropIT / baseline;
    negative: DropIT keeps more), of all saved bytes (the notebook's ``memory_*`` claims), of the
    Linear and Conv2d layers' and, where measured on CUDA, of the training step's peak."""
    keys = ["model", "batch", "input", "precision"]
    base = table[table.method == "baseline"].set_index(keys)
    dropped = table[table.method != "baseline"].set_index(keys)
    out = pd.DataFrame({"baseline saved (GiB)": base.saved_bytes / 2**30,
                        "DropIT saved (GiB)": dropped.saved_bytes / 2**30,
                        "saved bytes freed": 1 - dropped.saved_bytes / base.saved_bytes,
                        "layer bytes freed": 1 - dropped.layer_bytes / base.layer_bytes})
    if table.cuda_peak_bytes.notna().any():
        out["CUDA peak freed"] = 1 - dropped.cuda_peak_bytes / base.cuda_peak_bytes
    return out.reset_index()

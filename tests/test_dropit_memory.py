"""DropIT's memory (lib/distsgd/dropit): the mixed-precision path of its layers, the saved bytes
counted in the dtype autograd keeps, the count on fake tensors against a real run, and the table of
the paper's setting with its script, on CPU (the CUDA path of the same code runs in
reproduce/gpu_check.py)."""
from __future__ import annotations

import copy
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from distsgd.dropit import SavedTensorMeter, dropit, kept_count
from distsgd.dropit.measure import autocast
from distsgd.experiments.dropit_paper_scale import dropit_memory_table, summary

ROOT = Path(__file__).resolve().parents[1]
HALF = (torch.bfloat16, torch.float16)
LAYERS = [
    (lambda: nn.Linear(13, 6), (7, 13)),
    (lambda: nn.Linear(13, 6), (2, 7, 13)),                          # tokens, as in a ViT
    (lambda: nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), (2, 4, 9, 9)),
]
LAYER_IDS = ["linear", "linear3d", "conv"]


def _step(layer: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """Output under CPU autocast in `dtype`, and the input, weight and bias gradients of a fixed
    output gradient (backward outside autocast, as AMP runs it)."""
    layer.zero_grad(set_to_none=True)
    x = x.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=dtype):
        y = layer(x)
    y.backward(torch.randn(y.shape, generator=torch.Generator().manual_seed(3)).to(y.dtype))
    return y, x.grad, layer.weight.grad, layer.bias.grad


@pytest.mark.parametrize("dtype", HALF, ids=["bf16", "fp16"])
@pytest.mark.parametrize("layer,shape", LAYERS, ids=LAYER_IDS)
def test_autocast_gamma_zero_is_bit_identical_to_the_plain_layer_under_autocast(layer, shape, dtype):
    torch.manual_seed(0)
    plain, x = layer(), torch.randn(shape)
    wrapped = dropit(copy.deepcopy(plain), 0.0)
    exact, ours = _step(plain, x, dtype), _step(wrapped, x, dtype)
    assert ours[0].dtype == dtype                                    # computed in the autocast dtype
    assert [t.dtype for t in ours[1:]] == [torch.float32] * 3        # gradients in their inputs' dtype
    for name, a, b in zip(("output", "input grad", "weight grad", "bias grad"), exact, ours):
        assert torch.equal(a, b), name


@pytest.mark.parametrize("dtype", (*HALF, None), ids=["bf16", "fp16", "fp32"])
@pytest.mark.parametrize("layer,shape", LAYERS, ids=LAYER_IDS)
def test_saved_bytes_are_kept_values_in_the_autocast_dtype_and_int32_positions(layer, shape, dtype):
    torch.manual_seed(0)
    plain, x = layer(), torch.randn(shape)
    wrapped = dropit(copy.deepcopy(plain), 0.9)
    k, value_bytes = kept_count(x.numel(), 0.9), 4 if dtype is None else 2
    for model, expected in ((wrapped, k * value_bytes + k * 4),
                            (plain, x.numel() * value_bytes)):   # its input; autocast's weight copy is no activation
        with SavedTensorMeter(model) as meter, autocast("cpu", dtype):
            model(x)
        assert meter.total_bytes == expected, type(model).__name__


@pytest.mark.parametrize("activation", (nn.ReLU, nn.GELU), ids=["relu", "gelu"])
@pytest.mark.parametrize("dtype", (torch.float16, None), ids=["fp16", "fp32"])
def test_a_stem_output_counts_though_it_comes_from_one_parameter_and_the_data(dtype, activation):
    """An activation after a stem keeps the stem's output (GELU: its input, the convolution's output
    itself; ReLU: its own output): in the autograd graph the weight (no bias, as in ResNet) is their
    only input (the data needs no gradient), but they are the batch's activations, not copies of
    the weight."""
    stem, x = nn.Sequential(nn.Conv2d(3, 4, 3, bias=False), activation()), torch.randn(2, 3, 8, 8)
    value_bytes = 4 if dtype is None else 2
    with SavedTensorMeter(stem) as meter, autocast("cpu", dtype):
        y = stem(x)
    assert meter.total_bytes == (x.numel() + y.numel()) * value_bytes


def test_autocast_sets_torch_autocast_state_and_restores_it():
    torch.manual_seed(0)
    layer, x = nn.Linear(5, 3), torch.randn(4, 5)
    with torch.autocast("cpu", dtype=torch.float16):                # not the CPU default, bf16
        reference = layer(x)
    with autocast("cpu", torch.float16):
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16
        assert torch.equal(layer(x), reference)
    assert not torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.bfloat16
    with autocast("cpu", None):
        assert layer(x).dtype == torch.float32
    # CUDA autocast on fake CUDA tensors, on any machine (torch.autocast("cuda") turns itself off
    # without a GPU); bf16, not the CUDA default fp16
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode(), autocast("cuda", torch.bfloat16):
        y = F.linear(torch.empty(4, 5, device="cuda"), torch.empty(3, 5, device="cuda"))
    assert y.device.type == "cuda" and y.dtype == torch.bfloat16
    assert not torch.is_autocast_enabled("cuda") and torch.get_autocast_dtype("cuda") == torch.float16


SMALL = {"batches": {"vit_tiny": 2, "resnet18": 2}, "input_shape": (3, 80, 80), "num_classes": 10}


def _batch_norm_statistics_bytes() -> int:
    """ResNet-18's batch norm statistics (save_mean, save_invstd: 2 per channel) at 2 bytes each:
    what PyTorch's fake batch norm on CPU saves in fp16 where the CPU kernel keeps fp32."""
    from distsgd.models import build_model
    model = build_model("resnet18", SMALL["input_shape"], SMALL["num_classes"])
    return sum(2 * 2 * m.num_features for m in model.modules() if isinstance(m, nn.BatchNorm2d))


def test_count_on_fake_tensors_equals_a_real_training_step():
    """Both models, fp32 and fp16 autocast, baseline and DropIT, on a small batch and input: the
    count on fake tensors (no kernel runs) is the real step's to the byte (the storage key identifies
    shared memory on both), but for ResNet-18's batch norm statistics under CPU autocast (a fake
    kernel's dtype on CPU; under CUDA rules cuDNN's statistics are fp32 in both)."""
    fake = dropit_memory_table("cpu", fake=True, **SMALL)
    real = dropit_memory_table("cpu", fake=False, **SMALL)
    keys = ["model", "batch", "input", "precision", "method"]
    assert fake[keys].equals(real[keys]) and len(real) == 8
    assert fake.layer_bytes.tolist() == real.layer_bytes.tolist()
    off = ((real.model == "resnet18") & (real.precision != "fp32")) * _batch_norm_statistics_bytes()
    assert (real.saved_bytes - fake.saved_bytes).tolist() == off.tolist()
    assert (fake.saved_bytes > fake.layer_bytes).all() and real.cuda_peak_bytes.isna().all()
    assert set(real.device) == {"cpu"} and set(fake.device) == {"cpu rules on fake tensors (no kernel run)"}
    layers = real.set_index(keys).layer_bytes.unstack("method")
    assert (layers["dropit min-k gamma 0.9"] < layers["baseline"]).all()


def test_script_writes_the_table(tmp_path):
    done = subprocess.run([sys.executable, "reproduce/dropit_memory.py", str(tmp_path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={"PYTHONPATH": str(ROOT / "lib"), "CUDA_VISIBLE_DEVICES": "",
                               "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")})
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(tmp_path / "dropit_memory.csv")
    assert table.model.tolist() == ["vit_base"] * 4 + ["vit_tiny"] * 4 + ["resnet18"] * 4
    assert table.batch.tolist() == [384] * 4 + [512] * 4 + [256] * 4 and set(table.input) == {"3x224x224"}
    assert set(table.device) == {"cuda rules on fake tensors (no kernel run)"}
    assert (table.saved_bytes > table.layer_bytes).all() and table.cuda_peak_bytes.isna().all()
    # the committed table notebook 03 reads is what the script writes (fake tensors: the same on any machine)
    pd.testing.assert_frame_equal(table, pd.read_csv(ROOT / "figures" / "03_dropit" / "paper_scale_memory.csv"))


@pytest.mark.parametrize("fake", (False, True), ids=["real", "fake"])
def test_meter_identifies_memory_by_storage_offset_and_size(fake):
    """Two rows of one tensor are two memories (same storage and size, other offsets); a row saved
    twice, also through another view of it, is one; on fake tensors as on real ones."""
    from contextlib import nullcontext

    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode() if fake else nullcontext():
        h = torch.ones(2, 8, requires_grad=True) * 1                 # one storage of 16 floats
        with SavedTensorMeter(nn.Identity()) as meter:
            h[0].sin(), h[1].sin(), h[0].cos(), h[0].view(2, 4).cos()
    assert meter.total_bytes == 2 * 8 * 4


def test_summary_gives_the_fraction_freed_per_model_and_precision():
    rows = [("m", "fp32", "baseline", 1000, 400, float("nan")), ("m", "fp32", "dropit", 750, 100, float("nan")),
            ("m", "fp16 autocast", "baseline", 500, 200, float("nan")),
            ("m", "fp16 autocast", "dropit", 600, 60, float("nan"))]
    table = pd.DataFrame([{"model": m, "batch": 4, "input": "3x8x8", "precision": p, "method": k,
                           "saved_bytes": s, "layer_bytes": lb, "cuda_peak_bytes": c}
                          for m, p, k, s, lb, c in rows])
    out = summary(table).set_index("precision")
    assert out.loc["fp32", "saved bytes freed"] == 0.25 and out.loc["fp32", "layer bytes freed"] == 0.75
    assert out.loc["fp16 autocast", "saved bytes freed"] == pytest.approx(-0.2)     # DropIT keeps more
    assert out.loc["fp32", "baseline saved (GiB)"] == 1000 / 2**30
    assert "CUDA peak freed" not in out
    table["cuda_peak_bytes"] = [2000, 1500, 1000, 900]
    assert summary(table).set_index("precision")["CUDA peak freed"].tolist() == [0.25, pytest.approx(0.1)]

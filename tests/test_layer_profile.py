"""Tests of distsgd.systems.layer_profile: the CSV round trip, totals, scaling, measurement, FLOP scaling."""
from __future__ import annotations

import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from distsgd.errors import ConfigError
from distsgd.systems.layer_profile import COLUMNS, Layer, Profile
from distsgd.models import build_model
from distsgd.systems.profiler import (CALIBRATIONS, DEVICES, WallClock, count_flops, hooked_iteration, measure,
                               project)


def toy_profile() -> Profile:
    return Profile(model="mlp", batch_size=16, input_shape=(3, 32, 32), device="cpu",
                   source="measured", machine="test machine, 1 thread",
                   layers=[Layer("2", 0.001, 0.002, 0.0005, ["2.weight", "2.bias"], [40, 4], [10, 1], 20.0, 40.0),
                           Layer("0", 0.003, 0.006, 0.001, ["0.weight", "0.bias"], [400, 40], [100, 10], 200.0, 400.0)])


def test_csv_round_trip_and_layer_columns_sum_to_the_model(tmp_path):
    profile = toy_profile()
    path = profile.to_csv(tmp_path / "p" / "mlp_b16.csv")
    df = pd.read_csv(path)
    assert list(df.columns) == COLUMNS
    assert list(df["order"]) == [0, 1, 2, 3]
    assert list(df["forward_s"]) == [0.001, 0, 0.003, 0]     # on the layer's first row only
    assert df["input_shape"].iloc[0] == "3x32x32"
    again = Profile.from_csv(path)
    assert again == profile
    assert again.forward_s == pytest.approx(0.004) and again.backward_s == pytest.approx(0.008)
    assert again.compute_s == pytest.approx(0.0135)
    assert again.tensor_bytes == [40, 4, 400, 40] and again.grad_bytes == 484
    assert df["forward_s"].sum() == pytest.approx(again.forward_s)


def test_scaled_keeps_proportions():
    profile = toy_profile()
    half = profile.scaled(profile.compute_s / 2)
    assert half.compute_s == pytest.approx(profile.compute_s / 2)
    assert [l.backward_s for l in half.layers] == pytest.approx([0.001, 0.003])
    assert half.tensor_bytes == profile.tensor_bytes


def test_bad_tables_name_the_problem(tmp_path):
    df = toy_profile().to_frame()
    with pytest.raises(ConfigError, match="missing columns: grad_bytes"):
        Profile.from_frame(df.drop(columns="grad_bytes"))
    with pytest.raises(ConfigError, match="profile.model"):
        Profile.from_frame(df.assign(model=["mlp", "cnn", "mlp", "mlp"]))
    with pytest.raises(ConfigError, match="source"):
        Profile.from_frame(df.assign(source="guessed"))


# ---------------------------------------------------------------------------- measurement
class Reordered(nn.Module):
    """Defined a, b, c; run c -> a -> b: backward makes b's gradients ready first, then a's, c's."""

    def __init__(self) -> None:
        super().__init__()
        self.a, self.b, self.c = nn.Linear(6, 6), nn.Linear(6, 3), nn.Linear(5, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(self.a(torch.relu(self.c(x)))))


class TickClock(WallClock):
    """Every stamp is one tick later: the attribution must account for every tick."""

    def __init__(self) -> None:
        self.ticks = 0

    def mark(self) -> float:
        self.ticks += 1
        return float(self.ticks)


def test_order_is_the_order_gradients_become_ready_not_the_definition_order():
    torch.manual_seed(0)
    ready = []
    model = Reordered()
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda p, name=name: ready.append(name))
    it = hooked_iteration(model, torch.randn(4, 5), torch.randint(0, 3, (4,)), TickClock())
    assert it.order == ["b", "a", "c"]
    assert [t for layer in it.order for t in it.tensors[layer]] == ready     # what autograd did


def test_every_tick_of_forward_and_backward_is_attributed_to_a_layer():
    clock = TickClock()
    it = hooked_iteration(Reordered(), torch.randn(4, 5), torch.randint(0, 3, (4,)), clock)
    # stamps: t0, 3 forward ends, t1, 6 gradients, t2 -> forward spans 4 ticks, backward 7
    assert sum(it.forward.values()) == 4 and sum(it.backward.values()) == 7
    assert it.forward == {"a": 1, "b": 2, "c": 1}       # b gets its own tick and the loss's
    assert it.backward == {"b": 2, "a": 2, "c": 3}      # c: its 2 gradients and the tail


def test_flops_per_layer_sum_to_flop_counters_totals_and_match_linear_layers():
    it = count_flops("mlp", (3, 8, 8), 4, {"hidden": [32, 16]})
    assert it.order == ["5", "3", "1"]
    assert it.forward == {"1": 2 * 4 * 192 * 32, "3": 2 * 4 * 32 * 16, "5": 2 * 4 * 16 * 10}
    with torch.device("meta"):
        model = build_model("mlp", (3, 8, 8), 10, hidden=[32, 16])
    with FlopCounterMode(display=False) as counter:
        F.cross_entropy(model(torch.randn(4, 3, 8, 8, device="meta")),
                        torch.zeros(4, dtype=torch.long, device="meta")).backward()
    assert sum(it.forward.values()) + sum(it.backward.values()) == counter.get_total_flops()


@pytest.mark.timing
def test_hooked_iteration_takes_the_time_of_the_unhooked_one():
    # First layer 3072 x 512 dominates: losing its interval (or double counting one) moves the ratio
    # by far more than the tolerance. The hooks cost ~1 us per stamp (14 stamps) against ~3 ms per
    # iteration; medians over interleaved hooked/un-hooked rounds (ratios of 1.03-1.05 seen alone).
    # A wall-clock ratio: it runs in the `timing` suite at normal priority (1.50 beside the notebooks
    # in CI), where the idle-class suites on the other core still moved measurements to 0.61, 0.66
    # and 0.39; a bug moves every measurement, so an out-of-band ratio is measured again, up to three
    # times, and fails only if every one is out of band.
    ratios = []
    for _ in range(3):
        m = measure("mlp", (3, 32, 32), 16, reps=7, warmup=2, threads=1, options={"hidden": [512, 512]})
        ratios.append(m.hook_ratio)
        if 0.8 < m.hook_ratio < 1.25:
            break
    assert 0.8 < ratios[-1] < 1.25, ratios


def test_measured_profile_bytes_and_order(tmp_path):
    m = measure("mlp", (3, 32, 32), 16, reps=3, warmup=1, threads=1, options={"hidden": [512, 512]})
    p = m.profile
    assert [layer.name for layer in p.layers] == ["5", "3", "1"]
    torch.manual_seed(0)
    model = build_model("mlp", (3, 32, 32), 10, hidden=[512, 512])
    sizes = {n: q.numel() * q.element_size() for n, q in model.named_parameters()}
    assert dict(zip([t for layer in p.layers for t in layer.tensors], p.tensor_bytes)) == sizes
    assert p.grad_bytes == sum(sizes.values())
    assert p.update_s > 0 and all(layer.forward_flops > 0 for layer in p.layers)
    assert "1 thread" in p.machine and p.source == "measured"
    assert Profile.from_csv(p.to_csv(tmp_path / "mlp.csv")) == p


# ---------------------------------------------------------------------------- projection
@pytest.mark.parametrize("fam", sorted(CALIBRATIONS))
def test_projection_of_the_calibration_model_takes_the_published_time(fam):
    cal = CALIBRATIONS[fam]
    p = project(cal.model, cal.input_shape, cal.batch_size, cal.device)
    assert p.compute_s == pytest.approx(cal.iteration_s, rel=1e-9)
    assert p.source == "flops-scaled" and cal.source in p.machine
    slower = project(cal.model, cal.input_shape, cal.batch_size, "GTX1080Ti-fp32")
    assert slower.compute_s == pytest.approx(cal.iteration_s * DEVICES[cal.device] / DEVICES["GTX1080Ti-fp32"])
    assert "efficiency with GTX1080Ti-fp32's peak" in slower.machine


def test_projection_keeps_the_flop_proportions():
    p = project("cnn", (3, 32, 32), 8, "V100-fp32")
    ratios = [layer.forward_s / layer.forward_flops for layer in p.layers if layer.forward_flops]
    assert max(ratios) == pytest.approx(min(ratios))
    assert p.forward_flops == pytest.approx(sum(count_flops("cnn", (3, 32, 32), 8).forward.values()))


def test_bad_inputs_are_config_errors_naming_the_field():
    with pytest.raises(ConfigError, match="project"):
        project("cnn", (3, 32, 32), 8, "H100")
    with pytest.raises(ConfigError, match="device"):
        measure("cnn", (3, 32, 32), 8, device="tpu")
    with pytest.raises(ConfigError, match="reps"):
        measure("cnn", (3, 32, 32), 8, reps=0)
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="no CUDA device"):
            measure("cnn", (3, 32, 32), 8, device="cuda")

"""distsgd.verdicts.analysis: first time a run reaches a target; gradient diversity ζ²; log ratios."""
from __future__ import annotations

import math

import pandas as pd
import torch

from distsgd.verdicts.analysis import first_reaching, gradient_diversity, log2_ratio
from distsgd.data.base import TensorSource


def test_first_reaching_a_loss_or_an_accuracy() -> None:
    m = pd.DataFrame({"step": [0, 10, 20, 30], "wall_s": [0.0, 1.0, 2.0, 3.0],
                      "train_loss": [2.0, 0.9, 0.5, 0.4], "test_acc": [0.1, None, 0.8, 0.9]})
    assert first_reaching(m, "train_loss", 0.5, at="wall_s") == 2.0
    assert first_reaching(m, "train_loss", 0.9, at="step") == 10
    assert math.isnan(first_reaching(m, "train_loss", 0.1, at="step"))
    assert first_reaching(m, "test_acc", 0.8, at="step", below=False) == 20   # the NaN row is skipped


def test_gradient_diversity_is_zero_for_identical_shards_and_grows_with_disagreement() -> None:
    torch.manual_seed(0)
    x = torch.randn(40, 3)
    y = torch.cat([torch.zeros(20, dtype=torch.long), torch.ones(20, dtype=torch.long)])
    source = TensorSource("t", "classification", 2, (x, y), (x, y))
    model = torch.nn.Linear(3, 2)
    same = [torch.arange(40), torch.arange(40)]
    assert gradient_diversity(model, source, same) == 0.0
    split = [torch.arange(20), torch.arange(20, 40)]          # one class per shard
    g = []
    for idx in split:
        model.zero_grad()
        torch.nn.functional.cross_entropy(model(x[idx]), y[idx]).backward()
        g.append(torch.cat([p.grad.reshape(-1) for p in model.parameters()]))
    expected = float(((g[0] - g[1]) / 2).pow(2).sum())        # each local gradient is ±(g0-g1)/2 off the mean
    assert abs(gradient_diversity(model, source, split) - expected) < 1e-6


# ------------------------------------------------------------------ the timing benchmarks' helpers

def _claims_with(ids: list[str]):
    from distsgd.verdicts.claims import Claims, Test

    claims = Claims("test_analysis")
    for cid in ids:
        claims.register(cid, "a ratio", "paper", Test("a / b", ">=", 1.0, "median", form="superiority", source="null: a ratio of 1"))
    claims.preregister(dry_run=True)
    return claims


def test_decide_median_ratio_writes_the_rounds_and_drops_missing_ones() -> None:
    from distsgd.verdicts.analysis import decide_median_ratio, per_round

    assert per_round([0.934, 1.0]) == "[0.93, 1.00]"
    claims = _claims_with(["up", "down", "none"])
    r = pd.Series([1.1, 1.2, float("nan"), 1.3, 1.15, 1.25, 1.4])
    assert decide_median_ratio(claims, "up", r, "p = 2, ", "; more") == "reproduced"
    row = claims.table().set_index("id").loc["up"]
    assert row.measured == "p = 2, 6 rounds, per round [1.10, 1.20, 1.30, 1.15, 1.25, 1.40]; more"
    assert row.estimate == 1.225 and row.low == 1.1 and row.high == 1.4   # 6 rounds: the whole range at 95%
    assert decide_median_ratio(claims, "down", 1 / r) == "contradicted"
    assert decide_median_ratio(claims, "none", pd.Series([float("nan")])) == "inconclusive"
    assert claims.table().set_index("id").loc["none"].measured == "0 rounds, per round []"


def test_machine_precheck_times_compute_only_steps_and_the_headroom(monkeypatch, tmp_path) -> None:
    from distsgd.systems import bench_checks as analysis

    seen = {}

    def bench(**kw):
        seen.update(kw)
        return pd.DataFrame({"label": ["compute"] * 4, "net_name": ["none"] * 4, "step_s": [1.0, 1.0, 1.0, 1.2],
                             "model": ["mlp"] * 4, "nproc": [2] * 4})

    monkeypatch.setattr(analysis.bs, "bench_schedules", bench)
    monkeypatch.setattr(analysis.bs, "emulation_headroom", lambda df, reps, backend: pd.DataFrame({"reps": [reps]}))
    pre, noise, headroom = analysis.machine_precheck(["mlp"], [2], tmp_path / "pre.csv", "gloo", True, batch_size=8)
    assert seen["cases"] == [{"algo": "compute", "label": "compute"}] and seen["repeats"] == 2
    assert seen["batch_size"] == 8 and seen["out"] == tmp_path / "pre.csv" and len(pre) == 4
    assert noise == analysis.bs.timing_noise(pre) > 0 and headroom.reps.iloc[0] == 2
    assert analysis.machine_precheck(["mlp"], [2], tmp_path / "pre.csv", "gloo", False)[2].reps.iloc[0] == 5


def test_simulator_predictions_fit_the_real_network_only_where_it_was_run(monkeypatch, tmp_path) -> None:
    from distsgd.systems import bench_checks as analysis

    calls = []
    monkeypatch.setattr(analysis.tv, "layer_profile", lambda m, b, shape, device: (m, b, device))
    monkeypatch.setattr(analysis.tv, "predict", lambda bench, profiles, cases, networks, warmup, steps:
                        (profiles, networks, warmup, steps))

    def times(p, sizes, reps, backend):
        calls.append((p, tuple(sizes), reps))
        return pd.DataFrame({"kind": "all_reduce", "nbytes": sizes, "p": p,
                             "measured_s": [1e-4 + 2 * (p - 1) / p * n / 1e9 for n in sizes]})

    monkeypatch.setattr(analysis.bs, "real_collective_times", times)
    bench = pd.DataFrame({"batch_size": [16, 16], "net_name": ["10GbE-like", "none"], "nproc": [2, 2]})
    profiles, nets, warmup, steps = analysis.simulator_predictions(bench, ["mlp"], [], [2], "gloo", 1, 4,
                                                                   [2**20, 2**22], 3, tmp_path)
    assert profiles == {"mlp": ("mlp", 16, "cpu")} and nets == {} and (warmup, steps) == (1, 4) and not calls
    bench.loc[0, "net_name"] = analysis.bs.REAL
    profiles, nets, _, _ = analysis.simulator_predictions(bench, ["mlp"], [], [2], "nccl", 1, 4,
                                                          [2**20, 2**22], 3, tmp_path)
    assert profiles["mlp"][2] == "cuda" and calls == [(2, (2**20, 2**22), 3)]
    assert abs(nets[2, "real"].bandwidth_Bps - 1e9) / 1e9 < 1e-3 and (tmp_path / "real_collectives_p2.csv").is_file()

def test_log2_ratio_with_and_without_an_offset() -> None:
    assert log2_ratio(2.0, 1.0) == 1.0 and log2_ratio(0.25, 1.0) == -2.0
    assert log2_ratio(0.0, 3.0, offset=1) == -2.0             # a target reached before any reduction counts
    assert math.isnan(log2_ratio(float("nan"), 1.0, offset=1))

"""distsgd.experiments.ssd_sgd: notebook 08's parameters, registration, networks, runs, tables and decisions."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from distsgd.verdicts import registration
from distsgd.verdicts.claims import Claims, paired_accuracy_resolution
from distsgd.experiments import ssd_sgd as ssd_exp

REGISTERED = Path(__file__).resolve().parent.parent / "reproduce" / "registered" / "quick"
PILOT = Path(__file__).resolve().parent.parent / "reproduce" / "pilots" / "quick" / "08_ssd_sgd"
SSD = {"warmup": 30, "local_lr_scale": 4.0, "local_rule": "cosdcasgd"}


def _registered() -> tuple[Claims, object, object]:
    claims = Claims("08_ssd_sgd")
    profile, band = ssd_exp.register_claims(claims, [2, 5], 5, "cosdcasgd", 5, 1000, "mnist", 1.2, 0.95)
    claims.preregister(dry_run=True)
    return claims, profile, band


def _result(acc: float = 0.9, pulled: float = 0.8, throughput: float = 100.0, steps: list[float] | None = None):
    """A stand-in for a Result: the fields the notebook's tables read."""
    return SimpleNamespace(summary={"final_test_acc": pulled, "final_train_loss": 0.5, "throughput_samples_s": throughput,
                                    "comm_bytes": 2e6, "comm_wait_s": 4.0},
                           metrics=pd.DataFrame({"test_acc": [0.1, acc]}),
                           step_seconds=lambda after: pd.Series(steps or [1.0, 1.0]))


def test_parameters_and_the_committed_registration(notebook_defaults) -> None:
    assert ssd_exp.check_parameters([2, 5, 10], 5) == (5, [2, 5])
    for periods, seeds in [([10], 5), ([2], 1), ([2], 2.0)]:
        with pytest.raises(ValueError):
            ssd_exp.check_parameters(periods, seeds)
    p = notebook_defaults("08_ssd_sgd")
    resolution = paired_accuracy_resolution(p["expected_acc"], 1000, p["seeds"])      # 1,000 held-out MNIST images
    claims = Claims("08_ssd_sgd")
    profile, band = ssd_exp.register_claims(claims, [2, 5], 5, p["local_rule"], p["seeds"], 1000, p["acc_data"],
                                            resolution, p["expected_acc"], margins=p["margins"])
    design = ssd_exp.design(*(p[k] for k in ("seed", "seeds", "steps", "nproc", "batch_size", "model", "data", "acc_data",
                                             "periods", "warmup", "local_lr_scale", "local_rule", "bandwidth_ratio",
                                             "low_latency", "latency_ratio", "backend")))
    committed = json.loads((REGISTERED / "08_ssd_sgd.json").read_text())
    assert registration.differences(claims.registered_tests(), design, committed) == []
    assert {t["form"] for t in committed["tests"].values()} == {"non-inferiority", "superiority"}
    # acc_close_k*: the pilot's margin (S-SGD's seed SD); the accuracy claims' power from the pilot, not the timing ones'
    close = committed["tests"]["acc_close_k5"]
    assert close["source"] == ssd_exp.CLOSE_PILOT and close["threshold"] == p["margins"]["acc_points"] > 0
    assert committed["pilot"]["seeds"] == 10 and committed["pilot"]["seed"] == 100    # seeds 100-109, disjoint from 0-2
    for id, t in committed["tests"].items():
        assert (t["expected_width"] is not None) == (id in ssd_exp.pilot_claims([2, 5]))
        assert id.startswith("acc_close") or t["source"].startswith("null:")
    assert profile.model == "resnet20" and claims.claims["warmup_needed"].precheck is None
    assert band is None and claims.claims["proj_latency_gain_grows"].precheck.startswith("not covered")


def test_the_margin_of_as_good_as_is_the_pilots_and_the_pilot_itself_tests_the_null() -> None:
    claims = Claims("08_ssd_sgd")
    ssd_exp.register_claims(claims, [2, 5], 5, "cosdcasgd", 3, 1000, "mnist", 1.1, 0.95, margins={"acc_points": 0.4})
    test = claims.claims["acc_close_k2"].test
    assert (test.threshold, test.side, test.source) == (0.4, "<=", ssd_exp.CLOSE_PILOT) and "08_ssd_sgd/T" in test.source
    assert "expected half-width" not in test.statistic and claims.claims["warmup_needed"].test.threshold == 0
    pilot = Claims("08_ssd_sgd")
    ssd_exp.register_claims(pilot, [2, 5], 5, "cosdcasgd", 10, 1000, "mnist", 0.6, 0.95)
    assert pilot.claims["acc_close_k2"].test.threshold == 0 and pilot.claims["acc_close_k2"].test.source == ssd_exp.CLOSE
    assert "expected half-width 0.6 points" in pilot.claims["acc_close_k2"].test.statistic
    assert ssd_exp.pilot_claims([2, 5]) == ["acc_close_k2", "acc_close_k5", "warmup_needed", "local_rule_needed"]


def test_the_margin_is_the_pilots_seed_spread(notebook_defaults) -> None:
    """acc_close_k*'s margin is S-SGD's seed SD the pilot printed, on seeds disjoint from the deciding ones."""
    import re

    pilot = pd.read_csv(PILOT / "T" / "claims.csv").set_index("id").measured
    sd = {re.search(r"S-SGD's seed SD ([0-9.e-]+) points", pilot[f"acc_close_k{k}"]).group(1) for k in (2, 5)}
    p = notebook_defaults("08_ssd_sgd")
    assert sd == {str(p["margins"]["acc_points"])} and (PILOT / "4T" / "claims.csv").is_file()
    design = json.loads((PILOT / "registered" / "T" / "08_ssd_sgd.json").read_text())["design"]
    pilot_seeds = set(range(design["seed"], design["seed"] + design["seeds"]))
    assert len(pilot_seeds) == 10 and not pilot_seeds & set(range(p["seed"], p["seed"] + p["seeds"]))


def test_scaled_networks_from_the_unemulated_runs(monkeypatch) -> None:
    calls = []

    def run(algo, name, net, **kw):
        calls.append((algo, name, net))
        step = 0.010 if algo == "local_sgd" else 0.013
        return SimpleNamespace(steady_step_time=lambda: step, comm=lambda: pd.DataFrame({"nbytes": [100_000]}))

    monkeypatch.setattr(ssd_exp, "run", run)
    claims = Claims("08_ssd_sgd")
    ssd_exp.register_claims(claims, [5], 5, "cosdcasgd", 5, 1000, "mnist", 0.5, 0.95)
    low, high, sync = ssd_exp.scaled_networks(claims, {"nproc": 4, "steps": 2}, 5, 0.25, "20us", 0.75)
    assert calls == [("local_sgd", "local_sgd_k5_nonet", ""), ("ssgd", "ssgd_nonet", "")]
    # bandwidth: 2 (p-1)/p x 100 kB x 8 / (0.25 x 10 ms) = 480 Mbit/s; latency 0.75 x 10 ms / 6 = 1250 us
    assert (low, high) == ("480.0Mbit,20us", "480.0Mbit,1250us") and sync == pytest.approx(0.3)
    assert "+30% of c synchronizing" in claims.claims["latency_gain_grows"].precheck


def test_network_and_accuracy_runs_name_every_variant(monkeypatch) -> None:
    calls = []
    monkeypatch.setattr(ssd_exp, "run", lambda **kw: calls.append(kw) or _result(acc=0.5 + len(calls) / 100))
    runs = ssd_exp.network_runs({"steps": 2}, SSD, 5, [2, 5, 10], "1Mbit,1ms")
    assert list(runs) == ["S-SGD", "DDP", "local SGD k=5", "OD-SGD (k=1)", "SSD-SGD k=2", "SSD-SGD k=5",
                          "SSD-SGD k=10", "SSD-SGD k=5, no warm-up", "SSD-SGD k=5, rule none",
                          "SSD-SGD k=5, rule dc (shown)"]
    assert [c["name"] for c in calls] == ["ssgd", "ddp", "local_sgd_k5", "od_sgd", "ssd_k2", "ssd_k5", "ssd_k10",
                                          "ssd_k5_nowarm", "ssd_k5_none", "ssd_k5_dc"]
    assert calls[1]["algo"] == "ddp" and calls[0]["algo"] == "ssgd"
    assert calls[7]["params"] == {**SSD, "period": 5, "warmup": 0} and {c["net"] for c in calls} == {"1Mbit,1ms"}
    calls.clear()
    acc, pulled, acc_runs = ssd_exp.accuracy_runs({"data": "digits", "seed": 0}, SSD, [2, 5], 5, "mnist", [3, 4])
    assert calls[1]["name"] == "ssd_sgd_warmup30_local_lr_scale4.0_local_rulecosdcasgd_period2_mnist_s3"
    assert calls[0]["name"] == "ssgd__mnist_s3" and calls[5]["seed"] == 4 and calls[5]["data"] == "mnist"
    assert all(c["eval_average"] for c in calls)      # the averaged model, for every method
    assert list(acc.columns) == ["S-SGD", "SSD-SGD k=2", "SSD-SGD k=5", "SSD-SGD k=5, no warm-up",
                                 "SSD-SGD k=5, rule none"] and acc.index.name == "seed"
    assert acc.loc[4, "S-SGD"] == pytest.approx(56.0) and (pulled == 80.0).all().all() and len(acc_runs) == 10


def test_summary_and_latency_gain_tables() -> None:
    runs = {"S-SGD": _result(throughput=100.0, steps=[2.0, 2.0]), "SSD-SGD k=5": _result(throughput=150.0)}
    table = ssd_exp.summary_table(runs, nproc=4)
    assert list(table.method) == ["S-SGD", "SSD-SGD k=5"] and table["blocked on communication (s/rank)"].iloc[0] == 1.0
    assert table["test acc (local)"].iloc[0] == 0.9 and table["test acc (pulled)"].iloc[0] == 0.8
    # the gain is over the faster baseline on each network: DDP on "lo", the kit's S-SGD on "hi"
    runs["DDP"] = _result(throughput=90.0, steps=[9.0, 9.0])
    low = {"S-SGD": _result(throughput=100.0, steps=[9.0, 9.0]), "DDP": _result(throughput=101.0, steps=[1.2, 1.2]),
           "SSD-SGD k=5": _result(throughput=111.1)}
    gain, growth, tp = ssd_exp.latency_gain({"lo": low, "hi": runs}, "lo", "hi", 5, 1)
    assert gain.to_dict() == pytest.approx({("lo", "DDP"): 0.1, ("hi", "S-SGD"): 0.5})
    assert list(growth) == pytest.approx([0.8, 0.8]) and len(tp) == 6


def test_decide_accuracy_pairs_the_seeds_per_test_image() -> None:
    claims, _, _ = _registered()
    correct = {"S-SGD": [1, 1, 1, 1], "SSD-SGD k=2": [1, 1, 1, 1], "SSD-SGD k=5": [1, 1, 1, 0],
               "SSD-SGD k=5, no warm-up": [0, 0, 0, 0], "SSD-SGD k=5, rule none": [1, 1, 1, 1]}
    runs = {(s, m): SimpleNamespace(test_correct=lambda model, c=c: np.array(c, float))
            for s in (0, 1) for m, c in correct.items()}
    ssd_exp.decide_accuracy(claims, runs, [0, 1], [2, 5], 5)
    table = claims.table().set_index("id")
    assert table.loc["acc_close_k2", "estimate"] == 0 and table.loc["acc_close_k5", "estimate"] == pytest.approx(25)
    assert table.loc["warmup_needed", "estimate"] == pytest.approx(75)
    assert table.loc["local_rule_needed", "estimate"] == pytest.approx(-25)
    assert table.loc["acc_close_k5", "measured"].endswith("; S-SGD's seed SD 0 points")     # the pilot's margin


def test_the_projected_latency_claim(tmp_path) -> None:
    claims, profile, band = _registered()
    proj, table = ssd_exp.decide_projection(claims, profile, band, tmp_path)
    assert list(table.index) == ssd_exp.PROJ_LATENCIES_US and (tmp_path / "projection.csv").is_file()
    assert list(table.speedup) == pytest.approx(list(table["S-SGD (ms/step)"] / table["SSD-SGD k=5 (ms/step)"]))
    decided = claims.table().set_index("id").loc["proj_latency_gain_grows"]
    assert decided.estimate == pytest.approx(table.speedup[2000] / table.speedup[2])


def _run_on(tmp: Path, name: str, step_s: list[float], hosts: list[str], net: str = ""):
    """A finished run's Result written to tmp/name: logged every 10 steps at `step_s` seconds per
    step of each period, rank i's pid file naming host hosts[i], on network `net`."""
    from distsgd import Config
    from distsgd.training.results import Result

    d = tmp / name
    (d / "ranks").mkdir(parents=True)
    for rank, host in enumerate(hosts):
        (d / "ranks" / f"pid_rank{rank}").write_text(f"{host} {100 + rank}\n")
    steps = [10 * i for i in range(len(step_s) + 1)]
    wall = np.cumsum([0.0] + [10 * s for s in step_s])
    return Result(d, Config(algo="ssgd", steps=steps[-1], nproc=len(hosts), net=net), {},
                  pd.DataFrame({"step": steps, "wall_s": wall, "train_loss": 1.0}))


@pytest.mark.parametrize("hosts, latency_only, measured", [(["n1", "n2"], True, True), (["n1", "n1"], True, False),
                                                            (["n1", "n2"], False, False)])
def test_a_stand_in_setting_decides_the_latency_claim_from_the_runs(tmp_path, hosts, latency_only, measured) -> None:
    """A stand-in setting of 2 workers on 2 nodes, mlp standing for ResNet-20: S-SGD and SSD-SGD on
    the real network and on it with the highest latency added decide the projected latency claim
    (its registered test: the speedup with the latency over that without, per logged period after
    the warm-up), and the headline's projected part reads as measured at the paper's setting. Runs
    on one host, or whose emulated network sets a bandwidth of its own, leave it projected."""
    from distsgd.training.allocation import Allocation
    from distsgd.verdicts.headlines import AT_PAPER_SETTING, HOWS, headline_table
    from distsgd.verdicts.setting import AT_SETTING

    setting = ssd_exp.paper_setting({"nproc": 2, "nodes": 2, "models": ["resnet20"]}, "mlp")
    claims = Claims("08_ssd_sgd")
    profile, band = ssd_exp.register_claims(claims, [2, 5], 5, "cosdcasgd", 5, 1000, "mnist", 1.2, 0.95, setting,
                                            Allocation.parse("2x0"))
    claims.preregister(dry_run=True)
    assert "speedup S-SGD / SSD-SGD (k=5) trained on the real network with 2000 us" in \
        claims.registered_tests()["proj_latency_gain_grows"]["statistic"]
    high = ssd_exp.HIGH_LATENCY if latency_only else "10Gbit,2000us"
    real = {"real": {"S-SGD": _run_on(tmp_path, "s", [9.0, 1.0, 1.0, 1.1], hosts),
                     "SSD-SGD": _run_on(tmp_path, "d", [9.0, 1.0, 1.0, 1.0], hosts)},
            "high_latency": {"S-SGD": _run_on(tmp_path, "sh", [9.0, 2.0, 2.2, 2.0], hosts, high),
                             "SSD-SGD": _run_on(tmp_path, "dh", [9.0, 1.0, 1.0, 1.0], hosts, high)}}
    ssd_exp.decide_projection(claims, profile, band, tmp_path, setting, real, warmup=10)
    row = claims.table().set_index("id").loc["proj_latency_gain_grows"]
    how = headline_table(claims.table().assign(notebook="08_ssd_sgd")).iloc[0].how
    assert row.measured.startswith(AT_SETTING) == measured
    if measured:
        assert row.estimate == pytest.approx(2.0) and row.measured.endswith("; 3 logged periods")
        assert how.startswith(AT_PAPER_SETTING)
    else:
        assert how.startswith(HOWS["projected"])
    assert ssd_exp.runs_at_setting(setting, {"nproc": 2}, SSD, Allocation.parse("1x0")) is None
    assert ssd_exp.runs_at_setting(ssd_exp.paper_setting({"nproc": 2, "nodes": 1}, "mlp"), {"nproc": 2}, SSD,
                                   Allocation.parse("1x0")) is None       # mlp stands for no paper model

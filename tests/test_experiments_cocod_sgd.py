"""distsgd.experiments.cocod_sgd (notebook 01): registration, the sweep's networks and tables, the
pairs, the invariant and the decisions, on synthetic Results (no run is launched: `run` is replaced)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from distsgd import Config
from distsgd.verdicts import registration
from distsgd.verdicts.claims import Claims
from distsgd.comm import parse_net
from distsgd.experiments import cocod_sgd as exp
from distsgd.training.allocation import Allocation
from distsgd.training.results import Result
from distsgd.verdicts.headlines import AT_PAPER_SETTING, HOWS, headline_table

NAMES = exp.method_names(4)
OWN_SETTING, ONE_HOST = exp.paper_setting({}, "mlp"), Allocation.parse("1x0")
ROOT = Path(__file__).resolve().parents[1]


def result(tmp: Path, name: str, step_s: float = 0.01, steps: int = 8, loss=None, modeled_s: float = 0.0,
           nproc: int = 2, seed: int = 0, **summary) -> Result:
    """A finished run's Result, written to tmp/name: logged every 2 steps at `step_s` seconds per step,
    one all-reduce of 1000 bytes per step modeled at `modeled_s` per rank."""
    d = tmp / name
    d.mkdir(parents=True, exist_ok=True)
    logged = list(range(0, steps + 1, 2))
    loss = list(loss) if loss is not None else [1.0 / (1 + s) for s in logged]
    pd.DataFrame([{"step": s, "rank": r, "kind": "all_reduce", "nbytes": 1000, "modeled_s": modeled_s}
                  for s in range(steps) for r in range(nproc)]).to_csv(d / "comm.csv", index=False)
    metrics = pd.DataFrame({"step": logged, "wall_s": [step_s * s for s in logged], "train_loss": loss})
    summary = {"final_train_loss": loss[-1], "final_test_acc": 0.9, "comm_bytes": 4e6, "comm_wait_s": 1.0,
               "train_s": step_s * steps, "step_time_s": step_s, **summary}
    return Result(d, Config(algo="cocod_sgd", steps=steps, nproc=nproc, seed=seed), summary, metrics)


def registered(extra=(), repeats=9, projected: dict | None = None) -> Claims:
    """The notebook's claims, registered; with `projected` (a dict) the projected ones too, their
    profiles and bands put into it."""
    claims = Claims("01_cocod_sgd")
    exp.register_claims(claims, 4, 3, list(extra), repeats)
    if projected is not None:
        projected["profiles"], projected["bands"] = exp.register_projection(claims, 4, OWN_SETTING, ONE_HOST)
    claims.preregister(dry_run=True)
    return claims


class Recorder:
    """Stands in for `run`: records each call and returns a Result from `make(call)`."""

    def __init__(self, make):
        self.calls, self.make = [], make

    def __call__(self, **kw):
        self.calls.append(kw)
        return self.make(kw)


def test_method_names_and_check_parameters() -> None:
    assert NAMES == {"ssgd": "S-SGD", "local_sgd": "local SGD k=4", "cocod_sgd": "CoCoD-SGD k=4"}
    assert exp.check_parameters(3, 0.5, 2) == [1.0, 1.0, 0.5]
    for slow, seeds in ((0, 3), (1.5, 3), ("1", 3), (0.5, 1), (0.5, 2.0)):
        with pytest.raises(ValueError):
            exp.check_parameters(3, slow, seeds)


def test_register_claims_and_the_cores_precheck(monkeypatch) -> None:
    claims = registered(extra=["vgg16"], repeats=5)
    assert list(claims.registered_tests()) == ["per_iteration_like_local", "per_iteration_like_local_vgg16",
                                               "hidden_communication"]
    assert claims._get("per_iteration_like_local_vgg16").claim.startswith("vgg16: per iteration, CoCoD-SGD")
    assert "over 5 interleaved pairs" in claims._get("hidden_communication").test.statistic
    monkeypatch.setattr(exp.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(exp.torch.cuda, "is_available", lambda: False)
    assert exp.precheck_cores(claims, 2) == (2, False) and not claims._get("hidden_communication").precheck
    assert exp.precheck_cores(claims, 3) == (2, True)
    assert "3 timing ranks on 2 cores" in claims._get("hidden_communication").precheck


def test_register_projection_every_model_and_comparison() -> None:
    p = {}
    claims = registered(projected=p)
    profiles, bands = p["profiles"], p["bands"]
    assert list(profiles) == list(exp.PROJ_MODELS)
    ids = [cid + sfx for sfx in exp.PROJ_MODELS.values() for cid, *_ in exp.PROJ_CLAIMS]
    assert list(bands) == ids and set(claims.registered_tests()) - {"per_iteration_like_local", "hidden_communication"} == set(ids)
    c = claims._get("proj_time_to_target_vs_ssgd_vgg16")
    assert c.test.threshold == 2.0 and "time to target ratio S-SGD / CoCoD-SGD" in c.test.quantity
    assert c.test.form == "up-to" and "2-3x faster" in c.test.source
    assert all(bands[i] is None and claims._get(i).precheck.startswith("not covered") for i in ids)


def test_the_registration_is_the_committed_one(notebook_defaults) -> None:
    claims = Claims("01_cocod_sgd")
    p = notebook_defaults("01_cocod_sgd")
    exp.register_claims(claims, p["period"], p["seeds"], p["extra_models"], p["repeats"],
                        margins=p["margins"])
    exp.register_projection(claims, p["period"], exp.paper_setting(p["paper_setting"], p["model"]), ONE_HOST)
    design = exp.design(*(p[k] for k in ("seed", "seeds", "steps", "nproc", "batch_size", "model", "data", "extra_models",
                                         "period", "comm_ratios", "latency", "repeats", "control_repeats", "pair_steps",
                                         "timing_nproc", "timing_batch_size", "backend", "paper_setting")))
    committed = json.loads((ROOT / "reproduce" / "registered" / "quick" / "01_cocod_sgd.json").read_text())
    assert registration.differences(claims.registered_tests(), design, committed) == []
    tests = committed["tests"]
    like = tests["per_iteration_like_local"]
    assert (like["form"], like["threshold"], like["source"]) == ("non-inferiority", p["margins"]["loss_ratio"],
                                                                exp.LIKE_LOCAL_PILOT) and like["threshold"] > 1
    assert (tests["hidden_communication"]["form"], tests["hidden_communication"]["threshold"]) == ("superiority", 0.0)
    assert committed["pilot"]["seeds"] == 10 and committed["pilot"]["seed"] == 100    # seeds 100-109, disjoint from 0-2
    for id, t in tests.items():      # the pilot gives the per-iteration claim's power only
        assert (t["expected_width"] is not None) == (id in exp.pilot_claims(p["extra_models"]))


def test_the_margin_of_as_good_as_is_the_pilots_and_the_pilot_itself_tests_the_null() -> None:
    claims = Claims("01_cocod_sgd")
    exp.register_claims(claims, 4, 3, ["vgg16"], 9, margins={"loss_ratio": 1.05})
    test = claims._get("per_iteration_like_local").test
    assert (test.threshold, test.side, test.source) == (1.05, "<=", exp.LIKE_LOCAL_PILOT) and "01_cocod_sgd/T" in test.source
    assert claims._get("per_iteration_like_local_vgg16").test.threshold == 1.05
    assert claims._get("hidden_communication").test.threshold == 0
    pilot = Claims("01_cocod_sgd")
    exp.register_claims(pilot, 4, 10, [], 2)
    assert (pilot._get("per_iteration_like_local").test.threshold, pilot._get("per_iteration_like_local").test.source) == (
        1.0, exp.LIKE_LOCAL)
    assert exp.pilot_claims(["vgg16"]) == ["per_iteration_like_local", "per_iteration_like_local_vgg16"]


def test_the_margin_is_the_pilots_seed_spread(notebook_defaults) -> None:
    """per_iteration_like_local's margin is exp of local SGD's seed SD of its log final training loss
    that the pilot printed, on seeds disjoint from the deciding ones."""
    import re

    pilot_dir = ROOT / "reproduce" / "pilots" / "quick" / "01_cocod_sgd"
    measured = pd.read_csv(pilot_dir / "T" / "claims.csv").set_index("id").measured["per_iteration_like_local"]
    margin = re.search(r"local SGD's seed SD of log final training loss [0-9.e-]+ \(exp ([0-9.]+)\)", measured).group(1)
    p = notebook_defaults("01_cocod_sgd")
    assert float(margin) == p["margins"]["loss_ratio"] and (pilot_dir / "4T" / "claims.csv").is_file()
    design = json.loads((pilot_dir / "registered" / "T" / "01_cocod_sgd.json").read_text())["design"]
    pilot_seeds = set(range(design["seed"], design["seed"] + design["seeds"]))
    assert len(pilot_seeds) == 10 and not pilot_seeds & set(range(p["seed"], p["seed"] + p["seeds"]))


def test_net_for_gives_the_all_reduce_time_asked() -> None:
    net = exp.net_for(2.0, 0.01, 100_000, 4, "100us")
    model = parse_net(net)
    assert model.latency_s == pytest.approx(1e-4)
    assert model.cost("all_reduce", 100_000, 4) == pytest.approx(0.02, rel=1e-3)
    with pytest.raises(AssertionError):
        exp.net_for(0.1, 0.001, 100_000, 4, "100us")                   # latency alone exceeds 0.1 ms


def test_sweep_networks(tmp_path) -> None:
    c, nbytes, nets = exp.sweep_networks(result(tmp_path, "c", step_s=0.02), [0.25, 2.0], "100us", 4)
    assert c == pytest.approx(0.02) and nbytes == 1000 and list(nets) == ["r=0.25", "r=2"]
    assert nets["r=2"] == exp.net_for(2.0, c, 1000, 4, "100us")


def test_run_sweep_runs_the_slow_network_first_cocod_first(tmp_path, monkeypatch) -> None:
    rec = Recorder(lambda kw: result(tmp_path, kw["name"]))
    monkeypatch.setattr(exp, "run", rec)
    sweep = exp.run_sweep({"r=0.25": "fast", "r=2": "slow"}, {"seed": 0}, 4)
    assert [(k["net"], k["algo"]) for k in rec.calls] == [("slow", "cocod_sgd"), ("slow", "local_sgd"),
                                                           ("slow", "ssgd"), ("fast", "cocod_sgd"),
                                                           ("fast", "local_sgd"), ("fast", "ssgd")]
    assert list(sweep) == ["r=0.25", "r=2"] and list(sweep["r=2"]) == [NAMES["ssgd"], NAMES["local_sgd"],
                                                                        NAMES["cocod_sgd"]]


def test_step_arithmetic_hidden_fraction_and_the_sweep_table(tmp_path) -> None:
    assert exp.arithmetic_step(True, 0.01, 0.02) == 0.02 and exp.arithmetic_step(False, 0.01, 0.02) == 0.03
    base = result(tmp_path, "base", step_s=0.010)
    onnet = result(tmp_path, "onnet", step_s=0.012, modeled_s=0.008)
    assert exp.modeled_comm_per_step(onnet) == pytest.approx(0.008)        # rank 0's collectives only
    assert exp.hidden_fraction(onnet, base) == pytest.approx(0.75)
    assert math.isnan(exp.hidden_fraction(base, base))
    sweep = {"r=2": {NAMES["ssgd"]: result(tmp_path, "s", step_s=0.03, modeled_s=0.02),
                     NAMES["cocod_sgd"]: onnet}}
    t = exp.sweep_table(sweep, {"r=2": "x"}, 0.01, 4)
    assert list(t["arithmetic (ms/step)"]) == pytest.approx([30.0, 10.0])
    assert list(t["measured / arithmetic"]) == pytest.approx([1.0, 1.2])
    assert t["blocked on communication (s/rank)"].iloc[0] == 0.25 and t.network.iloc[0] == "r=2 (x)"


def test_time_to_target_and_the_ratio_table(tmp_path) -> None:
    loss = [1.0, 0.6, 0.4, 0.3, 0.3]
    runs = {NAMES["ssgd"]: result(tmp_path, "s", step_s=0.04, modeled_s=0.03, loss=loss),
            NAMES["local_sgd"]: result(tmp_path, "l", step_s=0.02, modeled_s=0.005, loss=loss),
            NAMES["cocod_sgd"]: result(tmp_path, "c", step_s=0.01, modeled_s=0.005, loss=[1.0, 0.5, 0.2, 0.1, 0.1])}
    target, reach, ttt = exp.time_to_target(runs)
    assert target == 0.3 and reach[NAMES["ssgd"]] == {"step": 6, "wall_s": pytest.approx(0.24)}
    assert reach[NAMES["cocod_sgd"]]["step"] == 4 and list(ttt["steps to target"]) == [6, 6, 4]
    ratios = exp.ratio_table(runs, reach, 0.01, 4).set_index("time to target")
    row = ratios.loc[f"{NAMES['ssgd']} / {NAMES['cocod_sgd']}"]
    assert row["measured (median over logged periods)"] == pytest.approx(6 * 0.04 / (4 * 0.01))
    assert row["arithmetic, nothing hidden"] == pytest.approx(6 * 0.04 / (4 * 0.015))
    assert row["arithmetic, average hidden"] == pytest.approx(6 * 0.04 / (4 * 0.01))
    assert list(ratios.index) == [f"{NAMES['local_sgd']} / {NAMES['cocod_sgd']}",
                                  f"{NAMES['ssgd']} / {NAMES['local_sgd']}", f"{NAMES['ssgd']} / {NAMES['cocod_sgd']}"]


def test_per_iteration_pairs_reuse_the_first_run(tmp_path, monkeypatch) -> None:
    rec = Recorder(lambda kw: result(tmp_path, kw["name"], loss=[1, 0.5] if kw["algo"] == "cocod_sgd" else [1, 0.25],
                                     steps=2))
    monkeypatch.setattr(exp, "run", rec)
    first = result(tmp_path, "first", loss=[1, 0.5], steps=2)
    out = exp.per_iteration_pairs("mlp", 2, {"seed": 3, "model": "x"}, 4, first=first)
    assert [k["name"] for k in rec.calls] == ["local_sgd_k4_nonet_s3", "cocod_k4_nonet_s4", "local_sgd_k4_nonet_s4"]
    assert all(k["model"] == "mlp" and k["net"] == "" for k in rec.calls) and list(out["loss ratio"]) == [2.0, 2.0]
    rec.calls.clear()
    exp.per_iteration_pairs("vgg16", 1, {"seed": 3}, 4, tag="_vgg16")
    assert [k["name"] for k in rec.calls] == ["cocod_k4_nonet_vgg16_s3", "local_sgd_k4_nonet_vgg16_s3"]


def test_timing_network_and_the_pairs_alternate(tmp_path, monkeypatch) -> None:
    rec = Recorder(lambda kw: result(tmp_path, kw["name"], step_s=0.012 if kw["net"] else 0.01,
                                     modeled_s=0.008 if kw["net"] else 0.0))
    monkeypatch.setattr(exp, "run", rec)
    timing, net = exp.timing_network({"nproc": 4, "steps": 240, "log_every": 4}, 2, 640, 24, 4, 1000, 2.0, "100us")
    assert timing == {"nproc": 2, "steps": 24, "log_every": 4, "batch_size": 640, "eval_every": 24}
    assert rec.calls[0]["name"] == "cocod_k4_nonet_timing" and net == exp.net_for(2.0, 0.01, 1000, 2, "100us")
    pairs = exp.hidden_pairs("local_sgd", "control", 3, timing, net, 4)
    assert [k["name"] for k in rec.calls[1:]] == ["local_sgd_k4_nonet_pair0", "local_sgd_k4_pair0",
                                                  "local_sgd_k4_pair1", "local_sgd_k4_nonet_pair1",
                                                  "local_sgd_k4_nonet_pair2", "local_sgd_k4_pair2"]
    assert list(pairs.hidden) == pytest.approx([0.75] * 3) and set(pairs.method) == {"control"}
    claims = registered()
    assert exp.precheck_control(claims, pairs, oversubscribed=False) == pytest.approx(0.75)
    assert "shows 75% hidden" in claims._get("hidden_communication").precheck
    quiet = registered()
    exp.precheck_control(quiet, pairs.assign(hidden=0.1), oversubscribed=False)
    assert not quiet._get("hidden_communication").precheck
    fig = exp.plot_hidden_pairs(pairs.assign(method="CoCoD-SGD"), pairs, 2, net, tmp_path / "h.png")
    assert (tmp_path / "h.png").exists() and fig is not None


def test_heterogeneous_runs_and_their_invariant(tmp_path, monkeypatch) -> None:
    rec = Recorder(lambda kw: result(tmp_path, kw["name"], train_s=2.0 if "batch_weights" in kw["params"] else 3.0))
    monkeypatch.setattr(exp, "run", rec)
    hetero = exp.heterogeneous_runs({"seed": 0}, 4, [1.0, 0.5], 0.5, "slow")
    assert rec.calls[1]["params"] == {"period": 4, "speeds": [1.0, 0.5], "sample_ms": 0.5, "batch_weights": [1.0, 0.5]}
    claims = registered()
    table = exp.check_heterogeneous(claims, hetero, 32, 0.5, [1.0, 0.5], dry_run=False)
    assert list(table["train time (s)"]) == [3.0, 2.0] and claims.invariants[-1]["holds"]
    assert "sleeps 21.5, 21.0 ms/step" in claims.invariants[-1]["measured"]
    slower = {k: hetero[k] for k in reversed(list(hetero))}               # proportional batches slower
    exp.check_heterogeneous(claims, dict(zip(hetero, slower.values())), 32, 0.5, [1.0, 0.5], dry_run=False)
    assert not claims.invariants[-1]["holds"]


def test_projection_table_and_its_decisions(tmp_path) -> None:
    p = {}
    claims = registered(projected=p)
    profiles, bands = p["profiles"], p["bands"]
    reach = {NAMES[a]: {"step": 100.0, "wall_s": 1.0} for a in ("ssgd", "local_sgd", "cocod_sgd")}
    proj = exp.projection_table(profiles, 4, reach, tmp_path)
    assert (tmp_path / "projection.csv").exists() and (tmp_path / "projection_profile_vgg16.txt").exists()
    assert len(proj) == 6 and (proj["steps to target (this notebook)"] == 100).all()
    assert np.allclose(proj["projected time to target (s)"], 100 * proj.step_s)
    assert set(exp.PROJ_COLUMNS) <= set(proj.columns)
    exp.plot_projection(proj, "mlp on digits", tmp_path / "p.png")
    assert (tmp_path / "p.png").exists()
    exp.decide_projection(claims, proj, profiles, bands, reach, 0.25, 4, "mlp on digits", OWN_SETTING)
    t = claims.table().set_index("id")
    r = proj[proj.model == "resnet18"].set_index("label").step_s
    assert t.loc["proj_time_to_target_vs_ssgd", "estimate"] == pytest.approx(r[NAMES["ssgd"]] / r[NAMES["cocod_sgd"]])
    assert "steps to loss 0.250 (mlp on digits): 100 vs 100" in t.loc["proj_time_to_target_vs_ssgd", "measured"]
    assert len(claims.invariants) == 2 and all(i["holds"] for i in claims.invariants)


def test_decide_per_iteration_and_hidden() -> None:
    claims = registered(extra=["vgg16"])
    per_seed = pd.DataFrame({"CoCoD-SGD final train loss": [0.2, 0.3, 0.4], "local SGD final train loss": [0.1, 0.3, 0.4],
                             "CoCoD-SGD test acc": [0.9] * 3, "local SGD test acc": [0.8] * 3})
    per_seed["loss ratio"] = per_seed["CoCoD-SGD final train loss"] / per_seed["local SGD final train loss"]
    exp.decide_per_iteration(claims, "per_iteration_like_local", per_seed)
    exp.decide_per_iteration(claims, "per_iteration_like_local_vgg16", per_seed, model="vgg16")
    t = claims.table().set_index("id")
    assert t.loc["per_iteration_like_local", "estimate"] == pytest.approx(2 ** (1 / 3))
    sd = np.std(np.log([0.1, 0.3, 0.4]), ddof=1)                 # local SGD's: the margin a pilot gives
    spread = f"; local SGD's seed SD of log final training loss {sd:.3g} (exp {np.exp(sd):.4f})"
    assert t.loc["per_iteration_like_local", "measured"] == ("loss ratio per seed 2.00, 1.00, 1.00; test acc CoCoD-SGD "
                                                             "0.9000 vs local SGD 0.8000 (mean of 3 seeds)" + spread)
    assert t.loc["per_iteration_like_local_vgg16", "measured"] == "vgg16: loss ratio per seed 2.00, 1.00, 1.00" + spread
    pairs = pd.DataFrame({"hidden": [0.9, 0.95, 0.85, 0.92, 0.91, 0.93, 0.94, 0.9, 0.96],
                          "modeled communication (ms/step)": [2.0] * 9})
    assert exp.decide_hidden(claims, pairs, 0.1, 2) == "reproduced"
    assert t.shape and claims.table().set_index("id").loc["hidden_communication", "measured"].endswith(
        "control (local SGD, run first) median 10%")


def on_hosts(r: Result, hosts: list[str]) -> Result:
    """`r` with rank i's pid file naming host hosts[i]."""
    (r.path / "ranks").mkdir(exist_ok=True)
    for rank, host in enumerate(hosts):
        (r.path / "ranks" / f"pid_rank{rank}").write_text(f"{host} {100 + rank}\n")
    return r


@pytest.mark.parametrize("hosts, measured", [(["node1", "node2", "node3"], True), (["node1"] * 3, False)])
def test_the_rehearsals_three_nodes_decide_the_headline_by_measurement(tmp_path, hosts, measured) -> None:
    """Under the rehearsal profile (its `paper_setting`: three nodes stand for the paper's setting,
    the mlp for both models) the paper-scale claims are registered with both ways, prechecked on no
    allocation of three nodes, and decided by the runs on the real network where their ranks ran on
    three hosts: 01's headline then reads as measured at the paper's setting. On one host they stay
    projected (and, no band covering them, not covered)."""
    import yaml

    value = yaml.safe_load((ROOT / "reproduce" / "profiles" / "rehearsal.yaml").read_text())["notebooks"]["01_cocod_sgd"]["paper_setting"]
    setting = exp.paper_setting(value, "mlp")
    assert (setting.nproc, setting.nodes, setting.models) == (3, 3, tuple(exp.PROJ_MODELS))
    claims = Claims("01_cocod_sgd")
    exp.register_claims(claims, 4, 3, [], 9)
    profiles, bands = exp.register_projection(claims, 4, setting, Allocation.parse("3x0"))
    claims.preregister(dry_run=True)
    assert "measured at the paper's setting instead where" in claims._get("proj_time_to_target_vs_ssgd").test.statistic
    assert not any(claims._get(c).precheck for c in bands)
    real = {NAMES[a]: on_hosts(result(tmp_path, a, step_s=s, nproc=3), hosts)
            for a, s in (("ssgd", 0.03), ("local_sgd", 0.02), ("cocod_sgd", 0.01))}
    reach = {n: {"step": 8.0, "wall_s": 1.0} for n in real}
    proj = exp.projection_table(profiles, 4, reach, tmp_path)
    exp.decide_projection(claims, proj, profiles, bands, reach, 0.25, 4, "mlp on digits", setting, real)
    t = claims.table().set_index("id")
    row = headline_table(claims.table().assign(notebook="01_cocod_sgd")).iloc[0]
    if measured:
        assert t.loc["proj_time_to_target_vs_ssgd", "estimate"] == pytest.approx(3.0)
        assert t.loc["proj_time_to_target_vs_ssgd_vgg16", "verdict"] == "reproduced"
        assert t.loc["proj_time_to_target_vs_ssgd", "measured"].startswith("measured at the paper's setting (3 runs of 3 workers on 3 nodes")
        assert row.how.startswith(AT_PAPER_SETTING) and row.verdict == "reproduced"
    else:
        assert t.loc[list(bands), "verdict"].eq("inconclusive").all()
        assert "did not span the paper's setting" in t.loc["proj_time_to_target_vs_ssgd", "reason"]
        assert row.how.startswith(HOWS["projected"])
    assert exp.runs_at_setting(setting, {"nproc": 3}, 4, Allocation.parse("1x0")) is None

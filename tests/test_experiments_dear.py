"""distsgd.experiments.dear: notebook 06's registration, cases, ratios, invariants and projection."""
from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import torch

from distsgd.verdicts import registration
from distsgd.verdicts.claims import Claims
from distsgd.experiments import dear

REGISTERED = Path(__file__).resolve().parent.parent / "reproduce" / "registered" / "quick"


@pytest.fixture(scope="module")
def registered() -> tuple[Claims, dict, dict]:
    claims = Claims("06_dear")
    profiles, bands = dear.register_claims(claims)
    claims.preregister(dry_run=True)
    return claims, profiles, bands


def test_the_registration_is_the_committed_one(registered, notebook_defaults) -> None:
    claims, profiles, bands = registered
    p = notebook_defaults("06_dear")
    design = dear.design(p["nproc"], p["steps"], p["model"], p["data"], p["bench_model"], p["bench_nprocs"],
                         p["bench_batch_size"], p["bench_nets"], p["bench_steps"], p["bench_warmup"], p["repeats"],
                         p["threshold_mb"], {k: p[k] for k in ("tune_min_mb", "tune_max_mb", "tune_trials", "tune_window")},
                         p["backend"])
    committed = json.loads((REGISTERED / "06_dear.json").read_text())
    assert registration.differences(claims.registered_tests(), design, committed) == []
    tests = committed["tests"]
    assert tests["proj_dear_vs_ddp_10gbe_resnet50"]["form"] == "up-to" and "83%" in tests["proj_dear_vs_ddp_10gbe_resnet50"]["source"]
    assert tests["proj_dear_vs_ddp_10gbe_resnet50"]["threshold"] == 1.83
    assert {tests[i]["form"] for i in tests if "shrinks" in i} == {"superiority"}
    assert {tests[i]["source"][:5] for i in tests if "shrinks" in i or "tuned" in i} == {"null:"}
    assert all(c.precheck.startswith("not covered") for i, c in claims.claims.items() if i.startswith("proj_"))
    assert sorted(profiles) == ["bert_base", "resnet50"]
    assert sorted(bands) == sorted(i for i in claims.registered_tests() if i.startswith("proj_"))
    assert len(claims.registered_tests()) == 3 + 2 * 4


def test_bench_cases_label_every_schedule_and_add_the_tuning_steps_to_the_warmup() -> None:
    cases = dear.bench_cases(0.5, 0.1, 4.0, 4, 2)
    labels = [c["label"] for c in cases]
    assert labels == ["DDP", "S-SGD (fusion)", "WFBP (no fusion)", "DeAR", "DeAR w/o TF", "DeAR 25 MB", "DeAR tuned"]
    assert cases[0]["params"] == {"bucket_mb": 0.5} and cases[-1]["warmup"] == 10
    assert cases[-1]["params"]["tune_min_mb"] == 0.1 and cases[-1]["params"]["tune_window"] == 2


def test_round_ratios_pair_the_cases_of_each_round() -> None:
    rows = []
    for rep in range(2):
        for net, ddp in [("10GbE-like", 3.0), ("IB-like", 1.0)]:
            for label, t in [("DDP", ddp * (1 + rep)), ("DeAR", 2.0), ("DeAR 25 MB", 4.0), ("DeAR tuned", 2.0 + rep)]:
                rows.append({"repeat": rep, "net_name": net, "label": label, "step_s": t, "nproc": 2})
    rows.append({"repeat": 0, "net_name": "10GbE-like", "label": "DDP", "step_s": 99.0, "nproc": 4})   # another p
    ratios, gain = dear.round_ratios(pd.DataFrame(rows), 2)
    assert list(ratios["dear_vs_ddp_10gbe"]) == [1.5, 3.0]
    assert list(ratios["dear_gain_shrinks_ib"]) == [0.5 / 1.5, 1.0 / 3.0]
    assert list(ratios["dear_tuned_vs_default"]) == [2.0, 4.0 / 3.0]
    assert list(gain["IB-like"]) == [0.5, 1.0]


def test_check_invariants_sees_a_different_trajectory_and_extra_bytes() -> None:
    def run(w: float, loss: list[float], nbytes: int) -> SimpleNamespace:
        return SimpleNamespace(state_dict=lambda: {"w": torch.tensor([w, 1.0])},
                               metrics=pd.DataFrame({"train_loss": loss}), summary={"comm_bytes": nbytes})

    a = run(0.5, [2.0, 1.0], 1000)
    assert dear.trajectory_gaps(a, run(0.5 + 1e-3, [2.0, 1.5], 1100)) == pytest.approx((1e-3, 0.5, 1.1), rel=1e-4)
    claims = Claims("06_dear")
    assert dear.check_invariants(claims, a, run(0.5, [2.0, 1.0], 1000))
    assert not dear.check_invariants(claims, a, run(0.5, [2.0, 1.0], 1100))
    assert not dear.check_invariants(claims, a, run(0.5 + 1e-4, [2.0, 1.0], 1000))
    assert [i["holds"] for i in claims.invariants] == [True, True, True, False, False, True]


def test_machine_checks_mark_the_claims_a_failed_check_concerns(monkeypatch, tmp_path) -> None:
    pre = pd.DataFrame({"grad_bytes": [4_000_000]})
    headroom = pd.DataFrame({"net_name": ["10GbE-like", "IB-like"], "model": "transformer", "real_s": [0.001, 0.004],
                             "modeled_s": [0.01, 0.001], "emulable": [True, False]})
    monkeypatch.setattr(dear, "machine_precheck", lambda *a, **kw: (pre, 0.01, headroom))
    seen = []

    def times(p, sizes, reps, backend):
        seen.append(sizes)
        return pd.DataFrame({"nbytes": [s for s in sizes for _ in range(3)], "kind": ["all_reduce", "reduce_scatter",
                             "all_gather"] * 2, "measured_s": [1.0, 1.0, 1.0, 2.0, 0.5, 0.5]})

    monkeypatch.setattr(dear.bs, "real_collective_times", times)
    claims = Claims("06_dear")
    dear.register_claims(claims)
    assert dear.machine_checks(claims, "transformer", 2, 16, 6, 2, 0.5, 0.1, 1.2, "gloo", True, tmp_path) == 2.0
    assert seen == [[500_000, 4_000_000]]
    why = {cid: c.precheck for cid, c in claims.claims.items()}
    assert "reduce-scatter + all-gather take 2.0x" in why["dear_vs_ddp_10gbe"]
    assert "IB-like not emulable" in why["dear_gain_shrinks_ib"]
    assert why["dear_tuned_vs_default"] is None                # the decoupling does not concern it


@pytest.mark.shared_projections
def test_the_projection_decides_every_projected_claim_on_its_table(registered, tmp_path, monkeypatch) -> None:
    # the claims are decided at 64 workers; the others only draw the notebook's figure
    monkeypatch.setattr(dear, "PROJ_NPROCS", [dear.PROJ_P])
    claims, profiles, bands = registered
    proj, trials, table = dear.decide_projection(claims, profiles, bands, tmp_path)
    decided = claims.table().set_index("id")
    for m in profiles:
        at = proj[(proj.model == m) & (proj.nproc == dear.PROJ_P)].set_index(["net", "label"]).step_s
        assert decided.loc[f"proj_dear_vs_ddp_10gbe_{m}", "estimate"] == pytest.approx(
            at["10GbE", "DDP"] / at["10GbE", "DeAR"])
        assert decided.loc[f"proj_dear_gain_shrinks_ib_{m}", "estimate"] == pytest.approx(
            at["IB-EDR", "DDP"] / at["IB-EDR", "DeAR"] / (at["10GbE", "DDP"] / at["10GbE", "DeAR"]))
        assert table.loc[(m, "IB-EDR"), "DDP / DeAR"] == pytest.approx(at["IB-EDR", "DDP"] / at["IB-EDR", "DeAR"])
    assert sorted(proj.nproc.unique()) == [dear.PROJ_P] and len(trials) == 10
    assert (tmp_path / "projection.csv").is_file() and (tmp_path / "projection_tuning.csv").is_file()
    sens = dear.threshold_sensitivity(profiles, tmp_path)
    assert list(sens.index) == [f"DeAR {t:g} MB" for t in dear.SENSITIVITY_MB] + ["DDP"]
    assert sens.loc["DeAR 25 MB"].tolist() == pytest.approx(sens.loc["DDP"].mul(0).add(
        [proj[(proj.model == m) & (proj.net == n) & (proj.nproc == 64) & (proj.label == "DeAR")].step_s.iloc[0]
         for m, n in sens.columns]).tolist())
    assert sorted(p.name for p in dear.write_traces(tmp_path, profiles)) == [
        f"trace_{m}_{a}_p64_10GbE.json" for m in ("bert_base", "resnet50") for a in ("ddp", "dear")]


@pytest.mark.shared_projections
@pytest.mark.parametrize("nodes", [1, 2])
def test_a_stand_in_setting_decides_dear_vs_ddp_from_the_runs_on_the_real_network(tmp_path, monkeypatch, nodes) -> None:
    """A stand-in setting of 2 workers on one node, mlp standing for ResNet-50: DDP and DeAR train
    on the real network (2 CPU ranks on this host), and ResNet-50's DDP / DeAR claim is decided by
    their per-period step times, with the test it was registered with; BERT's, and the gain's
    shrinking on IB (two networks), stay projected, and the headline names the part measured. At 2
    nodes on an allocation of one nothing runs and every claim stays projected."""
    from distsgd.training.allocation import Allocation
    from distsgd.verdicts.headlines import AT_PAPER_SETTING, HOWS, headline_table
    from distsgd.verdicts.setting import AT_SETTING

    monkeypatch.setattr(dear, "PROJ_NPROCS", [dear.PROJ_P])
    one_node = Allocation.parse("1x0")
    setting = dear.paper_setting({"nproc": 2, "nodes": nodes, "models": ["resnet50"]}, "mlp")
    claims = Claims("06_dear")
    profiles, bands = dear.register_claims(claims, setting, one_node)
    claims.preregister(dry_run=True)
    stat = claims.registered_tests()["proj_dear_vs_ddp_10gbe_resnet50"]["statistic"]
    assert "measured at the paper's setting instead" in stat and "standing for the paper's 10GbE" in stat
    assert "instead" not in claims.registered_tests()["proj_dear_vs_ddp_10gbe_bert_base"]["statistic"]
    assert (claims.claims["proj_dear_vs_ddp_10gbe_resnet50"].precheck is None) == (nodes == 1)
    common = dict(model="mlp", data="digits", nproc=2, steps=8, batch_size=16, lr=0.1, backend="gloo", log_every=1,
                  eval_every=8)
    real = dear.runs_at_setting(setting, common, one_node)
    assert (real is None) == (nodes == 2)
    dear.decide_projection(claims, profiles, bands, tmp_path, setting, real)
    t = claims.table().set_index("id")
    how = headline_table(claims.table().assign(notebook="06_dear")).iloc[0].how
    if nodes == 1:
        assert set(real) == {"DDP", "DeAR"} and [r.config.net for r in real.values()] == ["", ""]
        assert t.loc["proj_dear_vs_ddp_10gbe_resnet50", "measured"].startswith(AT_SETTING)
        assert t.loc["proj_dear_vs_ddp_10gbe_resnet50", "estimate"] == pytest.approx(
            (real["DDP"].step_seconds() / real["DeAR"].step_seconds()).median())
        assert how.startswith(HOWS["projected"]) and f"{AT_PAPER_SETTING}: proj_dear_vs_ddp_10gbe_resnet50)" in how
    else:
        assert not t.loc[list(bands), "measured"].str.startswith(AT_SETTING).any()
        assert "not covered" in t.loc["proj_dear_vs_ddp_10gbe_resnet50", "reason"]   # prechecked: no 2 nodes to span
        assert how.startswith(HOWS["projected"]) and AT_PAPER_SETTING not in how
    for cid in ("proj_dear_vs_ddp_10gbe_bert_base", "proj_dear_gain_shrinks_ib_resnet50"):
        assert not t.loc[cid, "measured"].startswith(AT_SETTING)


def test_the_setting_names_one_of_the_papers_networks() -> None:
    from distsgd.errors import ConfigError

    assert dear.paper_setting({}, "resnet50").describe() == (
        "64 workers on 16 nodes over the real network between them, standing for the paper's 10GbE")
    assert dear.paper_setting({"net": "IB-EDR"}, "resnet50").covers("resnet50", "10GbE") is False
    with pytest.raises(ConfigError, match="paper_setting.net"):
        dear.paper_setting({"net": "100GbE"}, "resnet50")

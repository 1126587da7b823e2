"""distsgd.experiments.survey_systems: notebook 07's roles, registration, checks, ratios and projection."""
from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from distsgd.errors import ConfigError
from distsgd.verdicts import registration
from distsgd.verdicts.claims import Claims
from distsgd.experiments import survey_systems as survey

REGISTERED = Path(__file__).resolve().parent.parent / "reproduce" / "registered" / "quick"


def test_bench_networks_check_the_parameters() -> None:
    nets = survey.bench_networks(["mlp", "transformer"], "transformer", ["10GbE-like", "real"], "gloo")
    assert nets == {"10GbE-like": survey.bs.NETWORKS["10GbE-like"], "real": None}
    for bad in [(["mlp"], "mlp", ["10GbE-like"], "gloo"), (["mlp", "transformer"], "mlp", ["IB-like"], "gloo"),
                (["mlp", "transformer"], "mlp", ["10GbE-like"], "mpi"), (["mlp", "nope"], "mlp", ["10GbE-like"], "gloo")]:
        with pytest.raises(ValueError):
            survey.bench_networks(*bad)


def test_roles_by_the_gradient_tensors_and_the_committed_registration(notebook_defaults) -> None:
    stats, small, large = survey.model_roles(["mlp", "transformer"])
    assert (small, large) == ("transformer", "mlp")          # the quick profile's roles (the notebook's text)
    assert survey.roles(pd.DataFrame({"mean_tensor_mb": [1.0, 2.0], "largest_tensor_mb": [1.0, 9.0]},
                                     index=["a", "b"])) == ("a", "b")
    claims = Claims("07_survey_systems")
    p = notebook_defaults("07_survey_systems")
    setting = survey.paper_setting(p["paper_setting"], p["models"])     # the survey's own: no quick model is its
    assert setting.models == () and survey.covered(setting, p["models"], small, large) == []
    bands = survey.register_claims(claims, small, large, setting, p["models"])
    design = survey.design(p["models"], p["nprocs"], p["net_reference"], p["batch_size"], p["bench_steps"],
                           p["bench_warmup"], p["repeats"], p["networks"], p["backend"], p["paper_setting"])
    committed = json.loads((REGISTERED / "07_survey_systems.json").read_text())
    assert registration.differences(claims.registered_tests(), design, committed) == []
    assert len(bands) == 9 and all(i.startswith("proj_") for i in bands)
    assert all(t["form"] == "superiority" and t["source"].startswith("null:") for t in committed["tests"].values())


def test_the_setting_covers_the_claims_about_the_survey_models_it_names() -> None:
    full = survey.paper_setting({}, ["resnet50", "bert_base"])          # the full profile's benchmark models
    assert (full.nproc, full.nodes, full.net) == (32, 8, "10GbE")
    assert survey.covered(full, ["resnet50", "bert_base"], "resnet50", "bert_base") == [
        "proj_fusion_beats_wfbp_10gbe", "proj_ps_partition_helps_10gbe", "proj_ranking_follows_intensity_10gbe"]
    assert survey.covered(full, ["resnet50", "mlp"], "resnet50", "mlp") == ["proj_fusion_beats_wfbp_10gbe"]
    ib = survey.paper_setting({"net": "IB-EDR"}, ["resnet50", "bert_base"])
    assert survey.covered(ib, ["resnet50", "bert_base"], "resnet50", "bert_base")[0] == "proj_fusion_beats_wfbp_ib_edr"
    with pytest.raises(ConfigError, match="paper_setting.net"):
        survey.paper_setting({"net": "10GbE-like"}, ["mlp"])


def _setting_bench(hosts: str, net: str = "") -> pd.DataFrame:
    """Six rounds of the benchmark at a stand-in setting (3 workers), on the real network."""
    bench = _bench()
    rounds = pd.concat([bench[bench.nproc == 2].assign(repeat=bench.repeat + 2 * k) for k in range(3)], ignore_index=True)
    return rounds.assign(nproc=3, net_name="real", net=net, hosts=hosts, backend="gloo")


def test_the_headline_is_measured_where_the_benchmark_spans_the_setting() -> None:
    from distsgd.training.allocation import Allocation
    from distsgd.verdicts.headlines import AT_PAPER_SETTING, load_headlines

    models = ["mlp", "transformer", "resnet18"]
    setting = survey.paper_setting({"nproc": 3, "nodes": 3, "models": models}, models)
    three = Allocation(("node1", "node2", "node3"), 0, "SLURM job 7")
    ids = survey.covered(setting, models, "transformer", "mlp")
    assert ids == ["proj_fusion_beats_wfbp_10gbe", "proj_ps_partition_helps_10gbe", "proj_ranking_follows_intensity_10gbe"]
    claims = Claims("07_survey_systems")
    survey.register_claims(claims, "transformer", "mlp", setting, models, three)
    claims.preregister(dry_run=True)
    assert all(claims.claims[i].precheck is None and "instead where" in claims.claims[i].test.statistic for i in ids)
    by_i = ["mlp", "transformer", "resnet18"]
    # one host, or an emulated network: not the setting, so nothing is decided here
    assert survey.decide_at_setting(claims, setting, _setting_bench("node1"), ids, "transformer", "mlp", by_i) == []
    assert survey.decide_at_setting(claims, setting, _setting_bench("node1 node2 node3", "1Gbit,50us"), ids,
                                    "transformer", "mlp", by_i) == []
    assert survey.decide_at_setting(claims, setting, None, ids, "transformer", "mlp", by_i) == []
    assert survey.decide_at_setting(claims, setting, _setting_bench("node1 node2 node3"), ids, "transformer", "mlp",
                                    by_i) == ids
    table = claims.table().set_index("id")
    assert table.loc["proj_fusion_beats_wfbp_10gbe", "estimate"] == pytest.approx(1.5)
    assert table.loc["proj_fusion_beats_wfbp_10gbe", "verdict"] == "reproduced"     # 1.5 in all six rounds
    assert table.loc["proj_ps_partition_helps_10gbe", "measured"].endswith("6 rounds")
    assert load_headlines()["07_survey_systems"].resolved_how(table.reset_index()) == AT_PAPER_SETTING


def test_a_setting_out_of_reach_runs_nothing(monkeypatch, tmp_path) -> None:
    from distsgd.training.allocation import Allocation

    monkeypatch.setattr(survey.bs, "bench_schedules", lambda **kw: pytest.fail("ran"))
    setting = survey.paper_setting({}, ["resnet50", "bert_base"])
    one_node = Allocation(("gpu01",), 8, "this host")
    ids = survey.covered(setting, ["resnet50", "bert_base"], "resnet50", "bert_base")
    assert survey.bench_at_setting(setting, ids, ["resnet50", "bert_base"], [], tmp_path / "b.csv", one_node) is None
    assert survey.bench_at_setting(setting, [], ["mlp", "transformer"], [], tmp_path / "b.csv") is None


def _bench() -> pd.DataFrame:
    """Two rounds, three models on 10GbE-like at p = 2 (and a row at p = 4 that must not count)."""
    steps = {"mlp": {"no overlap": 4.0, "WFBP": 2.0, "tensor fusion": 2.5, "MG-WFBP": 3.0, "ByteScheduler": 3.0,
                     "PS": 6.0, "PS + partition": 3.0},
             "transformer": {"no overlap": 8.0, "WFBP": 6.0, "tensor fusion": 4.0, "MG-WFBP": 5.0,
                             "ByteScheduler": 7.0, "PS": 9.0, "PS + partition": 9.0},
             "resnet18": {"no overlap": 4.0, "WFBP": 4.0, "tensor fusion": 4.0, "MG-WFBP": 4.0,
                          "ByteScheduler": 4.0, "PS": 4.0, "PS + partition": 4.0}}
    compute = {"mlp": 1.0, "transformer": 2.0, "resnet18": 3.0}
    rows = [{"repeat": r, "model": m, "label": lab, "step_s": t * (1 + r), "nproc": 2, "net_name": "10GbE-like",
             "compute_s": compute[m]} for r in range(2) for m, per in steps.items() for lab, t in per.items()]
    return pd.DataFrame(rows + [{**rows[0], "nproc": 4, "step_s": 100.0}])


def test_round_ratios_of_the_three_claims() -> None:
    ratios = survey.round_ratios(_bench(), 2, "transformer", "mlp", ["mlp", "transformer", "resnet18"])
    assert list(ratios["fusion_beats_wfbp"][0]) == [1.5, 1.5] and ratios["fusion_beats_wfbp"][1] == "transformer WFBP / fusion"
    assert list(ratios["ps_partition_helps"][0]) == [2.0, 2.0]
    # best efficiency per round: mlp 1/2, 1/4; transformer 2/4, 2/8; resnet18 3/4, 3/8: neighbour ratios 1 and 1.5
    assert list(ratios["ranking_follows_intensity"][0]) == [1.0, 1.0]
    assert ratios["ranking_follows_intensity"][1] == ("by I: mlp < transformer < resnet18; best efficiency (median) "
                                                      "mlp 0.38, transformer 0.38, resnet18 0.56")


def test_machine_checks_order_by_intensity_and_mark_the_claims(monkeypatch, tmp_path) -> None:
    pre = pd.DataFrame({"model": ["mlp", "transformer"], "net_name": "none", "step_s": [0.004, 0.003],
                        "grad_bytes": [1_000_000, 3_000_000]})
    headroom = pd.DataFrame({"model": ["mlp", "transformer"], "nproc": 2, "net_name": "10GbE-like",
                             "real_s": [0.001, 0.009], "modeled_s": [0.01, 0.004], "emulable": [True, False]})
    seen = {}
    monkeypatch.setattr(survey, "machine_precheck", lambda *a, **kw: seen.update(kw) or (pre, 0.01, headroom))
    claims = Claims("07_survey_systems")
    survey.register_claims(claims, "transformer", "mlp")
    head, by_i = survey.machine_checks(claims, ["mlp", "transformer"], 2, "transformer", "mlp", 0.1, "gloo", True,
                                       tmp_path, batch_size=16)
    assert by_i == ["transformer", "mlp"] and list(seen["networks"]) == ["10GbE-like"] and seen["batch_size"] == 16
    assert head.loc[("mlp", "10GbE-like"), "emulable"]
    why = {cid: c.precheck for cid, c in claims.claims.items()}
    assert "transformer" in why["fusion_beats_wfbp"] and why["ps_partition_helps"] is None
    assert why["ranking_follows_intensity"] is not None


def test_simulator_check_marks_what_the_precheck_found_emulable(monkeypatch, tmp_path) -> None:
    seen = {}

    def predict(bench, models, cases, nprocs, backend, warmup, steps, sizes, reps, out):
        seen.update(sizes=sizes, reps=reps, nprocs=nprocs)
        return pd.DataFrame({"model": ["mlp", "transformer", "mlp"], "net_name": ["10GbE-like", "10GbE-like", "real"],
                             "label": "WFBP", "nproc": 2, "net": "", "measured_s": 1.0, "predicted_s": 1.1,
                             "residual": 0.1})

    monkeypatch.setattr(survey, "simulator_predictions", predict)
    headroom = pd.DataFrame({"emulable": [True, False]},
                            index=pd.MultiIndex.from_tuples([("mlp", "10GbE-like"), ("transformer", "10GbE-like")]))
    bench = pd.DataFrame({"grad_bytes": [100_000, 300_000], "nproc": [2, 2]})
    val = survey.simulator_check(bench, ["mlp"], [], headroom, "gloo", 1, 4, True, tmp_path)
    assert list(val.emulable) == [True, False, True] and (tmp_path / "validation.csv").is_file()
    assert seen == {"sizes": [65536, 262144, 300_000], "reps": 2, "nprocs": [2]}


@pytest.mark.shared_projections
def test_the_projection_decides_on_its_own_table(tmp_path, monkeypatch) -> None:
    # the claims and the published comparison are at 32 workers; the others only draw the notebook's figure
    monkeypatch.setattr(survey, "PROJ_NPROCS", [survey.PROJ_P])
    claims = Claims("07_survey_systems")
    bands = survey.register_claims(claims, "transformer", "mlp")
    claims.preregister(dry_run=True)
    profiles, stats, small, large, by_i = survey.projection_roles(tmp_path)
    assert sorted(profiles) == sorted(survey.PROJ_MODELS) and by_i == list(stats.intensity_ms_per_mb.sort_values().index)
    proj, eff = survey.decide_projection(claims, bands, profiles, small, large, by_i, tmp_path)
    at = proj[proj.nproc == 32].set_index(["fabric", "model", "label"]).step_s
    decided = claims.table().set_index("id")
    for f, net in zip(survey.PROJ_NETS, survey.FABRICS):
        assert decided.loc[f"proj_fusion_beats_wfbp_{f}", "estimate"] == pytest.approx(
            at[net, small, "WFBP"] / at[net, small, "tensor fusion"])
        assert decided.loc[f"proj_ps_partition_helps_{f}", "estimate"] == pytest.approx(
            at[net, large, "PS"] / at[net, large, "PS + partition"])
        best = eff.loc[net][survey.ALLREDUCE].max(axis=1)
        assert decided.loc[f"proj_ranking_follows_intensity_{f}", "estimate"] == pytest.approx(
            min(best[hi] / best[lo] for lo, hi in zip(by_i, by_i[1:])))
    check = survey.versus_published(proj, tmp_path)
    assert len(check) == 3 * 3 * 3 and (tmp_path / "projection_vs_published.csv").is_file()
    row = check[(check.fabric == "IB-EDR") & (check.model == "bert_base") & (check.method == "MG-WFBP")].iloc[0]
    assert row.published == 4940.08 and row.projected == proj[(proj.nproc == 32) & (proj.fabric == "IB-EDR") & (
        proj.model == "bert_base") & (proj.label == "MG-WFBP")].throughput.iloc[0]

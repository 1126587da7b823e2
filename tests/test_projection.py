"""distsgd.verdicts.projection: a projected ratio is decided within the simulator's error measured on real
clusters (the survey's table and the public tables) for the same runtime model on the same fabric (or is
inconclusive, not covered, where no measurement of that model exists, with the nearest one named); tables
from the simulator."""
from __future__ import annotations

import concurrent.futures
import dataclasses
import functools
import json
import multiprocessing
import os
import time
from pathlib import Path

import pandas as pd
import pytest

from distsgd.comm.netmodel import parse_net
from distsgd.verdicts import projection as pj
from distsgd.systems.timeline import error_band as eb, survey
from distsgd.systems.timeline.simulator import runtime_model
from distsgd.systems.timeline.sweep import sweep
from distsgd.systems.timeline.topology import Topology
from distsgd.verdicts.claims import Claims, Test
from distsgd.systems.layer_profile import Layer, Profile

NULL = "null: no difference"
WFBP_A2A, BSP_A2A = survey.runtime("WFBP-A2A"), survey.runtime("BSP-A2A")     # the survey's own runtime models


def tiny_profile() -> Profile:
    layers = [Layer(name=f"l{i}", forward_s=0.01, backward_s=0.02, update_s=0.0, tensors=[f"l{i}.weight"],
                    tensor_bytes=[4_000_000], tensor_numel=[1_000_000], forward_flops=0.0, backward_flops=0.0)
              for i in range(4)]
    return Profile(model="toy", batch_size=8, input_shape=(3, 32, 32), device="V100-fp32",
                   source="flops-scaled", machine="test", layers=layers)


def test_measured_error_is_the_extremes_of_the_committed_rows_of_that_runtime_model_and_fabric():
    from distsgd.paths import repo_root
    from distsgd.systems.timeline.survey import ERROR_CSV

    table = pd.read_csv(repo_root(Path(pj.__file__).parent) / ERROR_CSV)
    for method, methods, net, connection in [("WFBP-A2A", ["WFBP-A2A"], "10GbE", "10GbE with TCP/IP"),
                                             ("WFBP-PS", ["WFBP-PS", "ByteScheduler-PS"], "IB-EDR", "100GbIB with RDMA"),
                                             ("BSP-PS", ["BSP-PS"], "IB-EDR", "100GbIB with RDMA")]:
        rows = table[table.method.isin(methods) & (table.connection == connection)]
        band = eb.measured_error(survey.runtime(method), net)
        assert (band.low, band.high, band.rows) == (rows.error.min(), rows.error.max(), len(rows)) and len(rows) >= 12
        assert band.low < band.high and band.methods == tuple(methods)


def test_every_row_carries_the_runtime_model_its_prediction_reports() -> None:
    """The key stored with each row is the runtime model `simulate` reports for the survey's
    method (`Prediction.model`), computed without simulating (`survey.runtime`)."""
    table = survey.load_error()
    keyed = dict(zip(table.method, eb.measured_models(table)))
    assert keyed == {m: survey.runtime(m) for m in survey.SURVEY_METHODS}
    prof = tiny_profile()
    net = parse_net("10GbE")
    assert all(survey.predict(prof, m, 8, net, net).model == survey.runtime(m) for m in ("WFBP-A2A", "BSP-PS"))
    assert keyed["WFBP-PS"].runtime == "class PS on NCCL" and keyed["WFBP-A2A"].runtime == "class SSGD_wfbp on NCCL"
    assert json.loads(keyed["WFBP-PS"].params)["machine_size"] == 4          # BytePS's placement: a parameter
    assert keyed["BSP-A2A"].runtime == "class SSGD_no_overlap on NCCL" and keyed["WFBP-PS"] == keyed["ByteScheduler-PS"]


def test_a_band_of_one_runtime_model_never_decides_another_models_projection():
    """The survey's PS rows are the kit's `ps` on BytePS's placement (machines of 4, separate server
    machines: its parameters); `ps` with its servers on the ranks is another runtime model: its
    projection is not covered, and so is one with the survey's parameters but without the survey's
    effects (contention), or the kit's `wfbp` class without Horovod's cycle for Horovod's WFBP rows."""
    byteps = survey.runtime("WFBP-PS")
    kit_ps = pj.runtime({"algo": "ps"}, "10GbE", 4, "PCIe3")
    assert kit_ps.algo == byteps.algo == "ps" and kit_ps.runtime == byteps.runtime == "class PS on NCCL"
    assert kit_ps.params != byteps.params
    assert eb.measured_error(byteps, "10GbE").methods == ("WFBP-PS", "ByteScheduler-PS")
    byteps_no_contention = runtime_model("ps", survey.SURVEY_METHODS["WFBP-PS"].params,
                                         survey.topology(parse_net("PCIe3"), parse_net("10GbE")))
    assert byteps_no_contention.params == byteps.params and byteps_no_contention.contention == 0
    for other in (kit_ps, byteps_no_contention, pj.runtime({"algo": "wfbp"}, "10GbE", 4, "PCIe3"),
                  pj.runtime({"algo": "no_overlap", "params": survey.SURVEY_METHODS["BSP-A2A"].params}, "10GbE", 4, "PCIe3")):
        with pytest.raises(eb.Uncovered, match="the nearest measurement of .* is not this runtime model"):
            eb.measured_error(other, "10GbE")
    claims = Claims("t")
    assert pj.register(claims, "proj_ps", "claim", "paper", "PS / PS + partition", ">=", 1.0, "superiority", NULL,
                       [(kit_ps, "10GbE")], [(byteps, "10GbE")]) is None
    precheck = claims.claims["proj_ps"].precheck
    assert "not covered" in precheck and "params" in precheck and '"machine_size": 4' in precheck   # the field that differs


def test_a_band_measured_on_nodes_of_four_never_decides_a_flat_ring():
    """The topology's family (ranks per node) is part of the key: the survey's Horovod WFBP rows
    (4 GPUs per machine) cover that runtime model in nodes of 4, never on one rank per node, where
    GRACE's rows (one V100 per machine, Horovod's cycle, 10 Gb/s) cover it instead."""
    wfbp = survey.SURVEY_METHODS["WFBP-A2A"]
    net = parse_net("10GbE")
    nodes_of_4, flat = (runtime_model(wfbp.algo, wfbp.params, Topology(g, net, net, backend="nccl"), survey.SURVEY_EFFECTS)
                        for g in (4, 1))
    assert nodes_of_4 == WFBP_A2A and flat.topology == "1 rank per node" != WFBP_A2A.topology
    assert flat == dataclasses.replace(WFBP_A2A, topology="1 rank per node")
    assert eb.measured_error(nodes_of_4, "10GbE").rows == 12
    assert eb.measured_error(nodes_of_4, "10GbE").tables == ("survey",)
    assert eb.measured_error(flat, "10GbE").tables == ("grace",)
    with pytest.raises(eb.Uncovered, match=r"the survey's benchmark .*its topology 4 ranks per node \(this: 1 rank per node\)"):
        eb.measured_error(flat, "IB-EDR")


def test_notebook_07s_ps_claims_are_not_decided_by_bytepss_band():
    """07 projects the kit's own PS (every rank a server shard, 25 MB buckets), which the survey never
    measured: its `proj_ps_partition_helps_*` are prechecked not covered, not decided within the band
    of BytePS's model (as they were: "reproduced", 4.09x for BERT-Large on 10GbE, where BytePS's
    model gives 1.00x)."""
    from distsgd.experiments import survey_systems

    claims = Claims("07_survey_systems")
    bands = survey_systems.register_claims(claims, "transformer", "mlp")
    for f in survey_systems.PROJ_NETS:
        cid = f"proj_ps_partition_helps_{f}"
        assert bands[cid] is None, f"{cid} is decided within {bands[cid].describe()}"
        assert "not covered" in claims.claims[cid].precheck


@pytest.mark.parametrize("ratio, verdict", [(2.5, "reproduced"), (1.5, "inconclusive"), (1.1, "inconclusive"),
                                            (1.0, "contradicted")])
def test_a_ratio_is_decided_on_the_worst_case_of_its_terms_bands(ratio, verdict):
    """measured = predicted / (1 + e): numerator e in [-10%, +20%], denominator in [-30%, +5%]."""
    num = eb.ErrorBand((WFBP_A2A,), "10GbE", -0.1, 0.2, 12, ("WFBP-A2A",))
    den = eb.ErrorBand((BSP_A2A,), "10GbE", -0.3, 0.05, 12, ("BSP-A2A",))
    band = eb.RatioBand(((num, 1), (den, -1)))
    low, high = band.interval(ratio)
    assert low == pytest.approx(ratio / 1.2 * 0.7) and high == pytest.approx(ratio / 0.9 * 1.05)
    claims = Claims("t")
    claims.register("c", "claim", "paper", Test("ratio", ">=", 1.2, pj.BAND_STAT, form="up-to", source="paper: 1.2x"))
    claims.preregister(dry_run=True)
    assert pj.decide(claims, "c", ratio, "projection: toy", band) == verdict
    assert "wfbp by class SSGD_wfbp on NCCL over 10GbE: -10.0%..+20.0%" in claims.table().set_index("id").measured["c"]


def test_an_unmeasured_runtime_model_or_fabric_is_inconclusive_by_a_precheck_naming_it():
    claims = Claims("t")
    fusion = pj.runtime({"algo": "fusion"}, "10GbE")
    bands = {id: pj.register(claims, id, "claim", "paper", "ratio", ">=", 1.0, "superiority", NULL, num, den)
             for id, num, den in [("proj_fusion", [(fusion, "10GbE")], [(WFBP_A2A, "10GbE")]),
                                  ("proj_fabric", [(WFBP_A2A, "10Gbit")], [(BSP_A2A, "10Gbit")]),
                                  ("proj_covered", [(BSP_A2A, "10GbE")], [(WFBP_A2A, "10GbE")])]}
    claims.preregister(dry_run=True)
    for id, band in bands.items():
        assert (band is None) == (id != "proj_covered")
        pj.decide(claims, id, 100.0, "projection: toy", band)     # far beyond the threshold
    table = claims.table().set_index("id")
    assert list(table.verdict) == ["inconclusive", "inconclusive", "reproduced"]
    assert "measured fusion" in table.reason["proj_fusion"] and "(this: 10Gbit)" in table.reason["proj_fabric"]
    assert "none covers it" in table.test["proj_fusion"] and "no_overlap by class SSGD_no_overlap on NCCL over 10GbE: " in table.test["proj_covered"]
    with pytest.raises(ValueError, match="starts with 'proj_'"):             # counted apart from measured claims
        pj.register(Claims("t"), "fusion", "claim", "paper", "ratio", ">=", 1.0, "superiority", NULL,
                    [(WFBP_A2A, "10GbE")], [(WFBP_A2A, "10GbE")])


def test_project_rows_and_label():
    prof = tiny_profile()
    df = pj.project(prof, [{"algo": "no_overlap", "label": "none"}, {"algo": "wfbp"}], [2, 8], ["10GbE", "IB-EDR"])
    assert len(df) == 2 * 2 * 2 and set(df.label) == {"none", "wfbp"}
    slow = df[(df.label == "none") & (df.net == "10GbE")].set_index("nproc").step_s
    assert slow[8] > slow[2] > prof.compute_s                     # communication exposed, growing with p
    assert (df.efficiency <= 1 + 1e-12).all()
    assert pj.describe(prof, 64, "10GbE", 4, "PCIe3") == (
        "projection: toy b8 on V100-fp32 (flops-scaled), 64 workers, 16 nodes x 4 (PCIe3 inside, 10GbE between)")


def test_a_projection_is_stored_and_read_back_only_for_the_same_code_and_inputs(monkeypatch, tmp_path):
    monkeypatch.setenv(pj.PROJECTIONS_ENV, str(tmp_path / "proj"))
    prof, cases = tiny_profile(), [{"algo": "no_overlap", "label": "none"}, {"algo": "wfbp"}]
    simulated = []
    monkeypatch.setattr(pj, "sweep", lambda *a, **k: simulated.append(a[2]) or sweep(*a, **k))
    first = pj.project(prof, cases, [2], ["10GbE"])
    again = pj.project(prof, iter(cases), (2,), ["10GbE"])          # any iterables of the same inputs
    assert len(simulated) == 2 and len(list((tmp_path / "proj").glob("toy-*.pkl"))) == 1
    pd.testing.assert_frame_equal(again, first)
    assert list(again.runtime_model) == list(first.runtime_model)
    pj.project(prof, cases, [4], ["10GbE"])                           # other inputs: simulated
    pj.project(dataclasses.replace(prof, batch_size=16), cases, [2], ["10GbE"])
    assert len(simulated) == 6
    monkeypatch.setattr(pj, "code_version", lambda: "edited")         # other code: simulated again
    pj.project(prof, cases, [2], ["10GbE"])
    assert len(simulated) == 8 and len(list((tmp_path / "proj").glob("toy-*.pkl"))) == 4
    case = pj.simulate_case(prof, cases[1], 8, "10GbE")               # one case: its Prediction, stored
    assert pj.simulate_case(prof, cases[1], 8, "10GbE") == case and len(list((tmp_path / "proj").glob("*.pkl"))) == 5


def _slow_made(made: str) -> str:
    with open(made, "a") as f:
        f.write("made\n")
    time.sleep(1.0)
    return "projected"


def _stored_in_a_process(store: str, made: str) -> str:
    os.environ[pj.PROJECTIONS_ENV] = store
    return pj.stored(tiny_profile(), ("same inputs",), functools.partial(_slow_made, made))


def test_two_processes_asking_for_one_projection_at_once_make_it_once(tmp_path):
    made = tmp_path / "made.txt"
    with concurrent.futures.ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("fork")) as pool:
        got = list(pool.map(_stored_in_a_process, [str(tmp_path / "proj")] * 2, [str(made)] * 2))
    assert got == ["projected", "projected"]
    assert made.read_text() == "made\n"                               # the second read the first's


def test_trace_is_one_steady_iteration(tmp_path):
    import json

    from distsgd.systems.timeline import Topology, simulate

    prof = tiny_profile()
    case = {"algo": "dear", "params": {"threshold_mb": 4.0}, "label": "DeAR"}
    path = pj.write_trace(tmp_path / "t.json", prof, case, 8, "10GbE", 4, "PCIe3")
    events = [e for e in json.loads(path.read_text())["traceEvents"] if e["ph"] == "X"]
    full = simulate(prof, "dear", 8, params=case["params"],
                    topology=Topology(4, parse_net("PCIe3"), parse_net("10GbE")))
    assert {e["args"]["step"] for e in events} == {full.window[0]}          # one iteration, the steady one
    kinds = {e["cat"] for e in events}
    assert "compute" in kinds and len(kinds) >= 2                            # compute and the link(s)
    assert sum(e["cat"] == "compute" for e in events) == 2 * len(prof.layers)  # each layer's forward and backward
    assert 0 < len(events) < len(full.events)


def test_tensor_stats():
    prof = tiny_profile()
    prof.layers[0].tensor_bytes[0] = 8_000_000                # one large tensor: mean and max move
    s = pj.tensor_stats(prof)
    mb = 2**20
    assert s["tensors"] == 4 and s["grad_mb"] == pytest.approx(20e6 / mb)
    assert s["mean_tensor_mb"] == pytest.approx(5e6 / mb) and s["largest_tensor_mb"] == pytest.approx(8e6 / mb)
    assert s["intensity_ms_per_mb"] == pytest.approx(1e3 * 0.12 / (20e6 / mb))   # 4 x (10 + 20) ms over 20 MB
    assert pj.size_stats([2 * mb, 4 * mb, 6 * mb]) == {"tensors": 3, "grad_mb": 12.0, "mean_tensor_mb": 4.0,
                                                      "largest_tensor_mb": 6.0}


def test_the_fastest_of_several_runtime_models_has_the_union_of_their_bands():
    band = eb.ratio_band([((BSP_A2A, WFBP_A2A), "10GbE")], [])
    (fastest, exponent), = band.terms
    parts = [eb.measured_error(m, "10GbE") for m in (BSP_A2A, WFBP_A2A)]
    assert exponent == 1 and fastest.low == min(p.low for p in parts) and fastest.high == max(p.high for p in parts)
    assert fastest.algo == "no_overlap/wfbp" and fastest.methods == ("BSP-A2A", "WFBP-A2A")
    with pytest.raises(eb.Uncovered, match="no real-cluster table measured fusion"):
        eb.ratio_band([((WFBP_A2A, pj.runtime({"algo": "fusion"}, "10GbE")), "10GbE")], [])


def test_a_sweep_table_carries_the_measured_error_of_each_rows_runtime_model():
    table = pd.DataFrame({"runtime_model": [WFBP_A2A, pj.runtime({"algo": "dear"}, "10GbE"), WFBP_A2A,
                                            pj.runtime({"algo": "wfbp"}, "10GbE")],
                          "net": ["10GbE", "10GbE", "100Gbit,5us", "10GbE"], "step_s": [0.3, 0.3, 0.3, 0.3]})
    out = eb.with_measured_error(table)
    band = eb.measured_error(WFBP_A2A, "10GbE")
    assert out.step_s_low[0] == pytest.approx(0.3 / (1 + band.high)) and out.step_s_high[0] == pytest.approx(0.3 / (1 + band.low))
    assert out.measured_error[0].endswith("(12 rows: survey)")
    assert out.measured_error[1] == "not measured: no table measured dear"
    assert out.measured_error[2] == "not measured: nearest survey differs in fabric" and out.step_s_low.isna()[2]
    assert out.measured_error[3] == "not measured: nearest grace differs in params, contention"


def test_interval_is_ordered_for_negative_values():
    band = eb.ratio_band([(WFBP_A2A, "10GbE")], [(BSP_A2A, "10GbE")])
    low, high = band.interval(-0.5)
    assert low <= -0.5 <= high


def test_grid_twins_are_the_grid_points_grouping_like_the_threshold():
    """Four 3.8 MB layers (4e6 bytes): 25 MB is one group; of the grid 1..100 MB (10 trials) the
    points from 21.5 MB up make one group too, those below make 2 or more."""
    from distsgd.algorithms.dear import grid_twins
    forward = [layer.grad_bytes for layer in reversed(tiny_profile().layers)]
    assert [round(x, 1) for x in grid_twins(forward, 25.0, 1.0, 100.0, 10)] == [21.5, 35.9, 59.9, 100.0]
    assert grid_twins(forward, 25.0, 1.0, 10.0, 5) == []
    assert grid_twins(forward, 2.0, 1.0, 10.0, 2) == [1.0]           # 1 MB and 2 MB: a layer per group


def test_simulate_case_is_the_sweeps_row_and_its_runtime_model_the_registered_one():
    prof = tiny_profile()
    case = {"algo": "dear", "params": {"tune": True, "tune_trials": 3, "tune_window": 2}, "label": "DeAR tuned"}
    pred = pj.simulate_case(prof, case, 8, "10GbE", 4, "PCIe3")
    row = pj.project(prof, [case], [8], ["10GbE"], 4, "PCIe3").iloc[0]
    assert pred.step_s == row.step_s and len(pred.tuning) == 3
    assert pred.model == row.runtime_model == pj.runtime(case, "10GbE", 4, "PCIe3")
    assert pred.net.startswith("DeAR tuned, projection: toy b8")


def test_every_fabric_the_survey_measured_covers_its_projections():
    from distsgd.experiments import survey_systems

    byteps = survey.runtime("WFBP-PS")
    for spec in survey_systems.PROJ_NETS.values():               # 07's networks: 10GbE, 100GbE-TCP, IB-EDR
        band = eb.measured_error(byteps, spec)
        assert band.rows == 2 * 3 * 4 and band.low < band.high   # WFBP-, ByteScheduler-PS x 3 models x p
    tcp = eb.measured_error(WFBP_A2A, "100GbE-TCP:100Gbit,20us")
    assert tcp.methods == ("WFBP-A2A",) and tcp.rows == 12 and tcp.low != eb.measured_error(WFBP_A2A, "IB-EDR").low
    same = [eb.measured_error(WFBP_A2A, "mine:100Gbit,20us"),
            eb.measured_error(WFBP_A2A, "mine", network=parse_net("100Gbit,20us"))]
    assert all((b.low, b.high, b.rows, b.methods) == (tcp.low, tcp.high, tcp.rows, tcp.methods) for b in same)
    for other in ("100GbE-TCP:100Gbit,5us", "100GbE-TCP"):       # the numbers decide, not the name
        with pytest.raises(eb.Uncovered, match="its fabric"):
            eb.measured_error(WFBP_A2A, other)
    table = pd.DataFrame({"runtime_model": [WFBP_A2A, WFBP_A2A], "net": ["mine", "yours"], "step_s": [0.3, 0.3]})
    out = eb.with_measured_error(table, {"mine": parse_net("100Gbit,20us"), "yours": parse_net("100Gbit,21us")})
    assert out.measured_error[0].endswith("(12 rows: survey)")
    assert out.measured_error[1] == "not measured: nearest survey differs in fabric"


def test_the_public_tables_rows_join_the_bands_of_their_runtime_model_and_fabric():
    """PyTorch's DDP benchmark measured `ddp` (25 MB buckets) in DGX-1 machines of 8 over InfiniBand, and so
    did DLPerf's pytorch/examples runs (nodes of 8, InfiniBand EDR): a projection of that runtime model on
    IB-EDR is decided within the extremes of both tables' committed rows (fitted and held out); 06's DDP
    (machines of 4, no contention, 10GbE) is not covered, and the reason names the DDP benchmark (the first
    of the tables equally near) and each field in which it differs."""
    from distsgd.systems.timeline import public_tables as pt
    from distsgd.experiments import dear

    table = pt.load_error()
    rows = table[table.table.isin(["pytorch_ddp", "dlperf"]) & (table.method == "DDP 25 MB buckets")
                 & table.split.isin(pt.PREDICTED)]
    ddp = eb.measured_models(rows)[0]
    assert ddp.algo == "ddp" and ddp.topology == "8 ranks per node" and len(set(eb.measured_models(rows))) == 1
    band = eb.measured_error(ddp, "IB-EDR")
    assert (band.low, band.high, band.rows) == (rows.error.min(), rows.error.max(), len(rows))
    assert (rows.table == "pytorch_ddp").sum() >= 19 and (rows.table == "dlperf").sum() == 4
    assert band.tables == ("pytorch_ddp", "dlperf") and "PyTorch's DDP benchmark" in eb.RatioBand(((band, 1),)).describe()
    six = pj.runtime(next(c for c in dear.PROJ_CASES if c["label"] == "DDP"), "10GbE", dear.PROJ_GPUS, dear.PROJ_INTRA)
    with pytest.raises(eb.Uncovered) as why:
        eb.measured_error(six, "10GbE")
    reason = str(why.value)
    assert reason.startswith("the nearest measurement of ddp, PyTorch's DDP benchmark")
    assert "its topology 8 ranks per node (this: 4 ranks per node)" in reason and "its fabric IB-EDR (this: 10GbE)" in reason
    assert "its contention 0.189 (this: 0.0)" in reason


def test_a_public_tables_fabric_is_its_stated_inter_node_network():
    """Horovod's first table is `wfbp` under Horovod's cycle in machines of 4, as the survey's WFBP-A2A: on
    the survey's fabrics the survey's rows decide it, on Horovod's stated 25 Gbit/s its rows (NCCL and
    MPI, TCP and RDMA, over that network) do, compared by bandwidth and latency."""
    from distsgd.systems.timeline import public_tables as pt

    table = pt.load_error()
    rows = table[(table.table == "horovod") & table.split.isin(pt.PREDICTED) & table.connection.str.startswith("RoCE")]
    assert set(eb.measured_models(rows)) == {WFBP_A2A}
    for spec in ("25GbE", "25Gbit,10us"):
        band = eb.measured_error(WFBP_A2A, spec)
        assert band.tables == ("horovod",) and (band.low, band.high, band.rows) == (rows.error.min(), rows.error.max(), len(rows))
    assert eb.measured_error(WFBP_A2A, "10GbE").tables == ("survey",)

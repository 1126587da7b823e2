"""The simulator's error on the survey's cluster (issue 33, item 3): the committed table is what
`timeline.survey` computes, the fit recovers a known network, and the inputs are the survey's."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from distsgd.comm.netmodel import NetModel
from distsgd.systems.layer_profile import Layer, Profile
from distsgd.systems.timeline import Topology, simulate
from distsgd.systems.timeline import survey

ROOT = Path(__file__).resolve().parents[1]


def test_committed_error_table_is_what_the_code_produces() -> None:
    committed = pd.read_csv(ROOT / survey.ERROR_CSV)
    table, fitted = survey.error_table()
    assert list(committed.columns) == survey.COLUMNS and len(committed) == len(table) == 3 * 3 * 7 * 4
    for column in survey.COLUMNS:
        if table[column].dtype.kind == "f":
            assert committed[column].to_numpy() == pytest.approx(table[column].to_numpy(), rel=1e-5), column
        else:
            assert committed[column].astype(str).tolist() == table[column].astype(str).tolist(), column
    assert set(fitted.inter) == set(survey.FABRICS)
    assert (table[table.split == "check"].nproc == 32).all() and (table[table.split != "check"].nproc <= 16).all()


def test_fit_link_recovers_a_synthetic_network() -> None:
    layers = [Layer(f"l{i}", 1e-3, 2e-3, 1e-4, [f"l{i}.w"], [4 * n], [n]) for i, n in enumerate([2**20, 3 * 2**18])]
    profile = Profile("toy", 8, (1,), "cpu", "measured", "test", layers)
    intra, truth = NetModel(10e9, 1e-6), NetModel(2.5e9, 40e-6)

    def step(p: int, net: NetModel) -> float:
        return simulate(profile, "no_overlap", p, topology=Topology(4, intra, net)).step_s

    rows = pd.DataFrame({"nproc": [8, 16, 32]})
    rows["step_s"] = [step(p, truth) for p in rows.nproc]
    got = survey.fit_link(rows, lambda r, net: step(r.nproc, net), NetModel(1.25e9, 20e-6))
    assert got.bandwidth_Bps == pytest.approx(truth.bandwidth_Bps, rel=1e-4)
    assert got.latency_s == pytest.approx(truth.latency_s, rel=1e-3)
    bandwidth_only = survey.fit_link(rows, lambda r, net: step(r.nproc, net), NetModel(1.25e9, 40e-6),
                                     fit_latency=False)
    assert bandwidth_only.bandwidth_Bps == pytest.approx(truth.bandwidth_Bps, rel=1e-4)
    assert bandwidth_only.latency_s == 40e-6


def test_measured_table_is_the_surveys() -> None:
    measured = survey.load_measured()
    assert len(measured) == 3 * 3 * 7 * 5                                # connections x models x methods x p
    assert set(measured.method) == set(survey.SURVEY_METHODS) and set(measured.model) == set(survey.MODELS)
    assert set(survey.FABRICS) == set(measured.connection)                # every connection it measured
    one = measured[measured.nproc == 1].groupby("model").throughput.unique()
    assert {m: list(v) for m, v in one.items()} == {"BERT-Base": [212.8], "BERT-Large": [49.0], "ResNet-50": [253.1]}
    row = measured[(measured.model == "ResNet-50") & (measured.method == "BSP-A2A") & (measured.nproc == 32)
                   & (measured.connection == "10GbE with TCP/IP")].iloc[0]
    assert row.throughput == 4920.82 and row.step_s == pytest.approx(64 * 32 / 4920.82)
    readme = (ROOT / survey.MEASURED_CSV).with_name("README.md").read_text()
    assert all(v in readme for v in survey.SOURCE.values())


def test_methods_are_configured_as_the_launch_scripts() -> None:
    mib = 2**20
    m = survey.SURVEY_METHODS
    assert m["ByteScheduler-A2A"].params["partition_mb"] * mib == pytest.approx(4_000_000)
    assert m["ByteScheduler-A2A"].params["credit_mb"] * mib == pytest.approx(16_000_000)
    for name in ("BSP-PS", "WFBP-PS", "ByteScheduler-PS"):
        assert m[name].algo == "ps" and m[name].params["partition_mb"] * mib == pytest.approx(4_096_000)
        assert (m[name].params["machine_size"], m[name].params["servers"]) == (survey.GPUS_PER_NODE, 0)
    assert m["BSP-PS"].params["bucket_mb"] * mib == m["BSP-A2A"].params["bucket_mb"] * mib == 536870912
    assert m["WFBP-PS"].params["bucket_mb"] == 0


def test_the_docs_tables_are_the_committed_error_tables() -> None:
    doc = (ROOT / "docs" / "simulator_error.md").read_text()
    summary, signed = survey.markdown(survey.load_error()).split("\n\n")
    assert summary in doc and signed in doc
    other = survey.markdown(survey.load_error().assign(error=lambda t: t.error * 1.01)).split("\n\n")
    assert not any(table in doc for table in other)                    # a table one percent off is caught
    assert survey.gains_markdown(survey.load_error()) in doc
    slower = survey.load_error().assign(measured_s=lambda t: t.measured_s * (1 + 0.02 * (t.method == "MG-WFBP")))
    assert survey.gains_markdown(slower) not in doc


def test_gains_over_bsp_bound_tells_a_step_no_network_explains() -> None:
    """BSP computes c = 1 s then all-reduces 2 s (3 s): any schedule of its bytes takes at least 2 s on
    that network. A measured 2.5 s is consistent (ratio 1.25), 1.5 s is not (0.75); the gains are
    BSP's step over the schedule's, measured and predicted."""
    key = dict(model="M", connection="net", nproc=8)
    table = pd.DataFrame([{**key, "method": "BSP-A2A", "error": 0.0, "measured_s": 3.0, "predicted_s": 3.0},
                          {**key, "method": "MG-WFBP", "error": 0.2, "measured_s": 2.5, "predicted_s": 2.0},
                          {**key, "method": "WFBP-A2A", "error": 0.0, "measured_s": 1.5, "predicted_s": 1.5}])
    measured = pd.DataFrame([{"model": "M", "nproc": 1, "batch_size": 8, "step_s": 1.0}])
    g = survey.gains_over_bsp(table, measured).set_index("method")
    assert g.loc["MG-WFBP", "over_bound"] == pytest.approx(1.25) and g.loc["WFBP-A2A", "over_bound"] == pytest.approx(0.75)
    assert g.loc["MG-WFBP", "measured_gain"] == pytest.approx(1.2) and g.loc["MG-WFBP", "predicted_gain"] == pytest.approx(1.5)
    assert "ByteScheduler-A2A" not in g.index


def test_the_readme_gives_the_32_gpu_error_per_network_and_family() -> None:
    readme = " ".join((ROOT / "README.md").read_text().split())
    rows = survey.summary(survey.load_error()).loc["p = 32"].drop(index="all", level="connection")
    assert len(rows) == 2 * len(survey.FABRICS)
    for (connection, family), r in rows.iterrows():
        text = f"{100 * r['median']:.1f}% / {100 * r['max']:.1f}% ({survey.NETWORK_NAMES[connection]}, {family})"
        assert text in readme, text

"""A finished multi-node run against the simulator's prediction (`systems.run_validation`): its row in
the user's validation table, once, and the error band a projection of the same runtime model finds
from it (`timeline.error_band`)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from distsgd.cli import main as cli_main
from distsgd.errors import ConfigError
from distsgd.systems import run_validation as rv
from distsgd.systems.timeline import error_band
from distsgd.training.config import Config
from distsgd.training.results import Result
from distsgd.verdicts import projection

STEPS, LOG_EVERY = 40, 10
STEP_S, WAIT_S = 0.05, 0.02          # seconds per step, of which blocked in collectives


def fake_run(root: Path, hosts: list[str], nproc: int = 4, net: str = "", algo: str = "ssgd",
             step_s: float = STEP_S, gpus: bool = False) -> Path:
    """A run directory as a finished run leaves it (`training.results`): config.json, env.json,
    metrics.csv (logged every LOG_EVERY steps: wall_s, comm_wait_s), summary.json and each rank's
    pid file naming its host (rank r on hosts[r * len(hosts) // nproc])."""
    config = Config(algo=algo, model="mlp", data="synthetic-logistic", nproc=nproc, steps=STEPS, batch_size=16,
                    log_every=LOG_EVERY, net=net, device="cuda" if gpus else "auto",
                    name=f"fake-{algo}-{len(hosts)}-{nproc}").validate()
    run = root / config.run_name()
    (run / "ranks").mkdir(parents=True)
    (run / "config.json").write_text(json.dumps(config.to_dict()))
    (run / "env.json").write_text(json.dumps({"cuda_available": gpus, "hostname": hosts[0]}))
    steps = list(range(LOG_EVERY, STEPS + 1, LOG_EVERY))
    pd.DataFrame({"step": steps, "wall_s": [s * step_s for s in steps],
                  "comm_wait_s": [s * WAIT_S for s in steps]}).to_csv(run / "metrics.csv", index=False)
    (run / "summary.json").write_text(json.dumps({
        "status": "finished", "code_version": "0123abcd4567", "steps": STEPS, "train_s": STEPS * step_s,
        "step_time_s": step_s, "comm_wait_s": STEPS * WAIT_S, "algo": algo, "params": config.params,
        "nproc": nproc, "final_train_loss": 0.5, "final_test_acc": 0.5, "comm_bytes": 1.0}))
    for rank in range(nproc):
        (run / "ranks" / f"pid_rank{rank}").write_text(f"{hosts[rank * len(hosts) // nproc]} {100 + rank}\n")
    return run


@pytest.fixture
def results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("DISTSGD_RESULTS", str(tmp_path / "results"))
    for name in (rv.FABRIC_ENV, rv.INSIDE_ENV):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "results"


def test_multi_host_run_gets_one_row(results: Path) -> None:
    run = fake_run(results, ["node1", "node2"])
    outcomes = rv.record_runs([results], rv.Fabric("10GbE"))
    assert [told.split(" ")[0] for _, told in outcomes] == ["recorded"]
    table = rv.load_runs()
    assert len(table) == 1
    r = table.iloc[0]
    assert (r.run, r.code_version, r.nodes, r.nproc, r.fabric, r.inside) == (run.name, "0123abcd4567", 2, 4, "10GbE", "10GbE")
    assert r.measured_s == pytest.approx(STEP_S) and r.compute_s == pytest.approx(STEP_S - WAIT_S)
    assert r.topology == "2 ranks per node" and r.runtime == "class SSGD on gloo" and r.contention == 0
    assert r.predicted_s > r.compute_s and r.error == pytest.approx(r.predicted_s / r.measured_s - 1)
    # the same run again, by the notebook runner's path or by hand: no second row
    assert [told for _, told in rv.record_runs([run], rv.Fabric("10GbE"))][0].startswith("kept")
    assert cli_main(["validate-run", str(results)]) == 0          # no fabric named: kept, not replaced
    assert len(rv.load_runs()) == 1 and rv.load_runs().fabric.iloc[0] == "10GbE"
    # another fabric named: a correction replaces the row
    assert rv.record_runs([run], rv.Fabric("IB-EDR"))[0][1].startswith("replaced")
    assert list(rv.load_runs().fabric) == ["IB-EDR"]


def test_unknown_fabric_recorded_without_prediction(results: Path) -> None:
    fake_run(results, ["node1", "node2"])
    assert rv.record_runs([results], rv.Fabric.named())[0][1].startswith("recorded")
    r = rv.load_runs().iloc[0]
    assert r.fabric == "" and pd.isna(r.predicted_s) and pd.isna(r.error) and r.algo == "ssgd"
    assert rv.record_runs([results], rv.Fabric.named(env={rv.FABRIC_ENV: "25GbE"}))[0][1].startswith("replaced")
    assert rv.load_runs().fabric.iloc[0] == "25GbE"


def test_emulated_run_crossed_its_own_network(results: Path) -> None:
    fake_run(results, ["node1", "node2"], net="1GbE")
    rv.record_runs([results], rv.Fabric.named())
    r = rv.load_runs().iloc[0]
    assert (r.fabric, r.inside) == ("1GbE", "1GbE") and r.predicted_s > 0


def test_runs_without_a_row(results: Path) -> None:
    fake_run(results, ["node1"])                                   # 4 CPU ranks on one host
    fake_run(results, ["node1"], nproc=1, gpus=True)               # one GPU
    fake_run(results, ["node1", "node2", "node3"], nproc=4)        # 2, 1, 1 ranks
    told = sorted(t for _, t in rv.record_runs([results], rv.Fabric("10GbE")))
    assert told[0].startswith("no row: 1 GPU rank(s) on one host")
    assert told[1].startswith("no row: 4 CPU rank(s) on one host")
    assert told[2].startswith("no row: 4 ranks on 3 hosts")
    assert not rv.runs_csv().exists()


def test_gpus_of_one_node_cross_the_link_inside_it(results: Path) -> None:
    fake_run(results, ["node1"], nproc=4, gpus=True)
    assert rv.record_runs([results], rv.Fabric("IB-EDR", "NVLink"))[0][1].startswith("recorded")
    r = rv.load_runs().iloc[0]
    assert (r.nodes, r.device, r.fabric, r.topology) == (1, "cuda", "NVLink", "4 ranks per node")
    assert r.predicted_s > 0


def test_since_leaves_older_runs(results: Path) -> None:
    run = fake_run(results, ["node1", "node2"])
    later = (run / "summary.json").stat().st_mtime_ns + 1
    assert rv.record_runs([results], rv.Fabric("10GbE"), since_ns=later) == []


def test_bad_fabric_names_the_field(results: Path) -> None:
    with pytest.raises(ConfigError, match="fabric"):
        rv.Fabric("10 furlongs")
    assert cli_main(["validate-run", str(results / "nowhere"), "--fabric", "10GbE"]) == 2


def test_band_of_the_same_runtime_model_from_a_users_row(results: Path) -> None:
    """A projection of ssgd on 10GbE in nodes of 2 (no real-cluster table measured ssgd) is covered by the
    user's row of that runtime model (a GPU run: NCCL's collectives) on that fabric, and by no row of
    another fabric, nor by a CPU run's (gloo's collectives: another runtime)."""
    cpu = fake_run(results / "cpu", ["node1", "node2"])
    model = projection.runtime({"algo": "ssgd"}, "10GbE", gpus_per_node=2)
    with pytest.raises(error_band.Uncovered, match="no real-cluster table measured ssgd"):
        error_band.measured_error(model, "10GbE")
    rv.record_runs([cpu], rv.Fabric("10GbE"))
    with pytest.raises(error_band.Uncovered, match=r"runtime class SSGD on gloo \(this: class SSGD on NCCL\)"):
        error_band.measured_error(model, "10GbE")
    gpu = fake_run(results / "gpu", ["node1", "node2"], gpus=True)
    rv.runs_csv().unlink()
    rv.record_runs([gpu], rv.Fabric("10GbE"))
    row = rv.load_runs().iloc[0]
    band = error_band.measured_error(model, "10GbE")
    assert (band.low, band.high, band.rows, band.runs) == (pytest.approx(row.error), pytest.approx(row.error), 1, 1)
    assert "1 of your runs" in band.describe()
    with pytest.raises(error_band.Uncovered):
        error_band.measured_error(model, "IB-EDR")
    other_family = projection.runtime({"algo": "ssgd"}, "10GbE", gpus_per_node=4)
    with pytest.raises(error_band.Uncovered):
        error_band.measured_error(other_family, "10GbE")


def test_users_row_of_unknown_fabric_is_read_by_no_band(results: Path) -> None:
    fake_run(results, ["node1", "node2"])
    rv.record_runs([results], rv.Fabric())
    with pytest.raises(error_band.Uncovered):
        error_band.measured_error(projection.runtime({"algo": "ssgd"}, "10GbE", gpus_per_node=2), "10GbE")


def test_result_compute_time_leaves_out_the_wait(tmp_path: Path) -> None:
    r = Result.load(fake_run(tmp_path, ["a", "b"]))
    assert r.steady_step_time() == pytest.approx(STEP_S)
    assert r.steady_step_time(waited=False) == pytest.approx(STEP_S - WAIT_S)


def test_notebook_runner_records_its_runs_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """reproduce/run.py, after a notebook that finished a run on two hosts (here: wrote its summary
    again), records it in the results root's table over the profile's fabric; the notebook again
    adds no second row; a profile's fabric that is no network stops it before any notebook."""
    from test_reproduce import Project, make_notebook, run_module

    project = Project(tmp_path)
    for d in (project.notebooks, project.profiles, project.figures):
        d.mkdir()
    results = tmp_path / "results"
    summary = fake_run(results, ["node1", "node2"]) / "summary.json"
    os.utime(summary, (0, 0))                     # long before: a run no notebook of this invocation finished
    make_notebook(project.notebooks / "00_alpha.ipynb", "dry_run = False", f"import os; os.utime({str(summary)!r})")
    project.profile("test", {"defaults": {}, "notebooks": {}, "fabric": "10GbE"})
    env = {"DISTSGD_RESULTS": str(results), rv.FABRIC_ENV: "", rv.INSIDE_ENV: "",
           "PYTHONPATH": str(Path(__file__).parent.parent / "lib")}
    proc = project.run(env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "00_alpha: 1 run(s) on several GPUs or nodes compared with the simulator" in proc.stdout
    table = rv.load_runs(rv.runs_csv(results))
    assert len(table) == 1 and table.fabric.iloc[0] == "10GbE" and table.predicted_s.iloc[0] > 0
    monkeypatch.setenv("DISTSGD_RESULTS", str(results))
    run_module().record_validation("00_alpha", 0, rv.Fabric("10GbE"))          # the notebook again
    assert rv.load_runs(rv.runs_csv(results)).equals(table)
    project.profile("test", {"notebooks": {}, "fabric": "ten furlongs"})
    assert project.main() == 2

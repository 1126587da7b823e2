"""distsgd.experiments.systems_benchmark: notebook 10's parameters, checks, command, projection and decision."""
from __future__ import annotations

import pandas as pd
import pytest

from distsgd.verdicts.claims import Claims, Test
from distsgd.experiments import systems_benchmark as sysb


def _claims() -> Claims:
    claims = Claims("10_systems_benchmark")
    claims.register("overlap_beats_no_overlap", "overlap beats no overlap", "paper",
                    Test("no-overlap / best overlapping step time", ">=", 1.0, "median", form="superiority",
                         source="null: a ratio of 1"))
    claims.preregister(dry_run=True)
    return claims


def test_parameters_as_lists_or_comma_separated_strings() -> None:
    assert sysb.as_list(" mlp, transformer ,") == ["mlp", "transformer"] and sysb.as_list([2, 4]) == ["2", "4"]
    assert sysb.check_parameters("mlp,transformer", "2,4") == (["mlp", "transformer"], [2, 4])
    assert sysb.check_parameters(["mlp"], [8]) == (["mlp"], [8])
    for models, nprocs in [("nope", "2"), ("", "2"), ("mlp", "1,2"), ("mlp", "")]:
        with pytest.raises(ValueError):
            sysb.check_parameters(models, nprocs)


def test_machine_checks_name_why_the_claim_cannot_be_decided(monkeypatch, tmp_path) -> None:
    headroom = pd.DataFrame({"model": ["mlp", "transformer"], "nproc": 2, "net_name": "10GbE-like",
                             "real_s": [0.001, 0.009], "modeled_s": [0.01, 0.004], "emulable": [True, False]})
    noise = {"cv": 0.01}
    monkeypatch.setattr(sysb, "machine_precheck", lambda *a, **kw: (None, noise["cv"], headroom))
    claims = _claims()
    assert sysb.machine_checks(claims, ["mlp", "transformer"], [2], 4, 1, 0.1, "gloo", True, tmp_path) == [("mlp", 2)]
    assert claims.claims["overlap_beats_no_overlap"].precheck is None
    headroom["emulable"] = False
    claims = _claims()
    assert sysb.machine_checks(claims, ["mlp", "transformer"], [2], 4, 1, 0.1, "gloo", True, tmp_path) == []
    assert "transformer p=2: real 9.0 ms vs modeled 4.0 ms" in claims.claims["overlap_beats_no_overlap"].precheck
    noise["cv"], claims = 0.5, _claims()
    sysb.machine_checks(claims, ["mlp"], [2], 4, 1, 0.1, "gloo", True, tmp_path)
    assert claims.claims["overlap_beats_no_overlap"].precheck.startswith("compute-time CV 50% > 10%")


def test_the_bench_command_is_the_cli_a_user_runs(tmp_path) -> None:
    cmd = sysb.bench_command(["mlp", "transformer"], [2, 4], "gloo", ["10GbE-like", "IB-like"], 6, 4, 1, tmp_path / "b.csv")
    assert cmd[1:] == ["-m", "distsgd", "bench", "--models", "mlp,transformer", "--nprocs", "2,4", "--backend", "gloo",
                       "--nets", "10GbE-like,IB-like", "--reps", "6", "--steps", "4", "--warmup", "1",
                       "--csv", str(tmp_path / "b.csv")]


def test_simulator_check_marks_the_emulable_pairs(monkeypatch, tmp_path) -> None:
    seen = {}

    def predict(bench, models, cases, nprocs, backend, warmup, steps, sizes, reps, out):
        seen.update(sizes=sizes, reps=reps)
        return pd.DataFrame({"model": ["mlp", "mlp", "transformer", "mlp"], "nproc": [2, 2, 2, 2],
                             "net_name": ["10GbE-like", "IB-like", "10GbE-like", "real"], "label": "WFBP", "net": "",
                             "measured_s": 1.0, "predicted_s": 1.0, "residual": 0.0})

    monkeypatch.setattr(sysb, "simulator_predictions", predict)
    val = sysb.simulator_check(pd.DataFrame({"grad_bytes": [3_000_000]}), ["mlp"], [2], [("mlp", 2)], "gloo", 1, 4,
                               False, tmp_path)
    assert list(val.emulable) == [True, False, False, True] and (tmp_path / "validation.csv").is_file()
    assert seen == {"sizes": [2**20, 3_000_000, 2**22, 2**24, 2**26], "reps": 10}


def test_the_committed_validation_tables_are_shown_or_said_missing(tmp_path, capsys) -> None:
    assert sysb.show_timeline_validation(tmp_path, tmp_path / "none.csv") is None
    assert sysb.show_gpu_validation(tmp_path, tmp_path / "none.csv") is None
    assert "no validation run yet" in capsys.readouterr().out
    table = sysb.show_gpu_validation(tmp_path)         # the committed ones (figures/10_systems_benchmark)
    assert (tmp_path / "gpu_validation.png").is_file() and "validated" not in table
    assert len(sysb.show_timeline_validation(tmp_path)) and (tmp_path / "timeline_validation.png").is_file()


@pytest.mark.shared_projections
def test_the_projection_holds_the_simulator_invariant(tmp_path) -> None:
    claims = _claims()
    proj = sysb.project_with_invariants(claims, tmp_path)
    assert sorted(proj.nproc.unique()) == sysb.PROJ_SWEEP and (tmp_path / "projection.csv").is_file()
    assert len(claims.invariants) == len(sysb.PROJ_MODELS) * len(sysb.PROJ_NETS) * len(sysb.PROJ_NPROCS)
    assert all(i["holds"] for i in claims.invariants)
    first = claims.invariants[0]
    assert "resnet50 b64" in first["invariant"] and "32 workers, 10GbE" in first["invariant"]
    at = proj[(proj.model == "resnet50") & (proj.net == "10GbE") & (proj.nproc == 32)].set_index("label").step_s
    best = at.drop(index="no overlap")
    assert first["measured"] == (f"{at['no overlap'] / best.min():.2f} (no overlap {1e3 * at['no overlap']:.1f} ms, "
                                 f"best {best.idxmin()} {1e3 * best.min():.1f} ms)")


def test_emulation_invariant_and_the_overlap_decision() -> None:
    claims = _claims()
    fid = pd.DataFrame({"nbytes": [2**16, 2**20, 2**22], "ratio": [5.0, 1.0, 1.2]})
    assert sysb.check_emulation(claims, fid)                       # the small message does not count
    assert not sysb.check_emulation(claims, fid.assign(ratio=[1.0, 0.9, 1.0]))
    assert claims.invariants[0]["expected"] == "measured / modeled in [0.97, 1.3]"
    rows = [{"repeat": r, "model": m, "nproc": 2, "net_name": "10GbE-like", "label": lab, "step_s": t}
            for r in range(6) for m, per in {"mlp": {"no overlap": 4.0, "WFBP": 2.0, "DeAR": 3.0},
                                             "transformer": {"no overlap": 3.0, "WFBP": 3.5, "DeAR": 2.5}}.items()
            for lab, t in per.items()]
    bench = pd.DataFrame(rows + [{**rows[0], "label": "compute", "step_s": 0.1}])
    assert sysb.decide_overlap(claims, bench, [("mlp", 2), ("transformer", 2)]) == "reproduced"   # min(2, 1.2)
    row = claims.table().iloc[0]
    assert row.estimate == pytest.approx(1.2) and row.measured.startswith("6 rounds, per round [1.20, 1.20")
    assert row.measured.endswith("mlp p=2 2.00, transformer p=2 1.20")
    claims = _claims()
    sysb.decide_overlap(claims, bench, [("mlp", 2)])               # only the emulable pair is tested
    row = claims.table().iloc[0]
    assert row.estimate == pytest.approx(2.0) and row.measured.endswith("transformer p=2 1.20 (not emulable here)")


def test_the_public_tables_held_out_errors_are_shown_per_table_and_schedule() -> None:
    summary = sysb.show_public_error()
    assert {"pytorch_ddp", "grace", "horovod", "dlperf", "survey", "all"} == set(summary.table)
    assert {"median", "max", "count", "meets"} <= set(summary.columns)
    assert summary[summary.table == "all"].family.is_unique

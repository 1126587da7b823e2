"""The simulator runs the algorithms' own classes (`timeline.driver`, issue 32): the collectives it
charges are the ones a real gloo run issues, and it checks the steady state an algorithm declares."""
from __future__ import annotations

import importlib

import pandas as pd
import pytest

import distsgd
from distsgd.algorithms.local_sgd import LocalSGD
from distsgd.algorithms.registry import REGISTRY
from distsgd.compress import NAMES as COMPRESSORS
from distsgd.systems.layer_profile import Layer, Profile
from distsgd.models import build_model
from distsgd.systems.timeline import simulate
from distsgd.systems.timeline.driver import COLLECTIVE_COLUMNS
from distsgd.systems.timeline.simulator import collectives

from test_timeline import NET, TOY
from test_timeline_overheads import KNOB

DRIVEN = sorted(set(REGISTRY) - {"compressed_sgd", "ssd_sgd"})       # ddp: torch's reducer on a fake group
CASES = ([(algo, {}) for algo in DRIVEN] + [("compressed_sgd", {"compressor": c}) for c in COMPRESSORS]
         + [("ssd_sgd", {"warmup": 2})]         # its delay stage after 2 S-SGD steps, not 500
         + [("ps", {"machine_size": 2, "partition_mb": 0.01})])   # BytePS's placement: p = 2 one machine, 3 two


def mlp_profile() -> Profile:
    """The kit's MLP on digits as a profile: its parameters in backward order, one layer per
    module, no times (the collectives of these algorithms do not depend on them)."""
    layers: dict[str, list] = {}
    for name, p in reversed(list(build_model("mlp", (64,), 10).named_parameters())):
        layers.setdefault(name.rsplit(".", 1)[0], []).append((name, p))
    return Profile("mlp", 8, (64,), "cpu", "measured", "test", [
        Layer(layer, 0.0, 0.0, 0.0, [n for n, _ in ts], [p.numel() * p.element_size() for _, p in ts],
              [p.numel() for _, p in ts]) for layer, ts in layers.items()])


def steps_of(algo: str, params: dict) -> int:
    """Two cycles of the algorithm's steady state after its start; MG-WFBP only its profiling steps
    (its merge plan follows the gradient-ready times it measures: a run's differ from a profile's)."""
    cls = REGISTRY[algo]
    start, cycle = cls.steady_state(cls.resolve_params(params))
    return start if algo == "mgwfbp" else start + 2 * cycle


@pytest.mark.parametrize("nproc", [2, 3])
@pytest.mark.parametrize(("algo", "params"), CASES, ids=[f"{a}-{p.get('compressor', '')}{'machines' * ('machine_size' in p)}" for a, p in CASES])
def test_the_simulated_collectives_are_a_real_runs_ledger(algo: str, params: dict, nproc: int,
                                                          tmp_path) -> None:
    steps = steps_of(algo, params)
    run = distsgd.run(algo=algo, params=params, model="mlp", data="digits", nproc=nproc, steps=steps,
                      batch_size=8, eval_every=0, log_every=steps, progress=False, out=str(tmp_path))
    real = run.comm()
    real = real[real["rank"] == nproc - 1][COLLECTIVE_COLUMNS].reset_index(drop=True)
    simulated = collectives(mlp_profile(), algo, nproc, steps, "10GbE", params)
    assert len(real) > 0
    pd.testing.assert_frame_equal(simulated, real, check_dtype=False)


def test_a_declared_steady_state_that_does_not_repeat_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    assert simulate(TOY, "local_sgd", 4, "10GbE").step_s > 0
    monkeypatch.setattr(LocalSGD, "steady_state", classmethod(lambda cls, params: (0, 1)))
    with pytest.raises(RuntimeError, match="do not repeat every 1 steps"):
        simulate(TOY, "local_sgd", 4, "10GbE")


def test_a_long_repeating_transient_is_driven_by_its_ends(monkeypatch: pytest.MonkeyPatch) -> None:
    """`simulate.transient`: SSD-SGD's 500 warm-up steps driven by their first and last steps
    predict what driving all of them does, on a network where the pushes queue."""
    ends = simulate(TOY, "ssd_sgd", 8, NET, {"period": 3}, overheads=KNOB)
    monkeypatch.setattr(importlib.import_module("distsgd.systems.timeline.simulator"), "TRANSIENT_ENDS", 10**6)
    full = simulate(TOY, "ssd_sgd", 8, NET, {"period": 3}, overheads=KNOB)
    assert (ends.step_s, ends.compute_s, ends.comm_s) == pytest.approx((full.step_s, full.compute_s, full.comm_s),
                                                                         rel=1e-12)
    assert len(ends.events) < len(full.events) / 10


def test_the_cli_lists_the_collectives_of_every_configuration(tmp_path, capsys: pytest.CaptureFixture) -> None:
    from distsgd import cli
    toy = str(TOY.to_csv(tmp_path / "toy_b32.csv"))
    out = tmp_path / "collectives.csv"
    argv = ["simulate", "--profile", toy, "--batch-size", "32", "--algos", "local_sgd,dear", "--nprocs", "2,3",
            "--net", "10GbE", "--csv", str(tmp_path / "sim.csv")]
    assert cli.main([*argv, "--steps", "8", "--collectives", str(out)]) == 0
    listed = pd.read_csv(out)
    for (algo, nproc), rows in listed.groupby(["algo", "nproc"]):
        expected = collectives(TOY, algo, nproc, 8, "10GbE")
        pd.testing.assert_frame_equal(rows[COLLECTIVE_COLUMNS].reset_index(drop=True), expected, check_dtype=False)
    assert set(listed.groupby(["algo", "nproc"]).groups) == {("dear", 2), ("dear", 3), ("local_sgd", 2), ("local_sgd", 3)}
    assert (listed[listed.algo == "local_sgd"].step.drop_duplicates().tolist() == [3, 7])  # period 4
    capsys.readouterr()
    assert cli.main([*argv, "--steps", "8"]) == 2
    assert "invalid steps=8" in capsys.readouterr().err

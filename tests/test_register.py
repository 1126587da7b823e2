"""reproduce/register.py: registering a notebook's tests executes it up to its registration cell and
writes the registration and its log row (nothing else writes one); the pilot is registered and run at
T and 4T, and the notebook's registration takes its power from it."""
from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import nbformat
import pandas as pd
import pytest
import yaml

from distsgd.verdicts import registration

REPO = Path(__file__).resolve().parent.parent
NAME = "00_tiny"

PARAMETERS = "seed = 0\nsteps = 10\ndry_run = False"

# The registration cell: a superiority claim on its null, the design its seeds and run length.
REGISTRATION_CELL = f"""\
from distsgd.verdicts.claims import Claims, Test
seeds = [seed, seed + 1, seed + 2]
claims = Claims("{NAME}")
claims.register("ahead", "a is ahead of b", "the paper: a beats b",
                Test("a - b", ">=", 0.0, "t interval over 3 seeds", form="superiority", source="null: no difference"))
claims.preregister(dry_run, design={{"seeds": seeds, "steps": steps}})
"""

# The deciding run: a - b is -0.1 at 10 steps and +0.2 at 40, so a pilot at T = 10 and 4T = 40
# finds the direction not settled.
DECIDING_CELL = f"""\
import numpy as np
from distsgd.paths import figures_dir
gap = (steps - 20) / 100 + 0.001 * np.random.default_rng(seed).normal(size=len(seeds))
claims.decide_mean("ahead", gap, "a - b")
claims.save(figures_dir("{NAME}"))
claims.check()
"""


def load_register_py():
    spec = importlib.util.spec_from_file_location("reproduce_register", REPO / "reproduce" / "register.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def tiny(tmp_path, monkeypatch):
    """A one-notebook project (notebooks/, profiles/test.yaml) that register.py reads instead of the
    repository's; registrations and the pilot go under tmp_path. Every variable register.py sets for
    its kernels is set here first, so that the test leaves the environment as it found it."""
    reg = load_register_py()
    notebooks, profiles = tmp_path / "notebooks", tmp_path / "profiles"
    notebooks.mkdir()
    profiles.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells = [nbformat.v4.new_code_cell(PARAMETERS, metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell(REGISTRATION_CELL), nbformat.v4.new_code_cell(DECIDING_CELL)]
    nbformat.write(nb, notebooks / f"{NAME}.ipynb")
    (profiles / "test.yaml").write_text(yaml.safe_dump({
        "notebooks": {NAME: {}},
        "pilots": {NAME: {"T": {"seed": 100}, "4T": {"seed": 100, "steps": 40}}}}))
    monkeypatch.setattr(reg.run, "DEFAULT_NOTEBOOKS_DIR", notebooks)
    monkeypatch.setattr(reg.run, "DEFAULT_PROFILES_DIR", profiles)
    monkeypatch.setenv(registration.REGISTERED_ENV, str(tmp_path / "registered"))
    monkeypatch.setenv(registration.PILOT_ENV, str(tmp_path / "pilot"))
    monkeypatch.setenv("DISTSGD_PROFILE", "test")
    monkeypatch.setenv("DISTSGD_FIGURES", str(tmp_path / "figures"))
    monkeypatch.setenv("PYTHONPATH", str(REPO / "lib"))
    return reg


def main(reg, tmp_path, *args: str) -> int:
    return reg.main(["--only", "00", "--profile", "test", "--out", str(tmp_path / "out"), *args])


@pytest.mark.parametrize("args,missing", [(("--seen", "yes"), "--why"), (("--why", "  ", "--seen", "no"), "--why"),
                                          (("--why", "a reason"), "--seen")])
def test_register_refuses_without_why_or_seen(tiny, tmp_path, capsys, args, missing) -> None:
    assert main(tiny, tmp_path, *args) == 2
    assert f"error: {missing}" in capsys.readouterr().err
    assert not (tmp_path / "registered").exists() and not (tmp_path / "out").exists()


def test_register_writes_the_registration_and_its_log_row_and_runs_nothing_past_its_cell(tiny, tmp_path) -> None:
    assert main(tiny, tmp_path, "--why", "first registration", "--seen", "no") == 0
    reg = json.loads((tmp_path / "registered" / f"{NAME}.json").read_text())
    assert reg["design"] == {"seeds": [0, 1, 2], "steps": 10} and reg["pilot"] is None
    assert reg["tests"]["ahead"]["form"] == "superiority" and reg["tests"]["ahead"]["source"] == "null: no difference"
    assert not (tmp_path / "out" / "figures" / NAME / "claims.csv").exists()       # the deciding cell never ran

    profile = yaml.safe_load((tmp_path / "profiles" / "test.yaml").read_text())
    profile["notebooks"][NAME] = {"steps": 20}
    (tmp_path / "profiles" / "test.yaml").write_text(yaml.safe_dump(profile))
    assert main(tiny, tmp_path, "--why", "a longer run, after a look", "--seen", "yes") == 0
    log = registration.read_log(tmp_path / "registered")
    assert log[["notebook", "changed", "why", "deciding_runs_seen"]].values.tolist() == [
        [NAME, "first registration: 1 claims", "first registration", "no"],
        [NAME, "design 'steps': 20, registered 10", "a longer run, after a look", "yes"]]


def test_a_pilot_is_registered_and_run_at_t_and_4t_and_gives_the_registration_its_power(tiny, tmp_path,
                                                                                          monkeypatch) -> None:
    assert main(tiny, tmp_path, "--pilot", "--seen", "no") == 0
    pilot = tmp_path / "pilot"
    for phase, steps in (("T", 10), ("4T", 40)):
        reg = json.loads((pilot / "registered" / phase / f"{NAME}.json").read_text())
        assert reg["design"] == {"seeds": [100, 101, 102], "steps": steps}
        log = registration.read_log(pilot / "registered" / phase)
        assert log.why.tolist() == [f"pilot at {phase}: power and settling of the tests"]
    at_t = pd.read_csv(pilot / "T" / "claims.csv").set_index("id").loc["ahead"]
    at_4t = pd.read_csv(pilot / "4T" / "claims.csv").set_index("id").loc["ahead"]
    assert (at_t.verdict, at_4t.verdict) == ("contradicted", "reproduced")
    assert not (tmp_path / "registered").exists()                  # the pilot registers only itself

    monkeypatch.setenv(registration.PILOT_ENV, str(pilot))         # register.py drops both after a pilot
    monkeypatch.setenv(registration.REGISTERED_ENV, str(tmp_path / "registered"))
    assert main(tiny, tmp_path, "--why", "with the pilot's power", "--seen", "no") == 0
    reg = json.loads((tmp_path / "registered" / f"{NAME}.json").read_text())
    assert reg["pilot"] == {"seeds": [100, 101, 102], "steps": 10} and reg["design"]["seeds"] == [0, 1, 2]
    test = reg["tests"]["ahead"]
    assert test["expected_width"] == pytest.approx(at_t.high - at_t.low)
    assert test["undecidable"].startswith("not settled: the pilot is contradicted at the run length T")


def test_a_pilot_entry_gives_both_phases(tiny, tmp_path, capsys) -> None:
    (tmp_path / "profiles" / "test.yaml").write_text(yaml.safe_dump({"pilots": {NAME: {"T": {"seed": 100}}}}))
    assert main(tiny, tmp_path, "--pilot", "--seen", "no") == 2
    assert "pilots.00_tiny must give the parameters of T and 4T" in capsys.readouterr().err
    assert not (tmp_path / "pilot").exists()


def test_a_profile_without_a_pilot_gives_the_null_margins() -> None:
    """The parameters a quick pilot sets to null are the margins it measures (02's margins, 09's
    sync_seed_range, ...). Every other profile that runs such a notebook without a pilot of its own
    sets them null too, so that registering it does not take the quick MLP's margins (a pilot source,
    refused there: `registration.record`)."""
    profiles = {p.stem: yaml.safe_load(p.read_text()) for p in (REPO / "reproduce" / "profiles").glob("*.yaml")}
    quick_pilots = profiles["quick"]["pilots"]
    margins = {nb: sorted(k for k, v in entry["T"].items() if v is None) for nb, entry in quick_pilots.items()}
    assert margins["08_ssd_sgd"] == ["margins"] and margins["00_baselines"] == ["margin_points"]
    missing = [f"{name}: {nb}.{key}" for name, profile in profiles.items() if name != "quick"
               for nb, params in (profile.get("notebooks") or {}).items()
               if nb not in (profile.get("pilots") or {})
               for key in margins.get(nb, []) if (params or {}).get(key, "unset") is not None]
    assert not missing, f"margins taken from the quick pilot: {missing}"

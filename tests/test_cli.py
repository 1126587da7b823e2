"""The `train` command line: one option per Config field, generated from the fields (help in
their metadata), the existing option names, the DropIT shorthand, and clear errors."""
from __future__ import annotations

import dataclasses
import typing

import pytest

from distsgd import cli

from distsgd.training import commands as run_commands

from distsgd.systems import commands as systems_commands
from distsgd.algorithms import REGISTRY
from distsgd.training.config import Config
from distsgd.errors import ConfigError


def _train_config(*argv: str) -> Config:
    return run_commands.config_from_args(cli.build_parser().parse_args(["train", *argv]))


def _flat(text: str) -> str:
    return "".join(text.split())      # argparse wraps lines, also after hyphens


def test_every_config_field_is_an_option_with_its_help(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--help"])
    shown = _flat(capsys.readouterr().out)
    hints = typing.get_type_hints(Config)
    argv, expected = [], {}
    for f in dataclasses.fields(Config):
        assert f.metadata["help"] and _flat(f.metadata["help"]) in shown, f.name
        kind = typing.get_origin(hints[f.name]) or hints[f.name]
        negated = kind is bool and f.default is True
        flag = f.metadata.get("flag") or "--" + "no-" * negated + f.name.replace("_", "-")
        assert flag in shown, f.name
        if kind is dict:
            argv += [flag, "key=[1,2]"]
            expected[f.name] = {"key": [1, 2]}
        elif kind is list:
            argv += [flag, "3", "5"]
            expected[f.name] = [3, 5]
        elif kind is bool:
            argv.append(flag)
            expected[f.name] = not f.default
        elif "choices" in f.metadata:
            argv += [flag, f.metadata["choices"][-1]]
            expected[f.name] = f.metadata["choices"][-1]
        else:
            value = kind(f.default) + 1 if kind in (int, float) else "x"
            argv += [flag, str(value)]
            expected[f.name] = value
    assert dataclasses.asdict(_train_config(*argv)) == expected     # every field set from the CLI


def test_defaults_and_existing_option_names() -> None:
    assert _train_config() == Config()
    c = _train_config("--algo", "local_sgd", "--set", "period=8", "--set", "ratio=0.5", "--model", "cnn",
                      "--model-opt", "width=2", "--data", "cifar10", "--data-opt", "download=true",
                      "--partition", "shards:2", "--nproc", "2", "--steps", "5", "--batch-size", "8",
                      "--lr", "0.5", "--optimizer", "adam", "--momentum", "0.9", "--weight-decay", "1e-4",
                      "--schedule", "cosine", "--warmup-steps", "2", "--seed", "3", "--net", "1GbE",
                      "--backend", "gloo", "--device", "cpu", "--launcher", "spawn", "--log-every", "2",
                      "--eval-every", "0", "--eval-samples", "64", "--eval-train", "--timeout", "9",
                      "--name", "n", "--out", "o", "--no-progress", "--force", "--json")
    assert c == Config(algo="local_sgd", params={"period": 8, "ratio": 0.5}, model="cnn",
                       model_options={"width": 2}, data="cifar10", data_options={"download": True},
                       partition="shards:2", nproc=2, steps=5, batch_size=8, lr=0.5, optimizer="adam",
                       momentum=0.9, weight_decay=1e-4, schedule="cosine", warmup_steps=2, seed=3,
                       net="1GbE", backend="gloo", device="cpu", launcher="spawn", log_every=2,
                       eval_every=0, eval_samples=64, eval_train=True, timeout_s=9.0, name="n", out="o",
                       progress=False)


@pytest.mark.parametrize("algo", sorted(REGISTRY))
def test_every_algorithm_of_list_runs_with_no_other_flag(algo: str) -> None:
    """`python -m distsgd train --algo X` is a valid run for every X of `list` (issue 36): an
    algorithm that needs a stagewise schedule brings it (Algorithm.default_schedule)."""
    config = _train_config("--algo", algo).validate()
    assert config.schedule == REGISTRY[algo].default_schedule
    assert config.stage_steps == (42 if config.schedule == "stagewise" else 0)     # 300 steps // 7


def test_stl_sgd_default_schedule_and_an_explicit_choice() -> None:
    """STL-SGD given no schedule trains on the stagewise one, T_0 from the run length after warm-up
    unless --stage-steps is given; a schedule the user names is checked, not replaced."""
    c = _train_config("--algo", "stl_sgd", "--steps", "100", "--warmup-steps", "2").validate()
    assert (c.schedule, c.stage_steps) == ("stagewise", 14)
    c = _train_config("--algo", "stl_sgd", "--stage-steps", "5").validate()
    assert (c.schedule, c.stage_steps) == ("stagewise", 5)
    assert _train_config("--algo", "stl_sgd", "--steps", "3").validate().stage_steps == 1
    with pytest.raises(ConfigError, match=r"invalid schedule='cosine'; allowed: step, multistep, stagewise"):
        _train_config("--algo", "stl_sgd", "--schedule", "cosine").validate()
    with pytest.raises(ConfigError, match=r"invalid stage_steps=0; allowed: an integer >= 1"):
        _train_config("--algo", "stl_sgd", "--schedule", "stagewise").validate()
    with pytest.raises(ConfigError, match=r"invalid stage_steps=8; allowed: 0"):
        _train_config("--algo", "ssgd", "--stage-steps", "8").validate()


def test_dropit_shorthand_is_the_model_option() -> None:
    assert _train_config("--dropit-gamma", "0.9").model_options == {"dropit": {"gamma": 0.9}}
    c = _train_config("--model-opt", "hidden=[32]", "--dropit-gamma", "0.5", "--dropit-strategy", "random")
    assert c.model_options == {"hidden": [32], "dropit": {"gamma": 0.5, "strategy": "random"}}
    assert _train_config("--model-opt", 'dropit={"gamma": 0.7}').model_options == {"dropit": {"gamma": 0.7}}
    assert _train_config("--dropit-gamma", "0.9", "--dropit-all-layers").model_options == {
        "dropit": {"gamma": 0.9, "all_layers": True}}


@pytest.mark.parametrize("argv,message", [
    (["--dropit-gamma", "1.5"], "invalid model_options.dropit.gamma=1.5; allowed: 0 <= gamma < 1"),
    (["--dropit-gamma", "0.5", "--dropit-strategy", "maxk"],
     "invalid model_options.dropit.strategy='maxk'; allowed: mink, random"),
    (["--model-opt", "width"], "invalid model_options='width'; allowed: KEY=VALUE"),
    (["--model", "mlp", "--model-opt", "width=3"], "invalid model_options='width'; allowed: hidden, dropit"),
])
def test_bad_values_fail_before_any_worker_naming_the_field(tmp_path, capsys, argv, message) -> None:
    assert cli.main(["train", *argv, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_bad_choice_is_refused_by_the_parser(capsys) -> None:
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["train", "--optimizer", "lbfgs"])
    assert "invalid choice: 'lbfgs'" in capsys.readouterr().err


def test_ranks_past_their_deadline_are_one_line_and_exit_1(monkeypatch, capsys) -> None:
    """`on_ranks`' TimeoutError (e.g. `bench --validate-emulation`'s ranks hanging) reaches the
    user as one line, not a traceback."""
    def hang(args):
        raise TimeoutError("local ranks still running after 300 s: stopped")

    monkeypatch.setattr(systems_commands, "cmd_profile", hang)
    assert cli.main(["profile", "--model", "mlp"]) == 1
    assert capsys.readouterr().err == "error: local ranks still running after 300 s: stopped\n"


# ---------------------------------------------------------------- profile
def test_profile_measures_and_projects_to_csv(tmp_path, capsys) -> None:
    from distsgd.systems.layer_profile import Profile

    out = tmp_path / "mlp.csv"
    assert cli.main(["profile", "--model", "mlp", "--model-opt", "hidden=[16]", "--input-shape", "3x8x8",
                     "--batch-size", "4", "--reps", "1", "--warmup", "0", "--threads", "1", "--out", str(out)]) == 0
    measured = Profile.from_csv(out)
    assert measured.source == "measured" and measured.input_shape == (3, 8, 8) and len(measured.layers) == 2
    assert "un-hooked median" in capsys.readouterr().out
    assert cli.main(["profile", "--model", "cnn", "--project", "V100-fp32", "--out", str(out)]) == 0
    projected = Profile.from_csv(out)
    assert projected.source == "flops-scaled" and projected.device == "V100-fp32"
    assert projected.input_shape == (3, 32, 32) and projected.batch_size == 16


@pytest.mark.parametrize("argv,message", [
    (["--model", "cnn", "--project", "H100"], "invalid project='H100'; allowed: V100-fp32"),
    (["--model", "cnn", "--device", "tpu"], "invalid device='tpu'; allowed: cpu, cuda"),
    (["--model", "cnn", "--input-shape", "3xa"], "invalid input_shape='3xa'"),
    (["--model", "nope"], "invalid model='nope'"),
    (["--model", "mlp", "--model-opt", "width=3"], "invalid model_options='width'"),
    (["--model", "cnn", "--batch-size", "0"], "invalid batch_size=0"),
])
def test_profile_bad_values_are_one_line_and_exit_code_2(tmp_path, capsys, argv, message) -> None:
    assert cli.main(["profile", *argv, "--out", str(tmp_path / "p.csv")]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1
    assert not (tmp_path / "p.csv").exists()
# ---------------------------------------------------------------------- simulate
def _profile_csv(tmp_path):
    from distsgd.systems.layer_profile import Layer, Profile

    layers = [Layer(f"layer{i}", 1e-3, 2e-3, 1e-4, [f"layer{i}.weight"], [4 * n], [n])
              for i, n in enumerate([300_000, 2_000_000, 50_000])]
    return Profile("toy", 32, (3, 32, 32), "cpu", "measured", "test", layers).to_csv(tmp_path / "toy_b32.csv")


def test_simulate_writes_a_row_per_configuration_and_traces(tmp_path, capsys) -> None:
    import json

    import pandas as pd

    out, traces = tmp_path / "sim.csv", tmp_path / "traces"
    rc = cli.main(["simulate", "--profile", str(_profile_csv(tmp_path)), "--algos", "ssgd,dear,kavg",
                   "--nprocs", "2,4", "--net", "10GbE,IB-EDR", "--net", "100Mbit,100us",
                   "--set", "period=2", "--csv", str(out), "--trace", str(traces)])
    assert rc == 0
    df = pd.read_csv(out)
    assert len(df) == 3 * 2 * 3
    assert {"algo", "nproc", "net", "step_s", "compute_s", "exposed_comm_s", "throughput", "batch_size",
            "model", "profile"} <= set(df.columns)
    assert set(df["net"]) == {"10GbE", "IB-EDR", "100Mbit,100us"}
    row = df[(df.algo == "ssgd") & (df.nproc == 4) & (df.net == "10GbE")].iloc[0]
    assert row.throughput == pytest.approx(32 * 4 / row.step_s)
    assert len(list(traces.glob("*.json"))) == len(df)
    assert json.loads(next(traces.glob("dear_p4_*.json")).read_text())["traceEvents"]
    assert "wrote" in capsys.readouterr().out


@pytest.mark.parametrize("argv, field", [
    (["--algos", "bogus"], "algos"),
    (["--nprocs", "2,x"], "nprocs"),
    (["--net", "fast"], "net"),
    (["--set", "nothing=1"], "set"),
    (["--gpus-per-node", "4", "--intra", "fast"], "intra"),
])
def test_simulate_bad_input_is_one_line_and_exit_2(tmp_path, capsys, argv, field) -> None:
    out = tmp_path / "sim.csv"
    rc = cli.main(["simulate", "--profile", str(_profile_csv(tmp_path)), "--csv", str(out), *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"invalid {field}" in err
    assert not out.exists()


def test_simulate_finds_the_committed_profile_by_model(tmp_path, capsys) -> None:
    from distsgd.systems.timeline.sweep import find_profile

    (tmp_path / "reproduce" / "layer_profiles" / "cpu").mkdir(parents=True)
    path = _profile_csv(tmp_path / "reproduce" / "layer_profiles" / "cpu")
    assert find_profile("toy", "cpu", root=tmp_path) == path
    assert find_profile("toy", "cpu", 32, root=tmp_path) == path
    with pytest.raises(cli.ConfigError, match="toy_b32"):
        find_profile("toy", "cpu", 64, root=tmp_path)
    rc = cli.main(["simulate", "--model", "nosuchmodel", "--csv", str(tmp_path / "x.csv")])
    assert rc == 2 and "invalid model" in capsys.readouterr().err

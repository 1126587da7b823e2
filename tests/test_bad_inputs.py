"""Every bad input is refused before any process starts, naming the field, with no traceback:
through the command line, `distsgd.run`, and a reproduction profile.

The config cases are command lines; each is fed to `cli.main` (exit status 2, the field named
on stderr, no run directory) and, as the Config they parse to, to `distsgd.run` (ConfigError
naming the field). A worker starting fails the test (`_no_workers`). The cases marked
``# worker`` were caught only inside the workers before the pre-flight (`distsgd.training.preflight`)
or, for non-finite numbers and unknown data options, not at all.
"""
from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

import distsgd
from distsgd import ConfigError, cli
from distsgd.training import commands as run_commands

REPO = Path(__file__).resolve().parent.parent
QUICK = ["--nproc", "2", "--steps", "2", "--no-progress"]

CASES: list[tuple[str, list[str], str]] = [
    # -- caught only by a worker before the pre-flight
    ("batch-over-shard", ["--batch-size", "720"], "batch_size"),                      # worker
    ("batch-over-label-shard", ["--batch-size", "720", "--partition", "shards"], "batch_size"),  # worker
    ("batch-over-dirichlet-rank", ["--nproc", "8", "--batch-size", "100", "--partition",
                                   "dirichlet:0.05"], "batch_size"),                   # worker
    ("cocod-weighted-batch", ["--algo", "cocod_sgd", "--set", "batch_weights=[1,9]",
                              "--batch-size", "400"], "batch_size"),                   # worker
    ("more-ranks-than-samples", ["--data", "synthetic-logistic", "--data-opt", "n=8",
                                 "--nproc", "16"], "nproc"),                           # worker
    ("cifar10-missing", ["--data", "cifar10", "--model", "cnn"], "data"),              # worker
    ("cifar100-missing", ["--data", "cifar100", "--model", "cnn"], "data"),            # worker
    ("imagenet-missing", ["--data", "imagenet", "--model", "cnn"], "data"),            # worker
    ("imagenet-empty-root", ["--data", "imagenet", "--data-opt", "root=EMPTY"], "data_options.root"),  # worker
    ("imagenet-no-val", ["--data", "imagenet", "--data-opt", "root=NOVAL"], "data_options.root"),     # worker
    ("imagenet-classes-differ", ["--data", "imagenet", "--data-opt", "root=MISMATCH"],
     "data_options.root"),                                                             # worker
    ("cifar-unknown-option", ["--data", "cifar10", "--data-opt", "foo=1"], "data_options"),          # worker
    ("cifar-download-not-bool", ["--data", "cifar10", "--data-opt", "download=yes"],
     "data_options.download"),                                                         # worker
    ("cifar-verify-not-bool", ["--data", "cifar10", "--data-opt", "verify=no"], "data_options.verify"),  # worker
    ("imagenet-image-size-0", ["--data", "imagenet", "--data-opt", "image_size=0"],
     "data_options.image_size"),                                                       # worker
    ("imagenet-num-workers-neg", ["--data", "imagenet", "--data-opt", "num_workers=-1"],
     "data_options.num_workers"),                                                      # worker
    # -- accepted silently before
    ("digits-root", ["--data-opt", "root=/tmp"], "data_options"),
    ("digits-download", ["--data-opt", "download=true"], "data_options"),
    ("imagenet-download", ["--data", "imagenet", "--data-opt", "download=true"], "data_options"),
    ("lr-inf", ["--lr", "inf"], "lr"),
    ("weight-decay-inf", ["--weight-decay", "inf"], "weight_decay"),
    ("weight-decay-nan", ["--weight-decay", "nan"], "weight_decay"),
    ("timeout-inf", ["--timeout", "inf"], "timeout_s"),
    ("timeout-nan", ["--timeout", "nan"], "timeout_s"),
    ("param-inf", ["--algo", "cocod_sgd", "--set", "sample_ms=Infinity"], "params.sample_ms"),
    ("param-list-nan", ["--algo", "cocod_sgd", "--set", "speeds=[1, NaN]"], "params.speeds[1]"),
    ("data-option-inf", ["--data", "synthetic-lsq", "--data-opt", "noise=Infinity"],
     "data_options.noise"),
    ("model-option-nan", ["--model-opt", 'dropit={"gamma": NaN}'], "model_options.dropit.gamma"),
    # -- refused before as well
    ("lr-nan", ["--lr", "nan"], "lr"),
    ("lr-negative", ["--lr", "-0.1"], "lr"),
    ("momentum-nan", ["--momentum", "nan"], "momentum"),
    ("momentum-one", ["--momentum", "1"], "momentum"),
    ("unknown-algo", ["--algo", "nope"], "algo"),
    ("nproc-0", ["--nproc", "0"], "nproc"),
    ("steps-0", ["--steps", "0"], "steps"),
    ("batch-0", ["--batch-size", "0"], "batch_size"),
    ("log-every-0", ["--log-every", "0"], "log_every"),
    ("eval-samples-0", ["--eval-samples", "0"], "eval_samples"),
    ("warmup-negative", ["--warmup-steps", "-1"], "warmup_steps"),
    ("seed-negative", ["--seed", "-1"], "seed"),
    ("unknown-data", ["--data", "svhn"], "data"),
    ("unknown-model", ["--model", "gpt"], "model"),
    ("bad-partition", ["--partition", "dirichlet:-1"], "partition"),
    ("bad-shards", ["--partition", "shards:0"], "partition"),
    ("bad-net", ["--net", "bandwidth=fast"], "net"),
    ("nccl-on-cpu", ["--backend", "nccl", "--device", "cpu"], "backend"),
    ("unknown-param", ["--algo", "ssgd", "--set", "period=4"], "params"),
    ("bad-param", ["--algo", "local_sgd", "--set", "period=0"], "params.period"),
    ("per-rank-list-length", ["--algo", "cocod_sgd", "--set", "batch_weights=[1,2,3]"],
     "params.batch_weights"),
    ("synthetic-unknown-option", ["--data", "synthetic-logistic", "--data-opt", "dimension=3"],
     "data_options"),
    ("unknown-model-option", ["--model-opt", "width=3"], "model_options"),
    ("malformed-assignment", ["--set", "period"], "params"),
    # -- the stagewise schedule (issue 16)
    ("stagewise-without-stage-steps", ["--schedule", "stagewise"], "stage_steps"),
    ("stage-steps-negative", ["--schedule", "stagewise", "--stage-steps", "-2"], "stage_steps"),
    ("stage-steps-without-stagewise", ["--stage-steps", "8"], "stage_steps"),
    ("stl-sgd-on-a-schedule-without-stages", ["--algo", "stl_sgd", "--schedule", "cosine"], "schedule"),
    # -- the multistep schedule (issue 34)
    ("multistep-without-milestones", ["--schedule", "multistep"], "milestones"),
    ("milestones-decreasing", ["--schedule", "multistep", "--milestones", "8", "4"], "milestones"),
    ("milestones-without-multistep", ["--milestones", "8"], "milestones"),
]
# Through `distsgd.run` only: values a command line cannot give.
RUN_ONLY: list[tuple[str, dict, str]] = [
    ("lr-bool", dict(lr=True), "lr"),
    ("lr-string", dict(lr="0.1"), "lr"),
    ("timeout-bool", dict(timeout_s=True), "timeout_s"),
    ("on-nan-unknown", dict(on_nan="ignore"), "on_nan"),
    ("tensorboard-not-bool", dict(tensorboard="yes"), "tensorboard"),
]
# Run by a subprocess too, end to end (the formerly failing kinds).
SUBPROCESS = ("batch-over-shard", "cocod-weighted-batch", "cifar10-missing", "imagenet-no-val",
              "cifar-unknown-option", "lr-inf")


@pytest.fixture
def data_dirs(tmp_path, monkeypatch) -> dict[str, str]:
    """An empty data root ($DISTSGD_DATA) and three malformed ImageNet-style roots."""
    monkeypatch.setenv("DISTSGD_DATA", str(tmp_path / "data"))
    roots = {name: tmp_path / name.lower() for name in ("EMPTY", "NOVAL", "MISMATCH")}
    for root in roots.values():
        root.mkdir()
    (roots["NOVAL"] / "train" / "cat").mkdir(parents=True)
    (roots["MISMATCH"] / "train" / "cat").mkdir(parents=True)
    (roots["MISMATCH"] / "val" / "dog").mkdir(parents=True)
    return {name: str(path) for name, path in roots.items()}


@pytest.fixture(autouse=True)
def _no_workers(monkeypatch):
    def launch(*args, **kwargs):
        raise AssertionError("a worker was started")
    monkeypatch.setattr(distsgd.training.runner, "launch", launch)


def _argv(argv: list[str], dirs: dict[str, str], out: Path) -> list[str]:
    """`train` with the case's options (root=NAME: that fixture directory) after `QUICK`."""
    swap = {f"root={name}": f"root={path}" for name, path in dirs.items()}
    return ["train", *QUICK, *(swap.get(a, a) for a in argv), "--out", str(out)]


@pytest.mark.parametrize("name,argv,field", CASES, ids=[c[0] for c in CASES])
def test_bad_command_line_and_run_fail_before_any_worker(name, argv, field, data_dirs, tmp_path,
                                                          capsys) -> None:
    full = _argv(argv, data_dirs, tmp_path / "out")
    assert cli.main(full) == 2
    err = capsys.readouterr().err
    assert f"invalid {field}=" in err and "allowed" in err, err
    assert not (tmp_path / "out").exists()
    if name == "malformed-assignment":
        return                                      # no Config: the command line itself is bad
    config = run_commands.config_from_args(cli.build_parser().parse_args(full))
    with pytest.raises(ConfigError) as info:
        distsgd.run(config)
    assert info.value.field == field
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name,fields,field", RUN_ONLY, ids=[c[0] for c in RUN_ONLY])
def test_bad_run_arguments_fail_before_any_worker(name, fields, field, tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        distsgd.run(out=str(tmp_path / "out"), progress=False, **fields)
    assert info.value.field == field
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", SUBPROCESS)
def test_bad_command_line_exits_2_without_traceback(name, data_dirs, tmp_path) -> None:
    argv, field = next((a, f) for n, a, f in CASES if n == name)
    out = subprocess.run([sys.executable, "-m", "distsgd", *_argv(argv, data_dirs, tmp_path / "out")],
                         capture_output=True, text=True, timeout=300, env=dict(os.environ))
    assert out.returncode == 2, out.stderr
    assert f"invalid {field}=" in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "out").exists()


def test_missing_dataset_names_the_path_searched_and_what_was_expected(data_dirs, tmp_path) -> None:
    with pytest.raises(ConfigError) as info:
        distsgd.run(data="cifar10", model="cnn", nproc=2, out=str(tmp_path / "out"))
    assert str(tmp_path / "data" / "cifar10" / "cifar-10-batches-py") in str(info.value)
    assert "data_batch_1" in str(info.value)
    with pytest.raises(ConfigError) as info:
        distsgd.run(data="imagenet", data_options={"root": data_dirs["NOVAL"]}, out=str(tmp_path / "out"))
    assert f"{data_dirs['NOVAL']}/val" in str(info.value) and "<class>/<image>" in str(info.value)


# ------------------------------------------------------------------ reproduction profiles

def _reproduce():
    """reproduce/run.py as a module (its dataclasses need it in sys.modules)."""
    if "reproduce_run" not in sys.modules:
        spec = importlib.util.spec_from_file_location("reproduce_run", REPO / "reproduce" / "run.py")
        sys.modules["reproduce_run"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules["reproduce_run"])
    return sys.modules["reproduce_run"]


PROFILES: list[tuple[str, str, int, str]] = [
    ("unknown-top-level-key", "notebook:\n  00_a: {x: 1}\n", 2, "unknown top-level key(s) notebook"),
    ("defaults-not-mapping", "defaults: [1, 2]\n", 2, "'defaults' must be a mapping"),
    ("notebooks-not-mapping", "notebooks: 3\n", 2, "'notebooks' must be a mapping"),
    ("notebook-entry-not-mapping", "notebooks:\n  00_a: [x]\n", 2, "notebooks.00_a must be a mapping"),
    ("not-yaml", "defaults: {x: 1\n", 2, "is not valid YAML"),
    ("not-a-mapping", "- 1\n- 2\n", 2, "expected a mapping"),
    ("unknown-notebook", "notebooks:\n  07_missing: {x: 1}\n", 2, "07_missing"),
    ("unknown-parameter", "defaults: {stepz: 10}\n", 1, "parameter 'stepz'"),
    ("unknown-notebook-parameter", "notebooks:\n  00_a: {lr: 1}\n", 1, "parameter 'lr'"),
]


@pytest.mark.parametrize("name,text,status,message", PROFILES, ids=[p[0] for p in PROFILES])
def test_bad_profile_is_refused_before_any_notebook(name, text, status, message, tmp_path,
                                                    capsys) -> None:
    import nbformat

    notebooks, profiles = tmp_path / "notebooks", tmp_path / "profiles"
    notebooks.mkdir()
    profiles.mkdir()
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    nb.cells.append(nbformat.v4.new_code_cell("x = 1", metadata={"tags": ["parameters"]}))
    nbformat.write(nb, notebooks / "00_a.ipynb")
    (profiles / "bad.yaml").write_text(text)
    code = _reproduce().main(["--profile", "bad", "--list", "--notebooks-dir", str(notebooks),
                              "--profiles-dir", str(profiles)])
    captured = capsys.readouterr()
    assert code == status
    assert message in captured.out + captured.err
    assert "Traceback" not in captured.out + captured.err


BENCH_CASES = [
    ("bench-unknown-net", ["--nets", "10GbE-like,5G"], "nets"),
    ("bench-unknown-schedule", ["--algos", "WFBP,Horovod"], "algos"),
    ("bench-unknown-model", ["--models", "mlp,alexnet"], "models"),
]


@pytest.mark.parametrize("name,argv,field", BENCH_CASES + [("bench-nccl-without-gpu", ["--backend", "nccl"], "backend")],
                         ids=[c[0] for c in BENCH_CASES] + ["bench-nccl-without-gpu"])
def test_bad_bench_arguments_fail_before_any_rank(name, argv, field, tmp_path, monkeypatch, capsys) -> None:
    """`python -m distsgd bench` refuses a bad argument with exit status 2 and one line naming the
    field, before any rank starts (an `on_ranks` call fails the test). Without a GPU,
    `--backend nccl` is such a bad argument."""
    from distsgd.systems import benchmark as bench_schedules

    if name == "bench-nccl-without-gpu" and __import__("torch").cuda.is_available():
        pytest.skip("this host has a GPU: nccl is allowed")

    def no_ranks(*args, **kwargs):
        raise AssertionError("a rank was started")

    monkeypatch.setattr(bench_schedules, "on_ranks", no_ranks)
    monkeypatch.setattr(bench_schedules, "on_this_rank", no_ranks)
    csv = tmp_path / "bench.csv"
    status = cli.main(["bench", *argv, "--csv", str(csv)])
    err = capsys.readouterr().err.strip()
    assert status == 2, err
    assert err.startswith(f"error: invalid {field}=") and len(err.splitlines()) == 1, err
    assert not csv.exists()

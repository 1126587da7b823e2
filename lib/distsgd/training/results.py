"""Run directories: their layout, the ranks' outputs merged at the end, and loading results.

A run directory `<results>/<name>-<hash>/` holds

    config.json    the validated Config (its hash names the directory)
    env.json       versions, git commit, the library's code version, host, devices
    metrics.csv    one row per logged step, ranks merged: counts summed over ranks, losses and
                   accuracies averaged over ranks, wall_s the slowest rank's
    summary.json   final evaluation and totals, the config hash and code version that made them,
                   the status ("finished", or "diverged" at the step recorded in "nonfinite");
                   written last. Strict JSON: a NaN or infinity is written as null (read back
                   as NaN by `read_summary`)
    comm.csv       every collective of every rank (the ledger), for systems analysis
    test_correct.pt  which test examples each rank's final model classifies correctly (bool
                   [ranks, examples]; classification only): `Result.test_correct`;
                   test_correct_evaluated.pt the same of the model evaluated at the last step
    model.pt       the final model's state_dict (rank 0)
    ranks/         per-rank raw outputs and logs
    checkpoints/   while the run is unfinished: where it resumes (`distsgd.training.checkpoint`)

`load_results(DIR)` reads every run directory below DIR into one pandas table (one row per run,
or with metrics=True one per run and logged step); `python -m distsgd results DIR` prints it.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..comm.ledger import Ledger
from .config import Config
from ..files import load_tensors, read_summary, save_tensors, write_csv_atomic, write_json_atomic
from .liveness import PID_FILE, status_of
from .metrics_log import SUMMED, merge_metrics, metrics_file, read_metrics
from .provenance import code_version

if TYPE_CHECKING:
    import torch

    from .divergence import NonFinite


# per model, the file of which test examples each rank classifies correctly (`Result.test_correct`)
TEST_CORRECT = {"final": "test_correct.pt", "evaluated": "test_correct_evaluated.pt"}


def read_config(run_dir: Path) -> Config:
    """The Config of a run directory (its config.json)."""
    return Config.from_dict(json.loads((run_dir / "config.json").read_text()))


def rank_file(name: str, rank: int) -> str:
    """A rank's own file of a run-level file `name`: test_correct.pt -> test_correct_rank3.pt."""
    stem, dot, suffix = name.partition(".")
    return f"{stem}_rank{rank}{dot}{suffix}"


def write_rank_outputs(run_dir: Path, rank: int, final: dict, ledger: Ledger,
                       test_correct: "dict[str, torch.Tensor | None] | None" = None) -> None:
    """A rank's final metrics, its ledger and, per model of `TEST_CORRECT`, which test examples
    it classifies correctly (its metrics rows are on disk already: `MetricsLog`)."""
    ranks = run_dir / "ranks"
    write_json_atomic(ranks / f"final_rank{rank}.json", final)
    ledger.write_csv(ranks / f"comm_rank{rank}.csv")
    for model, correct in (test_correct or {}).items():
        if correct is not None:
            save_tensors(ranks / rank_file(TEST_CORRECT[model], rank), correct)


def save_model(run_dir: Path, model: "torch.nn.Module") -> None:
    """The final model (rank 0's, identical on every rank after finalize for averaging methods)."""
    save_tensors(run_dir / "model.pt", {k: v.detach().cpu() for k, v in model.state_dict().items()})


def merge_ranks(run_dir: Path, world_size: int, config: Config,
                nonfinite: "NonFinite | None" = None) -> None:
    """Rank 0, after the final barrier: merge per-rank outputs into the run's files. `nonfinite`:
    the run's first non-finite value (`distsgd.training.divergence`); the summary records it, and the
    status "diverged" where the run stopped there (on_nan="stop")."""
    ranks = run_dir / "ranks"
    merged = merge_metrics([read_metrics(metrics_file(run_dir, r)) for r in range(world_size)])

    finals = [read_summary(ranks / f"final_rank{r}.json") for r in range(world_size)]
    summary: dict[str, Any] = {k: sum(f[k] for f in finals) / world_size for k in finals[0]}
    for col in SUMMED:
        summary[col] = sum(f[col] for f in finals)
    summary["train_s"] = max(f["train_s"] for f in finals)
    stopped = nonfinite is not None and config.on_nan == "stop"
    done = int(merged["step"].iloc[-1])             # config.steps unless the run diverged
    summary.update({
        "status": "diverged" if stopped else "finished",
        "config_hash": config.hash(), "code_version": code_version(),
        "algo": config.algo,
        "params": config.params, "nproc": world_size, "steps": done,
        "step_time_s": summary["train_s"] / done,
        "throughput_samples_s": float(merged["samples"].iloc[-1]) / summary["train_s"],
        "bytes_per_step": summary["comm_bytes"] / done,
        "max_rank_spread_final_train_loss": float(np.ptp([f["final_train_loss"] for f in finals])),
    })
    if nonfinite is not None:
        summary["nonfinite"] = nonfinite.to_dict()
    comm = pd.concat([pd.read_csv(ranks / f"comm_rank{r}.csv").assign(rank=r)
                      for r in range(world_size)], ignore_index=True)
    write_csv_atomic(run_dir / "comm.csv", comm)
    for name in TEST_CORRECT.values():
        if (ranks / rank_file(name, 0)).exists():
            import torch
            save_tensors(run_dir / name, torch.stack([load_tensors(ranks / rank_file(name, r))
                                                      for r in range(world_size)]))
    write_csv_atomic(run_dir / "metrics.csv", merged)
    write_json_atomic(run_dir / "summary.json", summary)   # last: marks the run finished


@dataclass
class Result:
    """A finished run, read back from its directory."""

    path: Path
    config: Config
    summary: dict[str, Any]
    metrics: pd.DataFrame

    @classmethod
    def load(cls, path: Path | str) -> "Result":
        path = Path(path)
        return cls(path, read_config(path), read_summary(path / "summary.json"),
                   pd.read_csv(path / "metrics.csv"))

    @property
    def env(self) -> dict[str, Any]:
        return json.loads((self.path / "env.json").read_text())

    def state_dict(self) -> dict[str, Any]:
        """The final model's parameters and buffers (`load_tensors` of model.pt)."""
        return load_tensors(self.path / "model.pt")

    def comm(self) -> pd.DataFrame:
        """Every collective of every rank (the ledger)."""
        return pd.read_csv(self.path / "comm.csv")

    def test_correct(self, model: str = "final") -> np.ndarray:
        """Per test example (in the split's order), the fraction of ranks whose model classifies
        it correctly: 0 or 1 where the ranks hold one model. `model`: "final", the model after
        `finalize` (the mean is summary["final_test_acc"]), or "evaluated", the model the
        algorithm evaluates during the run (`Algorithm.evaluating`, e.g. SSD-SGD's local models)
        at the last step (the mean is the last metrics row's test_acc; a run with eval_every = 0
        has none). Paired accuracy tests compare these between runs (`claims.paired_accuracy_interval`)."""
        if model not in TEST_CORRECT:
            raise ValueError(f"test_correct model {model!r}: allowed values are {', '.join(TEST_CORRECT)}")
        path = self.path / TEST_CORRECT[model]
        if not path.exists():
            raise FileNotFoundError(f"{path}: no per-example test results (a regression task, a run without "
                                    "evaluations, or one finished by an older version of distsgd)")
        return load_tensors(path).double().mean(0).numpy()

    def step_seconds(self, after: int = 0, waited: bool = True) -> pd.Series:
        """Seconds per step of each logged interval (its wall-clock time over its steps), indexed
        by the interval's last step, for the intervals that end after step `after` (a warm-up to
        leave out); the first logged row only starts the clock. `waited` False: the wall-clock time
        less the time the ranks were blocked waiting for collectives (the ledger's comm_wait_s, the
        mean over ranks): the step's own compute and the communication it did not wait for."""
        m = self.metrics
        wall = m.wall_s if waited else m.wall_s - m.comm_wait_s
        rate = pd.Series((wall.diff() / m.step.diff()).to_numpy(), index=m.step.to_numpy()).iloc[1:]
        return rate[rate.index > after]

    def steady_step_time(self, waited: bool = True) -> float:
        """Median seconds per step over the logged intervals (`step_seconds`, from the first logged
        step on; `waited` as there): unlike summary["step_time_s"] (training time / steps), not
        moved by the first steps' set-up (connections, caches) or by one stall of a shared machine.
        A run with one logged interval: the summary's training time (less its wait) over its steps."""
        rate = self.step_seconds(waited=waited)
        if len(rate):
            return float(rate.median())
        s = self.summary
        return float(s["step_time_s"] if waited else (s["train_s"] - s["comm_wait_s"]) / s["steps"])

    def hosts(self) -> list[str]:
        """The distinct hosts its ranks ran on, sorted (each rank's pid file, RUN_DIR/ranks, names
        its host); [] for a run whose ranks left none."""
        names = [(self.path / "ranks" / PID_FILE.format(rank=r)) for r in range(self.config.nproc)]
        return sorted({p.read_text().split()[0] for p in names if p.is_file() and p.read_text().split()})

    @property
    def label(self) -> str:
        """A short human label: algo plus non-default parameters."""
        extras = ",".join(f"{k}={v}" for k, v in self.config.params.items()
                          if k in ("period", "ratio", "gamma"))
        return self.config.name or (f"{self.config.algo}({extras})" if extras else self.config.algo)

    def __repr__(self) -> str:
        s = self.summary
        return (f"Result({self.label}, steps={s['steps']}, final_train_loss={s['final_train_loss']:.4f}, "
                f"final_test_acc={s['final_test_acc']:.4f}, comm_bytes={s['comm_bytes']:.3g}, "
                f"train_s={s['train_s']:.1f}, path={self.path})")


# Summary keys that repeat the config (the config's columns hold them) or are renamed.
_SUMMARY_SKIP = ("algo", "params", "nproc", "status", "config_hash", "code_version")


_ENV_COLUMNS = ("git_commit", "git_dirty", "torch", "python", "hostname", "cpu_count", "cuda_available")


def find_runs(directory: Path | str) -> list[Path]:
    """The run directories (those holding a config.json) at or anywhere below `directory`, sorted."""
    root = Path(directory)
    return sorted(p.parent for p in root.rglob("config.json")
                  if not {"ranks", "checkpoints"} & set(p.relative_to(root).parts[:-1]))


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested dicts as one level of dotted keys: {"params": {"period": 4}} -> {"params.period": 4}."""
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(flatten(v, f"{prefix}{k}."))
        elif not isinstance(v, dict):
            out[f"{prefix}{k}"] = v
    return out


def run_status(run_dir: Path) -> str:
    """`status_of`'s status, with "unfinished" for "running" (still running, or not started)."""
    status = status_of(run_dir)[0]
    return "unfinished" if status == "running" else status


def _run_row(run_dir: Path) -> dict[str, Any]:
    """One row of `load_results`: run, status, the config's fields (dicts flattened: params.period),
    the summary's totals (steps_done: the steps it ran), hash, code version, env.* and path."""
    config = read_config(run_dir)
    summary = read_summary(run_dir / "summary.json") if (run_dir / "summary.json").is_file() else {}
    env = json.loads((run_dir / "env.json").read_text()) if (run_dir / "env.json").is_file() else {}
    row: dict[str, Any] = {"run": run_dir.name, "status": run_status(run_dir)}
    row.update(flatten(config.to_dict()))
    for key, value in summary.items():
        if key not in _SUMMARY_SKIP:
            row.update(flatten({"steps_done" if key == "steps" else key: value}))
    row["config_hash"] = summary.get("config_hash", config.hash())
    row["code_version"] = summary.get("code_version", env.get("code_version"))
    row.update({f"env.{k}": env[k] for k in _ENV_COLUMNS if k in env})
    row["path"] = str(run_dir)
    return row


def load_results(directory: Path | str, metrics: bool = False) -> pd.DataFrame:
    """Every run under `directory` (searched recursively: a results root, a notebook's `out`) as
    one tidy pandas table, for your own analysis and plots.

    One row per run: ``run`` (the directory's name), ``status`` ("finished", "diverged",
    "stopped", "failed", "unfinished": `run_status`), every `Config` field as a column (``algo``, ``nproc``, ``lr``, ...;
    dict fields flattened with dots: ``params.period``, ``model_options.hidden``), the summary's
    final evaluation and totals (``final_train_loss``, ``final_test_acc``, ``comm_bytes``,
    ``train_s``, ``step_time_s``, ..., ``steps_done``: the steps it ran; NaN for a run without a
    summary), ``config_hash``, ``code_version``, ``env.*`` (git commit, torch, host) and ``path``.

    ``metrics=True``: instead, the long table of every logged step (metrics.csv) of every run that
    has one (finished or diverged), one row per run and step, with the run's ``run``, ``status``
    and config columns first (a logged column named like a config field gets ``_at_step``:
    ``lr_at_step`` is the scheduled learning rate, ``lr`` the config's peak), ready for e.g. ``seaborn.lineplot(df, x="step", y="train_loss",
    hue="algo")``.

    Raises ConfigError when `directory` does not exist or holds no run."""
    root = Path(directory)
    if not root.is_dir():
        from ..errors import ConfigError
        raise ConfigError("directory", str(root), hint="no such directory")
    runs = find_runs(root)
    if not runs:
        from ..errors import ConfigError
        raise ConfigError("directory", str(root),
                          hint="holds no run: no folder with a config.json, as distsgd.run writes, at or below it")
    rows = [_run_row(r) for r in runs]
    if not metrics:
        return _ordered(pd.DataFrame(rows))
    fields = {f.name for f in dataclasses.fields(Config)}
    frames = []
    for run_dir, row in zip(runs, rows):
        if (run_dir / "metrics.csv").is_file():
            steps = pd.read_csv(run_dir / "metrics.csv")
            steps = steps.rename(columns={c: f"{c}_at_step" for c in steps.columns if c in fields})
            ids = {k: v for k, v in row.items() if k in ("run", "status") or k.split(".")[0] in fields}
            frames.append(pd.concat([pd.DataFrame({k: [v] * len(steps) for k, v in ids.items()},
                                                  index=steps.index), steps], axis=1))
    if not frames:
        return pd.DataFrame(columns=["run", "status", *sorted(fields), "step"])
    return _ordered(pd.concat(frames, ignore_index=True))


def _ordered(df: pd.DataFrame) -> pd.DataFrame:
    """Columns in a fixed order: run, status, the config's fields in Config's order (a dict field's
    keys sorted in its place), then the rest as found (totals, or the logged metrics), then
    config_hash, code_version, env.*, path."""
    head = ["run", "status"]
    for f in dataclasses.fields(Config):
        head += [f.name] if f.name in df else sorted(c for c in df.columns if c.startswith(f.name + "."))
    tail = [c for c in ("config_hash", "code_version") if c in df]
    tail += [c for c in df.columns if c.startswith("env.")] + (["path"] if "path" in df else [])
    return df[[*head, *(c for c in df.columns if c not in head and c not in tail), *tail]]

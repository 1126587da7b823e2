"""Seaborn figures shared by the notebooks: curves of many runs against steps, bytes, time."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Mapping

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from ..training.results import Result

AXES = {
    "step": "iteration",
    "wall_s": "wall-clock time (s)",
    "comm_bytes": "bytes sent, all ranks",
    "samples": "samples processed",
    "epoch": "epoch",
}
METRICS = {"train_loss": "training loss", "test_loss": "test loss", "test_acc": "test accuracy"}


Runs = Iterable[Result] | Mapping[str, Result]


def tidy(results: Runs, label: str = "label") -> pd.DataFrame:
    """All runs' metrics in one long table with a `label` column naming the run: the mapping's
    keys when `results` is a {label: run} mapping, else each run's own label."""
    pairs = results.items() if isinstance(results, Mapping) else ((r.label, r) for r in results)
    frames = [r.metrics.assign(**{label: name}) for name, r in pairs]
    return pd.concat(frames, ignore_index=True)


def curves(results: Runs, y: str = "train_loss",
           xs: tuple[str, ...] = ("step", "comm_bytes", "wall_s"), logy: bool = False,
           title: str = "", path: Path | None = None) -> plt.Figure:
    """One panel per x axis, one line per run (labelled by the keys of a {label: run} mapping);
    saved to `path` (PNG) if given."""
    df = tidy(results).dropna(subset=[y])
    sns.set_theme(style="whitegrid", context="notebook")
    fig, axes = plt.subplots(1, len(xs), figsize=(5 * len(xs), 3.8), squeeze=False)
    for ax, x in zip(axes[0], xs):
        sns.lineplot(data=df, x=x, y=y, hue="label", ax=ax, legend=ax is axes[0][-1])
        ax.set_xlabel(AXES.get(x, x))
        ax.set_ylabel(METRICS.get(y, y))
        if logy:
            ax.set_yscale("log")
    if axes[0][-1].get_legend() is not None:
        sns.move_legend(axes[0][-1], "upper left", bbox_to_anchor=(1.02, 1), title=None)
    if title:
        fig.suptitle(title)
    return _finish(fig, path)


def bars(df: pd.DataFrame, x: str, y: str, hue: str | None = None, title: str = "",
         ylabel: str = "", path: Path | None = None,
         reference: tuple[float, str] | None = None) -> plt.Figure:
    """A bar chart of a summary table (e.g. bytes per step or time per step per method);
    `reference` = (value, label) draws a dashed horizontal line, e.g. a claim's threshold."""
    sns.set_theme(style="whitegrid", context="notebook")
    fig, ax = plt.subplots(figsize=(6, 3.8))
    sns.barplot(data=df, x=x, y=y, hue=hue, ax=ax)
    if reference is not None:
        ax.axhline(reference[0], color="black", linestyle="--", linewidth=1, label=reference[1])
        ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1))   # outside: bars stay visible
    ax.set_ylabel(ylabel or y)
    ax.set_xlabel("")
    ax.tick_params(axis="x", rotation=20)
    if title:
        ax.set_title(title)
    return _finish(fig, path)


def _finish(fig: plt.Figure, path: Path | None) -> plt.Figure:
    """Lay `fig` out and save it to `path` (when given) at the kit's resolution."""
    fig.tight_layout()
    if path is not None:
        fig.savefig(path, dpi=120, bbox_inches="tight")
    return fig

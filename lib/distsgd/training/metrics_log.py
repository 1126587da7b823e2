"""A rank's metrics rows as they are logged (`MetricsLog`: appended and flushed, so a crash keeps
them), read back while a run is running or after it failed, merged over ranks by step, and
mirrored to TensorBoard (`--tensorboard`)."""
from __future__ import annotations

import io
import math
import os
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from ..files import write_text_atomic


SUMMED = ("comm_bytes", "collectives", "global_reductions", "local_reductions")


def metrics_file(run_dir: Path, rank: int) -> Path:
    """Rank `rank`'s metrics rows, appended as they are logged (`MetricsLog`)."""
    return run_dir / "ranks" / f"metrics_rank{rank}.csv"


class MetricsLog:
    """One rank's metrics as they come: RUN_DIR/ranks/metrics_rank<r>.csv, its header written
    with the first row, each row appended and flushed as it is logged, so that a crash keeps
    every row logged before it and `python -m distsgd show` reads a running or failed run. The
    end-of-run merge (`merge_ranks`) reads these files. A checkpoint carries the file's text as
    it was at its step (`snapshot`), and a resumed run puts that text back (`restore`): rows a
    crashed attempt logged after the checkpoint are gone, so a resumed run's rows are an
    uninterrupted run's."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.columns: list[str] | None = None
        self._file: Any = None

    def append(self, row: dict[str, Any]) -> None:
        """Write `row` (the columns of the first row, in its order) and flush it to the OS."""
        if self._file is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a", newline="")
            if self.columns is None:
                self.columns = list(row)
                self._file.write(",".join(self.columns) + "\n")
        if list(row) != self.columns:
            raise ValueError(f"metrics row with columns {list(row)}, the file has {self.columns}")
        self._file.write(",".join(_csv_value(row[c]) for c in self.columns) + "\n")
        self._file.flush()

    def snapshot(self) -> str:
        """The file's text now (fsynced first: a checkpoint never names rows the disk lacks)."""
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
        return self.path.read_text() if self.path.exists() else ""

    def restore(self, text: str) -> None:
        """Replace the file by `text` (a `snapshot`); the next rows are appended after it."""
        self.close()
        write_text_atomic(self.path, text)
        header = text.split("\n", 1)[0]
        self.columns = header.split(",") if header else None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _csv_value(value: Any) -> str:
    """One CSV field: numbers as Python writes them (the shortest text that reads back the same
    float; nan, inf), anything else quoted where it holds a comma or a quote."""
    if isinstance(value, (bool, int, float, np.number)):
        return repr(float(value)) if isinstance(value, (float, np.floating)) else str(value)
    text = str(value)
    if any(ch in text for ch in ',"\n'):
        text = '"' + text.replace('"', '""') + '"'
    return text


def read_metrics(path: Path) -> pd.DataFrame:
    """A rank's metrics file (`MetricsLog`), of a finished, running or failed run: a last line
    still being written (no newline yet) is left out."""
    text = path.read_text()
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    return pd.read_csv(io.StringIO(text)) if text.strip() else pd.DataFrame()


def board_writer(run_dir: Path, start: int) -> Any:
    """Rank 0's TensorBoard writer (`--tensorboard`) into RUN_DIR/tensorboard. A run resumed at
    step `start` purges the scalars its crashed attempt wrote after that step."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:            # validated before the run: only a changed environment
        from .config import TENSORBOARD_HINT
        raise ImportError(f"--tensorboard {TENSORBOARD_HINT}") from e
    return SummaryWriter(str(run_dir / "tensorboard"), purge_step=start + 1 if start else None)


def board_scalars(board: Any, row: dict[str, Any]) -> None:
    """A logged row as scalars, one tag per column, at its step (NaNs, no evaluation, left out)."""
    for key, value in row.items():
        if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
            board.add_scalar(key, value, row["step"])
    board.flush()


def merge_metrics(per_rank: list[pd.DataFrame]) -> pd.DataFrame:
    """Rows of every rank merged by step: counts and samples summed over ranks, wall_s the
    slowest rank's, epoch and lr rank 0's, the rest averaged."""
    stacked = pd.concat(per_rank, keys=range(len(per_rank)), names=["rank", "row"])
    grouped = stacked.groupby("step", sort=True)
    merged = grouped.mean(numeric_only=True)
    for col in (*SUMMED, "samples"):
        merged[col] = grouped[col].sum()
    merged["wall_s"] = grouped["wall_s"].max()
    for col in ("epoch", "lr"):
        merged[col] = per_rank[0].set_index("step")[col]
    return merged.reset_index()

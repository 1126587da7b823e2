"""Files that readers never see half-written: atomic writes of text, strict JSON, CSV and tensor
files (a temporary file in the same directory, then a rename), and reading them back safely."""
from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and rename, so readers never see half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode())


def write_json_atomic(path: Path, obj: Any) -> None:
    """`obj` as strict JSON: a NaN or an infinity (a diverged run's loss) is written as null."""
    text = json.dumps(finite_or_null(obj), indent=2, sort_keys=True, default=str, allow_nan=False)
    write_text_atomic(path, text + "\n")


def read_summary(path: Path) -> dict[str, Any]:
    """A summary written by `write_json_atomic` (a run's, or a rank's final metrics): its
    top-level nulls, which are NaNs (e.g. the test accuracy of a regression), read back as NaN."""
    return {k: math.nan if v is None else v for k, v in json.loads(path.read_text()).items()}


def finite_or_null(obj: Any) -> Any:
    """`obj` with every non-finite float, in any nested dict, list or tuple, replaced by None."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite_or_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [finite_or_null(v) for v in obj]
    return obj


def write_csv_atomic(path: Path, df: pd.DataFrame) -> None:
    write_text_atomic(path, df.to_csv(index=False))


def save_tensors(path: Path, obj: Any) -> None:
    """Tensors and plain containers to `path` with torch.save, atomically (a temporary file in the
    same directory, then a rename): readers (`load_tensors`) never see half a file."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    torch.save(obj, tmp)
    os.replace(tmp, path)


def load_tensors(path: Path | str) -> dict[str, Any]:
    """A file saved by the kit (model.pt, a checkpoint), on the CPU, read without running code: only
    tensors and plain containers are accepted (``weights_only=True``), so a tampered file that
    carries a pickled callable is refused with `pickle.UnpicklingError`, never executed."""
    import torch

    return torch.load(path, map_location="cpu", weights_only=True)

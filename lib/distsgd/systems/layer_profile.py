"""Layer profiles: per-layer compute times and gradient bytes of one model, in backward order.

A profile is what the timeline simulator (`distsgd.systems.timeline`) needs of a model: for each layer,
in the order backward produces the gradients, its forward, backward and optimizer-update time
and the bytes of each of its gradient tensors. It is stored as a tidy CSV, one row per
*parameter tensor*, rows in backward order (row 0 = the first gradient ready = a tensor of the
last layer), with the columns `COLUMNS`:

- model, batch_size, input_shape ("3x32x32", "64"), device ("cpu", "cuda", or a projected
  device such as "V100-fp32"), source ("measured" | "flops-scaled"), machine (free text: CPU or
  GPU, torch and CUDA versions, threads; for a projection the calibration and its source);
- order (0..n-1), layer (module qualified name), tensor (parameter qualified name), numel,
  grad_bytes;
- forward_s, backward_s, update_s, forward_flops, backward_flops: these belong to the *layer*:
  written on the layer's first row in backward order and 0 on its other rows, so that a
  column's sum over the rows is the whole model's value.

`Profile.from_csv(path)` reads one, `Profile.to_csv(path)` writes one; `Profile.layers` are the
layers in backward order (`Layer`: name, times, FLOPs, tensor names and bytes).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from ..errors import ConfigError

__all__ = ["COLUMNS", "SOURCES", "Layer", "Profile", "format_shape", "parse_shape"]

META = ["model", "batch_size", "input_shape", "device", "source", "machine"]
TENSOR = ["order", "layer", "tensor", "numel", "grad_bytes"]
LAYER = ["forward_s", "backward_s", "update_s", "forward_flops", "backward_flops"]
COLUMNS = META + TENSOR + LAYER
SOURCES = ("measured", "flops-scaled")


def format_shape(shape: tuple[int, ...]) -> str:
    """(3, 32, 32) -> "3x32x32"."""
    return "x".join(str(int(s)) for s in shape)


def parse_shape(text: str) -> tuple[int, ...]:
    """"3x32x32" -> (3, 32, 32); ConfigError for anything else."""
    try:
        shape = tuple(int(s) for s in str(text).split("x"))
    except ValueError:
        raise ConfigError("input_shape", text, "positive integers joined by x, e.g. 3x32x32 or 64") from None
    if not shape or min(shape) < 1:
        raise ConfigError("input_shape", text, "positive integers joined by x, e.g. 3x32x32 or 64")
    return shape


@dataclass(frozen=True)
class Layer:
    """One layer (a module owning parameters) of a profile: its times and FLOPs per iteration and
    its gradient tensors, in the order backward produces them."""

    name: str
    forward_s: float
    backward_s: float
    update_s: float
    tensors: list[str]
    tensor_bytes: list[int]
    tensor_numel: list[int]
    forward_flops: float = 0.0
    backward_flops: float = 0.0

    @property
    def grad_bytes(self) -> int:
        """Bytes of all the layer's gradients."""
        return sum(self.tensor_bytes)

    @property
    def compute_s(self) -> float:
        """Forward + backward + update seconds."""
        return self.forward_s + self.backward_s + self.update_s


@dataclass(frozen=True)
class Profile:
    """A model's layer profile (see the module docstring); `layers` in backward order."""

    model: str
    batch_size: int
    input_shape: tuple[int, ...]
    device: str
    source: str
    machine: str
    layers: list[Layer] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ConfigError("source", self.source, SOURCES)

    # ------------------------------------------------------------------ totals
    @property
    def forward_s(self) -> float:
        return sum(layer.forward_s for layer in self.layers)

    @property
    def backward_s(self) -> float:
        return sum(layer.backward_s for layer in self.layers)

    @property
    def update_s(self) -> float:
        return sum(layer.update_s for layer in self.layers)

    @property
    def compute_s(self) -> float:
        """Seconds of one iteration without communication: forward + backward + update."""
        return self.forward_s + self.backward_s + self.update_s

    @property
    def forward_flops(self) -> float:
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def backward_flops(self) -> float:
        return sum(layer.backward_flops for layer in self.layers)

    @property
    def grad_bytes(self) -> int:
        """Bytes of the whole gradient."""
        return sum(layer.grad_bytes for layer in self.layers)

    @property
    def tensor_bytes(self) -> list[int]:
        """Bytes of every gradient tensor, in backward order."""
        return [b for layer in self.layers for b in layer.tensor_bytes]

    def scaled(self, compute_s: float) -> Profile:
        """This profile with every time multiplied by one factor so that `compute_s` is the
        given total (the proportions between layers and phases are kept)."""
        if not compute_s > 0:
            raise ConfigError("compute_s", compute_s, "a positive number of seconds")
        factor = compute_s / self.compute_s
        layers = [dataclasses.replace(layer, forward_s=layer.forward_s * factor,
                                      backward_s=layer.backward_s * factor,
                                      update_s=layer.update_s * factor) for layer in self.layers]
        return dataclasses.replace(self, layers=layers,
                                   machine=f"{self.machine}; times scaled x{factor:.6g}")

    # ------------------------------------------------------------------ tidy table
    def to_frame(self) -> pd.DataFrame:
        """The tidy table: one row per gradient tensor in backward order (`COLUMNS`)."""
        meta = {"model": self.model, "batch_size": self.batch_size,
                "input_shape": format_shape(self.input_shape), "device": self.device,
                "source": self.source, "machine": self.machine}
        rows = []
        for layer in self.layers:
            for i, (tensor, nbytes, numel) in enumerate(zip(layer.tensors, layer.tensor_bytes,
                                                            layer.tensor_numel)):
                first = i == 0
                rows.append({**meta, "order": len(rows), "layer": layer.name, "tensor": tensor,
                             "numel": numel, "grad_bytes": nbytes,
                             **{c: getattr(layer, c) if first else 0 for c in LAYER}})
        return pd.DataFrame(rows, columns=COLUMNS)

    @classmethod
    def from_frame(cls, df: pd.DataFrame) -> Profile:
        """A profile from its tidy table; ConfigError if columns are missing, the metadata is not
        one value per column, or the rows are not in order 0..n-1."""
        missing = [c for c in COLUMNS if c not in df.columns]
        if missing:
            raise ConfigError("profile", "table", COLUMNS, f"missing columns: {', '.join(missing)}")
        if df.empty:
            raise ConfigError("profile", "table", hint="no rows")
        for column in META:
            if df[column].nunique(dropna=False) != 1:
                raise ConfigError(f"profile.{column}", sorted(map(str, df[column].unique())),
                                  hint="a profile holds one model on one device: one value per file")
        if list(df["order"]) != list(range(len(df))):
            raise ConfigError("profile.order", list(df["order"])[:8], "0, 1, ..., n-1 in row order")
        layers: dict[str, dict] = {}
        for row in df.itertuples(index=False):
            layer = layers.setdefault(row.layer, {"name": str(row.layer), "tensors": [], "tensor_bytes": [],
                                                  "tensor_numel": [],
                                                  **{c: float(getattr(row, c)) for c in LAYER}})
            layer["tensors"].append(str(row.tensor))
            layer["tensor_bytes"].append(int(row.grad_bytes))
            layer["tensor_numel"].append(int(row.numel))
        first = df.iloc[0]
        return cls(model=str(first["model"]), batch_size=int(first["batch_size"]),
                   input_shape=parse_shape(first["input_shape"]), device=str(first["device"]),
                   source=str(first["source"]), machine=str(first["machine"]),
                   layers=[Layer(**layer) for layer in layers.values()])

    def to_csv(self, path: str | Path) -> Path:
        """Write the tidy CSV (parent directories created); returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.to_frame().to_csv(path, index=False)
        return path

    @classmethod
    def from_csv(cls, path: str | Path) -> Profile:
        """Read a profile written by `to_csv`."""
        text = {c: str for c in META + ["layer", "tensor"] if c != "batch_size"}
        return cls.from_frame(pd.read_csv(path, dtype=text, keep_default_na=False))

"""Which entries of a layer input DropIT keeps for backward, and how the input is rebuilt.

DropIT (Chen et al., "DropIT: Dropping Intermediate Tensors for Memory-Efficient DNN Training",
ICLR 2023, arXiv 2202.13808, Sec. 3) caches, instead of the whole input ``x`` of a fully connected
or convolutional layer, only ``k`` of its entries. They are chosen over the whole tensor, batch
dimension included (``x.reshape(-1)``), and stored as their values plus int32 positions. Backward
rebuilds a zero-filled ``x̂`` with those values in place (the paper's "recovery by zero padding").

Count convention (the authors' ``select_mink`` in ``dropit/dropiter.py``): ``k = int(numel · (1 - γ))``,
truncated, in the same binary floating-point arithmetic, so that a layer keeps exactly as many
entries as in the authors' runs: ``int(1000 · (1 - 0.9)) = 99`` (``1 - 0.9`` is
``0.09999999999999998`` in binary), ``int(91 · 0.5) = 45``. A tensor with ``numel · (1 - γ) < 1``
keeps nothing, so its weight gradient is zero, as in the authors' code.

Strategies (`STRATEGIES`):

- ``mink``: keep the ``k`` entries of largest ``|x|``, i.e. drop the min-k (the paper's method).
- ``random``: keep ``k`` entries drawn uniformly without replacement from torch's global generator,
  not rescaled. The authors' random baseline (``vrandom``) keeps each entry independently with
  probability 1 - γ; a fixed count gives exactly min-k's memory at the same γ, so the two differ
  only in *which* entries they keep.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

STRATEGIES = ("mink", "random")
MAX_NUMEL = 2**31 - 1              # positions are stored as int32


def check_gamma(gamma: float) -> None:
    """Raise ValueError unless 0 <= gamma < 1."""
    if not (isinstance(gamma, (int, float)) and 0 <= gamma < 1):
        raise ValueError(f"DropIT gamma (drop ratio) must satisfy 0 <= gamma < 1, got {gamma!r}")


def check_strategy(strategy: str) -> None:
    """Raise ValueError unless `strategy` is one of `STRATEGIES`."""
    if strategy not in STRATEGIES:
        raise ValueError(f"DropIT strategy must be one of {STRATEGIES}, got {strategy!r}")


def kept_count(numel: int, gamma: float) -> int:
    """How many of `numel` entries are kept at drop ratio `gamma`: ``int(numel * (1 - gamma))``,
    the authors' truncation in floating point (module docstring)."""
    return int(numel * (1 - gamma))


def drop(x: Tensor, gamma: float, strategy: str) -> tuple[Tensor, Tensor]:
    """The kept entries of `x`: (values, int32 positions in ``x.reshape(-1)``), unordered."""
    if x.numel() > MAX_NUMEL:
        raise ValueError(f"DropIT stores int32 positions: a tensor of {x.numel()} entries is too large")
    flat = x.reshape(-1)
    k = kept_count(flat.numel(), gamma)
    if strategy == "mink":
        positions = flat.abs().topk(k, sorted=False).indices
    else:
        positions = torch.randperm(flat.numel(), device=flat.device)[:k]
    return flat[positions], positions.to(torch.int32)


def recover(values: Tensor, positions: Tensor, shape: torch.Size) -> Tensor:
    """The zero-filled input: `values` at `positions` of a zero tensor of `shape`."""
    flat = values.new_zeros(math.prod(shape))
    flat[positions] = values
    return flat.view(shape)

"""Splitting the training set over ranks: IID, label shards (non-IID), Dirichlet label skew.

Schemes (`PARTITIONS`):

- ``iid``: a seeded random permutation cut into `nproc` equal parts; the remainder of
  ``N mod nproc`` samples is dropped so that every rank holds the same number.
- ``shards``: the non-IID split of VRL-SGD: indices sorted by label (stable), cut into `nproc`
  contiguous chunks, chunk r to rank r. Each rank sees only one or two labels when there are as
  many ranks as classes.
- ``shards:K``: the label-sorted order cut into K·nproc shards; each rank gets K shards chosen
  by a seeded permutation (the split of McMahan et al.'s FedAvg paper, with K=2).
- ``dirichlet:ALPHA``: for every class, proportions p ~ Dirichlet(ALPHA·1) over ranks; the
  class's indices, shuffled, are split in those proportions. Small ALPHA gives each rank few
  classes, large ALPHA approaches IID. A rank left with no sample is topped up with one sample
  taken from the largest rank (deterministically, no resampling), so every rank is non-empty.

Every scheme returns `nproc` disjoint int64 index tensors and depends only on (labels, nproc,
scheme, seed).
"""
from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError

PARTITIONS = "iid, shards, shards:K, dirichlet:ALPHA"


def parse_partition(scheme: str) -> tuple[str, float | int | None]:
    """Split a scheme into (kind, parameter): ``"shards:2"`` -> ``("shards", 2)``.

    Raises ConfigError("partition", ...) for an unknown kind, a missing or extra parameter,
    K < 1 or ALPHA <= 0 (or not a finite number).
    """
    kind, sep, arg = str(scheme).strip().partition(":")
    if kind == "iid" and not sep:
        return "iid", None
    if kind == "shards" and not sep:
        return "shards", None
    if kind == "shards" and arg.strip().isdigit() and int(arg) >= 1:
        return "shards", int(arg)
    if kind == "dirichlet":
        try:
            alpha = float(arg)
        except ValueError:
            alpha = float("nan")
        if np.isfinite(alpha) and alpha > 0:
            return "dirichlet", alpha
    raise ConfigError("partition", scheme, PARTITIONS)


def partition(labels: Tensor, nproc: int, scheme: str, seed: int) -> list[Tensor]:
    """Split the indices of `labels` (int64 ``[N]``) into `nproc` disjoint parts by `scheme`."""
    kind, arg = parse_partition(scheme)
    n = len(labels)
    if nproc < 1 or n < nproc:
        raise ValueError(f"cannot partition {n} samples over {nproc} ranks")
    if kind == "iid":
        return _iid(n, nproc, seed)
    if kind == "shards":
        return _shards(labels, nproc, arg, seed)
    return _dirichlet(labels, nproc, float(arg), seed)  # type: ignore[arg-type]


def _iid(n: int, nproc: int, seed: int) -> list[Tensor]:
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    per_rank = n // nproc
    return list(order[:per_rank * nproc].view(nproc, per_rank).clone())


def _shards(labels: Tensor, nproc: int, per_rank: int | None, seed: int) -> list[Tensor]:
    order = torch.argsort(labels, stable=True)
    if per_rank is None:
        return [chunk.clone() for chunk in torch.tensor_split(order, nproc)]
    shards = torch.tensor_split(order, per_rank * nproc)
    owner = torch.randperm(len(shards), generator=torch.Generator().manual_seed(seed))
    return [torch.cat([shards[int(s)] for s in owner[r * per_rank:(r + 1) * per_rank]])
            for r in range(nproc)]


def _dirichlet(labels: Tensor, nproc: int, alpha: float, seed: int) -> list[Tensor]:
    rng = np.random.default_rng(seed)
    labels_np = labels.cpu().numpy()
    parts: list[list[np.ndarray]] = [[] for _ in range(nproc)]
    for c in np.unique(labels_np):
        members = rng.permutation(np.flatnonzero(labels_np == c))
        cuts = (np.cumsum(rng.dirichlet(np.full(nproc, alpha))) * len(members)).astype(int)
        for rank, piece in enumerate(np.split(members, cuts[:-1])):
            parts[rank].append(piece)
    ranks = [np.concatenate(p) for p in parts]
    _top_up_empty(ranks)
    return [torch.from_numpy(r).to(torch.int64) for r in ranks]


def _top_up_empty(ranks: list[np.ndarray]) -> None:
    """Give every empty rank the last sample of the currently largest rank (in place)."""
    for r, part in enumerate(ranks):
        if len(part) == 0:
            donor = int(np.argmax([len(p) for p in ranks]))
            ranks[r], ranks[donor] = ranks[donor][-1:], ranks[donor][:-1]

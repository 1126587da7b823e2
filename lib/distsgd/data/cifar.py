"""CIFAR-10 and CIFAR-100, read by torchvision from the python-pickle release.

The whole dataset is held in memory as uint8 ``[N, 3, 32, 32]`` (150 MiB for CIFAR-10); a batch
is converted to float and normalized with the dataset's per-channel mean and standard deviation
only when it is drawn. Training augmentation is the standard one (random 32x32 crop of the image
zero-padded by 4, random horizontal flip), done on whole batches of tensors with the epoch's
generator, so it is deterministic and runs on the GPU when the batch is there.

torchvision verifies the MD5 checksum of every file of the official release. A copy made by
hand (a subset, or test fixtures) has other checksums: pass ``verify=False`` to accept any files
in the release's layout. torchvision's own `check_integrity(path, md5=None)` then only checks
that each file exists; nothing else about reading them changes. ``DISTSGD_DATA_VERIFY=0`` in the
environment does the same for every CIFAR load (the full-profile dry run sets it for its
stand-in files, see `distsgd.data.standins`).
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from torch import Tensor
from torchvision.datasets import CIFAR10, CIFAR100

from ..errors import ConfigError
from .base import TensorSource

PAD = 4
VERIFY_ENV = "DISTSGD_DATA_VERIFY"   # "0": accept any files in the release layout

# Per-channel statistics of the training images, in [0, 1] units.
STATS = {
    "cifar10": ((0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)),
    "cifar100": ((0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)),
}
TORCHVISION_CLASS: dict[str, type[CIFAR10]] = {"cifar10": CIFAR10, "cifar100": CIFAR100}


class CifarSource(TensorSource):
    """CIFAR in memory as uint8; normalization and augmentation applied per batch."""

    def __init__(self, name: str, train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor]):
        super().__init__(name, "classification", 100 if name == "cifar100" else 10, train, test)
        mean, std = STATS[name]
        self._mean = torch.tensor(mean).view(1, 3, 1, 1)
        self._std = torch.tensor(std).view(1, 3, 1, 1)

    def _to_input(self, x: Tensor) -> Tensor:
        x = x.float().div_(255)
        return (x - self._mean.to(x.device)) / self._std.to(x.device)

    def _augment(self, x: Tensor, generator: torch.Generator) -> Tensor:
        """Random crop of the zero-padded image, then random horizontal flip, per sample."""
        b, _, h, w = x.shape
        offsets = torch.randint(0, 2 * PAD + 1, (b, 2), generator=generator).to(x.device)
        flip = (torch.rand(b, generator=generator) < 0.5).to(x.device)
        padded = torch.nn.functional.pad(x, (PAD, PAD, PAD, PAD)).permute(0, 2, 3, 1)  # BHWC
        rows = offsets[:, 0:1] + torch.arange(h, device=x.device)  # [B, H]
        cols = offsets[:, 1:2] + torch.arange(w, device=x.device)  # [B, W]
        batch = torch.arange(b, device=x.device).view(b, 1, 1)
        crops = padded[batch, rows.view(b, h, 1), cols.view(b, 1, w)]  # [B, H, W, C]
        crops = crops.permute(0, 3, 1, 2).contiguous()
        return torch.where(flip.view(b, 1, 1, 1), crops.flip(3), crops)


def load(name: str, root: Path, download: bool = False, verify: bool = True) -> CifarSource:
    """CIFAR-10 or CIFAR-100 from `root` (holding ``cifar-10-batches-py`` / ``cifar-100-python``).

    `verify=False` (or ``DISTSGD_DATA_VERIFY=0``) skips torchvision's MD5 checks.
    Raises FileNotFoundError naming the expected location when the files are missing and
    `download` is False.
    """
    check(name, root, download, verify)
    cls = TORCHVISION_CLASS[name]
    if not verify or os.environ.get(VERIFY_ENV) == "0":
        cls = _existence_checked(cls)
    train = cls(str(root), train=True, download=download)
    test = cls(str(root), train=False)
    return CifarSource(name, _as_tensors(train), _as_tensors(test))


def check(name: str, root: Path, download: bool = False, verify: bool = True) -> None:
    """What `load` refuses before reading a file: options that are not true/false
    (ConfigError), and, unless `download`, release files missing under `root`
    (FileNotFoundError listing them, the folder searched and how to get them)."""
    for option, value in (("download", download), ("verify", verify)):
        if not isinstance(value, bool):
            raise ConfigError(f"data_options.{option}", value, "true, false")
    if download:
        return
    cls = TORCHVISION_CLASS[name]
    folder = root / cls.base_folder
    names = [f for f, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]
    missing = [n for n in names if not (folder / n).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{name} not found: expected {', '.join(missing)} in {folder}. Pass "
            f"download=True (data option download=true) to fetch it there, or set DISTSGD_DATA "
            f"to a directory whose {name}/{cls.base_folder} holds the files.")


def _as_tensors(ds: CIFAR10) -> tuple[Tensor, Tensor]:
    """torchvision's HWC uint8 numpy images -> contiguous uint8 [N, 3, 32, 32] and int64 labels."""
    images = torch.from_numpy(ds.data).permute(0, 3, 1, 2).contiguous()
    return images, torch.tensor(ds.targets, dtype=torch.int64)


def _existence_checked(cls: type[CIFAR10]) -> type[CIFAR10]:
    """A subclass of `cls` whose file list carries no MD5, so files need only exist."""
    return type(f"Unverified{cls.__name__}", (cls,), {
        "train_list": [[fname, None] for fname, _ in cls.train_list],
        "test_list": [[fname, None] for fname, _ in cls.test_list],
        "meta": {**cls.meta, "md5": None},
    })

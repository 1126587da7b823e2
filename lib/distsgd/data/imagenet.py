"""ImageNet (or any dataset in its layout) read from image folders by torchvision.

Expected layout: ``root/train/<class>/*.JPEG`` and ``root/val/<class>/*.JPEG`` with the same
class folders. Transforms are the standard ones scaled to the option `image_size` (224 by
default; tests use tiny images): RandomResizedCrop + horizontal flip for training,
Resize(image_size * 256/224) + CenterCrop for evaluation, then ImageNet normalization.

torchvision's random transforms draw from torch's global generator. To keep training batches a
function of (indices, batch_size, seed) alone, whatever the number of loader workers and
whatever else uses the global generator, every sample is transformed under a forked CPU
generator state seeded with its own seed, drawn from the epoch's generator.
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Iterator

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset
from torchvision import transforms
from torchvision.datasets import ImageFolder

from .base import SPLITS, Batch, DataSource, check_int, check_subset, epoch_generator

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
RESIZE_RATIO = 256 / 224  # evaluation: resize the short side to this multiple, then center-crop


class ImageFolderSource(DataSource):
    """Train and validation image folders, decoded and transformed batch by batch.

    The "test" split of `eval_batches` is the val/ folder.
    """

    def __init__(self, name: str, root: Path, image_size: int, num_workers: int) -> None:
        folders = {split: ImageFolder(str(root / split)) for split in ("train", "val")}
        self.name, self.task = name, "classification"
        self.num_classes = len(folders["train"].classes)
        self.input_shape = (3, image_size, image_size)
        self.train_labels = torch.tensor(folders["train"].targets, dtype=torch.int64)
        self.num_workers = num_workers
        normalize = [transforms.ToTensor(), transforms.Normalize(MEAN, STD)]
        train_tf = transforms.Compose([transforms.RandomResizedCrop(image_size),
                                       transforms.RandomHorizontalFlip(), *normalize])
        eval_tf = transforms.Compose([transforms.Resize(round(image_size * RESIZE_RATIO)),
                                      transforms.CenterCrop(image_size), *normalize])
        self._train = _SeededTransform(folders["train"], train_tf)
        self._eval = {"train": _Transformed(folders["train"], eval_tf),
                      "test": _Transformed(folders["val"], eval_tf)}

    def train_batches(self, indices: Tensor, batch_size: int, seed: int,
                      device: torch.device) -> Iterator[Batch]:
        check_subset(indices, batch_size)
        loader = DataLoader(self._train, batch_sampler=_EpochBatches(indices, batch_size, seed),
                            num_workers=self.num_workers, pin_memory=device.type == "cuda")
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)

    def eval_batches(self, split: str, batch_size: int, device: torch.device,
                     limit: int | None = None) -> Iterator[Batch]:
        if split not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
        dataset: Dataset = self._eval[split]
        if limit is not None:
            dataset = Subset(dataset, range(min(limit, len(self._eval[split]))))
        loader = DataLoader(dataset, batch_size=batch_size, num_workers=self.num_workers,
                            pin_memory=device.type == "cuda")
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)


class _Transformed(Dataset):
    """`folder`'s samples through `transform` (the folders themselves return PIL images)."""

    def __init__(self, folder: ImageFolder, transform: Callable[[Any], Tensor]) -> None:
        self.folder, self.transform = folder, transform

    def __len__(self) -> int:
        return len(self.folder)

    def __getitem__(self, index: int) -> tuple[Tensor, int]:
        image, label = self.folder[index]
        return self.transform(image), label


class _SeededTransform(_Transformed):
    """Indexed by (index, seed): the random transform of a sample runs with its own seed."""

    def __getitem__(self, key: tuple[int, int]) -> tuple[Tensor, int]:  # type: ignore[override]
        index, seed = key
        image, label = self.folder[index]
        with torch.random.fork_rng(devices=[]):
            torch.default_generator.manual_seed(seed)
            return self.transform(image), label


class _EpochBatches:
    """Infinite batch sampler over `indices`: reshuffled every epoch, incomplete tail dropped.

    Yields lists of (index, sample seed) pairs for `_SeededTransform`.
    """

    def __init__(self, indices: Tensor, batch_size: int, seed: int) -> None:
        self.indices, self.batch_size, self.seed = indices, batch_size, seed

    def __iter__(self) -> Iterator[list[tuple[int, int]]]:
        for epoch in itertools.count():
            g = epoch_generator(self.seed, epoch)
            order = self.indices[torch.randperm(len(self.indices), generator=g)].tolist()
            seeds = torch.randint(0, 2**62, (len(order),), generator=g).tolist()
            pairs = list(zip(order, seeds))
            for start in range(0, len(pairs) - self.batch_size + 1, self.batch_size):
                yield pairs[start:start + self.batch_size]


def load(root: Path, image_size: int = 224, num_workers: int = 0) -> ImageFolderSource:
    """ImageNet from `root` (``root/train``, ``root/val``)."""
    check(root, image_size, num_workers)
    return ImageFolderSource("imagenet", root, image_size, num_workers)


def check(root: Path, image_size: int = 224, num_workers: int = 0) -> None:
    """What `load` refuses before reading an image: bad option values (ConfigError), a missing
    train/ or val/ folder, one without class folders (FileNotFoundError naming the folder and
    the layout expected), or class folders that differ between the two (ValueError)."""
    check_int("image_size", image_size, 1)
    check_int("num_workers", num_workers, 0)
    classes = {}
    for split in ("train", "val"):
        path = root / split
        classes[split] = sorted(d.name for d in path.iterdir() if d.is_dir()) if path.is_dir() else []
        if not classes[split]:
            raise FileNotFoundError(
                f"image folder {path} {'has no class folders' if path.is_dir() else 'not found'}: "
                f"expected <class>/<image> folders under {root}/train and {root}/val. Pass "
                f"root=... (data option root) or set DISTSGD_DATA to a directory whose imagenet/ "
                f"holds train/ and val/.")
    if classes["train"] != classes["val"]:
        raise ValueError(f"the class folders of {root / 'train'} and {root / 'val'} differ")

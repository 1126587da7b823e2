"""`python -m distsgd data check|prepare`: the file-based datasets' release files (`distsgd.data.release`).

``check`` inspects (never downloads); ``prepare`` inspects and, with ``--download``, fetches what
torchvision can (CIFAR-10/100, MNIST) into the folders the runs read. Both print one line per
dataset (release, missing, or not the release, with where to put it) and exit 1 unless every one
asked for is in place."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Callable

from . import release


def register(sub: "argparse._SubParsersAction") -> dict[str, Callable[[argparse.Namespace], int]]:
    """Add the parser of `data` to `sub`; its handler by name."""
    d = sub.add_parser("data", help="check or prepare the datasets' release files (CIFAR-10/100, MNIST, ImageNet)",
                       description=__doc__.split("\n\n")[1].replace("\n", " "))
    d.add_argument("action", choices=("check", "prepare"),
                   help="check: inspect the files in place; prepare: the same, downloading with --download")
    d.add_argument("datasets", nargs="*", default=list(release.FILE_BASED), metavar="DATASET",
                   help=f"any of {', '.join(release.FILE_BASED)} (default: all)")
    d.add_argument("--root", type=Path, default=None, metavar="DIR",
                   help="the data folder holding <DATASET>/ (default: $DISTSGD_DATA, else <repo>/data)")
    d.add_argument("--download", action="store_true",
                   help="prepare: fetch a missing CIFAR or MNIST with torchvision (needs the internet)")
    return {"data": data}


def data(args: argparse.Namespace) -> int:
    """Report each dataset's release files; 0 when all are in place, 1 otherwise (2: a bad name)."""
    unknown = [n for n in args.datasets if n not in release.FILE_BASED]
    if unknown:
        from ..errors import ConfigError
        raise ConfigError("data", unknown[0], release.FILE_BASED, "a file-based dataset")
    if args.download and args.action != "prepare":
        from ..errors import ConfigError
        raise ConfigError("--download", True, "only with `data prepare`")
    statuses = release.prepare(args.datasets, args.root, args.download if args.action == "prepare" else False)
    for status in statuses:
        print(status.line())
        if not status.ok:
            print(f"  {release.where_to_put(status.name, release.dataset_root(status.name, args.root))}")
    return 0 if all(s.ok for s in statuses) else 1

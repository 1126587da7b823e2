"""What made a result: the library's code version and the environment, recorded with every run,
and whether a finished run was made by the current code (only then is it reused)."""
from __future__ import annotations

import functools
import hashlib
import json
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from .config import Config


@functools.cache
def code_version() -> str:
    """A fingerprint of the library's source: sha256 over the path and bytes of every
    ``distsgd/**/*.py``, 12 hex digits. It changes with any edit, committed or not, and also
    where the package is installed without git. A finished run is reused only when made by the
    same code version, so an edited algorithm never shows an old result."""
    package = Path(__file__).resolve().parents[__name__.count(".") - 1]     # the distsgd folder
    digest = hashlib.sha256()
    for path in sorted(package.rglob("*.py")):
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:12]


def environment_info() -> dict[str, Any]:
    """What produced a result: versions, git commit, host and devices."""
    from importlib.metadata import version

    import torch

    from ..paths import repo_root

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=repo_root(Path(__file__).parent),
                                  capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    cuda = torch.cuda.is_available()
    return {
        "python": sys.version.split()[0], "platform": platform.platform(),
        "torch": torch.__version__, "torchvision": version("torchvision"),
        "numpy": version("numpy"), "pandas": version("pandas"),
        "git_commit": git("rev-parse", "HEAD"), "git_dirty": bool(git("status", "--porcelain")),
        "code_version": code_version(),
        "hostname": socket.gethostname(), "cpu_count": os.cpu_count(),
        "cuda_available": cuda,
        "cuda_devices": [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if cuda else [],
        "nccl_version": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
    }


def finished_code_version(run_dir: Path, config: Config) -> str | None:
    """The code version (`code_version`) that made the finished run of `config` in `run_dir`;
    None if there is no finished run of this config there. `distsgd.run` reuses a finished run
    only when this is the current code version: a result of edited code is stale."""
    summary = run_dir / "summary.json"
    if not summary.is_file():
        return None
    made = json.loads(summary.read_text())
    if made.get("status") != "finished" or made.get("config_hash") != config.hash():
        return None
    return str(made.get("code_version"))

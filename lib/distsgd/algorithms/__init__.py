"""Distributed training algorithms, one module each, behind the interface in `base`.

Every module of this package is imported here (`import_modules`), in name order; a module that
defines an algorithm registers it with `@register`, so an algorithm added as a new module is
available (`create`, `python -m distsgd list`) with no edit elsewhere."""
import importlib
import pkgutil

from .base import Algorithm, Param, RunFacts
from .registry import REGISTRY, create, register


def import_modules(package: str, path: list[str]) -> list[str]:
    """Import every module of `package` (whose folder list is `path`, its ``__path__``) in name
    order; returns their names."""
    names = sorted(m.name for m in pkgutil.iter_modules(path) if not m.name.startswith("_"))
    for name in names:
        importlib.import_module(f"{package}.{name}")
    return names


import_modules(__name__, __path__)

__all__ = ["Algorithm", "Param", "REGISTRY", "RunFacts", "create", "register"]

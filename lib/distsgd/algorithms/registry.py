"""Name -> algorithm class: `register` (a class under its own name) and `preset` (a registered
rule under another name with some of its parameters fixed: one rule, one class)."""
from __future__ import annotations

from typing import Any, TypeVar

from .base import Algorithm

REGISTRY: dict[str, type[Algorithm]] = {}
DEFAULT = "ssgd"           # the algorithm of a run or a what-if that names none

A = TypeVar("A", bound=type[Algorithm])


def register(cls: A) -> A:
    """Class decorator: make `cls` available under `cls.name`."""
    if not cls.name or cls.name in REGISTRY:
        raise ValueError(f"algorithm name {cls.name!r} is empty or taken")
    REGISTRY[cls.name] = cls
    return cls


def preset(name: str, base: type[Algorithm], summary: str, **fixed: Any) -> type[Algorithm]:
    """Register `base`'s rule under `name` with the parameters `fixed` set (no longer parameters
    of the preset; the others keep their defaults and checks), e.g. the survey's schedule names of
    S-SGD: ``preset("no_overlap", SSGD, "...", overlap=False)``. Returns the registered subclass,
    which adds no code to `base`."""
    unknown = set(fixed) - {p.name for p in base.params}
    if unknown:
        raise ValueError(f"preset {name!r}: {base.name} has no parameter {sorted(unknown)}")
    fixed = {p.name: p.validate(fixed[p.name]) for p in base.params if p.name in fixed}
    attrs = {"name": name, "summary": summary, "__module__": base.__module__,
             "__doc__": f"{base.name} with {', '.join(f'{k}={v!r}' for k, v in fixed.items()) or 'its defaults'}.",
             "params": tuple(p for p in base.params if p.name not in fixed), **fixed}
    return register(type(f"{base.__name__}_{name}", (base,), attrs))


def create(name: str, params: dict) -> Algorithm:
    """Algorithm `name` with `params` resolved (defaults filled in, every value checked)."""
    cls = REGISTRY[name]
    return cls(**cls.resolve_params(params))

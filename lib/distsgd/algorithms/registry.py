"""Name -> algorithm class."""
from __future__ import annotations

from typing import TypeVar

from .base import Algorithm

REGISTRY: dict[str, type[Algorithm]] = {}

A = TypeVar("A", bound=type[Algorithm])


def register(cls: A) -> A:
    """Class decorator: make `cls` available under `cls.name`."""
    if not cls.name or cls.name in REGISTRY:
        raise ValueError(f"algorithm name {cls.name!r} is empty or taken")
    REGISTRY[cls.name] = cls
    return cls


def create(name: str, params: dict) -> Algorithm:
    return REGISTRY[name](**params)

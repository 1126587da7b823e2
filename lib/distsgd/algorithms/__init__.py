"""Distributed training algorithms, one module each, behind the interface in `base`."""
from . import ddp, kavg, local_sgd, ssgd  # noqa: F401  (importing registers them)
from .base import Algorithm, Param
from .registry import REGISTRY, create, register

__all__ = ["Algorithm", "Param", "REGISTRY", "create", "register"]

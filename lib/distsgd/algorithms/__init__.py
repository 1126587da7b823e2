"""Distributed training algorithms, one module each, behind the interface in `base`."""
from . import bytescheduler, cocod_sgd, compressed_sgd, ddp, dear, double_squeeze, kavg, liec_sgd, local_sgd, ps, schedules, ssd_sgd, ssgd, stl_sgd, vrl_sgd  # noqa: F401  (importing registers them)
from .base import Algorithm, Param
from .registry import REGISTRY, create, register

__all__ = ["Algorithm", "Param", "REGISTRY", "create", "register"]

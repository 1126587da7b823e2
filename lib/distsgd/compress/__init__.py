"""Gradient compressors, their error-feedback memory, and their use as DDP communication hooks.

Each compressor declares its wire format and contraction constant (see `base` for the interface)."""
from __future__ import annotations

from .base import Compressor
from .identity import Identity
from .error_feedback import ErrorFeedback
from .powersgd import PowerSGD, register_powersgd
from .qsgd import QSGD
from .randk import RandK
from .sign import ScaledSign
from .topk import TopK

NAMES = ("none", "topk", "randk", "qsgd", "sign", "powersgd")


def make(name: str, ratio: float = 0.01, levels: int = 4, rank: int = 1) -> Compressor:
    """A compressor by name: `ratio` for topk/randk, `levels` for qsgd, `rank` for powersgd."""
    if name == "none":
        return Identity()
    if name == "topk":
        return TopK(ratio)
    if name == "randk":
        return RandK(ratio)
    if name == "qsgd":
        return QSGD(levels)
    if name == "sign":
        return ScaledSign()
    if name == "powersgd":
        return PowerSGD(rank)
    raise ValueError(f"unknown compressor {name!r}; known: {NAMES}")


__all__ = ["Compressor", "ErrorFeedback", "Identity", "NAMES", "PowerSGD", "QSGD", "RandK",
           "ScaledSign", "TopK", "make", "register_powersgd"]

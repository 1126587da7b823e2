"""Error-feedback memory (Seide et al. 2014; Stich et al. 2018, MEM-SGD Alg. 1 lines 5-7;
Karimireddy et al. 2019, EF-SGD Alg. 2):

    p = x + e            compensate: add what earlier steps did not send
    send C(p)
    e <- p - C(p)        update: remember what this step did not send

So after T steps, sum_t x_t = sum_t C(p_t) + e_T exactly: nothing is lost, only delayed.
"""
from __future__ import annotations

from typing import Any

import torch


class ErrorFeedback:
    """The residual e of one flat tensor (zero until the first update)."""

    def __init__(self) -> None:
        self.error: torch.Tensor | None = None

    def compensate(self, x: torch.Tensor) -> torch.Tensor:
        return x if self.error is None else x + self.error

    def update(self, compensated: torch.Tensor, sent: torch.Tensor) -> None:
        self.error = compensated - sent

    def flush(self) -> None:
        """e <- 0: everything not sent so far was sent by other means (LIEC-SGD's dense step)."""
        if self.error is not None:
            self.error = torch.zeros_like(self.error)

    def state_dict(self) -> dict[str, Any]:
        return {"error": None if self.error is None else self.error.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.error = None if state["error"] is None else state["error"].clone()

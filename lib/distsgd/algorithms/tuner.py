"""Choosing a fusion threshold from measured iteration times (DeAR's tuner, simplified).

DeAR (Zhang et al., ICDCS 2023; `dear/tuner.py`) tunes the fusion-buffer threshold x in MB with
Bayesian optimisation: bounds (1, 100), start 32, objective the mean iteration time over a window
of 5 iterations (the first window discarded), Expected Improvement, 10 trials, then x is fixed.
No Bayesian-optimisation library is installed in this kit's environment (scikit-optimize and
optuna are absent), so this is a documented simple search instead [reconstructed]:

    candidates = `trials` thresholds spaced evenly in log(x) over [low, high], tried in the
    order middle-out (the middle first, then alternately below and above); the fastest wins.

Iteration time is smooth and roughly unimodal in log(threshold) (too small: per-collective
latency dominates; too large: no overlap), and a grid is robust to the timing noise of a shared
machine, where a sequential model-based search can be misled by one noisy window.
"""
from __future__ import annotations

import math
from typing import Any, Callable


class GridTuner:
    """Ask/tell search over a log-spaced grid; deterministic, so every rank proposes the same x."""

    def __init__(self, low: float, high: float, trials: int) -> None:
        if not (0 < low <= high) or trials < 1:
            raise ValueError(f"need 0 < low <= high and trials >= 1, got {low}, {high}, {trials}")
        grid = ([low] if trials == 1 else
                [min(high, max(low, math.exp(math.log(low) + k * (math.log(high) - math.log(low)) / (trials - 1))))
                 for k in range(trials)])
        mid = (trials - 1) // 2
        order = [mid] + [i for d in range(1, trials) for i in (mid - d, mid + d) if 0 <= i < trials]
        self.candidates = [grid[i] for i in order]
        self.low, self.high = low, high
        self.history: list[tuple[float, float]] = []       # (threshold, seconds per iteration)

    def ask(self) -> float | None:
        """The next threshold to try, or None when every candidate has been measured."""
        k = len(self.history)
        return self.candidates[k] if k < len(self.candidates) else None

    def tell(self, threshold: float, seconds: float) -> None:
        self.history.append((threshold, seconds))

    def best(self) -> float:
        """The fastest threshold measured so far."""
        return min(self.history, key=lambda h: h[1])[0]

    def state_dict(self) -> dict[str, Any]:
        return {"history": [list(h) for h in self.history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.history = [(float(x), float(t)) for x, t in state["history"]]


def tune_threshold(measure: Callable[[float], float], low: float, high: float,
                   trials: int = 10) -> tuple[float, list[tuple[float, float]]]:
    """Run the search with `measure(threshold) -> seconds per iteration`; return the best
    threshold and the (threshold, seconds) history."""
    tuner = GridTuner(low, high, trials)
    while (x := tuner.ask()) is not None:
        tuner.tell(x, measure(x))
    return tuner.best(), tuner.history

"""How close DropIT's weight gradients are to the exact ones, on one batch in one process.

DropIT (Chen et al., ICLR 2023, arXiv 2202.13808, Sec. 3-4) approximates only the weight gradient
of each Linear/Conv2d layer; the paper argues that dropping the smallest-magnitude input entries
(min-k) keeps it close to the exact gradient, much closer than dropping entries at random. This
module measures that: the same model, batch and loss, with and without DropIT.
"""
from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .layers import dropit


@dataclass
class GradientFidelity:
    """DropIT's gradients against the exact ones.

    Attributes:
        cosine: cosine similarity of all Linear/Conv2d weight gradients, concatenated.
        relative_error: ``||g_dropit - g|| / ||g||`` over the same concatenation.
        layer_cosine, layer_relative_error: the same per layer, by module name.
        input_grad_identical: the gradient with respect to the model input is bit-identical.
    """

    cosine: float
    relative_error: float
    layer_cosine: dict[str, float]
    layer_relative_error: dict[str, float]
    input_grad_identical: bool


def _gradients(model: nn.Module, x: Tensor, y: Tensor,
               loss_fn: Callable[[Tensor, Tensor], Tensor]) -> tuple[dict[str, Tensor], Tensor]:
    """Weight gradients of the Linear/Conv2d layers by name, and the input gradient."""
    model.zero_grad(set_to_none=True)
    x = x.detach().requires_grad_(True)
    loss_fn(model(x), y).backward()
    weights = {name: m.weight.grad.detach().clone() for name, m in model.named_modules()
               if isinstance(m, (nn.Linear, nn.Conv2d))}
    return weights, x.grad


def _cosine(a: Tensor, b: Tensor) -> float:
    return torch.nn.functional.cosine_similarity(a.flatten(), b.flatten(), dim=0).item()


def _relative_error(approx: Tensor, exact: Tensor) -> float:
    return ((approx - exact).norm() / exact.norm()).item()


def gradient_fidelity(model: nn.Module, x: Tensor, y: Tensor,
                      loss_fn: Callable[[Tensor, Tensor], Tensor], gamma: float,
                      strategy: str = "mink") -> GradientFidelity:
    """Compare the gradients of ``loss_fn(model(x), y)`` of `model` (unmodified, in training
    mode) with those of a DropIT copy of it. `model` itself is not changed beyond its ``.grad``s
    (and normalization statistics, which a training-mode forward updates)."""
    model.train()
    exact_w, exact_x = _gradients(model, x, y, loss_fn)
    approx_w, approx_x = _gradients(dropit(copy.deepcopy(model), gamma, strategy), x, y, loss_fn)
    exact_all = torch.cat([g.flatten() for g in exact_w.values()])
    approx_all = torch.cat([approx_w[name].flatten() for name in exact_w])
    return GradientFidelity(
        cosine=_cosine(approx_all, exact_all),
        relative_error=_relative_error(approx_all, exact_all),
        layer_cosine={n: _cosine(approx_w[n], g) for n, g in exact_w.items()},
        layer_relative_error={n: _relative_error(approx_w[n], g) for n, g in exact_w.items()},
        input_grad_identical=torch.equal(approx_x, exact_x))

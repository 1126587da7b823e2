"""DropIT's autograd functions for fully connected and 2-D convolutional layers.

Chen et al., "DropIT: Dropping Intermediate Tensors for Memory-Efficient DNN Training", ICLR 2023,
arXiv 2202.13808, Sec. 3. For a layer ``y = x W^T + b`` (or ``y = conv(x, W) + b``):

    forward:   y is computed exactly from the whole input x;
               only the kept entries of x are saved (values + int32 positions, `selection.drop`)
    backward:  x̂ = zero-filled x rebuilt from the kept entries (`selection.recover`)
               grad_W = grad_y^T x̂            (conv: the weight gradient of conv(x̂, W))
               grad_x = grad_y W              (conv: the input gradient) -- exact: needs no x
               grad_b = sum of grad_y over all but the channel dimension  -- exact

Only the weight gradient is approximate. Each gradient is computed by the same ATen call, with the
same operand layout, that PyTorch's own backward of ``F.linear`` (addmm) and ``F.conv2d``
(convolution_backward) makes, so with nothing dropped (γ = 0) every gradient is bit-identical to the
unmodified layer's, and for any γ the input and bias gradients are.

Mixed precision (the authors' AMP path: their DeiT trains under fp16 autocast, and their autograd
functions are ``custom_fwd(cast_inputs=torch.float16)``): under autocast for the input's device type
(`compute_dtype`) the layer computes in the autocast dtype, as autocast computes ``F.linear`` and
``F.conv2d``: the input, weight and bias are cast to it, so the kept values are saved in it (2 bytes
each in fp16 or bf16, beside 4-byte int32 positions), and both passes run with autocast off on
those explicit dtypes. The weight is saved as the parameter itself and cast again in backward (the
authors save their fp16 copy of it; the parameter is held anyway, the copy would add 2 bytes per
weight until backward). The gradients are computed in the autocast dtype, as autocast's backward
computes them, and autograd casts each to the dtype of the input it belongs to (the parameters'
fp32), as it does after autocast's own casts.
"""
from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from .selection import drop, recover


def compute_dtype(x: Tensor) -> torch.dtype:
    """The dtype a DropIT layer computes and saves in: the autocast dtype of `x`'s device type when
    autocast is on for it (``torch.is_autocast_enabled``), else `x`'s own."""
    device = x.device.type
    return torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else x.dtype


def _cast(t: Tensor | None, dtype: torch.dtype) -> Tensor | None:
    return None if t is None else t.to(dtype)


def _keep(ctx: Any, x: Tensor, weight: Tensor, gamma: float, strategy: str) -> Tensor:
    """Both layers' forward, `x` already in the layer's `compute_dtype`: its kept entries (values and
    positions) and the weight itself (not a copy) saved for backward; returns `x`."""
    values, positions = drop(x, gamma, strategy)
    ctx.save_for_backward(values, positions, weight)
    ctx.x_shape = x.shape
    return x


class DropITLinearFunction(torch.autograd.Function):
    """``F.linear(x, weight, bias)`` that saves only the kept entries of ``x`` for backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None, gamma: float,
                strategy: str) -> Tensor:
        dtype = compute_dtype(x)                 # before autocast is switched off below
        with torch.autocast(x.device.type, enabled=False):
            x = _keep(ctx, x.to(dtype), weight, gamma, strategy)
            ctx.has_bias = bias is not None
            return F.linear(x, weight.to(x.dtype), _cast(bias, x.dtype))

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Tensor | None, ...]:
        values, positions, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        grad_x = grad_w = grad_b = None
        with torch.autocast(grad_y.device.type, enabled=False):
            grad_2d = grad_y.reshape(-1, grad_y.shape[-1])       # [samples, out_features]
            if need_x:
                grad_x = grad_2d.mm(weight.to(grad_y.dtype)).view(ctx.x_shape)
            if need_w:
                x_hat = recover(values, positions, ctx.x_shape).reshape(-1, weight.shape[1])
                grad_w = grad_2d.t().mm(x_hat)
            if need_b and ctx.has_bias:
                grad_b = grad_2d.sum(0)
        return grad_x, grad_w, grad_b, None, None


class DropITConv2dFunction(torch.autograd.Function):
    """``F.conv2d(x, weight, bias, stride, padding, dilation, groups)`` (batched input, numeric
    zero padding) that saves only the kept entries of ``x`` for backward."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, weight: Tensor, bias: Tensor | None,
                stride: tuple[int, int], padding: tuple[int, int], dilation: tuple[int, int],
                groups: int, gamma: float, strategy: str) -> Tensor:
        dtype = compute_dtype(x)                 # before autocast is switched off below
        with torch.autocast(x.device.type, enabled=False):
            x = _keep(ctx, x.to(dtype), weight, gamma, strategy)
            ctx.conv = (stride, padding, dilation, groups)
            ctx.bias_sizes = None if bias is None else list(bias.shape)
            return F.conv2d(x, weight.to(x.dtype), _cast(bias, x.dtype), stride, padding, dilation, groups)

    @staticmethod
    def backward(ctx: Any, grad_y: Tensor) -> tuple[Tensor | None, ...]:
        values, positions, weight = ctx.saved_tensors
        stride, padding, dilation, groups = ctx.conv
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        with torch.autocast(grad_y.device.type, enabled=False):
            x_hat = recover(values, positions, ctx.x_shape)
            grad_x, grad_w, grad_b = torch.ops.aten.convolution_backward(
                grad_y, x_hat, weight.to(grad_y.dtype), ctx.bias_sizes, list(stride), list(padding),
                list(dilation), False, [0, 0], groups,
                [need_x, need_w, need_b and ctx.bias_sizes is not None])
        return grad_x, grad_w, grad_b, None, None, None, None, None, None

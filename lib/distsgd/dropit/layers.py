"""`dropit(model, gamma, strategy)`: train a model's Linear and Conv2d layers with DropIT.

Chen et al., "DropIT: Dropping Intermediate Tensors for Memory-Efficient DNN Training", ICLR 2023,
arXiv 2202.13808. In training mode (with autograd recording) a wrapped layer computes its exact
output but keeps for backward only ``int(numel · (1 - γ))`` entries of its input (largest
magnitudes for ``mink``, uniform for ``random``; `selection`), rebuilding a zero-filled input for
the weight gradient; the input and bias gradients stay exact (`functions`). In eval mode, or under
``torch.no_grad()``, it is the plain layer. Modules with a true ``no_dropit`` attribute (the
authors' opt-out) and the names in `skip` are left alone.

Which layers: `dropit` is the authors' ``to_dropit`` (``dropit/dropiter.py``): it wraps every
supported layer it is not told to skip. The authors exempt a network's two ends when they train:
their DeiT (``benchmarks/deit/main.py``) marks the patch embedding's projection and the classifier
head ``no_dropit``, their detectors the stem. `stem_and_head` names those two layers of any model, and
`distsgd.models.build_model` skips them unless the model option asks for every layer.

How it is installed, and why:

- The arithmetic is a custom ``torch.autograd.Function``: it decides exactly what is saved (values
  and positions, not the input) and computes each gradient explicitly. The alternative PyTorch
  offers, ``torch.autograd.graph.saved_tensors_hooks``, sees every tensor an op saves and would
  have to recognise which of them is the layer input -- addmm saves the input and a transposed
  weight, convolution the input and the weight -- which ties the method to ATen's internal choice
  of saved tensors. Saved-tensor hooks are used for what they do well: measuring (`measure`).
- A wrapped layer gets a subclass of its own class (`DropITLinear` of ``nn.Linear``,
  `DropITConv2d` of ``nn.Conv2d``) by reassigning ``module.__class__``, the way
  ``torch.nn.utils.parametrize`` injects its parametrized classes. The module object is the same:
  its parameters (which an optimizer may already hold), hooks, name, ``state_dict`` keys and
  ``isinstance(m, nn.Linear)`` are unchanged, and it works for a root module or a module shared by
  several parents. Only exact ``nn.Linear`` and ``nn.Conv2d`` instances are wrapped (a subclass
  may have its own forward), and a Conv2d only with numeric zero padding (``padding_mode="zeros"``,
  no ``"same"``/``"valid"`` strings); other layers run unchanged.
"""
from __future__ import annotations

from collections.abc import Collection

import torch
from torch import Tensor, nn

from .functions import DropITConv2dFunction, DropITLinearFunction
from .selection import check_gamma, check_strategy


class DropITLayer(nn.Module):
    """Mixin of the DropIT layers: the drop ratio and strategy, and when to drop."""

    gamma: float
    strategy: str

    def dropping(self) -> bool:
        """Drop only while training with autograd recording."""
        return self.training and torch.is_grad_enabled()

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, dropit_gamma={self.gamma}, dropit_strategy={self.strategy}"


class DropITLinear(DropITLayer, nn.Linear):
    """``nn.Linear`` that saves only the kept entries of its input while training."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.dropping():
            return super().forward(x)
        return DropITLinearFunction.apply(x, self.weight, self.bias, self.gamma, self.strategy)


class DropITConv2d(DropITLayer, nn.Conv2d):
    """``nn.Conv2d`` (zero padding) that saves only the kept entries of its input while training."""

    def forward(self, x: Tensor) -> Tensor:
        if not self.dropping():
            return super().forward(x)
        if x.dim() == 3:                                   # unbatched (C, H, W), as nn.Conv2d allows
            return self.forward(x.unsqueeze(0)).squeeze(0)
        return DropITConv2dFunction.apply(x, self.weight, self.bias, self.stride, self.padding,
                                          self.dilation, self.groups, self.gamma, self.strategy)


_DROPIT_CLASS: dict[type[nn.Module], type[DropITLayer]] = {
    nn.Linear: DropITLinear, DropITLinear: DropITLinear,
    nn.Conv2d: DropITConv2d, DropITConv2d: DropITConv2d,
}


def _supported(module: nn.Module) -> bool:
    if isinstance(module, nn.Conv2d):
        return module.padding_mode == "zeros" and not isinstance(module.padding, str)
    return True


def dropit(model: nn.Module, gamma: float, strategy: str = "mink",
           skip: Collection[str] = ()) -> nn.Module:
    """Make every exact ``nn.Linear`` and (zero-padded) ``nn.Conv2d`` of `model` a DropIT layer
    with drop ratio `gamma` (0 <= gamma < 1; 0 keeps every entry) and `strategy` (``"mink"`` or
    ``"random"``), in place; returns `model`.

    `skip` names submodules (as in ``model.named_modules()``) to leave unchanged; so are modules
    with ``no_dropit = True``. Applying it again to a wrapped layer updates its gamma and strategy.
    """
    check_gamma(gamma)
    check_strategy(strategy)
    for name, module in model.named_modules():
        cls = _DROPIT_CLASS.get(type(module))
        if cls is None or name in skip or getattr(module, "no_dropit", False) or not _supported(module):
            continue
        module.__class__ = cls
        module.gamma, module.strategy = float(gamma), strategy
    return model


def stem_and_head(model: nn.Module) -> tuple[str, ...]:
    """The names of `model`'s stem and classifier head, the layers the authors exempt from DropIT.

    Read in registration order (``model.named_modules()``), which is the order of the forward pass
    in the kit's models and in torchvision's and timm's: the stem is the first of the model's
    Linear, Conv2d and Embedding layers -- named only where it is a Linear or Conv2d (a token
    embedding is no DropIT layer, so BERT-like models have no stem to exempt) -- and the head the
    last Linear or Conv2d. A model with a single such layer (``logistic``) returns it once: it is
    both ends. Empty for a model without Linear/Conv2d layers.
    """
    first: tuple[str, nn.Module] | None = None
    last: str | None = None
    for name, module in model.named_modules():
        if first is None and isinstance(module, (nn.Linear, nn.Conv2d, nn.Embedding)):
            first = (name, module)
        if isinstance(module, (nn.Linear, nn.Conv2d)):
            last = name
    ends = [first[0]] if first is not None and not isinstance(first[1], nn.Embedding) else []
    if last is not None and last not in ends:
        ends.append(last)
    return tuple(ends)


def dropit_layers(model: nn.Module) -> dict[str, DropITLayer]:
    """The DropIT layers of `model`, by name."""
    return {name: m for name, m in model.named_modules() if isinstance(m, DropITLayer)}

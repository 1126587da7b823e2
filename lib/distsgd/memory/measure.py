"""Activation memory: what autograd keeps from the forward pass for the backward pass.

Two measurements, for comparing a model with and without DropIT (Chen et al., ICLR 2023,
arXiv 2202.13808, report peak GPU memory):

- Saved tensors, on any device. Inside ``torch.autograd.graph.saved_tensors_hooks`` every tensor an
  op (or a custom autograd Function) saves for backward passes through a pack hook; `SavedTensorMeter`
  records its bytes (``numel · element_size``). These are exactly the tensors held from the end of
  forward until backward uses them. A tensor counts once however many ops save it, also as a view
  of the same memory and shape (a ReLU output that the next Linear saves after a flatten), and
  tensors in a model parameter's memory (a transposed weight) do not count: they are held anyway.
  A view counts by its own size, not its storage's: a batch sliced from a data set in memory holds
  the batch, not the data set. Each tensor is also attributed to every leaf module during whose
  forward it was saved, so the bytes a layer holds can be read per layer; tensors saved outside
  any leaf module (functional ops in a container's forward) are attributed to ``""``.
- On CUDA, the peak of ``torch.cuda.max_memory_allocated`` over one forward and backward, above
  what was allocated before: activations plus the transient buffers of both passes.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType

import torch
from torch import Tensor, nn

MemoryKey = tuple[str, int, int]        # (device, data pointer, bytes)


def _memory_key(t: Tensor) -> MemoryKey:
    return str(t.device), t.data_ptr(), t.numel() * t.element_size()


class SavedTensorMeter:
    """Context manager recording the tensors saved for backward while `model` runs.

    ::

        with SavedTensorMeter(model) as meter:
            loss = loss_fn(model(x), y)
        meter.total_bytes, meter.module_bytes("0")
    """

    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.saved: set[MemoryKey] = set()
        self.by_module: dict[str, set[MemoryKey]] = defaultdict(set)
        self._active: list[str] = []                              # leaf modules running forward
        self._parameters = {(str(p.device), p.untyped_storage().data_ptr())
                            for p in model.parameters()}
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self._pack, lambda t: t)
        self._handles: list[torch.utils.hooks.RemovableHandle] = []

    def __enter__(self) -> "SavedTensorMeter":
        for name, module in self.model.named_modules():
            if next(module.children(), None) is None:
                self._handles.append(module.register_forward_pre_hook(self._entering(name)))
                self._handles.append(module.register_forward_hook(self._leaving))
        self._hooks.__enter__()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._hooks.__exit__(kind, exc, tb)
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def _entering(self, name: str) -> Callable[..., None]:
        def hook(module: nn.Module, args: tuple) -> None:
            self._active.append(name)
        return hook

    def _leaving(self, module: nn.Module, args: tuple, output: object) -> None:
        self._active.pop()

    def _pack(self, t: Tensor) -> Tensor:
        if (str(t.device), t.untyped_storage().data_ptr()) not in self._parameters:
            key = _memory_key(t)
            self.saved.add(key)
            self.by_module[self._active[-1] if self._active else ""].add(key)
        return t

    @property
    def total_bytes(self) -> int:
        """Bytes of all distinct tensors saved for backward."""
        return sum(nbytes for _, _, nbytes in self.saved)

    def module_bytes(self, *names: str) -> int:
        """Bytes of the distinct tensors saved while the named modules ran forward."""
        keys = set().union(*(self.by_module.get(n, set()) for n in names))
        return sum(nbytes for _, _, nbytes in keys)


@dataclass
class ActivationMemory:
    """One forward/backward of a model on a batch.

    Attributes:
        saved_bytes: all distinct tensors saved for backward (parameters excluded).
        layer_bytes: the distinct tensors saved by the Linear and Conv2d layers (what DropIT
            shrinks): for an unmodified layer its input, for a DropIT layer the kept values and
            positions.
        by_module: saved bytes per leaf module name (a tensor shared by two modules counts in both).
        cuda_peak_bytes: peak allocated CUDA memory above the starting point; None on CPU.
    """

    saved_bytes: int
    layer_bytes: int
    by_module: dict[str, int]
    cuda_peak_bytes: int | None


def measure_activation_memory(model: nn.Module, x: Tensor, y: Tensor,
                              loss_fn: Callable[[Tensor, Tensor], Tensor]) -> ActivationMemory:
    """Run ``loss_fn(model(x), y).backward()`` once (training mode as the model is set) and
    measure what is saved for backward; gradients are left in ``.grad``."""
    cuda = x.is_cuda
    if cuda:
        torch.cuda.synchronize(x.device)
        torch.cuda.reset_peak_memory_stats(x.device)
        start = torch.cuda.memory_allocated(x.device)
    with SavedTensorMeter(model) as meter:
        loss = loss_fn(model(x), y)
    loss.backward()
    peak = None
    if cuda:
        torch.cuda.synchronize(x.device)
        peak = torch.cuda.max_memory_allocated(x.device) - start
    layers = [name for name, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    return ActivationMemory(
        saved_bytes=meter.total_bytes, layer_bytes=meter.module_bytes(*layers),
        by_module={name: meter.module_bytes(name) for name in meter.by_module},
        cuda_peak_bytes=peak)

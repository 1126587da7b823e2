"""Activation memory: what autograd keeps from the forward pass for the backward pass.

Three measurements, for comparing a model with and without DropIT (Chen et al., ICLR 2023,
arXiv 2202.13808, report peak GPU memory):

- Saved tensors, on any device. Inside ``torch.autograd.graph.saved_tensors_hooks`` every tensor an
  op (or a custom autograd Function) saves for backward passes through a pack hook; `SavedTensorMeter`
  records its bytes (``numel · element_size``, in the dtype autograd keeps: 2 bytes under fp16 or
  bf16 autocast). These are exactly the tensors held from the end of forward until backward uses
  them. A tensor counts once however many ops save it, also as a view of the same memory and shape
  (a ReLU output that the next Linear saves after a flatten). Parameters do not count: tensors in a
  model parameter's memory (a transposed weight) are held anyway, and a tensor of a parameter's
  shape computed from it alone (autocast's fp16 copy of a weight, which ``addmm`` saves transposed)
  is parameter memory in another dtype, 2 bytes per weight whatever the batch. A view counts by its own size,
  not its storage's: a batch sliced from a data set in memory holds the batch, not the data set.
  Each tensor is also attributed to every leaf module during whose forward it was saved, so the
  bytes a layer holds can be read per layer; tensors saved outside any leaf module (functional ops
  in a container's forward) are attributed to ``""``.
- The same count without running a kernel (`count_activation_memory`): the forward pass on
  ``torch._subclasses.FakeTensorMode`` tensors, which carry shapes, dtypes, devices and storages but
  no data, so a model at the paper's batch is counted in seconds on a machine that could not hold
  its activations, and for CUDA on a machine without a GPU (CUDA's autocast rules and kernel choices
  as PyTorch makes them without a device at hand). The memory a tensor occupies is identified by its
  storage (the ``StorageImpl``), its byte offset in it and its size, not by its data pointer, which
  fake tensors do not have.
- On CUDA, the peak of ``torch.cuda.max_memory_allocated`` over one training step (forward,
  backward and, given an optimizer, its step), above what was allocated before: activations,
  gradients, optimizer state and the transient buffers of both passes.
"""
from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from types import TracebackType

import torch
from torch import Tensor, nn
from torch._subclasses.fake_tensor import FakeTensorMode

MemoryKey = tuple[str, int, int, int]        # (device, storage, byte offset in it, bytes)


def _storage(t: Tensor) -> tuple[str, int]:
    """(device, storage identity): the address of the tensor's ``StorageImpl``, the identity
    ``torch.multiprocessing.reductions.StorageWeakRef`` keys storages by; unlike the data pointer it
    exists for fake and meta tensors, and it is unique among live storages."""
    return str(t.device), t.untyped_storage()._cdata


def _memory_key(t: Tensor) -> MemoryKey:
    return (*_storage(t), t.storage_offset() * t.element_size(), t.numel() * t.element_size())


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
        self._parameters = {_storage(p) for p in model.parameters()}
        self._parameter_ids = {id(p) for p in model.parameters()}
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

    def _parameter_copy(self, t: Tensor) -> bool:
        """Whether `t` is (a view of) a tensor of a parameter's shape computed from that parameter
        alone: autocast's copy of a weight in the autocast dtype."""
        base = t if t._base is None else t._base
        inputs = [n for n, _ in base.grad_fn.next_functions if n is not None] if base.grad_fn else []
        leaf = getattr(inputs[0], "variable", None) if len(inputs) == 1 else None   # AccumulateGrad
        return leaf is not None and id(leaf) in self._parameter_ids and base.shape == leaf.shape

    def _pack(self, t: Tensor) -> Tensor:
        if _storage(t) not in self._parameters and not self._parameter_copy(t):
            key = _memory_key(t)
            self.saved.add(key)
            self.by_module[self._active[-1] if self._active else ""].add(key)
        return t

    @property
    def total_bytes(self) -> int:
        """Bytes of all distinct tensors saved for backward."""
        return sum(key[-1] for key in self.saved)

    def module_bytes(self, *names: str) -> int:
        """Bytes of the distinct tensors saved while the named modules ran forward."""
        keys = set().union(*(self.by_module.get(n, set()) for n in names))
        return sum(key[-1] for key in keys)


@dataclass
class ActivationMemory:
    """What one training step of a model on a batch saves for backward.

    Attributes:
        saved_bytes: all distinct tensors saved for backward (parameters excluded).
        layer_bytes: the distinct tensors saved by the Linear and Conv2d layers (what DropIT
            shrinks): for an unmodified layer its input, for a DropIT layer the kept values and
            positions.
        by_module: saved bytes per leaf module name (a tensor shared by two modules counts in both).
        cuda_peak_bytes: peak allocated CUDA memory of the step above the starting point; None
            on CPU and for a count on fake tensors.
    """

    saved_bytes: int
    layer_bytes: int
    by_module: dict[str, int]
    cuda_peak_bytes: int | None


@contextmanager
def autocast(device_type: str, dtype: torch.dtype | None) -> Iterator[None]:
    """Autocast for `device_type` in `dtype` (None: autocast left as it is), the thread state
    ``torch.autocast(device_type, dtype)`` sets (enabled, dtype, nesting, cast cache), set here
    directly: ``torch.autocast("cuda")`` switches itself off on a machine without a CUDA device,
    where fake CUDA tensors (`count_activation_memory`) still follow CUDA autocast's casting rules."""
    if dtype is None:
        yield
        return
    enabled, before = torch.is_autocast_enabled(device_type), torch.get_autocast_dtype(device_type)
    torch.set_autocast_enabled(device_type, True)
    torch.set_autocast_dtype(device_type, dtype)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled(device_type, enabled)
        torch.set_autocast_dtype(device_type, before)


def _forward(model: nn.Module, x: Tensor, y: Tensor, loss_fn: Callable[[Tensor, Tensor], Tensor],
             autocast_dtype: torch.dtype | None) -> tuple[Tensor, SavedTensorMeter]:
    """The loss of one forward pass (under autocast in `autocast_dtype`, if given) and the meter
    that saw what it saved."""
    with SavedTensorMeter(model) as meter, autocast(x.device.type, autocast_dtype):
        loss = loss_fn(model(x), y)
    return loss, meter


def _result(model: nn.Module, meter: SavedTensorMeter, peak: int | None) -> ActivationMemory:
    layers = [name for name, m in model.named_modules() if isinstance(m, (nn.Linear, nn.Conv2d))]
    return ActivationMemory(
        saved_bytes=meter.total_bytes, layer_bytes=meter.module_bytes(*layers),
        by_module={name: meter.module_bytes(name) for name in meter.by_module},
        cuda_peak_bytes=peak)


def measure_activation_memory(model: nn.Module, x: Tensor, y: Tensor,
                              loss_fn: Callable[[Tensor, Tensor], Tensor],
                              autocast_dtype: torch.dtype | None = None,
                              optimizer: torch.optim.Optimizer | None = None) -> ActivationMemory:
    """Run one training step -- ``loss_fn(model(x), y)`` (under autocast in `autocast_dtype` for
    `x`'s device type, if given), ``.backward()``, and ``optimizer.step()`` if an optimizer is
    given -- in the model's own mode and measure what is saved for backward; gradients are left in
    ``.grad``. On CUDA the peak allocated memory of the step is measured too."""
    cuda = x.device.type == "cuda"
    if cuda:
        torch.cuda.synchronize(x.device)
        torch.cuda.reset_peak_memory_stats(x.device)
        start = torch.cuda.memory_allocated(x.device)
    loss, meter = _forward(model, x, y, loss_fn, autocast_dtype)
    loss.backward()
    if optimizer is not None:
        optimizer.step()
    peak = None
    if cuda:
        torch.cuda.synchronize(x.device)
        peak = torch.cuda.max_memory_allocated(x.device) - start
    return _result(model, meter, peak)


def count_activation_memory(model: nn.Module, x_shape: tuple[int, ...],
                            loss_fn: Callable[[Tensor, Tensor], Tensor], device: str | torch.device,
                            autocast_dtype: torch.dtype | None = None) -> ActivationMemory:
    """The bytes one forward pass of `model` on a batch of shape `x_shape` (float inputs, class
    targets: their values change nothing saved) saves for backward on `device`, counted on fake
    tensors (under autocast in `autocast_dtype`, if given): no kernel runs and no memory is
    allocated (module doc); `model` is left as it is (a copy is counted). Equal to
    `measure_activation_memory`'s count of a real step with the same kernel choices, on CPU to the
    byte but for one op (tests/test_dropit_memory.py): under CPU autocast PyTorch's fake batch norm
    gives its two saved statistics the input's dtype where the CPU kernel keeps fp32, 2 bytes less
    per channel each. ``cuda_peak_bytes`` is None."""
    fake = copy.deepcopy(model)
    with FakeTensorMode() as mode:
        # the tensors are replaced in the modules' dicts: Module.to() swaps them in place, which a
        # fake tensor refuses
        for module in fake.modules():
            for name, p in module._parameters.items():
                if p is not None:
                    module._parameters[name] = nn.Parameter(mode.from_tensor(p).to(device), p.requires_grad)
            for name, b in module._buffers.items():
                if b is not None:
                    module._buffers[name] = mode.from_tensor(b).to(device)
        x = torch.empty(x_shape, device=device)
        y = torch.zeros(x_shape[0], dtype=torch.long, device=device)
        _, meter = _forward(fake, x, y, loss_fn, autocast_dtype)
    return _result(fake, meter, None)

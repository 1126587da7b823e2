"""Memory-efficient training: DropIT (dropping intermediate tensors) and activation memory.

Chen et al., "DropIT: Dropping Intermediate Tensors for Memory-Efficient DNN Training", ICLR 2023,
arXiv 2202.13808.

- `dropit(model, gamma, strategy)`: Linear/Conv2d layers keep only ``int(numel · (1 - gamma))``
  entries of their input for the weight gradient (`dropit`, `functions`, `selection`);
  `stem_and_head(model)`: the two layers the authors leave exact.
- `measure_activation_memory`, `SavedTensorMeter`: bytes saved for backward (fp32 or autocast),
  and peak CUDA memory (`measure`); `count_activation_memory`: the same count on fake tensors, no
  kernel run (`distsgd.experiments.dropit_paper_scale` counts ViT-B/16, DeiT-Ti and ResNet-18 at the paper's batch).
- `gradient_fidelity`: DropIT's weight gradients against the exact ones (`fidelity`).
"""
from .layers import DropITConv2d, DropITLayer, DropITLinear, dropit, dropit_layers, stem_and_head
from .fidelity import GradientFidelity, gradient_fidelity
from .measure import ActivationMemory, SavedTensorMeter, count_activation_memory, measure_activation_memory
from .selection import STRATEGIES, kept_count

__all__ = ["STRATEGIES", "ActivationMemory", "DropITConv2d", "DropITLayer", "DropITLinear",
           "GradientFidelity", "SavedTensorMeter", "count_activation_memory", "dropit", "dropit_layers",
           "gradient_fidelity", "kept_count", "measure_activation_memory", "stem_and_head"]

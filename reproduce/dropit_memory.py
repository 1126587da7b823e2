"""DropIT's memory at the paper's setting (notebook 03): ViT-B/16, DeiT-Ti and ResNet-18, 224x224, the paper's
batch, fp32 and fp16 autocast, without DropIT and with min-k at γ = 0.9
(`distsgd.experiments.dropit_paper_scale.dropit_memory_table`).

Writes OUT/dropit_memory.csv. On a machine with a CUDA GPU: one real training step per row on it,
the saved-for-backward bytes and the peak allocated memory, the GPU named in the ``device`` column.
Without one: the exact saved-for-backward bytes under CUDA's rules counted on fake tensors (no kernel
runs, seconds on a CPU); the committed figures/03_dropit/paper_scale_memory.csv is this file.

Usage (repository root, the library on PYTHONPATH): python reproduce/dropit_memory.py OUT
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from distsgd.experiments.dropit_paper_scale import dropit_memory_table


def main() -> int:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    table = dropit_memory_table("cuda", fake=not torch.cuda.is_available())
    table.to_csv(out / "dropit_memory.csv", index=False)
    print(table.to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""A stack of pre-norm transformer encoder blocks, for the systems benchmark (a model with many
mid-size tensors: per block a 3d x d attention projection, a d x d output projection, two d x 4d
feed-forward matrices, two LayerNorms).

The input (any shape) is flattened and cut into `tokens` tokens; a Linear embeds each token into
`dim` features, a learned position embedding is added, `depth` blocks

    x = x + Proj(Attention(QKV(LN(x))));   x = x + FF2(GELU(FF1(LN(x))))

follow, then a final LayerNorm, mean over tokens and a Linear head. Every parameter belongs to a
module whose forward is called, in registration order (as layer-wise schedulers such as DeAR
need; torch's nn.MultiheadAttention uses its out_proj weights without calling out_proj).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.ff1 = nn.Linear(dim, 4 * dim)
        self.ff2 = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        attn = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(attn)
        return x + self.ff2(F.gelu(self.ff1(self.norm2(x))))


class Transformer(nn.Module):
    def __init__(self, features: int, tokens: int, num_classes: int, dim: int, depth: int, heads: int) -> None:
        super().__init__()
        self.tokens = tokens
        self.embed = nn.Linear(features // tokens, dim)
        self.pos = nn.Embedding(tokens, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x.reshape(x.shape[0], self.tokens, -1))
        x = x + self.pos(torch.arange(self.tokens, device=x.device))
        return self.head(self.norm(self.blocks(x)).mean(1))


def transformer(input_shape: tuple[int, ...], num_classes: int, dim: int = 128, depth: int = 4,
                heads: int = 4, tokens: int = 16) -> nn.Module:
    """`depth` transformer blocks of width `dim` over `tokens` tokens cut from the flat input."""
    features = math.prod(input_shape)
    if features % tokens:
        raise ConfigError("model_options.tokens", tokens, f"a divisor of the input size {features}")
    if dim % heads:
        raise ConfigError("model_options.heads", heads, f"a divisor of dim ({dim})")
    return Transformer(features, tokens, num_classes, dim, depth, heads)

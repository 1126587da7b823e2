"""Transformer encoders built from one pre-norm block: the kit's benchmark `transformer`, a
DeiT-Tiny-like `vit_tiny` and BERT-like `bert_base` / `bert_large` encoders.

Every model here is ``embed -> depth x Block -> LayerNorm -> readout -> head`` (`Encoder`); they
differ only in the embedding and the readout:

- ``transformer`` (the systems benchmark's model with many mid-size tensors): the input (any
  shape) is flattened and cut into `tokens` tokens, a Linear embeds each into `dim` features and
  a learned position embedding is added (`ChunkEmbed`); readout: mean over tokens.
- ``vit_tiny``: DeiT-Tiny (Touvron et al., ICML 2021, "Training data-efficient image transformers
  & distillation through attention", Table 1: dim 192, depth 12, heads 3, MLP ratio 4; ViT's
  patch embedding, Dosovitskiy et al. 2021): a `patch` x `patch` convolution with stride `patch`
  cuts the image into patches, a class token is prepended and learned position embeddings are
  added (`PatchEmbed`); readout: the class token. Without DeiT's distillation token. 5,717,416
  parameters at 224x224, patch 16, 1000 classes (DeiT-Ti's 5.7 M); 5,362,762 at 32x32, patch 4
  (64 patches), 10 classes. `dim`, `depth`, `heads` shrink it.
- ``bert_base`` / ``bert_large``: BERT (Devlin et al., NAACL 2019, Sec. 3: L = 12, H = 768, A =
  12, FFN 4H = 3072 / L = 24, H = 1024, A = 16; WordPiece vocabulary 30522, 512 positions):
  token and position embeddings (`TokenEmbed`); readout: the first ([CLS]) token through BERT's
  pooler (Linear + tanh). 109,480,704 parameters before the head for bert_base (BERT-Base's
  110 M), 335,139,840 for bert_large (340 M). Reconstructed, not BERT's code: the blocks are this
  kit's pre-norm ones (BERT normalizes after each residual; the tensors and FLOPs are the same),
  the final LayerNorm stands where BERT's embedding LayerNorm is, there are no segment (token
  type) embeddings (2 x H parameters) and no pre-training heads; the head classifies the
  sequence.

How the BERT encoders get tokens: their input is a sequence of token ids, `input_shape` =
``(seq_len,)`` (seq_len <= 512), batches ``[B, seq_len]`` of integers in [0, vocab). No dataset of
the kit holds text: the systems benchmarks (`distsgd.systems.benchmark`, notebooks 06, 07, 10)
draw uniform random ids, as they draw random images for the CNNs (DeAR and the survey time BERT
on synthetic inputs too). Image inputs are refused (ConfigError).

Every parameter belongs to a module whose forward is called, in registration order (as
layer-wise schedulers such as DeAR need; torch's nn.MultiheadAttention uses its out_proj weights
without calling out_proj). The block:

    x = x + Proj(Attention(QKV(LN(x))));   x = x + FF2(GELU(FF1(LN(x))))

Initialization: torch's defaults for ``transformer``; for vit_tiny and the BERT encoders, as
their authors (timm's DeiT, BERT's initializer_range): every Linear and embedding weight, the
class token and the position embeddings from a normal distribution with std 0.02 (truncated at
2 std), biases 0, LayerNorms 1 and 0. These two are built on the meta device and initialized
once (`_initialized`), the truncated normal drawn by rejection (`_trunc_normal_`): torch's
default initialization, overwritten anyway, and torch's inverse-CDF `trunc_normal_` made
BERT-Base take 4-6 s to build on a CPU core, instead of under one.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..errors import ConfigError
from .common import image_shape

INIT_STD = 0.02
BERT_VOCAB = 30522
BERT_POSITIONS = 512


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


class ChunkEmbed(nn.Module):
    """The flat input cut into `tokens` chunks, each embedded by a Linear, plus positions."""

    def __init__(self, features: int, tokens: int, dim: int) -> None:
        super().__init__()
        self.tokens = tokens
        self.embed = nn.Linear(features // tokens, dim)
        self.pos = nn.Embedding(tokens, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.embed(x.reshape(x.shape[0], self.tokens, -1))
        return x + self.pos(torch.arange(self.tokens, device=x.device))


class PatchEmbed(nn.Module):
    """ViT's patch embedding: patches by a strided convolution, a class token first, positions."""

    def __init__(self, channels: int, patches: int, patch: int, dim: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, dim, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.zeros(1, patches + 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x).flatten(2).transpose(1, 2)                   # [B, patches, dim]
        return torch.cat([self.cls.expand(x.shape[0], -1, -1), x], 1) + self.pos


class TokenEmbed(nn.Module):
    """BERT's token and position embeddings of a batch of token ids [B, T]."""

    def __init__(self, vocab: int, positions: int, dim: int) -> None:
        super().__init__()
        self.word = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(positions, dim)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.word(ids) + self.pos(torch.arange(ids.shape[1], device=ids.device))


class Encoder(nn.Module):
    """embed -> `depth` Blocks -> LayerNorm -> readout ("mean" over tokens, or the "first"
    token, through a Linear + tanh pooler if `pooler`) -> Linear head."""

    def __init__(self, embed: nn.Module, num_classes: int, dim: int, depth: int, heads: int,
                 readout: str = "mean", pooler: bool = False) -> None:
        super().__init__()
        self.embed = embed
        self.blocks = nn.Sequential(*[Block(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.readout = readout
        self.pooler = nn.Sequential(nn.Linear(dim, dim), nn.Tanh()) if pooler else nn.Identity()
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(self.blocks(self.embed(x)))
        return self.head(self.pooler(x.mean(1) if self.readout == "mean" else x[:, 0]))


def _check_heads(dim: int, heads: int) -> None:
    if dim % heads:
        raise ConfigError("model_options.heads", heads, f"a divisor of dim ({dim})")


def _initialized(build: Callable[[], nn.Module]) -> nn.Module:
    """The model `build()` makes on the meta device, allocated on the default device and
    initialized as DeiT and BERT are (see the module doc); every parameter is set here."""
    with torch.device("meta"):
        model = build()
    model.to_empty(device=torch.get_default_device())
    for m in model.modules():
        if isinstance(m, (nn.Linear, nn.Conv2d, nn.Embedding)):
            _trunc_normal_(m.weight)
            if getattr(m, "bias", None) is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            m.reset_parameters()
        elif isinstance(m, PatchEmbed):
            _trunc_normal_(m.cls)
            _trunc_normal_(m.pos)
    return model


@torch.no_grad()
def _trunc_normal_(t: torch.Tensor) -> None:
    """Fill `t` from N(0, INIT_STD^2) truncated to +-2 INIT_STD: normal draws, and new draws for
    those outside until none is (rejection sampling: exactly the truncated distribution)."""
    t.normal_(0, INIT_STD)
    if t.is_meta:
        return
    out = t.abs() > 2 * INIT_STD
    while out.any():
        t[out] = torch.empty_like(t[out]).normal_(0, INIT_STD)
        out = t.abs() > 2 * INIT_STD


def transformer(input_shape: tuple[int, ...], num_classes: int, dim: int = 128, depth: int = 4,
                heads: int = 4, tokens: int = 16) -> nn.Module:
    """`depth` transformer blocks of width `dim` over `tokens` tokens cut from the flat input."""
    features = math.prod(input_shape)
    if features % tokens:
        raise ConfigError("model_options.tokens", tokens, f"a divisor of the input size {features}")
    _check_heads(dim, heads)
    return Encoder(ChunkEmbed(features, tokens, dim), num_classes, dim, depth, heads)


def vit_tiny(input_shape: tuple[int, ...], num_classes: int, patch: int | None = None,
             dim: int = 192, depth: int = 12, heads: int = 3) -> nn.Module:
    """DeiT-Tiny; `patch` defaults to 16 for inputs larger than 64 pixels a side, else 4."""
    channels, height, width = image_shape("vit_tiny", input_shape)
    if patch is None:
        patch = 16 if max(height, width) > 64 else 4
    if isinstance(patch, bool) or not isinstance(patch, int) or patch < 1 or height % patch or width % patch:
        raise ConfigError("model_options.patch", patch, f"a divisor of the image sides {height}x{width}")
    _check_heads(dim, heads)
    patches = (height // patch) * (width // patch)
    return _initialized(lambda: Encoder(PatchEmbed(channels, patches, patch, dim), num_classes, dim,
                                        depth, heads, readout="first"))


def bert_base(input_shape: tuple[int, ...], num_classes: int, vocab: int = BERT_VOCAB) -> nn.Module:
    """BERT-Base-like encoder (12 x 768, 12 heads) over token ids of shape (seq_len,)."""
    return _bert("bert_base", input_shape, num_classes, vocab, 768, 12, 12)


def bert_large(input_shape: tuple[int, ...], num_classes: int, vocab: int = BERT_VOCAB) -> nn.Module:
    """BERT-Large-like encoder (24 x 1024, 16 heads) over token ids of shape (seq_len,)."""
    return _bert("bert_large", input_shape, num_classes, vocab, 1024, 24, 16)


def _bert(name: str, input_shape: tuple[int, ...], num_classes: int, vocab: int, dim: int,
          depth: int, heads: int) -> nn.Module:
    if len(input_shape) != 1 or not 1 <= input_shape[0] <= BERT_POSITIONS:
        raise ConfigError("model", name, hint=f"needs token-id inputs of shape (seq_len,) with seq_len "
                          f"<= {BERT_POSITIONS}, got shape {tuple(input_shape)}; the systems benchmarks "
                          "feed them (distsgd.systems.benchmark)")
    if isinstance(vocab, bool) or not isinstance(vocab, int) or vocab < 1:
        raise ConfigError("model_options.vocab", vocab, "a positive integer")
    return _initialized(lambda: Encoder(TokenEmbed(vocab, BERT_POSITIONS, dim), num_classes, dim, depth,
                                        heads, readout="first", pooler=True))

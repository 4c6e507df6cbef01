"""Seed 003's hybrid vision model in miniature: a frozen CLIP-like image encoder, a small
trainable ViT, a gated fusion of the two, an adapter, one refinement block cycled six times
(the seed's "TRM cycles") and a classifier head. Random weights; the shapes are small so that it
runs in milliseconds on a CPU, the structure is the seed's.

Used as a user's own `nn.Module`:

    gpuhours bench --workload inference --module examples/hybrid_vision.py:build \\
        --input 'images=float32[B,3,224,224]' --batch 1,8

`build()` takes keyword arguments to scale it up (width, depth, image size); the defaults are
the miniature. Only torch is needed. The attention is written with
`F.scaled_dot_product_attention` (not `nn.TransformerEncoderLayer`, whose inference fast path
is a fused kernel that ONNX export does not take).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    """A pre-norm transformer block: self-attention and an MLP, each with a residual."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(),
                                 nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).reshape(b, n, 3, self.heads, d // self.heads) \
            .permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v)
        x = x + self.proj(a.transpose(1, 2).reshape(b, n, d))
        return x + self.mlp(self.norm2(x))


class PatchEncoder(nn.Module):
    """Patches (a strided convolution), a class token, learned positions, transformer blocks."""

    def __init__(self, image_size: int, patch: int, dim: int, depth: int, heads: int) -> None:
        super().__init__()
        self.patchify = nn.Conv2d(3, dim, kernel_size=patch, stride=patch)
        n = (image_size // patch) ** 2
        self.cls = nn.Parameter(torch.zeros(1, 1, dim))
        self.pos = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.patchify(images).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


class HybridVision(nn.Module):
    """clip (frozen) + vit (trained) -> fusion (gated) -> adapter -> trm (one block, `cycles`
    times) -> head."""

    def __init__(self, image_size: int = 224, dim: int = 64, clip_depth: int = 2,
                 vit_depth: int = 2, cycles: int = 6, classes: int = 10, heads: int = 4) -> None:
        super().__init__()
        self.cycles = cycles
        self.clip = PatchEncoder(image_size, 32, dim, clip_depth, heads)
        self.clip.requires_grad_(False)  # the seed's CLIP is pretrained and frozen
        self.vit = PatchEncoder(image_size, 32, dim, vit_depth, heads)
        self.gate = nn.Linear(2 * dim, dim)
        self.adapter = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, dim), nn.GELU(),
                                     nn.Linear(dim, dim))
        self.trm = Block(dim, heads)
        self.head = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        c = self.clip(images)
        v = self.vit(images)
        g = torch.sigmoid(self.gate(torch.cat([c, v], dim=-1)))
        x = g * c + (1 - g) * v
        x = x + self.adapter(x)
        for _ in range(self.cycles):  # the same weights each cycle: iterative refinement
            x = self.trm(x)
        return self.head(x[:, 0])


def build(**kwargs: int) -> HybridVision:
    """The miniature (or a larger one: build(dim=768, ...)), random weights, seeded."""
    torch.manual_seed(0)
    return HybridVision(**kwargs)

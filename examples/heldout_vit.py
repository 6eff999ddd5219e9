"""Held-out model (written after the first three held-out models had become development data, and never used to
tune anything): a small vision transformer on 64 x 64 images, for `--model examples.heldout_vit:build`.

Patches of 8 x 8 (64 tokens of width 128) with a learned position embedding, four pre-norm encoder blocks
(multi-head self-attention with 4 heads, then an MLP of width 512) and a mean-pooled head: softmax attention over
every token pair, which neither the Mixer's token MLP nor the zoo's causal language model runs this way (no mask,
image tokens). bench/bench_plan_verify.py verifies it (`--models heldout_vit`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IMAGE, PATCH, WIDTH, HEADS, BLOCKS, CLASSES = (3, 64, 64), 8, 128, 4, 4, 10
TOKENS = (IMAGE[1] // PATCH) * (IMAGE[2] // PATCH)


class Patches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(IMAGE[0], WIDTH, PATCH, stride=PATCH)
        self.position = nn.Parameter(torch.zeros(1, TOKENS, WIDTH))

    def forward(self, images: Tensor) -> Tensor:
        return self.embed(images).flatten(2).transpose(1, 2) + self.position


class Encoder(nn.Module):
    """Pre-norm self-attention and MLP, each with its residual."""

    def __init__(self) -> None:
        super().__init__()
        self.norm_attention = nn.LayerNorm(WIDTH)
        self.attention = nn.MultiheadAttention(WIDTH, HEADS, batch_first=True)
        self.norm_mlp = nn.LayerNorm(WIDTH)
        self.mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: Tensor) -> Tensor:
        y = self.norm_attention(x)
        x = x + self.attention(y, y, y, need_weights=False)[0]
        return x + self.mlp(self.norm_mlp(x))


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.out = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.norm(x).mean(dim=1))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Noisy images with a bright square whose quadrant and size give the class: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    label = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    images = torch.randn(batch_size, *IMAGE, generator=generator) * 0.3
    for i, value in enumerate(label.tolist()):
        side = 8 + 4 * (value // 4)
        top, left = (value % 2) * 32, ((value // 2) % 2) * 32
        images[i, :, top : top + side, left : left + side] += 1.0
    return images, label


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """The patch embedding, one module per encoder block, the head."""
    return [Patches(), *(Encoder() for _ in range(BLOCKS)), Head()], make_batch, loss_fn

"""Held-out model (never used while pipesim's planner was developed): an MLP-Mixer on 32 x 32 images, for
`--model examples.heldout_mixer:build`.

Patches of 4 x 4 (64 tokens of width 128); each block mixes across tokens (a transpose, then an MLP over the 64
positions) and then across channels (an MLP of width 512): the transposes are memory traffic without matmul, and
the channel MLP is four times the token MLP's work, a mix none of the zoo has. bench/bench_plan_verify.py verifies
it on a quiet machine (`--models heldout_mixer`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IMAGE, PATCH, WIDTH, BLOCKS, CLASSES = (3, 32, 32), 4, 128, 5, 10
TOKENS = (IMAGE[1] // PATCH) * (IMAGE[2] // PATCH)


class Patches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Conv2d(IMAGE[0], WIDTH, PATCH, stride=PATCH)

    def forward(self, images: Tensor) -> Tensor:
        return self.embed(images).flatten(2).transpose(1, 2)  # (batch, tokens, width)


class MixerBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.token_norm, self.channel_norm = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.token_mlp = nn.Sequential(nn.Linear(TOKENS, 2 * TOKENS), nn.GELU(), nn.Linear(2 * TOKENS, TOKENS))
        self.channel_mlp = nn.Sequential(nn.Linear(WIDTH, 4 * WIDTH), nn.GELU(), nn.Linear(4 * WIDTH, WIDTH))

    def forward(self, x: Tensor) -> Tensor:
        x = x + self.token_mlp(self.token_norm(x).transpose(1, 2)).transpose(1, 2)
        return x + self.channel_mlp(self.channel_norm(x))


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.out = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.norm(x).mean(dim=1))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Random images whose class is the brightest of ten horizontal bands: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    images = torch.randn(batch_size, *IMAGE, generator=generator)
    bands = images.mean(dim=(1, 3))[:, : CLASSES * 3].reshape(batch_size, CLASSES, 3).mean(dim=2)
    return images, bands.argmax(dim=1)


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """The patch embedding, BLOCKS mixer blocks, the head."""
    return [Patches(), *(MixerBlock() for _ in range(BLOCKS)), Head()], make_batch, loss_fn

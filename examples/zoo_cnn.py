"""Zoo model: a small convolutional network on 3 x 32 x 32 images, for `--model examples.zoo_cnn:build`.

What it keeps for the backward differs from a Transformer's: each conv layer stashes its input feature map, and
the maps shrink (32 x 32 -> 16 x 16 -> 8 x 8) while the channels grow (32 -> 64 -> 128), so the early stages hold
most of the activations and the late ones most of the weights. No batch norm (its statistics would depend on the
microbatch size); a GroupNorm after each convolution instead.

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IMAGE = (3, 32, 32)
CLASSES = 10
CHANNELS = ((3, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2), (128, 128, 1))  # (in, out, stride) per conv layer


def _conv(channels_in: int, channels_out: int, stride: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(channels_in, channels_out, 3, stride=stride, padding=1), nn.GroupNorm(4, channels_out), nn.ReLU()
    )


class Head(nn.Module):
    """Global average pooling and a linear classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(CHANNELS[-1][1], CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(x.mean(dim=(2, 3)))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Random images whose class is the quadrant of the brightest mean patch (a pure function of its arguments)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    images = torch.randn(batch_size, *IMAGE, generator=generator)
    patches = F.avg_pool2d(images.mean(dim=1, keepdim=True), 8).flatten(1)  # 16 patches
    return images, patches.argmax(dim=1) % CLASSES


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """Five conv layers, then the head."""
    return [*(_conv(*c) for c in CHANNELS), Head()], make_batch, loss_fn

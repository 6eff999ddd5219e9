"""Held-out model (written after the second held-out set had become development data, and never used to tune
anything): a bottleneck residual network on 48 x 48 images, for `--model examples.heldout_resnet:build`.

A stem convolution, then bottleneck blocks (1 x 1 down to a quarter of the channels, 3 x 3, 1 x 1 back up, with
the identity or a strided 1 x 1 projection as the shortcut) in three stages of falling resolution. Unlike the
separable CNN, every 3 x 3 here is a full convolution: the arithmetic sits in the middle stages, and each
residual sum keeps a second activation alive through its block. GroupNorm (a microbatch-size-free statistic).
bench/bench_plan_verify.py verifies it (`--models heldout_resnet`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IMAGE, CLASSES = (3, 48, 48), 12
# (channels out, stride) of each bottleneck block after the stem's 64 channels at 24 x 24
BLOCKS = ((128, 1), (128, 1), (256, 2), (256, 1), (512, 2), (512, 1))


class Stem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(IMAGE[0], 64, 5, stride=2, padding=2)
        self.norm = nn.GroupNorm(8, 64)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.norm(self.conv(x)))


class Bottleneck(nn.Module):
    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        inner = channels_out // 4
        self.reduce = nn.Conv2d(channels_in, inner, 1)
        self.norm_reduce = nn.GroupNorm(8, inner)
        self.conv = nn.Conv2d(inner, inner, 3, stride=stride, padding=1)
        self.norm_conv = nn.GroupNorm(8, inner)
        self.expand = nn.Conv2d(inner, channels_out, 1)
        self.norm_expand = nn.GroupNorm(8, channels_out)
        same = channels_in == channels_out and stride == 1
        self.shortcut = nn.Identity() if same else nn.Conv2d(channels_in, channels_out, 1, stride=stride)

    def forward(self, x: Tensor) -> Tensor:
        y = F.relu(self.norm_reduce(self.reduce(x)))
        y = F.relu(self.norm_conv(self.conv(y)))
        return F.relu(self.norm_expand(self.expand(y)) + self.shortcut(x))


class Head(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.out = nn.Linear(channels, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(x.amax(dim=(2, 3)))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Noisy images of a ring whose radius and colour channel give the class: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    label = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    rows = torch.arange(IMAGE[1]).float()[:, None] - IMAGE[1] / 2
    cols = torch.arange(IMAGE[2]).float()[None, :] - IMAGE[2] / 2
    distance = torch.sqrt(rows**2 + cols**2)
    images = torch.randn(batch_size, *IMAGE, generator=generator) * 0.4
    for i, value in enumerate(label.tolist()):
        radius = 6 + 4 * (value // 3)
        images[i, value % 3] += ((distance - radius).abs() < 2).float()
    return images, label


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """The stem, one module per bottleneck block, the head."""
    layers: list[nn.Module] = [Stem()]
    channels = 64
    for out, stride in BLOCKS:
        layers.append(Bottleneck(channels, out, stride))
        channels = out
    return [*layers, Head(channels)], make_batch, loss_fn

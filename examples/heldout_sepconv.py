"""Held-out model (written after the first three held-out models had become development data, and never used to
tune anything): a depthwise-separable convolutional network on 64 x 64 images, for
`--model examples.heldout_sepconv:build`.

A strided stem, then blocks of a depthwise 3 x 3 convolution (one filter per channel: little arithmetic, much
memory traffic) and a pointwise 1 x 1 one; channels double where the resolution halves, so a block's work stays
within about 2x of the next while its activations shrink fourfold: the front of the pipeline holds the memory,
the back the weights. GroupNorm, not batch norm (its statistics would depend on the microbatch size).
bench/bench_plan_verify.py verifies it (`--models heldout_sepconv`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

IMAGE, CLASSES = (3, 64, 64), 10
# (channels out, stride) of each separable block after the stem's 48 channels at 32 x 32
BLOCKS = ((96, 1), (96, 2), (192, 1), (192, 2), (384, 1), (384, 1))


class Stem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(IMAGE[0], 48, 3, stride=2, padding=1)
        self.norm = nn.GroupNorm(8, 48)

    def forward(self, x: Tensor) -> Tensor:
        return F.relu(self.norm(self.conv(x)))


class Separable(nn.Module):
    """Depthwise 3 x 3 (strided where the resolution halves), then pointwise 1 x 1, each normalised."""

    def __init__(self, channels_in: int, channels_out: int, stride: int) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(channels_in, channels_in, 3, stride=stride, padding=1, groups=channels_in)
        self.norm_depthwise = nn.GroupNorm(8, channels_in)
        self.pointwise = nn.Conv2d(channels_in, channels_out, 1)
        self.norm_pointwise = nn.GroupNorm(8, channels_out)

    def forward(self, x: Tensor) -> Tensor:
        x = F.relu(self.norm_depthwise(self.depthwise(x)))
        return F.relu(self.norm_pointwise(self.pointwise(x)))


class Head(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.out = nn.Linear(channels, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(x.mean(dim=(2, 3)))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Noisy images whose class is the orientation band of a grating: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    label = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    angle = label.float() * torch.pi / CLASSES
    rows = torch.arange(IMAGE[1]).float()[:, None]
    cols = torch.arange(IMAGE[2]).float()[None, :]
    phase = torch.cos(angle)[:, None, None] * rows + torch.sin(angle)[:, None, None] * cols
    grating = torch.sin(phase / 3)[:, None, :, :]
    return grating + torch.randn(batch_size, *IMAGE, generator=generator) * 0.5, label


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """The stem, one module per separable block, the head."""
    layers: list[nn.Module] = [Stem()]
    channels = 48
    for out, stride in BLOCKS:
        layers.append(Separable(channels, out, stride))
        channels = out
    return [*layers, Head(channels)], make_batch, loss_fn

"""Held-out model (never used while pipesim's planner was developed): a temporal convolutional network on 1-D
signals, for `--model examples.heldout_tcn:build`.

Residual blocks of dilated 1-D convolutions (dilation 1, 2, 4, 8, 16, 32) over signals of 512 samples and 48
channels: every block costs about the same compute while its receptive field doubles; the input projection is
light and the pooled head is nearly free, so the ends of the pipeline are cheap and the middle even. No batch norm
(its statistics would depend on the microbatch size). bench/bench_plan_verify.py verifies it on a quiet machine
(`--models heldout_tcn`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

CHANNELS_IN, CHANNELS, LENGTH, CLASSES = 4, 48, 512, 6
DILATIONS = (1, 2, 4, 8, 16, 32)


class Projection(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(CHANNELS_IN, CHANNELS, 1)

    def forward(self, x: Tensor) -> Tensor:
        return self.conv(x)


class DilatedBlock(nn.Module):
    """Two dilated convolutions (same length out) with a residual around them."""

    def __init__(self, dilation: int) -> None:
        super().__init__()
        self.first = nn.Conv1d(CHANNELS, CHANNELS, 3, padding=dilation, dilation=dilation)
        self.second = nn.Conv1d(CHANNELS, CHANNELS, 3, padding=dilation, dilation=dilation)
        self.norm = nn.GroupNorm(4, CHANNELS)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.second(F.relu(self.norm(self.first(x))))


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(CHANNELS, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(x.mean(dim=2))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Noisy sines whose class is the frequency band of the first channel: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    label = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    time = torch.arange(LENGTH) / LENGTH
    signal = torch.sin(2 * torch.pi * (label[:, None] + 1) * 4 * time)[:, None, :]
    noise = torch.randn(batch_size, CHANNELS_IN, LENGTH, generator=generator)
    return noise * 0.5 + signal, label


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """The projection, one block per dilation, the head."""
    return [Projection(), *(DilatedBlock(d) for d in DILATIONS), Head()], make_batch, loss_fn

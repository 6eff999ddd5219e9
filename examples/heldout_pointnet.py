"""Held-out model (written after the second held-out set had become development data, and never used to tune
anything): a PointNet classifier of point clouds, for `--model examples.heldout_pointnet:build`.

1,024 points of 3 coordinates each go through shared per-point layers (the same linear map applied to every point:
a matmul of points x channels) widening 64, 128, 256 and 512, then a max over the points (a set function: the
order of the points does not matter), then a head of two linear layers. The per-point layers hold activations of
points x channels while their weights are tiny: memory at the front, arithmetic growing toward the pool.
bench/bench_plan_verify.py verifies it (`--models heldout_pointnet`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

POINTS, CLASSES = 1_024, 8
WIDTHS = (64, 128, 256, 512)


class PointLayer(nn.Module):
    """One linear map shared by every point, normalised over the channels, then a ReLU."""

    def __init__(self, channels_in: int, channels_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(channels_in, channels_out)
        self.norm = nn.LayerNorm(channels_out)

    def forward(self, points: Tensor) -> Tensor:
        return F.relu(self.norm(self.linear(points)))


class PoolHead(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.hidden = nn.Linear(channels, 256)
        self.out = nn.Linear(256, CLASSES)

    def forward(self, points: Tensor) -> Tensor:
        return self.out(F.relu(self.hidden(points.amax(dim=1))))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Noisy points on an ellipsoid whose axis ratios give the class: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    label = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    directions = F.normalize(torch.randn(batch_size, POINTS, 3, generator=generator), dim=-1)
    axes = torch.stack([torch.ones_like(label, dtype=torch.float), 0.4 + 0.1 * label.float(),
                        1.5 - 0.1 * label.float()], dim=-1)  # fmt: skip
    return directions * axes[:, None, :] + torch.randn(batch_size, POINTS, 3, generator=generator) * 0.05, label


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """One module per shared point layer, then the pool and head."""
    layers: list[nn.Module] = []
    channels = 3
    for width in WIDTHS:
        layers.append(PointLayer(channels, width))
        channels = width
    return [*layers, PoolHead(channels)], make_batch, loss_fn

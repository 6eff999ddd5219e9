"""Zoo model: an MLP whose layers differ about 4x in cost, for `--model examples.zoo_mlp_uneven:build`.

A split by parameter count or by layer count puts the heavy middle layers on one stage: the planner must price
each layer from its own profile to balance it. Widths 768 -> 1536 -> 1536 -> 768 (a 768 x 768 layer costs a quarter
of a 1536 x 1536 one; wide enough that a step's arithmetic, not its dispatch, sets its time: tens of ms on 2 CPU
cores at the planner's sizes), a 10-class head, cross-entropy against a fixed random teacher so the loss falls.

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

WIDTHS = (768, 768, 1536, 1536, 1536, 768, 768)  # layer i maps WIDTHS[i] -> WIDTHS[i + 1]
CLASSES = 10


def _dense(width_in: int, width_out: int) -> nn.Module:
    return nn.Sequential(nn.Linear(width_in, width_out), nn.ReLU())


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Gaussian features and the class a fixed linear teacher gives them: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    features = torch.randn(batch_size, WIDTHS[0], generator=generator)
    teacher = torch.randn(WIDTHS[0], CLASSES, generator=torch.Generator().manual_seed(29))
    return features, (features @ teacher).argmax(dim=1)


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """Six hidden layers of uneven cost, then the head."""
    layers = [_dense(a, b) for a, b in zip(WIDTHS, WIDTHS[1:], strict=False)]
    return [*layers, nn.Linear(WIDTHS[-1], CLASSES)], make_batch, loss_fn

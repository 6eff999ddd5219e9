"""Zoo model: many tiny layers, where the time goes to dispatching them, for `--model examples.zoo_tiny_layers:build`.

96 layers of 16 x 16 weights: each layer's arithmetic takes microseconds, so a step's time is mostly Python and
the framework launching each one (and a stage's per-action overhead); a cost model that prices only arithmetic
predicts almost nothing here.

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

WIDTH, DEPTH = 16, 96


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Random inputs; the target is a fixed smooth function of them (a pure function of its arguments)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    inputs = torch.randn(batch_size, WIDTH, generator=generator)
    return inputs, torch.sin(inputs).roll(1, dims=1)


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.mse_loss(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """DEPTH layers of Linear(16, 16) and tanh; the last without the tanh."""
    layers = [nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.Tanh()) for _ in range(DEPTH - 1)]
    return [*layers, nn.Linear(WIDTH, WIDTH)], make_batch, loss_fn

"""Held-out model (written after the first three held-out models had become development data, and never used to
tune anything): a dense autoencoder on 3,072-value signals, for `--model examples.heldout_autoencoder:build`.

Six linear layers narrow the signal from 3,072 to 192 values and widen it back, with GELU between them: the two
outer layers hold 4.7 million weights each, the bottleneck's only 0.15 million, so the work sits at both ends of
the pipeline and almost none in its middle, the opposite of the TCN's even blocks. The loss is the reconstruction's
mean squared error. bench/bench_plan_verify.py verifies it (`--models heldout_autoencoder`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

WIDTHS = (3072, 1536, 768, 192, 768, 1536, 3072)


class Dense(nn.Module):
    """One linear layer, with GELU after it unless it is the last."""

    def __init__(self, width_in: int, width_out: int, last: bool) -> None:
        super().__init__()
        self.linear = nn.Linear(width_in, width_out)
        self.last = last

    def forward(self, x: Tensor) -> Tensor:
        y = self.linear(x)
        return y if self.last else F.gelu(y)


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Sums of three sines with noise; the target is the clean signal: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    time = torch.arange(WIDTHS[0]) / WIDTHS[0]
    frequencies = torch.randint(1, 40, (batch_size, 3), generator=generator).float()
    clean = torch.sin(2 * torch.pi * frequencies[:, :, None] * time).sum(dim=1) / 3
    noise = torch.randn(batch_size, WIDTHS[0], generator=generator) * 0.1
    return clean + noise, clean


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.mse_loss(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """One module per linear layer."""
    pairs = list(zip(WIDTHS, WIDTHS[1:], strict=False))
    layers = [Dense(a, b, last=i == len(pairs) - 1) for i, (a, b) in enumerate(pairs)]
    return layers, make_batch, loss_fn

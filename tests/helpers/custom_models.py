"""Factories for the custom-model tests (`--model tests.helpers.custom_models:NAME`): good ones and bad ones."""

from __future__ import annotations

import torch
from torch import nn

NOT_CALLABLE = 42


def _batch(batch_size: int, step: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed * 7919 + step)
    return torch.randn(batch_size, 6, generator=generator), torch.randn(batch_size, 2, generator=generator)


def mlp():
    """A tuple (layers, make_batch, loss_fn): 3 Linear layers."""
    layers = nn.Sequential(nn.Linear(6, 8), nn.Linear(8, 8), nn.Linear(8, 2))
    return layers, _batch, nn.functional.mse_loss


def wrong_return():
    return [nn.Linear(2, 2)]


def not_modules():
    return ["a", "b"], _batch, nn.functional.mse_loss


def raises():
    raise RuntimeError("the factory broke")


def bad_batch():
    return [nn.Linear(6, 2)], lambda batch_size, step, seed: torch.zeros(3), nn.functional.mse_loss


def returns_none():
    """Returns nothing usable."""


def interrupts():
    raise KeyboardInterrupt


def exits():
    raise SystemExit(0)


def exits_hard():
    import os

    os._exit(0)

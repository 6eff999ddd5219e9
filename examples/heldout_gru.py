"""Held-out model (never used while pipesim's planner was developed): a stacked GRU tagger, for
`--model examples.heldout_gru:build`.

A recurrent layer runs its time steps one after another, so its cost is many small matmuls rather than one large
one, and its backward (through time) keeps every step's gates: a cost profile unlike the zoo's. Token embedding,
four GRU layers of width 96 over 48 steps, a per-token classifier. bench/bench_plan_verify.py verifies it on a
quiet machine (`--models heldout_gru`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

VOCAB, WIDTH, SEQ, LAYERS, TAGS = 512, 96, 48, 4, 8


class Embedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.tokens(tokens)


class Recurrent(nn.Module):
    """One GRU layer with a residual around it."""

    def __init__(self) -> None:
        super().__init__()
        self.gru = nn.GRU(WIDTH, WIDTH, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.gru(x)[0]


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.out = nn.Linear(WIDTH, TAGS)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(x)


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Random tokens tagged by their running sum modulo TAGS (needs the recurrence): a pure function of its
    arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    tokens = torch.randint(0, VOCAB, (batch_size, SEQ), generator=generator)
    return tokens, tokens.cumsum(dim=1) % TAGS


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.reshape(-1, TAGS).float(), target.reshape(-1))


def build() -> tuple[list[nn.Module], object, object]:
    """The embedding, LAYERS GRU layers, the tagger."""
    return [Embedding(), *(Recurrent() for _ in range(LAYERS)), Tagger()], make_batch, loss_fn

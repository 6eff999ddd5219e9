"""Held-out model (written after the second held-out set had become development data, and never used to tune
anything): a gMLP text classifier, for `--model examples.heldout_gmlp:build`.

Token embeddings (a vocabulary of 8,000 x 160), then gMLP blocks: a channel projection up to 640, split in two, one
half normalised and mixed across the 96 token positions by a learned position-by-position matrix (the spatial
gating unit), multiplied into the other half, and projected back, with a residual. The token mixing is a matmul
over positions whose weight is the sequence length squared, neither attention nor the Mixer's per-channel MLP.
bench/bench_plan_verify.py verifies it (`--models heldout_gmlp`).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

VOCAB, TOKENS, WIDTH, INNER, BLOCKS, CLASSES = 8_000, 96, 160, 640, 5, 6


class Embed(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)

    def forward(self, ids: Tensor) -> Tensor:
        return self.tokens(ids)


class GatedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.up = nn.Linear(WIDTH, INNER)
        self.norm_gate = nn.LayerNorm(INNER // 2)
        self.spatial = nn.Parameter(torch.zeros(TOKENS, TOKENS))  # near identity gating at the start, as gMLP's
        self.spatial_bias = nn.Parameter(torch.ones(TOKENS, 1))
        self.down = nn.Linear(INNER // 2, WIDTH)

    def forward(self, x: Tensor) -> Tensor:
        u, v = F.gelu(self.up(self.norm(x))).chunk(2, dim=-1)
        v = torch.einsum("st,btc->bsc", self.spatial, self.norm_gate(v)) + self.spatial_bias
        return x + self.down(u * v)


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(WIDTH)
        self.out = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.norm(x).mean(dim=1))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Token sequences whose class is the band of the most frequent token id: a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    label = torch.randint(0, CLASSES, (batch_size,), generator=generator)
    ids = torch.randint(0, VOCAB, (batch_size, TOKENS), generator=generator)
    band = VOCAB // CLASSES
    marker = label * band + torch.randint(0, band, (batch_size,), generator=generator)
    ids[:, ::3] = marker[:, None]
    return ids, label


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """The embedding, one module per gMLP block, the head."""
    return [Embed(), *(GatedBlock() for _ in range(BLOCKS)), Head()], make_batch, loss_fn

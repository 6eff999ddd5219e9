"""Zoo model: a language model whose embedding and LM head dominate, for `--model examples.zoo_embed_heavy:build`.

Vocabulary 4,096 at width 64: the head's matmul (sequence x 64 x 4,096) costs about 16 of the thin blocks, and the
embedding table holds most of the parameters, so the first and last stages are the heavy ones and a split by
layer count is badly off. Blocks are token-wise MLPs (no attention), each a residual around two nn.Linear.

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

VOCAB, WIDTH, SEQ, BLOCKS = 4096, 64, 64, 6


class Embedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, WIDTH)

    def forward(self, tokens: Tensor) -> Tensor:
        return self.tokens(tokens)


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.fc1, self.fc2 = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, 2 * WIDTH), nn.Linear(2 * WIDTH, WIDTH)

    def forward(self, x: Tensor) -> Tensor:
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


class LMHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.out = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, VOCAB)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.norm(x))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Arithmetic progressions modulo the vocabulary (stride 1..3): a pure function of its arguments."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    start = torch.randint(0, VOCAB, (batch_size, 1), generator=generator)
    stride = torch.randint(1, 4, (batch_size, 1), generator=generator)
    sequence = (start + stride * torch.arange(SEQ + 1)) % VOCAB
    return sequence[:, :-1].contiguous(), sequence[:, 1:].contiguous()


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.reshape(-1, VOCAB).float(), target.reshape(-1))


def build() -> tuple[list[nn.Module], object, object]:
    """The embedding, BLOCKS thin blocks, the LM head."""
    return [Embedding(), *(Block() for _ in range(BLOCKS)), LMHead()], make_batch, loss_fn

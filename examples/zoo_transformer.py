"""Zoo model: a bidirectional Transformer encoder classifying sequences, for
`--model examples.zoo_transformer:build`.

Unlike examples.gpt_small (a causal decoder with a vocabulary-sized head), every stage here is a full encoder
block of the same cost; the input projection and the pooled classifier are small. Sequence 32, width 128, 6 blocks
of 4 heads, inputs are real-valued feature sequences (no embedding table).

The factory contract (pipesim_executor.custom_model): `build()` returns `(layers, make_batch, loss_fn)`. Only torch
is imported.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

SEQ, FEATURES, WIDTH, HEADS, BLOCKS, CLASSES = 32, 16, 128, 4, 6, 8


class Block(nn.Module):
    """Pre-norm encoder block: x + attention(norm(x)), then x + mlp(norm(x)); every weight a leaf nn.Linear."""

    def __init__(self) -> None:
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(WIDTH), nn.LayerNorm(WIDTH)
        self.qkv, self.proj = nn.Linear(WIDTH, 3 * WIDTH), nn.Linear(WIDTH, WIDTH)
        self.fc1, self.fc2 = nn.Linear(WIDTH, 4 * WIDTH), nn.Linear(4 * WIDTH, WIDTH)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(batch, seq, 3, HEADS, width // HEADS).permute(2, 0, 3, 1, 4)
        x = x + self.proj(F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(batch, seq, width))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Pool(nn.Module):
    """Final norm, mean over the sequence, the classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.out = nn.LayerNorm(WIDTH), nn.Linear(WIDTH, CLASSES)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.norm(x).mean(dim=1))


def make_batch(batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
    """Random feature sequences; the class is the position (mod CLASSES) of the largest first feature."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
    inputs = torch.randn(batch_size, SEQ, FEATURES, generator=generator)
    return inputs, inputs[:, :, 0].argmax(dim=1) % CLASSES


def loss_fn(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.float(), target)


def build() -> tuple[list[nn.Module], object, object]:
    """Input projection, BLOCKS encoder blocks, pooling head."""
    return [nn.Linear(FEATURES, WIDTH), *(Block() for _ in range(BLOCKS)), Pool()], make_batch, loss_fn

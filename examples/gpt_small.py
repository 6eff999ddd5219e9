"""A small GPT-style decoder, as a factory for `pipesim-run run --model pipesim_examples.gpt_small:build` (shipped as
`pipesim_examples`; `python -m executor run --model examples.gpt_small:build` in the checkout).

Token and learned position embeddings, N pre-norm blocks (causal multi-head self-attention, then a GELU
MLP, each around a residual), a final layer norm and a linear head to the vocabulary; next-token
cross-entropy on synthetic sequences. Small by default (`SMALL`: 4 blocks, width 64, sequence 32, vocabulary 256) so a
CPU run takes seconds.

The factory contract (pipesim_executor.custom_model): `build()` returns an object with `layers` (the ordered list
pipesim cuts into stages: embeddings, each block, the head), `make_batch(batch_size=, step=, seed=)` and
`loss_fn(output, targets)`. Every parameterised operation is its own leaf module (nn.Linear, nn.LayerNorm,
nn.Embedding), so zero-bubble schedules' split backward computes weight gradients without autograd fallbacks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from pipesim.cost.shape import TransformerShape

# The example's sizes: a TransformerShape (pipesim.cost.shape), the one declaration of a Transformer's sizes.
SMALL = TransformerShape(num_layers=4, hidden_size=64, ffn_size=256, num_heads=4, seq_len=32, vocab_size=256)


class Embeddings(nn.Module):
    def __init__(self, c: TransformerShape) -> None:
        super().__init__()
        self.tokens = nn.Embedding(c.vocab_size, c.hidden_size)
        self.positions = nn.Embedding(c.seq_len, c.hidden_size)
        for table in (self.tokens, self.positions):
            nn.init.normal_(table.weight, std=0.02)

    def forward(self, tokens: Tensor) -> Tensor:
        where = torch.arange(tokens.shape[1], device=tokens.device)
        return self.tokens(tokens) + self.positions(where)


class Block(nn.Module):
    """Pre-norm: x + attention(norm(x)), then x + mlp(norm(x))."""

    def __init__(self, c: TransformerShape) -> None:
        super().__init__()
        self.num_heads = c.num_heads
        self.norm1 = nn.LayerNorm(c.hidden_size)
        self.qkv = nn.Linear(c.hidden_size, 3 * c.hidden_size)
        self.proj = nn.Linear(c.hidden_size, c.hidden_size)
        self.norm2 = nn.LayerNorm(c.hidden_size)
        self.fc1 = nn.Linear(c.hidden_size, c.ffn_size)
        self.fc2 = nn.Linear(c.ffn_size, c.hidden_size)
        for linear in (self.qkv, self.proj, self.fc1, self.fc2):
            nn.init.normal_(linear.weight, std=0.02)
            nn.init.zeros_(linear.bias)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, d_model = x.shape
        head = d_model // self.num_heads
        q, k, v = self.qkv(self.norm1(x)).view(batch, seq, 3, self.num_heads, head).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, d_model))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class Head(nn.Module):
    def __init__(self, c: TransformerShape) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(c.hidden_size)
        self.out = nn.Linear(c.hidden_size, c.vocab_size)
        nn.init.normal_(self.out.weight, std=0.02)
        nn.init.zeros_(self.out.bias)

    def forward(self, x: Tensor) -> Tensor:
        return self.out(self.norm(x))


@dataclass
class GPTSmall:
    """What the factory returns (pipesim_executor.custom_model's contract)."""

    config: TransformerShape
    layers: list[nn.Module] = field(default_factory=list)

    def make_batch(self, batch_size: int, step: int, seed: int) -> tuple[Tensor, Tensor]:
        """Arithmetic progressions modulo the vocabulary (stride 1..3), a pure function of its arguments: the
        structure a model can learn, so the loss falls."""
        c = self.config
        generator = torch.Generator().manual_seed(seed * 1_000_003 + step)
        start = torch.randint(0, c.vocab_size, (batch_size, 1), generator=generator)
        stride = torch.randint(1, 4, (batch_size, 1), generator=generator)
        sequence = (start + stride * torch.arange(c.seq_len + 1)) % c.vocab_size
        return sequence[:, :-1].contiguous(), sequence[:, 1:].contiguous()

    @property
    def loss_fn(self) -> Callable[[Tensor, Tensor], Tensor]:
        return _cross_entropy


def _cross_entropy(output: Tensor, target: Tensor) -> Tensor:
    return F.cross_entropy(output.reshape(-1, output.shape[-1]).float(), target.reshape(-1))


def build(**overrides: int) -> GPTSmall:
    """The model; keyword arguments override SMALL's sizes (e.g. build(num_layers=2) in Python)."""
    c = replace(SMALL, **overrides)  # TransformerShape checks the sizes
    return GPTSmall(c, [Embeddings(c), *(Block(c) for _ in range(c.num_layers)), Head(c)])


def build_tiny() -> GPTSmall:
    """A tiny variant for tests: 2 blocks, d_model 16, sequence 8, vocabulary 32."""
    return build(num_layers=2, hidden_size=16, ffn_size=64, num_heads=2, seq_len=8, vocab_size=32)

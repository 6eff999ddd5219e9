"""What each sequence chunk of a microbatch costs (Seq1F1B): its share of the compute and of the tokens.

Causal attention makes a later chunk dearer: a token attends to every token before it, so the first x of a
sequence (as a fraction) costs C(x) = (1 - a) x + a x^2 of the whole, where a is attention's share of the whole
sequence's compute (`CostModel.attention_fraction`; 0 for a model without attention). An even cut gives each
chunk the same tokens and the later chunks more compute; Seq1F1B's computation-balanced cut gives each the same
compute, the earlier chunks more tokens.

>>> [round(c, 3) for c in chunk_shares(2, 0.5, "even").compute]
[0.375, 0.625]
>>> [round(t, 3) for t in chunk_shares(2, 0.5, "balanced").tokens]
[0.618, 0.382]
"""

from __future__ import annotations

import math
from typing import NamedTuple


class ChunkShares(NamedTuple):
    """Per chunk, its share of a microbatch's compute and of its tokens (each sums to 1)."""

    compute: tuple[float, ...]
    tokens: tuple[float, ...]


def _cumulative(x: float, a: float) -> float:
    return (1 - a) * x + a * x * x


def _inverse(y: float, a: float) -> float:
    """The x with `_cumulative(x, a) == y`, for y in [0, 1]."""
    if a == 0:
        return y
    return (-(1 - a) + math.sqrt((1 - a) ** 2 + 4 * a * y)) / (2 * a)


def chunk_shares(seq_chunks: int, attention_fraction: float, cut: str) -> ChunkShares:
    """Each chunk's share of the compute and the tokens for `cut` ("even" or "balanced")."""
    if not 0 <= attention_fraction <= 1:
        raise ValueError(f"attention_fraction must lie in [0, 1], got {attention_fraction!r}")
    a = attention_fraction
    if cut == "even":
        bounds = [j / seq_chunks for j in range(seq_chunks + 1)]
    elif cut == "balanced":
        bounds = [_inverse(j / seq_chunks, a) for j in range(seq_chunks + 1)]
        bounds[-1] = 1.0
    else:
        raise ValueError(f"unknown sequence cut {cut!r}; valid: even, balanced")
    compute = tuple(_cumulative(hi, a) - _cumulative(lo, a) for lo, hi in zip(bounds, bounds[1:], strict=False))
    tokens = tuple(hi - lo for lo, hi in zip(bounds, bounds[1:], strict=False))
    return ChunkShares(compute, tokens)

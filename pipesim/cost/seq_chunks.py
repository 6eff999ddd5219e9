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

    def of_kind(self, weight_only: bool, chunk: int) -> float:
        """Chunk `chunk`'s share of an action's time: F, B and I by its share of the compute, W (a weight gradient,
        which attention does not touch) by its share of the tokens."""
        return (self.tokens if weight_only else self.compute)[chunk]


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


def token_bounds(seq_len: int, seq_chunks: int, attention_fraction: float, cut: str) -> tuple[int, ...]:
    """Where each chunk of a `seq_len`-token sequence starts, and the end: `chunk_shares`' token shares rounded to
    whole tokens. ValueError where a chunk would get no token.

    >>> token_bounds(16, 2, 0.5, "balanced")
    (0, 10, 16)
    """
    shares = chunk_shares(seq_chunks, attention_fraction, cut).tokens
    bounds = [0]
    for share in shares[:-1]:
        bounds.append(bounds[-1] + share * seq_len)
    cut_at = (0, *(round(b) for b in bounds[1:]), seq_len)
    if any(lo >= hi for lo, hi in zip(cut_at, cut_at[1:], strict=False)):
        raise ValueError(
            f"a sequence of {seq_len} tokens does not cut into {seq_chunks} {cut} chunks of at least one token each; "
            "use fewer sequence chunks or a longer sequence"
        )
    return cut_at

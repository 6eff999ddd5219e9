"""Sequence chunks for real (Seq1F1B): a microbatch's sequence runs as S chunks, the earlier chunks' keys and
values kept for causal attention.

The cut is decided before the run (pipesim_executor.seq_cut: pipesim's). Chunk j's forward takes tokens
start..stop of the microbatch; each attention block keeps its keys and values twice: as chunk j computed them (in
chunk j's graph) and as detached leaves that require grad, which the later chunks' attention reads beside their
own. The backwards run last chunk first (`pipesim.semantics.lower.SEQ_NEEDS`), so by the time chunk j's backward
runs, every later chunk has left the gradient of chunk j's keys and values in those leaves' .grad (autograd sums
them), and chunk j's backward runs from its output and its keys and values at once, with their gradients: one
autograd pass per chunk, and exactly the unchunked model's gradients (tests/test_executor_seq_chunks.py). The
leaves share their storage with the computed tensors: nothing is copied.

A layer takes part by setting `takes_seq_chunk` (its forward then takes the chunk too); a layer without it must
act on each position alone (`POSITIONWISE`), or the chunked forward is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

POSITIONWISE = (nn.Linear, nn.LayerNorm, nn.Embedding, nn.ReLU, nn.GELU, nn.Identity)


@dataclass
class KVCache:
    """One stage's keys and values of one microbatch's chunks: per block, per chunk, the leaves later chunks read,
    and per chunk, per block, what that chunk computed (what its backward starts from)."""

    leaves: dict[int, dict[int, tuple[Tensor, Tensor]]] = field(default_factory=dict)
    computed: dict[int, dict[int, tuple[Tensor, Tensor]]] = field(default_factory=dict)

    def empty(self) -> bool:
        return not self.computed and not any(self.leaves.values())


@dataclass
class SeqChunk:
    """Chunk `index` of a microbatch on one stage: its tokens (`bounds`: the cut, None in sleep mode, which moves no
    tokens) and its stage's cache."""

    index: int
    bounds: tuple[int, ...] | None
    cache: KVCache

    @property
    def start(self) -> int:
        return 0 if self.bounds is None else self.bounds[self.index]

    @property
    def weight(self) -> float:
        """The chunk's share of the microbatch's tokens: its mean loss times this sums to the microbatch's."""
        if self.bounds is None:
            return 1.0
        return (self.bounds[self.index + 1] - self.bounds[self.index]) / self.bounds[-1]

    def cut(self, tensor: Tensor) -> Tensor:
        """The chunk's positions of a (batch, sequence, ...) tensor: its tokens, its targets."""
        if self.bounds is None:
            return tensor
        return tensor[:, self.bounds[self.index] : self.bounds[self.index + 1]]

    def attend(self, block: nn.Module, q: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """Causal attention of this chunk's queries over every earlier chunk's keys and values and its own
        ((batch, heads, positions, head size) each, as scaled_dot_product_attention takes them)."""
        kept = self.cache.leaves.setdefault(id(block), {})
        if self.index not in kept:  # a recomputation keeps the leaves the later chunks have read
            kept[self.index] = (_leaf(k), _leaf(v))
        self.cache.computed.setdefault(self.index, {})[id(block)] = (k, v)
        if self.index == 0:
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        try:
            past = [kept[i] for i in range(self.index)]
        except KeyError as missing:
            raise RuntimeError(f"sequence chunk {self.index} ran before chunk {missing} of its microbatch") from None
        keys = torch.cat([*(p[0] for p in past), k], dim=2)
        values = torch.cat([*(p[1] for p in past), v], dim=2)
        # query i sits at position start + i and sees every key up to it
        mask = torch.ones(q.shape[2], keys.shape[2], dtype=torch.bool, device=q.device).tril(self.start)
        return F.scaled_dot_product_attention(q, keys, values, attn_mask=mask)

    def key_value_grads(self) -> tuple[list[Tensor], list[Tensor]]:
        """What this chunk computed of keys and values, with the gradients the later chunks left for them (what its
        backward runs from, beside its output)."""
        tensors, grads = [], []
        for block, pair in self.cache.computed.get(self.index, {}).items():
            for computed, leaf in zip(pair, self.cache.leaves[block][self.index], strict=True):
                if leaf.grad is not None:
                    tensors.append(computed)
                    grads.append(leaf.grad)
        return tensors, grads

    def past_leaves(self) -> list[Tensor]:
        """The earlier chunks' leaves this chunk read (a backward through autograd.grad hands their gradients back
        here, to `add_past_grads`)."""
        return [leaf for kept in self.cache.leaves.values() for i in range(self.index) if i in kept for leaf in kept[i]]

    @staticmethod
    def add_past_grads(leaves: list[Tensor], grads: tuple[Tensor | None, ...]) -> None:
        for leaf, grad in zip(leaves, grads, strict=True):
            if grad is not None:
                leaf.grad = grad if leaf.grad is None else leaf.grad + grad

    def release(self) -> None:
        """After this chunk's backward: its keys and values are needed no more (the later chunks' are gone)."""
        self.cache.computed.pop(self.index, None)
        for kept in self.cache.leaves.values():
            kept.pop(self.index, None)


def _leaf(t: Tensor) -> Tensor:
    return t.detach().requires_grad_(t.is_floating_point())


def run_layers(module: nn.Module, x: Tensor, chunk: SeqChunk) -> Tensor:
    """A stage's forward over one sequence chunk: its layers in order, each told the chunk where it takes one."""
    for layer in module.children() if isinstance(module, nn.Sequential) else (module,):
        if getattr(layer, "takes_seq_chunk", False):
            x = layer(x, chunk)
        elif isinstance(layer, POSITIONWISE):
            x = layer(x)
        else:
            raise TypeError(
                f"{type(layer).__name__} cannot run a sequence chunk: a layer must act on each position alone or "
                "take the chunk (takes_seq_chunk)"
            )
    return x


class SeqChunks:
    """A rank's sequence chunks: action microbatch u is chunk u % S of data microbatch u // S; each step keeps a
    cache per (stage, data microbatch) from its first chunk's forward to its first chunk's backward."""

    def __init__(self, seq_chunks: int, bounds: tuple[int, ...] | None) -> None:
        if bounds is not None and len(bounds) != seq_chunks + 1:
            raise ValueError(f"{seq_chunks} sequence chunks need {seq_chunks + 1} bounds, got {bounds}")
        self.count, self.bounds = seq_chunks, bounds
        self.caches: dict[tuple[int, int], KVCache] = {}

    def data_microbatch(self, mb: int) -> int:
        return mb // self.count

    def shape(self, shape: torch.Size, mb: int) -> torch.Size:
        """A message's shape for chunk mb % S: the microbatch's with the chunk's positions (dimension 1)."""
        if self.bounds is None:
            return shape
        j = mb % self.count
        return torch.Size((shape[0], self.bounds[j + 1] - self.bounds[j], *shape[2:]))

    def chunk(self, stage: int, mb: int) -> SeqChunk:
        cache = self.caches.setdefault((stage, mb // self.count), KVCache())
        return SeqChunk(mb % self.count, self.bounds, cache)

    def finish(self) -> None:
        """End of a step: every cache was emptied by its chunks' backwards."""
        left = sorted(key for key, cache in self.caches.items() if not cache.empty())
        self.caches.clear()
        if left:
            raise RuntimeError(f"step ended with keys and values of (stage, microbatch) {left} never released")

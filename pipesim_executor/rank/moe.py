"""The built-in mixture-of-experts Transformer (`--model moe`) and its expert parallelism.

The model is the built-in Transformer (pipesim_executor.rank.model builds its layers, with `MoEBlock`s) with each
block's MLP replaced by `experts` MLPs and a router: each token goes to its `top_k` most probable experts (softmax
over the router's logits; with top_k > 1 the chosen probabilities are renormalised to sum to 1, top-1 keeps its
probability, as Switch does, so the router learns) and its output is their gate-weighted sum.
Nothing is dropped (no capacity limit) and there is no auxiliary balancing loss, both on purpose: a token's output
then depends on that token alone, so a microbatched, expert-parallel run computes exactly what one process
computes on the whole batch, however the experts are spread and whatever the microbatch size. Routing is
deterministic given the seed (the weights are; ties in top-k are measure-zero events in float arithmetic).

Expert parallelism (`ExpertParallel`): with D data-parallel replicas, the D processes holding a pipeline stage
split each block's experts evenly, replica d holding experts d x E/D to (d + 1) x E/D - 1. A block then exchanges
tokens with `torch.distributed.all_to_all_single` over those D processes: the dispatch sends each token (one per
chosen expert) to the replica holding its expert, the combine brings the expert outputs back; the backward runs
the same two exchanges in reverse (`_AllToAll`). A dispatch is two all-to-alls: the per-expert counts first
(everyone's split sizes), then the tokens. Every replica of a pipeline rank runs the same actions in the same
order, so their all-to-alls always match. gloo (torch 2.11 and later) and NCCL both implement
`all_to_all_single` with uneven splits.

Gradients: an expert's weights live on one process and receive the gradients of every replica's tokens, the sum
over the D replicas of each one's mean loss: `GradSync` leaves them out of the data-parallel all-reduce and
divides them by D (`expert_parameters`), which makes them the gradient of the global batch's mean loss, as the
all-reduce's average makes the other parameters'. Training then equals one process's, all experts local.

Timing: each exchange (a dispatch or a combine, forward or backward) is timed on the rank's clock and drained
into the step's records by the runtime after the action that ran it (`ExpertParallel.take`), as comm records
of kind "a2a" with peer -1: the link lane of the measured timeline, where the simulator puts its priced
all-to-alls (pipesim.sim.simulate.a2a_spans).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

A2A = "a2a"  # the comm record's kind (pipesim.records.LINK_KINDS)


class Expert(nn.Module):
    """One expert: the Transformer's MLP (Linear, ReLU, Linear), each weight its own leaf (the split backward)."""

    def __init__(self, d_model: int, ffn_size: int) -> None:
        super().__init__()
        self.ff1 = nn.Linear(d_model, ffn_size)
        self.ff2 = nn.Linear(ffn_size, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.ff2(F.relu(self.ff1(x)))


class ExpertParallel:
    """The exchange of one pipeline rank's MoE blocks with the other replicas of its stages.

    `groups[lane]` is the process group of the D replicas of this pipeline rank that a thread on `lane` uses
    (lane 0 unless the runtime says otherwise, `use_lane`): two members of an overlapped pair run on their own
    threads, each with its own group, so that the two streams of collectives never interleave differently on
    two replicas. `clock` marks the start and end of each exchange; `take` hands the marks over.
    """

    def __init__(self, groups: Sequence[Any], member: int, members: int, clock: Any) -> None:
        self.groups, self.member, self.members, self.clock = tuple(groups), member, members, clock
        self._local = threading.local()
        self._lock = threading.Lock()
        self._spans: dict[int, list[tuple[Any, Any]]] = {}

    def use_lane(self, lane: int) -> None:
        """The lane (and group) this thread's exchanges take from now on."""
        self._local.lane = lane

    @property
    def lane(self) -> int:
        return getattr(self._local, "lane", 0)

    @property
    def group(self) -> Any:
        """This thread's lane's group (with one group, every lane's)."""
        return self.groups[self.lane % len(self.groups)]

    def exchange(self, x: Tensor, out_splits: list[int], in_splits: list[int]) -> Tensor:
        """`x`'s rows, `in_splits[d]` of them to member d, in exchange for `out_splits[d]` rows from each."""
        out = x.new_empty((sum(out_splits), *x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=self.group)
        return out

    def counts(self, send: Tensor) -> Tensor:
        """Everyone's (members, local experts) token counts for this member's experts, for ours of theirs."""
        received = torch.empty_like(send)
        dist.all_to_all_single(received, send.contiguous(), group=self.group)
        return received

    def timed(self, start: Any) -> None:
        """Record an exchange of this thread's lane that started at `start` and ends now."""
        end = self.clock.mark()
        with self._lock:
            self._spans.setdefault(self.lane, []).append((start, end))

    def clear(self) -> None:
        with self._lock:
            self._spans.clear()

    def take(self, lane: int = 0) -> list[tuple[Any, Any]]:
        """The (start, end) marks of the exchanges on `lane` since the last take, which are then forgotten."""
        with self._lock:
            return self._spans.pop(lane, [])


class _AllToAll(torch.autograd.Function):
    """An exchange of rows among the members, whose backward is the reverse exchange of the gradients."""

    @staticmethod
    def forward(
        ctx: Any, x: Tensor, parallel: ExpertParallel, out_splits: list[int], in_splits: list[int], start: Any = None
    ) -> Tensor:
        """`start`: where the exchange began, if before this call (a dispatch's counts went first)."""
        ctx.parallel, ctx.splits = parallel, (out_splits, in_splits)
        start = parallel.clock.mark() if start is None else start
        out = parallel.exchange(x, out_splits, in_splits)
        parallel.timed(start)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor, None, None, None, None]:
        out_splits, in_splits = ctx.splits
        start = ctx.parallel.clock.mark()
        back = ctx.parallel.exchange(grad, in_splits, out_splits)
        ctx.parallel.timed(start)
        return back, None, None, None, None


class MoEFeedForward(nn.Module):
    """A block's MLP as routed experts: a router (a leaf Linear) and the experts this process holds."""

    def __init__(self, d_model: int, ffn_size: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.num_experts, self.top_k = num_experts, top_k
        self.router = nn.Linear(d_model, num_experts, bias=False)
        self.experts = nn.ModuleList(Expert(d_model, ffn_size) for _ in range(num_experts))
        self.parallel: ExpertParallel | None = None  # None: every expert is here

    def shard(self, parallel: ExpertParallel) -> None:
        """Keep only the experts of `parallel.member` (their weights are the whole model's, same seed)."""
        if self.num_experts % parallel.members:
            raise ValueError(f"{self.num_experts} experts do not split evenly over {parallel.members} replicas")
        local = self.num_experts // parallel.members
        first = parallel.member * local
        self.experts = nn.ModuleList(list(self.experts)[first : first + local])
        self.parallel = parallel

    def forward(self, x: Tensor) -> Tensor:
        d_model = x.shape[-1]
        tokens = x.reshape(-1, d_model)
        probs = F.softmax(self.router(tokens), dim=-1, dtype=torch.float32)
        gates, chosen = probs.topk(self.top_k, dim=-1)
        if self.top_k > 1:
            gates = gates / gates.sum(dim=-1, keepdim=True)
        # slot i is token i // top_k's (i % top_k)-th choice; slots sorted by expert, ties in token order
        flat = chosen.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = torch.bincount(flat, minlength=self.num_experts)
        routed = tokens.index_select(0, order // self.top_k)
        if self.parallel is None:
            done = self._run_experts(routed, counts.tolist())
        else:
            done = self._exchange_and_run(routed, counts)
        inverse = torch.empty_like(order)
        inverse[order] = torch.arange(order.numel(), device=order.device)
        per_slot = done.index_select(0, inverse).view(-1, self.top_k, d_model)
        mixed = (per_slot * gates.unsqueeze(-1).to(per_slot.dtype)).sum(dim=1)
        return mixed.view_as(x)

    def _run_experts(self, rows: Tensor, counts: Sequence[int]) -> Tensor:
        """Rows grouped by expert (counts[e] for the e-th expert held here), each through its expert. Every
        expert runs, on no rows if none came: its gradient is then zeros, as one process's would be."""
        pieces = rows.split(list(counts))
        return torch.cat([expert(piece) for expert, piece in zip(self.experts, pieces, strict=True)])

    def _exchange_and_run(self, routed: Tensor, counts: Tensor) -> Tensor:
        parallel = self.parallel
        members, local = parallel.members, len(self.experts)
        start = parallel.clock.mark()
        send = counts.view(members, local)  # per destination member, per expert of its
        received = parallel.counts(send)  # per source member, per expert of ours
        send_rows, recv_rows = send.sum(dim=1).tolist(), received.sum(dim=1).tolist()
        # by source, then expert; the counts' exchange is part of the dispatch: one span with the tokens'
        arrived = _AllToAll.apply(routed, parallel, recv_rows, send_rows, start)
        # regroup by expert (then source) for the experts, and back by source for the combine
        grid = received.tolist()
        starts, at = [], 0
        for row in grid:
            starts.append([])
            for count in row:
                starts[-1].append(at)
                at += count
        by_expert = [
            torch.arange(starts[s][e], starts[s][e] + grid[s][e]) for e in range(local) for s in range(members)
        ]
        index = torch.cat(by_expert).to(routed.device) if by_expert else torch.empty(0, dtype=torch.long)
        expert_counts = [sum(grid[s][e] for s in range(members)) for e in range(local)]
        done = self._run_experts(arrived.index_select(0, index), expert_counts)
        back = torch.empty_like(index)
        back[index] = torch.arange(index.numel(), device=index.device)
        return _AllToAll.apply(done.index_select(0, back), parallel, send_rows, recv_rows)


class MoEBlock(nn.Module):
    """The Transformer's post-norm block (pipesim_executor.rank.model.TransformerBlock) with routed experts as
    its MLP."""

    def __init__(self, d_model: int, num_heads: int, ffn_size: int, num_experts: int, top_k: int) -> None:
        super().__init__()
        self.num_heads = num_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.moe = MoEFeedForward(d_model, ffn_size, num_experts, top_k)
        self.norm2 = nn.LayerNorm(d_model)

    def forward(self, x: Tensor) -> Tensor:
        batch, seq, d_model = x.shape
        head = d_model // self.num_heads
        q, k, v = self.qkv(x).view(batch, seq, 3, self.num_heads, head).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        attended = attended.transpose(1, 2).reshape(batch, seq, d_model)
        x = self.norm1(x + self.proj(attended))
        return self.norm2(x + self.moe(x))


def moe_modules(modules: Iterable[nn.Module]) -> list[MoEFeedForward]:
    return [m for module in modules for m in module.modules() if isinstance(m, MoEFeedForward)]


def shard_experts(modules: Iterable[nn.Module], parallel: ExpertParallel) -> int:
    """Keep this member's experts in every MoE block of `modules`; how many blocks there were."""
    blocks = moe_modules(modules)
    for block in blocks:
        block.shard(parallel)
    return len(blocks)


def expert_parameters(module: nn.Module) -> list[nn.Parameter]:
    """The parameters of the experts a sharded module holds alone (none where every expert is local)."""
    return [p for block in moe_modules([module]) if block.parallel is not None for p in block.experts.parameters()]

"""A candidate's lower bounds, from closed forms, before its schedule exists: the step time no order of its actions
can beat and the memory no order can stay under.

Step time (`Bound.step_ms`): rank r cannot start before the first microbatch's forward has crossed the stages below
its lowest stage (the ramp), then runs every action it holds one after another, each after its dispatch gap. Its
last backward of its lowest stage comes after all its forwards and backwards (only weight gradients, W, may follow
it), and that microbatch's input gradient still has to cross every stage below back to stage 0 (the tail). So

    step >= ramp_r + (F and B work of r) + max(tail_r + overhead of stage 0's rank, W work of r + overhead of r)

for every rank; the bound is the busiest rank's. Where chains of stages run side by side (DualPipe's two directions,
`Layout.pipelines`), each chain has its own ramp and tail and its share of the microbatches, and a rank's start and
tail are the least over the stages it holds. It is exact for GPipe, 1F1B and interleaved 1F1B on even stages without
transfers, and below the truth for the others (a zero-bubble schedule's W fills part of its ramp). Costs are the
simulator's own (`CostModel.compute_table` and `transfer_table`: its `compute_ms` and `transfer_ms` per stage,
`dispatch_per_rank`, `overhead_ms`); where the family's
kind of backward is not known, the cheaper of B and I + W is taken, and overlapped pairs are counted at the overlap
factor, so that the bound stays below every schedule of the layout.

Memory (`Bound.memory_bytes`): each rank's static bytes (`pipesim.sim.memory.placement_static_bytes`, the very
price the evaluation adds) plus one microbatch's stash of every stage it holds: just before the backward of its
highest stage for a microbatch, the forwards of that microbatch on all its stages have run and none of their
stashes is freed yet (`pipesim.semantics.lower.stash_change`). Where the family's registry entry says how many
forwards its order holds at once (`ScheduleInfo.stashed`), that many stashes of the rank's smallest stage, if more.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from pipesim.cost.model import CostModel
from pipesim.ir import ActionKind
from pipesim.plan.layout import Layout
from pipesim.sim.memory import placement_static_bytes

F, B, I, W = ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT


@dataclass(frozen=True)
class Bound:
    """Lower bounds of a candidate's step time (ms) and of its fullest device's memory (bytes)."""

    step_ms: float
    memory_bytes: float


def step_bound_ms(layout: Layout, cost: CostModel, microbatches: int, pieces: Sequence[float] = (1.0,)) -> float:
    """The busiest rank's ramp, work and tail (module docstring): no schedule of `layout` under `cost` is faster.

    `pieces`: each microbatch's share of the compute per action where a microbatch runs as several actions (sequence
    chunks, `pipesim.cost.seq_chunks.chunk_shares`, summing to 1; `cost` then prices a chunk's bytes): each piece
    pays its dispatch gap, and the ramp and the tail carry one piece, the smallest."""
    stages, placement = layout.num_stages, layout.stage_to_rank
    factor = min(1.0, cost.overlap_factor)  # and compute alone: an all-to-all may hide under a paired action
    forward = [f * factor for f in cost.compute_table(F, stages)]
    chain_back, total_back = _backwards(layout, cost, factor)
    transfers = cost.transfer_table(stages)
    hops = [t if placement[b] != placement[b + 1] else 0.0 for b, t in enumerate(transfers)]
    gaps, overhead = cost.dispatch_per_rank(layout.num_ranks), cost.overhead_ms(layout.num_ranks)
    piece = min(pieces)
    length = layout.pipeline_stages  # stages of one chain: each chain starts its own ramp (DualPipe's directions)
    microbatches //= layout.pipelines  # each chain runs its share of them
    ramp, tail = [0.0] * stages, [0.0] * stages  # to stage s from its chain's first forward; from s back to it
    for s in range(1, stages):
        if s % length:
            ramp[s] = ramp[s - 1] + forward[s - 1] * piece + hops[s - 1]
            tail[s] = tail[s - 1] + chain_back[s - 1] * piece + hops[s - 1]
    # the rank's first forward waits for the ramp to one of its stages (and the chain's first dispatch); its last
    # backward, of one of its stages, is followed by that gradient's way back to its chain's start and that rank's
    # overhead: the least of each over the stages it holds
    heads = [placement[s - s % length] for s in range(stages)]
    begin = [ramp[s] + (gaps[heads[s]] if s % length else 0.0) for s in range(stages)]
    finish = [tail[s] + overhead[heads[s]] for s in range(stages)]
    work = [f + b for f, b in zip(forward, chain_back, strict=True)]  # per stage and microbatch, before the tail
    deferred = [t - b for t, b in zip(total_back, chain_back, strict=True)]  # what may follow it (W)
    if stages == layout.num_ranks == len(set(placement)):  # one stage a rank: each sum below is that stage's
        actions = 2 * microbatches * len(pieces)
        bound = 0.0
        for s, rank in enumerate(placement):
            start, main = max(gaps[rank], begin[s]), microbatches * work[s] + (actions - 1) * gaps[rank]
            bound = max(bound, start + main + max(finish[s], microbatches * deferred[s] + overhead[rank]))
        return bound
    held: list[list[int]] = [[] for _ in range(layout.num_ranks)]
    for stage, rank in enumerate(placement):
        held[rank].append(stage)
    bound = 0.0
    for rank, own in enumerate(held):
        if not own:
            continue
        start = max(gaps[rank], min(map(begin.__getitem__, own)))
        actions = 2 * microbatches * len(own) * len(pieces)  # a forward and a backward at least, per stage and piece
        main = microbatches * sum(map(work.__getitem__, own)) + (actions - 1) * gaps[rank]
        deferrable = microbatches * sum(map(deferred.__getitem__, own))
        after = max(min(map(finish.__getitem__, own)), deferrable + overhead[rank])
        bound = max(bound, start + main + after)
    return bound


def _backwards(layout: Layout, cost: CostModel, factor: float) -> tuple[list[float], list[float]]:
    """Per stage, the backward part that must precede the next lower stage's (B, or I where the family splits it)
    and the whole backward (B, or I + W); a splitting family may still run some B whole, so the cheaper of each."""
    stages = layout.num_stages
    if not layout.uses_split_backward:
        whole = [b * factor for b in cost.compute_table(B, stages)]
        return whole, whole
    whole, first, rest = (cost.compute_table(kind, stages) for kind in (B, I, W))
    chain = [min(b, i) * factor for b, i in zip(whole, first, strict=True)]
    total = [min(b, i + w) * factor for b, i, w in zip(whole, first, rest, strict=True)]
    return chain, total


def memory_bound_bytes(layout: Layout, cost: CostModel, optimizer: str, stashed: Sequence[int] | None = None) -> float:
    """The fullest rank's static bytes plus its stash at the least: one microbatch on each of its stages (module
    docstring), or `stashed[r]` forwards at once (the family's registry fact), each at least its smallest stage's."""
    static = placement_static_bytes(layout.stage_to_rank, layout.num_ranks, cost, optimizer)
    one_each = [0.0] * layout.num_ranks
    smallest = [math.inf] * layout.num_ranks
    for stage, rank in enumerate(layout.stage_to_rank):
        stash = cost.stash_bytes(stage)
        # chains side by side run different microbatches: only one stage's stash is sure to be held with another's
        one_each[rank] = one_each[rank] + stash if layout.pipelines == 1 else max(one_each[rank], stash)
        smallest[rank] = min(smallest[rank], stash)
    held = one_each if stashed is None else [max(a, k * b) for a, k, b in zip(one_each, stashed, smallest, strict=True)]
    return max(sum(parts) + h for parts, h in zip(static, held, strict=True))


def offload_memory_bound_bytes(layout: Layout, cost: CostModel, optimizer: str) -> float:
    """The fullest rank's static bytes plus the one stash no offload can move: when a backward starts, its own
    microbatch's stash of that stage is on the device (its RELOAD has ended), so at least the rank's largest stage's."""
    static = placement_static_bytes(layout.stage_to_rank, layout.num_ranks, cost, optimizer)
    largest = [0.0] * layout.num_ranks
    for stage, rank in enumerate(layout.stage_to_rank):
        largest[rank] = max(largest[rank], cost.stash_bytes(stage))
    return max(sum(parts) + held for parts, held in zip(static, largest, strict=True))


def candidate_bound(
    layout: Layout,
    cost: CostModel,
    microbatches: int,
    optimizer: str,
    stashed: Sequence[int] | None = None,
    pieces: Sequence[float] = (1.0,),
) -> Bound:
    """Both bounds of one candidate (its layout, its cost model, its microbatches per replica, the forwards its
    family holds at once per rank where the registry says, each microbatch's pieces: `step_bound_ms`)."""
    return Bound(
        step_bound_ms(layout, cost, microbatches, pieces), memory_bound_bytes(layout, cost, optimizer, stashed)
    )

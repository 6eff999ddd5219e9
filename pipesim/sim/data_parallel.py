"""Data parallelism around a pipeline: where a step pays for its gradient reduction, decided here and only here,
and the executor's all-reduce after each stage's last backward, placed on the simulated step.

With `CostModel.dp_group.replicas` = D > 1, D replicas of the pipeline train on different slices of the batch and
every stage's gradients are reduced over its D copies before the optimizer steps. Where that is charged
(`reduction_charge`), for `simulate`, `compare`, the app, the executor's prediction and the planner alike:

* one replica: nowhere (`NOTHING`);
* the schedule states torch's REDUCE_GRAD (a compute_comms CSV): where it stands, on its rank (`STATED`);
* the parameters are sharded (FSDP) and the schedule states no collective: torch's own lowering places its
  UNSHARD, RESHARD and REDUCE_GRAD (`TORCH_LOWERING`, `pipesim.semantics.torch_order.torch_lowered`);
* otherwise, as the executor does it (`AFTER_BACKWARD`), which is DDP's way: once a stage's last backward action
  of the step (its last B, or its last W when the backward is split) has ended, that stage's gradients go out in
  buckets, asynchronously, so the reduction overlaps whatever backward work the rank still has; the rank waits
  for them all before its optimizer step.

The model of the last, and nothing more (the simulation is per replica: every replica runs the same schedule
at the same speed): stage s's reduction starts when its last backward ends, or when the rank's previous
reduction ends (a rank's collectives run one after the other), and takes the group's price of it
(`CostModel.collective_ms(s, REDUCE_GRAD)`: the bucketed ring all-reduce, `pipesim.cost.collectives`); it uses
the network, not the rank's compute, so the rank's later actions are not delayed by it; the rank's step ends
after its last action and its last reduction, whichever is later, plus its overhead (`pipesim.sim.steps`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from itertools import compress
from operator import itemgetter

from pipesim.cost.model import CostModel
from pipesim.ir import Action, ActionKind, CommAction, CommKind, Schedule
from pipesim.records import CommSpan
from pipesim.semantics.torch_order import torch_lowered

ALLREDUCE = "allreduce"  # CommSpan.kind of a gradient all-reduce; its `peer` is the number of participants
NOTHING, STATED, TORCH_LOWERING, AFTER_BACKWARD = "nothing", "stated", "torch lowering", "after backward"
_GRAD_DONE = (ActionKind.BACKWARD, ActionKind.BACKWARD_WEIGHT)
_COLLECTIVES = (CommKind.UNSHARD, CommKind.RESHARD, CommKind.REDUCE_GRAD)


def reduction_charge(schedule: Schedule, cost: CostModel) -> str:
    """Where `schedule` under `cost` pays for its gradient reduction: NOTHING, STATED, TORCH_LOWERING or
    AFTER_BACKWARD (the module docstring says when). The one decision; every caller goes through it."""
    if cost.dp_group.replicas == 1:
        return NOTHING
    stated = {
        e.kind for row in schedule.order or () for e in row if isinstance(e, CommAction) and e.kind in _COLLECTIVES
    }
    if CommKind.REDUCE_GRAD in stated:
        return STATED
    if cost.dp_group.sharded and not stated:
        return TORCH_LOWERING
    return AFTER_BACKWARD


def charged_schedule(schedule: Schedule, charge: str) -> Schedule:
    """The schedule to simulate for `charge`: torch's lowering under TORCH_LOWERING, else the schedule itself."""
    return torch_lowered(schedule) if charge == TORCH_LOWERING else schedule


def last_gradients(ranks: Sequence[int], actions: Sequence[Action], num_ranks: int) -> list[list[tuple[int, int]]]:
    """Per rank, (position, stage) of each of its stages' last B or W, in the rank's order (positions index
    `actions`, which lists each rank's actions in the order it runs them, as `Dependencies` and simulated
    timelines do)."""
    if len(ranks) != len(actions):
        raise ValueError(f"{len(ranks)} ranks for {len(actions)} actions")
    # at C speed (the planner asks once per shape): dict() keeps each (rank, stage)'s last position
    done = list(map(_GRAD_DONE.__contains__, map(itemgetter(1), actions)))
    keys = compress(zip(ranks, map(itemgetter(0), actions), strict=True), done)
    last: dict[tuple[int, int], int] = dict(zip(keys, compress(range(len(done)), done), strict=True))
    per_rank: list[list[tuple[int, int]]] = [[] for _ in range(num_ranks)]
    for (rank, stage), position in last.items():
        per_rank[rank].append((position, stage))
    for row in per_rank:
        row.sort()
    return per_rank


def reduction_windows(
    last: list[list[tuple[int, int]]], ends: Sequence[float], cost: CostModel
) -> list[list[tuple[int, float, float]]]:
    """Per rank, (position of the stage's last backward, start, end) of each stage's reduction after it: serial
    per rank, each starting when its backward has ended and the rank's previous reduction is done."""
    windows: list[list[tuple[int, float, float]]] = []
    for row in last:
        free = -math.inf
        mine = []
        for position, stage in row:
            start = max(ends[position], free)
            free = start + cost.collective_ms(stage, CommKind.REDUCE_GRAD)
            mine.append((position, start, free))
        windows.append(mine)
    return windows


def reduction_spans(
    windows: list[list[tuple[int, float, float]]], actions: Sequence[Action], replicas: int
) -> tuple[CommSpan, ...]:
    """The reductions as the timeline draws them: CommSpans of kind ALLREDUCE, `peer` the number of replicas,
    `action` the stage's last backward (as the executor records its own)."""
    spans = [
        CommSpan(rank, ALLREDUCE, replicas, actions[position], start, end)
        for rank, row in enumerate(windows)
        for position, start, end in row
    ]
    return tuple(sorted(spans, key=lambda span: (span.start, span.rank)))

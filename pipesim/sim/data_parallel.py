"""Data parallelism around a pipeline: each stage's gradient all-reduce, placed on the simulated step.

With `CostModel.data_parallel` = D > 1, D replicas of the pipeline train on different slices of the batch and
every stage's gradients are averaged over its D copies before the optimizer steps. The executor does it as
DDP does: once a stage's last backward action of the step (its last B, or its last W when the backward is
split) has ended, that stage's gradients go out in buckets, asynchronously, so the all-reduce overlaps
whatever backward work the rank still has; the rank waits for them all before its optimizer step.

The model here is that, and nothing more (the simulation is per replica: every replica runs the same
schedule at the same speed):

* stage s's all-reduce starts when its last backward ends, or when the rank's previous all-reduce ends
  (a rank's collectives run one after the other) and takes `bucketed_allreduce_ms(param_bytes, D, dp_link)`;
* it uses the network, not the rank's compute, so the rank's later actions are not delayed by it;
* the rank's step ends after its last action and its last all-reduce, whichever is later, plus its overhead.

So a step with data parallelism is predicted as the same step without it, with each rank's tail lengthened by
the part of its all-reduces that the remaining backward did not hide. `grad_sync` returns the all-reduce spans
(drawn on the simulated timeline as CommSpans of kind "allreduce") and that extra tail per rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from pipesim.cost.collectives import bucketed_allreduce_ms
from pipesim.cost.model import CostModel
from pipesim.ir import ActionKind
from pipesim.records import CommSpan, Timeline

ALLREDUCE = "allreduce"  # CommSpan.kind of a gradient all-reduce; its `peer` is the number of participants
_GRAD_DONE = (ActionKind.BACKWARD, ActionKind.BACKWARD_WEIGHT)


@dataclass(frozen=True)
class GradSync:
    """The simulated all-reduces of one step and what they add to each rank's tail."""

    spans: tuple[CommSpan, ...]
    extra_ms: tuple[float, ...]  # per rank: last all-reduce end minus last action end, at least 0


def last_backwards(timeline: Timeline) -> dict[tuple[int, int], tuple[float, object]]:
    """(rank, stage) -> (end, action) of the stage's last weight-gradient action (B or W) on that rank."""
    last: dict[tuple[int, int], tuple[float, object]] = {}
    for span in timeline.spans:
        if span.action.kind in _GRAD_DONE:
            key = (span.rank, span.action.stage)
            if key not in last or span.end > last[key][0]:
                last[key] = (span.end, span.action)
    return last


def grad_sync(timeline: Timeline, cost: CostModel) -> GradSync:
    """Each stage's all-reduce after its last backward, serial per rank; none when data_parallel is 1."""
    ends = [-math.inf] * timeline.num_ranks
    for span in timeline.spans:
        ends[span.rank] = max(ends[span.rank], span.end)
    if cost.data_parallel < 2 or any(c.kind == "reduce_grad" for c in timeline.comm):
        # none, or the schedule states torch's REDUCE_GRAD, which the simulation priced where it stands
        return GradSync((), (0.0,) * timeline.num_ranks)
    free = [-math.inf] * timeline.num_ranks  # when each rank's previous all-reduce is done
    spans = []
    for (rank, stage), (end, action) in sorted(last_backwards(timeline).items(), key=lambda item: item[1][0]):
        start = max(end, free[rank])
        duration = bucketed_allreduce_ms(cost.stage(stage).param_bytes, cost.data_parallel, cost.dp_link)
        free[rank] = start + duration
        spans.append(CommSpan(rank, ALLREDUCE, cost.data_parallel, action, start, start + duration))
    extra = tuple(max(free[r] - ends[r], 0.0) if free[r] > -math.inf else 0.0 for r in range(timeline.num_ranks))
    return GradSync(tuple(spans), extra)

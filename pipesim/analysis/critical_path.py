"""The critical path: the chain of actions that sets the step time, read off a timeline.

Works on simulated and measured timelines alike (arrivals need not meet starts exactly in a measured one),
over the dependencies of `pipesim.semantics.dag` and the transfer times of a cost model.
"""

from __future__ import annotations

from pipesim._perf import paused_gc
from pipesim.cost.model import CostModel
from pipesim.ir import Action, Schedule
from pipesim.records import Timeline
from pipesim.semantics.dag import dependencies


@paused_gc()
def critical_path(schedule: Schedule, timeline: Timeline, cost: CostModel) -> list[Action]:
    """The chain of actions that set the step time, in time order.

    Walks back from the action that ends last, each time to the predecessor
    (previous action on the rank, or a producer plus its transfer) whose
    arrival is latest; ties go to the rank predecessor. Works for measured
    timelines too, where arrivals need not meet starts exactly. A backward that waited for its RELOAD is reached
    through its compute predecessors: the path names compute actions only.
    """
    deps = dependencies(schedule)
    span_of = {span.action: span for span in timeline.spans}
    missing = [a for a in deps.actions if a not in span_of]
    if missing:
        raise ValueError(f"the timeline has no span for {missing[0]}; was it simulated from this schedule?")
    ends = [span_of[a].end for a in deps.actions]
    first_of_rank = set(deps.offsets[:-1])
    current = max(range(len(ends)), key=lambda i: (ends[i], -i)) if ends else None
    path: list[int] = []
    while current is not None:
        path.append(current)
        best, best_arrival = None, float("-inf")
        if current not in first_of_rank:
            best, best_arrival = current - 1, ends[current - 1]
        for d in deps.deps[current]:
            if d >= len(ends):  # a RELOAD on the copy engine: the path follows compute actions only
                continue
            arrival = ends[d]
            if deps.ranks[d] != deps.ranks[current]:
                arrival += cost.transfer_ms(deps.actions[d].stage, deps.actions[current].stage)
            if arrival > best_arrival:
                best, best_arrival = d, arrival
        current = best
    return [deps.actions[i] for i in reversed(path)]

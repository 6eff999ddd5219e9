"""Schedule + CostModel -> simulated Timeline.

Semantics (the same the executor follows for real): an action starts when
the previous action of its rank has ended and every data dependency has
ended, plus the transfer time when producer and consumer sit on different
ranks. Transfers overlap with compute (asynchronous sends); a rank only
waits for what it needs. There are no random choices and ties cannot change
times, so a schedule and a cost model always give the same timeline.
"""

from __future__ import annotations

from itertools import repeat

from pipesim._perf import paused_gc
from pipesim.cost import CostModel
from pipesim.dag import Dependencies, deadlock_error, dependencies, hop_times, sweep
from pipesim.ir import ActionKind, Schedule
from pipesim.timeline import Span, Timeline


@paused_gc()
def simulate(schedule: Schedule, cost: CostModel, deps: Dependencies | None = None) -> Timeline:
    """Simulate one step; raises DeadlockError when ranks would wait on each other forever.

    Missing or duplicated producers raise ScheduleError; run `validate` first
    for the full set of structural checks. `deps` lets a caller that already
    holds `dependencies(schedule)` skip recomputing it.
    """
    cost.check_fits(schedule)
    if deps is None:
        deps = dependencies(schedule)
    durations = _durations(deps, cost, schedule.num_stages)
    starts, ends, stuck = sweep(deps, durations, hop_times(deps, _transfers(schedule, cost)))
    if stuck:
        raise deadlock_error(deps, stuck)
    new = tuple.__new__  # Span(...) costs a Python-level __new__ per span; 10^5 of them add up
    spans = tuple(map(new, repeat(Span), zip(deps.ranks, deps.actions, starts, ends, repeat(0))))
    return Timeline(
        num_ranks=schedule.num_ranks,
        spans=spans,
        source="simulated",
        schedule_name=schedule.name,
        meta={
            "num_stages": schedule.num_stages,
            "num_microbatches": schedule.num_microbatches,
            "stage_to_rank": list(schedule.stage_to_rank),
            "cost_source": cost.source,
            "recompute": cost.recompute,
        },
    )


def _durations(deps: Dependencies, cost: CostModel, num_stages: int) -> list[float]:
    """Per-action durations from a (kind -> per-stage list) table: one lookup per action."""
    table = {kind: [cost.duration_ms(s, kind) for s in range(num_stages)] for kind in ActionKind}
    return [table[kind][stage] for stage, kind, _ in deps.actions]


def _transfers(schedule: Schedule, cost: CostModel) -> list[float]:
    """Transfer time across each stage boundary b (between stage b and b+1); 0 after the last stage."""
    return [cost.transfer_ms(b, b + 1) for b in range(schedule.num_stages - 1)] + [0.0]

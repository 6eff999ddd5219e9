"""The engine's sweep timed again: one shape's dependencies under several cost models (the planner's candidates).

`sweep` finds, as it runs, an order in which every action's producers have ended before it (`runs`: each stretch a
rank ran before it parked). That order holds whatever the costs, so a later sweep of the same dependencies can walk
it straight, without parking and waking ranks, and give the very same numbers.
"""

from __future__ import annotations

from pipesim.cost.model import CostModel
from pipesim.ir import ActionKind
from pipesim.semantics.dag import Dependencies

KINDS = tuple(ActionKind)


def replay(
    deps: Dependencies,
    runs: list[tuple[int, int, int]],
    durations: list[float],
    hops: list[float],
    gaps: list[float],
) -> tuple[list[float], list[float]]:
    """(starts, ends) of a sweep timed again in the order an earlier sweep of the same dependencies ran (its
    `runs`): every action's producers ended earlier in that order whatever the costs, and an action's time is the
    same few operations in any order, so the numbers are `sweep`'s to the bit, without its waiting and waking (the
    planner times one shape under several cost models)."""
    blocking = deps.blocking
    assert blocking is not None and not deps.joined, "replay follows the one-producer loop's runs"
    n = len(blocking)
    starts = [0.0] * n
    ends = [0.0] * n
    clock = [0.0] * deps.num_ranks
    if not any(gaps):  # no dispatch gap (the planner's usual case): the same sums without adding zeros
        _replay_without_gaps(blocking, runs, durations, hops, starts, ends, clock)
        return starts, ends
    for rank, first, stop in runs:
        now = clock[rank]
        for i in range(first, stop):
            start = now + gaps[i]
            d = blocking[i]
            if d >= 0:
                arrival = ends[d] + hops[i]
                if arrival > start:
                    start = arrival
            now = start + durations[i]
            starts[i] = start
            ends[i] = now
        clock[rank] = now
    return starts, ends


def _replay_without_gaps(
    blocking: list[int],
    runs: list[tuple[int, int, int]],
    durations: list[float],
    hops: list[float],
    starts: list[float],
    ends: list[float],
    clock: list[float],
) -> None:
    """`replay`'s loop where every gap is 0 (x + 0.0 is x: the numbers are the same)."""
    for rank, first, stop in runs:
        now = clock[rank]
        for i in range(first, stop):
            start = now
            d = blocking[i]
            if d >= 0:
                arrival = ends[d] + hops[i]
                if arrival > start:
                    start = arrival
            now = start + durations[i]
            starts[i] = start
            ends[i] = now
        clock[rank] = now


def duration_slots(deps: Dependencies, num_stages: int) -> list[int]:
    """Per action, its place in `slot_durations`' table (kind-major, then stage): found once per shape."""
    kind_base = {kind: k * num_stages for k, kind in enumerate(KINDS)}
    return [kind_base[kind] + stage for stage, kind, _ in deps.actions]


def slot_durations(slots: list[int], cost: CostModel, num_stages: int) -> list[float]:
    """`pipesim.sim.simulate.action_durations` of a shape without overlapped groups, read through its `slots` at C
    speed: the same `duration_ms` per (stage, kind), one table lookup per action."""
    table = [cost.duration_ms(stage, kind) for kind in KINDS for stage in range(num_stages)]
    return list(map(table.__getitem__, slots))

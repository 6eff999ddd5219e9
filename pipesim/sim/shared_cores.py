"""Ranks that share a machine's cores: the simulation when fewer cores than ranks compute at once.

With one device per rank (GPUs), an action runs at full speed whatever the other ranks do. CPU ranks on one
machine are different: 4 single-threaded ranks on 2 cores cannot all compute at full speed, and how fast an
action runs depends on how many others run beside it, which the schedule decides (fewer during the bubbles).
The model is processor sharing: with k actions computing and `slots` of them able to run at full speed
(cores / threads per rank), each progresses at min(1, slots / k) of its full speed. Waiting ranks (blocked in a
receive, idle in a bubble) use no core.

* `sweep_shared` is `pipesim.sim.simulate.sweep` under that model (event by event; with slots >= ranks it gives
  exactly sweep's times);
* `work_of_spans` inverts it for a measured timeline: an action's full-speed duration is the integral of its
  rate over its measured span, so durations measured under sharing (the executor's in-situ calibration) turn
  into the full-speed costs the simulation needs.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

from pipesim.semantics.dag import Dependencies

_EPS = 1e-12


def sweep_shared(
    deps: Dependencies,
    durations: list[float],
    hops: list[float],
    gaps: list[float],
    slots: int,
    rank_start: list[float] | None = None,
) -> tuple[list[float], list[float], list[tuple[int, int, int]]]:
    """Every rank's list in order, each action started as soon as its inputs are there, computing at
    min(1, slots / running) of full speed. Returns (starts, ends, stuck) as `sweep` does."""
    if slots < 1:
        raise ValueError(f"cores shared by the ranks must be at least 1, got {slots}")
    n, num_ranks, joined = len(deps.actions), deps.num_ranks, deps.joined or {}
    offsets, dep_lists, ranks = deps.offsets, deps.deps, deps.ranks
    starts, ends = [0.0] * n, [-1.0] * n
    pointer = list(offsets[:-1])
    free_at = list(rank_start) if rank_start is not None else [0.0] * num_ranks
    remaining: dict[int, float] = {}  # rank -> work left (ms at full speed) of its running action
    now = 0.0
    while True:
        # Start every action whose rank is free and whose inputs have arrived by now.
        upcoming = []
        for rank in range(num_ranks):
            if rank in remaining or pointer[rank] >= offsets[rank + 1]:
                continue
            ready = _ready_time(pointer[rank], rank, free_at, gaps, dep_lists, ends, ranks, hops, joined)
            if ready is None:
                continue
            if ready <= now + _EPS:  # events stop at every ready time, so this one is now
                starts[pointer[rank]] = now
                remaining[rank] = durations[pointer[rank]]
            else:
                upcoming.append(ready)
        if not remaining:
            if not upcoming:
                break
            now = min(upcoming)
            continue
        rate = min(1.0, slots / len(remaining))
        finish = now + min(remaining.values()) / rate
        step_to = min([finish, *upcoming])
        done = []
        for rank in remaining:
            remaining[rank] -= (step_to - now) * rate
            if remaining[rank] <= _EPS * max(1.0, durations[pointer[rank]]):
                done.append(rank)
        now = step_to
        for rank in done:
            i = pointer[rank]
            ends[i] = now
            free_at[rank] = now
            pointer[rank] += 1
            del remaining[rank]
    stuck = []
    for rank in range(num_ranks):
        i = pointer[rank]
        if i < offsets[rank + 1]:
            awaited = next(d for m in (i, *joined.get(i, ())) for d in dep_lists[m] if ends[d] < 0)
            stuck.append((rank, i, awaited))
    return starts, ends, stuck


def _ready_time(
    i: int,
    rank: int,
    free_at: list[float],
    gaps: list[float],
    dep_lists: list[tuple[int, ...]],
    ends: list[float],
    ranks: list[int],
    hops: list[float],
    joined: dict,
) -> float | None:
    """When action i can start (its rank free plus the dispatch gap, its inputs arrived; the first member of an
    overlapped group waits for every member's inputs, as in `simulate.sweep`); None if an input has not been
    produced yet."""
    ready = free_at[rank] + gaps[i]
    members = (i, *joined.get(i, ()))
    for m in members:
        for d in dep_lists[m]:
            if d in members:
                continue
            if ends[d] < 0:
                return None
            arrival = ends[d] + (hops[m] if ranks[d] != rank else 0.0)
            if arrival > ready:
                ready = arrival
    return ready


def work_of_spans(spans: Sequence[tuple[float, float]], slots: int) -> list[float]:
    """Full-speed work of each measured compute span (start, end) of all ranks on one clock: the integral over
    the span of min(1, slots / number of spans running at that moment)."""
    events = []
    for index, (start, end) in enumerate(spans):
        events.append((start, 1, index))
        events.append((end, -1, index))
    heapq.heapify(events)
    work = [0.0] * len(spans)
    running: set[int] = set()
    last = None
    while events:
        time, change, index = heapq.heappop(events)
        if running and last is not None and time > last:
            rate = min(1.0, slots / len(running))
            for member in running:
                work[member] += (time - last) * rate
        last = time
        if change > 0:
            running.add(index)
        else:
            running.discard(index)
    return work

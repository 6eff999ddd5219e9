"""The dependency graph of a schedule: data edges plus each rank's order.

Two representations, for two jobs:

* `dependencies` - flat Python lists indexed by action id. The simulator,
  deadlock detection and the critical path run on it: schedules of 10^5
  actions are swept in well under a second, which networkx cannot do.
* `build_dag` - a networkx DiGraph for people and charts (nodes are
  `Action`s with attributes, edges say "data" or "order").

Data edges: F(s,m) -> F(s+1,m); F(s,m) -> first backward (B or I) of (s,m);
first backward of (s+1,m) -> first backward of (s,m); I(s,m) -> W(s,m).
Order edges join consecutive actions of a rank. A cycle is a deadlock.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import chain
from operator import itemgetter

import networkx as nx

from pipesim._perf import paused_gc
from pipesim.cost import CostModel
from pipesim.ir import Action, B, F, I, Schedule, W
from pipesim.timeline import Timeline
from pipesim.validate import ScheduleError

_CYCLE_SHOWN = 12  # actions of a cycle printed in full before eliding


@dataclass(frozen=True)
class Dependencies:
    """Actions in rank-major order, with per-action data dependencies by id.

    Ids of rank r are `offsets[r]` .. `offsets[r+1]-1`, in that rank's order,
    so the order edge of id i (when not a rank's first) is i-1.
    """

    actions: list[Action]
    ranks: list[int]
    offsets: list[int]
    index: dict[Action, int]
    deps: list[tuple[int, ...]]

    @property
    def num_ranks(self) -> int:
        return len(self.offsets) - 1


class DeadlockError(ScheduleError):
    """The schedule's dependency graph has a cycle: some ranks wait on each other forever."""

    def __init__(self, cycle: list[Action], waits: list[tuple[int, Action, Action, int]]) -> None:
        self.cycle = cycle
        self.waits = waits  # (rank, its stuck action, the action it waits for, that action's rank)
        rank, head, _, _ = waits[0]
        said = "; ".join(
            f"rank {r} waits at {h} for {d} "
            + ("later in its own list" if dr == r else f"on rank {dr}")
            for r, h, d, dr in waits
        )
        shown = cycle if len(cycle) <= _CYCLE_SHOWN else cycle[:_CYCLE_SHOWN - 1] + ["..."]  # type: ignore[list-item]
        path = " -> ".join(str(a) for a in [*shown, cycle[0]])
        super().__init__("deadlock", f"{said} (cycle: {path})", rank, None, head)


@paused_gc()
def dependencies(schedule: Schedule) -> Dependencies:
    """Data dependencies of every action; ScheduleError when a producer is missing or doubled."""
    actions: list[Action] = []
    ranks: list[int] = []
    offsets = [0]
    for rank, row in enumerate(schedule.actions):
        actions.extend(row)
        ranks.extend([rank] * len(row))
        offsets.append(len(actions))
    _check_ranges(schedule, actions, ranks, offsets)
    index = dict(zip(actions, range(len(actions)), strict=True))
    if len(index) != len(actions):
        _raise_duplicate(actions, index, ranks, offsets)
    deps = _producers(actions, schedule.num_stages, schedule.num_microbatches)
    if any(map((-1).__eq__, chain.from_iterable(deps))):
        missing = next(a for a, ds in zip(actions, deps, strict=True) if -1 in ds)
        _raise_missing(missing, index, ranks, offsets)
    return Dependencies(actions, ranks, offsets, index, deps)


def _producers(actions: list[Action], num_stages: int, num_mb: int) -> list[tuple[int, ...]]:
    """Producer ids of each action (-1 where a producer is missing).

    Hot loop: ids live in [kind][stage][microbatch] lists (list indexing is
    several times cheaper than hashing a key tuple per lookup).
    """
    table = {kind: [[-1] * num_mb for _ in range(num_stages + 1)] for kind in (F, B, I, W)}
    for i, (stage, kind, mb) in enumerate(actions):
        table[kind][stage][mb] = i
    forward, backward_input = table[F], table[I]
    # The backward that sends the gradient on: B, or I when the backward is split.
    first_backward = [
        [b if b >= 0 else x for b, x in zip(bs, xs, strict=True)] for bs, xs in zip(table[B], table[I], strict=True)
    ]
    last_stage = num_stages - 1
    deps: list[tuple[int, ...]] = []
    append = deps.append
    for stage, kind, mb in actions:
        if kind is F:
            append((forward[stage - 1][mb],) if stage else ())
        elif kind is W:
            append((backward_input[stage][mb],))
        elif stage < last_stage:
            append((forward[stage][mb], first_backward[stage + 1][mb]))
        else:
            append((forward[stage][mb],))
    return deps


def _check_ranges(schedule: Schedule, actions: list[Action], ranks: list[int], offsets: list[int]) -> None:
    """Stages and microbatches within the schedule's counts (C-speed min/max, then find the culprit)."""
    if not actions:
        return
    stages = list(map(itemgetter(0), actions))
    mbs = list(map(itemgetter(2), actions))
    num_stages, num_mb = schedule.num_stages, schedule.num_microbatches
    if 0 <= min(stages) and max(stages) < num_stages and 0 <= min(mbs) and max(mbs) < num_mb:
        return
    for i, (stage, _, mb) in enumerate(actions):
        if not (0 <= stage < schedule.num_stages and 0 <= mb < schedule.num_microbatches):
            rank = ranks[i]
            raise ScheduleError(
                "out of range",
                f"stages are 0..{schedule.num_stages - 1} and microbatches 0..{schedule.num_microbatches - 1}",
                rank, i - offsets[rank], actions[i],
            )


def _raise_duplicate(actions: list[Action], index: dict[Action, int], ranks: list[int], offsets: list[int]) -> None:
    for i, action in enumerate(actions):
        if index[action] != i:
            rank = ranks[i]
            raise ScheduleError(
                f"duplicate {action.kind}", f"{action} runs more than once", rank, i - offsets[rank], action
            )


def _raise_missing(action: Action, index: dict[Action, int], ranks: list[int], offsets: list[int]) -> None:
    """Name the producer that no rank runs."""
    stage, kind, mb = action
    if kind is F:
        needed = [Action(stage - 1, F, mb)]
    elif kind is W:
        needed = [Action(stage, I, mb)]
    else:
        needed = [Action(stage, F, mb)]
        if (stage + 1, B, mb) not in index and (stage + 1, I, mb) not in index:
            needed.append(Action(stage + 1, B, mb))
    missing = next(a for a in needed if a not in index)
    what = f"{missing} (or {stage + 1}I{mb})" if missing.kind is B else str(missing)
    i = index[action]
    rank = ranks[i]
    detail = f"{action} needs {what}, which no rank runs"
    raise ScheduleError("missing dependency", detail, rank, i - offsets[rank], action)


def sweep(
    deps: Dependencies, durations: list[float], hops: list[float]
) -> tuple[list[float], list[float], list[tuple[int, int, int]]]:
    """Run every rank's list in order, each action as soon as its inputs have arrived.

    Kahn's algorithm over per-rank pointers: a rank advances while its next
    action's producers have ended; a blocked rank parks on the one producer it
    waits for and is woken when that ends. Times do not depend on the order
    ranks are visited, so the result is deterministic. `hops[i]` is the
    transfer time action i pays for a producer on another rank (every data
    edge crosses one stage boundary, fixed by the consumer: see `hop_times`).
    Returns (starts, ends, stuck) where stuck lists (rank, head id, awaited
    id) when ranks deadlock.
    """
    n = len(deps.actions)
    offsets, dep_lists, ranks = deps.offsets, deps.deps, deps.ranks
    starts = [0.0] * n
    ends = [-1.0] * n
    pointer = offsets[:-1]
    clock = [0.0] * deps.num_ranks
    waiting: dict[int, list[int]] = {}
    ready = list(range(deps.num_ranks - 1, -1, -1))
    while ready:
        rank = ready.pop()
        i, stop, now = pointer[rank], offsets[rank + 1], clock[rank]
        while i < stop:
            start = now
            blocked = -1
            for d in dep_lists[i]:
                arrival = ends[d]
                if arrival < 0:
                    blocked = d
                    break
                if ranks[d] != rank:
                    arrival += hops[i]
                if arrival > start:
                    start = arrival
            if blocked >= 0:
                waiting.setdefault(blocked, []).append(rank)
                break
            now = start + durations[i]
            starts[i] = start
            ends[i] = now
            if i in waiting:
                ready.extend(waiting.pop(i))
            i += 1
        pointer[rank], clock[rank] = i, now
    stuck = []
    for rank in range(deps.num_ranks):
        i = pointer[rank]
        if i < offsets[rank + 1]:
            awaited = next(d for d in dep_lists[i] if ends[d] < 0)
            stuck.append((rank, i, awaited))
    return starts, ends, stuck


def hop_times(deps: Dependencies, transfer: list[float]) -> list[float]:
    """Per action, the transfer it pays for a producer on another rank.

    `transfer[b]` crosses the boundary between stages b and b+1 (one entry per
    stage; the last, and transfer[-1] for stage 0's F, are never used). F(s) hears
    from F(s-1) across boundary s-1; a backward of s hears from s+1 across
    boundary s (its other producers share its stage, hence its rank).
    """
    return [transfer[stage - 1 if kind is F else stage] for stage, kind, _ in deps.actions]


def deadlock_error(deps: Dependencies, stuck: list[tuple[int, int, int]]) -> DeadlockError:
    """Follow who-waits-on-whom from the first stuck rank until it closes into a cycle."""
    head_of = {rank: (head, awaited) for rank, head, awaited in stuck}
    rank = stuck[0][0]
    loop: list[int] = []
    while rank not in loop:
        loop.append(rank)
        rank = deps.ranks[head_of[rank][1]]
    loop = loop[loop.index(rank):]
    waits = [(r, deps.actions[head_of[r][0]], deps.actions[head_of[r][1]], deps.ranks[head_of[r][1]]) for r in loop]
    # Edges run producer -> consumer: the awaited action feeds the stuck head, and on
    # the awaited action's rank the order chain runs from that rank's head to it.
    cycle: list[Action] = []
    for r in reversed(loop):
        head, awaited = head_of[r]
        owner_head = head_of[deps.ranks[awaited]][0]
        cycle.extend(deps.actions[owner_head:awaited + 1])
    return DeadlockError(cycle, waits)


@paused_gc()
def find_deadlock(schedule: Schedule) -> list[Action] | None:
    """A cycle of the dependency graph (in edge order, last -> first closes it), or None."""
    deps = dependencies(schedule)
    n = len(deps.actions)
    _, _, stuck = sweep(deps, [0.0] * n, [0.0] * n)
    return deadlock_error(deps, stuck).cycle if stuck else None


@paused_gc()
def build_dag(schedule: Schedule, cost: CostModel | None = None) -> nx.DiGraph:
    """The dependency graph as a networkx DiGraph (nodes are Actions).

    Node attributes: rank, stage, kind, microbatch, duration (ms, with a cost).
    Edge attribute kind is "data" or "order" (a data edge between consecutive
    actions of a rank stays "data"); cross-rank data edges carry comm_ms with a cost.
    """
    deps = dependencies(schedule)
    if cost is not None:
        cost.check_fits(schedule)
    graph = nx.DiGraph(name=schedule.name)
    actions, ranks = deps.actions, deps.ranks
    graph.add_nodes_from(
        (a, {"rank": ranks[i], "stage": a.stage, "kind": a.kind, "microbatch": a.microbatch})
        for i, a in enumerate(actions)
    )
    if cost is not None:
        durations = {(s, k): cost.duration_ms(s, k) for s, k, _ in set(actions)}
        nx.set_node_attributes(graph, {a: durations[a.stage, a.kind] for a in actions}, "duration")
    for rank in range(schedule.num_ranks):
        lo, hi = deps.offsets[rank], deps.offsets[rank + 1]
        graph.add_edges_from(zip(actions[lo:hi - 1], actions[lo + 1:hi], strict=True), kind="order")
    graph.add_edges_from(
        (actions[d], actions[i], _data_edge(actions[d], actions[i], ranks[d] != ranks[i], cost))
        for i, producers in enumerate(deps.deps)
        for d in producers
    )
    return graph


def _data_edge(producer: Action, consumer: Action, crosses: bool, cost: CostModel | None) -> dict:
    if cost is None or not crosses:
        return {"kind": "data"}
    return {"kind": "data", "comm_ms": cost.transfer_ms(producer.stage, consumer.stage)}


@paused_gc()
def critical_path(schedule: Schedule, timeline: Timeline, cost: CostModel) -> list[Action]:
    """The chain of actions that set the step time, in time order.

    Walks back from the action that ends last, each time to the predecessor
    (previous action on the rank, or a producer plus its transfer) whose
    arrival is latest; ties go to the rank predecessor. Works for measured
    timelines too, where arrivals need not meet starts exactly.
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
            arrival = ends[d]
            if deps.ranks[d] != deps.ranks[current]:
                arrival += cost.transfer_ms(deps.actions[d].stage, deps.actions[current].stage)
            if arrival > best_arrival:
                best, best_arrival = d, arrival
        current = best
    return [deps.actions[i] for i in reversed(path)]

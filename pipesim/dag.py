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
from operator import itemgetter

import networkx as nx

from pipesim._perf import paused_gc
from pipesim.cost import CostModel
from pipesim.ir import Action, B, F, I, W, Schedule
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
    index = {action: i for i, action in enumerate(actions)}
    if len(index) != len(actions):
        _raise_duplicate(actions, index, ranks, offsets)
    last_stage = schedule.num_stages - 1
    get = index.get
    deps: list[tuple[int, ...]] = []
    append = deps.append
    missing = None
    for action in actions:  # hot loop: plain tuples hash and compare equal to Actions
        stage, kind, mb = action
        if kind is F:
            if stage:
                producer = get((stage - 1, F, mb), -1)
                append((producer,))
                if producer < 0:
                    missing = action
                    break
            else:
                append(())
        elif kind is W:
            producer = get((stage, I, mb), -1)
            append((producer,))
            if producer < 0:
                missing = action
                break
        else:
            forward = get((stage, F, mb), -1)
            if stage < last_stage:
                later = get((stage + 1, B, mb), -1)
                if later < 0:
                    later = get((stage + 1, I, mb), -1)
                append((forward, later))
                if forward < 0 or later < 0:
                    missing = action
                    break
            else:
                append((forward,))
                if forward < 0:
                    missing = action
                    break
    if missing is not None:
        _raise_missing(missing, index, ranks, offsets)
    return Dependencies(actions, ranks, offsets, index, deps)


def _check_ranges(schedule: Schedule, actions: list[Action], ranks: list[int], offsets: list[int]) -> None:
    """Stages and microbatches within the schedule's counts (C-speed min/max, then find the culprit)."""
    if not actions:
        return
    stages = list(map(itemgetter(0), actions))
    mbs = list(map(itemgetter(2), actions))
    if min(stages) >= 0 and max(stages) < schedule.num_stages and min(mbs) >= 0 and max(mbs) < schedule.num_microbatches:
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
    raise ScheduleError("missing dependency", f"{action} needs {what}, which no rank runs", rank, i - offsets[rank], action)


def sweep(deps: Dependencies, durations: list[float], transfer: list[float]):
    """Run every rank's list in order, each action as soon as its inputs have arrived.

    Kahn's algorithm over per-rank pointers: a rank advances while its next
    action's producers have ended; a blocked rank parks on the one producer it
    waits for and is woken when that ends. Times do not depend on the order
    ranks are visited, so the result is deterministic. `transfer[b]` is the
    time to cross the boundary between stage b and b+1 (added when producer
    and consumer sit on different ranks). Returns (starts, ends, stuck) where
    stuck lists (rank, head id, awaited id) when ranks deadlock.
    """
    n = len(deps.actions)
    offsets, dep_lists, actions, ranks = deps.offsets, deps.deps, deps.actions, deps.ranks
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
                    a, b = actions[d][0], actions[i][0]
                    arrival += transfer[a if a < b else b]
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
    _, _, stuck = sweep(deps, [0.0] * n, [0.0] * schedule.num_stages)
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
    ranks = deps.ranks
    graph.add_nodes_from(
        (a, {"rank": ranks[i], "stage": a.stage, "kind": a.kind, "microbatch": a.microbatch,
             **({"duration": cost.duration_ms(a.stage, a.kind)} if cost is not None else {})})
        for i, a in enumerate(deps.actions)
    )
    actions = deps.actions
    for rank in range(schedule.num_ranks):
        lo, hi = deps.offsets[rank], deps.offsets[rank + 1]
        graph.add_edges_from((actions[i - 1], actions[i], {"kind": "order"}) for i in range(lo + 1, hi))
    for i, producers in enumerate(deps.deps):
        for d in producers:
            attrs = {"kind": "data"}
            if cost is not None and ranks[d] != ranks[i]:
                attrs["comm_ms"] = cost.transfer_ms(actions[d].stage, actions[i].stage)
            graph.add_edge(actions[d], actions[i], **attrs)
    return graph


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

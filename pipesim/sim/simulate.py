"""The simulation engine: Schedule + CostModel -> simulated Timeline, and deadlock detection.

Semantics (the same the executor follows for real): an action starts when
the previous action of its rank has ended and every data dependency has
ended, plus the transfer time when producer and consumer sit on different
ranks. Transfers overlap with compute (asynchronous sends); a rank only
waits for what it needs. There are no random choices and ties cannot change
times, so a schedule and a cost model always give the same timeline.
"""

from __future__ import annotations

import math
from functools import partial
from itertools import repeat
from operator import itemgetter
from typing import TYPE_CHECKING, NamedTuple

from pipesim._perf import paused_gc
from pipesim.cost.model import CostModel
from pipesim.ir import Action, ActionKind, Schedule
from pipesim.records import LINK_KINDS, CommSpan, LaterComm, LaterList, SpanColumns, Timeline
from pipesim.semantics.dag import CopyOps, DeadlockError, Dependencies, dependencies
from pipesim.semantics.lower import crossing_stages
from pipesim.sim.sweep_gapless import sweep_blocking_without_gaps, sweep_pairs_without_gaps

if TYPE_CHECKING:  # overlapped pairs and sequence chunks are priced where a schedule has them
    from pipesim.cost.overlap import PairTimeline


def sweep(
    deps: Dependencies,
    durations: list[float],
    hops: list[float],
    gaps: list[float] | None = None,
    rank_start: list[float] | None = None,
    runs: list[tuple[int, int, int]] | None = None,
) -> tuple[list[float], list[float], list[tuple[int, int, int]]]:
    """Run every rank's list in order, each action as soon as its inputs have arrived.

    Kahn's algorithm over per-rank pointers: a rank advances while its next
    action's producers have ended; a blocked rank parks on the one producer it
    waits for and is woken when that ends. Times do not depend on the order
    ranks are visited, so the result is deterministic. `hops[i]` is the
    transfer time action i pays for a producer on another rank (every data
    edge crosses one stage boundary, fixed by the consumer: see `hop_times`).
    `gaps[i]`, when given, is time the rank spends just before action i on
    other work, paid before any wait for inputs (the dispatch gap, torch's
    collectives); `rank_start[r]` (default 0) is when rank r's clock starts.
    An overlapped group (`deps.joined`)
    starts once every member's inputs are in; its members then run back to
    back. Returns (starts, ends, stuck) where stuck lists (rank, head id,
    awaited id) when ranks deadlock. `runs`, when given and the one-producer loop runs, receives the (rank, first
    id, end id) stretches in the order they ran: an order `replay` times again under other costs.
    """
    joined, copies = deps.joined, deps.copies
    n = deps.num_ops
    offsets, dep_lists, ranks = deps.offsets, deps.deps, deps.ranks
    starts = [0.0] * n
    ends = [-1.0] * n
    pointer = offsets[:-1]
    clock = list(rank_start) if rank_start is not None else [0.0] * deps.num_ranks
    waiting: list[list[int] | None] = [None] * n  # per action, the ranks parked on it (a list: no hashing)
    ready = list(range(deps.num_ranks - 1, -1, -1))
    blocking = None if joined or copies else deps.blocking
    issued = None if copies is None else copies.issued
    if copies is not None:
        ranks = ranks + copies.ranks  # a backward's RELOAD is on its own rank: no hop
    copy_clock = [0.0] * deps.num_ranks  # when each rank's copy engine is next free
    if blocking is not None and rank_start is None and (gaps is None or not any(gaps)):  # no gap, clocks from 0
        loop_inputs = (blocking, offsets, durations, hops, starts, ends, pointer, clock, waiting, ready, runs)
        sweep_blocking_without_gaps(*loop_inputs)
    if joined and copies is None and rank_start is None and (gaps is None or not any(gaps)):
        pairs = deps.pair_waits  # None: a group of three or more, or two producers that can keep an action waiting
        if pairs is not None:
            sweep_pairs_without_gaps(*pairs, offsets, durations, hops, starts, ends, pointer, clock, waiting, ready)
    if gaps is None:
        gaps = [0.0] * n  # one addition per action rather than a test
    if blocking is not None and ready:
        _sweep_blocking(blocking, offsets, durations, hops, gaps, starts, ends, pointer, clock, waiting, ready, runs)
    if (joined or copies) and ready and deps.waits is not None:  # None: the general loop (a test compares them)
        copy_inputs = None if copies is None else (copies.issued, copies.needs, copy_clock)
        times = (durations, hops, gaps, starts, ends)
        _sweep_waits(deps.waits, offsets, *times, pointer, clock, waiting, ready, copy_inputs)
    while ready:
        rank = ready.pop()
        i, stop, now = pointer[rank], offsets[rank + 1], clock[rank]
        while i < stop:
            start = now + gaps[i]
            for d in dep_lists[i]:
                arrival = ends[d]
                if arrival < 0:
                    break  # d has not ended: park on it
                if ranks[d] != rank:
                    arrival += hops[i]
                if arrival > start:
                    start = arrival
            else:  # every producer has ended
                d = -1
                if joined is not None and i in joined:
                    d, start = _group_start(i, joined[i], dep_lists, ends, ranks, hops, start)
                if d < 0:
                    now = start + durations[i]
                    starts[i] = start
                    ends[i] = now
                    parked = waiting[i]
                    if parked is not None:
                        ready.extend(parked)
                    if issued is not None and issued[i]:
                        _run_copies(issued[i], rank, now, copies.needs, durations, starts, ends, copy_clock)
                    i += 1
                    continue
            parked = waiting[d]
            if parked is None:
                waiting[d] = [rank]
            else:
                parked.append(rank)
            break
        pointer[rank], clock[rank] = i, now
    stuck = []
    for rank in range(deps.num_ranks):
        i = pointer[rank]
        if i < offsets[rank + 1]:
            members = (i, *(joined or {}).get(i, ()))
            awaited = next(d for m in members for d in dep_lists[m] if ends[d] < 0)
            stuck.append((rank, i, awaited))
    return starts, ends, stuck


def _sweep_blocking(
    blocking: list[int],
    offsets: list[int],
    durations: list[float],
    hops: list[float],
    gaps: list[float],
    starts: list[float],
    ends: list[float],
    pointer: list[int],
    clock: list[float],
    waiting: list[list[int] | None],
    ready: list[int],
    runs: list[tuple[int, int, int]] | None = None,
) -> None:
    """`sweep`'s loop where each action has at most one producer that can keep it waiting (`deps.blocking`, no
    overlapped group): one producer read per action, whose wait always pays the hop (it sits on another rank, or
    later on this one and never ends first). Fills `starts`, `ends`, `pointer`, `clock` and `waiting` in place and
    empties `ready`; the same times as the general loop, a third quicker on 10^5 actions. `runs` (when given)
    receives each stretch a rank ran before it parked."""
    while ready:
        rank = ready.pop()
        i, stop, now = pointer[rank], offsets[rank + 1], clock[rank]
        first = i
        while i < stop:
            start = now + gaps[i]
            d = blocking[i]
            if d >= 0:
                arrival = ends[d]
                if arrival < 0:  # d has not ended: park on it
                    parked = waiting[d]
                    if parked is None:
                        waiting[d] = [rank]
                    else:
                        parked.append(rank)
                    break
                arrival += hops[i]
                if arrival > start:
                    start = arrival
            now = start + durations[i]
            starts[i] = start
            ends[i] = now
            parked = waiting[i]
            if parked is not None:
                ready.extend(parked)
            i += 1
        pointer[rank], clock[rank] = i, now
        if runs is not None and i > first:
            runs.append((rank, first, i))


def _sweep_waits(
    waits: tuple[list[int], dict[int, tuple[tuple[int, int], ...]], list[int]],
    offsets: list[int],
    durations: list[float],
    hops: list[float],
    gaps: list[float],
    starts: list[float],
    ends: list[float],
    pointer: list[int],
    clock: list[float],
    waiting: list[list[int] | None],
    ready: list[int],
    copy_inputs: tuple[list, dict[int, int], list[float]] | None,
) -> None:
    """`sweep`'s loop for overlapped groups and copies (`Dependencies.waits`): one producer read per action, as
    `_sweep_blocking` does, except where several can keep it waiting (a group's first member waits for every
    member's); a backward reads its RELOAD beside its producer; a compute action's end issues its copies. The
    general loop's times, without its per-action walk over every producer and its test for a group."""
    single, several, local = waits
    issued, needs, copy_clock = copy_inputs if copy_inputs is not None else ([None] * len(single), {}, [])
    while ready:
        rank = ready.pop()
        i, stop, now = pointer[rank], offsets[rank + 1], clock[rank]
        while i < stop:
            start = now + gaps[i]
            d = single[i]
            if d >= 0:
                arrival = ends[d]
                if arrival < 0:
                    break
                arrival += hops[i]
                if arrival > start:
                    start = arrival
            elif d == -2:
                for d, member in several[i]:
                    arrival = ends[d]
                    if arrival < 0:
                        break
                    if member >= 0:
                        arrival += hops[member]
                    if arrival > start:
                        start = arrival
                else:
                    d = -1
                if d >= 0:
                    break
            d = local[i]
            if d >= 0:  # a copy of this rank's, issued by an action before this one: it has ended, or never will
                arrival = ends[d]
                if arrival < 0:
                    break
                if arrival > start:
                    start = arrival
            now = start + durations[i]
            starts[i] = start
            ends[i] = now
            parked = waiting[i]
            if parked is not None:
                ready.extend(parked)
            copies = issued[i]
            if copies is not None:  # `_run_copies`, inline: 10^5 calls
                free = copy_clock[rank]
                for c in copies:
                    start = ends[needs[c]]
                    if now > start:
                        start = now
                    if free > start:
                        start = free
                    free = start + durations[c]
                    starts[c] = start
                    ends[c] = free
                copy_clock[rank] = free
            i += 1
        else:
            pointer[rank], clock[rank] = i, now
            continue
        parked = waiting[d]  # d has not ended: park on it
        if parked is None:
            waiting[d] = [rank]
        else:
            parked.append(rank)
        pointer[rank], clock[rank] = i, now


def _run_copies(
    issued: tuple[int, ...],
    rank: int,
    now: float,
    needs: list[int],
    durations: list[float],
    starts: list[float],
    ends: list[float],
    copy_clock: list[float],
) -> None:
    """The copies a rank issues when one of its compute actions ends at `now`, on its copy engine one after
    another: each starts once the engine is free and what it moves is ready (`needs`: the forward an OFFLOAD
    copies out, the OFFLOAD a RELOAD brings back). Both are on this rank and earlier in its order, so they have
    ended; the backward a RELOAD serves comes later in the order and so finds the RELOAD's end set."""
    free = copy_clock[rank]
    for c in issued:
        start = max(free, now, ends[needs[c]])
        free = start + durations[c]
        starts[c] = start
        ends[c] = free
    copy_clock[rank] = free


def _group_start(
    first: int,
    others: tuple[int, ...],
    dep_lists: list[tuple[int, ...]],
    ends: list[float],
    ranks: list[int],
    hops: list[float],
    start: float,
) -> tuple[int, float]:
    """(blocking id or -1, start) of an overlapped group whose first member may start at `start`."""
    members = {first, *others}
    rank = ranks[first]
    for m in others:
        for d in dep_lists[m]:
            if d in members:
                continue
            arrival = ends[d]
            if arrival < 0:
                return d, start
            if ranks[d] != rank:
                arrival += hops[m]
            start = max(start, arrival)
    return -1, start


def hop_times(deps: Dependencies, transfer: list[float]) -> list[float]:
    """Per action, the transfer it pays for a producer on another rank.

    `transfer[b]` crosses the boundary between stages b and b+1 (one entry per
    stage; the last, and transfer[-1] for stage 0's F, are never used); which
    boundary an action hears across is `pipesim.semantics.lower.crossing_stage`.
    """
    if not any(transfer):
        return [0.0] * len(deps.actions)  # free links (the default): a list made at once, as `dispatch_gaps`'
    return list(map(transfer.__getitem__, crossing_stages(deps.actions)))  # in C: 10^5 actions


def deadlock_error(deps: Dependencies, stuck: list[tuple[int, int, int]]) -> DeadlockError:
    """Follow who-waits-on-whom from the first stuck rank until it closes into a cycle."""
    head_of = {rank: (head, awaited) for rank, head, awaited in stuck}
    rank = stuck[0][0]
    loop: list[int] = []
    while rank not in loop:
        loop.append(rank)
        rank = deps.ranks[head_of[rank][1]]
    loop = loop[loop.index(rank) :]
    waits = [(r, deps.actions[head_of[r][0]], deps.actions[head_of[r][1]], deps.ranks[head_of[r][1]]) for r in loop]
    # Edges run producer -> consumer: the awaited action feeds the stuck head, and on
    # the awaited action's rank the order chain runs from that rank's head to it.
    cycle: list[Action] = []
    for r in reversed(loop):
        head, awaited = head_of[r]
        owner_head = head_of[deps.ranks[awaited]][0]
        cycle.extend(deps.actions[owner_head : awaited + 1])
    sends = {
        (deps.actions[h], deps.actions[a]): text
        for (h, a), text in (deps.sends or {}).items()
        if head_of.get(deps.ranks[h], (None,))[0] == h
    }
    return DeadlockError(cycle, waits, sends)


@paused_gc()
def find_deadlock(schedule: Schedule) -> list[Action] | None:
    """A cycle of the dependency graph (in edge order, last -> first closes it), or None."""
    deps = dependencies(schedule)
    n = deps.num_ops
    _, _, stuck = sweep(deps, [0.0] * n, [0.0] * n)
    return deadlock_error(deps, stuck).cycle if stuck else None


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
    inputs = engine_inputs(schedule, cost, deps)
    starts, ends, stuck = run_engine(deps, inputs.durations, inputs.hops, inputs.gaps, cost.shared_cores)
    if stuck:
        raise deadlock_error(deps, stuck)
    before, tails = inputs.before, inputs.tails
    collective_spans = _collective_spans(deps, cost, before, tails, ends) if before or any(tails) else ()
    n = len(deps.actions)
    if deps.copies is not None:
        collective_spans += copy_spans(deps.copies, starts, ends)
        starts, ends = starts[:n], ends[:n]
    later = None
    if any(stage.a2a_ms for stage in cost.stages):  # 10^5 all-to-alls, laid out where a reader asks for `comm`
        later = LaterComm(collective_spans, LINK_KINDS, partial(a2a_spans, deps, cost, starts))
    # the engine's columns; the Span tuples are built only where a reader asks for `spans`
    return Timeline.from_columns(
        schedule.num_ranks,
        SpanColumns(deps.ranks, deps.actions, starts, ends),
        later,
        source="simulated",
        schedule_name=schedule.name,
        comm=collective_spans,
        meta={
            "num_stages": schedule.num_stages,
            "num_microbatches": schedule.num_microbatches,
            "stage_to_rank": list(schedule.stage_to_rank),
            "cost_source": cost.source,
            "recompute": cost.recompute,
            **(
                {
                    # 10^5 texts, made where a reader asks (the JSON writer: `plain_meta`), as the all-to-alls are
                    "overlap_groups": LaterList(partial(group_texts, deps.actions, deps.joined)),
                    "overlap_factor": cost.overlap_factor,
                }
                if deps.joined
                else {}
            ),
        },
    )


def group_texts(actions: list[Action], joined: dict[int, tuple[int, ...]]) -> list[list[str]]:
    """Each overlapped group's members as text, in order (a simulated timeline's meta "overlap_groups")."""
    return [[str(actions[m]) for m in (first, *others)] for first, others in joined.items()]


def copy_spans(copies: CopyOps, starts: list[float], ends: list[float]) -> tuple[CommSpan, ...]:
    """Each OFFLOAD and RELOAD on its rank's copy engine (kind "offload" / "reload", peer -1: the host)."""
    first, entries = copies.first, copies.entries
    lower = {kind: kind.value.lower() for kind in set(map(_kind, entries))}  # "offload", "reload", made once each
    names = map(lower.__getitem__, map(_kind, entries))
    rows = zip(copies.ranks, names, repeat(-1), entries, starts[first:], ends[first:], repeat(0), repeat(0))
    return tuple(map(tuple.__new__, repeat(CommSpan), rows))  # 10^5 spans at C speed: no call per span


class _PairLayouts:
    """`CostModel.pair_ms` of each kind of pair, laid out once: a schedule repeats a few kinds 10^4 times."""

    def __init__(self, cost: CostModel) -> None:
        self.cost = cost
        self.known: dict[tuple, PairTimeline] = {}

    def of(self, members: tuple[tuple[int, ActionKind], ...]) -> PairTimeline:
        layout = self.known.get(members)
        if layout is None:
            layout = self.known[members] = self.cost.pair_ms(members)
        return layout


def a2a_spans(deps: Dependencies, cost: CostModel, starts: list[float]) -> tuple[CommSpan, ...]:
    """Each all-to-all on its rank's link (kind "a2a", peer -1: the expert-parallel group): an overlapped pair's
    where its layer-by-layer layout puts them (`CostModel.pair_ms`); an action alone waits for its own, a dispatch
    after the first half of its compute and a combine after the second (reversed in a backward)."""
    spans: list[CommSpan] = []
    append, new = spans.append, tuple.__new__  # 10^5 spans: no per-span keyword call
    actions, ranks, layouts = deps.actions, deps.ranks, _PairLayouts(cost)
    joined = deps.joined or {}
    later = set().union(*joined.values()) if joined else set()  # a group's members after its first
    links: dict[tuple, tuple[tuple[int, float, float], ...]] = {}  # per kind of group: (member, start, end) offsets
    alone: dict[tuple, tuple[tuple[float, float], ...]] = {}  # per (stage, kind) alone: (start, end) offsets
    for i, action in enumerate(actions):
        others = joined.get(i)
        if others is not None:
            group = (i, *others)
            kinds = (action[:2], actions[others[0]][:2]) if len(others) == 1 else _group_kinds(actions, group)
            offsets = links.get(kinds)
            if offsets is None:
                segments = layouts.of(kinds).segments
                offsets = links[kinds] = tuple((part, lo, hi) for part, kind, lo, hi in segments if kind == "link")
            rank, start = ranks[i], starts[i]
            for part, lo, hi in offsets:
                append(new(CommSpan, (rank, "a2a", -1, actions[group[part]], start + lo, start + hi, 0, 0)))
            continue
        if i in later:
            continue
        key = action[:2]
        offsets = alone.get(key)
        if offsets is None:
            stage, kind = key
            a2a, half = cost.a2a_ms(stage, kind) / 2, cost.compute_ms(stage, kind) / 2
            first = half if kind is ActionKind.FORWARD else 0.0  # a backward combines first
            second = first + a2a + half
            offsets = alone[key] = ((first, first + a2a), (second, second + a2a)) if a2a else ()
        if offsets:
            rank, start = ranks[i], starts[i]
            for lo, hi in offsets:
                append(new(CommSpan, (rank, "a2a", -1, action, start + lo, start + hi, 0, 0)))
    return tuple(spans)


def _collective_spans(
    deps: Dependencies, cost: CostModel, before: dict, tails: list, ends: list[float]
) -> tuple[CommSpan, ...]:
    """Each collective's time on its rank: back to back before the action it precedes, or after the rank's
    last action (peer -1: a collective has no single peer)."""
    spans: list[CommSpan] = []

    def lay(rank: int, collectives: list, at: float) -> None:
        for c in collectives:
            end = at + cost.collective_ms(c.stage, c.kind)
            spans.append(CommSpan(rank, c.kind.value.lower(), -1, c, at, end))
            at = end

    for action, collectives in before.items():
        i = deps.index[action]
        rank = deps.ranks[i]
        lay(rank, collectives, (ends[i - 1] if i > deps.offsets[rank] else 0.0))
    for rank, collectives in enumerate(tails):
        lo, hi = deps.offsets[rank], deps.offsets[rank + 1]
        lay(rank, collectives, ends[hi - 1] if hi > lo else 0.0)
    return tuple(spans)


def action_durations(deps: Dependencies, cost: CostModel, num_stages: int) -> list[float]:
    """Per-action durations from a (kind -> per-stage list) table: one lookup per action (the planner sweeps
    with them too); an overlapped group takes its pair's layout (`CostModel.pair_ms`: overlap_factor x its
    compute where no all-to-all hides under it), shared among its members in proportion to their times alone."""
    table = {kind: [cost.duration_ms(s, kind) for s in range(num_stages)] for kind in ActionKind}
    if all(row.count(row[0]) == len(row) for row in table.values()):  # every stage alike: by kind, at C speed
        durations = list(map({kind: row[0] for kind, row in table.items()}.__getitem__, map(_kind, deps.actions)))
    else:
        durations = [table[kind][stage] for stage, kind, _ in deps.actions]
    # no all-to-all to lay out and compute not scaled: each member takes its time alone (a float x 1.0 is itself)
    priced_alone = cost.overlap_factor == 1.0 and not any(stage.a2a_ms for stage in cost.stages)
    priced_alone = priced_alone and all(type(time) is float for row in table.values() for time in row)
    if deps.joined and not priced_alone and all(map((1).__eq__, map(len, deps.joined.values()))):
        _pair_durations(deps, durations, cost)
    elif deps.joined and not priced_alone:  # a group: its layout's time, shared in proportion to each one's alone
        actions, layouts = deps.actions, _PairLayouts(cost)
        shared: dict[tuple, tuple[float, ...]] = {}  # per kind of group (durations are per stage and kind)
        for first, others in deps.joined.items():
            group = (first, *others)
            kinds = (actions[first][:2], actions[others[0]][:2]) if len(others) == 1 else _group_kinds(actions, group)
            times = shared.get(kinds)
            if times is None:
                times = shared[kinds] = _group_durations(layouts.of(kinds), [durations[m] for m in group], cost)
            for member, time in zip(group, times):  # noqa: B905 (one time per member)
                durations[member] = time
    if deps.copies is not None:
        per_stage = [cost.copy_ms(stage) for stage in range(num_stages)]  # one price per stage, read per copy
        durations.extend(map(per_stage.__getitem__, map(_stage, deps.copies.entries)))
    return durations


def _pair_durations(deps: Dependencies, durations: list[float], cost: CostModel) -> None:
    """`action_durations`' groups where each is a pair (every family's), in place: the same times, read again from
    the previous pair where the rank runs pairs of one kind in a row (10^4 of them: hashing each pair's kinds cost
    three times the rest)."""
    actions, layouts = deps.actions, _PairLayouts(cost)
    shared: dict[tuple, tuple[float, ...]] = {}  # per kind of pair (durations are per stage and kind until here)
    last: tuple | None = None
    times: tuple[float, ...] = ()
    for first, (second,) in (deps.joined or {}).items():
        a, b = actions[first], actions[second]
        if last is None or a[0] != last[0] or a[1] is not last[1] or b[0] != last[2] or b[1] is not last[3]:
            last = (a[0], a[1], b[0], b[1])
            kinds = (a[:2], b[:2])
            known = shared.get(kinds)
            if known is None:
                known = shared[kinds] = _group_durations(layouts.of(kinds), [durations[first], durations[second]], cost)
            times = known
        durations[first], durations[second] = times


_kind = itemgetter(1)  # Action.kind
_stage = itemgetter(0)  # Action.stage, CommAction.stage


def _group_kinds(actions: list[Action], group: tuple[int, ...]) -> tuple[tuple[int, ActionKind], ...]:
    """(stage, kind) of each member: what prices a group (`CostModel.pair_ms`)."""
    return tuple([actions[m][:2] for m in group])


def _group_durations(layout: PairTimeline, alone: list[float], cost: CostModel) -> tuple[float, ...]:
    """An overlapped group's members' times: the overlap factor x each alone where no all-to-all hides under
    the pair, else the layout's makespan shared in proportion to each alone."""
    if not any(segment.resource == "link" for segment in layout.segments):
        return tuple(time * cost.overlap_factor for time in alone)
    total, whole = layout.makespan, sum(alone)
    return tuple(total * time / whole if whole > 0 else 0.0 for time in alone)


def chunk_durations(deps: Dependencies, durations: list[float], schedule: Schedule, cost: CostModel) -> list[float]:
    """Each sequence chunk's share of its microbatch's time (`pipesim.cost.seq_chunks`): F, B and I by its share of
    the compute (attention makes later chunks dearer), W, which attention does not touch, by its share of tokens."""
    from pipesim.cost.seq_chunks import chunk_shares

    shares = chunk_shares(schedule.seq_chunks, cost.attention_fraction, schedule.seq_cut)
    chunks = schedule.seq_chunks
    # each (kind, chunk)'s share read once (`ChunkShares.of_kind`), then one lookup per action
    table = {
        (kind, c): shares.of_kind(kind is ActionKind.BACKWARD_WEIGHT, c) for kind in ActionKind for c in range(chunks)
    }
    count = len(deps.actions)  # the copies' durations follow the actions' (`action_durations`): kept as they are
    scaled = [d * table[kind, mb % chunks] for d, (_, kind, mb) in zip(durations[:count], deps.actions, strict=True)]
    return scaled + durations[count:]


class EngineInputs(NamedTuple):
    """Per action: duration, transfer paid for a producer on another rank, time spent just before it (the
    dispatch gap plus torch's collectives placed before it); and the collectives themselves (`before`: action ->
    collectives, `tails`: per rank, those after its last action)."""

    durations: list[float]
    hops: list[float]
    gaps: list[float]
    before: dict
    tails: list


def engine_inputs(schedule: Schedule, cost: CostModel, deps: Dependencies) -> EngineInputs:
    """What the engine needs from the schedule and the cost model, checked to give finite times."""
    durations = action_durations(deps, cost, schedule.num_stages)
    if schedule.seq_chunks > 1:
        durations = chunk_durations(deps, durations, schedule, cost)
    hops = hop_times(deps, boundary_transfers(schedule, cost))
    gaps = dispatch_gaps(deps, cost)
    if deps.copies is not None:  # a copy pays no transfer and no dispatch gap: it runs on the copy engine
        padding = [0.0] * len(deps.copies.entries)
        hops, gaps = hops + padding, gaps + padding
    before, tails = deps.collectives
    for action, collectives in before.items():
        gaps[deps.index[action]] += sum(cost.collective_ms(c.stage, c.kind) for c in collectives)
    # The step time is at most this sum: finite sums, finite times.
    if not math.isfinite(sum(durations) + sum(hops) + sum(gaps)):
        raise ValueError(
            "the costs are too large: the step time would overflow to infinity; give times in ms "
            "that sum to a finite number (each below about 1e300)"
        )
    return EngineInputs(durations, hops, gaps, before, tails)


def run_engine(
    deps: Dependencies,
    durations: list[float],
    hops: list[float],
    gaps: list[float],
    shared_cores: int | None,
    rank_start: list[float] | None = None,
    runs: list[tuple[int, int, int]] | None = None,
) -> tuple[list[float], list[float], list[tuple[int, int, int]]]:
    """`sweep`, or `sweep_shared` when the ranks share fewer cores than there are ranks (`runs` then stays
    empty: that sweep's order depends on the costs)."""
    if shared_cores is not None and shared_cores < deps.num_ranks:
        if deps.copies is not None:
            raise ValueError("offload with ranks sharing cores is not modelled: drop --shared-cores, or --offload")
        from pipesim.sim.shared_cores import sweep_shared

        return sweep_shared(deps, durations, hops, gaps, shared_cores, rank_start)
    return sweep(deps, durations, hops, gaps, rank_start, runs)


def dispatch_gaps(deps: Dependencies, cost: CostModel) -> list[float]:
    """Per action, its rank's dispatch gap (`CostModel.dispatch_ms`; zeros when none was measured)."""
    per_rank = cost.dispatch_per_rank(deps.num_ranks)
    if not any(per_rank):
        return [0.0] * len(deps.ranks)  # none measured: a list made at once
    return list(map(per_rank.__getitem__, deps.ranks))  # in C: 10^5 actions


def boundary_transfers(schedule: Schedule, cost: CostModel) -> list[float]:
    """Transfer time across each stage boundary b (between stage b and b+1); 0 after the last stage."""
    return [cost.transfer_ms(b, b + 1) for b in range(schedule.num_stages - 1)] + [0.0]

"""Metrics read off a Timeline: step time, bubbles, idle intervals, and activation memory through the lowering.

All metrics read one step: call `pipesim.records.select_step` first on measured timelines
that hold several. Times are relative to the earliest span (0 when simulated).
"""

from __future__ import annotations

import dataclasses
import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import partial, reduce
from itertools import accumulate, chain, compress, islice, pairwise, repeat
from operator import add, eq, is_, itemgetter, le, lt, sub
from typing import TYPE_CHECKING, Any

from pipesim._perf import paused_gc
from pipesim.ir import Action, ActionKind, CommKind, Schedule
from pipesim.records import COLLECTIVE_KINDS, COPY_KINDS, CommSpan, Span, SpanColumns, Timeline, comm_of
from pipesim.semantics.lower import StashSizes, changes_at_start, offload_change, produced_message, stash_table
from pipesim.semantics.screen import is_validated

if TYPE_CHECKING:  # the cost model is only needed for byte-valued memory
    from pipesim.cost.model import CostModel


def _origin(tl: Timeline) -> float:
    return min(map(itemgetter(2), tl.spans), default=0.0)


def makespan(tl: Timeline) -> float:
    """Step time: from the first start to the last end on any rank."""
    return _makespan(tl, _origin(tl))


def _makespan(tl: Timeline, origin: float) -> float:
    """`makespan` given the timeline's `_origin` (one pass over 10^5 spans spared where the caller has it)."""
    if not tl.spans:
        return 0.0
    return _makespan_of(max(map(itemgetter(3), tl.spans)), tl, origin)


def _makespan_of(last: float, tl: Timeline, origin: float) -> float:
    """The makespan of spans whose last end is `last`: a collective may end a step later."""
    return max([last] + [c.end for c in comm_of(tl, COLLECTIVE_KINDS)]) - origin


def _by_rank(tl: Timeline) -> list[list[Span]]:
    """Spans per rank, sorted by start (simulated timelines come sorted: the sort is then linear)."""
    rows: list[list[Span]] = [[] for _ in range(tl.num_ranks)]
    for span in tl.spans:
        rows[span[0]].append(span)
    key = itemgetter(2)  # stable: equal starts keep their recorded order
    for row in rows:
        row.sort(key=key)
    return rows


def _gaps(row: list[Span], origin: float, finish: float) -> list[tuple[float, float]]:
    gaps = []
    cursor = origin
    for _, _, start, end, _, _ in row:  # a Span's six fields: no list per span for a starred name
        if start > cursor:
            gaps.append((cursor, start))
        if end > cursor:
            cursor = end
    if finish > cursor:
        gaps.append((cursor, finish))
    return gaps


@paused_gc()
def idle_intervals(tl: Timeline) -> list[list[tuple[float, float]]]:
    """Per rank, the gaps within [origin, origin + makespan] where it runs nothing."""
    origin = _origin(tl)
    finish = origin + _makespan(tl, origin)
    return [_gaps(row, origin, finish) for row in _by_rank(tl)]


def _idle_per_rank(tl: Timeline) -> list[float]:
    return [sum(end - start for start, end in gaps) for gaps in idle_intervals(tl)]


def _fraction(idle_ms: float, num_ranks: int, makespan_ms: float) -> float:
    """The bubble fraction's one formula: idle / (ranks x makespan); 0 for a step that takes no time."""
    return idle_ms / (num_ranks * makespan_ms) if makespan_ms > 0 else 0.0


def _ratio(idle_ms: float, num_ranks: int, makespan_ms: float) -> float:
    """The bubble ratio's one formula: idle / busy (inf when nothing is busy but time passes)."""
    busy = num_ranks * makespan_ms - idle_ms
    if busy <= 0:
        return math.inf if idle_ms > 0 else 0.0
    return idle_ms / busy


def bubble_fraction(tl: Timeline, rank: int | None = None) -> float:
    """Idle / (ranks x makespan); with `rank`, that rank's idle / makespan."""
    total = makespan(tl)
    if total <= 0:
        return 0.0
    idle = _idle_per_rank(tl)
    if rank is not None:
        if not 0 <= rank < tl.num_ranks:
            raise ValueError(f"rank {rank} is outside 0..{tl.num_ranks - 1}")
        return _fraction(idle[rank], 1, total)
    return _fraction(sum(idle), tl.num_ranks, total)


def bubble_ratio(tl: Timeline) -> float:
    """Idle / busy, summed over ranks (inf when nothing is busy but time passes)."""
    return _ratio(sum(_idle_per_rank(tl)), tl.num_ranks, makespan(tl))


def inner_bubble_fraction(tl: Timeline) -> float:
    """Idle between each rank's first and last action / the time between them, summed over ranks.

    The per-stage bubble of the zero-bubble paper: it leaves out the ramp before a rank's first action and
    the drain after its last, which `bubble_fraction` (the whole step) counts. ZB-H2 with F = I = W has
    none, while its step-level bubble equals ZB-H1's.
    """
    inside = span = 0.0
    for row in _by_rank(tl):
        if not row:
            continue
        first, last = min(s.start for s in row), max(s.end for s in row)
        span += last - first
        inside += sum(end - start for start, end in _gaps(row, first, last))
    return inside / span if span > 0 else 0.0


def _memory_events(tl: Timeline, cost: CostModel | None) -> list[list[tuple[float, int, float]]]:
    """Per rank, (time, stashed-count delta, bytes delta) events, sorted so frees come first at equal times.

    What each action stashes or frees, and whether at its start or end, is `pipesim.semantics.lower`'s liveness;
    what a memory move takes off the device or brings back, its `offload_change`.
    """
    rows, moves = _rank_rows(tl), _moves_by_rank(tl)
    table, changes = _change_tables(rows, moves, cost)
    events = []
    for (actions, starts, ends), moved in zip(rows, moves, strict=True):
        row = _compute_events(actions, starts, ends, table)
        row += _move_events(moved, changes)[0]
        row.sort()
        events.append(row)
    return events


_action, _start, _end = itemgetter(1), itemgetter(2), itemgetter(3)  # a Span's
_stage, _kind, _stage_kind = itemgetter(0), itemgetter(1), itemgetter(0, 1)  # an Action's or CommAction's
_move_start, _move_end = itemgetter(4), itemgetter(5)  # a CommSpan's


def _rank_rows(tl: Timeline) -> list[tuple[list, list[float], list[float]]]:
    """Per rank, its spans' (actions, starts, ends) sorted by start, as `_by_rank` sorts them: slices of a simulation's
    columns where each rank is one run of them in start order (no Span built), else `_by_rank`'s rows."""
    columns = tl.columns
    if columns is not None and columns.starts:
        ranks, actions, starts, ends = columns
        if 0 <= ranks[0] <= ranks[-1] < tl.num_ranks and all(map(le, ranks, islice(ranks, 1, None))):
            rows = []
            for lo, hi in pairwise([bisect_left(ranks, rank) for rank in range(tl.num_ranks + 1)]):
                run = starts[lo:hi]
                if not all(map(le, run, islice(run, 1, None))):  # out of start order: `_by_rank` sorts it
                    break
                rows.append((actions[lo:hi], run, ends[lo:hi]))
            else:
                return rows
    return [(list(map(_action, row)), list(map(_start, row)), list(map(_end, row))) for row in _by_rank(tl)]


def _moves_by_rank(tl: Timeline, moves: list[CommSpan] | None = None) -> list[list[CommSpan]]:
    """Per rank, the timeline's OFFLOADs and RELOADs (copy-engine spans, `moves` where the caller has read them),
    in the timeline's order."""
    if moves is None:
        moves = comm_of(tl, COPY_KINDS)
    rows: list[list[CommSpan]] = [[] for _ in range(tl.num_ranks)]
    ranks = list(map(itemgetter(0), moves))
    if ranks and 0 <= ranks[0] <= ranks[-1] < tl.num_ranks and all(map(le, ranks, islice(ranks, 1, None))):
        bounds = pairwise([bisect_left(ranks, rank) for rank in range(tl.num_ranks + 1)])
        return [moves[lo:hi] for lo, hi in bounds]  # a simulation's: each rank's copies one run (`copy_spans`)
    for move in moves:
        rows[move[0]].append(move)
    return rows


def _change_tables(
    rows: list[tuple[list, list[float], list[float]]], moves: list[list[CommSpan]], cost: CostModel | None
) -> tuple[dict[int, dict[ActionKind, tuple[int, float]]], dict[CommKind, dict[int, tuple[float, float, bool]]]]:
    """`stash_table` of the stages the spans run, and per kind of move its `offload_change` per stage moved."""
    stages: set[int] = set()
    for actions, _, _ in rows:
        stages.update(map(_stage, actions))
    moved: dict[CommKind, set[int]] = {}
    for row in moves:
        for stage, kind in set(map(_stage_kind, map(_action_of_move, row))):
            moved.setdefault(kind, set()).add(stage)
    sizes = stash_sizes(cost, stages.union(*moved.values()))
    changes = {kind: {stage: offload_change(kind, sizes[stage]) for stage in kinds} for kind, kinds in moved.items()}
    return stash_table({stage: sizes[stage] for stage in stages}), changes


_action_of_move = itemgetter(3)  # a CommSpan's action: the OFFLOAD or RELOAD


def _compute_events(
    actions: list, starts: list[float], ends: list[float], table: dict[int, dict[ActionKind, tuple[int, float]]]
) -> list[tuple[float, int, float]]:
    """One rank's (time, stashed-count delta, bytes delta) per action, unsorted: made a kind at a time at C speed."""
    kinds = list(map(_kind, actions))
    stages = list(map(_stage, actions))
    events: list[tuple[float, int, float]] = []
    for kind in ActionKind:
        mask = list(map(eq, kinds, repeat(kind)))
        if True in mask:
            change = {stage: row[kind] for stage, row in table.items()}
            times = compress(starts if changes_at_start(kind) else ends, mask)
            events += map(tuple.__add__, zip(times), map(change.__getitem__, compress(stages, mask)))
    if len(events) != len(actions):  # a kind that is no ActionKind: the table names it (KeyError)
        for stage, kind in map(_stage_kind, actions):
            table[stage][kind]
    return events


def _move_columns(moves: list[CommSpan]) -> tuple[list, list, list[float], list[float]]:
    """Each memory move's action kind, stage, start and end, as columns (read at C speed)."""
    actions = list(map(_action_of_move, moves))
    return (
        list(map(_kind, actions)),
        list(map(_stage, actions)),
        list(map(_move_start, moves)),
        list(map(_move_end, moves)),
    )


def _move_events(
    moves: list[CommSpan], changes: dict[CommKind, dict[int, tuple[float, float, bool]]]
) -> tuple[list[tuple[float, int, float]], list[tuple[float, float]]]:
    """One rank's memory moves as (time, stashed-count delta, device bytes delta) and (time, host bytes delta)
    events, unsorted. A move takes a microbatch's activations off the device or brings them back: its
    `offload_change` says which, and whether at its start or its end; the host's change falls at its other end."""
    device: list[tuple[float, int, float]] = []
    host: list[tuple[float, float]] = []
    if not moves:
        return device, host
    kinds, stages, starts, ends = _move_columns(moves)
    for kind, change in changes.items():
        mask = list(map(eq, kinds, repeat(kind)))
        moved = list(compress(stages, mask))
        if not moved:
            continue
        starts_it = change[moved[0]][2]  # a property of the kind, the same for every stage
        count = 1 if starts_it else -1  # a microbatch's activations leave the device, or come back
        on_device = {stage: delta for stage, (delta, _, _) in change.items()}
        on_host = {stage: delta for stage, (_, delta, _) in change.items()}
        begin, finish = list(compress(starts, mask)), list(compress(ends, mask))
        device += zip(begin if starts_it else finish, repeat(count), map(on_device.__getitem__, moved))
        host += zip(finish if starts_it else begin, map(on_host.__getitem__, moved), strict=True)
    return device, host


def _host_events(tl: Timeline, cost: CostModel | None) -> list[list[tuple[float, float]]]:
    """Per rank, (time, host bytes delta) of its memory moves, sorted: an OFFLOAD holds host memory from its start,
    a RELOAD frees it at its end (at one time, frees first: a RELOAD ending as an OFFLOAD starts counts once)."""
    moves = _moves_by_rank(tl)
    _, changes = _change_tables([], moves, cost)
    events = []
    for moved in moves:
        row = _move_events(moved, changes)[1]
        row.sort()
        events.append(row)
    return events


def _host_peak(row: list[tuple[float, float]]) -> float:
    """The most bytes held in host memory at once, over sorted (time, delta) events (0.0 without any)."""
    return max(accumulate(map(itemgetter(1), row), initial=0.0))


def host_memory_over_time(tl: Timeline, cost: CostModel) -> list[list[tuple[float, float]]]:
    """Per rank, activation bytes offloaded to host memory over time (empty lines without memory moves)."""
    origin = _origin(tl)
    return [_levels([(t, 0, delta) for t, delta in row], 2, origin) for row in _host_events(tl, cost)]


def has_memory_moves(tl: Timeline) -> bool:
    """Whether the timeline moves activations to host memory and back (its copy engine's spans)."""
    return bool(comm_of(tl, COPY_KINDS))  # an MoE step's all-to-all spans stay unmade


def copy_busy_ms(tl: Timeline) -> list[float]:
    """Per rank, the time its copy engine spends on OFFLOADs and RELOADs."""
    return list(map(_copy_busy, _moves_by_rank(tl)))


def _copy_busy(moves: list[CommSpan]) -> float:
    """The moves' total time, added in their order from 0.0."""
    return reduce(add, map(sub, map(_move_end, moves), map(_move_start, moves)), 0.0)


def _levels(row: list[tuple[float, int, float]], field: int, origin: float) -> list[tuple[float, float]]:
    """Events -> (time, level) step function; one point per distinct time at which the level moves."""
    points = [(origin, 0)]
    level = 0
    for event in row:
        delta = event[field]
        if not delta:
            continue
        level += delta
        time = event[0]
        if points[-1][0] == time:
            points[-1] = (time, level)
        else:
            points.append((time, level))
    return points


@paused_gc()
def stash_counts(tl: Timeline) -> list[list[tuple[float, int]]]:
    """Per rank, microbatches stashed over time: +1 at each F start, -1 at the end of its B or I."""
    origin = _origin(tl)
    return [_levels(row, 1, origin) for row in _memory_events(tl, None)]


@paused_gc()
def memory_over_time(tl: Timeline, cost: CostModel) -> list[list[tuple[float, float]]]:
    """Per rank, stashed activation bytes over time.

    F adds stash_bytes(stage) at its start; B frees it at its end; with a
    split backward, I frees all but the weight-gradient part (w_bytes) and W
    frees that part.
    """
    origin = _origin(tl)
    return [_levels(row, 2, origin) for row in _memory_events(tl, cost)]


def _peaks(row: list[tuple[float, int, float]]) -> tuple[int, float]:
    """Peak count and bytes, each measured after all events at one time (frees sorted first): the running sums
    from 0, added in event order at C speed."""
    peak_count = max(accumulate(map(itemgetter(1), row), initial=0))
    return peak_count, max(accumulate(map(itemgetter(2), row), initial=0.0))


@dataclass(frozen=True)
class RankMetrics:
    """One rank's share of a step. `peak_activation_bytes` is 0.0 when no cost model was given."""

    rank: int
    busy_ms: float
    idle_ms: float
    bubble_fraction: float
    peak_activations: int
    peak_activation_bytes: float
    peak_host_bytes: float = 0.0  # activations offloaded to host memory, at their most
    copy_busy_ms: float = 0.0  # its copy engine's time on OFFLOADs and RELOADs
    link_busy_ms: float = 0.0  # its links' time sending to other ranks (`with_link_busy`; 0 until then)


@dataclass(frozen=True)
class Metrics:
    """The headline numbers of one step (bubble_fraction: idle / (ranks x makespan))."""

    makespan: float
    bubble_fraction: float
    bubble_ratio: float
    ranks: tuple[RankMetrics, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "makespan": self.makespan,
            "bubble_fraction": self.bubble_fraction,
            "bubble_ratio": self.bubble_ratio,
            "ranks": [
                {
                    "rank": r.rank,
                    "busy_ms": r.busy_ms,
                    "idle_ms": r.idle_ms,
                    "bubble_fraction": r.bubble_fraction,
                    "peak_activations": r.peak_activations,
                    "peak_activation_bytes": r.peak_activation_bytes,
                    "peak_host_bytes": r.peak_host_bytes,
                    "busy_ms_by_resource": {"compute": r.busy_ms, "link": r.link_busy_ms, "copy": r.copy_busy_ms},
                }
                for r in self.ranks
            ],
        }


def _stash_sizes(tl: Timeline, cost: CostModel | None) -> dict[int, StashSizes]:
    """Per stage: bytes F stashes, and the part only W still needs after I (zeros without a cost model)."""
    return stash_sizes(cost, {span[1][0] for span in tl.spans})


def stash_sizes(cost: CostModel | None, stages: Iterable[int]) -> dict[int, StashSizes]:
    """Per stage in `stages`: bytes F stashes and the part only W still needs (zeros without a cost model).

    The one reading of a cost model's sizes for liveness: these metrics and the planner's memory model use it.
    """
    sizes: dict[int, StashSizes] = {}
    for stage in stages:
        if cost is None:
            sizes[stage] = StashSizes(0.0, 0.0)
        else:
            stash = cost.stash_bytes(stage)
            sizes[stage] = StashSizes(stash, min(cost.stage(stage).w_bytes, stash))
    return sizes


def _rank_summary(
    row: Iterable[Span], table: dict[int, dict[ActionKind, tuple[int, float]]], origin: float, finish: float
) -> tuple[float, int, float] | None:
    """(idle ms, peak stashed count, peak bytes) in one walk over a rank's spans sorted by start.

    When no two spans overlap, span order is event order (every free happens at
    a span's end, before the next span starts), so no event sort is needed.
    Returns None when spans overlap; the caller then sorts events.
    """
    idle = 0.0
    cursor = origin
    count = peak_count = 0
    size = peak_size = 0.0
    for _, (stage, kind, _), start, end, _, _ in row:
        if start < cursor:
            return None
        idle += start - cursor
        cursor = end
        d_count, d_size = table[stage][kind]
        count += d_count
        size += d_size
        if count > peak_count:
            peak_count = count
        if size > peak_size:
            peak_size = size
    return idle + max(finish - cursor, 0.0), peak_count, peak_size


def _column_summaries(
    tl: Timeline, columns: SpanColumns, cost: CostModel | None
) -> tuple[float, list[tuple[float, int, float]]] | None:
    """(makespan, `_rank_summary` of each rank) read off a simulation's columns: the walk itself, over each rank's
    run of the columns zipped into span-shaped rows, with no Span built and no row gathered or sorted. None where
    that is not the walk over sorted rows: a rank's spans not one run in the columns, a span that ends before it
    starts (the runs might then be out of start order), or spans that overlap (the caller then walks the spans)."""
    ranks, actions, starts, ends = columns
    if not starts or not 0 <= ranks[0] <= ranks[-1] < tl.num_ranks or not all(map(le, ranks, islice(ranks, 1, None))):
        return None
    if not all(map(le, starts, ends)):  # then a run without overlap (`_rank_summary` checks) is in start order
        return None
    bounds = list(pairwise([bisect_left(ranks, rank) for rank in range(tl.num_ranks + 1)]))
    origin = min(starts[lo] for lo, hi in bounds if hi > lo)  # `_origin`: each run starts with its earliest
    total = _makespan_of(max(ends), tl, origin)
    table = stash_table(stash_sizes(cost, set(map(itemgetter(0), actions))))
    summaries = []
    for lo, hi in bounds:
        row = zip(repeat(0), actions[lo:hi], starts[lo:hi], ends[lo:hi], repeat(0), repeat(0))
        summary = _rank_summary(row, table, origin, origin + total)
        if summary is None:
            return None
        summaries.append(summary)
    return total, summaries


@paused_gc()
def compute_metrics(tl: Timeline, cost: CostModel | None = None) -> Metrics:
    """Makespan, bubbles and peak activation memory per rank (bytes need `cost`)."""
    moves = comm_of(tl, COPY_KINDS)  # `has_memory_moves`, its spans kept for the metrics that read them
    if moves:  # the copies move activations off the device and back: the level needs every event
        return _metrics_with_moves(tl, cost, moves)
    summaries = None if tl.columns is None else _column_summaries(tl, tl.columns, cost)
    if summaries is not None:
        return _metrics(tl.num_ranks, *summaries)
    rows = _by_rank(tl)
    origin = min([row[0][2] for row in rows if row], default=0.0)  # `_origin`: each row is sorted by start
    total = _makespan(tl, origin)
    table = stash_table(_stash_sizes(tl, cost))
    summaries = [_rank_summary(row, table, origin, origin + total) for row in rows]
    return _metrics_of_events(tl, cost, rows, summaries, origin, total)


def _metrics_with_moves(tl: Timeline, cost: CostModel | None, copies: list[CommSpan]) -> Metrics:
    """The metrics of a step with memory moves, each rank's read in one walk over its columns: idle time, its
    device level over the compute and move events merged (sorted as `_memory_events` sorts them), its host level
    and its copy engine's busy time."""
    rows, moves = _rank_rows(tl), _moves_by_rank(tl, copies)
    origin = min([starts[0] for _, starts, _ in rows if starts], default=0.0)  # `_origin`: rows sorted by start
    ends = [max(row_ends) for _, _, row_ends in rows if row_ends]
    total = _makespan_of(max(ends), tl, origin) if ends else 0.0  # `_makespan`
    table, changes = _change_tables(rows, moves, cost)
    summaries, hosts, busy = [], [], []
    for (actions, starts, row_ends), moved in zip(rows, moves, strict=True):
        peaks = _exact_peaks(actions, starts, row_ends, moved, table, changes)
        if peaks is None:  # sums that round: added in the sorted events' own order
            device, host = _move_events(moved, changes)
            events = _compute_events(actions, starts, row_ends, table)
            events += device
            events.sort()
            host.sort()
            peaks = (*_peaks(events), _host_peak(host))
        summaries.append((_idle(actions, starts, row_ends, origin, origin + total), *peaks[:2]))
        hosts.append(peaks[2])
        busy.append(_copy_busy(moved))
    metrics = _metrics(tl.num_ranks, total, summaries)
    ranks = tuple(
        dataclasses.replace(r, peak_host_bytes=h, copy_busy_ms=b)
        for r, h, b in zip(metrics.ranks, hosts, busy, strict=True)
    )
    return dataclasses.replace(metrics, ranks=ranks)


_EXACT = 2.0**53  # integers up to this add exactly, in any order


def _exact_peaks(
    actions: list,
    starts: list[float],
    ends: list[float],
    moves: list[CommSpan],
    table: dict[int, dict[ActionKind, tuple[int, float]]],
    changes: dict[CommKind, dict[int, tuple[float, float, bool]]],
) -> tuple[int, float, float] | None:
    """`_peaks` of the sorted device events and `_host_peak` of the sorted host events of one rank, without an event
    tuple: the times sorted alone (stable), each stream of one kind laid out frees first, as the tuples sort at one
    time. Where every byte change is a whole number and their magnitudes sum below 2^53, each running sum is exact
    in any order, so the levels after each time, and the peaks, are those of the tuples' order (within one time
    the level falls then rises in both orders). None where that does not hold: the caller sorts the tuples."""
    kinds, stages = list(map(_kind, actions)), list(map(_stage, actions))
    present = set(kinds)
    counted = _counted_peaks(kinds, present, set(stages), starts, ends, moves, table, changes)
    if counted is not None:
        return counted
    device: list[tuple[int, list[float], list]] = []  # (count delta, times, byte deltas) of each stream
    for kind in ActionKind:
        if kind not in present:
            continue
        mask = list(map(is_, kinds, repeat(kind)))
        times = list(compress(starts if changes_at_start(kind) else ends, mask))
        moved = list(compress(stages, mask))
        change = {stage: table[stage][kind] for stage in set(moved)}
        counts = {count for count, _ in change.values()}
        if len(counts) != 1:
            return None
        device.append((counts.pop(), times, _deltas(moved, {stage: size for stage, (_, size) in change.items()})))
    host: list[tuple[int, list[float], list]] = []  # (sign class, times, byte deltas): frees first
    if moves:
        move_kinds, move_stages, begins, finishes = _move_columns(moves)
        for kind, change in changes.items():
            mask = list(map(is_, move_kinds, repeat(kind)))
            moved = list(compress(move_stages, mask))
            if not moved:
                continue
            starts_it = change[moved[0]][2]  # a property of the kind, the same for every stage
            begin, finish = list(compress(begins, mask)), list(compress(finishes, mask))
            on_device = {stage: delta for stage, (delta, _, _) in change.items()}
            on_host = {stage: delta for stage, (_, delta, _) in change.items()}
            device.append((1 if starts_it else -1, begin if starts_it else finish, _deltas(moved, on_device)))
            to_host = _deltas(moved, on_host)
            if to_host and min(to_host) < 0 < max(to_host):
                return None
            host.append((0 if to_host and min(to_host) >= 0 else -1, finish if starts_it else begin, to_host))
    if sum(len(times) for _, times, _ in device) != len(actions) + len(moves):  # a kind no table names
        return None
    device.sort(key=itemgetter(0))  # stable: frees (-1), then W's part (0), then what F and a RELOAD bring (+1)
    host.sort(key=itemgetter(0))
    for count, _, deltas in device:  # frees only fall, what comes only rises: the level's shape within one time
        if deltas and (min(deltas) < 0 if count > 0 else max(deltas) > 0):
            return None
    if not (_exact(device) and _exact(host)):
        return None
    return (*_stream_peaks(device, True), _stream_peaks(host, False)[1] if host else 0.0)


def _counted_peaks(
    kinds: list,
    present: set,
    stages: set[int],
    starts: list[float],
    ends: list[float],
    moves: list[CommSpan],
    table: dict[int, dict[ActionKind, tuple[int, float]]],
    changes: dict[CommKind, dict[int, tuple[float, float, bool]]],
) -> tuple[int, float, float] | None:
    """`_exact_peaks` where every event of the rank moves one whole stash of one size s (a whole number: each sum
    exact), or nothing: each level is then its count times s, and the count's peak is read off the rising and the
    falling events' times alone, with no byte delta listed. None where that does not hold."""
    sizes: set[float] = set()
    rises: list[float] = []  # in any order: `_count_peak` sorts them
    falls: list[float] = []
    for kind in present:
        if type(kind) is not ActionKind:
            return None
        signs = {table[stage][kind] for stage in stages}
        if len(signs) != 1:
            return None
        count, size = signs.pop()
        if count == 0 and size == 0:
            continue  # W of a stage without a weight part: changes nothing
        if count not in (1, -1):
            return None
        sizes.add(size * count)
        times = compress(starts if changes_at_start(kind) else ends, map(is_, kinds, repeat(kind)))
        (rises if count > 0 else falls).extend(times)
    host_rises: list[float] = []
    host_falls: list[float] = []
    if moves:
        move_kinds, move_stages, begins, finishes = _move_columns(moves)
        for kind in set(move_kinds):
            mask = list(map(is_, move_kinds, repeat(kind)))
            change = {changes.get(kind, {}).get(stage) for stage in set(compress(move_stages, mask))}
            if len(change) != 1 or None in change:
                return None
            on_device, on_host, starts_it = change.pop()
            sizes.update((abs(on_device), abs(on_host)))
            at, other = (begins, finishes) if starts_it else (finishes, begins)
            (rises if on_device > 0 else falls).extend(compress(at, mask))
            (host_rises if on_host > 0 else host_falls).extend(compress(other, mask))
    if len(sizes) > 1:
        return None
    size = sizes.pop() if sizes else 0.0
    # a size typed as an int (the app's knobs) is whole too; int has no is_integer before Python 3.12
    if not (size > 0 and float(size).is_integer()) or (len(kinds) + 2 * len(moves)) * size >= _EXACT:
        return None
    peak = _count_peak(rises, falls)
    return peak, peak * size, _count_peak(host_rises, host_falls) * size if moves else 0.0


def _count_peak(rises: list[float], falls: list[float]) -> int:
    """The highest running count from 0 over +1 events at `rises` and -1 events at `falls`, falls first at one time
    (a stable sort of the times, falls listed first)."""
    times = falls + rises
    deltas = [-1] * len(falls) + [1] * len(rises)
    return max(accumulate(map(deltas.__getitem__, sorted(range(len(times)), key=times.__getitem__)), initial=0))


def _scale(streams: list[tuple[int, list[float], list]]) -> float | None:
    """The one size s >= 0 of which every byte delta is its count delta times (a rank whose stages keep the same
    bytes, without a split backward's part), else None: the byte level is then the count level times s, exactly."""
    sizes = {delta / count if count else None for count, _, deltas in streams for delta in set(deltas)}
    size = sizes.pop() if len(sizes) == 1 else None
    return abs(size) if size is not None and size >= 0 else None  # abs: a size of -0.0 (a free of none) as 0.0


def _deltas(stages: list[int], by_stage: dict[int, float]) -> list:
    """Each event's delta, its stage's: one repeated value where the stream holds one stage (a plain rank)."""
    if len(by_stage) == 1:
        return [next(iter(by_stage.values()))] * len(stages)
    return list(map(by_stage.__getitem__, stages))


def _exact(streams: list[tuple[int, list[float], list]]) -> bool:
    """Whether every delta is a whole number and all their magnitudes sum below 2^53 (every running sum exact)."""
    total = 0.0
    for _, _, deltas in streams:
        if deltas:
            values = set(deltas)
            if not all(float(value).is_integer() for value in values):
                return False
            total += len(deltas) * max(map(abs, values))
    return total < _EXACT


def _stream_peaks(streams: list[tuple[int, list[float], list]], counts: bool) -> tuple[int, float]:
    """The highest running sums from 0 of the count deltas (where `counts`, else 0) and of the byte deltas, over the
    streams' events in time order, ties in stream order (a stable sort of the times alone)."""
    times = list(chain.from_iterable(times for _, times, _ in streams))
    order = sorted(range(len(times)), key=times.__getitem__)
    size = _scale(streams) if counts else None
    peak_bytes = 0.0
    if size is None:
        values = list(chain.from_iterable(deltas for _, _, deltas in streams))
        peak_bytes = max(accumulate(map(values.__getitem__, order), initial=0.0))
    if not counts:
        return 0, peak_bytes
    values = list(chain.from_iterable(repeat(count, len(stream)) for count, stream, _ in streams))
    peak_count = max(accumulate(map(values.__getitem__, order), initial=0))
    return peak_count, (peak_bytes if size is None else peak_count * size)


def _idle(actions: list, starts: list[float], ends: list[float], origin: float, finish: float) -> float:
    """A rank's idle time within [origin, finish] over its spans sorted by start: `_gaps`' gaps summed in order,
    at C speed where no span overlaps the next (each gap is then a start less the end before it)."""
    if starts and all(map(le, starts, ends)) and all(map(le, ends, islice(starts, 1, None))):
        gaps = chain((starts[0] - origin,), map(sub, islice(starts, 1, None), ends), (finish - ends[-1],))
        return sum(filter(partial(lt, 0.0), gaps))  # `_gaps` keeps a gap where it is longer than nothing
    row = zip(repeat(0), actions, starts, ends, repeat(0), repeat(0))
    return sum(b - a for a, b in _gaps(row, origin, finish))


def _metrics_of_events(
    tl: Timeline,
    cost: CostModel | None,
    rows: list[list[Span]],
    summaries: list[tuple[float, int, float] | None],
    origin: float,
    total: float,
) -> Metrics:
    """The metrics, each rank whose summary is None read off its sorted memory events."""
    if None in summaries:  # overlapping spans (measured runs) or memory moves: the general, sorting path
        events = _memory_events(tl, cost)
        for r, summary in enumerate(summaries):
            if summary is None:
                idle = sum(b - a for a, b in _gaps(rows[r], origin, origin + total))
                summaries[r] = (idle, *_peaks(events[r]))
    return _metrics(tl.num_ranks, total, summaries)


def _metrics(num_ranks: int, total: float, summaries: list[tuple[float, int, float]]) -> Metrics:
    """The Metrics of a step of makespan `total` from each rank's (idle ms, peak stashed count, peak bytes)."""
    ranks = tuple(
        RankMetrics(
            rank=r,
            busy_ms=total - idle,
            idle_ms=idle,
            bubble_fraction=_fraction(idle, 1, total),
            peak_activations=peak_count,
            peak_activation_bytes=float(peak_size),
        )
        for r, (idle, peak_count, peak_size) in enumerate(summaries)
    )
    idle_sum = sum(r.idle_ms for r in ranks)
    return Metrics(
        makespan=total,
        bubble_fraction=_fraction(idle_sum, num_ranks, total),
        bubble_ratio=_ratio(idle_sum, num_ranks, total),
        ranks=ranks,
    )


def link_busy_ms(schedule: Schedule, cost: CostModel) -> list[float]:
    """Per rank, the time its links spend: each message it sends to another rank (the lowering's
    `produced_message`) for its transfer time, the simulator's price of the consumer's wait, and its MoE stages'
    all-to-alls. Messages are counted per (stage, kind), then priced once per kind: 10^5 actions in a few ms."""
    busy = [0.0] * schedule.num_ranks
    placement, chain = schedule.stage_to_rank, schedule.pipeline_stages
    moe = any(stage.a2a_ms for stage in cost.stages)
    counts: Counter = Counter()
    if is_validated(schedule) and not moe:
        # a sound schedule runs each stage's F once per microbatch and its input gradient once (by B or by I), so
        # each stage sends one activation and one gradient per microbatch: counted without reading 10^5 actions
        for stage in range(schedule.num_stages):
            counts[stage, ActionKind.FORWARD] = counts[stage, ActionKind.BACKWARD] = schedule.num_microbatches
    else:
        for row in schedule.actions:  # (stage, kind) pairs zipped at C speed
            counts.update(zip(map(itemgetter(0), row), map(itemgetter(1), row), strict=True))
    for (stage, kind), count in counts.items():
        rank = placement[stage]
        if moe:  # an MoE stage's all-to-alls hold its rank's link too
            busy[rank] += count * cost.a2a_ms(stage, kind)
        message = produced_message(Action(stage, kind, 0), schedule.num_stages, chain)
        if message is not None and placement[message.stage] != rank:
            busy[rank] += count * cost.transfer_ms(stage, message.stage)
    return busy


def with_link_busy(metrics: Metrics, busy: list[float]) -> Metrics:
    """`metrics` with each rank's link time (`link_busy_ms`) filled in."""
    ranks = tuple(dataclasses.replace(r, link_busy_ms=b) for r, b in zip(metrics.ranks, busy, strict=True))
    return dataclasses.replace(metrics, ranks=ranks)

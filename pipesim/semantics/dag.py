"""The dependency graph of a schedule: data edges plus each rank's order.

Two representations, for two jobs:

* `dependencies` - flat Python lists indexed by action id. The simulator
  (`pipesim.sim.simulate`), deadlock detection and the critical path run on it:
  schedules of 10^5 actions are swept in well under a second, which networkx
  cannot do.
* `build_dag` - a networkx DiGraph for people and charts (nodes are
  `Action`s with attributes, edges say "data" or "order").

Data edges are the producers of `pipesim.semantics.lower` (the one statement of what
an action needs). Order edges join consecutive actions of a rank. A cycle is
a deadlock. Where a schedule states its transfers (torch's compute_comms
order), a cross-rank edge starts at the sender's last action before the
SEND (`pipesim.semantics.lower.send_gates`), and an overlapped group waits for every
member's inputs before it starts (`Dependencies.joined`).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property
from itertools import chain, compress, repeat
from operator import add, eq, is_, itemgetter, mul, not_
from typing import TYPE_CHECKING

from pipesim._perf import paused_gc
from pipesim.ir import Action, ActionKind, CommAction, CommKind, F, Schedule
from pipesim.semantics.lower import (
    RELOAD_SERVES,
    action_ids,
    collectives_before,
    has_memory_moves,
    memory_move_gates,
    overlap_groups,
    overlap_ids,
    produced_message,
    producer_ids,
    producers_of,
    send_gates,
    transfers_of,
)
from pipesim.semantics.screen import is_validated
from pipesim.semantics.validate import ScheduleError

if TYPE_CHECKING:  # a cost only labels the figure's nodes and edges; a timeline only places them
    import networkx as nx  # only the figure needs it: imported where a graph is built (0.15 s at start-up)

    from pipesim.cost.model import CostModel
    from pipesim.records import Timeline

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
    deps: list[tuple[int, ...]]
    joined: dict[int, tuple[int, ...]] | None = None  # an overlapped group's first id -> its other members' ids
    sends: dict[tuple[int, int], str] | None = None  # (consumer id, gate id) -> the SEND the consumer waits for
    copies: CopyOps | None = None  # OFFLOADs and RELOADs, ids after the compute actions' (none: no memory moves)
    # torch's collectives of a full order: per compute action those its rank runs right before it, and per rank
    # those after its last (`pipesim.semantics.lower.collectives_before`; empty without an order)
    collectives: tuple[dict[Action, list[CommAction]], list[list[CommAction]]] = ({}, [])

    @property
    def num_ranks(self) -> int:
        return len(self.offsets) - 1

    @property
    def num_ops(self) -> int:
        """Compute actions and copies: the length of the engine's per-id lists (durations, starts, ends)."""
        return len(self.actions) + (0 if self.copies is None else len(self.copies.entries))

    @cached_property
    def index(self) -> dict[Action, int]:
        """Action -> id, made on first use: a simulation of plain compute actions never asks (10^5 actions hashed
        for nothing took a third of `dependencies`)."""
        return dict(zip(self.actions, range(len(self.actions)), strict=True))

    @cached_property
    def blocking(self) -> list[int] | None:
        """Per action, the one producer that can keep it waiting, or -1: one on another rank, or later in its own
        rank's list (a deadlock). A producer earlier on its own rank has always ended by then, since a rank runs its
        list in order. None where an action has two such producers (the engine then reads `deps` as they are).

        Built once per dependencies (the planner sweeps a shape under several cost models): with it the engine's
        inner loop reads one producer per action rather than a tuple (`pipesim.sim.simulate.sweep`)."""
        blocking: list[int] = []
        append = blocking.append
        offsets, dep_lists = self.offsets, self.deps
        for rank in range(len(offsets) - 1):
            first = offsets[rank]
            for i in range(first, offsets[rank + 1]):
                found = -1
                for d in dep_lists[i]:
                    if d < first or d >= i:  # on another rank (ids are rank-major), or later on this one
                        if found >= 0:
                            return None
                        found = d
                append(found)
        return blocking

    @cached_property
    def pair_waits(self) -> tuple[list[int], list[int]] | None:
        """`blocking` for the engine's loop of overlapped pairs without copies: (`blocking` with -2 at each pair's
        first member, `blocking` itself). A pair starts once both members' inputs are in: its first member waits
        for its own producer and its second member's, the next id (`blocking[i + 1]`, paying that member's hop);
        the second member then finds its own arrived. None where a group has more than two members or its second
        member does not follow its first, an action has two producers that can keep it waiting, or the schedule
        copies (the engine then reads `waits`). Built at C speed off `blocking`."""
        blocking, joined = self.blocking, self.joined
        if blocking is None or not joined or self.copies is not None:
            return None
        # each group a pair whose second member comes next: what the rank runs between them could feed it, and
        # `blocking` would not name it
        if not all(map(eq, joined.values(), zip(map(add, joined, repeat(1))))):
            return None
        waits = list(blocking)
        deque(map(waits.__setitem__, joined, repeat(-2)), maxlen=0)  # -2: a pair's first member, read above
        return waits, blocking

    @cached_property
    def waits(self) -> tuple[list[int], dict[int, tuple[tuple[int, int], ...]], list[int]]:
        """`blocking` for the engine's loop with overlapped groups and copies: per compute action the one producer
        that can keep it waiting, -1 for none, or -2 for several, listed in the dict as (producer, member whose
        hop it pays, or -1 for none: a copy on its own rank). A group's first member waits for every member's
        producers (the members then run back to back: what they wait for has arrived). A producer earlier on the
        rank's own list has ended by then; a copy (id past the compute actions) may end later, and a producer
        later on the list never ends first (a deadlock). The third list: per compute action outside a group with
        at most one other producer to wait for, the copy on its own rank it waits for (a backward's RELOAD), or -1:
        read beside the first list rather than through the dict (10^4 backwards)."""
        offsets, dep_lists, ranks, joined = self.offsets, self.deps, self.ranks, self.joined or {}
        num_actions = len(self.actions)
        single: list[int] = []
        several: dict[int, tuple[tuple[int, int], ...]] = {}
        local: list[int] = []
        append, append_local = single.append, local.append
        if self.copies is not None:
            ranks = ranks + self.copies.ranks
        for rank in range(len(offsets) - 1):
            first = offsets[rank]
            for i in range(first, offsets[rank + 1]):
                found = copy = -1
                for d in dep_lists[i]:
                    if d < first or d >= i:
                        if ranks[d] == rank:
                            if d >= num_actions and copy < 0:  # a copy of its own rank's: pays no hop
                                copy = d
                                continue
                            found = -2  # one that pays no hop, or a second copy
                            break
                        if found >= 0:
                            found = -2  # several
                            break
                        found = d
                if found != -2 and i not in joined:
                    append(found)  # the common case: none, or one producer on another rank paying this action's hop
                    append_local(copy)
                    continue
                append_local(-1)
                waits = []
                for d in dep_lists[i]:
                    if d < first or d >= i:
                        waits.append((d, i if ranks[d] != rank else -1))
                others = joined.get(i, ())
                for m in others:
                    for d in dep_lists[m]:
                        if d != i and d not in others and (ranks[d] != rank or d >= i):
                            waits.append((d, m if ranks[d] != rank else -1))
                if len(waits) == 1 and waits[0][1] == i:
                    append(waits[0][0])
                elif waits:
                    append(-2)
                    several[i] = tuple(waits)
                else:
                    append(-1)
        return single, several, local


@dataclass(frozen=True)
class CopyOps:
    """The memory moves of a schedule as the engine runs them (`pipesim.semantics.lower.memory_moves`).

    Copy j has id `first + j`, after every compute action. `issued[i]` lists the copies a rank issues when
    compute action i ends (None for most), in the order its copy engine runs them; `needs[c]` is the id that
    copy c waits for (the forward an OFFLOAD copies out, the OFFLOAD a RELOAD brings back). The backward a
    RELOAD serves has the RELOAD's id among its dependencies, so it starts only once the copy is back.
    """

    first: int
    entries: list[CommAction]
    ranks: list[int]
    issued: list[tuple[int, ...] | None]
    needs: dict[int, int]


class DeadlockError(ScheduleError):
    """The schedule's dependency graph has a cycle: some ranks wait on each other forever."""

    def __init__(
        self,
        cycle: list[Action],
        waits: list[tuple[int, Action, Action, int]],
        sends: dict[tuple[Action, Action], str] | None = None,
    ) -> None:
        self.cycle = cycle
        self.waits = waits  # (rank, its stuck action, the action it waits for, that action's rank)
        rank, head, _, _ = waits[0]
        sends = sends or {}  # (stuck action, awaited action) -> the SEND placed after the awaited action
        said = "; ".join(
            f"rank {r} waits at {h} for "
            + (f"{sends[h, d]} (placed after {d}) " if (h, d) in sends else f"{d} ")
            + ("later in its own list" if dr == r else f"on rank {dr}")
            for r, h, d, dr in waits
        )
        shown = cycle if len(cycle) <= _CYCLE_SHOWN else cycle[: _CYCLE_SHOWN - 1] + ["..."]  # type: ignore[list-item]
        path = " -> ".join(str(a) for a in [*shown, cycle[0]])
        super().__init__("deadlock", f"{said} (cycle: {path})", rank, None, head)


_LOWERED = "_pipesim_lowered"  # where a schedule keeps its lowering (in its instance dict, as `screen` keeps its mark)


def dependencies(schedule: Schedule) -> Dependencies:
    """The schedule lowered once: every action's producers, its memory moves and collectives, kept on the schedule
    so that every reader (simulator, metrics, planner, critical path, executor) takes the same value. ScheduleError
    when a producer is missing or doubled."""
    lowered = schedule.__dict__.get(_LOWERED)
    if lowered is None:
        lowered = schedule.__dict__[_LOWERED] = _lower(schedule)  # a frozen value, as cached_property sets one
    return lowered


def forget_lowering(schedule: Schedule) -> None:
    """Drop the lowering `schedule` keeps, for a caller done with it: at 10^5 actions its producer ids are about
    10 MiB, held as long as the schedule lives (the command line's `simulate` writes its files without them)."""
    schedule.__dict__.pop(_LOWERED, None)


@paused_gc()
def _lower(schedule: Schedule) -> Dependencies:
    actions: list[Action] = []
    ranks: list[int] = []
    offsets = [0]
    for rank, row in enumerate(schedule.actions):
        actions.extend(row)
        ranks.extend([rank] * len(row))
        offsets.append(len(actions))
    validated = is_validated(schedule)  # then every action is in range, once, and every producer runs
    if not validated:
        _check_ranges(schedule, actions, ranks, offsets)
    ids = action_ids(actions, schedule.num_stages, schedule.num_microbatches)  # the memory moves read it too
    try:
        deps = producer_ids(
            actions,
            schedule.num_stages,
            schedule.num_microbatches,
            not validated,
            schedule.seq_chunks,
            schedule.pipeline_stages,
            ids,
        )
    except ValueError:  # an action runs twice: name the first repeat
        _raise_duplicate(actions, dict(zip(actions, range(len(actions)), strict=True)), ranks, offsets)
        raise
    made = Dependencies(actions, ranks, offsets, deps)
    if not validated and -1 in chain.from_iterable(deps):  # a C-speed scan
        missing = next(a for a, ds in zip(actions, deps, strict=True) if -1 in ds)
        _raise_missing(missing, made.index, ranks, offsets, schedule)
    if schedule.order is None:  # a plain order: the data rules alone
        return made
    moves = memory_move_gates(schedule) if has_memory_moves(schedule) else None
    if moves is not None and _moves_alone(schedule, moves):  # no SEND, pair or collective: the scans for them below
        copies = _copy_ops(schedule, made, deps, ids, moves)  # (10^5 entries, three times) would find none
        return Dependencies(actions, ranks, offsets, deps, None, None, copies, ({}, [[] for _ in schedule.order]))
    gates = send_gates(schedule)
    joined = overlap_ids(schedule, offsets)  # `Dependencies.joined`, read off the groups' places: no action hashed
    if joined is None:  # an entry of a subclass: the groups found by name
        joined = _joined(overlap_groups(schedule), made)
    collectives = collectives_before(schedule)
    if gates is None and not joined and moves is None:
        return dataclasses.replace(made, collectives=collectives) if any(collectives) else made
    sends: dict[tuple[int, int], str] | None = None
    if gates is not None:
        sends = {}
        deps = _gated(deps, actions, ranks, offsets, made.index, gates, schedule.num_stages, sends)
    copies = _copy_ops(schedule, made, deps, ids, moves) if moves is not None else None
    return Dependencies(actions, ranks, offsets, deps, joined or None, sends, copies, collectives)


def _moves_alone(schedule: Schedule, moves: list[tuple[list[CommAction], list[int]]]) -> bool:
    """Whether every entry of the order is a compute action or a memory move (`memory_move_gates`' rows): each
    row holds only the two exact types, and as many entries as its compute actions and its moves together."""
    rows = zip(schedule.order or (), schedule.actions, moves, strict=True)
    return all(
        len(row) == len(computed) + len(moved) and set(map(type, row)) <= _MOVES_ALONE
        for row, computed, (moved, _) in rows
    )


_MOVES_ALONE = frozenset({Action, CommAction})


def _joined(groups: list[tuple[Action, ...]], made: Dependencies) -> dict[int, tuple[int, ...]]:
    """`Dependencies.joined` found by name, where the groups' places are not known (`overlap_ids`): each group's
    first id -> its other members' ids."""
    member = made.index.__getitem__
    if all(map((2).__eq__, map(len, groups))):  # 10^4 pairs: the second ids as 1-tuples, as zip of one yields them
        return dict(zip(map(member, map(_first, groups)), zip(map(member, map(_second, groups))), strict=True))
    return {member(group[0]): tuple(map(member, group[1:])) for group in groups}


_first, _second = itemgetter(0), itemgetter(1)


def _copy_ops(
    schedule: Schedule,
    made: Dependencies,
    deps: list[tuple[int, ...]],
    ids: dict[ActionKind, list[list[int]]],
    rows: list[tuple[list[CommAction], list[int]]],
) -> CopyOps:
    """The engine's view of `memory_moves`; adds each RELOAD to the dependencies of the backward it serves (in
    place). Validation has checked that every copy stands after what it moves and before what it serves. Each id is
    read off a position (`memory_move_gates`), the compute actions' `action_ids` or a table of the OFFLOADs per
    (stage, microbatch), a column at a time: 10^5 copies without hashing an action."""
    first = len(made.actions)  # `rows`: `memory_move_gates(schedule)`
    entries = list(chain.from_iterable(row for row, _ in rows))
    ranks = list(chain.from_iterable(repeat(rank, len(row)) for rank, (row, _) in enumerate(rows)))
    copy_ids = range(first, first + len(entries))
    stages, kinds, mbs = (list(map(itemgetter(field), entries)) for field in range(3))
    num_mb = schedule.num_microbatches
    if not set(stages) <= set(range(schedule.num_stages)) or not set(mbs) <= set(range(num_mb)):
        raise ScheduleError(
            "memory move out of range", "an OFFLOAD or RELOAD names a stage or microbatch that no rank runs"
        )
    if any(gates and min(gates) < 0 for _, gates in rows):
        raise ScheduleError("memory move too early", "an OFFLOAD or RELOAD comes before any compute action of its rank")
    issued: list[tuple[int, ...] | None] = [None] * first
    gate_ids = chain.from_iterable(
        map(add, gates, repeat(lo)) for (_, gates), lo in zip(rows, made.offsets, strict=False)
    )
    for gate, c in zip(gate_ids, copy_ids, strict=True):  # the copies a compute action issues when it ends, in order
        held = issued[gate]
        issued[gate] = (c,) if held is None else (*held, c)
    reloads = list(map(is_, kinds, repeat(CommKind.RELOAD)))
    offloads = list(map(not_, reloads))
    keys = _keys(stages, mbs, num_mb)  # (stage, microbatch) as one index into the OFFLOADs' table
    moved_out = _id_table(schedule.num_stages * num_mb, ((keys, copy_ids, offloads),))
    forwards = _ids_of(ids[F], compress(stages, offloads), compress(mbs, offloads))
    needs = dict(zip(compress(copy_ids, offloads), forwards, strict=True))
    needs.update(zip(compress(copy_ids, reloads), map(moved_out.__getitem__, compress(keys, reloads)), strict=True))
    # the backward a RELOAD serves: the first kind of RELOAD_SERVES that runs
    served_stages, served_mbs = list(compress(stages, reloads)), list(compress(mbs, reloads))
    serving = _ids_of(ids[RELOAD_SERVES[0]], served_stages, served_mbs)
    for kind in RELOAD_SERVES[1:]:
        if -1 in serving:
            later = _ids_of(ids[kind], served_stages, served_mbs)
            serving = [found if found >= 0 else other for found, other in zip(serving, later, strict=True)]
    if -1 in needs.values() or -1 in serving:
        raise ScheduleError(
            "memory move without its action", "an OFFLOAD's forward, or a RELOAD's OFFLOAD or backward, never runs"
        )
    for c, backward in zip(compress(copy_ids, reloads), serving, strict=True):
        deps[backward] = (*deps[backward], c)
    return CopyOps(first, entries, ranks, issued, needs)


def _ids_of(rows: list[list[int]], stages: Iterable[int], microbatches: Iterable[int]) -> list[int]:
    """`rows[stage][microbatch]` of each (stage, microbatch), at C speed."""
    return list(map(list.__getitem__, map(rows.__getitem__, stages), microbatches))


def _keys(stages: list[int], microbatches: list[int], num_mb: int) -> list[int]:
    """Each (stage, microbatch) as one index, stage x num_mb + microbatch, at C speed."""
    return list(map(add, map(mul, stages, repeat(num_mb)), microbatches))


def _id_table(size: int, columns: tuple) -> list[int]:
    """Per key, the id of the last (keys, ids, mask) entry written with that key, -1 for none."""
    table = [-1] * size
    for keys, ids, mask in columns:
        deque(map(table.__setitem__, compress(keys, mask), compress(ids, mask)), maxlen=0)
    return table


def _gated(
    deps: list[tuple[int, ...]],
    actions: list[Action],
    ranks: list[int],
    offsets: list[int],
    index: dict[Action, int],
    gates: dict,
    num_stages: int,
    sends: dict,
) -> list[tuple[int, ...]]:
    """Cross-rank producers replaced by the sender's last action before the message's SEND (recorded in
    `sends` where that is not the producer itself, so a deadlock can name the SEND)."""
    gated = []
    for i, producers in enumerate(deps):
        row = []
        for d in producers:
            if ranks[d] != ranks[i]:
                message = produced_message(actions[d], num_stages)
                gate = gates.get(message, -1)
                if gate is None or gate == -1:
                    rank = ranks[d]
                    detail = f"{actions[d]}'s output reaches {actions[i]} on rank {ranks[i]}, but rank {rank} " + (
                        "has no SEND for it" if gate == -1 else "sends it before computing anything"
                    )
                    raise ScheduleError("missing send", detail, rank, d - offsets[rank], actions[d])
                if gate != actions[d]:
                    sends[(i, index[gate])] = _send_text(actions[d], num_stages)
                d = index[gate]
            row.append(d)
        gated.append(tuple(row))
    return gated


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
                rank,
                i - offsets[rank],
                actions[i],
            )


def _raise_duplicate(actions: list[Action], index: dict[Action, int], ranks: list[int], offsets: list[int]) -> None:
    for i, action in enumerate(actions):
        if index[action] != i:
            rank = ranks[i]
            raise ScheduleError(
                f"duplicate {action.kind}", f"{action} runs more than once", rank, i - offsets[rank], action
            )


def _raise_missing(
    action: Action, index: dict[Action, int], ranks: list[int], offsets: list[int], schedule: Schedule
) -> None:
    """Name the producer that no rank runs."""
    missing = next(
        options
        for options in producers_of(action, schedule.num_stages, schedule.seq_chunks, schedule.pipeline_stages)
        if not any(a in index for a in options)
    )
    what = " (or ".join(str(a) for a in missing) + ")" * (len(missing) - 1)
    i = index[action]
    rank = ranks[i]
    detail = f"{action} needs {what}, which no rank runs"
    raise ScheduleError("missing dependency", detail, rank, i - offsets[rank], action)


def _send_text(producer: Action, num_stages: int) -> str:
    """The SEND that moves `producer`'s output, in torch's text form (2SEND_F0, 3SEND_B1)."""
    return str(transfers_of(produced_message(producer, num_stages))[0])


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
    import networkx as nx

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
        graph.add_edges_from(zip(actions[lo : hi - 1], actions[lo + 1 : hi], strict=True), kind="order")
    n = len(actions)
    graph.add_edges_from(
        (actions[d], actions[i], _data_edge(actions[d], actions[i], ranks[d] != ranks[i], cost))
        for i, producers in enumerate(deps.deps)
        for d in producers
        if d < n  # a RELOAD a backward waits for: a memory edge, below
    )
    if deps.copies is not None:
        _add_copies(graph, deps, cost)
    return graph


def _add_copies(graph: nx.DiGraph, deps: Dependencies, cost: CostModel | None) -> None:
    """Each OFFLOAD and RELOAD as a node on its rank, with "memory" edges: the forward or OFFLOAD whose data it
    moves, and the backward a RELOAD serves; an "order" edge from the compute action that issues it."""
    copies, actions = deps.copies, deps.actions
    op = [*actions, *copies.entries]
    for c, (entry, rank) in enumerate(zip(copies.entries, copies.ranks, strict=True), start=copies.first):
        attrs = {"rank": rank, "stage": entry.stage, "kind": entry.kind, "microbatch": entry.microbatch}
        if cost is not None:
            attrs["duration"] = cost.copy_ms(entry.stage)
        graph.add_node(entry, **attrs)
        graph.add_edge(op[copies.needs[c]], entry, kind="memory")
    for i, issued in enumerate(copies.issued):
        for c in issued or ():
            if not graph.has_edge(actions[i], op[c]):
                graph.add_edge(actions[i], op[c], kind="order")
    for i, producers in enumerate(deps.deps):
        for d in producers:
            if d >= len(actions):
                graph.add_edge(op[d], actions[i], kind="memory")


def _data_edge(producer: Action, consumer: Action, crosses: bool, cost: CostModel | None) -> dict:
    if cost is None or not crosses:
        return {"kind": "data"}
    return {"kind": "data", "comm_ms": cost.transfer_ms(producer.stage, consumer.stage)}


@dataclass(frozen=True)
class DagPositions:
    """Where the DAG figure puts each action: x by time (or depth), y by its rank's lane."""

    xy: dict[Action, tuple[float, float]]
    x_title: str
    num_ranks: int


def dag_positions(schedule: Schedule, graph: nx.DiGraph, timeline: Timeline | None = None) -> DagPositions:
    """Node x: the start in `timeline` when given (a simulation of this schedule), else topological depth,
    else (a cyclic graph: a deadlock) the position in the rank's list. y: the rank's lane, nudged apart per
    stage when a rank holds several."""
    import networkx as nx

    if timeline is not None:
        xs: dict[Action, float] = {span.action: span.start for span in timeline.spans}
        xs.update((c.action, c.start) for c in timeline.comm if c.action in graph)  # copies: on their engine
        x_title = "simulated start (ms)"
    elif nx.is_directed_acyclic_graph(graph):
        xs = {}
        for node in nx.topological_sort(graph):
            xs[node] = max((xs[p] + 1 for p in graph.predecessors(node)), default=0)
        x_title = "topological depth"
    else:
        xs = {a: i for row in schedule.order_rows() for i, a in enumerate(row) if a is not None}
        x_title = "position in the rank's action list"
    lane: dict[int, float] = {}
    for rank in range(schedule.num_ranks):
        stages = schedule.stages_of_rank(rank)
        for i, stage in enumerate(stages):
            lane[stage] = rank + (i - (len(stages) - 1) / 2) * 0.3
    # a memory move sits just below its stage's lane (the copy engine's sub-lane, as the Gantt draws it)
    below = {node: 0.35 if isinstance(node, CommAction) else 0.0 for node in graph.nodes}
    return DagPositions({a: (xs[a], lane[a.stage] + below[a]) for a in graph.nodes}, x_title, schedule.num_ranks)

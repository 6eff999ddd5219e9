"""Activation offload as a change of schedule: OFFLOAD and RELOAD entries placed in each rank's order.

PipeOffload (Wan et al., ICML'25) moves a stage's saved activations of one microbatch to host memory after its
forward and brings them back before its backward, on a copy engine that runs beside compute. Where the entries
stand is the whole policy, so it is written here once and every reader (simulator, validator, charts, executor)
takes the resulting order as data:

* an OFFLOAD right after the forward whose activations it moves (issued when that forward ends);
* its RELOAD one compute action ahead of the backward that needs them (issued when the action two before that
  backward ends, so the copy runs under the action just before it: a one-action prefetch).

A microbatch whose backward comes within two actions of its forward is never offloaded: there is no action for
the copy to hide under, and the memory would be back before anything else ran. `full` offloads every other
microbatch; `selective` only those whose activations, simulated without offload, wait longer than the two copies
take and whose RELOAD fits under the action it is prefetched beside (PipeOffload's selective strategy: a
short-lived activation is cheaper to keep), the longest waits first and only as many as the copy engine can move
in the time the rank computes.

>>> from pipesim.schedules import build_schedule
>>> sched = with_offload(build_schedule("1f1b", 4, 8), "full")
>>> [str(e) for e in sched.order[0][:4]]
['0F0', '0OFFLOAD0', '0F1', '0OFFLOAD1']
"""

from __future__ import annotations

import dataclasses
from collections import deque
from itertools import compress, repeat
from operator import add, is_not, itemgetter, mul, sub

from pipesim._perf import paused_gc
from pipesim.cost.model import CostModel
from pipesim.ir import Action, B, CommAction, CommKind, Entry, F, I, Schedule, entry_actions
from pipesim.semantics.lower import RELOAD_SERVES, has_memory_moves
from pipesim.semantics.screen import is_validated, mark_validated

OFFLOAD_MODES = ("none", "selective", "full")
_PREFETCH = 1  # compute actions a RELOAD runs ahead of the backward it serves


def check_offload_mode(mode: object) -> str:
    if mode not in OFFLOAD_MODES:
        raise ValueError(f"unknown offload mode {mode!r}; valid: {', '.join(OFFLOAD_MODES)}")
    return str(mode)


@paused_gc()
def with_offload(schedule: Schedule, mode: str, cost: CostModel | None = None) -> Schedule:
    """`schedule` with OFFLOAD and RELOAD entries for `mode` (one of OFFLOAD_MODES); `selective` needs `cost`."""
    check_offload_mode(mode)
    if mode == "none":
        return schedule
    if has_memory_moves(schedule):
        raise ValueError(f"schedule {schedule.name!r} already states its OFFLOADs and RELOADs")
    candidates = _candidates(schedule)
    if mode == "selective":
        if cost is None:
            raise ValueError("selective offload weighs each wait against the copy's time: it needs a cost model")
        candidates = _worth_offloading(schedule, cost, candidates)
    rows = [_with_moves(row, chosen) for row, chosen in zip(schedule.order_rows(), candidates, strict=True)]
    params = {**schedule.params, "offload": mode}
    moved = dataclasses.replace(schedule, order=tuple(tuple(row) for row in rows), params=params)
    if is_validated(schedule):  # sound by construction: each OFFLOAD after its forward, each RELOAD between its
        mark_validated(moved)  # OFFLOAD and the backward it serves (tests/test_offload.py validates them afresh)
    return moved


def _first_backward_positions(actions: tuple[Action, ...]) -> dict[tuple[int, int], tuple[int, int]]:
    """Per (stage, microbatch) on a rank: (its forward's position, its first backward's position) in compute order."""
    forward: dict[tuple[int, int], int] = {}
    found: dict[tuple[int, int], tuple[int, int]] = {}
    for position, (stage, kind, mb) in enumerate(actions):
        key = (stage, mb)
        if kind is F:
            forward[key] = position
        elif kind in RELOAD_SERVES and key in forward and key not in found:
            found[key] = (forward[key], position)
    return found


def _candidates(schedule: Schedule) -> list[dict[tuple[int, int], tuple[int, int]]]:
    """Per rank, the (stage, microbatch)s whose backward is at least two actions after their forward."""
    chosen = []
    for actions in schedule.actions:
        spans = _first_backward_positions(actions)
        chosen.append({key: pos for key, pos in spans.items() if pos[1] - pos[0] > _PREFETCH + 1})
    return chosen


def _worth_offloading(
    schedule: Schedule, cost: CostModel, candidates: list[dict[tuple[int, int], tuple[int, int]]]
) -> list[dict[tuple[int, int], tuple[int, int]]]:
    """The candidates whose activations wait, in a simulation without offload, longer than the two copies take."""
    from pipesim.sim.simulate import simulate  # the engine sits beside this module; imported when asked

    timeline = simulate(schedule, cost)
    forward_end: dict[tuple[int, int], float] = {}
    backward_start: dict[tuple[int, int], float] = {}
    for _, (stage, kind, mb), start, end, _, _ in timeline.spans:
        if kind is F:
            forward_end[(stage, mb)] = end
        elif kind in (B, I):
            backward_start.setdefault((stage, mb), start)
    durations: list[list[float]] = [[] for _ in range(schedule.num_ranks)]  # per rank, in its order
    for rank, _, start, end, _, _ in timeline.spans:
        durations[rank].append(end - start)
    chosen = []
    for rank, rank_candidates in enumerate(candidates):
        # the longest waits first, while the copy engine's work still fits under the rank's compute
        waits = sorted(rank_candidates, key=lambda key: forward_end[key] - backward_start[key])
        budget, kept = sum(durations[rank]), {}
        for key in waits:
            copy = cost.copy_ms(key[0])
            forward, backward = rank_candidates[key]
            hidden = copy <= durations[rank][backward - _PREFETCH]  # the RELOAD fits under its prefetch action
            if hidden and backward_start[key] - forward_end[key] > 2 * copy and 2 * copy <= budget:
                kept[key] = rank_candidates[key]
                budget -= 2 * copy
        chosen.append(kept)
    return chosen


def _with_moves(row: list[Entry | None], chosen: dict[tuple[int, int], tuple[int, int]]) -> list[Entry | None]:
    """One rank's order with an OFFLOAD after each chosen forward and its RELOAD before the action that precedes
    the backward it serves (`_PREFETCH`)."""
    if set(map(type, row)) <= {Action}:  # compute actions alone, each position its index: placed at C speed
        return _with_moves_by_index(row, chosen)
    offload_after: dict[int, list[CommAction]] = {}
    reload_before: dict[int, list[CommAction]] = {}
    new, offload, reload = tuple.__new__, CommKind.OFFLOAD, CommKind.RELOAD  # 10^5 moves: no checked constructor
    for (stage, mb), (forward, backward) in sorted(chosen.items(), key=lambda item: item[1][1]):
        offload_after.setdefault(forward, []).append(new(CommAction, (stage, offload, mb)))
        reload_before.setdefault(backward - _PREFETCH, []).append(new(CommAction, (stage, reload, mb)))
    out: list[Entry | None] = []
    position = 0  # compute actions seen so far
    for entry in row:
        if type(entry) is Action:  # the common case: one compute action
            if position in reload_before:
                out.extend(reload_before[position])
            out.append(entry)
            if position in offload_after:
                out.extend(offload_after[position])
            position += 1
            continue
        members = entry_actions(entry)
        for k in range(position, position + len(members)):  # an overlapped pair's members each count
            out.extend(reload_before.get(k, ()))
        out.append(entry)
        for _ in members:
            out.extend(offload_after.get(position, ()))
            position += 1
    return out


def _with_moves_by_index(row: list[Action], chosen: dict[tuple[int, int], tuple[int, int]]) -> list[Entry]:
    """`_with_moves` of a row of compute actions alone: each action has a slot for the RELOAD placed before it and
    one for the OFFLOAD after it (a forward ends one (stage, microbatch)'s wait, a backward serves one), filled
    without a Python step per entry (10^5 moves)."""
    slots: list[Entry | None] = [None] * (3 * len(row))
    slots[1::3] = row
    keys, positions = list(chosen), list(chosen.values())
    stages, microbatches = list(map(itemgetter(0), keys)), list(map(itemgetter(1), keys))
    forwards, backwards = map(itemgetter(0), positions), map(itemgetter(1), positions)
    offloads = map(tuple.__new__, repeat(CommAction), zip(stages, repeat(CommKind.OFFLOAD), microbatches))
    reloads = map(tuple.__new__, repeat(CommAction), zip(stages, repeat(CommKind.RELOAD), microbatches))
    after = map(add, map(mul, forwards, repeat(3)), repeat(2))  # the slot after the forward's
    before = map(mul, map(sub, backwards, repeat(_PREFETCH)), repeat(3))  # the slot before the prefetch action's
    deque(map(slots.__setitem__, after, offloads), maxlen=0)
    deque(map(slots.__setitem__, before, reloads), maxlen=0)
    return list(compress(slots, map(is_not, slots, repeat(None))))

"""V-Half and V-Min: V-shaped schedules with controllable activation memory.

Qi, Wan, Amar, Lin, "Pipeline Parallelism with Controllable Memory", NeurIPS 2024, arXiv:2405.15362; the
reference code is `zbv_greedy.py` of github.com/sail-sg/zero-bubble-pipeline-parallelism. A schedule there is
one *building block* (the passes of one microbatch, each at a time slot on its rank) repeated every 6 slots
(4 passes of the block, 2 slots for W), then squeezed; how long a block holds each chunk's activations (from
its F to its backward) sets the peak memory. Each rank holds stage r (chunk 0, the forward goes down the
ranks) and stage 2p-1-r (chunk 1, back up), as zbv does (`pipesim.schedules.v_shapes`).

* ``v-min``: the backward follows the forward closely on both chunks: about 1/3 of 1F1B's activation memory,
  (p+4)//3 microbatches of a full stage (counted until W frees them), for a bubble of about 2/3 of 1F1B's.
* ``v-half``: chunk 0 held longer: (p+2)//2 microbatches, half of 1F1B's, for about half of 1F1B's bubble.

The building block fixes the steady phase. The warm-up and the cool-down, where memory is under its peak, are
reordered greedily as the paper does: each pass, in time order, moves to the earliest free slot its inputs allow
that keeps every rank under the steady phase's peak. The orders are the authors' code's, pass for pass
(tests/test_v_memory.py holds two of them; p <= 8, m <= 3p were compared in full).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections import deque
from collections.abc import Callable
from itertools import chain, repeat
from operator import add, eq, itemgetter, mul

from pipesim.ir import Action, F, I, Schedule, W, make_schedule, v_placement
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts

_new = tuple.__new__  # Action(...) costs a Python-level __new__ per action

# A block's passes on one rank, in the order a microbatch meets them there; W passes follow.
F_DOWN, F_UP, I_UP, I_DOWN = range(4)  # forwards of chunk 0 and 1, input gradients of chunk 1 and 0
W_ANY = 4  # one W queue for both chunks (the reordering's memory model)
W_UP, W_DOWN = 4, 5  # W of chunk 1 and of chunk 0 (the final order: chunk 1's first, as the reference code)
PERIOD = 6  # slots a block repeats after: its 4 passes and 2 W
SHAPES = ("min", "half")
_BYTE_LEVELS = 255  # the levels the reordering keeps as bytes below (above, as a list)
_SHIFT = {step: bytes((level + step) % 256 for level in range(256)) for step in (1, -1)}  # bytes.translate tables
_SOURCE = (-1, 1, -1, 1)  # by kind (F_DOWN, F_UP, I_UP, I_DOWN): the rank a pass's input comes from, relative

# One rank's passes as (slot, kind, microbatch) in slot order, a rank running one pass per slot; W_ANY's
# "microbatch" is its place in the rank's W queue.
Row = list[tuple[int, int, int]]


def block_offsets(shape: str, num_ranks: int, rank: int) -> tuple[int, int, int, int]:
    """The slots of rank `rank`'s four passes of microbatch 0 (F_DOWN, F_UP, I_UP, I_DOWN).

    V-Min moves one slot per rank in every direction; V-Half two slots per rank going down and one coming back
    up, which lengthens the lifespans by half. `gap` delays the backward where it would land on a slot another
    microbatch's pass takes (p a multiple of 3 for V-Min, even p for V-Half): with it the four offsets differ mod
    PERIOD on every rank, so the repeated blocks never collide (tests/test_v_memory.py checks p <= 64).
    """
    p, r = num_ranks, rank
    if shape == "min":
        gap = 2 if p % 3 == 0 else 0
        return r, 2 * p - 1 - r, 2 * p + gap + r, 4 * p + gap - 1 - r
    gap = 3 if p % 2 == 0 else 0
    return 2 * r, 3 * p - 2 - r, 3 * p + gap + 2 * r - 1, 6 * p + gap - 2 - r


def _repeat(shape: str, p: int, rank: int, m: int) -> Row:
    """The bare repetition on one rank: microbatch j's block shifted by PERIOD * j slots (no W yet)."""
    offsets = block_offsets(shape, p, rank)
    return sorted((offset + PERIOD * mb, kind, mb) for kind, offset in enumerate(offsets) for mb in range(m))


def _with_weights(row: Row, split: bool) -> Row:
    """A rank's W passes in its free slots, each after its I, oldest first: one queue for both chunks (W_ANY k
    follows the rank's k-th I), or, when `split`, one per chunk with chunk 1's served first; the W still owed go
    after the rank's last pass. `row` holds no W."""
    first_kind, second_kind = (W_UP, W_DOWN) if split else (W_ANY, W_ANY)
    first, second = deque(), deque()  # per queue, the "microbatch" of each W owed, oldest first
    placed: Row = []
    backward = 0  # I passes seen so far
    t = 0
    for entry in row:
        when, kind, mb = entry
        while t < when and (first or second):  # the free slots before the next pass (none to fill: skip them)
            placed.append((t, first_kind, first.popleft()) if first else (t, second_kind, second.popleft()))
            t += 1
        placed.append(entry)
        if kind == I_UP or kind == I_DOWN:
            (second if split and kind == I_DOWN else first).append(mb if split else backward)
            backward += 1
        t = when + 1
    while first or second:  # after the last pass
        placed.append((t, first_kind, first.popleft()) if first else (t, second_kind, second.popleft()))
        t += 1
    return placed


def _placed_weights(row: Row) -> tuple[Row, list[int]]:
    """A row with W placed as its F and I passes, and the number of W passes just before each of them."""
    passes: Row = []
    runs: list[int] = []
    run = 0
    for entry in row:
        if entry[1] >= W_ANY:
            run += 1
        else:
            passes.append(entry)
            runs.append(run)
            run = 0
    return passes, runs


def _owed_weights(row: Row) -> tuple[Row, list[int]]:
    """A row without W as it stands, and the number of W passes `_with_weights` puts just before each pass (one
    queue: as many W as are owed, in the free slots there)."""
    runs: list[int] = []
    owed = 0
    t = 0
    for when, kind, _ in row:
        run = min(owed, when - t)
        runs.append(run)
        owed -= run
        if kind == I_UP or kind == I_DOWN:
            owed += 1
        t = when + 1
    return row, runs


def _squeeze(rows: list[tuple[Row, list[int]]], m: int) -> list[Row]:
    """Every pass as early as its input and its rank's order allow (the paper's squeeze: each rank keeps its
    order, its idle slots close), given each rank's F and I passes with the W passes just before each (W have
    no inputs and are dropped: only the slots they take count). Passes are taken in slot order, so what one needs
    is placed before it; the needs on its own rank come before it in that rank's order, so only the input from
    the next rank is looked up (the rank above for chunk 0's forward and chunk 1's I, the rank below for the
    others)."""
    p = len(rows)
    # by slot, then rank: what a pass waits for sits in an earlier slot, so passes of one slot go in any order
    order = sorted([t * p + rank for rank, (row, _) in enumerate(rows) for t, _, _ in row])
    placed = [[[0] * m for _ in range(W_ANY)] for _ in range(p)]  # each rank's, per kind, each pass's slot
    squeezed: list[Row] = [[] for _ in range(p)]
    done = [0] * p  # each rank's passes placed
    free = [0] * p  # each rank's next free slot
    for key in order:
        rank = key % p
        i = done[rank]
        done[rank] = i + 1
        row, runs = rows[rank]
        _, kind, mb = row[i]
        ready = free[rank] + runs[i]
        source = rank + _SOURCE[kind]
        if 0 <= source < p:
            other = placed[source][kind][mb] + 1
            if other > ready:
                ready = other
        placed[rank][kind][mb] = ready
        squeezed[rank].append((ready, kind, mb))
        free[rank] = ready + 1
    return squeezed


def _walk(
    kind_at: list[int],
    levels: list[int],
    owes: list[int],
    weights: bool,
    start: int,
    cap: int | None = None,
    settled: int | None = None,
) -> int:
    """One rank's activations over its slots, in forwards of one chunk held (the paper's count: F adds one, its
    W frees it, I alone frees nothing), recomputed from slot `start` on into `levels` (after each slot) and
    `owes` (W owed after each slot): with `weights` the W passes hold slots of their own (`kind_at`, -1 where
    free); without, a rank runs a W owed in each free slot (how the paper reorders the cool-down before it places
    W for good). Returns the slot where the level passes `cap` (levels then partly stale), or -1. Past slot
    `settled`, whose kinds have not changed since the levels were right, a walk that meets the level and the W
    owed already recorded stops: what follows is what was recorded."""
    level, owed = (levels[start - 1], owes[start - 1]) if start else (0, 0)
    for t in range(start, len(levels)):
        kind = kind_at[t]
        if kind < 0:
            if owed and not weights:
                level, owed = level - 1, owed - 1
        elif kind <= F_UP:
            level += 1
        elif kind >= W_ANY:
            level -= 1
        elif not weights:
            owed += 1
        if cap is not None and level > cap:
            return t
        if settled is not None and t > settled and levels[t] == level and owes[t] == owed:
            return -1
        levels[t], owes[t] = level, owed
    return -1


def _reorder(rows: list[Row], m: int, weights: bool) -> list[Row]:
    """The paper's reordering of the warm-up (with `weights` placed) and the cool-down: each pass, in slot order,
    moves to the earliest slot its needs allow that no pass taken before it holds, when every rank stays within
    the steady phase's peak. The warm-up ends at rank 0's first chunk-0 I (the block's last pass), the steady
    phase at the first forward of the last microbatch after it.

    A pass's needs, besides its rank's order: the pass before it in its microbatch on this rank, its input from
    the next rank, and its kind's previous microbatch (each kind keeps microbatch order); a W follows its I. The
    passes of the steady phase stay, and the slots a pass may take lie before its own, where every pass of its
    rank has been taken already: a free slot there is one no pass taken holds."""
    p = len(rows)
    sizes = (m, m, m, m, 2 * m)  # passes per kind on a rank (W_ANY: one per I)
    slot_of: list[list[list[int]]] = []  # per rank, per kind, each pass's slot now
    kind_at: list[list[int]] = []  # per rank, the kind in each slot (-1: free)
    mb_at: list[list[int]] = []  # and its microbatch
    memory: list[tuple[list[int], list[int]]] = []  # per rank, its levels and W owed after each slot
    for row in rows:
        horizon = row[-1][0] + 1 if row else 0
        slots, kinds, mbs = [[0] * size for size in sizes], [-1] * horizon, [0] * horizon
        for t, kind, mb in row:
            slots[kind][mb], kinds[t], mbs[t] = t, kind, mb
        levels, owes = [0] * horizon, [0] * horizon
        _walk(kinds, levels, owes, weights, 0)
        slot_of.append(slots)
        kind_at.append(kinds)
        mb_at.append(mbs)
        memory.append((levels, owes))
    cap = max((max(levels, default=0) for levels, _ in memory), default=0)
    # With W placed the levels lie in 0..cap (a W frees what an I before it, after its F, held): as bytes when
    # that fits, searched and shifted by one at C speed (a long warm-up's forward moves past a hundred slots)
    as_bytes = weights and cap < _BYTE_LEVELS
    if as_bytes:
        memory = [(bytearray(levels), owes) for levels, owes in memory]
    # each rank's I slots in order (W k follows the k-th): only the W placed move after them
    backward = [sorted(slots[I_UP] + slots[I_DOWN]) if weights else [] for slots in slot_of]

    warm_end = slot_of[0][I_DOWN][0]
    lasts = [(slot_of[rank][F_DOWN][m - 1], rank) for rank in range(p)]
    cool = min((key for key in lasts if key > (warm_end, 0)), default=None)  # the pass that ends the steady phase
    moving = []  # (slot, rank, kind, microbatch) of the warm-up's and the cool-down's passes, in slot order
    for rank, row in enumerate(rows):
        if weights:
            moving += [(t, rank, kind, mb) for t, kind, mb in row[: bisect_left(row, (warm_end,))]]
        if cool is not None:
            start = cool[0] + (rank <= cool[1])
            moving += [(t, rank, kind, mb) for t, kind, mb in row[bisect_left(row, (start,)) :]]
    moving.sort()

    for t, rank, kind, mb in moving:
        slots = slot_of[rank]
        # the latest slot among its needs (-1: none)
        if kind == F_DOWN:
            latest = slot_of[rank - 1][F_DOWN][mb] if rank else -1
        elif kind >= W_ANY:
            latest = backward[rank][mb]
        else:
            latest = slots[kind - 1][mb]  # F_DOWN before F_UP, F_UP before I_UP, I_UP before I_DOWN
            source = rank + _SOURCE[kind]
            if 0 <= source < p:
                other = slot_of[source][kind][mb]
                if other > latest:
                    latest = other
        if mb:
            other = slots[kind][mb - 1]
            if other > latest:
                latest = other
        earliest = latest + 1
        kinds, (levels, owes) = kind_at[rank], memory[rank]
        new = -1
        if weights:  # the levels stay right and never pass the cap: an I holds nothing, a W earlier frees
            # earlier, an F holds longer, from the slot after the last one at the cap before its own on
            if kind <= F_UP and earliest < t:
                if as_bytes:
                    earliest = levels.rfind(cap, earliest, t) + 1 or earliest
                else:
                    held = levels[earliest:t]
                    if max(held) == cap:
                        earliest = t - held[::-1].index(cap)
            for u in range(earliest, t):
                if kinds[u] < 0:
                    new = u
                    break
            if new >= 0:
                kinds[t], kinds[new] = -1, kind
                if kind <= F_UP or kind >= W_ANY:
                    step = 1 if kind <= F_UP else -1
                    if as_bytes:
                        levels[new:t] = levels[new:t].translate(_SHIFT[step])
                    else:
                        levels[new:t] = map(add, levels[new:t], repeat(step))
                else:
                    del backward[rank][bisect_left(backward[rank], t)]
                    insort(backward[rank], new)
        else:
            for u in range(earliest, t):
                if kinds[u] >= 0:
                    continue
                kinds[t], kinds[u] = -1, kind
                failed = _walk(kinds, levels, owes, False, u, cap, t)
                if failed < 0:
                    new = u
                    break
                kinds[t], kinds[u] = kind, -1
                _walk(kinds, levels, owes, False, u, None, max(t, failed))
        if new >= 0:
            slots[kind][mb] = new
            mb_at[rank][new] = mb
    ranks = zip(kind_at, mb_at, strict=True)
    return [[(t, kind, mbs[t]) for t, kind in enumerate(kinds) if kind >= 0] for kinds, mbs in ranks]


def _orders(shape: str, p: int, m: int) -> list[Row]:
    """Every rank's order, in the paper's four steps: repeat the block, reorder the warm-up and the cool-down
    with W placed, squeeze; reorder the cool-down again with W running in whatever slot is free, squeeze; then
    place W for good, one queue per chunk."""
    rows = [_with_weights(_repeat(shape, p, rank, m), split=False) for rank in range(p)]  # steady: W in the gaps
    rows = _squeeze([_placed_weights(row) for row in _reorder(rows, m, weights=True)], m)  # warm-up and cool-down
    rows = _reorder(rows, m, weights=False)  # cool-down again
    rows = _squeeze([_owed_weights(row) for row in rows], m)
    return [_with_weights(row, split=True) for row in rows]


def _actions(p: int, rank: int, kinds: list[int], microbatches: list[int]) -> list[Action]:
    """One rank's passes (kind, microbatch columns) as its actions, made at C speed."""
    down, up = rank, 2 * p - 1 - rank  # chunk 0's stage, chunk 1's
    stages = (down, up, up, down, up, down)  # by pass: F_DOWN, F_UP, I_UP, I_DOWN, W_UP, W_DOWN
    as_kind = (F, F, I, I, W, W)
    made = zip(map(stages.__getitem__, kinds), map(as_kind.__getitem__, kinds), microbatches, strict=True)
    return list(map(_new, repeat(Action), made))


def _steady_from(shape: str, num_ranks: int) -> int:
    """The microbatch count from which one more microbatch adds one more period of the steady phase to every
    rank's order and changes nothing else (the warm-up and the cool-down stay as they are, the cool-down's
    microbatches one up). Found by search: the least such counts (p <= 20) lie a few under p + 3 for V-Min and
    (3p+1)//2 + 3 for V-Half. With these, for each p <= 64, the extension was compared with the reordering over
    every microbatch at every m up to 2p+2, the count reordered before (past it, extending twice is extending
    once). tests/test_v_memory.py holds a few."""
    p = num_ranks
    return min(p + 3 if shape == "min" else (3 * p + 1) // 2 + 3, 2 * p + 2)


def _columns(row: list[tuple[int, int, int]], periods: int) -> tuple[list[int], list[int]]:
    """A rank's (slot, kind, microbatch) order as kind and microbatch columns, with `periods` more periods of its
    steady phase: its longest stretch where each pass repeats the one PERIOD before it a microbatch later (the
    cool-down has shorter ones), repeated at its end, and what follows shifted `periods` microbatches up."""
    kinds, microbatches = list(map(itemgetter(1), row)), list(map(itemgetter(2), row))
    if not periods:
        return kinds, microbatches
    # a pass as one number (kind and microbatch), the next microbatch's one more; where each repeats the one a
    # PERIOD before a microbatch later, at C speed: the first longest run of ones, and where it ends
    codes = list(map(add, map(mul, kinds, repeat(len(row) + 1)), microbatches))
    same = bytes(map(eq, codes[PERIOD:], map(add, codes, repeat(1)))).split(b"\0")
    runs = list(map(len, same))
    length = max(runs)
    longest = runs.index(length)
    best = PERIOD + sum(runs[:longest]) + longest + length
    assert length >= 2 * PERIOD, "the steady phase runs at least two periods"
    ups = chain.from_iterable(map(repeat, range(1, periods + 1), repeat(PERIOD)))  # 1 x PERIOD, 2 x PERIOD, ...
    added = list(map(add, microbatches[best - PERIOD : best] * periods, ups))
    kinds[best:best] = kinds[best - PERIOD : best] * periods
    microbatches[best:] = added + list(map(add, microbatches[best:], repeat(periods)))
    return kinds, microbatches


def _build(shape: str, num_ranks: int, num_microbatches: int) -> Schedule:
    check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    built = min(m, _steady_from(shape, p))  # the reordering runs on the warm-up, the cool-down and a few periods
    columns = [_columns(row, m - built) for row in _orders(shape, p, built)]
    rows = [_actions(p, rank, kinds, microbatches) for rank, (kinds, microbatches) in enumerate(columns)]
    return make_schedule(f"v-{shape}", p, m, v_placement(p), rows)


def _build_in_full(shape: str, num_ranks: int, num_microbatches: int) -> list[list[tuple[int, int, int]]]:
    """Every rank's (slot, kind, microbatch) order from the reordering over every microbatch (what `_build`
    extends: the tests compare the two)."""
    return _orders(shape, num_ranks, num_microbatches)


def v_min(num_ranks: int, num_microbatches: int) -> Schedule:
    """V-Min: about 1/3 of 1F1B's activation memory ((p+4)//3 full stages' worth), bubble about 2/3 of 1F1B's."""
    return _build("min", num_ranks, num_microbatches)


def v_half(num_ranks: int, num_microbatches: int) -> Schedule:
    """V-Half: about 1/2 of 1F1B's activation memory ((p+2)//2 full stages' worth), bubble about 1/2 of 1F1B's."""
    return _build("half", num_ranks, num_microbatches)


def _stashed(shape: str) -> Callable[[int, int, int], list[int]]:
    """A lower bound of the forwards each rank holds at once (until their I), before building: in the steady
    phase a rank's order is the repeated block, where chunk 0's forward is held I_DOWN - F_DOWN slots and chunk
    1's I_UP - F_UP, a block every PERIOD slots, so some slot holds at least their sum / PERIOD. With m >= 2p
    the steady phase runs a full period on every rank (tests/test_v_memory.py checks p <= 16); below, both
    forwards of microbatch 0, held until chunk 1's I."""

    def stashed(num_ranks: int, num_microbatches: int, chunks: int) -> list[int]:
        if num_microbatches < 2 * num_ranks:
            return [2] * num_ranks
        held = []
        for rank in range(num_ranks):
            f_down, f_up, i_up, i_down = block_offsets(shape, num_ranks, rank)
            held.append(-(-(i_down - f_down + i_up - f_up) // PERIOD))
        return held

    return stashed


def _summary(shape: str, memory: str, bubble: str) -> str:
    return (
        f"V-{shape.capitalize()} (Qi et al., controllable memory): two chunks per rank in a V, backward split into "
        f"I and W; about {memory} of 1F1B's activation memory for about {bubble} of its bubble when F = I = W."
    )


SCHEDULES: list[ScheduleInfo] = [
    ScheduleInfo(
        "v-half",
        v_half,
        _summary("half", "1/2", "1/2"),
        split_backward=True,
        placement="v",
        stashed=_stashed("half"),
    ),
    ScheduleInfo(
        "v-min",
        v_min,
        _summary("min", "1/3", "2/3"),
        split_backward=True,
        placement="v",
        stashed=_stashed("min"),
    ),
]

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
from operator import add, itemgetter

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

Pass = tuple[int, int, int]  # (rank, kind, microbatch); W_ANY's "microbatch" is its place in the rank's W queue
Slots = dict[Pass, int]  # the time slot of every pass; a rank runs one pass per slot


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


def _repeat(shape: str, p: int, m: int) -> Slots:
    """The bare repetition: microbatch j's block shifted by PERIOD * j slots (no W yet)."""
    slots: Slots = {}
    for rank in range(p):
        for kind, offset in enumerate(block_offsets(shape, p, rank)):
            for mb in range(m):
                slots[(rank, kind, mb)] = offset + PERIOD * mb
    return slots


def _by_rank(slots: Slots, p: int) -> list[list[tuple[int, int, int]]]:
    """Per rank, (slot, kind, microbatch) of its passes in slot order."""
    rows: list[list[tuple[int, int, int]]] = [[] for _ in range(p)]
    for (rank, kind, mb), t in slots.items():
        rows[rank].append((t, kind, mb))
    for row in rows:
        row.sort()
    return rows


def _place_weights(slots: Slots, p: int, split: bool) -> Slots:
    """Every rank's W in its free slots, each after its I, oldest first: one queue for both chunks (W_ANY k
    follows the rank's k-th I), or, when `split`, one per chunk with chunk 1's served first; the W still owed go
    after the rank's last pass."""
    placed = dict(slots)
    for rank, row in enumerate(_by_rank(slots, p)):
        for kind, mb, t in _weights(row, split):
            placed[(rank, kind, mb)] = t
    return placed


def _weights(row: list[tuple[int, int, int]], split: bool) -> list[tuple[int, int, int]]:
    """(kind, microbatch, slot) of one rank's W passes, its other passes at `row`'s (slot, kind, microbatch)."""
    first_kind, second_kind = (W_UP, W_DOWN) if split else (W_ANY, W_ANY)
    first, second = deque(), deque()  # per queue, the "microbatch" of each W owed, oldest first
    placed: list[tuple[int, int, int]] = []
    backward = 0  # I passes seen so far
    t = 0
    for when, kind, mb in row:
        while t < when and (first or second):  # the free slots before the next pass (none to fill: skip them)
            placed.append((first_kind, first.popleft(), t) if first else (second_kind, second.popleft(), t))
            t += 1
        if kind == I_UP or kind == I_DOWN:
            (second if split and kind == I_DOWN else first).append(mb if split else backward)
            backward += 1
        t = when + 1
    while first or second:  # after the last pass
        placed.append((first_kind, first.popleft(), t) if first else (second_kind, second.popleft(), t))
        t += 1
    return placed


def _drop_weights(slots: Slots) -> Slots:
    return {key: t for key, t in slots.items() if key[1] < W_ANY}


def _needs(p: int, rank: int, kind: int, mb: int) -> list[Pass]:
    """The passes this one waits for, besides its rank's order: its input, the pass before it in its microbatch
    on this rank, and its kind's previous microbatch (each kind keeps microbatch order). A W follows its I on
    the rank: the order keeps it there, and the reordering adds the need itself."""
    needs = [(rank, kind, mb - 1)] if mb else []
    if kind == F_DOWN and rank:
        needs.append((rank - 1, F_DOWN, mb))
    elif kind == F_UP:
        needs += [(rank, F_DOWN, mb)] + ([(rank + 1, F_UP, mb)] if rank < p - 1 else [])
    elif kind == I_UP:
        needs += [(rank, F_UP, mb)] + ([(rank - 1, I_UP, mb)] if rank else [])
    elif kind == I_DOWN:
        needs += [(rank, I_UP, mb)] + ([(rank + 1, I_DOWN, mb)] if rank < p - 1 else [])
    return needs


def _squeeze(slots: Slots, p: int) -> Slots:
    """Every pass as early as its input and its rank's order allow (the paper's squeeze: each rank keeps its
    order, its idle slots close). Passes are taken in slot order, so what one needs is placed before it; the
    needs on its own rank come before it in that rank's order, so only the input from the next rank is looked
    up (the rank above for chunk 0's forward and chunk 1's I, the rank below for the others)."""
    squeezed: Slots = {}
    free = [0] * p  # each rank's next free slot
    source = {F_DOWN: -1, F_UP: 1, I_UP: -1, I_DOWN: 1}
    # by slot alone: what a pass waits for sits in an earlier slot, so passes of one slot go in any order
    for key, _ in sorted(slots.items(), key=itemgetter(1)):
        rank, kind, mb = key
        ready = free[rank]
        step = source.get(kind)
        if step is not None and 0 <= rank + step < p:
            ready = max(ready, squeezed[(rank + step, kind, mb)] + 1)
        squeezed[key] = ready
        free[rank] = ready + 1
    return squeezed


class _Memory:
    """One rank's activations over its slots, in forwards of one chunk held (the paper's count: F adds one, its
    W frees it, I alone frees nothing), for the reordering's check that a move keeps the rank under the cap.

    With `weights` the W passes hold slots of their own; without, a rank runs a W owed in each free slot (how
    the paper reorders the cool-down before it places W for good).
    """

    def __init__(self, row: list[tuple[int, int, int]], weights: bool) -> None:
        self.weights = weights
        self.kind_at = {t: kind for t, kind, _ in row}
        horizon = (row[-1][0] + 1) if row else 0
        self.level = [0] * horizon  # after each slot
        self.owed = [0] * horizon  # W owed after each slot (without `weights`)
        self._walk(0)

    @property
    def peak(self) -> int:
        return max(self.level, default=0)

    def _walk(self, start: int, cap: int | None = None, settled: int | None = None) -> int:
        """Recompute the levels from slot `start` on; the slot where one passes `cap` (levels then partly stale),
        or -1. Past slot `settled`, whose kinds have not changed since the levels were right, a walk that meets
        the level and the W owed already recorded stops: what follows is what was recorded."""
        level, owed = (self.level[start - 1], self.owed[start - 1]) if start else (0, 0)
        levels, owes, kind_at, weights = self.level, self.owed, self.kind_at, self.weights
        for t in range(start, len(levels)):
            kind = kind_at.get(t)
            if kind is None:
                if owed and not weights:
                    level, owed = level - 1, owed - 1
            elif kind in (F_DOWN, F_UP):
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

    def try_move(self, kind: int, old: int, new: int, cap: int) -> bool:
        """Move a pass from slot `old` to the free slot `new` < old if the rank stays at most `cap`."""
        del self.kind_at[old]
        self.kind_at[new] = kind
        if self.weights and kind in (I_UP, I_DOWN):
            return True  # nothing held changes
        if self.weights and kind >= W_ANY:
            for t in range(new, old):
                self.level[t] -= 1
            return True
        if self.weights:  # a forward, earlier: one more held from `new` to `old`
            if max(self.level[new:old]) + 1 > cap:
                self.kind_at[old] = self.kind_at.pop(new)
                return False
            for t in range(new, old):
                self.level[t] += 1
            return True
        failed = self._walk(new, cap, old)
        if failed < 0:
            return True
        self.kind_at[old] = self.kind_at.pop(new)
        self._walk(new, None, max(old, failed))
        return False


def _reorder(slots: Slots, p: int, m: int, weights: bool) -> Slots:
    """The paper's reordering of the warm-up (with `weights` placed) and the cool-down: each pass, in slot order,
    moves to the earliest slot its needs allow that no pass taken before it holds, when every rank stays within
    the steady phase's peak. The warm-up ends at rank 0's first chunk-0 I (the block's last pass), the steady
    phase at the first forward of the last microbatch after it."""
    memory = [_Memory(row, weights) for row in _by_rank(slots, p)]
    cap = max(mem.peak for mem in memory)
    slots = dict(slots)
    taken: list[set[int]] = [set() for _ in range(p)]
    backward: list[list[int]] = [[] for _ in range(p)]  # each rank's I slots, sorted (a W follows the k-th)
    for (rank, kind, _), t in slots.items():
        if kind in (I_UP, I_DOWN):
            insort(backward[rank], t)
    phase = "warm-up"
    for t, key in sorted((t, key) for key, t in slots.items()):
        rank, kind, mb = key
        if phase == "warm-up" and key == (0, I_DOWN, 0):
            phase = "steady"
        if phase == "steady" and kind == F_DOWN and mb == m - 1:
            phase = "cool-down"
        elif phase != "steady" and (weights or phase == "cool-down"):
            earliest = max([slots[n] + 1 for n in _needs(p, *key)], default=0)
            if kind == W_ANY:
                earliest = max(earliest, backward[rank][mb] + 1)
            held, rank_memory = taken[rank], memory[rank]
            for new in range(earliest, t):
                if new not in held and rank_memory.try_move(kind, t, new, cap):
                    slots[key] = new
                    if kind == I_UP or kind == I_DOWN:
                        del backward[rank][bisect_left(backward[rank], t)]
                        insort(backward[rank], new)
                    t = new
                    break
        taken[rank].add(t)  # its slot, moved or not
    return slots


def _slots(shape: str, p: int, m: int) -> Slots:
    """Every pass's slot, in the paper's four steps: repeat the block, reorder the warm-up and the cool-down with
    W placed, squeeze; reorder the cool-down again with W running in whatever slot is free, squeeze; then place
    W for good, one queue per chunk."""
    slots = _place_weights(_repeat(shape, p, m), p, split=False)  # steady phase: the blocks, W in the gaps
    slots = _drop_weights(_squeeze(_reorder(slots, p, m, weights=True), p))  # warm-up and cool-down
    slots = _reorder(slots, p, m, weights=False)  # cool-down again
    slots = _drop_weights(_squeeze(_place_weights(slots, p, split=False), p))
    return _place_weights(slots, p, split=True)


def _actions(p: int, rank: int, kinds: list[int], microbatches: list[int]) -> list[Action]:
    """One rank's passes (kind, microbatch columns) as its actions, made at C speed."""
    down, up = rank, 2 * p - 1 - rank  # chunk 0's stage, chunk 1's
    stages = (down, up, up, down, up, down)  # by pass: F_DOWN, F_UP, I_UP, I_DOWN, W_UP, W_DOWN
    as_kind = (F, F, I, I, W, W)
    made = zip(map(stages.__getitem__, kinds), map(as_kind.__getitem__, kinds), microbatches, strict=True)
    return list(map(_new, repeat(Action), made))


def _steady_from(num_ranks: int) -> int:
    """The microbatch count from which one more microbatch adds one more period of the steady phase to every
    rank's order and changes nothing else (the warm-up and the cool-down stay as they are, the cool-down's
    microbatches one up): tests/test_v_memory.py holds the orders so extended to the reordering's own."""
    return 2 * num_ranks + 2


def _columns(row: list[tuple[int, int, int]], periods: int) -> tuple[list[int], list[int]]:
    """A rank's (slot, kind, microbatch) order as kind and microbatch columns, with `periods` more periods of its
    steady phase: its longest stretch where each pass repeats the one PERIOD before it a microbatch later (the
    cool-down has shorter ones), repeated at its end, and what follows shifted `periods` microbatches up."""
    kinds, microbatches = list(map(itemgetter(1), row)), list(map(itemgetter(2), row))
    if not periods:
        return kinds, microbatches
    best, length, run = 0, 0, 0  # where the longest stretch ends, its length, the current one's
    for i in range(PERIOD, len(row)):
        same = kinds[i] == kinds[i - PERIOD] and microbatches[i] == microbatches[i - PERIOD] + 1
        run = run + 1 if same else 0
        if run > length:
            best, length = i + 1, run
    assert length >= 2 * PERIOD, "the steady phase runs at least two periods"
    ups = chain.from_iterable(map(repeat, range(1, periods + 1), repeat(PERIOD)))  # 1 x PERIOD, 2 x PERIOD, ...
    added = list(map(add, microbatches[best - PERIOD : best] * periods, ups))
    kinds[best:best] = kinds[best - PERIOD : best] * periods
    microbatches[best:] = added + list(map(add, microbatches[best:], repeat(periods)))
    return kinds, microbatches


def _build(shape: str, num_ranks: int, num_microbatches: int) -> Schedule:
    check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    built = min(m, _steady_from(p))  # the reordering runs on the warm-up, the cool-down and a few periods
    columns = [_columns(row, m - built) for row in _by_rank(_slots(shape, p, built), p)]
    rows = [_actions(p, rank, kinds, microbatches) for rank, (kinds, microbatches) in enumerate(columns)]
    return make_schedule(f"v-{shape}", p, m, v_placement(p), rows)


def _build_in_full(shape: str, num_ranks: int, num_microbatches: int) -> list[list[tuple[int, int, int]]]:
    """Every rank's (slot, kind, microbatch) order from the reordering over every microbatch (what `_build`
    extends: the tests compare the two)."""
    return _by_rank(_slots(shape, num_ranks, num_microbatches), num_ranks)


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

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

from bisect import bisect_left, bisect_right, insort
from collections import deque
from collections.abc import Callable
from heapq import heapify, heappop, heappush
from itertools import accumulate, chain, compress, count, repeat
from operator import add, eq, getitem, lshift, lt, mul, setitem, sub

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
_STEPS = tuple(enumerate(_SOURCE, 1))  # the same by code
# The squeeze takes the passes that move from a heap, up to one in this many of all passes; past that, every pass
# in turn (a pass costs about twice as much from the heap: where most move, as in V-Half's first squeeze, the
# sweep is cheaper)
_HEAP_SHARE = 64

# One rank's slots, a rank running one pass per slot: the code of the pass in each (its kind + 1; FREE where none
# runs, found at C speed by `find`) and its microbatch (W_ANY's: its place in the rank's W queue). Every step of the
# reordering reads and writes these whole, rather than a list of (slot, kind, microbatch) per pass.
Lane = tuple[bytearray, list[int]]
Row = list[tuple[int, int, int]]  # (slot, kind, microbatch) per pass, in slot order: what `_build_in_full` gives
FREE = 0
_LAST_FORWARD = F_UP + 1  # codes 1.._LAST_FORWARD are forwards
_FIRST_INPUT, _LAST_INPUT = I_UP + 1, I_DOWN + 1  # and these two I
_W_CODE = W_ANY + 1
_HELD = (0, 1, 1, 0, 0, -1)  # by code, with W placed: a forward holds one more, a W frees one


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


def _repeat(shape: str, p: int, rank: int, m: int) -> Lane:
    """The bare repetition on one rank, microbatch j's block shifted by PERIOD * j slots (the offsets differ mod
    PERIOD: no two passes meet), with its W in the free slots (`_owed_weights`)."""
    offsets = block_offsets(shape, p, rank)
    horizon = max(offsets) + PERIOD * (m - 1) + 1
    codes, at = bytearray(horizon), [0] * horizon
    for kind, offset in enumerate(offsets):
        codes[offset : offset + PERIOD * m : PERIOD] = bytes((kind + 1,)) * m
        at[offset : offset + PERIOD * m : PERIOD] = range(m)
    slots, runs = _owed_weights(codes)
    starts = [0, *map(add, slots[:-1], repeat(1))]  # the slot after the pass before each (W fill from there)
    fills = list(chain.from_iterable(map(range, starts, map(add, starts, runs))))  # the free slots a W takes
    deque(map(codes.__setitem__, fills, repeat(_W_CODE)), 0)
    deque(map(at.__setitem__, fills, count()), 0)  # one queue: the k-th W placed is the k-th owed
    owed = codes.count(_FIRST_INPUT) + codes.count(_LAST_INPUT) - len(fills)
    codes += bytes((_W_CODE,)) * owed  # the W still owed go after the rank's last pass
    at += range(len(fills), len(fills) + owed)
    return codes, at


def _owed_weights(codes: bytearray) -> tuple[list[int], list[int]]:
    """A lane without W: its passes' slots, and the number of W a rank runs between each pass and the one before
    when it runs a W owed (one per I before) in each free slot from the first on, oldest first."""
    slots = list(compress(count(), codes))
    runs: list[int] = []
    owed = 0
    t = 0
    for when, code in zip(slots, filter(None, codes), strict=True):
        run = when - t
        if run > owed:
            run = owed
        runs.append(run)
        owed -= run
        if code >= _FIRST_INPUT:
            owed += 1
        t = when + 1
    return slots, runs


def _placed_weights(codes: bytearray) -> tuple[list[int], list[int]]:
    """A lane with W placed: its F and I passes' slots, and the number of W passes just before each of them."""
    entries = list(filter(None, codes))
    is_pass = list(map(lt, entries, repeat(_W_CODE)))
    places = list(compress(count(), is_pass))  # each pass's place among the entries
    runs = list(map(sub, places, chain((0,), map(add, places, repeat(1)))))
    return list(compress(compress(count(), codes), is_pass)), runs


def _squeeze(lanes: list[Lane], m: int, placed: bool) -> list[Lane]:
    """Every pass as early as its input and its rank's order allow (the paper's squeeze: each rank keeps its
    order, its idle slots close), each F and I pass after the W passes before it (`_placed_weights` where they are
    `placed`, else `_owed_weights`); W have no inputs and are dropped: only the slots they take count. The needs on
    a pass's own rank come before it in that rank's order, so only the input from the next rank is looked up (the
    rank above for chunk 0's forward and chunk 1's I, the rank below for the others).

    A pass's squeezed slot is the later of its needs' squeezed slots, plus one (plus the W between, after its
    rank's pass before it): one answer, the needs lying before it. The lanes already meet every need, so a pass
    keeps its slot unless it is "loose" (later than both needs ask: idle slots before it on its rank, and its
    input in earlier) or a need of its moved. Only those are taken, in slot order (a heap), each that moves
    handing on its two dependents (the next pass on its rank, the pass its output feeds); where many move, the
    rest of the passes are taken in slot order one by one (`_squeeze_from`)."""
    p = len(lanes)
    placed_at = [[[0] * m for _ in range(_W_CODE)] for _ in range(p)]  # each rank's, per code, each pass's slot
    none = [-2] * m  # an input from no rank: never the later need
    ranks = []  # per rank: its passes' slots now, the W before each, codes, microbatches, where their slots go
    for rank, (codes, at) in enumerate(lanes):
        slots, runs = (_placed_weights if placed else _owed_weights)(codes)
        kinds = list(map(codes.__getitem__, slots))
        mbs = list(map(at.__getitem__, slots))
        dests = list(map(placed_at[rank].__getitem__, kinds))
        deque(map(setitem, dests, mbs, slots), 0)
        ranks.append((slots, runs, kinds, mbs, dests))
    inputs = [  # per rank, by code: where its input's slots are
        [None] + [placed_at[rank + step][code] if 0 <= rank + step < p else none for code, step in _STEPS]
        for rank in range(p)
    ]
    rank_bits, bits = p.bit_length(), max((len(slots) for slots, *_ in ranks), default=0).bit_length()
    shift = rank_bits + bits  # a pass as (slot << rank_bits | rank) << bits | its place on its rank
    heap = []
    for rank, (slots, runs, kinds, mbs, _) in enumerate(ranks):
        found = inputs[rank]
        # idle slots before a pass: its slot past the one before it, plus one, plus the W between
        idle = map(sub, slots, map(add, chain((0,), map(add, slots, repeat(1))), runs))
        for k in compress(count(), idle):
            if found[kinds[k]][mbs[k]] + 1 < slots[k]:
                heap.append(((slots[k] << rank_bits | rank) << bits) | k)
    heapify(heap)
    queued = set(heap)
    rank_mask, place_mask = (1 << rank_bits) - 1, (1 << bits) - 1
    budget = sum(len(slots) for slots, *_ in ranks) // _HEAP_SHARE + 1  # the moves taken from the heap, at most
    while heap:
        key = heappop(heap)
        rank, k = key >> bits & rank_mask, key & place_mask
        slots, runs, kinds, mbs, dests = ranks[rank]
        ready = (dests[k - 1][mbs[k - 1]] + 1 if k else 0) + runs[k]
        code, mb = kinds[k], mbs[k]
        other = inputs[rank][code][mb] + 1
        if other > ready:
            ready = other
        if ready == dests[k][mb]:
            continue
        dests[k][mb] = ready
        budget -= 1
        if not budget:
            return _squeeze_from(ranks, inputs, key >> shift, rank, k + 1)
        if k + 1 < len(slots):
            after = ((slots[k + 1] << rank_bits | rank) << bits) | (k + 1)
            if after not in queued:
                queued.add(after)
                heappush(heap, after)
        fed = rank - _SOURCE[code - 1]
        if 0 <= fed < p:
            old = placed_at[fed][code][mb]  # not taken yet: its slot now is its slot before
            after = ((old << rank_bits | fed) << bits) | bisect_left(ranks[fed][0], old)
            if after not in queued:
                queued.add(after)
                heappush(heap, after)
    return _squeezed(ranks)


def _squeeze_from(ranks: list, inputs: list, t: int, first: int, k: int) -> list[Lane]:
    """`_squeeze` taking every pass from slot `t` of rank `first`'s pass `k` on, in slot order, one by one (those
    before have their slots)."""
    p = len(ranks)
    shift = p.bit_length()  # a pass as its slot << shift | its rank: sorted, in slot order, then rank
    order: list[int] = []
    takes = []  # per rank, each pass in turn: (the W before it, where its input's slot is, where its own goes, mb)
    free = [0] * p  # each rank's next free slot
    for rank, (slots, runs, kinds, mbs, dests) in enumerate(ranks):
        start = k if rank == first else (bisect_left if rank > first else bisect_right)(slots, t)
        if start:
            free[rank] = dests[start - 1][mbs[start - 1]] + 1
        found = inputs[rank]
        rest = kinds[start:]
        takes.append(zip(runs[start:], map(found.__getitem__, rest), dests[start:], mbs[start:], strict=True).__next__)
        order += map(add, map(lshift, slots[start:], repeat(shift)), repeat(rank))
    order.sort()
    mask = (1 << shift) - 1
    for key in order:
        rank = key & mask
        run, source, dest, mb = takes[rank]()
        ready = free[rank] + run
        other = source[mb] + 1
        if other > ready:
            ready = other
        dest[mb] = ready
        free[rank] = ready + 1
    return _squeezed(ranks)


def _squeezed(ranks: list) -> list[Lane]:
    """The lanes of the passes' squeezed slots."""
    squeezed: list[Lane] = []
    for _, _, kinds, mbs, dests in ranks:
        slots = list(map(getitem, dests, mbs))
        horizon = slots[-1] + 1 if slots else 0
        codes, at = bytearray(horizon), [0] * horizon
        deque(map(codes.__setitem__, slots, kinds), 0)
        deque(map(at.__setitem__, slots, mbs), 0)
        squeezed.append((codes, at))
    return squeezed


def _levels(codes: bytearray, weights: bool) -> tuple[list[int], list[int]]:
    """One rank's activations after each slot, in forwards of one chunk held (the paper's count: F adds one, its
    W frees it, I alone frees nothing), and the W owed after each slot: with `weights` the W hold slots of their
    own (none owed: a running sum); without, a rank runs a W owed in each free slot (`_walk`)."""
    if weights:
        return list(accumulate(map(_HELD.__getitem__, codes))), [0] * len(codes)
    levels, owes = [0] * len(codes), [0] * len(codes)
    _walk(codes, levels, owes, 0, -1, len(codes))  # from slot 0, no cap, nothing settled: every slot written
    return levels, owes


def _walk(codes: bytearray, levels: list[int], owes: list[int], start: int, cap: int, settled: int) -> int:
    """`_levels` without W placed (a W owed runs in each free slot), recomputed from slot `start` on, until it
    meets the level and the W owed recorded past slot `settled` (whose kinds have not changed since the levels
    were right): what follows is what was recorded. Returns the slot where the level passes `cap` (levels then
    partly stale; a cap of -1: none), or -1."""
    level, owed = (levels[start - 1], owes[start - 1]) if start else (0, 0)
    for t in range(start, len(levels)):
        code = codes[t]
        if code == FREE:
            if owed:
                level -= 1
                owed -= 1
        elif code <= _LAST_FORWARD:
            level += 1
        else:
            owed += 1
        if level > cap >= 0:
            return t
        if t > settled and levels[t] == level and owes[t] == owed:
            return -1
        levels[t] = level
        owes[t] = owed
    return -1


def _reorder(lanes: list[Lane], m: int, weights: bool) -> None:
    """The paper's reordering of the warm-up (with `weights` placed) and the cool-down, in place: each pass, in
    slot order, moves to the earliest slot its needs allow that no pass taken before it holds, when every rank
    stays within the steady phase's peak. The warm-up ends at rank 0's first chunk-0 I (the block's last pass),
    the steady phase at the first forward of the last microbatch after it.

    A pass's needs, besides its rank's order: the pass before it in its microbatch on this rank, its input from
    the next rank, and its kind's previous microbatch (each kind keeps microbatch order); a W follows its I. The
    passes of the steady phase stay, and the slots a pass may take lie before its own, where every pass of its
    rank has been taken already: a free slot there is one no pass taken holds (and the slot of a pass not yet
    taken still holds it)."""
    p = len(lanes)
    sizes = (0, m, m, m, m, 2 * m)  # passes per code on a rank (W_ANY: one per I)
    slot_of: list[list[list[int]]] = []  # per rank, per code, each pass's slot now
    times: list[list[int]] = []  # per rank, the slots of its passes (in order)
    memory: list[tuple[list[int], list[int]]] = []  # per rank, its levels and W owed after each slot
    for codes, at in lanes:
        slots, ts = [[0] * size for size in sizes], list(compress(count(), codes))
        deque(map(setitem, map(slots.__getitem__, filter(None, codes)), compress(at, codes), ts), 0)
        slot_of.append(slots)
        times.append(ts)
        if weights:  # without W placed: once a pass can move (in v-min's cool-down none can)
            memory.append(_levels(codes, weights))
    cap = max((max(levels, default=0) for levels, _ in memory), default=0)
    # With W placed the levels lie in 0..cap (a W frees what an I before it, after its F, held): as bytes when
    # that fits, searched and shifted by one at C speed (a long warm-up's forward moves past a hundred slots)
    as_bytes = weights and cap < _BYTE_LEVELS
    if as_bytes:
        memory = [(bytearray(levels), owes) for levels, owes in memory]
    # each rank's I slots in order (W k follows the k-th): only the W placed move after them
    backward = [sorted(slots[_FIRST_INPUT] + slots[_LAST_INPUT]) if weights else [] for slots in slot_of]

    warm_end = slot_of[0][_LAST_INPUT][0]
    lasts = [(slot_of[rank][F_DOWN + 1][m - 1], rank) for rank in range(p)]
    cool = min((key for key in lasts if key > (warm_end, 0)), default=None)  # the pass that ends the steady phase
    shift = p.bit_length()  # a pass as its slot << shift | its rank: sorted, in slot order, then rank
    moving: list[int] = []  # the warm-up's and the cool-down's passes
    for rank, ts in enumerate(times):
        if weights:
            moving += map(add, map(lshift, ts[: bisect_left(ts, warm_end)], repeat(shift)), repeat(rank))
        if cool is not None:
            start = cool[0] + (rank <= cool[1])
            moving += map(add, map(lshift, ts[bisect_left(ts, start) :], repeat(shift)), repeat(rank))
    moving.sort()
    # per rank, by code: the slots of the pass before it in its microbatch on its rank, of its input from the
    # next rank, and of its kind's passes (each keeps microbatch order); `none` where a need does not exist
    none = [-1] * (2 * m)
    needs = []
    for rank, own in enumerate(slot_of):
        above, below = slot_of[rank - 1] if rank else None, slot_of[rank + 1] if rank + 1 < p else None
        needs.append(
            (
                None,  # a free slot
                (none, above[1] if above else none, own[1]),  # F_DOWN: from the rank above
                (own[1], below[2] if below else none, own[2]),  # F_UP: after F_DOWN, from the rank below
                (own[2], above[3] if above else none, own[3]),  # I_UP: after F_UP, from the rank above
                (own[3], below[4] if below else none, own[4]),  # I_DOWN: after I_UP, from the rank below
                (backward[rank] if weights else none, none, own[5]),  # a W follows its I
            )
        )

    mask = (1 << shift) - 1
    for key in moving:
        t, rank = key >> shift, key & mask
        codes, at = lanes[rank]
        code, mb = codes[t], at[t]
        before, source, same = needs[rank][code]
        latest = before[mb]  # the latest slot among its needs (-1: none)
        other = source[mb]
        if other > latest:
            latest = other
        if mb:
            other = same[mb - 1]
            if other > latest:
                latest = other
        earliest = latest + 1
        if earliest >= t:
            continue
        kind = code - 1
        if weights:  # the levels stay right and never pass the cap: an I holds nothing, a W earlier frees
            # earlier, an F holds longer, from the slot after the last one at the cap before its own on
            levels = memory[rank][0]
            if kind <= F_UP:
                if as_bytes:
                    earliest = levels.rfind(cap, earliest, t) + 1 or earliest
                else:
                    held = levels[earliest:t]
                    if max(held) == cap:
                        earliest = t - held[::-1].index(cap)
            new = codes.find(FREE, earliest, t)
            if new < 0:
                continue
            codes[t], codes[new] = FREE, code
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
            new = codes.find(FREE, earliest, t)
            if new < 0:
                continue
            if not memory:  # the first pass that can move: the levels are the lanes' as they came
                memory = [_levels(rank_codes, weights) for rank_codes, _ in lanes]
                cap = max((max(levels, default=0) for levels, _ in memory), default=0)
            levels, owes = memory[rank]
            while new >= 0:
                codes[t], codes[new] = FREE, code
                failed = _walk(codes, levels, owes, new, cap, t)
                if failed < 0:
                    break
                codes[t], codes[new] = code, FREE
                _walk(codes, levels, owes, new, -1, max(t, failed))
                new = codes.find(FREE, new + 1, t)
            if new < 0:
                continue
        slot_of[rank][code][mb] = new
        at[new] = mb


def _orders(shape: str, p: int, m: int) -> list[tuple[list[int], list[int], list[int]]]:
    """Every rank's order as its passes' slot, kind and microbatch columns, in the paper's four steps: repeat the
    block, reorder the warm-up and the cool-down with W placed, squeeze; reorder the cool-down again with W
    running in whatever slot is free, squeeze; then place W for good, one queue per chunk."""
    lanes = [_repeat(shape, p, rank, m) for rank in range(p)]  # steady: W in the gaps
    _reorder(lanes, m, weights=True)  # warm-up and cool-down
    lanes = _squeeze(lanes, m, placed=True)
    _reorder(lanes, m, weights=False)  # cool-down again
    return [_with_weights(*lane) for lane in _squeeze(lanes, m, placed=False)]


def _with_weights(codes: bytearray, at: list[int]) -> tuple[list[int], list[int], list[int]]:
    """A lane without W with its W in its free slots, each after its I, oldest first, one queue per chunk with
    chunk 1's served first, the W still owed after the rank's last pass: the rank's passes as slot, kind and
    microbatch columns."""
    first: deque[int] = deque()  # per chunk, the microbatch of each W owed, oldest first
    second: deque[int] = deque()
    slots: list[int] = []
    kinds: list[int] = []
    mbs: list[int] = []
    t = 0
    for when, code, mb in zip(compress(count(), codes), filter(None, codes), compress(at, codes), strict=True):
        while t < when and (first or second):  # the free slots before the next pass (none to fill: skip them)
            slots.append(t)
            kinds.append(W_UP if first else W_DOWN)
            mbs.append(first.popleft() if first else second.popleft())
            t += 1
        slots.append(when)
        kinds.append(code - 1)
        mbs.append(mb)
        if code == _FIRST_INPUT:
            first.append(mb)
        elif code == _LAST_INPUT:
            second.append(mb)
        t = when + 1
    slots += range(t, t + len(first) + len(second))  # the W still owed, after the last pass
    kinds += [W_UP] * len(first) + [W_DOWN] * len(second)
    mbs += chain(first, second)
    return slots, kinds, mbs


_AS_KIND = (F, F, I, I, W, W)  # by pass: F_DOWN, F_UP, I_UP, I_DOWN, W_UP, W_DOWN


def _stages(p: int, rank: int) -> tuple[int, ...]:
    """The stage of each pass on rank `rank` (by pass, as `_AS_KIND`): chunk 0's stage is `rank`, chunk 1's
    2p-1-rank."""
    down, up = rank, 2 * p - 1 - rank
    return down, up, up, down, up, down


def _actions(p: int, rank: int, kinds: list[int], microbatches: list[int]) -> list[Action]:
    """One rank's passes (kind, microbatch columns) as its actions, made at C speed."""
    stages = _stages(p, rank)
    made = zip(map(stages.__getitem__, kinds), map(_AS_KIND.__getitem__, kinds), microbatches, strict=True)
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


def _steady_end(kinds: list[int], microbatches: list[int]) -> int:
    """Where a rank's steady phase ends in its order (kind and microbatch columns): the end of its longest stretch
    where each pass repeats the one PERIOD before it a microbatch later (the cool-down has shorter ones)."""
    # a pass as one number (kind and microbatch), the next microbatch's one more; where each repeats the one a
    # PERIOD before a microbatch later, at C speed: the first longest run of ones, and where it ends
    codes = list(map(add, map(mul, kinds, repeat(len(kinds) + 1)), microbatches))
    same = bytes(map(eq, codes[PERIOD:], map(add, codes, repeat(1)))).split(b"\0")
    runs = list(map(len, same))
    length = max(runs)
    longest = runs.index(length)
    assert length >= 2 * PERIOD, "the steady phase runs at least two periods"
    return PERIOD + sum(runs[:longest]) + longest + length


def _rank_actions(p: int, rank: int, kinds: list[int], microbatches: list[int], periods: int) -> list[Action]:
    """One rank's actions from its order (kind and microbatch columns) with `periods` more periods of its steady
    phase: its last period repeated at the steady phase's end, each time a microbatch later (each of its passes
    made as one run, at C speed), and what follows shifted `periods` microbatches up."""
    if not periods:
        return _actions(p, rank, kinds, microbatches)
    end = _steady_end(kinds, microbatches)
    stages = _stages(p, rank)
    added: list[Action | None] = [None] * (PERIOD * periods)
    for place in range(PERIOD):  # the period's pass at `place`, microbatch mb: mb + 1, mb + 2, ... after
        kind, mb = kinds[end - PERIOD + place], microbatches[end - PERIOD + place]
        made = zip(repeat(stages[kind]), repeat(_AS_KIND[kind]), range(mb + 1, mb + 1 + periods))
        added[place::PERIOD] = map(_new, repeat(Action), made)
    after = list(map(add, microbatches[end:], repeat(periods)))
    return _actions(p, rank, kinds[:end], microbatches[:end]) + added + _actions(p, rank, kinds[end:], after)


def _build(shape: str, num_ranks: int, num_microbatches: int) -> Schedule:
    check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    built = min(m, _steady_from(shape, p))  # the reordering runs on the warm-up, the cool-down and a few periods
    orders = _orders(shape, p, built)
    rows = [_rank_actions(p, rank, kinds, mbs, m - built) for rank, (_, kinds, mbs) in enumerate(orders)]
    return make_schedule(f"v-{shape}", p, m, v_placement(p), rows)


def _build_in_full(shape: str, num_ranks: int, num_microbatches: int) -> list[list[tuple[int, int, int]]]:
    """Every rank's (slot, kind, microbatch) order from the reordering over every microbatch (what `_build`
    extends: the tests compare the two)."""
    return [list(zip(*columns, strict=True)) for columns in _orders(shape, num_ranks, num_microbatches)]


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

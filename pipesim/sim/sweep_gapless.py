"""The engine's one-producer loop where no action has a gap before it (no dispatch gap measured, no collective
placed before an action: every simulation of typed times, and the planner's usual case).

`x + 0.0` is `x` (a clock never holds -0.0: it starts at 0.0 and only adds times), so leaving the gap out gives
`pipesim.sim.simulate._sweep_blocking`'s numbers to the bit, a fifth quicker on 10^5 actions; `sweep` picks this
loop where every gap is 0 and every rank's clock starts at 0. A test holds the two loops, and the general one,
to the same numbers and runs on every registered family.
"""

from __future__ import annotations


def sweep_blocking_without_gaps(
    blocking: list[int],
    offsets: list[int],
    durations: list[float],
    hops: list[float],
    starts: list[float],
    ends: list[float],
    pointer: list[int],
    clock: list[float],
    waiting: list[list[int] | None],
    ready: list[int],
    runs: list[tuple[int, int, int]] | None = None,
) -> None:
    """`_sweep_blocking` without its gaps: fills `starts`, `ends`, `pointer`, `clock` and `waiting` in place and
    empties `ready`; `runs` (when given) receives each stretch a rank ran before it parked."""
    while ready:
        rank = ready.pop()
        i, stop, now = pointer[rank], offsets[rank + 1], clock[rank]
        first = i
        while i < stop:
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
                start = arrival if arrival > now else now
            else:
                start = now
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


def sweep_pairs_without_gaps(
    waits: list[int],
    blocking: list[int],
    offsets: list[int],
    durations: list[float],
    hops: list[float],
    starts: list[float],
    ends: list[float],
    pointer: list[int],
    clock: list[float],
    waiting: list[list[int] | None],
    ready: list[int],
) -> None:
    """The one-producer loop for overlapped pairs (`Dependencies.pair_waits`): an action reads `waits[i]` as
    `sweep_blocking_without_gaps` reads `blocking[i]`, except a pair's first member (-2), which waits for its own
    producer (`blocking[i]`) and its second member's, the next action's (`blocking[i + 1]`, paying its hop); the
    second member then runs, its input in. The general loop's times to the bit (a test holds them), without
    a group's walk over its members' producers. Fills `starts`, `ends`, `pointer`, `clock` and `waiting` in place
    and empties `ready`.

    A pair starts at the latest of its arrivals, whichever is read first. The second member's is read first: in
    the (F, B) pairs the families build it is the backward's gradient, which comes last, so a parked rank wakes
    once per pair rather than once per missing input (1f1b-overlap 64 x 1024: half the wake-ups)."""
    while ready:
        rank = ready.pop()
        i, stop, now = pointer[rank], offsets[rank + 1], clock[rank]
        while i < stop:
            d = waits[i]
            if d >= 0:
                arrival = ends[d]
                if arrival < 0:
                    break
                arrival += hops[i]
                start = arrival if arrival > now else now
            elif d == -1:
                start = now
            else:  # a pair's first member: its second member's input first, the one that usually comes last
                start = now
                d = blocking[i + 1]
                if d >= 0:
                    arrival = ends[d]
                    if arrival < 0:
                        break
                    arrival += hops[i + 1]
                    if arrival > start:
                        start = arrival
                d = blocking[i]
                if d >= 0:
                    arrival = ends[d]
                    if arrival < 0:
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
        else:
            pointer[rank], clock[rank] = i, now
            continue
        parked = waiting[d]  # d has not ended: park on it
        if parked is None:
            waiting[d] = [rank]
        else:
            parked.append(rank)
        pointer[rank], clock[rank] = i, now

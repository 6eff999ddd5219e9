"""The classic one-stage-per-rank schedules: naive model parallelism, GPipe, 1F1B.

Each builder is pure and written in the phases its paper describes, so the
per-rank action lists can be read against the published pictures. Stage s
lives on rank s (`loop_placement` with one stage per rank).
"""

from __future__ import annotations

from itertools import repeat

from pipesim.ir import Action, B, F, Schedule, loop_placement, make_schedule
from pipesim.schedules import ScheduleInfo


def check_counts(num_ranks: int, num_microbatches: int) -> None:
    """Refuse counts no schedule can use, naming the valid values."""
    if not isinstance(num_ranks, int) or num_ranks < 1:
        raise ValueError(f"num_ranks must be an integer >= 1, got {num_ranks!r}")
    if not isinstance(num_microbatches, int) or num_microbatches < 1:
        raise ValueError(f"num_microbatches must be an integer >= 1, got {num_microbatches!r}")


def naive(num_ranks: int, num_microbatches: int) -> Schedule:
    """Plain model parallelism: each microbatch goes forward through every stage
    and back before the next one starts, so only one rank ever works at a time.

    On rank r the list is simply F, B per microbatch; the data dependencies do
    the serialising (F(r, m+1) waits behind B(r, m), which waits for the whole
    pipeline's backward of m).
    """
    check_counts(num_ranks, num_microbatches)
    new = tuple.__new__  # Action(...) costs a Python-level __new__ per action
    rows = [
        [new(Action, (rank, kind, mb)) for mb in range(num_microbatches) for kind in (F, B)]
        for rank in range(num_ranks)
    ]
    return make_schedule("naive", num_ranks, num_microbatches, loop_placement(num_ranks, num_ranks), rows)


def gpipe(num_ranks: int, num_microbatches: int) -> Schedule:
    """GPipe (Huang et al., 2019): every forward, then every backward.

    Keeps all microbatches' activations stashed at once (peak m per rank).
    """
    check_counts(num_ranks, num_microbatches)
    new = tuple.__new__  # Action(...) costs a Python-level __new__ per action
    rows = []
    for rank in range(num_ranks):
        forwards = list(map(new, repeat(Action), zip(repeat(rank), repeat(F), range(num_microbatches))))
        backwards = list(map(new, repeat(Action), zip(repeat(rank), repeat(B), range(num_microbatches))))
        rows.append(forwards + backwards)
    return make_schedule("gpipe", num_ranks, num_microbatches, loop_placement(num_ranks, num_ranks), rows)


def one_f_one_b(num_ranks: int, num_microbatches: int) -> Schedule:
    """1F1B / PipeDream-flush (Narayanan et al., 2021).

    Rank r runs p-r-1 warm-up forwards, then alternates one forward and one
    backward, then drains the remaining backwards: at most p-r microbatches
    are stashed at any time, against m for GPipe, for the same bubble.

    This is the order torch's Schedule1F1B runs (`_step_microbatches`: p-r
    warm-up forwards, then backward-forward pairs, the same sequence), not
    the order its IR (`_get_pipeline_order`, torch 2.13) writes, whose last
    rank starts at microbatch 1 and runs a microbatch m that does not exist;
    tests/test_torch_sizes.py compares with the runtime. torch refuses m < p;
    pipesim builds it (its reference check says torch cannot run it).
    """
    check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    new = tuple.__new__  # Action(...) costs a Python-level __new__ per action; 10^5 of them add up
    rows = []
    for rank in range(p):
        warmup = min(p - rank - 1, m)
        steady = m - warmup
        forwards = list(map(new, repeat(Action), zip(repeat(rank), repeat(F), range(m))))  # at C speed
        backwards = list(map(new, repeat(Action), zip(repeat(rank), repeat(B), range(m))))
        row = forwards[:warmup] + [None] * (2 * steady) + backwards[steady:]  # warm-up, steady, cool-down
        row[warmup : warmup + 2 * steady : 2] = forwards[warmup:]  # steady 1F1B: F(warmup + i), then B(i)
        row[warmup + 1 : warmup + 2 * steady : 2] = backwards[:steady]
        rows.append(row)
    return make_schedule("1f1b", p, m, loop_placement(p, p), rows)


def _gpipe_stashed(num_ranks: int, num_microbatches: int, chunks: int) -> list[int]:
    return [num_microbatches] * num_ranks  # every forward before the first backward


def _one_f_one_b_stashed(num_ranks: int, num_microbatches: int, chunks: int) -> list[int]:
    return [min(num_ranks - rank, num_microbatches) for rank in range(num_ranks)]  # warm-up plus one


SCHEDULES: list[ScheduleInfo] = [
    ScheduleInfo(
        "naive",
        naive,
        "Plain model parallelism: one microbatch at a time through every stage and back; bubble (p-1)/p.",
        planned=False,
    ),
    ScheduleInfo(
        "gpipe",
        gpipe,
        "GPipe: all forwards, then all backwards; bubble (p-1)/(m+p-1), stashes all m microbatches.",
        torch_class="ScheduleGPipe",
        stashed=_gpipe_stashed,
    ),
    ScheduleInfo(
        "1f1b",
        one_f_one_b,
        "1F1B (PipeDream-flush): warm-up forwards, steady one-forward-one-backward, cool-down; "
        "GPipe's bubble with at most p-r microbatches stashed on rank r.",
        torch_class="Schedule1F1B",
        in_situ=True,
        stashed=_one_f_one_b_stashed,
    ),
]

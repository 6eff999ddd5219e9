"""1F1B with each steady forward overlapped with a backward: Megatron-Core's combined 1F1B.

Megatron's `combined_1f1b` (flags `--overlap-moe-expert-parallel-comm --delay-wgrad-compute`) runs the forward
of microbatch n and the backward of an earlier microbatch as one cell, layer by layer, so that each part's
expert-parallel all-to-all (dispatch, combine) runs while the other part computes (`pipesim.cost.overlap`
prices the cell). A pair needs two independent passes: a rank's backward cannot be paired with the forward it
follows from, so rank r runs p - r warm-up forwards, one more than 1F1B, and holds one more microbatch stashed
(as DualPipe's PP + 1). Then each steady cell is (F of microbatch warm-up + i, B of microbatch i), then the
remaining backwards.
"""

from __future__ import annotations

import dataclasses
from itertools import chain, repeat

from pipesim.ir import Action, B, Entry, F, Overlap, Schedule, loop_placement, make_schedule
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts


def one_f_one_b_overlap(num_ranks: int, num_microbatches: int) -> Schedule:
    """Combined 1F1B: warm-up forwards, steady overlapped (F, B) pairs, cool-down backwards."""
    check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    new = tuple.__new__  # Action(...) and Overlap(...) check or wrap their arguments; 10^5 known-good ones need not
    rows: list[tuple[Entry, ...]] = []
    actions: list[tuple[Action, ...]] = []
    for rank in range(p):
        warmup = min(p - rank, m)
        steady = m - warmup
        forwards = list(map(new, repeat(Action), zip(repeat(rank), repeat(F), range(m))))  # at C speed
        backwards = list(map(new, repeat(Action), zip(repeat(rank), repeat(B), range(m))))
        pairs = list(zip(forwards[warmup:], backwards, strict=False))  # the steady cells' (F, B), as Overlap holds
        head, tail = forwards[:warmup], backwards[steady:]
        rows.append((*head, *map(new, repeat(Overlap), zip(pairs)), *tail))  # warm-up, F&B cells, cool-down
        actions.append((*head, *chain.from_iterable(pairs), *tail))  # the same compute actions, in order
    schedule = make_schedule("1f1b-overlap", p, m, loop_placement(p, p), actions)
    if m == 1:  # no rank has a steady cell: a plain order (as `schedule_from_order` keeps one)
        return schedule
    return dataclasses.replace(schedule, order=tuple(rows))  # checks the order's actions are these


def _stashed(num_ranks: int, num_microbatches: int, chunks: int) -> list[int]:
    """Its warm-up's forwards, plus the one a steady cell starts before its backward frees one."""
    return [min(num_ranks - rank + 1, num_microbatches) for rank in range(num_ranks)]


SCHEDULES = [
    ScheduleInfo(
        "1f1b-overlap",
        one_f_one_b_overlap,
        "Combined 1F1B (Megatron-Core): one more warm-up forward than 1F1B, then each forward overlapped with "
        "an earlier microbatch's backward so their MoE all-to-alls hide under each other's compute (--a2a).",
        stashed=_stashed,
        planned=False,
    ),
]

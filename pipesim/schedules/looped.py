"""Looped breadth-first: loop placement with v chunks per rank, every microbatch of a chunk before the next.

Lamy-Poirier, "Breadth-First Pipeline Parallelism", 2022; torch's ScheduleLoopedBFS. Not a zero-bubble
schedule: it trades GPipe's memory (every microbatch stashed) for fewer, larger transfers.
"""

from __future__ import annotations

from pipesim.ir import Action, B, F, Schedule, loop_placement, make_schedule
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts


def check_looped(num_ranks: int, num_microbatches: int, num_virtual_stages: int = 2) -> None:
    """Positive counts and at least one chunk per rank."""
    check_counts(num_ranks, num_microbatches)
    if not isinstance(num_virtual_stages, int) or num_virtual_stages < 1:
        raise ValueError(f"looped-bfs needs num_virtual_stages >= 1 (chunks per rank), got {num_virtual_stages!r}")


def looped_bfs(num_ranks: int, num_microbatches: int, num_virtual_stages: int = 2) -> Schedule:
    """Looped breadth-first: stage s on rank s mod p; all microbatches of a chunk, then the next.

    Forwards run the chunks in order; backwards run them in reverse, newest
    microbatch first, so the last stage starts its backward on the microbatch
    it has just finished. Every microbatch stays stashed (GPipe's memory).
    """
    check_looped(num_ranks, num_microbatches, num_virtual_stages)
    p, m, v = num_ranks, num_microbatches, num_virtual_stages
    rows = []
    for rank in range(p):
        stages = range(rank, p * v, p)
        row = [Action(s, F, mb) for s in stages for mb in range(m)]  # forward, chunk by chunk
        row += [Action(s, B, mb) for s in reversed(stages) for mb in reversed(range(m))]  # backward
        rows.append(row)
    return make_schedule("looped-bfs", p, m, loop_placement(p, p * v), rows, num_virtual_stages=v)


def _stashed(num_ranks: int, num_microbatches: int, chunks: int) -> list[int]:
    return [num_microbatches * chunks] * num_ranks  # every chunk's forwards before the first backward


SCHEDULES: list[ScheduleInfo] = [
    ScheduleInfo(
        "looped-bfs",
        looped_bfs,
        "Looped breadth-first: v chunks per rank (stage s on rank s mod p), all microbatches of a chunk "
        "before the next; stashes every microbatch.",
        options=("num_virtual_stages",),
        placement="interleaved",
        torch_class="ScheduleLoopedBFS",
        planned=False,
        check=check_looped,
        stashed=_stashed,
    ),
]

"""Interleaved 1F1B (Megatron-LM virtual pipeline, Narayanan et al., 2021).

Each rank holds v model chunks ("virtual stages"); chunk c of rank r is stage
c*p + r, so a microbatch loops v times round the ranks. With the same total
work, the bubble shrinks from (p-1)/(m+p-1) to (p-1)/(v*m+p-1), at the cost of
v times more transfers.

The order follows Megatron's `forward_backward_pipelining_with_interleaving`
as torch.distributed.pipelining generalises it (`ScheduleInterleaved1F1B`,
torch 2.13): microbatches advance in rounds of r = m // max(1, m // p) (p when m
is a multiple of p, m when m < p), so every m that is a multiple of the number
of rounds max(1, m // p) builds, e.g. 4 ranks x 6 microbatches (rounds of 6) or
4 x 10 (rounds of 5). Forward k on a rank runs chunk (k // r) % v; backward k
runs chunk v - 1 - (k // r) % v; each stage takes its microbatches in order.
Rank i warms up with min((v-1) r + 2(p-1-i), v m) forwards, then alternates,
then cools down. With m a multiple of p this is Megatron's order exactly.
"""

from __future__ import annotations

from pipesim.ir import Action, B, F, Schedule, loop_placement, make_schedule
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts


def rounds_of(num_ranks: int, num_microbatches: int) -> int:
    """Microbatches per round (torch's `microbatches_per_round`)."""
    return num_microbatches // max(1, num_microbatches // num_ranks)


def check_interleaved(num_ranks: int, num_microbatches: int, num_virtual_stages: int) -> None:
    """torch's constraints: v >= 2 chunks, m a multiple of its number of rounds max(1, m // p)."""
    check_counts(num_ranks, num_microbatches)
    if not isinstance(num_virtual_stages, int) or num_virtual_stages < 2:
        raise ValueError(
            f"interleaved-1f1b needs num_virtual_stages >= 2 (chunks per rank), got {num_virtual_stages!r}; "
            "with one chunk per rank use 1f1b"
        )
    p, m = num_ranks, num_microbatches
    rounds = max(1, m // p)
    if m % rounds:
        valid = [k for k in range(max(1, m - 2 * p), m + 2 * p) if k % max(1, k // p) == 0]
        raise ValueError(
            f"interleaved-1f1b needs num_microbatches to be a multiple of its number of rounds max(1, m // p) "
            f"(microbatches advance in equal rounds, as in torch's ScheduleInterleaved1F1B); got {m} "
            f"({rounds} rounds); valid near it: {', '.join(map(str, valid))}"
        )


def interleaved_1f1b(num_ranks: int, num_microbatches: int, num_virtual_stages: int = 2) -> Schedule:
    """Interleaved 1F1B with `num_virtual_stages` chunks per rank (Megatron's order, torch's sizes)."""
    check_interleaved(num_ranks, num_microbatches, num_virtual_stages)
    p, m, v = num_ranks, num_microbatches, num_virtual_stages
    per_round = rounds_of(p, m)
    total = m * v  # forwards (and backwards) per rank
    # The k-th forward of a rank runs chunk (k // r) % v, the k-th backward chunk v - 1 - (k // r) % v; each chunk
    # takes r microbatches a round in order, so the k-th one's microbatch is (k // (r v)) r + k % r (m is r rounds)
    cycle = per_round * v
    microbatch = [(k // cycle) * per_round + k % per_round for k in range(total)]
    forward_chunk = [(k // per_round) % v for k in range(total)]
    new = tuple.__new__  # Action(...) costs a Python-level __new__ per action; 10^5 of them add up
    rows = []
    for rank in range(p):
        warmup = min((v - 1) * per_round + 2 * (p - rank - 1), total)
        steady = total - warmup
        forwards = [new(Action, (c * p + rank, F, mb)) for c, mb in zip(forward_chunk, microbatch, strict=True)]
        backwards = [
            new(Action, ((v - 1 - c) * p + rank, B, mb)) for c, mb in zip(forward_chunk, microbatch, strict=True)
        ]
        row = forwards[:warmup] + [None] * (2 * steady) + backwards[steady:]  # warm-up, steady 1F1B, cool-down
        row[warmup : warmup + 2 * steady : 2] = forwards[warmup:]
        row[warmup + 1 : warmup + 2 * steady : 2] = backwards[:steady]
        rows.append(row)
    return make_schedule("interleaved-1f1b", p, m, loop_placement(p, p * v), rows, num_virtual_stages=v)


def _stashed(num_ranks: int, num_microbatches: int, chunks: int) -> list[int]:
    """Chunk forwards held before rank r's first backward: its warm-up plus the first steady forward."""
    p, total = num_ranks, num_microbatches * chunks
    per_round = rounds_of(p, num_microbatches)
    return [min((chunks - 1) * per_round + 2 * (p - rank - 1) + 1, total) for rank in range(p)]


SCHEDULES: list[ScheduleInfo] = [
    ScheduleInfo(
        "interleaved-1f1b",
        interleaved_1f1b,
        "Megatron interleaved 1F1B: v chunks per rank (stage s on rank s mod p); bubble (p-1)/(v*m+p-1) "
        "for v times the transfers. Needs num_microbatches a multiple of max(1, m // p) (torch's rule).",
        options=("num_virtual_stages",),
        placement="interleaved",
        torch_class="ScheduleInterleaved1F1B",
        in_situ=True,
        min_chunks=2,  # check_interleaved: one chunk per rank is 1f1b
        check=check_interleaved,
        stashed=_stashed,
    ),
]

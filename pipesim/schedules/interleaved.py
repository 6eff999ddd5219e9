"""Interleaved 1F1B (Megatron-LM virtual pipeline, Narayanan et al., 2021).

Each rank holds v model chunks ("virtual stages"); chunk c of rank r is stage
c*p + r, so a microbatch loops v times round the ranks. With the same total
work, the bubble shrinks from (p-1)/(m+p-1) to (p-1)/(v*m+p-1), at the cost of
v times more transfers.

The order follows Megatron's `forward_backward_pipelining_with_interleaving`:
microbatches advance in groups of p; forward k on a rank runs chunk
(k // p) % v for microbatch (k // (p*v))*p + k % p, and backward k runs the
same microbatch on the chunks in reverse order.
"""

from __future__ import annotations

from pipesim.ir import Action, B, F, Schedule, loop_placement, make_schedule
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts


def check_interleaved(num_ranks: int, num_microbatches: int, num_virtual_stages: int) -> None:
    """Megatron's constraints: v >= 2 chunks, m a multiple of p and at least p."""
    check_counts(num_ranks, num_microbatches)
    if not isinstance(num_virtual_stages, int) or num_virtual_stages < 2:
        raise ValueError(
            f"interleaved-1f1b needs num_virtual_stages >= 2 (chunks per rank), got {num_virtual_stages!r}; "
            "with one chunk per rank use 1f1b"
        )
    p, m = num_ranks, num_microbatches
    if m < p or m % p:
        valid = ", ".join(str(p * k) for k in range(1, 5))
        raise ValueError(
            f"interleaved-1f1b needs num_microbatches to be a multiple of num_ranks and >= num_ranks "
            f"(microbatches advance in groups of {p}); got {m}, valid: {valid}, ..."
        )


def _microbatch(k: int, p: int, v: int) -> int:
    return (k // (p * v)) * p + k % p


def _forward(rank: int, k: int, p: int, v: int) -> Action:
    chunk = (k // p) % v
    return Action(chunk * p + rank, F, _microbatch(k, p, v))


def _backward(rank: int, k: int, p: int, v: int) -> Action:
    chunk = v - 1 - (k // p) % v
    return Action(chunk * p + rank, B, _microbatch(k, p, v))


def interleaved_1f1b(num_ranks: int, num_microbatches: int, num_virtual_stages: int = 2) -> Schedule:
    """Megatron interleaved 1F1B with `num_virtual_stages` chunks per rank."""
    check_interleaved(num_ranks, num_microbatches, num_virtual_stages)
    p, m, v = num_ranks, num_microbatches, num_virtual_stages
    total = m * v  # forwards (and backwards) per rank
    rows = []
    for rank in range(p):
        warmup = min((p - rank - 1) * 2 + (v - 1) * p, total)
        steady = total - warmup
        row = [_forward(rank, k, p, v) for k in range(warmup)]  # warm-up
        for i in range(steady):  # steady 1F1B
            row.append(_forward(rank, warmup + i, p, v))
            row.append(_backward(rank, i, p, v))
        row.extend(_backward(rank, k, p, v) for k in range(steady, total))  # cool-down
        rows.append(row)
    return make_schedule(
        "interleaved-1f1b", p, m, loop_placement(p, p * v), rows, num_virtual_stages=v
    )


SCHEDULES: list[ScheduleInfo] = [
    ScheduleInfo(
        "interleaved-1f1b",
        interleaved_1f1b,
        "Megatron interleaved 1F1B: v chunks per rank (stage s on rank s mod p); bubble (p-1)/(v*m+p-1) "
        "for v times the transfers. Needs num_microbatches a multiple of num_ranks, >= num_ranks.",
        options=("num_virtual_stages",),
    ),
]

"""Sequence-level pipelining: Seq1F1B (Sun et al., NAACL'25, arXiv 2406.03488).

Each microbatch is cut into S chunks of its sequence, and 1F1B runs over the chunks: a rank can start the next
forward as soon as one chunk, not a whole microbatch, has gone through, and it keeps only chunks stashed. A
chunk's forward needs the earlier chunk's keys and values, and its backward the gradients of its own from the
later chunks, so the backwards of a microbatch run last chunk first (`pipesim.semantics.lower.SEQ_NEEDS`).

Actions name chunk j of microbatch m as microbatch m * S + j. Rank r runs (p - r - 1) + (S - 1) warm-up forwards
(the last rank needs every chunk of a microbatch forwarded before that microbatch's last chunk can go back),
then one forward and one backward in turn, then the remaining backwards, as the sail-sg reference scheduler
(`scheduler/seq1f1b.py`) does. Peak stash on rank 0: p - 1 + S chunks, (p - 1 + S) / S microbatches' worth
against 1F1B's p.
"""

from __future__ import annotations

from itertools import repeat

from pipesim.ir import SEQ_CUTS, Action, B, F, Schedule, loop_placement
from pipesim.limits import MAX_MICROBATCHES, check_sizes
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts

DEFAULT_SEQ_CHUNKS = 2


def check_seq_chunks(seq_chunks: object, seq_cut: object = "even") -> None:
    if not isinstance(seq_chunks, int) or isinstance(seq_chunks, bool) or seq_chunks < 1:
        raise ValueError(f"seq_chunks must be a whole number >= 1, got {seq_chunks!r}")
    if seq_cut not in SEQ_CUTS:
        raise ValueError(f"unknown seq_cut {seq_cut!r}; valid: {', '.join(SEQ_CUTS)}")


def _check(num_ranks: int, num_microbatches: int, seq_chunks: int = DEFAULT_SEQ_CHUNKS, seq_cut: str = "even") -> None:
    check_counts(num_ranks, num_microbatches)
    check_seq_chunks(seq_chunks, seq_cut)
    units = num_microbatches * seq_chunks
    if units > MAX_MICROBATCHES:  # the IR counts chunks as microbatches: say it in the user's terms
        raise ValueError(
            f"{num_microbatches} microbatches x {seq_chunks} sequence chunks = {units} chunks, more than pipesim "
            f"handles (at most {MAX_MICROBATCHES:,}; see pipesim/limits.py)"
        )
    check_sizes(num_ranks=num_ranks, num_stages=num_ranks, num_microbatches=units, num_actions=2 * num_ranks * units)


def seq1f1b(
    num_ranks: int, num_microbatches: int, seq_chunks: int = DEFAULT_SEQ_CHUNKS, seq_cut: str = "even"
) -> Schedule:
    """Seq1F1B over `num_microbatches` microbatches each cut into `seq_chunks` sequence chunks."""
    _check(num_ranks, num_microbatches, seq_chunks, seq_cut)
    p, chunks = num_ranks, seq_chunks
    units = num_microbatches * chunks

    # the i-th backward a rank runs: microbatches in order, each one's chunks last first
    backward_units = [(i // chunks) * chunks + chunks - 1 - i % chunks for i in range(units)]
    new = tuple.__new__  # Action(...) checks its arguments; 10^5 known-good ones need not be
    rows = []
    for rank in range(p):
        warmup = min(p - rank - 1 + chunks - 1, units)
        steady = units - warmup
        forwards = list(map(new, repeat(Action), zip(repeat(rank), repeat(F), range(units))))  # at C speed
        backwards = list(map(new, repeat(Action), zip(repeat(rank), repeat(B), backward_units)))
        # warm-up forwards, steady (one forward, one backward), cool-down backwards
        row = forwards[:warmup] + [None] * (2 * steady) + backwards[steady:]
        row[warmup : warmup + 2 * steady : 2] = forwards[warmup:]
        row[warmup + 1 : warmup + 2 * steady : 2] = backwards[:steady]
        rows.append(tuple(row))
    return Schedule(
        "seq1f1b",
        p,
        p,
        units,
        loop_placement(p, p),
        tuple(rows),
        params={"seq_chunks": chunks, "seq_cut": seq_cut},
        seq_chunks=chunks,
        seq_cut=seq_cut,
    )


SCHEDULES = [
    ScheduleInfo(
        "seq1f1b",
        seq1f1b,
        "Seq1F1B: 1F1B over sequence chunks of each microbatch (--seq-chunks S, default 2); chunks stashed "
        "instead of microbatches, (p-1+S)/S microbatches' worth on rank 0 against 1F1B's p.",
        options=("seq_chunks", "seq_cut"),
        check=_check,  # no `stashed`: it holds chunks, a planner's bound counts microbatches
        planned=False,
    ),
]

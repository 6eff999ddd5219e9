"""V-shaped schedules: two chunks per rank, stage s and 2p-1-s on one rank (ZB-V, DualPipeV).

* ``zbv``: zero bubble at 1F1B's memory when F, I and W take equal time (Qi et al., "Pipeline Parallelism
  with Controllable Memory", the V schedule of the zero-bubble project).
* ``dualpipev``: DeepSeek's DualPipeV, the V-shaped DualPipe, in its 8 numbered steps; it pairs the forward
  of one chunk with the backward of the other.

The orders follow torch.distributed.pipelining's ScheduleZBVZeroBubble and ScheduleDualPipeV, which
themselves follow the papers' reference code, so a schedule built here runs unchanged through torch's CSV
runtime.
"""

from __future__ import annotations

from itertools import chain, repeat
from typing import NamedTuple

from pipesim.ir import (
    Action,
    ActionKind,
    B,
    F,
    I,
    Overlap,
    Schedule,
    W,
    make_schedule,
    v_placement,
)
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts
from pipesim.schedules.zero_bubble import RankOrder

_new = tuple.__new__  # Action(...) costs a Python-level __new__ per action

# --- ZB-V -------------------------------------------------------------------------


def _made(stage: int, kind: ActionKind, first: int, count: int) -> list[Action]:
    """`count` actions of one stage and kind, microbatches first, first + 1, ... (made at C speed)."""
    return list(map(_new, repeat(Action), zip(repeat(stage), repeat(kind), range(first, first + count))))


def _in_turn(*runs: list[Action]) -> list[Action]:
    """One action of each run in turn (runs of equal length): a phase that repeats a few passes."""
    return list(chain.from_iterable(zip(*runs, strict=True)))


def _zbv_rank(rank: int, p: int, n: int) -> list[Action]:
    """ZB-V on one rank for n microbatches (n >= 2p-1), in the paper's phases, each made as whole runs of one
    stage and kind: every I's W comes right after it or waits in its stage's queue, oldest first."""
    down, up = rank, 2 * p - 1 - rank  # chunk 0 (forward goes down the ranks), chunk 1 (back up)
    first = 2 * (p - rank) - 1  # warm-up 1: chunk-0 forwards until chunk 1 can start
    row = _made(down, F, 0, first)
    row += _in_turn(_made(up, F, 0, rank), _made(down, F, first, rank))  # warm-up 2: the chunks' forwards in turn
    ups = p - rank  # warm-up 3: chunk 1 reaches steady state, W right after I
    row += _in_turn(_made(up, F, rank, ups), _made(up, I, 0, ups), _made(up, W, 0, ups))
    # steady: F (while chunk 0's forwards last), I, W of chunk 0, then of chunk 1, until chunk 1's forwards are done
    fed, rounds = n - (first + rank), n - p
    for start, count, forwards in ((0, fed, True), (fed, rounds - fed, False)):
        runs = [_made(down, F, first + rank + start, count)] if forwards else []
        runs += [_made(down, I, start, count), _made(down, W, start, count), _made(up, F, p + start, count)]
        row += _in_turn(*runs, _made(up, I, ups + start, count), _made(up, W, ups + start, count))
    row += _in_turn(_made(down, I, rounds, rank), _made(up, I, n - rank, rank))  # cool-down 1: I first, W deferred
    row += _in_turn(_made(down, I, rounds + rank, ups), _made(down, W, rounds, ups))  # cool-down 2: deferred W fill
    return row + _made(up, W, n - rank, rank) + _made(down, W, n - rank, rank)  # the W still deferred


def zbv(num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-V: 2 chunks per rank in a V; zero bubble at 1F1B's memory when F = I = W.

    The order is built for max(m, 2p-1) microbatches and the surplus ones are
    dropped afterwards (as torch does): dropping actions never adds a
    dependency, so the shorter schedule stays deadlock-free.
    """
    check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    n = max(m, 2 * p - 1)
    rows = [_zbv_rank(rank, p, n) for rank in range(p)]
    if n > m:
        rows = [[a for a in row if a.microbatch < m] for row in rows]
    return make_schedule("zbv", p, m, v_placement(p), rows)


# --- DualPipeV --------------------------------------------------------------------


class DualPipeVSteps(NamedTuple):
    """How many times rank r runs each of DualPipeV's 8 steps, named as in DeepSeek's code (chunk 0 goes down
    the ranks, chunk 1 comes back up). The builder and its size check both read these counts."""

    n_f0: int  # step 1: chunk-0 forwards
    n_f0_f1: int  # step 2: forward pairs
    n_b1_w1_f1: int  # step 3: zero-bubble chunk-1 backward, weight, forward
    n_f0_b1_f1_b0: int  # step 4 (main): overlapped F&B pairs
    n_b1_f1_b0: int  # step 5
    n_b1_b0: int  # step 6: backward pairs, the second half splitting off W
    n_w_b0: int  # step 7
    n_w: int  # step 8: the remaining weight passes


def dualpipev_steps(rank: int, num_ranks: int, num_microbatches: int) -> DualPipeVSteps:
    p, r, m = num_ranks, rank, num_microbatches
    return DualPipeVSteps(
        n_f0=2 * (p - r - 1),
        n_f0_f1=r + 1,
        n_b1_w1_f1=p - r - 1,
        n_f0_b1_f1_b0=m - 2 * p + r + 1,
        n_b1_f1_b0=p - r - 1,
        n_b1_b0=r + 1,
        n_w_b0=p - r - 1,
        n_w=r + 1,
    )


def check_dualpipev(num_ranks: int, num_microbatches: int) -> None:
    """DualPipeV's main step must run a non-negative number of times on every rank: m >= 2p-1.

    On rank 0 it runs m - 2p + 1 times; below 2p-1 the warm-up alone (steps 1-2) would run more chunk-0
    forwards than there are microbatches. DeepSeek's and torch's code ask for m >= 2p (one more than the steps
    need).
    """
    check_counts(num_ranks, num_microbatches)
    if dualpipev_steps(0, num_ranks, num_microbatches).n_f0_b1_f1_b0 < 0:
        raise ValueError(
            f"dualpipev needs num_microbatches >= 2*num_ranks - 1 = {2 * num_ranks - 1} "
            f"(its warm-up alone runs that many chunk-0 forwards on rank 0); got {num_microbatches}"
        )


def _run_cells(
    order: RankOrder, pattern: list[tuple[int, ActionKind, str]], times: int, paired: tuple[int, ...]
) -> list[Action | Overlap]:
    """`times` repetitions of `pattern` appended to `order` as whole runs (`RankOrder.runs`), returned as the
    rank's cells: the action at each offset in `paired` and the one after it, F then B adjacent on the rank, as one
    overlapped F&B chunk (torch's OVERLAP_F_B, in the same places as torch's ScheduleDualPipeV), the others alone.

    A pair starts when both inputs are in and takes `CostModel.overlap_factor` x (F + B); the default 1 means no
    overlap, F then B, as torch's runtime runs the sub-actions on one stream.
    """
    start, width = len(order.actions), len(pattern)
    order.runs(pattern, times)
    columns = [order.actions[start + k :: width] for k in range(width)]
    cells: list[list] = []  # per offset of the pattern, its cells in each repetition
    k = 0
    while k < width:
        if k in paired:
            cells.append(list(map(_new, repeat(Overlap), zip(zip(columns[k], columns[k + 1], strict=True)))))
            k += 2
        else:
            cells.append(columns[k])
            k += 1
    return list(chain.from_iterable(zip(*cells, strict=True)))


def _dualpipev_rank(rank: int, p: int, n: int) -> tuple[list[Action], list[Action | Overlap]]:
    return _dual_order(rank, p, n, rank, 2 * p - 1 - rank)  # chunk 0 and chunk 1 of DeepSeek's code


def _dual_order(rank: int, p: int, n: int, down: int, up: int) -> tuple[list[Action], list[Action | Overlap]]:
    """DeepSeek's eight steps on one rank, `down` its phase-0 stage and `up` its phase-1 stage: DualPipeV's rank
    `rank` of `p`, or DualPipe's rank whose distance from its nearer end is `rank`, with p half its ranks (DualPipe
    is DualPipeV's steps on each half, `dualpipe.py` and `dualpipev.py` count them alike). Returns the rank's
    compute actions and its cells (the same actions, each overlapped pair as one `Overlap`)."""
    steps = dualpipev_steps(rank, p, n)
    order = RankOrder()
    order.runs([(down, F, "F")], steps.n_f0)  # step 1: nF0
    order.runs([(down, F, "F"), (up, F, "F")], steps.n_f0_f1)  # step 2: nF0F1
    for _ in range(steps.n_b1_w1_f1):  # step 3: nI1W1F1 (zero bubble)
        order.backward(up)
        order.weight()
        order.forward(up)
    cells: list[Action | Overlap] = list(order.actions)
    four = [(down, F, "F"), (up, B, "backward"), (up, F, "F"), (down, B, "backward")]  # F0 B1 F1 B0
    main = steps.n_f0_b1_f1_b0  # step 4 (main): nF0B1F1B0, F&B pairs
    if main > 0 and rank == p - 1:  # DeepSeek: the first F0 B1 not overlapped, to shrink the bubble
        cells += _run_cells(order, four, 1, (2,))
        main -= 1
    cells += _run_cells(order, four, main, (0, 2))  # the rest: (F0 B1) (F1 B0) pairs
    cells += _run_cells(order, four[1:], steps.n_b1_f1_b0, (1,))  # step 5: nB1F1B0, B1 then (F1 B0)
    start = len(order.actions)
    split = False
    for i in range(steps.n_b1_b0):  # step 6: nB1B0, the second half splits off W
        if i == steps.n_b1_b0 // 2 and rank % 2 == 1:
            split = True
        order.backward(up, split)
        if i == steps.n_b1_b0 // 2 and rank % 2 == 0:
            split = True
        order.backward(down, split)
    for _ in range(steps.n_w_b0):  # step 7: nWB0
        order.weight()
        order.backward(down, split)
    order.flush_weights()  # step 8: nW (whatever W is still deferred)
    cells += order.actions[start:]
    return order.actions, cells


def _paired_schedule(
    name: str, p: int, m: int, rows: list[tuple[list[Action], list[Action | Overlap]]], **fields: object
) -> Schedule:
    """A V-placed schedule from each rank's (compute actions, cells): built once, its order checked once against
    the actions (`Schedule`), and kept as the action lists alone where no rank has a pair (as `schedule_from_order`
    keeps a plain order)."""
    actions = tuple(tuple(row) for row, _ in rows)
    order = tuple(tuple(cells) for _, cells in rows)
    paired = any(len(row) != len(cells) for row, cells in zip(actions, order, strict=True))  # a pair: one cell, two
    placement = v_placement(p)
    return Schedule(name, p, len(placement), m, placement, actions, order=order if paired else None, **fields)


def dualpipev(num_ranks: int, num_microbatches: int) -> Schedule:
    """DualPipeV (DeepSeek, the V-shaped DualPipe); needs m >= 2p-1."""
    check_dualpipev(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    return _paired_schedule("dualpipev", p, m, [_dualpipev_rank(rank, p, m) for rank in range(p)])


# --- DualPipe --------------------------------------------------------------------


def check_dualpipe(num_ranks: int, num_microbatches: int) -> None:
    """DualPipe runs on an even number of ranks, half its microbatches each way, at least the ranks' count each
    way (DeepSeek's `dualpipe.py`: num_chunks even and >= 2 x num_ranks)."""
    check_counts(num_ranks, num_microbatches)
    if num_ranks % 2:
        raise ValueError(f"dualpipe needs an even number of ranks (half feed each direction), got {num_ranks}")
    if num_microbatches % 2 or num_microbatches < 2 * num_ranks:
        raise ValueError(
            f"dualpipe needs an even num_microbatches of at least 2*num_ranks = {2 * num_ranks} (half go each "
            f"way); got {num_microbatches}"
        )


def dualpipe(num_ranks: int, num_microbatches: int) -> Schedule:
    """DualPipe (DeepSeek-V3): two pipelines over the same ranks in opposite directions, each rank holding one
    stage of each (a copy of the weights per direction), fed half the microbatches each from its own end.

    Stage s (s < p) is the forward direction's s-th on rank s; stage p + j the reverse direction's j-th on rank
    p-1-j: a V placement whose two arms are separate pipelines (`Schedule.pipelines` 2). Rank r runs DualPipeV's
    eight steps as rank min(r, p-1-r) of p/2, its own direction's stage as chunk 0 (its nearer end feeds it).
    Microbatch ids run 0..m/2-1 in each direction.
    """
    check_dualpipe(num_ranks, num_microbatches)
    p, half = num_ranks, num_microbatches // 2
    rows = []
    for rank in range(p):
        forward_stage, reverse_stage = rank, 2 * p - 1 - rank
        near = min(rank, p - 1 - rank)
        down, up = (forward_stage, reverse_stage) if rank < p // 2 else (reverse_stage, forward_stage)
        rows.append(_dual_order(near, p // 2, half, down, up))
    return _paired_schedule(
        "dualpipe", p, half, rows, pipelines=2, params={"microbatches_both_directions": num_microbatches}
    )


def _dualpipe_stashed(num_ranks: int, num_microbatches: int, chunks: int) -> list[int]:
    """DeepSeek's table: PP + 1 microbatches' activations per device (of whole stages), as a lower bound."""
    return [min(num_ranks + 1, num_microbatches) for _ in range(num_ranks)]


SCHEDULES: list[ScheduleInfo] = [
    ScheduleInfo(
        "zbv",
        zbv,
        "Zero Bubble V: two chunks per rank in a V (stage s and 2p-1-s on one rank); zero bubble "
        "at 1F1B's activation memory when F = I = W.",
        split_backward=True,
        placement="v",
        torch_class="ScheduleZBVZeroBubble",
        in_situ=True,
    ),
    ScheduleInfo(
        "dualpipev",
        dualpipev,
        "DualPipeV (DeepSeek): V placement, forward of one chunk paired with backward of the other "
        "(OVERLAP_F_B pairs, priced by the overlap factor), zero-bubble W at the edges. "
        "Needs num_microbatches >= 2*num_ranks - 1.",
        split_backward=True,
        placement="v",
        torch_class="ScheduleDualPipeV",
        planned=False,
        check=check_dualpipev,
    ),
    ScheduleInfo(
        "dualpipe",
        dualpipe,
        "DualPipe (DeepSeek-V3): two pipelines in opposite directions over the same ranks (two copies of the "
        "weights), half the microbatches each way, F&B pairs overlapped; bubble (PP/2-1)(F&B+B-3W). Needs an even "
        "number of ranks and an even num_microbatches >= 2*num_ranks.",
        split_backward=True,
        placement="v",
        planned=False,
        check=check_dualpipe,
        pipelines=2,
    ),
]

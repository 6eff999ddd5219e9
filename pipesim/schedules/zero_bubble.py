"""Zero-bubble schedules (split backward) and the looped breadth-first schedule.

Splitting the backward into I (gradient of the input, which the previous stage
waits for) and W (gradient of the weights, which nobody waits for) lets a
schedule slide W into what would otherwise be bubble (Qi et al., "Zero Bubble
Pipeline Parallelism", ICLR 2024):

* ``zb-h1``: 1F1B's warm-up, so 1F1B's activation memory; rank r defers its
  W passes by r backward steps, which fills part of the cool-down bubble.
* ``zb-h2``: twice the warm-up forwards (2(p-1-r) on rank r) and W deferred by
  2r steps; at F = I = W every rank works without a gap from its first action
  to its last (the paper's parallelogram), for 2p-1 stashed microbatches.
* ``zbv``: two chunks per rank in a V (stage s and 2p-1-s share a rank); zero
  bubble at 1F1B's memory when F, I and W take equal time.
* ``dualpipev``: DeepSeek's DualPipeV, the V-shaped DualPipe, in its 8 numbered
  steps; it pairs the forward of one chunk with the backward of the other.
* ``looped-bfs``: loop placement with v chunks per rank, every microbatch of a
  chunk before the next chunk (Lamy-Poirier, "Breadth-First Pipeline
  Parallelism", 2022; torch's ScheduleLoopedBFS).

The V-shaped orders follow torch.distributed.pipelining's ScheduleZBVZeroBubble
and ScheduleDualPipeV, which themselves follow the papers' reference code, so a
schedule built here runs unchanged through torch's CSV runtime.
"""

from __future__ import annotations

from collections import defaultdict

from pipesim.ir import Action, ActionKind, B, F, I, Schedule, W, loop_placement, make_schedule, v_placement
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts


class _RankOrder:
    """Appends one rank's actions, numbering microbatches in order per (stage, kind).

    B and I of a stage share one counter (a microbatch has one or the other),
    and every I leaves a pending W, so builders say *which* action comes next
    and never compute microbatch indices by hand, as torch's builders do.
    """

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self._next: dict[tuple[int, str], int] = defaultdict(int)
        self._pending_w: list[tuple[int, int]] = []  # (stage, microbatch) in I order

    def forward(self, stage: int) -> None:
        self._append(stage, F, "F")

    def backward(self, stage: int, split: bool = True) -> None:
        """I (leaving W pending) when `split`, else the full backward B."""
        mb = self._append(stage, I if split else B, "backward")
        if split:
            self._pending_w.append((stage, mb))

    def weight(self, stage: int | None = None) -> None:
        """The oldest pending W (of `stage`, or of any stage); nothing when none is pending."""
        for index, (pending_stage, mb) in enumerate(self._pending_w):
            if stage is None or pending_stage == stage:
                del self._pending_w[index]
                self.actions.append(Action(pending_stage, W, mb))
                return

    def flush_weights(self, stage: int | None = None) -> None:
        while any(stage is None or s == stage for s, _ in self._pending_w):
            self.weight(stage)

    def count(self, stage: int, kind: str) -> int:
        return self._next[(stage, kind)]

    def _append(self, stage: int, kind: ActionKind, counter: str) -> int:
        mb = self._next[(stage, counter)]
        self._next[(stage, counter)] = mb + 1
        self.actions.append(Action(stage, kind, mb))
        return mb


# --- ZB-H1 and ZB-H2 ------------------------------------------------------------


def _handcrafted(name: str, num_ranks: int, num_microbatches: int, warmup_factor: int) -> Schedule:
    """The paper's handcrafted schedules: `warmup_factor` 1 is ZB-H1, 2 is ZB-H2.

    Rank r runs min(k(p-1-r), m) warm-up forwards, then W of microbatch i
    right after I of microbatch i + k*r: warm-up forwards plus deferred W
    passes make k(p-1) on every rank, and the k*r deferred W passes fill the
    cool-down, where rank r would otherwise wait for the gradients coming back.
    """
    check_counts(num_ranks, num_microbatches)
    p, m, k = num_ranks, num_microbatches, warmup_factor
    rows = []
    for rank in range(p):
        warmup = min(k * (p - 1 - rank), m)
        delay = k * rank  # W lags I by this many microbatches
        row = [Action(rank, F, mb) for mb in range(warmup)]  # warm-up
        for i in range(m):  # steady (F, I, W) then cool-down (I, W) once the forwards run out
            if warmup + i < m:
                row.append(Action(rank, F, warmup + i))
            row.append(Action(rank, I, i))
            if i >= delay:
                row.append(Action(rank, W, i - delay))
        row.extend(Action(rank, W, mb) for mb in range(max(0, m - delay), m))  # flush deferred W
        rows.append(row)
    return make_schedule(name, p, m, loop_placement(p, p), rows)


def zb_h1(num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-H1: 1F1B's memory, bubble (p-1)(F+I-W) instead of 1F1B's (p-1)(F+I+W).

    Any p, m >= 1. The bubble is exact (zero transfer time, equal stages) when
    W <= F and m >= p; see tests/test_zero_bubble.py for the derivation.
    """
    return _handcrafted("zb-h1", num_ranks, num_microbatches, warmup_factor=1)


def zb_h2(num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-H2: 2p-1 stashed microbatches on rank 0, bubble (p-1)(F+I-2W).

    Any p, m >= 1. The bubble is exact (zero transfer time, equal stages) when
    W <= F, 2W <= F+I and m >= 2p-1 (below that the warm-up is cut short).
    """
    return _handcrafted("zb-h2", num_ranks, num_microbatches, warmup_factor=2)


# --- ZB-V -------------------------------------------------------------------------


def _zbv_rank(rank: int, p: int, n: int) -> list[Action]:
    """ZB-V on one rank for n microbatches (n >= 2p-1), in the paper's phases."""
    down, up = rank, 2 * p - 1 - rank  # chunk 0 (forward goes down the ranks), chunk 1 (back up)
    order = _RankOrder()
    for _ in range(2 * (p - rank) - 1):  # warm-up 1: chunk-0 forwards until chunk 1 can start
        order.forward(down)
    for _ in range(rank):  # warm-up 2: alternate the two chunks' forwards
        order.forward(up)
        order.forward(down)
    for _ in range(p - rank):  # warm-up 3: chunk 1 reaches steady state, W right after I
        order.forward(up)
        order.backward(up)
        order.weight(up)
    while order.count(up, "F") < order.count(down, "F") or order.count(down, "F") < n:  # steady
        if order.count(down, "F") < n:
            order.forward(down)
        order.backward(down)
        order.weight(down)
        order.forward(up)
        order.backward(up)
        order.weight(up)
    for _ in range(rank):  # cool-down 1: inputs' gradients first, W deferred
        order.backward(down)
        order.backward(up)
    for _ in range(p - rank):  # cool-down 2: deferred W fills the wait for chunk 0's I
        order.backward(down)
        order.weight(down)
    order.flush_weights(up)
    order.flush_weights(down)
    return order.actions


def zbv(num_ranks: int, num_microbatches: int) -> Schedule:
    """ZB-V: 2 chunks per rank in a V; zero bubble at 1F1B's memory when F = I = W.

    The order is built for max(m, 2p-1) microbatches and the surplus ones are
    dropped afterwards (as torch does): dropping actions never adds a
    dependency, so the shorter schedule stays deadlock-free.
    """
    check_counts(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    n = max(m, 2 * p - 1)
    rows = [[a for a in _zbv_rank(rank, p, n) if a.microbatch < m] for rank in range(p)]
    return make_schedule("zbv", p, m, v_placement(p), rows)


# --- DualPipeV --------------------------------------------------------------------


def check_dualpipev(num_ranks: int, num_microbatches: int) -> None:
    """DualPipeV's 8 steps need m >= 2p-1 microbatches.

    Step 4 runs m - 2p + r + 1 times on rank r; on rank 0 that count is
    negative below 2p-1, i.e. the warm-up alone (steps 1-3) would run more
    chunk-0 forwards than there are microbatches. DeepSeek's and torch's code
    ask for m >= 2p (one more than the steps need).
    """
    check_counts(num_ranks, num_microbatches)
    if num_microbatches < 2 * num_ranks - 1:
        raise ValueError(
            f"dualpipev needs num_microbatches >= 2*num_ranks - 1 = {2 * num_ranks - 1} "
            f"(its warm-up alone runs that many chunk-0 forwards on rank 0); got {num_microbatches}"
        )


def _fused(order: _RankOrder, forward_stage: int, backward_stage: int) -> None:
    """DualPipe's overlapped F&B chunk, written as F then B adjacent on the rank.

    The real kernel overlaps the two computations (and hides their transfers
    behind each other); pipesim runs them back to back, F first, exactly as
    torch's runtime runs OVERLAP_F_B's sub-actions. A simulated DualPipeV is
    therefore slower than the real one by the overlap it cannot model.
    """
    order.forward(forward_stage)
    order.backward(backward_stage, split=False)


def _dualpipev_rank(rank: int, p: int, n: int) -> list[Action]:
    down, up = rank, 2 * p - 1 - rank  # chunk 0 and chunk 1 of DeepSeek's code
    order = _RankOrder()
    for _ in range(2 * (p - rank - 1)):  # step 1: nF0
        order.forward(down)
    for _ in range(rank + 1):  # step 2: nF0F1
        order.forward(down)
        order.forward(up)
    for _ in range(p - rank - 1):  # step 3: nI1W1F1 (zero bubble)
        order.backward(up)
        order.weight()
        order.forward(up)
    for i in range(n - 2 * p + rank + 1):  # step 4 (main): nF0B1F1B0, F&B pairs
        if i == 0 and rank == p - 1:  # DeepSeek: not overlapped, to shrink the bubble
            order.forward(down)
            order.backward(up, split=False)
        else:
            _fused(order, down, up)
        _fused(order, up, down)
    for _ in range(p - rank - 1):  # step 5: nB1F1B0
        order.backward(up, split=False)
        _fused(order, up, down)
    split = False
    for i in range(rank + 1):  # step 6: nB1B0, the second half splits off W
        if i == (rank + 1) // 2 and rank % 2 == 1:
            split = True
        order.backward(up, split)
        if i == (rank + 1) // 2 and rank % 2 == 0:
            split = True
        order.backward(down, split)
    for _ in range(p - rank - 1):  # step 7: nWB0
        order.weight()
        order.backward(down, split)
    order.flush_weights()  # step 8: nW
    return order.actions


def dualpipev(num_ranks: int, num_microbatches: int) -> Schedule:
    """DualPipeV (DeepSeek, the V-shaped DualPipe); needs m >= 2p-1."""
    check_dualpipev(num_ranks, num_microbatches)
    p, m = num_ranks, num_microbatches
    rows = [_dualpipev_rank(rank, p, m) for rank in range(p)]
    return make_schedule("dualpipev", p, m, v_placement(p), rows)


# --- Looped BFS -------------------------------------------------------------------


def looped_bfs(num_ranks: int, num_microbatches: int, num_virtual_stages: int = 2) -> Schedule:
    """Looped breadth-first: stage s on rank s mod p; all microbatches of a chunk, then the next.

    Forwards run the chunks in order; backwards run them in reverse, newest
    microbatch first, so the last stage starts its backward on the microbatch
    it has just finished. Every microbatch stays stashed (GPipe's memory).
    """
    check_counts(num_ranks, num_microbatches)
    if not isinstance(num_virtual_stages, int) or num_virtual_stages < 1:
        raise ValueError(f"looped-bfs needs num_virtual_stages >= 1 (chunks per rank), got {num_virtual_stages!r}")
    p, m, v = num_ranks, num_microbatches, num_virtual_stages
    rows = []
    for rank in range(p):
        stages = range(rank, p * v, p)
        row = [Action(s, F, mb) for s in stages for mb in range(m)]  # forward, chunk by chunk
        row += [Action(s, B, mb) for s in reversed(stages) for mb in reversed(range(m))]  # backward
        rows.append(row)
    return make_schedule("looped-bfs", p, m, loop_placement(p, p * v), rows, num_virtual_stages=v)


SCHEDULES: list[ScheduleInfo] = [
    ScheduleInfo(
        "zb-h1",
        zb_h1,
        "Zero Bubble H1: 1F1B's warm-up and memory, backward split into I and W, W deferred "
        "into the cool-down; bubble (p-1)(F+I-W) instead of (p-1)(F+I+W).",
        split_backward=True,
    ),
    ScheduleInfo(
        "zb-h2",
        zb_h2,
        "Zero Bubble H2: 2(p-1-r) warm-up forwards and deferred W; no gap on any rank when "
        "F = I = W, for 2p-1 stashed microbatches (about twice 1F1B's memory).",
        split_backward=True,
    ),
    ScheduleInfo(
        "zbv",
        zbv,
        "Zero Bubble V: two chunks per rank in a V (stage s and 2p-1-s on one rank); zero bubble "
        "at 1F1B's activation memory when F = I = W.",
        split_backward=True,
    ),
    ScheduleInfo(
        "dualpipev",
        dualpipev,
        "DualPipeV (DeepSeek): V placement, forward of one chunk paired with backward of the other "
        "(run back to back here), zero-bubble W at the edges. Needs num_microbatches >= 2*num_ranks - 1.",
        split_backward=True,
    ),
    ScheduleInfo(
        "looped-bfs",
        looped_bfs,
        "Looped breadth-first: v chunks per rank (stage s on rank s mod p), all microbatches of a chunk "
        "before the next; stashes every microbatch.",
        options=("num_virtual_stages",),
    ),
]

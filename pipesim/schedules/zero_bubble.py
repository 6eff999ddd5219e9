"""Zero-bubble schedules with one stage per rank (split backward), and the rank order they share with V shapes.

Splitting the backward into I (gradient of the input, which the previous stage
waits for) and W (gradient of the weights, which nobody waits for) lets a
schedule slide W into what would otherwise be bubble (Qi et al., "Zero Bubble
Pipeline Parallelism", ICLR 2024):

* ``zb-h1``: 1F1B's warm-up, so 1F1B's activation memory; rank r defers its
  W passes by r backward steps, which fills part of the cool-down bubble.
* ``zb-h2``: twice the warm-up forwards (2(p-1-r) on rank r) and W deferred by
  2r steps; at F = I = W every rank works without a gap from its first action
  to its last (the paper's parallelogram), for 2p-1 stashed microbatches.

The V-shaped zero-bubble schedules (zbv, dualpipev) live in `v_shapes`; dualpipev
builds its rank orders with `RankOrder` from here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from itertools import chain, repeat

from pipesim.ir import Action, ActionKind, B, F, I, Schedule, W, loop_placement, make_schedule
from pipesim.schedules import ScheduleInfo
from pipesim.schedules.basic import check_counts

_new = tuple.__new__  # Action(...) costs a Python-level __new__ per action: the planner builds 10^6


class RankOrder:
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
                self.actions.append(_new(Action, (pending_stage, W, mb)))
                return

    def flush_weights(self, stage: int | None = None) -> None:
        while any(stage is None or s == stage for s, _ in self._pending_w):
            self.weight(stage)

    def runs(self, pattern: list[tuple[int, ActionKind, str]], times: int) -> None:
        """`times` repetitions of `pattern`, each (stage, kind, counter) taking the next microbatch of its counter:
        the actions `forward` and `backward(split=False)` would append one by one, made as whole lists (DualPipe's
        main steps repeat four actions 10^3 times per rank). Its counters must differ, and it holds no I (each I
        leaves a W pending)."""
        keys = [(stage, counter) for stage, _, counter in pattern]
        if len(set(keys)) != len(keys) or any(kind is I for _, kind, _ in pattern):
            raise ValueError(f"a run's pattern needs counters of its own and no I, got {pattern}")
        if times <= 0:
            return
        columns = []
        for (stage, kind, _), key in zip(pattern, keys, strict=True):
            first = self._next[key]
            self._next[key] = first + times
            columns.append(map(_new, repeat(Action), zip(repeat(stage), repeat(kind), range(first, first + times))))
        self.actions.extend(chain.from_iterable(zip(*columns, strict=True)))

    def count(self, stage: int, kind: str) -> int:
        return self._next[(stage, kind)]

    def _append(self, stage: int, kind: ActionKind, counter: str) -> int:
        mb = self._next[(stage, counter)]
        self._next[(stage, counter)] = mb + 1
        self.actions.append(_new(Action, (stage, kind, mb)))
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
                row.append(_new(Action, (rank, F, warmup + i)))
            row.append(_new(Action, (rank, I, i)))
            if i >= delay:
                row.append(_new(Action, (rank, W, i - delay)))
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


def _stashed(warmup_factor: int) -> Callable[[int, int, int], list[int]]:
    """The warm-up forwards plus the first steady one, as `_handcrafted` orders them."""

    def stashed(num_ranks: int, num_microbatches: int, chunks: int) -> list[int]:
        return [min(warmup_factor * (num_ranks - 1 - rank) + 1, num_microbatches) for rank in range(num_ranks)]

    return stashed


SCHEDULES: list[ScheduleInfo] = [
    ScheduleInfo(
        "zb-h1",
        zb_h1,
        "Zero Bubble H1: 1F1B's warm-up and memory, backward split into I and W, W deferred "
        "into the cool-down; bubble (p-1)(F+I-W) instead of (p-1)(F+I+W).",
        split_backward=True,
        torch_class="ScheduleInterleavedZeroBubble",  # ZB1P; with one stage per rank it is ZB-H1
        in_situ=True,
        stashed=_stashed(1),
    ),
    ScheduleInfo(
        "zb-h2",
        zb_h2,
        "Zero Bubble H2: 2(p-1-r) warm-up forwards and deferred W; when F = I = W no rank waits between "
        "its first and last action (the paper's per-stage bubble is 0; the step still has the start ramp), "
        "for 2p-1 stashed microbatches (about twice 1F1B's memory).",
        split_backward=True,
        planned=False,
        stashed=_stashed(2),
    ),
]

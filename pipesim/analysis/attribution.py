"""Where every millisecond of a measured step went, rank by rank: compute, schedule idle, communication wait,
overhead.

A measured step on rank r lasts the step's time T (the earliest rank's first start to the latest rank's end of
the optimizer step). It splits into four parts that add up to T exactly:

* compute: the time inside the rank's own actions (the sum of its spans' durations);
* schedule idle: the idle the schedule itself imposes given this step's own action durations. The step is
  replayed (`pipesim.sim.simulate.sweep`) with every action taking exactly its measured time and transfers taking
  none; wherever the rank idles (before its first action, between two, after its last), the replay's idle at
  the same place is what no implementation could avoid;
* communication wait: of the idle beyond that, the time the rank was blocked in a receive or send there (the
  measured CommSpans): the replay expects no transfer time at all;
* overhead: the rest: optimizer step and gradient zeroing, Python dispatch gaps between actions, clock skew.

Every idle interval is cut into these three parts (`LostTime`, which the overlay draws where it happened), so
per rank the parts add up to T exactly and none is negative. The summary is the split of the median step.
"""

from __future__ import annotations

import statistics
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from itertools import accumulate
from typing import NamedTuple

from pipesim._perf import paused_gc
from pipesim.ir import Schedule
from pipesim.records import COPY_KINDS, CommSpan, Timeline, select_replica
from pipesim.semantics.dag import Dependencies, dependencies
from pipesim.sim.simulate import sweep

# Above this coefficient of variation of the measured step times, a run is too noisy for its prediction error to
# be judged: on a shared machine other work's load, not the schedule, decides the figure.
NOISY_STEP_CV = 0.05


def coefficient_of_variation(values: Sequence[float]) -> float | None:
    """Population standard deviation over the mean; None for fewer than 2 values or a mean that is not positive."""
    mean = statistics.fmean(values) if len(values) > 1 else 0.0
    return statistics.pstdev(values) / mean if mean > 0 else None


def reliable(step_cv: float) -> bool:
    """The one too-noisy rule (the Run page, `executor run`'s summary and `verify-plan`): a run whose step times
    vary more than NOISY_STEP_CV says more about the machine than about the model."""
    return step_cv <= NOISY_STEP_CV


def spread(measured: Timeline, step_times_ms: Sequence[float]) -> dict:
    """How much the run varied: the step times' coefficient of variation, and per action the median over all
    actions of each action's CV across steps. `reliable` is False when the step CV exceeds NOISY_STEP_CV."""
    cv = coefficient_of_variation
    times = [float(t) for t in step_times_ms]
    step_cv = cv(times) or 0.0
    per_action: dict = {}
    for span in measured.spans:
        per_action.setdefault((span.rank, span.action), []).append(span.end - span.start)
    cvs = [c for c in map(cv, per_action.values()) if c is not None]
    return {
        "step_cv": step_cv,
        "action_cv_median": statistics.median(cvs) if cvs else 0.0,
        "threshold_step_cv": NOISY_STEP_CV,
        "reliable": reliable(step_cv),
        "steps": len(times),
    }


@dataclass(frozen=True)
class RankShare:
    """One rank's step time, split; the four parts add up to `step_ms`."""

    rank: int
    step_ms: float
    compute_ms: float
    schedule_idle_ms: float
    comm_wait_ms: float
    overhead_ms: float


class LostTime(NamedTuple):
    """Where on rank `rank`'s measured timeline time went to `part` (schedule_idle, comm_wait or overhead)."""

    rank: int
    part: str
    start: float
    end: float


@dataclass(frozen=True)
class StepAttribution:
    step: int
    step_ms: float
    replay_ms: float  # the step replayed with its own action times and free transfers
    ranks: tuple[RankShare, ...]
    lost: tuple[LostTime, ...] = ()  # the idle intervals behind the shares, for the overlay


def attribute_step(schedule: Schedule, measured: Timeline, step: int, step_ms: float) -> StepAttribution:
    """Split measured step `step` (lasting `step_ms`, its spans timed from the step's start) into the four parts.

    Each idle interval of a rank (before its first action, between two actions, after its last) is cut in
    three: schedule idle, up to the idle the replay has at the same place; of the excess, communication wait
    up to the time the rank was blocked there on a transfer; the rest overhead. Every interval is cut fully,
    so per rank compute + the three parts = `step_ms` by construction.
    """
    spans = {span.action: span for span in measured.spans if span.step == step}
    comm = [c for c in measured.comm if c.step == step]
    return _attribute(schedule, dependencies(schedule), step, step_ms, spans, comm)


def _attribute(
    schedule: Schedule, deps: Dependencies, step: int, step_ms: float, spans: dict, comm: list[CommSpan]
) -> StepAttribution:
    """`attribute_step` on one step's spans (by action) and comm spans, with the schedule's dependencies."""
    missing = [a for a in deps.actions if a not in spans]
    if missing:
        raise ValueError(
            f"step {step} of the measured timeline has no span for {missing[0]}; was it measured from this schedule?"
        )
    durations = [spans[a].end - spans[a].start for a in deps.actions]
    if deps.copies is not None:  # the copy engine's OFFLOADs and RELOADs, each as long as it was measured
        moved = {c.action: c.end - c.start for c in comm if c.kind in COPY_KINDS}
        durations += [moved.get(entry, 0.0) for entry in deps.copies.entries]
        comm = [c for c in comm if c.kind not in COPY_KINDS]  # a copy blocks its lane, not the rank's compute
    replay_starts, replay_ends, stuck = sweep(deps, durations, [0.0] * len(durations))
    if stuck:
        raise ValueError("the schedule deadlocks; a measured step cannot have run it")
    replay_ms = max(replay_ends, default=0.0)
    intervals: list[list[tuple[float, float]]] = [[] for _ in range(schedule.num_ranks)]
    for transfer in comm:
        intervals[transfer.rank].append((transfer.start, transfer.end))
    blocked = [_Blocked(rank_intervals) for rank_intervals in intervals]
    shares, lost = [], []
    for rank in range(schedule.num_ranks):
        lo, hi = deps.offsets[rank], deps.offsets[rank + 1]
        # (measured idle from, to; the replay's idle at the same place) for every gap of the rank
        gaps, previous, replay_previous = [], 0.0, 0.0
        for i in range(lo, hi):
            span = spans[deps.actions[i]]
            gaps.append((previous, span.start, replay_starts[i] - replay_previous))
            previous, replay_previous = span.end, replay_ends[i]
        gaps.append((previous, max(step_ms, previous), replay_ms - replay_previous))
        marks = [mark for g0, g1, replay_idle in gaps for mark in _cut(rank, g0, g1, replay_idle, blocked[rank])]
        lost.extend(marks)
        parts = {part: sum(m.end - m.start for m in marks if m.part == part) for part in _PARTS}
        shares.append(
            RankShare(
                rank, step_ms, sum(durations[lo:hi]), parts["schedule_idle"], parts["comm_wait"], parts["overhead"]
            )
        )
    return StepAttribution(step, step_ms, replay_ms, tuple(shares), tuple(lost))


_PARTS = ("schedule_idle", "comm_wait", "overhead")


class _Blocked:
    """A rank's time blocked on transfers, asked for any window in O(log n): `before(t)` is the blocked time
    (overlapping transfers counted each) up to t, the sum over transfers [s, e] of clamp(t - s, 0, e - s), which
    is sum(t - s for s < t) - sum(t - e for e < t): two bisections into sorted starts and ends and their prefix
    sums. A step of 10^4 transfers on a rank once cost 10^4 operations per idle interval."""

    def __init__(self, intervals: list[tuple[float, float]]) -> None:
        kept = [(start, end) for start, end in intervals if end > start]
        self.starts = sorted(start for start, _ in kept)
        self.ends = sorted(end for _, end in kept)
        self.start_sums = [0.0, *accumulate(self.starts)]
        self.end_sums = [0.0, *accumulate(self.ends)]

    def before(self, t: float) -> float:
        started, ended = bisect_left(self.starts, t), bisect_left(self.ends, t)
        return (started * t - self.start_sums[started]) - (ended * t - self.end_sums[ended])

    def within(self, g0: float, g1: float) -> float:
        return max(self.before(g1) - self.before(g0), 0.0) if self.starts else 0.0


def _cut(rank: int, g0: float, g1: float, replay_idle: float, blocked: _Blocked) -> list[LostTime]:
    """One idle interval [g0, g1] cut into its parts, laid out in the order they happen: overhead (dispatch)
    first, then the wait the schedule imposes, then the transfer's own wait at the end."""
    gap = g1 - g0
    if gap <= 0:
        return []
    schedule_idle = min(max(replay_idle, 0.0), gap)
    waited = blocked.within(g0, g1)
    comm = min(gap - schedule_idle, waited)
    overhead = gap - schedule_idle - comm
    marks, at = [], g0
    for part, length in (("overhead", overhead), ("schedule_idle", schedule_idle), ("comm_wait", comm)):
        if length > 0:
            marks.append(LostTime(rank, part, at, at + length))
            at += length
    return marks


@paused_gc()  # every step's spans, gaps and marks: many small objects, no cycles (pipesim._perf)
def attribute_run(schedule: Schedule, measured: Timeline, step_times_ms: Sequence[float]) -> dict:
    """Every measured step attributed, and per rank the medians over steps: the `analysis.json` document. A run
    that kept every data-parallel replica is attributed by its replica 0 (the schedule's replay is of one)."""
    measured = select_replica(measured, 0)
    # One pass groups the spans by step, and the dependencies are built once: linear in the timeline, however
    # many steps it holds (a profiler trace of hundreds of steps once took a pass over every span per step).
    deps = dependencies(schedule)
    spans_by_step: dict[int, dict] = {step: {} for step in range(len(step_times_ms))}
    comm_by_step: dict[int, list[CommSpan]] = {step: [] for step in spans_by_step}
    for span in measured.spans:
        if span.step in spans_by_step:
            spans_by_step[span.step][span.action] = span
    for transfer in measured.comm:
        if transfer.step in comm_by_step:
            comm_by_step[transfer.step].append(transfer)
    steps = [
        _attribute(schedule, deps, step, float(t), spans_by_step[step], comm_by_step[step])
        for step, t in enumerate(step_times_ms)
    ]
    if not steps:
        raise ValueError("the measured timeline has no steps to attribute")
    # The summary is the median step's split (median_low: an actual step), so its parts still add up exactly;
    # medians taken part by part would not.
    median_ms = statistics.median_low(s.step_ms for s in steps)
    typical = next(s for s in steps if s.step_ms == median_ms)
    return {
        "format": "pipesim.analysis",
        "version": 1,
        "units": {"time": "ms"},
        "definition": "compute + schedule_idle + comm_wait + overhead = step time, per rank "
        "(pipesim.analysis.attribution)",
        "step_ms": typical.step_ms,
        "median_step": typical.step,
        "replay_ms": typical.replay_ms,
        "ranks": [{k: v for k, v in asdict(r).items() if k != "step_ms"} for r in typical.ranks],
        "spread": spread(measured, step_times_ms),
        "steps": [
            {"step": s.step, "step_ms": s.step_ms, "replay_ms": s.replay_ms, "ranks": [asdict(r) for r in s.ranks]}
            for s in steps
        ],
    }

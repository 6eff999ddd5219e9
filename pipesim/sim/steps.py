"""Several training steps in a row: the step time as a user measures it, and gains that show only across steps.

One simulated step ends, on each rank, when its last action has ended and its per-step work outside the
schedule (`CostModel.step_overhead_ms`: optimizer step and gradient zeroing) is done; the step time is the
latest of those ends, counted from the earliest start. That is the definition the executor measures
(`step_times_ms` in measured.json), and `step_time_ms` is its one home on the simulated side.

Between steps there are two ways to go on:
* `barrier=True` (what pipesim's executor does: a barrier opens every step): every rank starts step k+1 when
  the last rank has finished step k, so every step takes the same time;
* `barrier=False` (what a training loop without a global sync does): each rank starts step k+1 as soon as its
  own optimizer step is done, and only data dependencies hold it back. A rank that finishes early (the first
  rank of 1F1B, or any rank of ZB-H2, whose W's fill the tail) runs into the next step's warm-up, so the
  steady-state step time can be shorter than one isolated step.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import repeat

from pipesim._perf import paused_gc
from pipesim.cost.model import CostModel
from pipesim.ir import Schedule
from pipesim.limits import MAX_ACTIONS
from pipesim.records import COLLECTIVE_KINDS, Span, Timeline
from pipesim.semantics.dag import dependencies
from pipesim.sim.data_parallel import GradSync, grad_sync
from pipesim.sim.simulate import deadlock_error, engine_inputs, run_engine, simulate

MAX_STEPS = 1000


def rank_ends(timeline: Timeline) -> list[float]:
    """Per rank, when its last action of the timeline ends, or its last stated collective (torch's REDUCE_GRAD
    after the last backward); 0 when it has none."""
    ends = [0.0] * timeline.num_ranks
    for span in timeline.spans:
        if span.end > ends[span.rank]:
            ends[span.rank] = span.end
    for comm in timeline.comm:
        if comm.kind in COLLECTIVE_KINDS and comm.end > ends[comm.rank]:
            ends[comm.rank] = comm.end
    return ends


def step_tail_ms(timeline: Timeline, cost: CostModel, sync: GradSync | None = None) -> tuple[float, ...]:
    """Per rank, what follows its last action in a step: the gradient all-reduce's unhidden part when the
    pipeline is replicated (pipesim.data_parallel; `sync` when the caller already has it), then the overhead
    (optimizer step, zeroing)."""
    extra = (sync or grad_sync(timeline, cost)).extra_ms
    return tuple(a + b for a, b in zip(extra, cost.overhead_ms(timeline.num_ranks), strict=True))


def step_time_ms(timeline: Timeline, overhead_ms: Sequence[float]) -> float:
    """One simulated step's time: from the step's start (0 on the simulation's clock, before the first dispatch
    gap, as the executor's step starts before its first action) to the latest rank's end of its actions plus
    its overhead."""
    return max(end + extra for end, extra in zip(rank_ends(timeline), overhead_ms, strict=True))


@paused_gc()
def simulate_steps(schedule: Schedule, cost: CostModel, num_steps: int, *, barrier: bool = True) -> Timeline:
    """`num_steps` consecutive steps on one clock from 0 (spans carry their step); meta holds each step's
    completion and time, the total, and the per-rank overhead placed after each rank's last action."""
    if isinstance(num_steps, bool) or not isinstance(num_steps, int) or not 1 <= num_steps <= MAX_STEPS:
        raise ValueError(f"the number of steps must be an integer from 1 to {MAX_STEPS}, got {num_steps!r}")
    if num_steps * schedule.num_actions > MAX_ACTIONS:
        raise ValueError(
            f"{num_steps} steps of {schedule.num_actions} actions exceed the limit of {MAX_ACTIONS} "
            "actions (pipesim.limits): simulate fewer steps"
        )
    overhead = cost.overhead_ms(schedule.num_ranks)
    if barrier:  # every step is the same step, shifted
        one = simulate(schedule, cost)
        overhead = step_tail_ms(one, cost)
        period = step_time_ms(one, overhead)
        spans = tuple(
            s._replace(start=s.start + k * period, end=s.end + k * period, step=k)
            for k in range(num_steps)
            for s in one.spans
        )
        return _timeline(schedule, cost, one, spans, [(k + 1) * period for k in range(num_steps)], overhead, barrier)
    cost.check_fits(schedule)
    deps = dependencies(schedule)
    durations, hops, gaps, _, _ = engine_inputs(schedule, cost, deps)
    clock = [0.0] * schedule.num_ranks
    spans: list[Span] = []
    step_ends = []
    for step in range(num_steps):
        starts, ends, stuck = run_engine(deps, durations, hops, gaps, cost.shared_cores, rank_start=clock)
        if stuck:
            raise deadlock_error(deps, stuck)
        step_spans = list(map(tuple.__new__, repeat(Span), zip(deps.ranks, deps.actions, starts, ends, repeat(step))))
        spans.extend(step_spans)
        tail = overhead
        if cost.data_parallel > 1:  # each rank's unhidden gradient all-reduce comes before its optimizer step
            tail = step_tail_ms(Timeline(schedule.num_ranks, tuple(step_spans)), cost)
        for rank in range(schedule.num_ranks):  # a rank with no action in the step only pays its overhead
            lo, hi = deps.offsets[rank], deps.offsets[rank + 1]
            clock[rank] = (ends[hi - 1] if hi > lo else clock[rank]) + tail[rank]
        step_ends.append(max(clock))
    return _timeline(schedule, cost, None, tuple(spans), step_ends, overhead, barrier)


def _timeline(
    schedule: Schedule,
    cost: CostModel,
    one: Timeline | None,
    spans: tuple[Span, ...],
    step_ends: list[float],
    overhead: Sequence[float],
    barrier: bool,
) -> Timeline:
    """Step k's time is from step k-1's completion (every rank done, overhead included) to its own: with
    overlapping steps, the period at which steps complete, which is what throughput sees."""
    previous = [0.0] + step_ends[:-1]
    meta = (
        dict(one.meta)
        if one is not None
        else {
            "num_stages": schedule.num_stages,
            "num_microbatches": schedule.num_microbatches,
            "stage_to_rank": list(schedule.stage_to_rank),
            "cost_source": cost.source,
            "recompute": cost.recompute,
        }
    )
    meta.update(
        num_steps=len(step_ends),
        barrier=barrier,
        step_ends_ms=step_ends,
        step_times_ms=[b - a for a, b in zip(previous, step_ends, strict=True)],
        total_ms=step_ends[-1],
        overhead_ms=list(overhead),
    )
    return Timeline(
        num_ranks=schedule.num_ranks, spans=spans, source="simulated", schedule_name=schedule.name, meta=meta
    )

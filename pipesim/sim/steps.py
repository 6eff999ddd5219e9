"""One training step as a training loop sees it, and several in a row: the step time, written once.

One simulated step ends, on each rank, when its last action has ended (or its last collective torch states
after it), its gradient reduction is done (`pipesim.sim.data_parallel`: the part the remaining backward did not
hide) and its per-step work outside the schedule (`CostModel.runtime.step_overhead_ms`: optimizer step and
gradient zeroing) is done; the step time is the latest of those ends, counted from the step's start. That is the
definition the executor measures (`step_times_ms` in measured.json), and `step_time_ms` is its one home on the
simulated side: `simulate_step` (the CLI's simulate and compare, the app, the executor's prediction) and the
planner's search (`pipesim.plan.search`, over the engine's arrays) both end in it.

Between steps there are two ways to go on:
* `barrier=True` (what pipesim's executor does: a barrier opens every step): every rank starts step k+1 when
  the last rank has finished step k, so every step takes the same time;
* `barrier=False` (what a training loop without a global sync does): each rank starts step k+1 as soon as its
  own optimizer step is done, and only data dependencies hold it back. A rank that finishes early (the first
  rank of 1F1B, or any rank of ZB-H2, whose W's fill the tail) runs into the next step's warm-up, so the
  steady-state step time can be shorter than one isolated step.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat

from pipesim._perf import paused_gc
from pipesim.cost.model import CostModel
from pipesim.ir import Schedule
from pipesim.limits import MAX_ACTIONS
from pipesim.records import COLLECTIVE_KINDS, Span, Timeline, remake
from pipesim.semantics.dag import dependencies
from pipesim.sim.data_parallel import (
    AFTER_BACKWARD,
    charged_schedule,
    last_gradients,
    reduction_charge,
    reduction_spans,
    reduction_windows,
)
from pipesim.sim.simulate import deadlock_error, engine_inputs, run_engine, simulate

MAX_STEPS = 1000


def step_time_ms(rank_ends: Sequence[float], tails_ms: Sequence[float]) -> float:
    """The step time: from the step's start (0 on the simulation's clock, before the first dispatch gap, as the
    executor's step starts before its first action) to the latest rank's end of its actions plus its tail."""
    step = max(end + tail for end, tail in zip(rank_ends, tails_ms, strict=True))
    if not math.isfinite(step):
        raise ValueError(
            "the step would take forever: its times (actions, collectives, overhead) overflow to infinity; "
            "give sizes and times that sum to a finite number"
        )
    return step


def rank_tails_ms(
    rank_ends: Sequence[float], reductions_done: Sequence[float], overhead_ms: Sequence[float]
) -> tuple[float, ...]:
    """Per rank, what follows its last action in a step: the part of its gradient reduction still running
    (done at `reductions_done`, -inf for none), then its overhead (optimizer step, zeroing)."""
    return tuple(
        max(done - end, 0.0) + extra for end, done, extra in zip(rank_ends, reductions_done, overhead_ms, strict=True)
    )


def step_tails(
    finished: Sequence[float],
    ends: Sequence[float],
    last: list[list[tuple[int, int]]] | None,
    cost: CostModel,
    charge: str,
) -> tuple[tuple[float, ...], list[list[tuple[int, float, float]]]]:
    """Per rank, its tail after `finished` (its last action, or the collectives stated after it), and the
    reduction windows behind it: under AFTER_BACKWARD each stage's all-reduce after its last backward (`last`:
    `last_gradients` of the engine's action order, whose ends are `ends`), then the overhead. What every
    simulated step (`simulate_step`, `simulate_steps`, the planner) hands to `step_time_ms`."""
    windows: list[list[tuple[int, float, float]]] = []
    done = [-math.inf] * len(finished)
    if charge == AFTER_BACKWARD:
        assert last is not None, "AFTER_BACKWARD needs each rank's last backward per stage"
        windows = reduction_windows(last, ends, cost)
        done = [row[-1][2] if row else -math.inf for row in windows]
        if not all(math.isfinite(end) for end in done if end > -math.inf):
            raise ValueError(
                "the gradient all-reduce would take forever: its bytes over the data-parallel link (bandwidth, "
                "latency, replicas) overflow to infinity; give sizes and times that sum to a finite number"
            )
    return rank_tails_ms(finished, done, cost.overhead_ms(len(finished))), windows


def rank_ends(timeline: Timeline, offsets: list[int] | None = None) -> list[float]:
    """Per rank, when its last action of the timeline ends, or its last stated collective (torch's REDUCE_GRAD
    after the last backward); 0 when it has none. `offsets` (a simulation's `Dependencies.offsets`, its spans laid
    rank by rank in each rank's order, one after another): each rank's last span is its latest, read directly."""
    ends = [0.0] * timeline.num_ranks
    if offsets is not None:
        columns = timeline.columns  # the engine's, where it holds them: its spans then stay unbuilt
        for rank in range(timeline.num_ranks):
            if offsets[rank + 1] > offsets[rank]:
                last = offsets[rank + 1] - 1
                ends[rank] = max(0.0, columns.ends[last] if columns is not None else timeline.spans[last][3])
    else:
        for rank, _, _, end, _, _ in timeline.spans:  # unpacked (a Span's six fields): no attribute lookups
            if end > ends[rank]:
                ends[rank] = end
    for comm in timeline.comm:
        if comm.kind in COLLECTIVE_KINDS and comm.end > ends[comm.rank]:
            ends[comm.rank] = comm.end
    return ends


@dataclass(frozen=True)
class SimulatedStep:
    """One simulated step: its timeline (the data-parallel reductions among its comm spans; meta holds
    `step_ms` and `tail_ms`), each rank's tail after its last action, and the step time."""

    timeline: Timeline
    tail_ms: tuple[float, ...]
    step_ms: float
    charge: str  # where the gradient reduction was charged (pipesim.sim.data_parallel.reduction_charge)


def simulate_step(schedule: Schedule, cost: CostModel) -> SimulatedStep:
    """One step of `schedule` under `cost`, as a training loop runs it: the reduction charged where
    `reduction_charge` says, the step time by `step_time_ms`. Raises DeadlockError / ValueError as `simulate`."""
    charge = reduction_charge(schedule, cost)
    charged = charged_schedule(schedule, charge)
    deps = dependencies(charged)
    timeline = simulate(charged, cost, deps)  # spans in the engine's order: each rank's, as it runs
    alone = cost.shared_cores is None or cost.shared_cores >= deps.num_ranks  # each rank's spans back to back
    finished = rank_ends(timeline, deps.offsets if alone else None)
    last = ends = actions = None  # what the reduction after each backward reads: no list of 10^5 built otherwise
    if charge == AFTER_BACKWARD:
        actions = deps.actions
        last = last_gradients(deps.ranks, actions, timeline.num_ranks)
        ends = timeline.columns.ends if timeline.columns is not None else [span.end for span in timeline.spans]
    tails, windows = step_tails(finished, ends or [], last, cost, charge)
    extra_comm = reduction_spans(windows, actions or [], cost.dp_group.replicas) if windows else ()
    step = step_time_ms(finished, tails)
    meta = {**timeline.meta, "step_ms": step, "tail_ms": list(tails)}
    if cost.dp_group.replicas > 1:
        meta.update(data_parallel=cost.dp_group.replicas, reduction=charge)
    return SimulatedStep(remake(timeline, comm=timeline.comm + extra_comm, meta=meta), tails, step, charge)


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
    if barrier:  # every step is the same step, shifted
        one = simulate_step(schedule, cost)
        period = one.step_ms
        spans = tuple(
            s._replace(start=s.start + k * period, end=s.end + k * period, step=k)
            for k in range(num_steps)
            for s in one.timeline.spans
        )
        step_ends = [(k + 1) * period for k in range(num_steps)]
        return _timeline(schedule, cost, one.timeline, spans, step_ends, one.tail_ms, barrier)
    cost.check_fits(schedule)
    charge = reduction_charge(schedule, cost)
    scheduled = charged_schedule(schedule, charge)
    deps = dependencies(scheduled)
    inputs = engine_inputs(scheduled, cost, deps)
    num_ranks = schedule.num_ranks
    overhead = cost.overhead_ms(num_ranks)
    # torch's collectives stated after a rank's last action run back to back there (simulate's `tails`)
    after_last = [sum(cost.collective_ms(c.stage, c.kind) for c in row) for row in inputs.tails] or [0.0] * num_ranks
    last = last_gradients(deps.ranks, deps.actions, num_ranks) if charge == AFTER_BACKWARD else None
    clock = [0.0] * num_ranks
    spans: list[Span] = []
    step_ends = []
    for step in range(num_steps):
        starts, ends, stuck = run_engine(
            deps, inputs.durations, inputs.hops, inputs.gaps, cost.shared_cores, rank_start=clock
        )
        if stuck:
            raise deadlock_error(deps, stuck)
        rows = zip(deps.ranks, deps.actions, starts, ends, repeat(step), repeat(0))  # every Span field: replica 0
        spans.extend(map(tuple.__new__, repeat(Span), rows))
        finished = [  # a rank with no action in the step only pays its overhead
            ends[deps.offsets[r + 1] - 1] + after_last[r] if deps.offsets[r + 1] > deps.offsets[r] else clock[r]
            for r in range(num_ranks)
        ]
        tails, _ = step_tails(finished, ends, last, cost, charge)  # an unhidden reduction, then the optimizer
        clock = [end + tail for end, tail in zip(finished, tails, strict=True)]
        step_ends.append(step_time_ms(finished, tails))
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

"""Where every millisecond of a measured step went, rank by rank: compute, schedule idle, communication wait,
overhead.

A measured step on rank r lasts the step's time T (the earliest rank's first start to the latest rank's end of
the optimizer step). It splits into four parts that add up to T exactly:

* compute: the time inside the rank's own actions (the sum of its spans' durations);
* schedule idle: the idle the schedule itself imposes given this step's own action durations. The step is
  replayed (`pipesim.simulate.sweep`) with every action taking exactly its measured time and transfers taking
  none; the rank's idle in that replay, up to the replay's makespan, is what no implementation could avoid;
* communication wait: time blocked in a receive or send (the measured CommSpans) beyond that, since the replay
  expects no transfer time at all;
* overhead: the rest: optimizer step and gradient zeroing, Python and launch gaps between actions, clock skew.

The parts are taken in that order from the rank's measured idle (T minus compute), each capped by what is left,
so none is negative and they sum to T. The summary is the split of the median step.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from pipesim.dag import dependencies
from pipesim.ir import Schedule
from pipesim.simulate import sweep
from pipesim.timeline import Timeline

# Above this coefficient of variation of the measured step times, a run is too noisy for its prediction error to
# be judged: on a shared machine other work's load, not the schedule, decides the figure.
NOISY_STEP_CV = 0.05


def spread(measured: Timeline, step_times_ms: Sequence[float]) -> dict:
    """How much the run varied: the step times' coefficient of variation, and per action the median over all
    actions of each action's CV across steps. `reliable` is False when the step CV exceeds NOISY_STEP_CV."""
    def cv(values: Sequence[float]) -> float | None:
        mean = statistics.fmean(values) if len(values) > 1 else 0.0
        return statistics.pstdev(values) / mean if mean > 0 else None

    times = [float(t) for t in step_times_ms]
    step_cv = cv(times) or 0.0
    per_action: dict = {}
    for span in measured.spans:
        per_action.setdefault((span.rank, span.action), []).append(span.end - span.start)
    cvs = [c for c in map(cv, per_action.values()) if c is not None]
    return {"step_cv": step_cv, "action_cv_median": statistics.median(cvs) if cvs else 0.0,
            "threshold_step_cv": NOISY_STEP_CV, "reliable": step_cv <= NOISY_STEP_CV, "steps": len(times)}


@dataclass(frozen=True)
class RankShare:
    """One rank's step time, split; the four parts add up to `step_ms`."""

    rank: int
    step_ms: float
    compute_ms: float
    schedule_idle_ms: float
    comm_wait_ms: float
    overhead_ms: float


@dataclass(frozen=True)
class StepAttribution:
    step: int
    step_ms: float
    replay_ms: float  # the step replayed with its own action times and free transfers
    ranks: tuple[RankShare, ...]


def attribute_step(schedule: Schedule, measured: Timeline, step: int, step_ms: float) -> StepAttribution:
    """Split measured step `step` (lasting `step_ms`) of `schedule` into the four parts, per rank."""
    deps = dependencies(schedule)
    spans = {span.action: span for span in measured.spans if span.step == step}
    missing = [a for a in deps.actions if a not in spans]
    if missing:
        raise ValueError(f"step {step} of the measured timeline has no span for {missing[0]}; "
                         "was it measured from this schedule?")
    durations = [spans[a].end - spans[a].start for a in deps.actions]
    _, ends, stuck = sweep(deps, durations, [0.0] * len(durations))
    if stuck:
        raise ValueError("the schedule deadlocks; a measured step cannot have run it")
    replay_ms = max(ends, default=0.0)
    waits = [0.0] * schedule.num_ranks
    for comm in measured.comm:
        if comm.step == step:
            waits[comm.rank] += comm.end - comm.start
    shares = []
    for rank in range(schedule.num_ranks):
        lo, hi = deps.offsets[rank], deps.offsets[rank + 1]
        compute = sum(durations[lo:hi])
        idle = max(step_ms - compute, 0.0)
        schedule_idle = min(max(replay_ms - compute, 0.0), idle)
        comm_wait = min(waits[rank], idle - schedule_idle)
        overhead = step_ms - compute - schedule_idle - comm_wait
        shares.append(RankShare(rank, step_ms, compute, schedule_idle, comm_wait, overhead))
    return StepAttribution(step, step_ms, replay_ms, tuple(shares))


def attribute_run(schedule: Schedule, measured: Timeline, step_times_ms: Sequence[float]) -> dict:
    """Every measured step attributed, and per rank the medians over steps: the `analysis.json` document."""
    steps = [attribute_step(schedule, measured, step, float(t)) for step, t in enumerate(step_times_ms)]
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
        "definition": "compute + schedule_idle + comm_wait + overhead = step time, per rank (pipesim.attribution)",
        "step_ms": typical.step_ms,
        "median_step": typical.step,
        "replay_ms": typical.replay_ms,
        "ranks": [{k: v for k, v in asdict(r).items() if k != "step_ms"} for r in typical.ranks],
        "spread": spread(measured, step_times_ms),
        "steps": [{"step": s.step, "step_ms": s.step_ms, "replay_ms": s.replay_ms,
                   "ranks": [asdict(r) for r in s.ranks]} for s in steps],
    }

"""Why a measured step differs from its prediction, in milliseconds that add up.

The prediction prices three things: each action (F, B, I, W, with recomputation inside B and I), the gaps between
a rank's actions (the dispatch gap, and waits for transfers at the link's price), and the step's tail after the
last action (optimizer step, zeroing, the last sends). Measured minus predicted splits into the same three:

* actions: the step re-simulated with the run's own median time of every stage's actions, one kind at a time
  (F, then B, I, W), each kind's share being how much the step moved when its times became the measured ones: so
  an action that runs longer than priced but off the critical path counts for nothing;
* gaps: the measured makespan (the last action's end) less the replay's (every action as measured, the gaps and
  the link as priced): dispatch gaps and transfer waits longer than priced;
* tail: the measured step after its last action less the replay's. A cost model from a profile that measured the
  step's lead before its first action prices it in the tail (pipesim_executor.rank.calibrate.priced_tails: a later
  start of every rank is a longer tail of every rank), where the measured step has it before its first action: the
  lead's price then counts in the tail's share and the lead itself in the gaps', and the two cancel in the sum.

The three add up to the measured median step less the deterministic prediction; `jitter` is how much the
prediction's sampled point (when it has one) sits above the deterministic step. Alongside, per rank and kind,
the summed excess of the actions over their price, the measured median gap before an action that waited for
nothing (the dispatch gap as the run had it), the receive waits, and per boundary the median in-run hop of a
message (`pipesim.analysis.hops`) beside the link's price: the evidence the shares rest on.

Pure functions of a schedule, the cost model it was predicted with and the measured Timeline: no run is started.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from pipesim.analysis.hops import hop_samples, timeline_steps
from pipesim.cost.convert import measured_stage_cost
from pipesim.cost.model import CostModel
from pipesim.ir import ActionKind, Schedule
from pipesim.records import Timeline
from pipesim.semantics.dag import dependencies
from pipesim.sim.simulate import engine_inputs, run_engine
from pipesim.sim.steps import SimulatedStep, rank_ends, simulate_step

KINDS = ("F", "B", "I", "W")


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def stage_medians(
    measured: Timeline, average: Callable[[list[float]], float] = _median
) -> dict[tuple[int, str], float]:
    """Per (stage, action kind letter), the median (or another `average`) duration of its measured actions over
    every step."""
    durations: dict[tuple[int, str], list[float]] = {}
    for span in measured.spans:
        durations.setdefault((span.action.stage, span.action.kind.value), []).append(span.end - span.start)
    return {key: average(values) for key, values in durations.items()}


def substituted(cost: CostModel, medians: dict[tuple[int, str], float], kinds: Sequence[str]) -> CostModel:
    """`cost` with the measured median of the given kinds (letters) as each stage's action time, every other kind
    at its price: under recomputation the measured B and I hold the forward run again, which the cost model adds
    back itself (`measured_stage_cost`)."""
    stages = []
    for stage in range(len(cost.stages) if len(cost.stages) > 1 else 1):
        base = cost.stage(stage)

        def used(letter: str, kind: ActionKind, stage: int = stage) -> float:
            key = (stage, letter)
            return medians[key] if letter in kinds and key in medians else cost.duration_ms(stage, kind)

        forward = used("F", ActionKind.FORWARD)
        if (stage, "I") in medians or (stage, "W") in medians:
            stages.append(
                measured_stage_cost(
                    base,
                    forward_ms=forward,
                    input_ms=used("I", ActionKind.BACKWARD_INPUT),
                    weight_ms=used("W", ActionKind.BACKWARD_WEIGHT),
                    recompute=cost.recompute,
                )
            )
        else:
            stages.append(
                measured_stage_cost(
                    base, forward_ms=forward, backward_ms=used("B", ActionKind.BACKWARD), recompute=cost.recompute
                )
            )
    return replace(cost, stages=tuple(stages))


def _steps(measured: Timeline) -> dict[int, Timeline]:
    by_step: dict[int, list] = {}
    for span in measured.spans:
        by_step.setdefault(span.step, []).append(span)
    comm: dict[int, list] = {}
    for span in measured.comm:
        comm.setdefault(span.step, []).append(span)
    return {s: replace(measured, spans=tuple(v), comm=tuple(comm.get(s, ()))) for s, v in sorted(by_step.items())}


def own_replays(schedule: Schedule, cost: CostModel, steps: dict[int, Timeline]) -> list[float]:
    """Per measured step, the makespan of the step re-simulated with every action taking exactly its own measured
    time that step, the gaps and the link as priced: how long the step would have been had only its actions
    varied. A step missing an action of the schedule is left out."""
    deps = dependencies(schedule)
    inputs = engine_inputs(schedule, cost, deps)
    out = []
    for timeline in steps.values():
        spans = {(span.rank, span.action): span for span in timeline.spans}
        try:
            durations = [spans[(r, a)].end - spans[(r, a)].start for r, a in zip(deps.ranks, deps.actions, strict=True)]
        except KeyError:
            continue
        _, ends, stuck = run_engine(deps, durations, inputs.hops, inputs.gaps, cost.shared_cores)
        if not stuck:
            out.append(max(ends, default=0.0))
    return out


def gaps(timeline: Timeline) -> dict[str, list[float]]:
    """Per rank of one step: `lead` (the step's start to its first action), `dispatch` (each gap between two
    actions with no receive wait inside it), `wait` (the receive waits inside the gaps, summed per gap) and
    `idle` (every gap between two actions, summed)."""
    out: dict[str, list[float]] = {"lead": [], "dispatch": [], "wait": [], "idle": []}
    for rank in range(timeline.num_ranks):
        spans = sorted((s for s in timeline.spans if s.rank == rank), key=lambda s: s.start)
        recvs = [c for c in timeline.comm if c.rank == rank and c.kind == "recv"]
        dispatch, wait_total, idle = [], 0.0, 0.0
        for before, after in zip(spans, spans[1:], strict=False):
            gap = max(0.0, after.start - before.end)
            waited = sum(max(0.0, min(c.end, after.start) - max(c.start, before.end)) for c in recvs)
            idle += gap
            wait_total += waited
            if waited <= 0.0:
                dispatch.append(gap)
        out["lead"].append(spans[0].start if spans else 0.0)
        out["dispatch"].append(_median(dispatch))
        out["wait"].append(wait_total)
        out["idle"].append(idle)
    return out


def rank_evidence(
    schedule: Schedule, cost: CostModel, measured: Timeline, steps: dict[int, Timeline], predicted: SimulatedStep
) -> list[dict[str, Any]]:
    """Per rank, what the shares rest on: each kind's summed excess over its price per step, the lead before its first
    action, the dispatch gap, receive waits and idle time as measured (medians over the steps), beside the prices."""
    step_gaps = [gaps(tl) for tl in steps.values()]
    predicted_gaps = gaps(predicted.timeline)
    per_rank = []
    for rank in range(schedule.num_ranks):
        excess: dict[str, float] = {}
        for span in measured.spans:
            if span.rank == rank:
                kind = span.action.kind
                price = cost.duration_ms(span.action.stage, kind)
                excess[kind.value] = excess.get(kind.value, 0.0) + (span.end - span.start) - price
        count = max(1, len(steps))
        per_rank.append(
            {
                "rank": rank,
                "action_excess_ms": {k: v / count for k, v in sorted(excess.items())},
                "lead_ms": _median([g["lead"][rank] for g in step_gaps]),
                "dispatch_ms": _median([g["dispatch"][rank] for g in step_gaps]),
                "priced_dispatch_ms": cost.dispatch_per_rank(schedule.num_ranks)[rank],
                "recv_wait_ms": _median([g["wait"][rank] for g in step_gaps]),
                "idle_ms": _median([g["idle"][rank] for g in step_gaps]),
                "predicted_idle_ms": predicted_gaps["idle"][rank],
                "predicted_tail_ms": predicted.tail_ms[rank],
            }
        )
    return per_rank


def decompose(
    schedule: Schedule,
    cost: CostModel,
    measured: Timeline,
    step_times_ms: Sequence[float],
    predicted_point_ms: float | None = None,
) -> dict[str, Any]:
    """Measured median step less the deterministic prediction, split into actions (per kind), gaps and tail (see
    the module docstring), with the evidence per rank. `predicted_point_ms`: the prediction as reported (a sampled
    median), whose distance to the deterministic step is reported as `jitter_ms`."""
    if not step_times_ms or not measured.spans:
        raise ValueError("a decomposition needs a measured step: the timeline holds none")
    predicted = simulate_step(schedule, cost)
    medians, means = stage_medians(measured), stage_medians(measured, statistics.fmean)
    replay, by_kind = predicted, {}
    for count in range(1, len(KINDS) + 1):
        step = simulate_step(schedule, substituted(cost, medians, KINDS[:count]))
        by_kind[KINDS[count - 1]] = step.step_ms - replay.step_ms
        replay = step
    replay_makespan = max(rank_ends(replay.timeline))
    steps = _steps(measured)
    makespans = [max(rank_ends(tl)) for tl in steps.values()]
    own = own_replays(schedule, cost, steps)
    beyond_own = [m - o for m, o in zip(makespans, own, strict=False)] if len(own) == len(makespans) else []
    measured_step = _median(step_times_ms)
    measured_makespan = _median(makespans)
    tails = [t - m for t, m in zip(step_times_ms, makespans, strict=False)]
    per_rank = rank_evidence(schedule, cost, measured, steps, predicted)
    hops = {
        str(boundary): {
            "measured_ms": _median(values),
            "priced_ms": cost.transfer_ms(boundary, boundary + 1),
            "samples": len(values),
        }
        for boundary, values in sorted(hop_samples(timeline_steps(measured)).items())
    }
    return {
        "measured_step_ms": measured_step,
        "predicted_step_ms": predicted.step_ms,
        "predicted_point_ms": predicted_point_ms,
        "jitter_ms": None if predicted_point_ms is None else predicted_point_ms - predicted.step_ms,
        "difference_ms": measured_step - predicted.step_ms,
        "actions_ms": by_kind,
        "gaps_ms": measured_makespan - replay_makespan,
        # of the gaps: how much the step's own action times, varying from action to action, lengthened it over the
        # replay of their medians (the jitter a prediction's sampled point prices), and what is left: the gaps
        # and transfers themselves
        "measured_jitter_ms": _median(own) - replay_makespan if own else None,
        "gaps_beyond_jitter_ms": _median(beyond_own) if beyond_own else None,
        # the makespan replayed with each stage and kind's median, its mean, and each step's own times (the median
        # over the steps): which price of an action the measured step pays (measured: the mean)
        "replay_makespan_ms": {
            "medians": replay_makespan,
            "means": max(rank_ends(simulate_step(schedule, substituted(cost, means, KINDS)).timeline)),
            "own": _median(own) if own else None,
        },
        "tail_ms": _median(tails) - (replay.step_ms - replay_makespan),
        "measured_tail_ms": _median(tails),
        "predicted_tail_ms": replay.step_ms - replay_makespan,
        "ranks": per_rank,
        "hops": hops,
    }

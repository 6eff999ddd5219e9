"""Measured against simulated: action by action, for one training step.

A measured timeline may hold several steps (the first usually pays warm-up costs);
`align` compares one of them with the simulation, matching spans by (rank, action),
the identity both timelines share because both come from the same `Schedule`.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from pipesim.cost.convert import measured_stage_cost
from pipesim.cost.model import CostModel
from pipesim.ir import Action
from pipesim.records import Timeline, select_replica, select_step


@dataclass(frozen=True, slots=True)
class ActionDiff:
    """One action's duration in both timelines; `delta_ms` = measured - simulated (positive: slower than predicted)."""

    rank: int
    action: Action
    simulated_ms: float
    measured_ms: float
    delta_ms: float
    simulated_start: float = 0.0
    measured_start: float = 0.0

    @property
    def error(self) -> float:
        """Relative prediction error (simulated - measured) / measured."""
        return prediction_error(self.simulated_ms, self.measured_ms)


def steps_of(timeline: Timeline) -> list[int]:
    """The step numbers present, ascending."""
    return sorted({span.step for span in timeline.spans})


def pick_step(timeline: Timeline, step: int | None) -> Timeline:
    """One step of a measured timeline, shifted to start at 0.

    `None` takes the last step: later steps are past the warm-up that inflates the first.
    """
    steps = steps_of(timeline)
    if not steps:
        return timeline
    if step is None:
        step = steps[-1]
    elif step not in steps:
        raise ValueError(f"step {step} is not in the measured timeline; its steps: {', '.join(map(str, steps))}")
    return select_step(timeline, step)


def align(simulated: Timeline, measured: Timeline, step: int | None = None) -> list[ActionDiff]:
    """Pair spans by (rank, action); actions missing from either side are left out.

    Rows come in the simulated timeline's order of rank, then start time. A measured run that kept every
    data-parallel replica is compared by its replica 0 (the simulation is of one replica).
    """
    return align_step(simulated, pick_step(select_replica(measured, 0), step))


def align_step(simulated: Timeline, measured_step: Timeline) -> list[ActionDiff]:
    """`align` for a measured timeline already cut to one step (see `pick_step`)."""
    by_key = {(span.rank, span.action): span for span in measured_step.spans}
    diffs = []
    for sim in sorted(simulated.spans, key=lambda s: (s.rank, s.start, s.end)):
        real = by_key.get((sim.rank, sim.action))
        if real is None:
            continue
        diffs.append(
            ActionDiff(
                rank=sim.rank,
                action=sim.action,
                simulated_ms=sim.duration,
                measured_ms=real.duration,
                delta_ms=real.duration - sim.duration,
                simulated_start=sim.start,
                measured_start=real.start,
            )
        )
    return diffs


def prediction_error(predicted_ms: float, measured_ms: float) -> float:
    """(predicted - measured) / measured: -0.1 means the prediction was 10% short."""
    if measured_ms <= 0:
        raise ValueError(f"measured time must be > 0 to compute a relative error, got {measured_ms}")
    return (predicted_ms - measured_ms) / measured_ms


def action_errors(simulated: Timeline, measured: Timeline) -> list[dict]:
    """Per (rank, action): the simulated duration against the median measured over every step, and the
    relative error (simulated - measured) / measured, the same definition as the step's `prediction_error`."""
    durations: dict[tuple[int, Action], list[float]] = {}
    for span in select_replica(measured, 0).spans:  # the simulation is of one replica
        durations.setdefault((span.rank, span.action), []).append(span.end - span.start)
    rows = []
    for sim in sorted(simulated.spans, key=lambda s: (s.rank, s.start, s.end)):
        values = durations.get((sim.rank, sim.action))
        if not values:
            continue
        real = statistics.median(values)
        rows.append(
            {
                "rank": sim.rank,
                "action": str(sim.action),
                "simulated_ms": sim.duration,
                "measured_ms": real,
                "error": prediction_error(sim.duration, real) if real > 0 else None,
            }
        )
    return rows


def median_abs_error(rows: list[dict]) -> float | None:
    """The median over actions of |error|: the per-action figure beside the step's error."""
    errors = [abs(row["error"]) for row in rows if row["error"] is not None]
    return statistics.median(errors) if errors else None


def replay_cost(measured: Timeline, cost: CostModel) -> CostModel:
    """`cost` with every stage's F, B, I and W replaced by the run's own median durations.

    Simulating with it tells the simulator's error apart from the profile's: when the replay
    matches the measured step but the prediction does not, the profile did not represent the
    run (a machine whose speed drifts, caches, contention), not the schedule's simulation.
    """
    durations: dict[tuple[int, str], list[float]] = {}
    for span in measured.spans:
        durations.setdefault((span.action.stage, span.action.kind.value), []).append(span.end - span.start)
    num_stages = max((stage for stage, _ in durations), default=-1) + 1

    def median(stage: int, kind: str) -> float | None:
        values = durations.get((stage, kind))
        return statistics.median(values) if values else None

    stages = []
    for stage in range(num_stages):
        base = cost.stage(stage)
        forward = median(stage, "F")
        stages.append(
            measured_stage_cost(
                base,
                forward_ms=base.forward_ms if forward is None else forward,
                backward_ms=median(stage, "B"),
                input_ms=median(stage, "I"),
                weight_ms=median(stage, "W"),
                recompute=cost.recompute,
            )
            if (stage, "B") in durations or (stage, "I") in durations
            else base
        )
    return replace(cost, stages=tuple(stages), provenance=replace(cost.provenance, source="replay"))

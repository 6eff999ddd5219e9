"""How much a schedule's step grows when one rank is slower: its sensitivity to a straggler.

For each rank r, the step with rank r's compute times `slowdown` times longer (`pipesim.cost.perturb`, the one
rule of a slow rank) over the step without, minus 1. The worst rank is the largest growth. A schedule whose slack
absorbs a slower rank (a zero-bubble schedule's deferred W on its last rank, say) shows a growth below
slowdown - 1; one that packs tight shows the full slowdown or more. `compare` reports it per schedule.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation
from pipesim.ir import Schedule
from pipesim.sim.steps import simulate_step

DEFAULT_SLOWDOWN = 1.2


@dataclass(frozen=True)
class Sensitivity:
    """Per rank, the step's relative growth when that rank alone computes `slowdown` times slower."""

    slowdown: float
    rank_growth: tuple[float, ...]

    @property
    def worst_rank(self) -> int:
        return max(range(len(self.rank_growth)), key=lambda r: (self.rank_growth[r], -r))

    @property
    def worst_growth(self) -> float:
        return self.rank_growth[self.worst_rank]

    def to_dict(self) -> dict:
        return {
            "slowdown": self.slowdown,
            "rank_growth": list(self.rank_growth),
            "worst_rank": self.worst_rank,
            "worst_growth": self.worst_growth,
        }


def rank_sensitivity(
    schedule: Schedule, cost: CostModel, slowdown: float = DEFAULT_SLOWDOWN, base_step_ms: float | None = None
) -> Sensitivity:
    """Each rank slowed by `slowdown` in turn (on top of whatever `cost` already prices in), one simulation per
    rank; `base_step_ms` saves the unperturbed one when the caller has it. `cost` is cut for the schedule."""
    if not slowdown > 0:
        raise ValueError(f"the slowdown must be a number > 0, got {slowdown!r}")
    base = simulate_step(schedule, cost).step_ms if base_step_ms is None else base_step_ms
    growth = []
    for rank in range(schedule.num_ranks):
        slowed = Perturbation(((rank, float(slowdown)),)).apply(cost, schedule.stage_to_rank)
        step = simulate_step(schedule, slowed).step_ms
        growth.append(step / base - 1 if base > 0 else 0.0)
    return Sensitivity(float(slowdown), tuple(growth))

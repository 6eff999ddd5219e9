"""Where a candidate's stages sit, whether its family splits the backward and how many chains of stages it runs,
known from the family's registry entry before (or without) building its schedule.

The planner prices a candidate from this alone (its cost model, its lower bound): a `Schedule` answers the same
questions, so the cost model of a built candidate and of one that was never built are the same function's.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.ir import Schedule
from pipesim.schedules import schedule_info, stage_placement


@dataclass(frozen=True)
class Layout:
    """A schedule's placement facts: the attributes a `Schedule` has under the same names."""

    num_ranks: int
    stage_to_rank: tuple[int, ...]
    uses_split_backward: bool
    pipelines: int = 1  # chains side by side, each the whole model (DualPipe's two directions)

    @property
    def num_stages(self) -> int:
        return len(self.stage_to_rank)

    @property
    def pipeline_stages(self) -> int:
        """The pieces the model is cut into: each chain's stages (all of them but in DualPipe)."""
        return self.num_stages // self.pipelines

    @classmethod
    def of(cls, schedule: Schedule | Layout) -> Layout:
        """The layout of a built schedule (what its registry entry predicts, read off the schedule itself)."""
        if isinstance(schedule, Layout):
            return schedule
        return cls(schedule.num_ranks, tuple(schedule.stage_to_rank), schedule.uses_split_backward, schedule.pipelines)


def family_layout(name: str, num_ranks: int, chunks: int) -> Layout:
    """The layout family `name` gives `num_ranks` ranks holding `chunks` stages each (its registry entry's
    placement and split backward)."""
    info = schedule_info(name)
    return Layout(num_ranks, stage_placement(info.placement, num_ranks, chunks), info.split_backward, info.pipelines)

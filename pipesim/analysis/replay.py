"""An imported run (pipesim.io.kineto) replayed: its recovered schedule simulated with the traces' own times."""

from __future__ import annotations

from pipesim.analysis.overlay import replay_cost
from pipesim.cost.model import CostModel
from pipesim.io.kineto import ImportedRun
from pipesim.records import Timeline
from pipesim.sim.simulate import simulate


def replay(run: ImportedRun, cost: CostModel | None = None) -> Timeline:
    """The recovered schedule simulated with `cost`, or by default with the traces' own median action times:
    the overlay then shows what the schedule imposed against what the run added (waits, overheads)."""
    return simulate(run.schedule, cost if cost is not None else replay_cost(run.timeline, CostModel.uniform()))

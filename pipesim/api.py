"""pipesim's Python API: thin, typed entry points over the packages that do the work (re-exported by `pipesim`;
docs/api.md shows each in use). Each wrapper names the internal function it calls, so that a change inside
pipesim changes a wrapper, not its callers.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation
from pipesim.ir import Schedule

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from pipesim.analysis.compare import ComparisonRow
    from pipesim.plan.search import Candidate, PlanInputs, PlanSpace
    from pipesim.records import Timeline
    from pipesim.sim.metrics import Metrics
    from pipesim.sim.steps import SimulatedStep


def load_torch_csv(path: str | Path, csv_format: str = "auto") -> Schedule:
    """A schedule from torch.distributed.pipelining's CSV, either format (`compute_only` or `compute_comms`;
    "auto" tells them apart). Calls `pipesim.io.formats.schedule_from_csv_file`."""
    from pipesim.io.formats import schedule_from_csv_file

    return schedule_from_csv_file(path, csv_format)


def to_torch_csv(schedule: Schedule, csv_format: str = "compute_only") -> str:
    """The schedule as torch's CSV text (`pipesim.io.torch_csv.schedule_to_csv`)."""
    from pipesim.io.torch_csv import schedule_to_csv

    return schedule_to_csv(schedule, csv_format)  # type: ignore[arg-type]


def simulate(
    schedule: Schedule, cost: CostModel | None = None, perturbation: Perturbation | None = None
) -> SimulatedStep:
    """One training step of `schedule` under `cost` (default: forward 1, backward 2, no transfer time, per stage):
    its timeline, each rank's tail and the step time (`pipesim.sim.steps.simulate_step`, the one step-time function
    of the CLI, the app, the planner and the executor's prediction). Costs given per rank are cut for the
    schedule's stages as `simulate` and `compare` cut them (`CostModel.for_pipeline`). `perturbation` prices a slow
    rank or link in (`Perturbation.parse(["2:1.5"], ["0-1:5"])`: `pipesim.cost.perturb`). Raises DeadlockError (a
    ValueError) for a schedule that cannot finish."""
    from pipesim.sim.steps import simulate_step

    cost = (cost or CostModel.uniform()).for_pipeline(schedule.num_stages, schedule.num_ranks)
    if perturbation:
        cost = perturbation.apply(cost, schedule.stage_to_rank)
    return simulate_step(schedule, cost)


def metrics(timeline: Timeline, cost: CostModel | None = None) -> Metrics:
    """Makespan, bubble and peak activation memory per rank (bytes need `cost`): `pipesim.sim.metrics`."""
    from pipesim.sim.metrics import compute_metrics

    return compute_metrics(timeline, cost)


def compare(
    schedules: Sequence[str],
    ranks: int,
    microbatches: int,
    cost: CostModel | None = None,
    virtual_stages: int | None = None,
    perturbation: Perturbation | None = None,
    sensitivity: float | None = None,
) -> list[ComparisonRow]:
    """One row per schedule name (step time, bubble, peak memory; `error` for one that cannot be built), under one
    cost model: `pipesim.analysis.compare.compare_schedules`. `perturbation` prices a slow rank or link in;
    `sensitivity` (a slowdown, e.g. 1.2) fills each row's `sensitivity`: the step's growth with each rank that
    much slower, and the worst rank (`pipesim.analysis.sensitivity`)."""
    from pipesim.analysis.compare import compare_schedules

    return compare_schedules(
        list(schedules), ranks, microbatches, cost or CostModel.uniform(), virtual_stages, perturbation, sensitivity
    )


def plan_candidates(
    inputs: PlanInputs,
    space: PlanSpace | None = None,
    *,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> list[Candidate]:
    """Every candidate of `space` (default: PlanSpace()) for the model and devices of `inputs`, each evaluated
    exactly (`pipesim.plan.search.evaluate_all`); `pareto_front` and `best_candidate` read the result. (Not named
    `plan`: that is the name of the package `pipesim.plan`, which Python would find first once it is imported.)"""
    from pipesim.plan.search import PlanSpace, evaluate_all

    return evaluate_all(inputs, space or PlanSpace(), progress=progress, workers=workers)


def gantt_figure(timeline: Timeline, *, title: str = "", color_by: str = "kind") -> go.Figure:
    """Ranks over time, bars by action kind (or "chunk", "microbatch"), idle time as bands: a plotly figure
    (`pipesim.charts.gantt.gantt_figure`; needs plotly)."""
    from pipesim.charts.gantt import gantt_figure as draw

    return draw(timeline, title=title, color_by=color_by)


def memory_figure(timeline: Timeline, cost: CostModel | None = None) -> go.Figure:
    """Each rank's activation memory over the step (`pipesim.charts.memory.memory_figure`)."""
    from pipesim.charts.memory import memory_figure as draw

    return draw(timeline, cost)


def comparison_figure(rows: list[ComparisonRow], *, log_scale: bool = False) -> go.Figure:
    """Step time, bubble and peak memory per schedule, side by side (`pipesim.charts.compare.comparison_figure`)."""
    from pipesim.charts.compare import comparison_figure as draw

    return draw(rows, log_scale=log_scale)

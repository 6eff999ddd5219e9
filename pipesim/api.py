"""pipesim's Python API: thin, typed entry points over the packages that do the work (re-exported by `pipesim`;
docs/api.md shows each in use). Each wrapper names the internal function it calls, so that a change inside
pipesim changes a wrapper, not its callers. The app reads a few more here (`critical_path`, `replay`,
`balance`): functions that share their module's name, which a package's face cannot export.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation
from pipesim.ir import Schedule
from pipesim.limits import require, require_items
from pipesim.records import Timeline

if TYPE_CHECKING:
    import plotly.graph_objects as go

    from pipesim.analysis.compare import ComparisonRow
    from pipesim.cost.balance import Balance
    from pipesim.io.kineto import ImportedRun
    from pipesim.ir import Action
    from pipesim.plan.search import Candidate, PlanInputs, PlanSpace
    from pipesim.sim.metrics import Metrics
    from pipesim.sim.steps import SimulatedStep


SCHEDULE_TAKES = "a Schedule (build_schedule, load_schedule or load_torch_csv)"
TIMELINE_TAKES = "a Timeline (simulate(...).timeline or load_timeline)"
COST_TAKES = "a CostModel or None"


def load_torch_csv(path: str | Path, csv_format: str = "auto") -> Schedule:
    """A schedule from torch.distributed.pipelining's CSV, either format (`compute_only` or `compute_comms`;
    "auto" tells them apart). Calls `pipesim.io.formats.schedule_from_csv_file`."""
    from pipesim.io.formats import schedule_from_csv_file

    require(path, "path", (str, os.PathLike), "a file path (str or Path)")
    return schedule_from_csv_file(path, csv_format)


def to_torch_csv(schedule: Schedule, csv_format: str = "compute_only") -> str:
    """The schedule as torch's CSV text (`pipesim.io.torch_csv.schedule_to_csv`)."""
    from pipesim.io.torch_csv import schedule_to_csv

    require(schedule, "schedule", Schedule, SCHEDULE_TAKES)
    return schedule_to_csv(schedule, csv_format)  # type: ignore[arg-type]


def simulate(
    schedule: Schedule, cost: CostModel | None = None, perturbation: Perturbation | None = None
) -> SimulatedStep:
    """One training step of `schedule` under `cost` (default: forward 1, backward 2, no transfer time, per stage):
    its timeline, each rank's tail and the step time (`pipesim.sim.steps.simulate_step`, the one step-time function
    of the CLI, the app, the planner and the executor's prediction). Costs given per rank are cut for the
    schedule's stages and sequence chunks as `simulate` and `compare` cut them (`CostModel.for_schedule`).
    `perturbation` prices a slow rank or link in (`Perturbation.parse(["2:1.5"], ["0-1:5"])`:
    `pipesim.cost.perturb`). Raises DeadlockError (a ValueError) for a schedule that cannot finish."""
    from pipesim.sim.steps import simulate_step

    require(schedule, "schedule", Schedule, SCHEDULE_TAKES)
    require(cost, "cost", (CostModel, type(None)), COST_TAKES)
    cost = (cost or CostModel.uniform()).for_schedule(schedule)
    if perturbation:
        cost = perturbation.apply(cost, schedule.stage_to_rank)
    return simulate_step(schedule, cost)


def metrics(timeline: Timeline, cost: CostModel | None = None) -> Metrics:
    """Makespan, bubble and peak activation memory per rank (bytes need `cost`): `pipesim.sim.metrics`."""
    from pipesim.sim.metrics import compute_metrics

    require(timeline, "timeline", Timeline, TIMELINE_TAKES)
    require(cost, "cost", (CostModel, type(None)), COST_TAKES)
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

    require_items(schedules, "schedules", str, "schedule names, e.g. ['1f1b', 'zbv']")
    require(ranks, "ranks", int, "a whole number of ranks")
    require(microbatches, "microbatches", int, "a whole number of microbatches")
    require(cost, "cost", (CostModel, type(None)), COST_TAKES)
    require(virtual_stages, "virtual_stages", (int, type(None)), "a whole number of chunks per rank or None")
    return compare_schedules(
        list(schedules),
        ranks,
        microbatches,
        cost or CostModel.uniform(),
        virtual_stages,
        perturbation=perturbation,
        slowdown=sensitivity,
    )


def plan_candidates(
    inputs: PlanInputs,
    space: PlanSpace | None = None,
    *,
    workers: int = 1,
    progress: Callable[[int, int], None] | None = None,
    prune: bool = True,
) -> list[Candidate]:
    """Every candidate of `space` (default: PlanSpace(), at a profile's own sizes) for the model and devices of
    `inputs`, each evaluated exactly or, with `prune`, left unbuilt where its lower bound proves it cannot change
    the answer (it carries `pruned`, why, and no numbers: `pipesim.plan.search.evaluate_all`), those that can win
    sampled with their interval where the profile kept its spread (`pipesim.plan.intervals.attach_intervals`);
    `pareto_front` and `best_candidate` read the result, the same either way. (Not named `plan`: that is the name
    of the package `pipesim.plan`, which Python would find first once it is imported.)"""
    from pipesim.plan.inputs import PlanInputs
    from pipesim.plan.intervals import attach_intervals
    from pipesim.plan.search import PlanSpace, evaluate_all

    require(inputs, "inputs", PlanInputs, "a PlanInputs (PlanInputs.from_description, from_cost or from_profile)")
    require(space, "space", (PlanSpace, type(None)), "a PlanSpace or None")
    if space is None:
        space = PlanSpace() if inputs.profile is None else PlanSpace(microbatch_sizes=inputs.profile.microbatch_sizes)
    candidates = evaluate_all(inputs, space, progress=progress, workers=workers, prune=prune)
    return attach_intervals(inputs, candidates)


def gantt_figure(timeline: Timeline, *, title: str = "", color_by: str = "kind") -> go.Figure:
    """Ranks over time, bars by action kind (or "chunk", "microbatch"), idle time as bands: a plotly figure
    (`pipesim.charts.gantt.gantt_figure`; needs plotly)."""
    from pipesim.charts.gantt import gantt_figure as draw

    require(timeline, "timeline", Timeline, TIMELINE_TAKES)
    return draw(timeline, title=title, color_by=color_by)


def memory_figure(timeline: Timeline, cost: CostModel | None = None) -> go.Figure:
    """Each rank's activation memory over the step (`pipesim.charts.memory.memory_figure`)."""
    from pipesim.charts.memory import memory_figure as draw

    require(timeline, "timeline", Timeline, TIMELINE_TAKES)
    require(cost, "cost", (CostModel, type(None)), COST_TAKES)
    return draw(timeline, cost)


def comparison_figure(rows: list[ComparisonRow], *, log_scale: bool = False) -> go.Figure:
    """Step time, bubble and peak memory per schedule, side by side (`pipesim.charts.compare.comparison_figure`)."""
    from pipesim.analysis.compare import ComparisonRow
    from pipesim.charts.compare import comparison_figure as draw

    require_items(rows, "rows", ComparisonRow, "comparison rows (compare's result)")
    return draw(rows, log_scale=log_scale)


def critical_path(schedule: Schedule, timeline: Timeline, cost: CostModel) -> list[Action]:
    """The chain of actions that set the step time, in time order (`pipesim.analysis.critical_path.critical_path`)."""
    from pipesim.analysis.critical_path import critical_path as walk

    return walk(schedule, timeline, cost)


def replay(run: ImportedRun, cost: CostModel | None = None) -> Timeline:
    """An imported run's schedule simulated, by default with the traces' own median action times
    (`pipesim.analysis.replay.replay`)."""
    from pipesim.analysis.replay import replay as simulate_run

    return simulate_run(run, cost)


def balance(layer_ms: Sequence[float], num_stages: int) -> Balance:
    """Per-layer times (each layer's weight in a cut: `pipesim.cost.description.unit_weight`) cut into `num_stages`
    contiguous stages, the slowest as fast as it can be (`pipesim.cost.balance.balance`, the one splitter)."""
    from pipesim.cost.balance import balance as cut

    return cut(layer_ms, num_stages)


OFFLOAD_MODES = ("none", "selective", "full")  # `with_offload`'s modes (pipesim.sim.offload holds the same tuple)


def with_offload(schedule: Schedule, mode: str, cost: CostModel | None = None) -> Schedule:
    """`schedule` with activation offload placed (`pipesim.sim.offload.with_offload`: none, selective, full; selective
    weighs each wait against `cost`'s copy time)."""
    from pipesim.sim.offload import with_offload as place

    require(schedule, "schedule", Schedule, SCHEDULE_TAKES)
    return place(schedule, mode, cost)

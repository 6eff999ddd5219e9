"""Side-by-side numbers for several schedules under one cost model.

The cost model describes the model cut into one stage per rank; a schedule
that holds several chunks per rank (interleaved, V shapes) gets the same model
cut finer (`CostModel.for_pipeline`, the meaning `simulate` and the app give
costs too), so every row trains the same model on the same ranks and the
numbers compare like for like. Each row is `pipesim.sim.steps.simulate_step`'s
step, the one `simulate` reports for the same schedule and costs: the
data-parallel reduction charged where `pipesim.sim.data_parallel` decides.

The comparison table and the trade-off chart read the same rows. A schedule whose
constraints are not met (say, interleaving with microbatches not a multiple of the
ranks) gets a row with `error` set instead of stopping the whole comparison: the
user asked about several schedules and should see the others.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pipesim.analysis.sensitivity import rank_sensitivity
from pipesim.cost.model import CostModel
from pipesim.cost.perturb import Perturbation
from pipesim.schedules import build_schedule, options_for, schedule_info
from pipesim.sim.jitter import step_interval
from pipesim.sim.metrics import compute_metrics
from pipesim.sim.offload import with_offload
from pipesim.sim.spread import Spread
from pipesim.sim.steps import simulate_step
from pipesim.units import format_memory

Sampling = tuple[Spread, int, int]  # a spread, the draws per step, the seed (pipesim.sim.jitter.step_interval)


@dataclass(frozen=True)
class ComparisonRow:
    """One schedule's headline numbers; the metric fields are None when `error` is set."""

    schedule: str
    makespan: float | None = None  # the actions (and stated collectives): first start to last end
    bubble_fraction: float | None = None
    bubble_ratio: float | None = None
    peak_activations: int | None = None  # stashed microbatches (seq1f1b: sequence chunks), max over ranks
    peak_activation_bytes: float | None = None  # max over ranks
    step_ms: float | None = None  # the step as a training loop runs it: reduction tail and overhead included
    error: str | None = None
    step_ms_p05: float | None = None  # with a spread: the 90% interval of the sampled steps (step_ms their median)
    step_ms_p95: float | None = None
    step_ms_deterministic: float | None = None  # with a spread: the step of the actions' medians
    sensitivity: dict | None = None  # pipesim.analysis.sensitivity.Sensitivity.to_dict, when asked for
    stashed_microbatches: float | None = None  # peak_activations in microbatches' worth: a sequence chunk is 1/S

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def compare_one(
    name: str,
    num_ranks: int,
    num_microbatches: int,
    cost: CostModel,
    num_virtual_stages: int | None = None,
    sampling: Sampling | None = None,
    perturbation: Perturbation | None = None,
    slowdown: float | None = None,
    options: Mapping[str, object] | None = None,
    offload: str = "none",
) -> ComparisonRow:
    """Build, simulate and measure one schedule; a ValueError becomes the row's `error`. With `sampling`, the step
    is the median of sampled steps with its 90% interval (`pipesim.sim.jitter.step_interval`). `perturbation` (a
    slow rank, a slow link) is priced into the costs (`Perturbation.apply`); `slowdown` adds each rank's
    sensitivity to that slowdown (`pipesim.analysis.sensitivity`). `options` (seq1f1b's sequence chunks) go to the
    families that take them; `offload` places OFFLOADs and RELOADs as `simulate --offload` does."""
    try:
        taken = {key: value for key, value in (options or {}).items() if key in schedule_info(name).options}
        built = {**options_for(name, num_virtual_stages=num_virtual_stages), **taken}
        schedule = build_schedule(name, num_ranks, num_microbatches, **built)
        cost = cost.for_schedule(schedule)
        if perturbation:
            cost = perturbation.apply(cost, schedule.stage_to_rank)
        schedule = with_offload(schedule, offload, cost)  # selective weighs each wait against these costs
        step = simulate_step(schedule, cost)
        interval = None if sampling is None else step_interval(schedule, cost, *sampling)
        sensitivity = None
        if slowdown is not None:
            sensitivity = rank_sensitivity(schedule, cost, slowdown, step.step_ms).to_dict()
    except ValueError as error:  # includes ScheduleError and DeadlockError
        return ComparisonRow(schedule=name, error=str(error))
    metrics = compute_metrics(step.timeline, cost)
    sampled = (
        {}
        if interval is None
        else {
            "step_ms_p05": interval.p05_ms,
            "step_ms_p95": interval.p95_ms,
            "step_ms_deterministic": step.step_ms,
        }
    )
    peak = max(rank.peak_activations for rank in metrics.ranks)
    return ComparisonRow(
        schedule=schedule.name,
        makespan=metrics.makespan,
        step_ms=step.step_ms if interval is None else interval.step_ms,
        **sampled,
        bubble_fraction=metrics.bubble_fraction,
        bubble_ratio=metrics.bubble_ratio,
        peak_activations=peak,
        peak_activation_bytes=max(rank.peak_activation_bytes for rank in metrics.ranks),
        sensitivity=sensitivity,
        stashed_microbatches=peak / schedule.seq_chunks,
    )


def compare_schedules(
    names: list[str],
    num_ranks: int,
    num_microbatches: int,
    cost: CostModel,
    num_virtual_stages: int | None = None,
    sampling: Sampling | None = None,
    perturbation: Perturbation | None = None,
    slowdown: float | None = None,
    options: Mapping[str, object] | None = None,
    offload: str = "none",
) -> list[ComparisonRow]:
    """One row per name, in the order given (`compare_one`; with `sampling`: (spread, samples, seed), each step
    sampled)."""
    return [
        compare_one(
            name,
            num_ranks,
            num_microbatches,
            cost,
            num_virtual_stages,
            sampling,
            perturbation,
            slowdown,
            options,
            offload,
        )
        for name in names
    ]


def format_table(rows: list[ComparisonRow], bytes_known: bool = True) -> str:
    """A plain-text table for terminals and logs; peak memory in bytes when the costs carry sizes, else in
    microbatches stashed (`units.format_memory`)."""
    sampled = any(row.step_ms_p05 is not None for row in rows)
    header = (
        f"{'schedule':<18} {'makespan ms':>12} {'step ms':>10} "
        + (f"{'90% interval':>19} " if sampled else "")
        + f"{'bubble':>8} {'idle/busy':>9} {'stashed':>8} {'peak memory':>16}"
    )
    lines = [header, "-" * len(header)]
    for row in rows:
        if row.error is not None:
            lines.append(f"{row.schedule:<18} error: {row.error}")
            continue
        lines.append(
            f"{row.schedule:<18} {row.makespan:>12.3f} {_ms(row.step_ms):>10} "
            + (f"{_ms(row.step_ms_p05) + '..' + _ms(row.step_ms_p95):>19} " if sampled else "")
            + f"{row.bubble_fraction:>8.1%} "
            f"{row.bubble_ratio:>9.3f} {row.peak_activations:>8d} {_memory(row, bytes_known):>16}"
        )
    return "\n".join(lines)


def _memory(row: ComparisonRow, bytes_known: bool) -> str:
    """`format_memory`, a sequence-chunked row's stash in microbatches' worth (7 chunks of 4: 1.75 microbatches)."""
    chunked = row.stashed_microbatches is not None and row.stashed_microbatches != row.peak_activations
    if chunked and not bytes_known:
        return f"{row.stashed_microbatches:g} microbatches"
    return format_memory(row.peak_activation_bytes, row.peak_activations, bytes_known)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def step_time(row: ComparisonRow) -> float | None:
    """The row's step time (`step_ms`); the makespan for a row made without one (the two agree without overheads)."""
    return row.step_ms if row.step_ms is not None else row.makespan


def pareto_front(rows: list[ComparisonRow]) -> list[ComparisonRow]:
    """The built schedules no other beats on both step time and peak memory, fastest first.

    Peak memory is in bytes where the cost model gives them, else stashed microbatches.
    """
    good = [row for row in rows if row.error is None and step_time(row) is not None]

    def peak(row: ComparisonRow) -> float:
        return row.peak_activation_bytes if row.peak_activation_bytes is not None else float(row.peak_activations or 0)

    front: list[ComparisonRow] = []
    for row in sorted(good, key=lambda r: (step_time(r), peak(r))):
        if not front or peak(row) < peak(front[-1]):
            front.append(row)
    return front

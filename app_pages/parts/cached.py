"""Cached pure wrappers around pipesim for the pages: bounded caches, plain results that pickle cleanly.

Nothing here simulates or schedules by itself; it caches pipesim's calls. Schedules, timelines and metrics are
frozen values, cached with st.cache_resource: st.cache_data would unpickle a copy on every rerun, seconds for a
schedule of 10^5 actions. Schedules and cost models are frozen
dataclasses with a cheap built-in hash; hashing them field by field (Streamlit's default for dataclasses) would
cost more than the simulation of a small schedule.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import plotly.graph_objects as go
import streamlit as st

from app_pages.parts.state import MAX_ACTIONS, check_limits
from pipesim import api, schedules
from pipesim.analysis import ComparisonRow, Sensitivity, attribute_run, compare_schedules, rank_sensitivity
from pipesim.api import critical_path, replay
from pipesim.charts import dag as charts_dag
from pipesim.charts import gantt as charts
from pipesim.charts import memory as charts_memory
from pipesim.charts import overlay
from pipesim.cost import CostModel, Perturbation
from pipesim.io import ImportedRun, import_trace_data, parse_trace, schedule_from_csv
from pipesim.ir import Action, Schedule
from pipesim.plan import (
    Candidate,
    Evaluator,
    IntervalOptions,
    LaunchSpread,
    PlanInputs,
    PlanSpace,
    attach_intervals,
    evaluate_all,
    materialise,
    measured_by,
    synthesized_candidates,
)
from pipesim.records import Timeline
from pipesim.semantics import DeadlockError, build_dag, dag_positions
from pipesim.sim import Metrics, compute_metrics, find_deadlock, inner_bubble_fraction, simulate_step
from pipesim.units import format_count

if TYPE_CHECKING:
    from pipesim.synth import Synthesis


def schedule_key(schedule: Schedule) -> tuple:
    return (
        schedule.name,
        schedule.num_ranks,
        schedule.num_microbatches,
        schedule.stage_to_rank,
        hash(schedule.actions),
        hash(schedule.order),
    )  # the order: torch's transfers change the timing


def inputs_key(inputs: PlanInputs) -> object:
    """What names a plan's inputs in the caches: their hash, or, for a profile's (whose tables are dicts, which do
    not hash), a digest of their pickle: one file read twice pickles alike."""
    if inputs.profile is None:
        return hash(inputs)
    return hashlib.sha256(pickle.dumps(inputs)).hexdigest()


HASH_FUNCS: dict[Any, Callable[[Any], Any]] = {Schedule: schedule_key, CostModel: hash, Perturbation: hash}


@st.cache_resource(max_entries=64, show_spinner=False)
def registered_schedule(
    name: str, num_ranks: int, num_microbatches: int, chunks: int | None = None, **extra: object
) -> Schedule:
    """A registered schedule; `chunks` goes only to the families that take num_virtual_stages, `extra` (sequence
    chunks: `schedule_knobs.Knobs.build_options`) only to those that take it."""
    check_limits(num_ranks, num_microbatches)
    options = {**schedules.options_for(name, num_virtual_stages=chunks), **extra}
    schedule = schedules.build_schedule(name, num_ranks, num_microbatches, **options)
    check_limits(num_ranks, num_microbatches, schedule.num_actions, max_actions=MAX_ACTIONS)
    return schedule


@st.cache_data(max_entries=32, show_spinner=False)
def csv_schedule(text: str, name: str = "custom") -> Schedule:
    schedule = schedule_from_csv(text, name=name)
    check_limits(schedule.num_ranks, schedule.num_microbatches, schedule.num_actions)
    return schedule


@st.cache_resource(max_entries=32, show_spinner=False, hash_funcs=HASH_FUNCS)
def simulation(schedule: Schedule, cost: CostModel) -> tuple[Timeline, Metrics]:
    """Simulated step and its metrics, as `pipesim simulate` gives them (raises DeadlockError / ValueError on bad
    input)."""
    cost.check_fits(schedule)
    timeline = simulate_step(schedule, cost).timeline
    return timeline, compute_metrics(timeline, cost)


@st.cache_data(max_entries=8, show_spinner=False, hash_funcs=HASH_FUNCS)
def synthesis(named: Schedule, cost: CostModel, memory_limit: float, time_limit_s: float) -> Synthesis:
    """The fastest order found in `time_limit_s` with `named`'s placement and size, for `cost` (cut for `named`'s
    stages) under `memory_limit` microbatches' worth of activations per rank (pipesim.synth)."""
    from pipesim.synth import SynthesisProblem, synthesize  # loaded when asked: not on the first page's path

    info = schedules.schedule_info(named.name)
    chunks = named.num_stages // named.num_ranks if schedules.placement_takes_chunks(info.placement) else None
    problem = SynthesisProblem(
        named.num_ranks,
        named.num_microbatches,
        cost,
        placement=info.placement,
        num_virtual_stages=chunks,
        memory_limit=memory_limit,
    )
    return synthesize(problem, time_limit_s)


@st.cache_resource(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def critical_actions(schedule: Schedule, cost: CostModel) -> tuple[Action, ...]:
    timeline, _ = simulation(schedule, cost)
    return tuple(critical_path(schedule, timeline, cost))  # shared, so immutable


@st.cache_resource(max_entries=32, show_spinner=False, hash_funcs=HASH_FUNCS)
def inner_bubble(schedule: Schedule, cost: CostModel) -> float:
    return inner_bubble_fraction(simulation(schedule, cost)[0])


@st.cache_data(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def comparison(
    names: tuple[str, ...],
    num_ranks: int,
    num_microbatches: int,
    cost: CostModel,
    chunks: int | None,
    perturbation: Perturbation | None = None,
    slowdown: float | None = None,
    options: tuple[tuple[str, object], ...] = (),
    offload: str = "none",
) -> list[ComparisonRow]:
    """`compare_schedules`: with `perturbation` a slow rank or link priced in, with `slowdown` each row's
    sensitivity to one rank that much slower; `options` and `offload` the knobs' (`schedule_knobs.Knobs`)."""
    check_limits(num_ranks, num_microbatches)
    return compare_schedules(
        list(names),
        num_ranks,
        num_microbatches,
        cost,
        num_virtual_stages=chunks,
        perturbation=perturbation,
        slowdown=slowdown,
        options=dict(options),
        offload=offload,
    )


@st.cache_resource(max_entries=32, show_spinner=False, hash_funcs=HASH_FUNCS)
def gantt_chart(
    schedule: Schedule,
    cost: CostModel,
    with_critical_path: bool = False,
    color_by: str = "kind",
    window: tuple[float, float] | None = None,
) -> go.Figure:
    timeline, _ = simulation(schedule, cost)
    path = critical_actions(schedule, cost) if with_critical_path else None
    title = (
        f"{schedule.name}: {format_count(schedule.num_ranks, 'rank')}, {format_count(schedule.num_stages, 'stage')}, "
        f"{format_count(schedule.num_microbatches, 'microbatch')}, {format_count(schedule.num_actions, 'action')}"
    )  # Schedule.describe's words, with the thousands separators the chart's subtitle uses
    priced = cost.provenance.meta.get("perturbation")  # a what-if priced in (Perturbation.apply): said in the title
    if priced:
        title += f"; what-if: {Perturbation.from_dict(priced).describe()}"
    return charts.gantt_figure(timeline, title=title, critical_path=path, color_by=color_by, window=window)


@st.cache_resource(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def whatif_chart(schedule: Schedule, uniform_cost: CostModel, cost: CostModel, what: str) -> go.Figure:
    """The step under `cost` (a slow rank or link priced in) drawn over the step under `uniform_cost`."""
    uniform, _ = simulation(schedule, uniform_cost)
    slowed, _ = simulation(schedule, cost)
    return overlay.whatif_figure(uniform, slowed, what)


@st.cache_resource(max_entries=32, show_spinner=False, hash_funcs=HASH_FUNCS)
def memory_chart(schedule: Schedule, cost: CostModel) -> go.Figure:
    timeline, _ = simulation(schedule, cost)
    return charts_memory.memory_figure(timeline, cost)


@st.cache_resource(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def dag_chart(schedule: Schedule, cost: CostModel, with_critical_path: bool) -> go.Figure:
    cycle = deadlock_cycle(schedule)
    path = critical_actions(schedule, cost) if with_critical_path and cycle is None else None
    graph = build_dag(schedule, cost)
    timeline = simulation(schedule, cost)[0] if cycle is None else None
    positions = dag_positions(schedule, graph, timeline)
    return charts_dag.dag_figure(
        graph, positions, title=f"{schedule.name}: dependency graph", critical_path=path, cycle=cycle
    )


@st.cache_data(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def deadlock_cycle(schedule: Schedule) -> list[Action] | None:
    return find_deadlock(schedule)


@st.cache_data(max_entries=16, show_spinner=False, hash_funcs=HASH_FUNCS)
def deadlock_explanation(schedule: Schedule) -> str | None:
    """Who waits on whom, in the simulator's words (None when the schedule runs)."""
    try:
        api.simulate(schedule)  # the uniform costs: the simulator's words on who waits
    except DeadlockError as error:
        return error.detail
    return None


# --- the planner (Plan page) ---------------------------------------------------------------------------------------


@st.cache_data(max_entries=8, show_spinner=False, hash_funcs={PlanInputs: inputs_key, PlanSpace: hash})
def plan(
    inputs: PlanInputs,
    space: PlanSpace,
    jitter: float | None = None,
    synth_budget_s: float | None = None,
    launches: LaunchSpread | None = None,
) -> tuple[list[Candidate], dict[str, Schedule]]:
    """Every candidate of the space, evaluated (pipesim.plan's `evaluate_all`, unpruned: the table lists them all,
    with the offloaded candidates the space's offload choice adds), with a progress bar while it runs. The bar is
    made inside the function (a cached function's elements are replayed on a hit) and ends empty, so a cached plan
    draws nothing. Those that can win are then sampled with every action's time varying by `jitter`
    (a CV; pipesim.plan.intervals): their step is the samples' median, with its 90% interval, of verify-plan's
    median where earlier verifications on this machine measured how far launches land apart (`launches`), else of
    one step (`measured_by`). With
    `synth_budget_s`, a synthesized order per shape is added (pipesim.plan.synthesized), its schedule kept by its
    candidate's label."""
    bar = st.empty()

    def shown(done: int, total: int) -> None:
        bar.progress(min(1.0, done / max(total, 1)), text=f"Evaluating candidates: {done:,} of {total:,}")

    candidates = evaluate_all(inputs, space, progress=shown, prune=False)
    bar.empty()
    between = None if launches is None else launches.between
    options = IntervalOptions(jitter=jitter, measurement=measured_by("auto", launches), launch_spread=between)
    candidates = attach_intervals(inputs, candidates, options)
    if synth_budget_s is None:
        return candidates, {}
    with st.spinner(f"Synthesizing orders (up to {synth_budget_s:g} s)"):
        made = synthesized_candidates(inputs, space, synth_budget_s)
    candidates += [m.candidate for m in made]
    return candidates, {m.candidate.label: m.schedule for m in made if m.schedule is not None}


@st.cache_data(max_entries=16, show_spinner=False, hash_funcs={PlanInputs: inputs_key, Candidate: lambda c: c.label})
def plan_candidate(
    inputs: PlanInputs, candidate: Candidate, synthesized: Schedule | None = None
) -> tuple[Schedule, CostModel]:
    """The schedule and cost model of one evaluated candidate (`synthesized`: its order, for a synthesized one),
    to draw and export it."""
    if synthesized is not None:
        return materialise(inputs, candidate, synthesized)
    return Evaluator(inputs).materialise(candidate)


@st.cache_data(max_entries=64, show_spinner=False, hash_funcs={PlanInputs: inputs_key, Candidate: lambda c: c.label})
def plan_sensitivity(
    inputs: PlanInputs, candidate: Candidate, slowdown: float, synthesized: Schedule | None = None
) -> Sensitivity:
    """The candidate's step growth with each pipeline rank in turn `slowdown` times slower
    (`pipesim.analysis.sensitivity.rank_sensitivity` on the schedule and costs `plan_candidate` gives;
    `synthesized`: a synthesized candidate's order)."""
    schedule, cost = plan_candidate(inputs, candidate, synthesized)
    return rank_sensitivity(schedule, cost, slowdown)


@st.cache_data(max_entries=4, show_spinner=False)
def imported_run(files: tuple[tuple[str, bytes], ...]) -> tuple[ImportedRun, Timeline, dict | None]:
    """Uploaded profiler traces (name, bytes) -> the run they recorded, its replay and its attribution
    (None where the attribution cannot split a step). Bad traces raise ValueError (not cached)."""
    run = import_trace_data([(name, parse_trace(name, raw)) for name, raw in files])
    try:
        analysis = attribute_run(run.schedule, run.timeline, run.step_times_ms)
    except ValueError:
        analysis = None
    return run, replay(run), analysis


@st.cache_data(max_entries=4, show_spinner=False)
def imported_stragglers(files: tuple[tuple[str, bytes], ...]) -> dict:
    """The stragglers and slow links in uploaded profiler traces (`pipesim.analysis.stragglers`, as `pipesim
    stragglers TRACE...` finds them: stages of equal cost assumed), as its JSON document."""
    from pipesim.analysis import find_stragglers

    run, _, _ = imported_run(files)
    return find_stragglers(run.schedule, run.timeline).to_dict()

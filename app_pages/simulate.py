"""Simulate one schedule: the Gantt chart of ranks over time, its bubbles, metrics and memory; or synthesize the
fastest order for these costs under a memory limit (pipesim.synth), with its lower bound and the gap to it. A
what-if (slower ranks, delayed links: app_pages.parts.whatif) prices a straggler in, its step drawn over the
uniform one.

The schedule, sizes and costs are the ones every page shares (state.SCHEDULE, ...); every setting, the time
window included, lives in the URL, so a view can be shared and reloaded.
"""

import functools

import streamlit as st

from app_pages.parts import cached, cost_inputs, guide, plot, schedule_knobs, state, whatif, widgets
from app_pages.parts import schedule_inputs as inputs
from pipesim.charts import COLOR_BY, MAX_EXACT_BARS
from pipesim.cost import CostModel
from pipesim.ir import Schedule
from pipesim.records import Timeline
from pipesim.schedules import schedule_info
from pipesim.sim import makespan
from pipesim.units import format_ms, format_percent

state.init_state()
st.title("Simulate a pipeline schedule")
guide.landing()
guide.tour_banner("simulate")

with st.sidebar:
    source = cost_inputs.cost_source_picker()
    name = inputs.schedule_picker()
    info = schedule_info(name)
    synthesize = st.toggle(
        "Synthesize a better order",
        key=state.kept("synth"),
        bind=state.URL,
        help=f"Search for the fastest order with {name}'s placement ({info.placement}) for these costs under a "
        "memory limit per rank, with a lower bound no order can beat (pipesim synthesize)",
    )
    with st.form("sim-form"):
        problems: list[str] = []  # fields out of range, each said under its field
        ranks, microbatches, chunks = inputs.size_fields(inputs.chunks_unused(info), problems)
        limit, budget = None, None
        if synthesize:
            left, right = st.columns([3, 2])
            limit = left.slider(
                "Memory limit (microbatches)",
                1,
                max(2, 2 * ranks),
                max(1, ranks),
                key=state.kept("synth-limit"),
                bind=state.URL,
                help="Stashed activations per rank, in microbatches' worth: ZB-H1 holds as many as there are "
                "ranks, ZB-H2 twice as many less one",
            )
            budget = right.number_input(
                "Search (s)",
                1,
                30,
                2,
                key=state.kept("synth-budget"),
                bind=state.URL,
                help="Time the search may take; a gap of 0 proves the order optimal before then",
            )
        knobs = schedule_knobs.knob_fields([info], problems)
        schedule, schedule_error = None, None
        try:
            if not problems:
                requested = chunks if info.takes_chunks else None
                extra = knobs.build_options(info)
                schedule = cached.registered_schedule(name, ranks, microbatches, requested, **extra)
        except ValueError as error:
            schedule_error = error
        st.divider()
        spec = cost_inputs.cost_fields(
            source,
            schedule.num_stages if schedule else max(ranks, 1),
            None if synthesize else inputs.w_unused([info]),
        )
        problems += spec["problems"]
        what_if = whatif.whatif_fields(schedule.num_ranks if schedule else max(ranks, 1), problems)
        st.form_submit_button("Simulate", type="primary", width="stretch")

if problems:  # never the old chart without a word saying why it is old
    last = st.session_state.get("sim-last-good")
    shown = (
        f" The chart below still shows the last settings that worked: {last['schedule'].describe()}."
        if last
        else " Nothing is drawn until they are fixed."
    )
    st.warning(
        f"**Chart not updated**: {'; '.join(problems)}. Fix the field{'s' if len(problems) > 1 else ''} marked "
        f"in the sidebar.{shown}",
        icon=":material/sync_problem:",
    )
    if last is None:
        st.stop()
    schedule, spec, info, name = last["schedule"], last["spec"], schedule_info(last["name"]), last["name"]
    what_if, knobs = last["what_if"], last["knobs"]
    schedule_error = None

st.caption(info.summary)
if schedule_error is not None:
    widgets.show_error(schedule_error, f"Cannot build {name} with {ranks} ranks and {microbatches} microbatches")
    st.stop()
st.caption(cost_inputs.COST_MEANING)

try:
    # per-rank costs cut per chunk (and per sequence chunk), as `pipesim simulate` and the Compare page read them
    uniform_cost = knobs.priced(cost_inputs.cost_model(spec)).for_schedule(schedule)
    cost = what_if.apply(uniform_cost, schedule.stage_to_rank)  # a slow rank or link, as --slow-rank prices it
    schedule = knobs.placed(schedule, cost)  # OFFLOAD and RELOAD where --offload puts them
    named_timeline, named_metrics = cached.simulation(schedule, cost)
except ValueError as error:  # bad costs, a cost file for another pipeline, a deadlock
    widgets.show_error(error, "Cannot simulate")
    st.stop()
if not problems:  # what a later refused form falls back to, said as such
    st.session_state["sim-last-good"] = {
        "schedule": schedule,
        "spec": spec,
        "name": name,
        "what_if": what_if,
        "knobs": knobs,
    }

if synthesize:
    with st.status(f"Searching for the fastest order (up to {budget} s)…", expanded=False) as searching:
        try:
            found = cached.synthesis(schedule, cost, float(limit), float(budget))
        except ValueError as error:
            searching.update(label="No order found", state="error")
            widgets.show_error(error, "Cannot synthesize")
            st.stop()
        searching.update(label=f"Searched in {found.seconds:.1f} s ({found.method})", state="complete")
    schedule = found.schedule
    named_step = named_timeline.meta["step_ms"]
    timeline, metrics = cached.simulation(schedule, cost)
    step = timeline.meta["step_ms"]
    proof = "optimal (proven)" if found.optimal else f"gap {format_percent(found.gap)} to the bound"
    st.info(
        f"**Synthesized** under {limit} microbatches' worth of activations per rank: step time "
        f"{format_ms(step)}, lower bound {format_ms(found.lower_bound)} ({proof}); {name} takes "
        f"{format_ms(named_step)} here ({format_percent(step / named_step - 1, signed=True)}). The gap is "
        "(step time - bound) / step time: no order can beat the bound, so 0 proves the order optimal.",
        icon=":material/auto_awesome:",
    )
    bound_cards = st.columns(4)
    widgets.card(bound_cards[0], "lower_bound", format_ms(found.lower_bound))
    widgets.card(bound_cards[1], "gap", format_percent(found.gap))
else:
    timeline, metrics = named_timeline, named_metrics

widgets.metric_cards(metrics, timeline.meta["step_ms"], inner_bubble=cached.inner_bubble(schedule, cost))
if what_if:  # the slowed step in words, then drawn over the uniform one
    whatif.show_growth(schedule, uniform_cost, cost, what_if, "sim-whatif")


@st.fragment
def gantt_section(schedule: Schedule, cost: CostModel, timeline: Timeline) -> None:
    """The Gantt chart and its controls, rerun on their own: a drag across a binned chart redraws this part of
    the page only (the cards and the memory chart above and below stay as they are)."""
    left, middle, right = st.columns([1, 1, 2])
    show_path = left.toggle(
        "Show the critical path",
        key=state.kept("sim-critical"),
        bind=state.URL,
        help="The chain of actions that sets the step time (outlined in black)",
    )
    color_by = middle.selectbox(
        "Colour by",
        COLOR_BY,
        key=state.kept("sim-color"),
        bind=state.URL,
        help="Action kind, chunk (the stage's place on its rank) or microbatch",
    )
    window, total = None, makespan(timeline)
    if len(timeline.spans) > MAX_EXACT_BARS:
        picked = right.slider(
            "Time window (ms)",
            0.0,
            float(total),
            (0.0, float(total)),
            key=state.kept("sim-window"),
            bind=state.URL,
            format=widgets.slider_format(total),
            help=f"Past {MAX_EXACT_BARS:,} actions the chart is binned; drag across it or pick a "
            f"window here: one holding fewer actions shows every action",
        )
        window = None if picked == (0.0, float(total)) else (float(picked[0]), float(picked[1]))
        if window is not None:
            right.button("Whole step", key="sim-whole-step", on_click=widgets.reset_window, args=("sim-window", total))
    sig = state.signature(cached.schedule_key(schedule), hash(cost), show_path, color_by, window)
    gantt = cached.gantt_chart(schedule, cost, show_path, color_by, window)
    # binned, or a window of it: a drag selects a time window, and the fragment redraws it
    select = bool(gantt.layout.images) or window is not None
    take = functools.partial(widgets.take_selected_window, "sim-gantt", "sim-window", total) if select else None
    plot.show(gantt, "sim-gantt", select=select, on_select=take)
    if select:
        st.caption(
            f"Drag across the chart to draw that stretch of the step in detail (every action as its own bar "
            f"once it holds at most {MAX_EXACT_BARS:,}); Whole step goes back."
        )
    widgets.figure_downloads(gantt, f"{schedule.name}-gantt", "sim-gantt-export", sig)


gantt_section(schedule, cost, timeline)

memory = cached.memory_chart(schedule, cost)
plot.show(memory, "sim-memory")
widgets.figure_downloads(
    memory, f"{schedule.name}-memory", "sim-memory-export", state.signature(cached.schedule_key(schedule), hash(cost))
)

st.subheader("Data")
widgets.data_downloads(timeline, schedule, metrics, schedule.name, "sim-data")

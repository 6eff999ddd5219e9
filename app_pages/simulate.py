"""Simulate one schedule: the Gantt chart of ranks over time, its bubbles, metrics and memory.

Settings stay for the session (state.kept) and live in the URL (bind="query-params"), so a view can be shared
and reloaded.
"""

import functools

import streamlit as st

from app_pages import cached, cost_inputs, plot, state, widgets
from pipesim.charts.gantt import COLOR_BY, MAX_EXACT_BARS
from pipesim.schedules import schedule_info, schedule_names
from pipesim.sim.metrics import makespan

state.init_state()
st.title("Simulate a pipeline schedule")
URL = "query-params"

with st.sidebar:
    source = cost_inputs.cost_source_picker("sim")
    names = schedule_names()
    # Outside the form: the options below depend on the schedule (the registry says which it takes).
    name = st.selectbox(
        "Schedule", names, index=names.index(state.DEFAULT_SCHEDULE), key=state.kept("sim-schedule"), bind=URL
    )
    info = schedule_info(name)
    with st.form("sim-form"):
        left, right = st.columns(2)
        ranks = left.number_input(
            "Ranks",
            1,
            None,
            state.DEFAULT_RANKS,
            key=state.kept("sim-ranks"),
            bind=URL,
            help=f"At most {state.MAX_RANKS} in the app",
        )
        microbatches = right.number_input(
            "Microbatches",
            1,
            None,
            state.DEFAULT_MICROBATCHES,
            key=state.kept("sim-microbatches"),
            bind=URL,
            help=f"At most {state.MAX_MICROBATCHES} in the app, and {state.MAX_ACTIONS:,} actions",
        )
        chunks = None
        if info.takes_chunks:
            chunks = st.number_input(
                "Chunks per rank",
                1,
                16,
                state.DEFAULT_CHUNKS,
                key=state.kept("sim-chunks"),
                bind=URL,
                help="Virtual stages per rank",
            )
        schedule, schedule_error = None, None
        try:
            schedule = cached.registered_schedule(
                name, int(ranks), int(microbatches), None if chunks is None else int(chunks)
            )
        except ValueError as error:
            schedule_error = error
        if schedule is not None and not info.takes_chunks and schedule.num_stages > schedule.num_ranks:
            st.caption(f"{name} always holds {schedule.num_stages // schedule.num_ranks} chunks per rank.")
        st.divider()
        spec = cost_inputs.cost_fields("sim", source, schedule.num_stages if schedule else int(ranks))
        st.form_submit_button("Simulate", type="primary", width="stretch")

st.caption(info.summary)
if schedule_error is not None:
    widgets.show_error(schedule_error, f"Cannot build {name} with {ranks} ranks and {microbatches} microbatches")
    st.stop()
st.caption(cost_inputs.COST_MEANING)

try:
    # per-rank costs cut per chunk, as `pipesim simulate` and the Compare page read them
    cost = cost_inputs.cost_model(spec).for_pipeline(schedule.num_stages, schedule.num_ranks)
    timeline, metrics = cached.simulation(schedule, cost)
except ValueError as error:  # bad costs, a cost file for another pipeline, a deadlock
    widgets.show_error(error, "Cannot simulate")
    st.stop()

widgets.metric_cards(metrics, inner_bubble=cached.inner_bubble(schedule, cost))
left, middle, right = st.columns([1, 1, 2])
show_path = left.toggle(
    "Show the critical path",
    key=state.kept("sim-critical"),
    bind=URL,
    help="The chain of actions that sets the step time (outlined in black)",
)
color_by = middle.selectbox(
    "Colour by",
    COLOR_BY,
    key=state.kept("sim-color"),
    bind=URL,
    help="Action kind, chunk (the stage's place on its rank) or microbatch",
)
window = None
if len(timeline.spans) > MAX_EXACT_BARS:
    total = makespan(timeline)
    picked = right.slider(
        "Time window (ms)",
        0.0,
        float(total),
        (0.0, float(total)),
        key="sim-window",
        help=f"Past {MAX_EXACT_BARS:,} actions the chart is binned; drag across it or pick a "
        f"window here: one holding fewer actions shows every action",
    )
    window = None if picked == (0.0, float(total)) else (float(picked[0]), float(picked[1]))
    if window is not None:
        right.button("Whole step", key="sim-whole-step", on_click=widgets.reset_window, args=("sim-window", total))
sig = state.signature(cached.schedule_key(schedule), hash(cost), show_path, color_by, window)

gantt = cached.gantt_chart(schedule, cost, show_path, color_by, window)
binned = bool(gantt.layout.images)  # then a drag selects a time window, and the page redraws it
take_window = functools.partial(widgets.take_selected_window, "sim-gantt", "sim-window", total) if binned else None
plot.show(gantt, "sim-gantt", select=binned, on_select=take_window)
if binned:
    st.caption(
        f"Binned view: drag across the chart to draw that stretch of the step in detail (every action as "
        f"its own bar once it holds at most {MAX_EXACT_BARS:,})."
    )
widgets.figure_downloads(gantt, f"{schedule.name}-gantt", "sim-gantt-export", sig)

memory = cached.memory_chart(schedule, cost)
plot.show(memory, "sim-memory")
widgets.figure_downloads(memory, f"{schedule.name}-memory", "sim-memory-export", sig)

st.subheader("Data")
widgets.data_downloads(timeline, schedule, metrics, schedule.name, "sim-data")

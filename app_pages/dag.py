"""The dependency graph of a small schedule: ranks as lanes, the critical path, or the deadlock cycle.

The schedule, sizes and costs are the ones every page shares (the graph of what Simulate draws); every setting
is in the URL.
"""

import streamlit as st

from app_pages.parts import cached, cost_inputs, guide, plot, schedule_knobs, state, widgets
from app_pages.parts import csv_table as table
from app_pages.parts import schedule_inputs as inputs
from pipesim.charts import dag as charts_dag
from pipesim.schedules import schedule_info

state.init_state()
st.title("Dependency graph")
guide.tour_banner("dag")
st.caption(
    f"Drawn for small schedules only (at most {charts_dag.MAX_DAG_ACTIONS:,} actions) so the browser stays "
    "responsive; use the Gantt chart on the Simulate page for large ones."
)

SOURCES = ("Registered schedule", "Custom schedule (Custom page)", "Deadlock example")

with st.sidebar:
    origin = st.radio("Schedule from", SOURCES, key=state.kept("dag-origin"), bind=state.URL)
    source = cost_inputs.cost_source_picker()
    if origin == SOURCES[0]:
        name = inputs.schedule_picker()
    with st.form("dag-form"):
        schedule, error, knobs = None, None, schedule_knobs.Knobs()
        try:
            if origin == SOURCES[0]:
                info = schedule_info(name)
                ranks, microbatches, chunks = inputs.size_fields(inputs.chunks_unused(info))
                knobs = schedule_knobs.knob_fields([info], [])
                requested = chunks if info.takes_chunks else None
                schedule = cached.registered_schedule(name, ranks, microbatches, requested, **knobs.build_options(info))
            elif origin == SOURCES[1]:
                if st.session_state["custom_csv"]:
                    schedule = cached.csv_schedule(st.session_state["custom_csv"])
            else:
                schedule = cached.csv_schedule(state.DEADLOCK_EXAMPLE_CSV, name="deadlock example")
        except ValueError as problem:
            error = problem
        st.divider()
        spec = cost_inputs.cost_fields(source, schedule.num_stages if schedule else 1)
        st.form_submit_button("Draw", type="primary", width="stretch")

if origin == SOURCES[1] and not st.session_state["custom_csv"]:
    st.info("No custom schedule yet: write or upload one on the Custom schedule page.")
    st.page_link("app_pages/custom.py", label="Open the Custom schedule page", icon=":material/edit_note:")
    st.stop()
try:
    if error is not None:
        raise error
    cost = knobs.priced(cost_inputs.cost_model(spec)).for_schedule(schedule)
    schedule = knobs.placed(schedule, cost)  # its OFFLOADs and RELOADs, drawn on the copy engine's sub-lane
except ValueError as problem:
    widgets.show_error(problem, "Cannot build the schedule")
    st.stop()

if schedule.num_actions > charts_dag.MAX_DAG_ACTIONS:
    st.warning(
        f"{schedule.describe()}: more than the {charts_dag.MAX_DAG_ACTIONS:,} actions this view draws. "
        "Use fewer ranks or microbatches here, or the Gantt chart on the Simulate page."
    )
    st.stop()

structural = [p for p in table.schedule_problems(schedule) if p.kind == "error"]
if structural:
    st.error(
        "The schedule is not well formed, so it has no dependency graph yet:\n\n"
        + "\n".join(f"- {p.message}" for p in structural[:10])
    )
    st.stop()

cycle = cached.deadlock_cycle(schedule)
path = None
if cycle:
    st.error(
        "**Deadlock.** These actions wait on each other in a cycle (red), so no rank can go on: "
        + (cached.deadlock_explanation(schedule) or ""),
        icon=":material/block:",
    )
else:
    show_path = st.toggle("Highlight the critical path", value=True, key=state.kept("dag-critical"), bind=state.URL)
    path = cached.critical_actions(schedule, cost) if show_path else None
    if path:
        st.caption("Critical path: " + " → ".join(map(str, path)))

try:
    figure = cached.dag_chart(schedule, cost, path is not None)
except ValueError as error:
    widgets.show_error(error, "Cannot draw the graph")
    st.stop()
st.caption(schedule.describe() + " · solid: data dependency · dashed grey: order on the same rank")
plot.show(figure, "dag-figure")
widgets.figure_downloads(
    figure,
    f"{schedule.name}-dag",
    "dag-export",
    state.signature(cached.schedule_key(schedule), hash(cost), path is not None),
)

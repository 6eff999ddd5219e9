"""The dependency graph of a small schedule: ranks as lanes, the critical path, or the deadlock cycle."""

import streamlit as st

from app_pages import cached, plot, state, widgets
from app_pages import csv_table as table
from pipesim.charts import dag as charts_dag
from pipesim.cost.model import CostModel
from pipesim.schedules import schedule_info, schedule_names

state.init_state()
st.title("Dependency graph")
st.caption(
    f"Drawn for small schedules only (at most {charts_dag.MAX_DAG_ACTIONS} actions) so the browser stays "
    "responsive; use the Gantt chart on the Simulate page for large ones."
)

SOURCES = ("Registered schedule", "Custom schedule (Custom page)", "Deadlock example")

with st.sidebar:
    origin = st.radio("Schedule from", SOURCES, key="dag-origin")
    with st.form("dag-form"):
        if origin == SOURCES[0]:
            names = schedule_names()
            name = st.selectbox("Schedule", names, index=names.index(state.DEFAULT_SCHEDULE), key="dag-schedule")
            left, right = st.columns(2)
            ranks = left.number_input("Ranks", 1, None, 3, key="dag-ranks")
            microbatches = right.number_input("Microbatches", 1, None, 4, key="dag-microbatches")
            # only for the families that take it (the registry says which); shown once such a one is drawn
            chunks = (
                st.number_input("Chunks per rank", 1, 16, state.DEFAULT_CHUNKS, key="dag-chunks")
                if (schedule_info(name).takes_chunks)
                else None
            )
        left, right = st.columns(2)
        forward = left.number_input("F (ms)", 0.0, 1e6, 1.0, 0.1, key="dag-f")
        backward = right.number_input("B (ms)", 0.0, 1e6, 2.0, 0.1, key="dag-b")
        comm = left.number_input("Transfer (ms)", 0.0, 1e6, 0.0, 0.05, key="dag-comm")
        st.form_submit_button("Draw", type="primary", width="stretch")

try:
    if origin == SOURCES[0]:
        schedule = cached.registered_schedule(
            name, int(ranks), int(microbatches), None if chunks is None else int(chunks)
        )
    elif origin == SOURCES[1]:
        if not st.session_state["custom_csv"]:
            st.info("No custom schedule yet: write or upload one on the Custom schedule page.")
            st.page_link("app_pages/custom.py", label="Open the Custom schedule page", icon=":material/edit_note:")
            st.stop()
        schedule = cached.csv_schedule(st.session_state["custom_csv"])
    else:
        schedule = cached.csv_schedule(state.DEADLOCK_EXAMPLE_CSV, name="deadlock example")
    cost = CostModel.uniform(forward, max(backward, 0.0), comm_ms=comm)
except ValueError as error:
    widgets.show_error(error, "Cannot build the schedule")
    st.stop()

if schedule.num_actions > charts_dag.MAX_DAG_ACTIONS:
    st.warning(
        f"{schedule.describe()}: more than the {charts_dag.MAX_DAG_ACTIONS} actions this view draws. "
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
    show_path = st.toggle("Highlight the critical path", value=True, key="dag-critical")
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

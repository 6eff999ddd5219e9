"""Simulate one schedule: the Gantt chart of ranks over time, its bubbles, metrics and memory."""

import streamlit as st

from app_pages import cached, cost_inputs, state, widgets
from pipesim.schedules import schedule_info, schedule_names

state.init_state()
st.title("Simulate a pipeline schedule")

with st.sidebar:
    source = cost_inputs.cost_source_picker("sim")
    with st.form("sim-form"):
        names = schedule_names()
        name = st.selectbox("Schedule", names, index=names.index(state.DEFAULT_SCHEDULE), key="sim-schedule")
        left, right = st.columns(2)
        ranks = left.number_input("Ranks", 1, None, state.DEFAULT_RANKS, key="sim-ranks",
                                  help=f"At most {state.MAX_RANKS} in the app")
        microbatches = right.number_input("Microbatches", 1, None, state.DEFAULT_MICROBATCHES, key="sim-microbatches",
                                          help=f"At most {state.MAX_MICROBATCHES} in the app")
        chunks = st.number_input("Chunks per rank", 1, 16, state.DEFAULT_CHUNKS, key="sim-chunks",
                                 help="Virtual stages per rank for interleaved-1f1b and looped-bfs; "
                                      "V schedules (zbv, dualpipev) always hold 2, the others 1")
        schedule, schedule_error = None, None
        try:
            schedule = cached.registered_schedule(name, int(ranks), int(microbatches), int(chunks))
        except ValueError as error:
            schedule_error = error
        st.divider()
        spec = cost_inputs.cost_fields("sim", source, schedule.num_stages if schedule else int(ranks))
        st.form_submit_button("Simulate", type="primary", width="stretch")

st.caption(schedule_info(name).summary)
if schedule_error is not None:
    widgets.show_error(schedule_error, f"Cannot build {name} with {ranks} ranks and {microbatches} microbatches")
    st.stop()

try:
    cost = cost_inputs.cost_model(spec)
    timeline, metrics = cached.simulation(schedule, cost)
except ValueError as error:  # bad costs, a cost file for another pipeline, a deadlock
    widgets.show_error(error, "Cannot simulate")
    st.stop()

widgets.metric_cards(metrics)
show_path = st.toggle("Show the critical path", key="sim-critical",
                      help="The chain of actions that sets the step time (outlined in black)")
sig = state.signature(cached.schedule_key(schedule), hash(cost), show_path)

gantt = cached.gantt_chart(schedule, cost, show_path)
st.plotly_chart(gantt, key="sim-gantt", config={"displaylogo": False})
widgets.figure_downloads(gantt, f"{schedule.name}-gantt", "sim-gantt-export", sig)

memory = cached.memory_chart(schedule, cost)
st.plotly_chart(memory, key="sim-memory", config={"displaylogo": False})
widgets.figure_downloads(memory, f"{schedule.name}-memory", "sim-memory-export", sig)

st.subheader("Data")
widgets.data_downloads(timeline, schedule, metrics, schedule.name, "sim-data")

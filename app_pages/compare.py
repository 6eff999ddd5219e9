"""Compare several schedules on the same costs: table, bars, and time against memory."""

import pandas as pd
import streamlit as st

from app_pages import cached, cost_inputs, plot, state, widgets
from pipesim.charts import compare as charts_compare
from pipesim.schedules import schedule_info, schedule_names
from pipesim.units import binary_unit

state.init_state()
st.title("Compare schedules")
URL = "query-params"  # the page's settings live in its URL: a view can be shared and reloaded

PREFERRED = ("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv")

with st.sidebar:
    source = cost_inputs.cost_source_picker("cmp")
    with st.form("cmp-form"):
        names = schedule_names()
        chosen = st.multiselect(
            "Schedules",
            names,
            default=[n for n in PREFERRED if n in names],
            key=state.kept("cmp-schedules"),
            bind=URL,
            help="naive is left out by default: its step dwarfs the others (or use log scale)",
        )
        left, right = st.columns(2)
        ranks = left.number_input("Ranks", 1, None, state.DEFAULT_RANKS, key=state.kept("cmp-ranks"), bind=URL)
        microbatches = right.number_input(
            "Microbatches", 1, None, state.DEFAULT_MICROBATCHES, key=state.kept("cmp-microbatches"), bind=URL
        )
        takers = [n for n in names if schedule_info(n).takes_chunks]
        chunks = st.number_input(
            "Chunks per rank",
            2,
            16,
            state.DEFAULT_CHUNKS,
            key=state.kept("cmp-chunks"),
            bind=URL,
            help="For " + ", ".join(takers) + " (the others hold what they hold)",
        )
        st.divider()
        spec = cost_inputs.cost_fields("cmp", source, int(ranks))
        st.form_submit_button("Compare", type="primary", width="stretch")

st.caption(cost_inputs.COST_MEANING)
if not chosen:
    st.info("Pick at least one schedule in the sidebar.")
    st.stop()

try:
    cost = cost_inputs.cost_model(spec)
    rows = cached.comparison(tuple(chosen), int(ranks), int(microbatches), cost, int(chunks))
except ValueError as error:
    widgets.show_error(error, "Cannot compare")
    st.stop()

failed = [row for row in rows if row.error is not None]
for row in failed:
    st.warning(f"**{row.schedule}** not built: {row.error}", icon=":material/warning:")
good = [row for row in rows if row.error is None]
if not good:
    st.error("None of the chosen schedules can be built with these settings; see the reasons above.")
    st.stop()

# Built rows only (the failed ones are named above with their full reason): no empty cells.
table = pd.DataFrame([row.to_dict() for row in good]).set_index("schedule").drop(columns="error")
unit, size = binary_unit(max(row.peak_activation_bytes or 0.0 for row in good))
table["peak_activation_bytes"] = table["peak_activation_bytes"] / size
st.dataframe(
    table,
    width="stretch",
    column_config={
        "makespan": st.column_config.NumberColumn("makespan (ms)", format="%.3f"),
        "bubble_fraction": st.column_config.ProgressColumn(
            "bubble fraction", min_value=0.0, max_value=1.0, format="percent"
        ),
        "bubble_ratio": st.column_config.NumberColumn("idle / busy", format="%.3f"),
        "peak_activations": st.column_config.NumberColumn("peak stashed microbatches"),
        "peak_activation_bytes": st.column_config.NumberColumn(f"peak activation memory ({unit})", format="%.2f"),
    },
)
log_scale = st.toggle(
    "Log scale for makespan and memory",
    key=state.kept("cmp-log"),
    bind=URL,
    help="So that one slow schedule (naive) does not flatten the others",
)

sig = state.signature(tuple(chosen), int(ranks), int(microbatches), int(chunks), hash(cost), log_scale)
left, right = st.columns(2)
with left:
    bars = charts_compare.comparison_figure(rows, log_scale=log_scale)
    plot.show(bars, "cmp-bars")
    widgets.figure_downloads(bars, "comparison", "cmp-bars-export", sig)
with right:
    tradeoff = charts_compare.tradeoff_figure(rows)
    plot.show(tradeoff, "cmp-tradeoff")
    widgets.figure_downloads(tradeoff, "tradeoff", "cmp-tradeoff-export", sig)

st.subheader("Gantt chart of one of them")
pick = st.selectbox("Schedule", [row.schedule for row in good], key="cmp-gantt-pick")
try:
    schedule = cached.registered_schedule(pick, int(ranks), int(microbatches), int(chunks))
    pick_cost = cost.for_stages(schedule.num_stages, int(ranks))  # the cut the comparison used
    cached.simulation(schedule, pick_cost)  # a clear error before drawing
except ValueError as error:
    widgets.show_error(error, f"Cannot simulate {pick}")
    st.stop()
gantt = cached.gantt_chart(schedule, pick_cost)
plot.show(gantt, "cmp-gantt")
widgets.figure_downloads(gantt, f"{pick}-gantt", "cmp-gantt-export", state.signature(sig, pick))

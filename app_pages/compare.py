"""Compare several schedules on the same costs: table, bars, and time against memory; with a what-if (slow ranks,
delayed links: app_pages.parts.whatif) each step beside its uniform one, and each schedule's sensitivity to one
slower rank. The knobs (offload, host link, sequence chunks, all-to-all: app_pages.parts.schedule_knobs) apply to
every compared schedule that takes them, as on Simulate.

Ranks, microbatches, chunks and costs are the ones every page shares (state.RANKS, ...); every setting is in the
URL, so a view can be shared and reloaded.
"""

import pandas as pd
import streamlit as st

from app_pages.parts import cached, cost_inputs, guide, plot, schedule_knobs, state, whatif, widgets
from app_pages.parts import schedule_inputs as inputs
from pipesim.charts import compare as charts_compare
from pipesim.schedules import planned_schedule_names, schedule_info, schedule_names
from pipesim.units import PERCENT_DECIMALS, binary_unit, quantity

# What the stashed column counts where a family cuts microbatches into sequence chunks (seq1f1b)
CHUNKS_COUNTED = (
    "Counted in microbatches' worth: a schedule with S sequence chunks stashes chunks, each 1/S of a microbatch's "
    "activations (seq1f1b's 4 chunks stashed with S = 2 are 2 microbatches' worth)."
)

state.init_state()
st.title("Compare schedules")
guide.tour_banner("compare")

with st.sidebar:
    source = cost_inputs.cost_source_picker()
    names = schedule_names()
    # Outside the form: which fields apply (chunks, the W share) depends on the schedules chosen.
    chosen = st.multiselect(
        "Schedules",
        names,
        default=list(planned_schedule_names()),
        key=state.kept("cmp-schedules"),
        bind=state.URL,
        help="the planner's schedules by default (naive's step dwarfs the others: add it with log scale)",
    )
    infos = [schedule_info(n) for n in chosen]
    with st.form("cmp-form"):
        takers = [info.name for info in infos if info.takes_chunks]
        ranks, microbatches, chunks = inputs.size_fields(
            None if takers else "None of the chosen schedules lets you choose its chunks per rank"
        )
        problems: list[str] = []  # knob and what-if fields out of range, each said under its field
        knobs = schedule_knobs.knob_fields(infos, problems)
        st.divider()
        spec = cost_inputs.cost_fields(source, ranks, inputs.w_unused(infos))
        what_if = whatif.whatif_fields(max(ranks, 1), problems)
        sensitivity = whatif.sensitivity_field(problems)
        st.form_submit_button("Compare", type="primary", width="stretch")

st.caption(cost_inputs.COST_MEANING)
if not chosen:
    st.info("Pick at least one schedule in the sidebar.")
    st.stop()
if problems:
    st.error(f"**Not compared**: {'; '.join(problems)}. Fix the fields marked in the sidebar.", icon=":material/error:")
    st.stop()

try:
    cost = knobs.priced(cost_inputs.cost_model(spec))  # the host link, attention's share, the all-to-all
    sensitivity = whatif.affordable(sensitivity, ranks, microbatches, chunks, len(chosen))
    placed = {"options": tuple(knobs.options().items()), "offload": knobs.offload}  # built and offloaded so
    rows = cached.comparison(tuple(chosen), ranks, microbatches, cost, chunks, what_if, sensitivity, **placed)
    uniform = cached.comparison(tuple(chosen), ranks, microbatches, cost, chunks, **placed) if what_if else None
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

# Built rows only (the failed ones are named above with their full reason): no empty cells. One name per
# quantity (pipesim.units): the step time is what Simulate's card shows for the same schedule.
table = pd.DataFrame([row.to_dict() for row in good]).set_index("schedule")
table = table[["step_ms", "bubble_fraction", "bubble_ratio", "stashed_microbatches", "peak_activation_bytes"]]
unit, size = binary_unit(max(row.peak_activation_bytes or 0.0 for row in good))
table["peak_activation_bytes"] = table["peak_activation_bytes"] / size
table["bubble_fraction"] = 100 * table["bubble_fraction"]  # in percent, shown with the app's one decimal
if uniform is not None:  # each step beside its uniform one
    st.info(f"**What-if**: {what_if.describe()}.", icon=":material/speed:")
    table = whatif.with_uniform(table, good, uniform)
st.dataframe(
    table,
    width="stretch",
    column_config={
        "step_ms": widgets.time_column("step_time"),
        "bubble_fraction": st.column_config.ProgressColumn(
            quantity("bubble_fraction").name,
            min_value=0.0,
            max_value=100.0,
            format=f"%.{PERCENT_DECIMALS}f%%",
            help=quantity("bubble_fraction").meaning,
        ),
        "bubble_ratio": widgets.ratio_column("bubble_ratio"),
        "stashed_microbatches": st.column_config.NumberColumn(
            quantity("stashed").name, format="%g", help=f"{quantity('stashed').meaning} {CHUNKS_COUNTED}"
        ),
        "peak_activation_bytes": widgets.bytes_column("peak_activations", unit),
        **whatif.growth_columns(),
    },
)
chunked = [row.schedule for row in good if row.stashed_microbatches != row.peak_activations]
if chunked:
    st.caption(f"{', '.join(chunked)}: {CHUNKS_COUNTED}")
if knobs.offload != "none":
    st.caption(
        f"Offload {knobs.offload}: peak activations are the device's, after the copies to host memory; each "
        "schedule's host memory and copy engine are on its Gantt chart below and on Simulate."
    )
whatif.sensitivity_table(good, "cmp-sensitivity-table", what_if)
log_scale = st.toggle(
    "Log scales for step time and memory (both charts)",
    key=state.kept("cmp-log"),
    bind=state.URL,
    help="So that one slow schedule (naive) does not flatten the others",
)

sig = state.signature(tuple(chosen), ranks, microbatches, chunks, hash(cost), log_scale, what_if, sensitivity, knobs)
bars = charts_compare.comparison_figure(rows, log_scale=log_scale, uniform=uniform)
plot.show(bars, "cmp-bars")
widgets.figure_downloads(bars, "comparison", "cmp-bars-export", sig)
tradeoff = charts_compare.tradeoff_figure(rows, log_scale=log_scale)
plot.show(tradeoff, "cmp-tradeoff")
widgets.figure_downloads(tradeoff, "tradeoff", "cmp-tradeoff-export", sig)

st.subheader("Gantt chart of one of them")
built = [row.schedule for row in good]
shared = st.session_state.get(state.SCHEDULE)  # Simulate's schedule first, when it is among these
pick = st.selectbox(
    "Schedule",
    built,
    index=built.index(shared) if shared in built else 0,
    key=state.kept("cmp-gantt-pick"),
    bind=state.URL,
)
try:
    schedule = cached.registered_schedule(pick, ranks, microbatches, chunks, **knobs.build_options(schedule_info(pick)))
    uniform_cost = cost.for_schedule(schedule)  # the cut the comparison used
    pick_cost = what_if.apply(uniform_cost, schedule.stage_to_rank)
    schedule = knobs.placed(schedule, pick_cost)  # its OFFLOADs and RELOADs, on the copy engine's sub-lane
    cached.simulation(schedule, pick_cost)  # a clear error before drawing
except ValueError as error:
    widgets.show_error(error, f"Cannot simulate {pick}")
    st.stop()
if what_if:  # the slowed step drawn over the uniform one
    whatif.show_growth(schedule, uniform_cost, pick_cost, what_if, "cmp-whatif")
else:
    gantt = cached.gantt_chart(schedule, pick_cost)
    plot.show(gantt, "cmp-gantt")
    widgets.figure_downloads(gantt, f"{pick}-gantt", "cmp-gantt-export", state.signature(sig, pick))

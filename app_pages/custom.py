"""Write, upload or edit a schedule in torch.distributed.pipelining's CSV format; problems shown in place."""

import streamlit as st

from app_pages.parts import cached, cost_inputs, plot, state, widgets
from app_pages.parts import csv_table as table
from pipesim.io import dialect_note, schedule_to_csv
from pipesim.schedules import schedule_names

state.init_state()


def csv_text(raw: bytes) -> str:
    """An upload's text; ValueError for a file that is no text (not UTF-8, or holding control bytes)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"not UTF-8 text (byte {error.start} is 0x{raw[error.start]:02x}): a binary file") from None
    bad = next((i for i, c in enumerate(text) if ord(c) < 32 and c not in "\t\r\n"), None)
    if bad is not None:
        raise ValueError(f"a control character (0x{ord(text[bad]):02x}) at character {bad}: a binary file")
    return text


def _replace_schedule(text: str) -> None:
    """A template, an upload or pasted text replaces the table (edits start afresh from it)."""
    st.session_state["custom_csv"] = text
    st.session_state["custom_base"] = text
    st.session_state["custom_version"] += 1


if st.session_state["custom_csv"] is None:
    _replace_schedule(schedule_to_csv(cached.registered_schedule("1f1b", 2, 4)))
st.session_state.setdefault("custom_base", st.session_state["custom_csv"])
st.session_state.setdefault("custom_upload_id", None)

st.title("Custom schedule")
st.caption(
    "One row per rank, one cell per action in that rank's order (`2F0`: stage 2, forward, microbatch 0; "
    "kinds F, B, I, W; an empty cell is an idle slot) - the `compute_only` or `compute_comms` CSV of "
    "torch.distributed.pipelining (`_dump_csv` / `_load_csv`), with its transfers (`1SEND_F0`, `2RECV_B3`), "
    "collectives (`0UNSHARD`, `0REDUCE_GRAD`) and overlapped pairs (`(0F3;3B1)OVERLAP_F_B`)."
)

DAG_CUSTOM_SOURCE = "Custom schedule (Custom page)"  # the DAG page's choice for the schedule edited here
TEMPLATES = {"deadlock example": state.DEADLOCK_EXAMPLE_CSV, "broken example": state.BROKEN_EXAMPLE_CSV}
load, upload_col, paste_col = st.columns(3)
with load.popover("Start from a template", icon=":material/library_add:", width="stretch"):
    with st.form("custom-template"):
        template = st.selectbox("Template", [*schedule_names(), *TEMPLATES], key="custom-template-name")
        left, right = st.columns(2)
        t_ranks = left.number_input("Ranks", 1, 8, 2, key="custom-template-ranks")
        t_microbatches = right.number_input("Microbatches", 1, 16, 4, key="custom-template-microbatches")
        if st.form_submit_button("Load", type="primary"):
            try:
                text = TEMPLATES.get(template) or schedule_to_csv(
                    cached.registered_schedule(template, int(t_ranks), int(t_microbatches), 2)
                )
            except ValueError as error:
                widgets.show_error(error, f"Cannot build {template}")
            else:
                _replace_schedule(text)
with upload_col.popover("Upload a CSV", icon=":material/upload:", width="stretch"):
    upload = st.file_uploader("Schedule CSV", type=["csv", "txt"], key="custom-upload")
    if upload is not None and upload.file_id != st.session_state["custom_upload_id"]:
        st.session_state["custom_upload_id"] = upload.file_id
        try:
            _replace_schedule(csv_text(upload.getvalue()))
        except ValueError as error:  # the table stays as it was, and says so: no parsed rows of a binary file
            st.session_state["custom_upload_refused"] = f"{upload.name}: {error}; the table is unchanged"
if refused := st.session_state.pop("custom_upload_refused", None):
    st.error(f"**Not a schedule CSV**: {refused}.", icon=":material/error:")
with paste_col.popover("Paste CSV text", icon=":material/content_paste:", width="stretch"):
    with st.form("custom-paste"):
        pasted = st.text_area("CSV", st.session_state["custom_csv"], height=200, key="custom-paste-text")
        if st.form_submit_button("Use this text", type="primary"):
            _replace_schedule(pasted)


def _commit_edits(grid_key: str) -> None:
    """An edit of the table (its on_change callback, before the rerun) becomes the schedule's text at once, and the
    next table is drawn from it: what the user typed is what the table shows and what is checked, even when it
    makes the schedule invalid (a table kept from an earlier run would show the old cell over the new problem)."""
    text = table.committed_text(st.session_state["custom_base"], st.session_state.get(grid_key))
    st.session_state["custom_csv"] = text
    st.session_state["custom_base"] = text
    st.session_state["custom_version"] += 1


grid_key = f"custom-grid-{st.session_state['custom_version']}"
# Edits not yet committed (none after `_commit_edits`; a test's) are applied first, so the problems are found on,
# and the table drawn from, what the user sees.
text = table.committed_text(st.session_state["custom_base"], st.session_state.get(grid_key))
grid = table.editor_grid(text)
st.session_state["custom_csv"] = text  # the edited table is the schedule every page sees

try:  # every problem, each in its cell (not only the reader's first)
    schedule, problems = table.all_problems(text)
except ValueError as error:  # too large for the app
    widgets.show_error(error, "Cannot use this schedule")
    schedule, problems = None, []

# The costs stay in the sidebar whatever the table holds (a schedule being fixed keeps its costs).
with st.sidebar:
    source = cost_inputs.cost_source_picker()
    with st.form("custom-cost-form"):
        rows_given = max(1, len([line for line in text.splitlines() if line.strip()]))
        spec = cost_inputs.cost_fields(source, schedule.num_stages if schedule is not None else rows_given)
        st.form_submit_button("Simulate", type="primary", width="stretch")

deadlock = bool(problems) and all(p.kind == "deadlock" for p in problems)
if deadlock:
    st.error(
        "**Deadlock**: the marked actions wait on each other in a cycle; "
        + (cached.deadlock_explanation(schedule) or ""),
        icon=":material/block:",
    )
    # A button, not a page link: the DAG page must open on this custom schedule, not on its default 1f1b.
    if st.button(
        "See the cycle in the dependency graph (DAG page, this schedule)",
        key="custom-dag",
        icon=":material/account_tree:",
    ):
        st.session_state["dag-origin"] = DAG_CUSTOM_SOURCE
        st.switch_page("app_pages/dag.py", query_params={})  # {}: bound settings forbid a clear
elif problems:
    st.error(
        f"**{len(problems)} problem{'s' if len(problems) > 1 else ''}** in this schedule: the cells at fault "
        f"start with {table.CELL_MARK.strip()}, the rows and columns at fault are marked{table.PROBLEM_MARK}, and "
        "the problem column (first) says what is wrong.",
        icon=":material/error:",
    )
styled, labels = table.editor_table(grid, problems)
st.data_editor(
    styled,
    key=grid_key,
    num_rows="fixed",
    width="stretch",
    disabled=["problem"],
    on_change=_commit_edits,
    args=(grid_key,),
    column_config={**labels, "problem": st.column_config.TextColumn("problem", width="medium")},
)
if problems or schedule is None:
    if not deadlock:
        for problem in problems[:20]:
            st.markdown(f"- {problem.message}")
    st.stop()

st.success(f"Valid: {schedule.describe()}", icon=":material/check_circle:")
if note := dialect_note(schedule):  # torch's older B/W/BW cells, read as I/W/B
    st.caption(note)

st.caption(cost_inputs.COST_MEANING)

try:  # per-rank costs cut per chunk, as `pipesim simulate --csv-in` reads them
    cost = cost_inputs.cost_model(spec).for_pipeline(schedule.num_stages, schedule.num_ranks)
    timeline, metrics = cached.simulation(schedule, cost)
except ValueError as error:
    widgets.show_error(error, "Cannot simulate")
    st.stop()

if st.button("Run this schedule for real", icon=":material/play_circle:", key="custom-send"):
    st.session_state["run_schedule"] = schedule
    st.session_state["run-use-custom"] = True  # the Run page runs it
    st.switch_page("app_pages/run.py", query_params={})

widgets.metric_cards(metrics, timeline.meta["step_ms"])
gantt = cached.gantt_chart(schedule, cost)
plot.show(gantt, "custom-gantt")
sig = state.signature(cached.schedule_key(schedule), hash(cost))
widgets.figure_downloads(gantt, "custom-gantt", "custom-gantt-export", sig)
widgets.data_downloads(timeline, schedule, metrics, "custom", "custom-data")

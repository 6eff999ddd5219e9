"""Launch a real run (torchrun), follow it live, then lay the measured timeline over the simulated one.

torch is never imported here: executor.host.launch starts the ranks as separate processes. The page is its
parts, one concern each: `run_form` (the form and the run config it describes), `run_launch` (starting the
run), `run_live` (progress, log, Cancel), `run_result` (a finished run), `run_reference` (torch's own run and
the losses), `run_history` (earlier runs); `trace_import` imports profiler traces.
"""

import streamlit as st

from app_pages import live_runs, run_form, run_history, run_launch, run_live, run_result, state, trace_import, widgets
from executor.host import run_folder

state.init_state()
st.title("Run a schedule for real")
st.caption(
    "Runs the very same schedule under torchrun (CPU with gloo, or CUDA GPUs) and lays the measured "
    "timeline over the simulated one. A profile run measures each stage first, so the simulation "
    "predicts the step time of this model on this machine."
)

if st.session_state["run_handle"] is None:  # a reload (a new session) finds a run still going, from its folder
    st.session_state["run_handle"] = live_runs.running(state.runs_root())
handle = st.session_state["run_handle"]
custom = st.session_state["run_schedule"]
running = handle is not None and not handle.done()

request = run_form.draw(custom, running)
if request is not None:
    run_launch.start(request, custom)

if st.session_state["run_handle"] is not None:
    run_live.show(running)

if st.session_state["selected_run"]:
    try:
        run_result.show(run_folder.load_run(st.session_state["selected_run"]))
    except ValueError as error:
        widgets.show_error(error, "Cannot open the run")

trace_import.show_import(
    run_folder.profiler_trace_sets(st.session_state["selected_run"]) if st.session_state["selected_run"] else {}
)
st.divider()
run_history.show()

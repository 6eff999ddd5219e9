"""Launch a real run (torchrun), follow it live, then lay the measured timeline over the simulated one.

torch is never imported here: pipesim_executor.host.launch starts the ranks as separate processes. The page is its
parts (app_pages/parts/run/), one concern each: `form` (the form and the run config it describes), `launch`
(starting the run), `live` (progress, log, Cancel), `result` (a finished run), `reference` (torch's own run and
the losses), `history` (earlier runs); `traces` imports profiler traces. The run shown is in the URL
(`?run=FOLDER`), so a reload or a shared link opens it again.
"""

import streamlit as st

from app_pages.parts import guide, state, widgets
from app_pages.parts.run import elsewhere, form, history, launch, live, registry, result, traces
from pipesim_executor.host import run_folder

state.init_state()
st.title("Run a schedule for real")
guide.tour_banner("run")
st.caption(
    "Runs the very same schedule under torchrun (CPU with gloo, or CUDA GPUs) and lays the measured "
    "timeline over the simulated one. A profile run measures each stage first, so the simulation "
    "predicts the step time of this model on this machine."
)

if st.session_state["run_handle"] is None:  # a reload (a new session) finds its run still going
    st.session_state["run_handle"] = registry.running(state.runs_root())
handle = st.session_state["run_handle"]
custom = st.session_state["run_schedule"]
running = handle is not None and not handle.done()

opened = None
if st.session_state["selected_run"] is None and st.query_params.get("run"):
    try:
        opened = history.folder_of(st.query_params["run"])
    except ValueError as error:
        st.warning(f"The link's run cannot be opened: {error}", icon=":material/link_off:")
        del st.query_params["run"]
    following = registry.running(state.runs_root(), opened) if opened and not running else None
    if following is not None:  # a link to a run still going (the banner's): followed live, with Cancel
        st.session_state["run_handle"], handle, running = following, following, True
    else:
        st.session_state["selected_run"] = opened

# another job timing on this machine: named in a banner; the user's form, URL and run stay theirs
waits = elsewhere.busy(state.runs_root(), handle)
elsewhere.show(state.runs_root(), handle)
request = form.draw(custom, running, waits)
if request is not None:
    launch.start(request, custom)

if st.session_state["run_handle"] is not None:
    live.show(running)

selected = st.session_state["selected_run"]
if selected:
    st.query_params["run"] = history.name_of(selected)
    try:
        result.show(run_folder.load_run(selected))
    except ValueError as error:
        widgets.show_error(error, "Cannot open the run")
elif st.session_state["run_handle"] is None:
    st.info(
        "Nothing shown yet: set the schedule, model and devices in the sidebar and press **Launch run** at its "
        "bottom (a 2-rank CPU run of the tiny model takes about a minute here), or open an earlier run below.",
        icon=":material/arrow_back:",
    )

traces.show_import(run_folder.profiler_trace_sets(selected) if selected else {})
st.divider()
history.show()

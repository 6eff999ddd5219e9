"""The Run page's live view of a run in progress: progress, the readable log, the raw log, Cancel."""

from __future__ import annotations

import streamlit as st

from pipesim_executor.progress import readable_log


def show(running: bool) -> None:
    """The live view, redrawn every second while a run goes (a fragment: the rest of the page stays put)."""
    st.subheader("Running")
    st.fragment(run_every=1.0 if running else None)(_live_run)()


def _live_run() -> None:
    """Polls the RunHandle kept in session state; on completion the whole page reruns to show the result."""
    current = st.session_state["run_handle"]
    if current is None:
        return
    if current.done():
        st.session_state["run_handle"] = None
        st.session_state["selected_run"] = str(current.run_dir)
        st.rerun()
    config = getattr(current, "config", None)
    if config is not None:  # a job started elsewhere (the Plan page's Verify, the CLI) runs its own settings
        st.caption(
            f"This run's own settings: {config.describe()}. Your form keeps yours; Launch is ready once it ends."
        )
    events = current.events()
    steps_seen = [e for e in events if e.get("event") == "step"]
    last = steps_seen[-1] if steps_seen else (events[-1] if events else {})
    text = f"{current.run_dir.name}: {last.get('event', 'starting')}"
    if last.get("event") == "step":
        text += f" {last.get('step', 0) + 1}/{last.get('steps', '?')} ({last.get('phase', 'run')})"
    st.progress(float(current.progress), text=text)
    st.code(readable_log(current.log_tail(200), 30) or "(waiting for the first output)", language=None, height=300)
    st.download_button(
        "Raw log",
        data=lambda: current.log_tail(2000),
        file_name=f"{current.run_dir.name}-log.txt",
        mime="text/plain",
        key="run-raw-log",
        icon=":material/download:",
        on_click="ignore",
    )
    if st.button("Cancel run", icon=":material/stop_circle:", key="run-cancel", type="secondary"):
        with st.spinner("Ending every process of the run…"):
            current.cancel()
        st.rerun()

"""The Run page's live view of a run in progress: progress, the readable log, the raw log, Cancel."""

from __future__ import annotations

from typing import Any

import streamlit as st

from pipesim_executor.progress import readable_log


def show(running: bool) -> None:
    """The live view, redrawn every second while a run goes (a fragment: the rest of the page stays put)."""
    st.subheader("Running")
    st.fragment(run_every=1.0 if running else None)(_live_run)()


def where(current: Any) -> str:
    """`NAME: step 3/5 (measure)`: the run's latest event."""
    events = current.events()
    steps_seen = [e for e in events if e.get("event") == "step"]
    last = steps_seen[-1] if steps_seen else (events[-1] if events else {})
    text = f"{current.run_dir.name}: {last.get('event', 'starting')}"
    if last.get("event") == "step":
        text += f" {last.get('step', 0) + 1}/{last.get('steps', '?')} ({last.get('phase', 'run')})"
    return text


def log(current: Any) -> None:
    """The readable log and the raw one as a download."""
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
    if config is not None:
        st.caption(f"This run's settings: {config.describe()}.")
    st.progress(float(current.progress), text=where(current))
    log(current)
    if st.button("Cancel run", icon=":material/stop_circle:", key="run-cancel", type="secondary"):
        with st.spinner("Ending every process of the run…"):
            current.cancel()
        st.rerun()

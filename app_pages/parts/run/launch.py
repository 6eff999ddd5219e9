"""The Run page's launch: a submitted form becomes a started run, or a plain error with nothing started."""

from __future__ import annotations

import streamlit as st

from app_pages.parts import state, widgets
from app_pages.parts.run import registry
from app_pages.parts.run.form import RunRequest
from pipesim.ir import Schedule
from pipesim_executor.host import launch
from pipesim_executor.host.machine import MachineBusy


def start(request: RunRequest, custom: Schedule | None) -> None:
    """Check and start the run; on success keep its handle (this session and the server's registry) and rerun, so
    the page redraws with the launch button disabled and the live view polling."""
    try:
        config = request.config(custom)
        with st.spinner("Checking the run and starting torchrun…"):
            handle = launch.start_run(config, state.runs_root(), schedule=request.schedule(custom))
    except (ValueError, MachineBusy) as error:  # refused before anything started: nothing is lost
        widgets.show_error(error, "Cannot start the run")
        return
    st.session_state["run_handle"] = handle
    st.session_state["selected_run"] = None
    registry.remember(handle)
    st.rerun()

"""The Run page's earlier runs: the table of the runs folder, and opening one (live when it is still going)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import streamlit as st

from app_pages.parts import live_runs, runs, state, widgets
from pipesim_executor.host.run_folder import check_name


def folder_of(name: str) -> str:
    """The run folder a URL's `run=NAME` names, under the runs folder; ValueError of one line for anything but a
    run's name (the executor's check: a path in a URL must not open a folder elsewhere, nor a name too long for
    a file system reach one)."""
    check_name(name)
    return str(state.runs_root() / name)


def name_of(folder: str) -> str:
    return Path(folder).name


def show() -> None:
    st.subheader("Earlier runs")
    listed = runs.run_list(str(state.runs_root()))
    if not listed:
        st.caption(f"No runs yet under {state.runs_root()}/.")
        return
    st.dataframe(
        pd.DataFrame(listed),
        hide_index=True,
        width="stretch",
        column_config={  # figures as text: a run without one shows a dash, where a number column shows "None"
            "measured step (ms)": widgets.text_column("measured_step"),
            "predicted step (ms)": widgets.text_column("predicted_step"),
            "error": widgets.text_column("prediction_error"),
            "status": st.column_config.TextColumn("status", width="medium"),  # "cancelled" whole, never "cancelle"
        },
    )
    # Runs that can be opened first (the newest first), damaged folders last: the one picked by default is a run.
    folders = [r["folder"] for r in listed if r["status"] != "damaged"] + [
        r["folder"] for r in listed if r["status"] == "damaged"
    ]
    shown = st.session_state.get("selected_run")
    if shown and name_of(shown) in folders and st.session_state.get("run-open-for") != shown:
        # the picker starts at the run shown above, not at the newest one
        st.session_state["run-open-pick"] = name_of(shown)
        st.session_state["run-open-for"] = shown
    with st.form("run-open"):
        chosen = st.selectbox("Open a run", folders, key="run-open-pick")
        if st.form_submit_button("Open"):
            live = live_runs.running(state.runs_root(), str(state.runs_root() / chosen))
            if live is not None:  # still going: follow it live, with Cancel, rather than a half-written folder
                st.session_state["run_handle"] = live
            else:
                st.session_state["selected_run"] = str(state.runs_root() / chosen)
            st.rerun()

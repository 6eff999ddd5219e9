"""The Run page's earlier runs: the table of the runs folder, and opening one (live when it is still going)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages import live_runs, runs, state


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
        column_config={
            "started": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm:ss"),
            "error": st.column_config.NumberColumn("prediction error", format="percent"),
        },
    )
    with st.form("run-open"):
        chosen = st.selectbox("Open a run", [r["folder"] for r in listed], key="run-open-pick")
        if st.form_submit_button("Open"):
            live = live_runs.running(state.runs_root(), str(state.runs_root() / chosen))
            if live is not None:  # still going: follow it live, with Cancel, rather than a half-written folder
                st.session_state["run_handle"] = live
            else:
                st.session_state["selected_run"] = str(state.runs_root() / chosen)
            st.rerun()

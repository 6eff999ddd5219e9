"""The Run page's earlier runs: the table of the runs folder, and opening one (live when it is still going)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from app_pages.parts import state, widgets
from app_pages.parts.run import registry
from pipesim_executor.host.run_folder import check_name


def _runs_stamp(root: Path) -> tuple:
    """Changes whenever a run folder appears, or a run writes its result."""
    if not root.is_dir():
        return ()
    stamp = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        result = folder / "result.json"
        stamp.append((folder.name, result.stat().st_mtime if result.exists() else None))
    return tuple(stamp)


@st.cache_data(max_entries=8, show_spinner=False)
def _run_rows(root: str, stamp: tuple) -> list[dict[str, Any]]:
    import datetime

    from pipesim.units import MISSING, format_ms, format_percent
    from pipesim_executor.host.run_folder import list_runs

    rows = []
    for result in list_runs(Path(root)):
        config = result.config
        rows.append(
            {
                "folder": result.run_dir.name,
                "status": result.status,
                "schedule": result.schedule.name if result.schedule is not None else MISSING,
                "ranks": str(config.pipeline.num_ranks) if config is not None else MISSING,
                "microbatches": f"{config.pipeline.num_microbatches:,}" if config is not None else MISSING,
                "measured step (ms)": format_ms(result.measured_step_ms, unit=False),
                "predicted step (ms)": format_ms(result.predicted_step_ms, unit=False),
                "error": format_percent(result.prediction_error, signed=True),
                "started": datetime.datetime.fromtimestamp(result.started_at).strftime("%Y-%m-%d %H:%M:%S")
                if result.started_at
                else MISSING,
                "outcome": result.headline,  # one sentence; the log tail is the run's own page's
            }
        )
    return rows


def run_list(root: str) -> list[dict[str, Any]]:
    """Earlier runs under `root`, newest first, as table rows (re-read only when a folder changes)."""
    return _run_rows(root, _runs_stamp(Path(root)))


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
    listed = run_list(str(state.runs_root()))
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
            live = registry.running(state.runs_root(), str(state.runs_root() / chosen))
            if live is not None:  # still going: follow it live, with Cancel, rather than a half-written folder
                st.session_state["run_handle"] = live
            else:
                st.session_state["selected_run"] = str(state.runs_root() / chosen)
            st.rerun()

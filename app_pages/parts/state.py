"""The app's session state, limits and defaults: what every page may read, set once per session.

Limits keep a browser tab responsive and reruns fast; the command line has none of them. Past 10,000 actions the
Gantt chart is binned (pipesim.charts.lod), so the Simulate page's limit is what the core simulates in about a
second (docs/benchmarks.md: ~130k actions in 0.8 s), not what plotly draws as bars.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import streamlit as st

from pipesim.programs import programs

MAX_RANKS = 32
MAX_MICROBATCHES = 1024
MAX_ACTIONS = 131_072  # a registered schedule, e.g. 1f1b on 32 ranks x 1024 microbatches x (F, B)
MAX_CUSTOM_ACTIONS = 20_000  # the Custom page edits its schedule as a table: a table's size

# The first screen: a meaningful chart before any input is touched.
DEFAULT_SCHEDULE = "1f1b"
DEFAULT_RANKS = 4
DEFAULT_MICROBATCHES = 8
DEFAULT_CHUNKS = 2

# The settings every page shares, one widget key each: the schedule chosen on Simulate is the
# one the DAG draws and the Run page runs, with the same ranks, microbatches and costs; each key is also the
# setting's URL parameter (`URL`), so a view can be shared and reloaded.
SCHEDULE = "schedule"
RANKS = "ranks"
MICROBATCHES = "microbatches"
CHUNKS = "chunks"
COST = "cost"  # the cost widgets' key prefix (app_pages.parts.cost_inputs)
URL = "query-params"  # `bind=URL`: the widget's value lives in the page's URL

RUNS_ROOT_ENV = "PIPESIM_RUNS_ROOT"
PLANS_ROOT_ENV = "PIPESIM_PLANS_ROOT"
CUSTOM_SCHEDULE_LABEL = "custom (from the Custom page)"  # the Run page's entry for a schedule sent to it
# A deadlock the DAG and Custom pages can show: each rank's order is fine on its own,
# but rank 1 starts with microbatch 1 while rank 0 waits for microbatch 0's backward.
DEADLOCK_EXAMPLE_CSV = "0F0,0B0,0F1,0B1\r\n1F1,1B1,1F0,1B0\r\n"
# A file with a typo (``0X1``) and a forward without its backward.
BROKEN_EXAMPLE_CSV = "0F0,0X1,0B0\r\n1F0,1B0,1F1\r\n"


def init_state() -> None:
    """Session keys every page may read; set once per session, never overwritten."""
    st.session_state.setdefault("kept_keys", set())  # widget keys whose values outlive their page (`kept`)
    st.session_state.setdefault("custom_csv", None)  # filled from the default template on first use
    st.session_state.setdefault("custom_version", 0)  # bumps when a template or an upload replaces the table
    st.session_state.setdefault("run_handle", None)  # pipesim_executor.host.launch.RunHandle of the run in progress
    st.session_state.setdefault("run_schedule", None)  # a custom Schedule sent from the Custom page
    st.session_state.setdefault("selected_run", None)  # run folder shown on the Run page


def kept(key: str) -> str:
    """A widget key whose value stays for the whole session, across pages (see `keep_settings`)."""
    st.session_state.setdefault("kept_keys", set()).add(key)
    return key


def keep_settings() -> None:
    """Called on every run before the page: Streamlit forgets the values of widgets that a run does not draw
    (another page's), unless they were last set through session state; setting each kept key to its own value
    does that, so a page's settings are there again when the user comes back."""
    for key in st.session_state.get("kept_keys", ()):
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]


def runs_root() -> Path:
    """Where runs live: ./runs, or $PIPESIM_RUNS_ROOT (tests point it at a temporary folder)."""
    return Path(os.environ.get(RUNS_ROOT_ENV) or "runs")


def plans_root() -> Path:
    """Where the Plan page writes the plans it verifies: beside the runs folder, never inside it (a plan's folder
    there would be listed as a damaged run): ./plans, $PIPESIM_PLANS_ROOT, or plans/ next to $PIPESIM_RUNS_ROOT."""
    if os.environ.get(PLANS_ROOT_ENV):
        return Path(os.environ[PLANS_ROOT_ENV])
    return runs_root().parent / "plans"


def check_limits(
    num_ranks: int, num_microbatches: int, num_actions: int | None = None, max_actions: int = MAX_CUSTOM_ACTIONS
) -> None:
    """Refuse sizes that would make the browser crawl, naming the limit."""
    if num_ranks > MAX_RANKS:
        raise ValueError(
            f"{num_ranks:,} ranks is more than this app draws (at most {MAX_RANKS}); "
            f"use the command line ({programs().pipesim}) for larger pipelines"
        )
    if num_microbatches > MAX_MICROBATCHES:
        raise ValueError(
            f"{num_microbatches:,} microbatches is more than this app draws (at most {MAX_MICROBATCHES}); "
            f"use the command line ({programs().pipesim}) for longer steps"
        )
    if num_actions is not None and num_actions > max_actions:
        raise ValueError(
            f"the schedule has {num_actions:,} actions; this app draws at most {max_actions:,}: "
            f"fewer ranks or microbatches, or the command line ({programs().pipesim})"
        )


def signature(*parts: object) -> str:
    """A short digest of a page's inputs: tells whether a prepared export still matches the chart."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]

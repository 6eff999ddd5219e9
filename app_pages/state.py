"""The app's session state, limits and defaults: what every page may read, set once per session.

Limits keep a browser tab responsive (tens of thousands of bars are fine in plotly, hundreds of thousands are
not) and reruns fast; the command line has none of them.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import streamlit as st

MAX_RANKS = 32
MAX_MICROBATCHES = 128
MAX_CUSTOM_ACTIONS = 20_000

# The first screen: a meaningful chart before any input is touched.
DEFAULT_SCHEDULE = "1f1b"
DEFAULT_RANKS = 4
DEFAULT_MICROBATCHES = 8
DEFAULT_CHUNKS = 2

RUNS_ROOT_ENV = "PIPESIM_RUNS_ROOT"
CUSTOM_SCHEDULE_LABEL = "custom (from the Custom page)"  # the Run page's entry for a schedule sent to it
# A deadlock the DAG and Custom pages can show: each rank's order is fine on its own,
# but rank 1 starts with microbatch 1 while rank 0 waits for microbatch 0's backward.
DEADLOCK_EXAMPLE_CSV = "0F0,0B0,0F1,0B1\r\n1F1,1B1,1F0,1B0\r\n"
# A file with a typo (``0X1``) and a forward without its backward.
BROKEN_EXAMPLE_CSV = "0F0,0X1,0B0\r\n1F0,1B0,1F1\r\n"


def init_state() -> None:
    """Session keys every page may read; set once per session, never overwritten."""
    st.session_state.setdefault("custom_csv", None)  # filled from the default template on first use
    st.session_state.setdefault("custom_version", 0)  # bumps when a template or an upload replaces the table
    st.session_state.setdefault("run_handle", None)  # executor.launch.RunHandle of the run in progress
    st.session_state.setdefault("run_schedule", None)  # a custom Schedule sent from the Custom page
    st.session_state.setdefault("selected_run", None)  # run folder shown on the Run page
    st.session_state.setdefault("exports", {})  # key -> (signature, {fmt: bytes} or a message)


def runs_root() -> Path:
    """Where runs live: ./runs, or $PIPESIM_RUNS_ROOT (tests point it at a temporary folder)."""
    return Path(os.environ.get(RUNS_ROOT_ENV) or "runs")


def check_limits(num_ranks: int, num_microbatches: int, num_actions: int | None = None) -> None:
    """Refuse sizes that would make the browser crawl, naming the limit."""
    if num_ranks > MAX_RANKS:
        raise ValueError(f"{num_ranks} ranks is more than this app draws (at most {MAX_RANKS}); "
                         "use the command line (python -m pipesim) for larger pipelines")
    if num_microbatches > MAX_MICROBATCHES:
        raise ValueError(f"{num_microbatches} microbatches is more than this app draws (at most {MAX_MICROBATCHES}); "
                         "use the command line (python -m pipesim) for longer steps")
    if num_actions is not None and num_actions > MAX_CUSTOM_ACTIONS:
        raise ValueError(f"the schedule has {num_actions} actions; this app draws at most {MAX_CUSTOM_ACTIONS}")


def signature(*parts: object) -> str:
    """A short digest of a page's inputs: tells whether a prepared export still matches the chart."""
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]

"""The schedule and size fields several pages share: one widget key each (state.SCHEDULE, RANKS, MICROBATCHES,
CHUNKS), so a schedule picked on Simulate is the one the DAG draws and the Run page runs, at the same size, and
each one's value is in the page's URL.

Same key, same bounds on every page: a value set on one page is always valid on the others. The fields hold the
app's size limits, so every field out of them is named at once; the actions limit is checked where the schedule is
built, naming it.
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from app_pages.parts import fields, state
from pipesim.schedules import ScheduleInfo, schedule_names


def schedule_picker(help_text: str | None = None, **options: Any) -> str:
    """The registered schedule every page shares (outside a form: the fields below depend on it)."""
    names = schedule_names()
    return st.selectbox(
        "Schedule",
        names,
        index=names.index(state.DEFAULT_SCHEDULE),
        key=state.kept(state.SCHEDULE),
        bind=state.URL,
        help=help_text,
        **options,
    )


def chunks_unused(info: ScheduleInfo) -> str | None:
    """Why the chunks-per-rank field does not apply to `info`'s family (None when the user chooses them)."""
    if info.takes_chunks:
        return None
    chunks = info.chunks_per_rank()
    if chunks > 1:
        return f"{info.name} always holds {chunks} chunks per rank (its {info.placement} placement)"
    return f"{info.name} holds one stage per rank"


def w_unused(infos: list[ScheduleInfo]) -> str | None:
    """Why the W share does not apply to any of `infos` (None when one of them splits its backward)."""
    if not infos or any(info.split_backward for info in infos):
        return None
    names = ", ".join(info.name for info in infos)
    return (
        f"Not used by {names}: each backward runs whole (B); only the zero-bubble schedules (zb-h1, zb-h2, zbv, "
        "dualpipev) run its weight part (W) apart"
    )


def size_fields(chunks_reason: str | None = None, problems: list[str] | None = None) -> tuple[int, int, int]:
    """Ranks, microbatches and chunks per rank, side by side; the chunks field is disabled with `chunks_reason`
    where the schedule fixes its chunks itself. A value out of range is said under its field and added to
    `problems` (app_pages.parts.fields), so the page can mark its chart as not updated."""
    problems = [] if problems is None else problems
    left, right = st.columns(2)
    ranks = fields.number(
        left,
        "Ranks",
        1,
        state.MAX_RANKS,
        state.DEFAULT_RANKS,
        problems,
        key=state.kept(state.RANKS),
        bind=state.URL,
        help=f"Devices in the pipeline, one process each; at most {state.MAX_RANKS} in the app",
    )
    microbatches = fields.number(
        right,
        "Microbatches",
        1,
        state.MAX_MICROBATCHES,
        state.DEFAULT_MICROBATCHES,
        problems,
        key=state.kept(state.MICROBATCHES),
        bind=state.URL,
        help=f"Slices of the batch per step; at most {state.MAX_MICROBATCHES:,} in the app, and "
        f"{state.MAX_ACTIONS:,} actions",
    )
    chunks = fields.number(
        st,
        "Chunks per rank",
        1,
        16,
        state.DEFAULT_CHUNKS,
        problems,
        key=state.kept(state.CHUNKS),
        bind=state.URL,
        disabled=chunks_reason is not None,
        help=chunks_reason or "Virtual stages per rank: the model cut into ranks x chunks stages",
    )
    return int(ranks or 0), int(microbatches or 0), int(chunks or 0)

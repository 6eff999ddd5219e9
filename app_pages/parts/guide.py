"""A newcomer's way in: what each page is for in the order a user works, a tour that runs without typing, and
the glossary of every quantity the pages show (pipesim.units.QUANTITIES).

The tour is a list of stops; each opens a page with settings of its own (set through session state before
that page draws its widgets, from a button's callback) and says what to look at. Nothing here computes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import streamlit as st

from app_pages.parts import state
from app_pages.parts.plan.presets import PRESETS, SMALL
from pipesim.units import QUANTITIES

PAGE_PATHS = {
    "simulate": "app_pages/simulate.py",
    "compare": "app_pages/compare.py",
    "dag": "app_pages/dag.py",
    "custom": "app_pages/custom.py",
    "plan": "app_pages/plan.py",
    "run": "app_pages/run.py",
}

# The pages in the order a user works, each with what it answers.
WORKFLOW = (
    ("simulate", "Simulate", "One schedule on your costs: where each rank idles (the bubble), the step time, memory."),
    ("compare", "Compare", "Several schedules on the same costs: step time, bubble and memory side by side."),
    ("plan", "Plan", "Which schedule, microbatch size and split for a model on your devices under a memory cap; "
     "Verify runs the best ones for real."),
    ("run", "Run", "The schedule for real under torchrun (CPU or GPU): progress and Cancel, then the measured "
     "timeline laid over the simulated one (the overlay) and where the time went."),
)  # fmt: skip
ALSO = "Also: **DAG** draws the dependencies (and a deadlock's cycle); **Custom schedule** edits an order by hand."


@dataclass(frozen=True)
class Stop:
    """One stop of the tour: the page it opens, what to look at there, the settings it opens the page with."""

    page: str
    title: str
    text: str
    settings: Mapping[str, Any] = field(default_factory=dict)
    in_url: tuple[str, ...] | None = None  # the settings its URL carries (None: every plain one)

    def query(self) -> dict[str, str]:
        """The stop's URL query: its settings, so the address bar restores the stop (a shared link, a reload);
        lists and switches are left to the page's own bound widgets."""
        keys = self.settings.keys() if self.in_url is None else self.in_url
        return {
            key: str(self.settings[key])
            for key in keys
            if isinstance(self.settings[key], (str, int, float)) and not isinstance(self.settings[key], bool)
        }


TOUR = (
    Stop(
        "simulate",
        "Simulate",
        "ZB-H1 on 4 ranks with 8 microbatches. Each bar is one action (F forward, I and W the two halves of the "
        "backward); grey is a rank sitting idle, the bubble. The cards give the step time and the bubble; hover "
        "a bar for its times.",
        {state.SCHEDULE: "zb-h1", state.RANKS: 4, state.MICROBATCHES: 8, "synth": False},
    ),
    Stop(
        "compare",
        "Compare",
        "The same costs under five schedules. The trade-off chart puts step time against memory: the schedules "
        "no other beats on both (the Pareto front) are ringed.",
    ),
    Stop(
        "plan",
        "Plan",
        "A small model on 2 devices (the 'small' preset, which trains here in seconds). Each dot is a candidate; "
        "the ringed one is the recommendation. Verify (below) runs the best two for real.",
        {"plan-preset": SMALL, **PRESETS[SMALL]},
        in_url=("plan-preset",),  # the preset's link restores its model (app_pages.parts.plan.model.restore_preset)
    ),
    Stop(
        "run",
        "Run",
        "The form is set for a short CPU run of 1F1B on 2 ranks with a profile first: press **Launch run** at "
        "the bottom of the sidebar, and watch its progress (Cancel stops it and keeps the steps measured).",
        {
            state.SCHEDULE: "1f1b",
            state.RANKS: 2,
            state.MICROBATCHES: 4,
            "run-size": "tiny",
            "run-steps": 3,
            "run-device": "cpu",
            "run-profile": True,
        },
    ),
    Stop(
        "run",
        "Overlay",
        "When the run ends, its measured timeline is drawn over the simulated one, rank by rank: the prediction "
        "error says how far the simulation was, and the bars below say where each rank's step went.",
    ),
)


def _go(index: int | None) -> None:
    """A tour button's callback: settings first (before the next page draws its widgets), then the stop's page
    (opened by `tour_banner` on the rerun this click causes: a callback cannot switch pages)."""
    st.session_state["tour"] = index
    if index is not None:
        for key, value in TOUR[index].settings.items():
            st.session_state[key] = value
        st.session_state["tour_page"] = TOUR[index].page


def start_tour() -> None:
    _go(0)


def landing() -> None:
    """What each page is for, in the order a user works, and the tour; open on a session's first page."""
    first = st.session_state.setdefault("landing_seen", False) is False
    st.session_state["landing_seen"] = True
    with st.expander("New here? What each page is for, and a tour", expanded=first, icon=":material/explore:"):
        for number, (page, title, text) in enumerate(WORKFLOW, start=1):
            link, words = st.columns([1, 6], vertical_alignment="center")
            link.page_link(PAGE_PATHS[page], label=f"{number}. {title}")
            words.markdown(text)
        st.caption(ALSO)
        st.button(
            "Take the tour (five stops, no typing)",
            key="tour-start",
            on_click=start_tour,
            icon=":material/tour:",
            type="primary",
        )


def tour_banner(page: str) -> None:
    """The tour's text on its current stop, with Next and End; nothing when no tour runs or it is elsewhere."""
    target = st.session_state.pop("tour_page", None)
    index = st.session_state.get("tour")
    if target is not None and target != page:
        # the stop's own settings in its URL (without them the plan stop left a bare /plan)
        query = TOUR[index].query() if index is not None and 0 <= index < len(TOUR) else {}
        st.switch_page(PAGE_PATHS[target], query_params=query)
    if index is None or not 0 <= index < len(TOUR) or TOUR[index].page != page:
        return
    stop = TOUR[index]
    with st.container(border=True, key="tour-banner"):
        st.markdown(f"**Tour, stop {index + 1} of {len(TOUR)}: {stop.title}.** {stop.text}")
        left, right = st.columns([3, 1])
        if index + 1 < len(TOUR):
            left.button(
                f"Next: {TOUR[index + 1].title}", key="tour-next", on_click=_go, args=(index + 1,), type="primary"
            )
        else:
            left.markdown("That is the whole loop: simulate, compare, plan, run, and the overlay.")
        right.button("End the tour", key="tour-end", on_click=_go, args=(None,))


def glossary() -> None:
    """Every quantity's one name and what it means, in a popover of the sidebar (every page)."""
    with st.sidebar.popover("Glossary", icon=":material/menu_book:", width="stretch"):
        st.markdown(
            "\n".join(f"- **{q.name}**{f' ({q.unit})' if q.unit else ''}: {q.meaning}" for q in QUANTITIES.values())
        )

"""The Plan page's robustness to a slow device: for each schedule family's fastest candidate that
fits, the step's growth with each pipeline rank in turn slower by the chosen factor, and the worst rank
(`pipesim.analysis.sensitivity`, as `pipesim compare --sensitivity` reports it). Display only."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from app_pages.parts import cached, whatif, widgets
from pipesim.ir import Schedule
from pipesim.plan import Candidate, PlanInputs, best_per_schedule
from pipesim.units import format_percent


def show(inputs: PlanInputs, candidates: list[Candidate], synthesized: dict[str, Schedule]) -> None:
    """The slowdown field, then one row per family: its candidate, the worst rank's growth and each rank's
    (`synthesized`: the orders of synthesized candidates by label, which their family name cannot rebuild)."""
    st.subheader("Robustness to a slow device")
    problems: list[str] = []
    slowdown = whatif.sensitivity_field(problems, st.columns(3)[0])
    if problems or slowdown is None:
        st.caption("Give a slowdown above 1 to see how much each schedule's step grows with one slower device.")
        return
    families = best_per_schedule(candidates)
    if not families:
        st.caption("No candidate fits: nothing to report.")
        return
    work = 0
    rows, skipped = [], []
    for candidate in families:
        actions = candidate.ranks * candidate.ranks * candidate.microbatches * 3 * max(candidate.virtual_stages, 1)
        work += actions
        if work > whatif.MAX_SENSITIVITY_ACTIONS:
            skipped.append(candidate.schedule)
            continue
        found = cached.plan_sensitivity(inputs, candidate, slowdown, synthesized.get(candidate.label))
        rows.append(
            {
                "candidate": candidate.label,
                "worst rank": found.worst_rank,
                "worst": 100 * found.worst_growth,
                **{f"rank {r}": 100 * g for r, g in enumerate(found.rank_growth)},
            }
        )
    if rows:
        ranks = max(len(row) - 3 for row in rows)
        growth = {f"rank {r}": widgets.percent_column("sensitivity", f"rank {r}", signed=True) for r in range(ranks)}
        st.dataframe(
            pd.DataFrame(rows),
            hide_index=True,
            key="plan-sensitivity-table",
            column_config={"worst": widgets.percent_column("sensitivity", "worst growth", signed=True), **growth},
        )
    st.caption(
        f"Each family's fastest candidate that fits, with one pipeline rank (a device of each replica) {slowdown:g}x "
        f"slower in turn. {format_percent(slowdown - 1, signed=True)} is the whole slowdown: below it the schedule "
        "absorbs part of the slower device in its idle time."
        + (f" Not computed (too many simulations for the page): {', '.join(skipped)}." if skipped else "")
    )

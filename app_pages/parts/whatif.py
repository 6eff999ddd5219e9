"""The what-if of Simulate and Compare: how much slower each rank computes and how much longer each link
takes, read into a `pipesim.cost.perturb.Perturbation` (the one rule of a straggler, the one `pipesim simulate
--slow-rank / --link-delay` applies), and the slowed step drawn over the uniform one; and the sensitivity's
slowdown (Compare and Plan: `pipesim compare --sensitivity`) with Compare's table of it.

The fields are shared by both pages (one key each, in the URL). A value the rule refuses is said under its field
with the valid range and handed to the page as a problem, never a traceback.
"""

from __future__ import annotations

from typing import Any

import pandas as pd
import streamlit as st

from app_pages.parts import cached, fields, plot, state, widgets
from pipesim.analysis import DEFAULT_SLOWDOWN, ComparisonRow
from pipesim.charts import MAX_EXACT_BARS
from pipesim.cost import MAX_FACTOR, CostModel, Perturbation, parse_link_delay
from pipesim.ir import Schedule
from pipesim.units import MISSING, format_ms, format_percent
from pipesim.url_query import read_number_list

SLOW_KEY = "slow-ranks"  # one factor per rank, "1, 1.5, 1, 1"
KINDS_KEY = "slow-kinds"  # which work the slow ranks do slower
LINKS_KEY = "link-delays"  # "A-B:MS, ..."
SENSITIVITY_KEY = "sensitivity"  # the slowdown of one rank whose effect the sensitivity reports
MIN_FACTOR = 0.1  # a rank 10x faster than the others; below 1 a faster rank, as `--slow-rank` takes it
KINDS = ("all", "F", "B", "W")
KIND_NAMES = {
    "all": "all of its work",
    "F": "forwards (F) only",
    "B": "backwards (B, both parts) only",
    "W": "weight gradients (W) only",
}
LINK_PATTERN = r"[0-9 ,:.\-]+"  # the URL's check of the links' text; the page reads it strictly (parse_link_delay)
# Simulated for the sensitivity on one page: about 2.5 s on a loaded 2-core machine (docs/benchmarks.md)
MAX_SENSITIVITY_ACTIONS = 2_000_000
FACTORS_VALID = f"one factor per rank from rank 0, each from {MIN_FACTOR:g} to {MAX_FACTOR:g} (1: as fast as the rest)"


def slowdowns(text: str, num_ranks: int) -> tuple[float, ...]:
    """The factors typed for ranks 0, 1, ... (fewer than the ranks: the rest compute at 1); () for an empty field.
    ValueError naming the value and the valid range."""
    if not text.strip():
        return ()
    try:
        factors = read_number_list(text, False, MIN_FACTOR, MAX_FACTOR)
    except ValueError as error:
        raise ValueError(f"Slowdown per rank: {error}; give {FACTORS_VALID}") from None
    if len(factors) > num_ranks:
        raise ValueError(
            f"Slowdown per rank: {len(factors)} factors for {num_ranks} ranks; give at most one per rank "
            "(the ranks left out compute at 1)"
        )
    return tuple(float(f) for f in factors)


def link_delays(text: str, num_ranks: int) -> tuple[tuple[int, int, float], ...]:
    """`A-B:MS, ...` (every transfer between ranks A and B takes MS longer), each read by `parse_link_delay`; the
    ranks checked against the pipeline's. ValueError naming the bad entry and what is valid."""
    entries = [item.strip() for item in text.split(",")] if text.strip() else []
    links = []
    for entry in entries:
        try:
            links.append(parse_link_delay(entry))
        except ValueError as error:
            raise ValueError(f"Link delays: {error}") from None
    try:
        Perturbation((), tuple(links)).check_ranks(num_ranks)
    except ValueError as error:
        raise ValueError(f"Link delays: {error}") from None
    return tuple(links)


def perturbation(factors: tuple[float, ...], kinds: str, links: tuple[tuple[int, int, float], ...]) -> Perturbation:
    """The per-rank factors (those not 1), slowing `kinds` ("all", or one of F, B, W), and the link delays."""
    if kinds not in KINDS:
        raise ValueError(f"Slower work: {kinds!r} is not one of {', '.join(KINDS)}")
    slow = tuple((r, f) if kinds == "all" else (r, f, kinds) for r, f in enumerate(factors) if f != 1.0)
    return Perturbation.of(slow, links)


def whatif_fields(num_ranks: int, problems: list[str]) -> Perturbation:
    """The what-if fields (inside the page's form): per-rank slowdowns, which work they slow, link delays. A refused
    value is written under its field and appended to `problems`; the result is then no what-if at all."""
    typed = any(st.session_state.get(key) or st.query_params.get(key) for key in (SLOW_KEY, LINKS_KEY))
    with st.expander("What-if: slower ranks and links", expanded=typed, icon=":material/speed:"):
        slow_text = st.text_input(
            "Slowdown per rank",
            "",
            key=state.kept(SLOW_KEY),
            bind=state.URL,
            placeholder="e.g. 1, 1.5, 1, 1",
            help=f"How many times longer each rank takes for its work: {FACTORS_VALID}; empty: every rank at 1. "
            "As `pipesim simulate --slow-rank R:FACTOR`",
        )
        kinds = st.selectbox(
            "Slower work",
            KINDS,
            key=state.kept(KINDS_KEY),
            bind=state.URL,
            help="Which of a slow rank's actions take longer: "
            + "; ".join(f"{kind}: {meaning}" for kind, meaning in KIND_NAMES.items())
            + " (`--slow-rank R:FACTOR:KINDS`)",
        )
        links_text = st.text_input(
            "Link delays (ms)",
            "",
            key=state.kept(LINKS_KEY),
            bind=state.URL,
            placeholder="e.g. 0-1:5, 2-3:1.5",
            help="A-B:MS, comma-separated: every transfer between ranks A and B takes MS ms longer, either way "
            "(`--link-delay A-B:MS`)",
        )
    factors, links, refused = (), (), []
    try:
        factors = slowdowns(slow_text or "", num_ranks)
    except ValueError as error:
        refused.append(str(error))
    try:
        links = link_delays(links_text or "", num_ranks)
    except ValueError as error:
        refused.append(str(error))
    for reason in refused:
        st.error(reason, icon=":material/error:")
    problems += refused
    return Perturbation() if refused else perturbation(factors, kinds or "all", links)


def show_growth(schedule: Schedule, uniform_cost: CostModel, cost: CostModel, what: Perturbation, key: str) -> None:
    """The step under `cost` (`uniform_cost` with `what` priced in) against the uniform one, in words, then drawn
    over it (two lanes per rank) where the schedule is small enough for exact bars."""
    uniform, _ = cached.simulation(schedule, uniform_cost)
    slowed, _ = cached.simulation(schedule, cost)
    base, grown = uniform.meta["step_ms"], slowed.meta["step_ms"]
    growth = format_percent(grown / base - 1, signed=True) if base > 0 else MISSING
    st.info(
        f"**What-if** ({what.describe()}): step time {format_ms(grown)} against {format_ms(base)} with every rank "
        f"and link as costed ({growth}).",
        icon=":material/speed:",
    )
    if 2 * len(slowed.spans) > MAX_EXACT_BARS:
        st.caption(
            f"The slowed step over the uniform one is drawn for schedules of up to {MAX_EXACT_BARS // 2:,} actions; "
            "the chart above is the slowed step."
        )
        return
    figure = cached.whatif_chart(schedule, uniform_cost, cost, what.describe())
    plot.show(figure, key)
    sig = state.signature(cached.schedule_key(schedule), hash(uniform_cost), hash(cost))
    widgets.figure_downloads(figure, f"{schedule.name}-whatif", f"{key}-export", sig)


def sensitivity_field(problems: list[str], where: Any = st) -> float | None:
    """The slowdown whose effect on each rank the sensitivity reports (1: off); None when off or refused. One key
    for Compare and Plan, as the what-if's."""
    value = fields.number(
        where,
        "Sensitivity: one rank slower by",
        1.0,
        MAX_FACTOR,
        DEFAULT_SLOWDOWN,
        problems,
        key=state.kept(SENSITIVITY_KEY),
        bind=state.URL,
        step=0.1,
        help="Each schedule's step growth when one rank alone computes this many times slower, for every rank in "
        f"turn, and the worst rank (`pipesim compare --sensitivity`): from 1 (off) to {MAX_FACTOR:g}",
    )
    if value is None or not 1.0 <= value <= MAX_FACTOR or value == 1.0:
        return None
    return float(value)


def affordable(slowdown: float | None, ranks: int, microbatches: int, chunks: int, schedules: int) -> float | None:
    """`slowdown`, or None (said in a caption) where the sensitivity's simulations (one per rank and schedule, of
    at most 3 actions per stage and microbatch) would hold a page for more than a few seconds (docs/benchmarks.md:
    3.9M estimated actions took 5.4 s)."""
    work = schedules * ranks * (ranks * max(chunks, 2) * microbatches * 3)
    if slowdown is None or work <= MAX_SENSITIVITY_ACTIONS:
        return slowdown
    st.caption(
        f"Sensitivity not computed: {schedules} schedules x {ranks} ranks would simulate about {work:,} actions "
        f"(the page does at most {MAX_SENSITIVITY_ACTIONS:,}); fewer ranks or microbatches, or "
        "`pipesim compare --sensitivity`."
    )
    return None


def sensitivity_table(rows: list[ComparisonRow], key: str, on_top: Perturbation | None = None) -> None:
    """Per schedule, the step's growth with each rank slower in turn and the worst rank: a schedule whose slack
    absorbs the slowdown grows less than the slowdown. `on_top`: the what-if the rows already price in (each rank
    is slowed on top of it)."""
    measured = [row for row in rows if row.error is None and row.sensitivity]
    if not measured:
        return
    slowdown = measured[0].sensitivity["slowdown"]
    ranks = max(len(row.sensitivity["rank_growth"]) for row in measured)
    table = pd.DataFrame(
        [
            {
                "schedule": row.schedule,
                "worst rank": row.sensitivity["worst_rank"],
                "worst": 100 * row.sensitivity["worst_growth"],
                **{f"rank {r}": 100 * g for r, g in enumerate(row.sensitivity["rank_growth"])},
            }
            for row in measured
        ]
    ).set_index("schedule")
    besides = f", on top of the what-if ({on_top.describe()})" if on_top else ""
    st.markdown(f"**Sensitivity**: the step's growth with one rank {slowdown:g}x slower{besides}")
    growth = {f"rank {r}": widgets.percent_column("sensitivity", f"rank {r}", signed=True) for r in range(ranks)}
    st.dataframe(
        table,
        width="stretch",
        key=key,
        column_config={"worst": widgets.percent_column("sensitivity", "worst growth", signed=True), **growth},
    )
    st.caption(
        f"{format_percent(slowdown - 1, signed=True)} is the whole slowdown: a schedule below it absorbs part of the "
        "slower rank in its idle time; one above it passes the delay on to the others."
    )


def with_uniform(table: pd.DataFrame, rows: list[ComparisonRow], uniform: list[ComparisonRow]) -> pd.DataFrame:
    """The comparison table with each schedule's uniform step and its growth beside the slowed step."""
    base = {row.schedule: row.step_ms for row in uniform if row.error is None}
    steps = {row.schedule: row.step_ms for row in rows}
    table = table.copy()
    table.insert(1, "uniform_step_ms", [base.get(name) for name in table.index])
    table.insert(2, "step_growth", [100 * (steps[n] / base[n] - 1) if base.get(n) else None for n in table.index])
    return table


def growth_columns() -> dict:
    """The column formats of `with_uniform`'s two columns."""
    return {
        "uniform_step_ms": widgets.time_column("uniform_step"),
        "step_growth": widgets.percent_column("step_growth", signed=True),
    }

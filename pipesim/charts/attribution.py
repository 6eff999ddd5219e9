"""Where a measured step went: a stacked bar per rank (`attribution_figure`), and the lost time drawn on the
timeline as thin marks under each measured lane.

The attribution (`pipesim.analysis.attribution`) cuts every idle interval of a measured step into schedule idle,
communication wait and overhead; the marks put each piece where it happened, so the overlay shows not only how
much time each kind took but where.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import numpy as np
import plotly.graph_objects as go

from pipesim.analysis.attribution import LostTime
from pipesim.charts.lanes import COMM_COLOR, IDLE_COLOR
from pipesim.units import format_ms, hover_ms

ATTRIBUTION_PARTS = (
    ("compute_ms", "compute", "#4C78A8"),
    ("schedule_idle_ms", "schedule idle", IDLE_COLOR),
    ("comm_wait_ms", "communication wait", COMM_COLOR),
    ("overhead_ms", "overhead (optimizer, gaps)", "#F58518"),
)


def attribution_figure(analysis: dict, step: int | None = None) -> go.Figure:
    """Where a measured step went on each rank: one stacked bar per rank (pipesim.analysis.attribution). `step`
    picks one of the analysis's steps (the one the overlay draws, so one screen shows one step); None: its median step.

    The run's measured step time (the card beside this chart) is the median of its step times: with an even number
    of steps it lies between two steps, and the attribution's median step is the lower of the two (an actual
    step, so its parts add up); the title then says so, rather than calling a second figure "the median"."""
    median = analysis.get("median_step")
    chosen = next((s for s in analysis.get("steps") or () if s["step"] == step), None) if step is not None else None
    rows = chosen["ranks"] if chosen is not None else analysis["ranks"]
    step_ms = chosen["step_ms"] if chosen is not None else analysis["step_ms"]
    shown = chosen["step"] if chosen is not None else median
    labels = [f"rank {row['rank']}" for row in rows]
    fig = go.Figure(
        [
            go.Bar(
                y=labels,
                x=[row[key] for row in rows],
                name=name,
                orientation="h",
                marker_color=color,
                hovertemplate=f"%{{y}}: {name} {hover_ms('x')}<extra></extra>",
            )
            for key, name, color in ATTRIBUTION_PARTS
        ]
    )
    which = f"step {shown}"
    times = [s["step_ms"] for s in analysis.get("steps") or ()]
    median_ms = statistics.median(times) if times else None
    if shown == median:
        between = median_ms is not None and abs(median_ms - step_ms) > 1e-9 * max(1.0, abs(median_ms))
        which += (
            f", the lower of the two middle steps: the median step time {format_ms(median_ms)} lies between them"
            if between
            else ", the median"
        )
    fig.update_layout(
        barmode="stack",
        plot_bgcolor="white",
        height=150 + 40 * len(rows),
        title=f"where the step went: {format_ms(step_ms)} ({which})",
        xaxis={"title": "time (ms)"},
        yaxis={"autorange": "reversed"},
        # beside the bars, never over the time axis's title (below the plot it sat on "time (ms)")
        legend={"orientation": "v", "yanchor": "top", "y": 1, "x": 1.02, "xanchor": "left"},
    )
    return fig


_PART_STYLE = {key.removesuffix("_ms"): (name, color) for key, name, color in ATTRIBUTION_PARTS}
MARK_OFFSET = 0.46  # below the lane's bar (bars are 0.8 high around the row)
MARK_HEIGHT = 0.12


def lost_time_bars(lost: Sequence[LostTime], row_of_rank: Callable[[int], float]) -> list[go.Bar]:
    """One trace per kind of lost time: a thin bar per interval, under row `row_of_rank(rank)`."""
    traces = []
    for part, (name, color) in _PART_STYLE.items():
        # the step starts at 0 ms on the overlay: a wait that began before it (the previous step's tail) is drawn
        # from 0, as the lanes are
        marks = [m._replace(start=max(m.start, 0.0)) for m in lost if m.part == part and m.end > 0]
        if part == "compute" or not marks:
            continue
        data = np.array(
            [(row_of_rank(m.rank) + MARK_OFFSET, m.start, m.end - m.start, m.end) for m in marks], dtype=float
        )
        traces.append(
            go.Bar(
                name=f"lost: {name}",
                orientation="h",
                y=data[:, 0],
                base=data[:, 1],
                x=data[:, 2],
                width=MARK_HEIGHT,
                marker={"color": color, "line": {"width": 0.5, "color": "#555555"}},
                # start, length and end from customdata: a based bar's %{x} in a hover is where it ends
                customdata=data[:, 1:],
                hovertemplate=f"{name}<br>{hover_ms('customdata[1]')} from {hover_ms('customdata[0]')} to "
                f"{hover_ms('customdata[2]')}<extra></extra>",
                legendgroup="lost",
            )
        )
    return traces


def overlay_with_lost_time(simulated, measured, lost: Sequence[LostTime], step: int | None = None) -> go.Figure:
    """`charts.overlay_figure` with the lost-time marks under each measured lane (row 2r + 1 there)."""
    from pipesim.charts.overlay import overlay_figure

    figure = overlay_figure(simulated, measured, step=step)
    figure.add_traces(lost_time_bars(lost, lambda rank: 2 * rank + 1))
    return figure


def round_step(least: float) -> int:
    """The smallest whole 1, 2 or 5 times a power of ten at least `least`: ticks at 0, 100, 200 (673 steps), never
    at 0, 67, 134."""
    power = 1
    while True:
        for factor in (1, 2, 5):
            if factor * power >= least:
                return factor * power
        power *= 10


def loss_figure(losses: dict[str, Sequence[float]]) -> go.Figure:
    """The loss per measured step of each run (ours, torch's reference): one line each, on an axis of whole steps
    (3 steps read 0, 1, 2, never 0-5 in halves)."""
    fig = go.Figure(
        [
            go.Scatter(
                x=list(range(len(values))),
                y=list(values),
                name=name,
                mode="lines+markers",
                hovertemplate=f"{name}, step %{{x}}: loss %{{y:.4f}}<extra></extra>",
            )
            for name, values in losses.items()
            if values
        ]
    )
    steps = max((len(v) for v in losses.values()), default=1)
    fig.update_layout(
        title="loss per step",
        height=260,
        plot_bgcolor="white",
        xaxis={"title": "measured step", "tickmode": "linear", "tick0": 0, "dtick": round_step(steps / 10),
               "tickformat": "d", "range": [-0.2, max(steps - 1, 1) + 0.2]},
        yaxis={"title": "loss"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 1, "xanchor": "right"},
    )  # fmt: skip
    return fig

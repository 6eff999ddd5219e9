"""Figures that compare schedules: step time, bubble and memory side by side, and the time-memory trade-off.

Memory is drawn in one binary unit chosen for the largest value (pipesim.units), named in the axis title; every
number in a hover is formatted as the app's cards and tables print it (pipesim.units).
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipesim.analysis.compare import ComparisonRow, pareto_front, step_time
from pipesim.charts.lanes import RANK_COLORS
from pipesim.units import binary_unit, format_bytes, format_count, hover_ms, hover_percent, quantity

FRONT_COLOR = "#8A8A8A"  # a mid grey, seen on a light and a dark page alike
UNIFORM_COLOR = "#C8C8C8"  # the uniform case beside a what-if's step bars


def _peak(row: ComparisonRow) -> float:
    return row.peak_activation_bytes if row.peak_activation_bytes is not None else float(row.peak_activations or 0)


def _memory_axis(good: list[ComparisonRow]) -> tuple[str, float]:
    """Axis title and divisor: bytes in a binary unit, or stashed microbatches without a byte size."""
    if any(row.peak_activation_bytes is None for row in good):
        return "peak microbatches stashed", 1.0
    unit, size = binary_unit(max((_peak(row) for row in good), default=0.0))
    return f"{quantity('peak_activations').name} ({unit})", float(size)


def _peak_text(row: ComparisonRow) -> str:
    size = "" if row.peak_activation_bytes is None else f"{format_bytes(row.peak_activation_bytes)}, "
    if row.stashed_microbatches is not None and row.stashed_microbatches != row.peak_activations:  # seq chunks
        return f"{size}{row.stashed_microbatches:g} microbatches' worth stashed ({row.peak_activations} chunks)"
    return f"{size}{format_count(row.peak_activations or 0, 'microbatch')} stashed"


def comparison_figure(
    rows: list[ComparisonRow], *, log_scale: bool = False, uniform: list[ComparisonRow] | None = None
) -> go.Figure:
    """Step time, bubble and peak memory per schedule, side by side: horizontal bars, one row per schedule named
    once on the left (names under narrow vertical bars were slanted into each other), a panel per quantity.

    Schedules that could not be built are named under the title with their reason. `log_scale` draws
    step time and memory on log axes, so that one slow schedule (naive) does not flatten the others. `uniform`:
    the same schedules without a what-if's slow ranks and links (`pipesim.cost.perturb`), drawn as a light bar
    beside each step bar.
    """
    good = [row for row in rows if row.error is None]
    names = [row.schedule for row in good]
    memory_title, divisor = _memory_axis(good)
    fig = make_subplots(
        rows=1,
        cols=3,
        shared_yaxes=True,
        subplot_titles=(quantity("step_time").heading, quantity("bubble_fraction").name, memory_title),
        horizontal_spacing=0.05,
    )
    panels = [
        ([step_time(row) for row in good], f"%{{y}}: {hover_ms('x')}<extra></extra>", None),
        ([row.bubble_fraction for row in good], f"%{{y}}: {hover_percent('x')}<extra></extra>", None),
        (
            [_peak(row) / divisor for row in good],
            "%{y}: %{customdata}<extra></extra>",
            [_peak_text(row) for row in good],
        ),
    ]
    for col, (values, template, custom) in enumerate(panels, start=1):
        fig.add_trace(
            go.Bar(
                y=names,
                x=values,
                orientation="h",
                customdata=custom,
                hovertemplate=template,
                marker={"color": [RANK_COLORS[i % len(RANK_COLORS)] for i in range(len(good))]},
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    if uniform is not None:
        base = {row.schedule: step_time(row) for row in uniform if row.error is None}
        fig.add_trace(
            go.Bar(
                y=names,
                x=[base.get(name) for name in names],
                orientation="h",
                name="uniform",
                hovertemplate=f"%{{y}}, uniform: {hover_ms('x')}<extra></extra>",
                marker={"color": UNIFORM_COLOR},
                showlegend=False,
            ),
            row=1,
            col=1,
        )
    fig.update_xaxes(tickformat=".0%", row=1, col=2)
    fig.update_yaxes(autorange="reversed")  # the first schedule on top, as in the table
    if log_scale:
        fig.update_xaxes(type="log", row=1, col=1)
        fig.update_xaxes(type="log", row=1, col=3)
    failed = [f"{row.schedule}: {row.error}" for row in rows if row.error is not None]
    title = "schedule comparison" + (" (log scale)" if log_scale else "")
    if uniform is not None:
        title += " · light grey: the step without the slow ranks and links"
    if failed:
        title += "<br><sup>not built: " + "; ".join(failed) + "</sup>"
    fig.update_layout(title=title, height=160 + 36 * len(good), plot_bgcolor="white", margin={"t": 90})
    fig.update_annotations(font_size=13)  # the panel titles
    return fig


def tradeoff_figure(rows: list[ComparisonRow], *, log_scale: bool = False) -> go.Figure:
    """Step time against peak memory, one legend entry per schedule (labels on the points overlapped), and the
    Pareto front: the schedules no other beats on both, ringed and joined by a dashed line (a front of one
    schedule is that one ringed: it beats every other on both). `log_scale`: both axes on log scales, as the
    comparison's bars (the page's one switch sets both)."""
    good = [row for row in rows if row.error is None]
    memory_title, divisor = _memory_axis(good)
    fig = go.Figure()
    for i, row in enumerate(good):
        fig.add_trace(
            go.Scatter(
                x=[step_time(row)],
                y=[_peak(row) / divisor],
                mode="markers",
                name=row.schedule,
                marker={"size": 13, "color": RANK_COLORS[i % len(RANK_COLORS)], "line": {"width": 1, "color": "white"}},
                customdata=[[row.bubble_fraction, _peak_text(row)]],
                hovertemplate=f"<b>{row.schedule}</b><br>step time {hover_ms('x')}<br>peak %{{customdata[1]}}<br>"
                f"bubble {hover_percent('customdata[0]')}<extra></extra>",
            )
        )
    front = pareto_front(good)
    if front:
        fig.add_trace(
            go.Scatter(
                x=[step_time(row) for row in front],
                y=[_peak(row) / divisor for row in front],
                mode="lines+markers" if len(front) > 1 else "markers",
                name="Pareto front",
                line={"color": FRONT_COLOR, "dash": "dash", "shape": "hv", "width": 1.5},
                marker={"size": 22, "symbol": "circle-open", "color": FRONT_COLOR, "line": {"width": 1.5}},
                hoverinfo="skip",
            )
        )
    if len(front) == 1:
        note = f"ringed: the Pareto front, here {front[0].schedule} alone (as fast and as light as any other)"
    else:
        note = "ringed and dashed: the Pareto front, the schedules no other beats on both"
    scale = " (log scales)" if log_scale else ""
    fig.update_layout(
        title=f"trade-off: step time against peak activation memory{scale}<br><sup>{note}</sup>",
        xaxis={"title": quantity("step_time").heading, "type": "log" if log_scale else "linear"},
        yaxis={"title": memory_title, **({"type": "log"} if log_scale else {"rangemode": "tozero"})},
        plot_bgcolor="white",
        height=420,
        legend={"orientation": "v"},
    )
    return fig

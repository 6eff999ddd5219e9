"""Figures that compare schedules: makespan, bubble and memory side by side, and the time-memory trade-off.

Memory is drawn in one binary unit chosen for the largest value (pipesim.units), named in the axis title.
"""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipesim.analysis.compare import ComparisonRow, pareto_front
from pipesim.charts.lanes import RANK_COLORS
from pipesim.units import binary_unit, format_bytes


def _peak(row: ComparisonRow) -> float:
    return row.peak_activation_bytes if row.peak_activation_bytes is not None else float(row.peak_activations or 0)


def _memory_axis(good: list[ComparisonRow]) -> tuple[str, float]:
    """Axis title and divisor: bytes in a binary unit, or stashed microbatches without a byte size."""
    if any(row.peak_activation_bytes is None for row in good):
        return "peak stashed microbatches", 1.0
    unit, size = binary_unit(max((_peak(row) for row in good), default=0.0))
    return f"peak activation memory ({unit})", float(size)


def _peak_text(row: ComparisonRow) -> str:
    size = "" if row.peak_activation_bytes is None else f"{format_bytes(row.peak_activation_bytes)}, "
    return f"{size}{row.peak_activations} stashed microbatches"


def comparison_figure(rows: list[ComparisonRow], *, log_scale: bool = False) -> go.Figure:
    """Makespan, bubble fraction and peak memory per schedule, side by side.

    Schedules that could not be built are named under the title with their reason. `log_scale` draws
    makespan and memory on log axes, so that one slow schedule (naive) does not flatten the others.
    """
    good = [row for row in rows if row.error is None]
    names = [row.schedule for row in good]
    memory_title, divisor = _memory_axis(good)
    fig = make_subplots(rows=1, cols=3, subplot_titles=("makespan (ms)", "bubble fraction", memory_title))
    panels = [
        ([row.makespan for row in good], "makespan", "%{x}: %{y:.3f} ms<extra></extra>", None),
        ([row.bubble_fraction for row in good], "bubble fraction", "%{x}: %{y:.1%}<extra></extra>", None),
        (
            [_peak(row) / divisor for row in good],
            "peak memory",
            "%{x}: %{customdata}<extra></extra>",
            [_peak_text(row) for row in good],
        ),
    ]
    for col, (values, name, template, custom) in enumerate(panels, start=1):
        fig.add_trace(
            go.Bar(
                x=names,
                y=values,
                name=name,
                customdata=custom,
                hovertemplate=template,
                marker={"color": [RANK_COLORS[i % len(RANK_COLORS)] for i in range(len(good))]},
                showlegend=False,
            ),
            row=1,
            col=col,
        )
    fig.update_yaxes(tickformat=".0%", row=1, col=2)
    if log_scale:
        fig.update_yaxes(type="log", row=1, col=1)
        fig.update_yaxes(type="log", row=1, col=3)
    failed = [f"{row.schedule}: {row.error}" for row in rows if row.error is not None]
    title = "schedule comparison" + (" (log scale)" if log_scale else "")
    if failed:
        title += "<br><sup>not built: " + "; ".join(failed) + "</sup>"
    fig.update_layout(title=title, height=420, plot_bgcolor="white")
    return fig


def tradeoff_figure(rows: list[ComparisonRow]) -> go.Figure:
    """Makespan against peak memory, one legend entry per schedule (labels on the points overlapped), and the
    Pareto front: the schedules no other beats on both."""
    good = [row for row in rows if row.error is None]
    memory_title, divisor = _memory_axis(good)
    fig = go.Figure()
    for i, row in enumerate(good):
        fig.add_trace(
            go.Scatter(
                x=[row.makespan],
                y=[_peak(row) / divisor],
                mode="markers",
                name=row.schedule,
                marker={"size": 13, "color": RANK_COLORS[i % len(RANK_COLORS)], "line": {"width": 1, "color": "white"}},
                customdata=[[row.bubble_fraction, _peak_text(row)]],
                hovertemplate=f"<b>{row.schedule}</b><br>makespan %{{x:.3f}} ms<br>peak %{{customdata[1]}}<br>"
                "bubble %{customdata[0]:.1%}<extra></extra>",
            )
        )
    front = pareto_front(good)
    if len(front) > 1:
        fig.add_trace(
            go.Scatter(
                x=[row.makespan for row in front],
                y=[_peak(row) / divisor for row in front],
                mode="lines",
                name="Pareto front",
                line={"color": "#555555", "dash": "dash", "shape": "hv", "width": 1.5},
                hoverinfo="skip",
            )
        )
    fig.update_layout(
        title="trade-off: step time vs peak activation memory<br><sup>dashed: the Pareto front, "
        "schedules no other beats on both</sup>",
        xaxis={"title": "makespan (ms)"},
        yaxis={"title": memory_title, "rangemode": "tozero"},
        plot_bgcolor="white",
        height=420,
        legend={"orientation": "v"},
    )
    return fig

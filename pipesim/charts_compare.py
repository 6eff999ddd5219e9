"""Figures that compare schedules: makespan, bubble and memory side by side, and the time-memory trade-off."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from pipesim.charts import RANK_COLORS
from pipesim.compare import ComparisonRow


def _peak(row: ComparisonRow) -> float:
    return row.peak_activation_bytes if row.peak_activation_bytes is not None else float(row.peak_activations or 0)


def comparison_figure(rows: list[ComparisonRow]) -> go.Figure:
    """Makespan, bubble fraction and peak memory per schedule, side by side.

    Schedules that could not be built are named under the title with their reason.
    """
    good = [row for row in rows if row.error is None]
    names = [row.schedule for row in good]
    fig = make_subplots(rows=1, cols=3, subplot_titles=("makespan (ms)", "bubble fraction", "peak activation memory"))
    hover = [f"{row.peak_activations} stashed microbatches, {_peak(row):,.4g} bytes" for row in good]
    panels = [
        ([row.makespan for row in good], "makespan", "%{x}: %{y:.3f} ms<extra></extra>", None),
        ([row.bubble_fraction for row in good], "bubble fraction", "%{x}: %{y:.1%}<extra></extra>", None),
        ([_peak(row) for row in good], "peak memory", "%{x}: %{customdata}<extra></extra>", hover),
    ]
    for col, (values, name, template, custom) in enumerate(panels, start=1):
        fig.add_trace(go.Bar(x=names, y=values, name=name, customdata=custom, hovertemplate=template,
                             marker={"color": [RANK_COLORS[i % len(RANK_COLORS)] for i in range(len(good))]},
                             showlegend=False), row=1, col=col)
    fig.update_yaxes(tickformat=".0%", row=1, col=2)
    failed = [f"{row.schedule}: {row.error}" for row in rows if row.error is not None]
    title = "schedule comparison"
    if failed:
        title += "<br><sup>not built: " + "; ".join(failed) + "</sup>"
    fig.update_layout(title=title, height=420, plot_bgcolor="white")
    return fig


def tradeoff_figure(rows: list[ComparisonRow]) -> go.Figure:
    """Makespan against peak memory: the lower-left schedules are the ones worth having."""
    good = [row for row in rows if row.error is None]
    fig = go.Figure(go.Scatter(
        x=[row.makespan for row in good],
        y=[_peak(row) for row in good],
        mode="markers+text",
        text=[row.schedule for row in good],
        textposition="top center",
        marker={"size": 12, "color": [RANK_COLORS[i % len(RANK_COLORS)] for i in range(len(good))]},
        customdata=[[row.bubble_fraction, row.peak_activations] for row in good],
        hovertemplate="<b>%{text}</b><br>makespan %{x:.3f} ms<br>peak memory %{y:,.4g}<br>"
                      "bubble %{customdata[0]:.1%}<br>%{customdata[1]} stashed microbatches<extra></extra>",
        showlegend=False,
    ))
    fig.update_layout(title="trade-off: step time vs peak activation memory",
                      xaxis={"title": "makespan (ms)"}, yaxis={"title": "peak activation memory"},
                      plot_bgcolor="white", height=420)
    return fig



"""The planner's figure: every candidate's step time against the memory of its fullest device, the Pareto front
joined, the memory cap drawn as a line, the best candidate ringed. Draws the candidates it is given."""

from __future__ import annotations

import plotly.graph_objects as go

from pipesim.plan.search import Candidate
from pipesim.sim.memory import RankMemory

FRONT_COLOR = "#D62728"
OTHER_COLOR = "#9E9E9E"
OVER_CAP_COLOR = "#F5C2C2"
BEST_COLOR = "#111111"


def _points(candidates: list[Candidate], name: str, color: str, size: int, symbol: str = "circle") -> go.Scatter:
    return go.Scatter(
        x=[c.step_ms for c in candidates],
        y=[c.peak_memory_bytes for c in candidates],
        mode="markers",
        name=name,
        marker={"color": color, "size": size, "symbol": symbol, "line": {"width": 0}},
        text=[c.label for c in candidates],
        customdata=[[c.bubble_fraction, c.imbalance, "fits" if c.fits else "over the cap"] for c in candidates],
        hovertemplate="<b>%{text}</b><br>step %{x:.4g} ms<br>memory %{y:,.4~s}B<br>bubble %{customdata[0]:.1%}"
        "<br>slowest stage %{customdata[1]:.2f}x the mean<br>%{customdata[2]}<extra></extra>",
    )


def _cap_line(fig: go.Figure, cap: float) -> None:
    fig.add_hline(
        y=cap,
        line={"color": FRONT_COLOR, "dash": "dash", "width": 1.5},
        annotation_text="memory cap",
        annotation_position="top left",
    )


def pareto_figure(
    candidates: list[Candidate],
    front: list[Candidate],
    best: Candidate | None,
    cap: float | None,
    selected: Candidate | None = None,
) -> go.Figure:
    """Step time (x) against peak memory per device (y); lower left is better."""
    built = [c for c in candidates if c.error is None]
    on_front = {id(c) for c in front}
    fig = go.Figure()
    fig.add_trace(_points([c for c in built if id(c) not in on_front and c.fits], "fits", OTHER_COLOR, 7))
    fig.add_trace(
        _points([c for c in built if id(c) not in on_front and not c.fits], "over the cap", OVER_CAP_COLOR, 7)
    )
    ordered = sorted(front, key=lambda c: c.step_ms)
    line = _points(ordered, "Pareto front", FRONT_COLOR, 10)
    line.mode = "lines+markers"
    line.line = {"shape": "hv", "color": FRONT_COLOR, "width": 1.5}
    fig.add_trace(line)
    if best is not None:
        fig.add_trace(_points([best], "best that fits", BEST_COLOR, 18, "circle-open"))
    if selected is not None and selected is not best:
        fig.add_trace(_points([selected], "selected", "#1F77B4", 18, "diamond-open"))
    if cap is not None:
        _cap_line(fig, cap)
    fig.update_layout(
        title="candidates: step time against memory of the fullest device",
        xaxis={"title": "step time (ms)", "rangemode": "tozero"},
        yaxis={"title": "peak memory per device (bytes)", "tickformat": "~s", "ticksuffix": "B", "rangemode": "tozero"},
        plot_bgcolor="white",
        height=440,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig


MEMORY_PARTS = (
    ("param_bytes", "parameters", "#4C78A8"),
    ("grad_bytes", "gradients", "#72B7B2"),
    ("optimizer_bytes", "optimizer state", "#F58518"),
    ("peak_activation_bytes", "activations (peak)", "#D62728"),
)


def memory_parts_figure(ranks: list[RankMemory], cap: float | None = None, title: str = "") -> go.Figure:
    """Each rank's memory at its peak, stacked by part; the cap as a line."""
    fig = go.Figure()
    names = [f"rank {r.rank}" for r in ranks]
    for attr, label, color in MEMORY_PARTS:
        fig.add_trace(
            go.Bar(
                x=names,
                y=[getattr(r, attr) for r in ranks],
                name=label,
                marker={"color": color},
                hovertemplate=f"%{{x}}<br>{label} %{{y:,.4~s}}B<extra></extra>",
            )
        )
    if cap is not None:
        _cap_line(fig, cap)
    fig.update_layout(
        barmode="stack",
        title=title or "memory per rank at its peak",
        yaxis={"title": "bytes", "tickformat": "~s", "ticksuffix": "B", "rangemode": "tozero"},
        plot_bgcolor="white",
        height=360,
        legend={"orientation": "h", "y": -0.2},
    )
    return fig

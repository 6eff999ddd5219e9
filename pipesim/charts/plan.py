"""The planner's figures: every candidate's step time against the memory of its fullest device (the Pareto front
joined, the memory cap drawn as a line, the best candidate ringed, each predicted interval as an error bar and an
extrapolated size as a cross), and each rank's memory by part. Draws the
candidates it is given.

Memory is drawn in one binary unit (pipesim.units.binary_unit, named in the axis title, as the text around the
chart says it); the axes fit the candidates, and a cap far above them is named at the top rather than drawn
where it would squash every candidate against the floor.
"""

from __future__ import annotations

import plotly.graph_objects as go

from pipesim.plan.search import Candidate
from pipesim.sim.memory import RankMemory
from pipesim.units import BYTES_SPEC, binary_unit, format_bytes, format_ms, hover_ms, hover_percent, quantity

FRONT_COLOR = "#D62728"
OTHER_COLOR = "#9E9E9E"
OVER_CAP_COLOR = "#F5C2C2"
BEST_COLOR = "#111111"
CAP_IN_VIEW = 1.5  # the cap is drawn inside the plot when it is at most this many times the highest value


def _points(
    candidates: list[Candidate],
    name: str,
    color: str,
    size: int,
    divisor: float,
    unit: str,
    symbol: str = "circle",
    bars: bool = True,
) -> go.Scatter:
    """One trace of candidates; with `bars`, each sampled candidate's 90% interval as a horizontal error bar, and an
    extrapolated one (a microbatch size outside the profile) drawn as a cross."""
    low = [c.step_ms - c.step_ms_p05 if c.step_ms_p05 is not None else 0.0 for c in candidates]
    high = [c.step_ms_p95 - c.step_ms if c.step_ms_p95 is not None else 0.0 for c in candidates]
    shown_bars = bars and (any(low) or any(high))
    return go.Scatter(
        x=[c.step_ms for c in candidates],
        y=[c.peak_memory_bytes / divisor for c in candidates],
        mode="markers",
        name=name,
        marker={
            "color": color,
            "size": size,
            "symbol": [symbol if not c.extrapolated or not bars else "x" for c in candidates],
            "line": {"width": 0},
        },
        error_x={
            "type": "data",
            "symmetric": False,
            "array": high,
            "arrayminus": low,
            "color": color,
            "thickness": 1,
            "width": 3,
            "visible": shown_bars,
        },  # fmt: skip
        text=[c.label for c in candidates],
        customdata=[
            [c.bubble_fraction, c.imbalance, "fits" if c.fits else "over the cap", _interval_words(c)]
            for c in candidates
        ],
        hovertemplate=f"<b>%{{text}}</b><br>step time {hover_ms('x')}%{{customdata[3]}}<br>peak memory "
        f"%{{y:{BYTES_SPEC}}} {unit}<br>bubble {hover_percent('customdata[0]')}<br>slowest stage "
        "%{customdata[1]:.2f}x the mean<br>%{customdata[2]}<extra></extra>",
    )


def _interval_words(candidate: Candidate) -> str:
    """The hover's words after the step time: its 90% interval where sampled, and whether it is extrapolated."""
    words = ""
    if candidate.step_ms_p05 is not None and candidate.step_ms_p95 is not None:
        words += f" (90%: {format_ms(candidate.step_ms_p05)} to {format_ms(candidate.step_ms_p95)})"
    if candidate.extrapolated:
        words += "<br>extrapolated: a microbatch size the profile did not measure"
    return words


def _cap(fig: go.Figure, cap: float | None, highest: float, divisor: float) -> float:
    """The cap as a dashed line when it is near the values, else named at the top; the y range's top."""
    top = max(highest, 1.0) * 1.15
    if cap is None:
        return top / divisor
    if cap <= CAP_IN_VIEW * highest:
        fig.add_hline(
            y=cap / divisor,
            line={"color": FRONT_COLOR, "dash": "dash", "width": 1.5},
            annotation_text=f"memory cap {format_bytes(cap)}",
            annotation_position="top left",
        )
        return max(top, cap * 1.08) / divisor
    fig.add_annotation(
        text=f"memory cap {format_bytes(cap)}: above every value here",
        xref="paper",
        yref="paper",
        x=0,
        y=1,
        xanchor="left",
        yanchor="bottom",
        showarrow=False,
        font={"color": FRONT_COLOR, "size": 12},
    )
    return top / divisor


def pareto_figure(
    candidates: list[Candidate],
    front: list[Candidate],
    best: Candidate | None,
    cap: float | None,
    selected: Candidate | None = None,
) -> go.Figure:
    """Step time (x) against peak memory per device (y); lower left is better. A sampled candidate's 90% interval is
    its horizontal error bar; an extrapolated one is a cross."""
    built = [c for c in candidates if c.built]
    highest = max((c.peak_memory_bytes for c in built), default=0.0)
    unit, size = binary_unit(max(highest, cap or 0.0) if cap is not None and cap <= CAP_IN_VIEW * highest else highest)
    on_front = {id(c) for c in front}
    fig = go.Figure()
    others = [c for c in built if id(c) not in on_front]
    fig.add_trace(_points([c for c in others if c.fits], "fits", OTHER_COLOR, 7, size, unit))
    fig.add_trace(_points([c for c in others if not c.fits], "over the cap", OVER_CAP_COLOR, 7, size, unit))
    line = _points(sorted(front, key=lambda c: c.step_ms), "Pareto front", FRONT_COLOR, 10, size, unit)
    line.mode = "lines+markers"
    line.line = {"shape": "hv", "color": FRONT_COLOR, "width": 1.5}
    fig.add_trace(line)
    if best is not None:
        fig.add_trace(_points([best], "best that fits", BEST_COLOR, 18, size, unit, "circle-open", bars=False))
    if selected is not None and selected is not best:
        fig.add_trace(_points([selected], "selected", "#1F77B4", 18, size, unit, "diamond-open", bars=False))
    top = _cap(fig, cap, highest, size)
    fig.update_layout(
        title="candidates: step time against memory of the fullest device",
        xaxis={"title": quantity("step_time").heading},
        yaxis={"title": f"peak memory per device ({unit})", "range": [0, top]},
        plot_bgcolor="white",
        height=440,
        legend={"orientation": "h", "yanchor": "top", "y": -0.18, "x": 0},
    )
    return fig


MEMORY_PARTS = (
    ("param_bytes", "parameters", "#4C78A8"),
    ("grad_bytes", "gradients", "#72B7B2"),
    ("optimizer_bytes", "optimizer state", "#F58518"),
    ("peak_activation_bytes", "activations (peak)", "#D62728"),
)


def memory_parts_figure(ranks: list[RankMemory], cap: float | None = None, title: str = "") -> go.Figure:
    """Each rank's memory at its peak, stacked by part, in one binary unit; the cap as a line when it is near."""
    totals = [sum(getattr(r, attr) for attr, _, _ in MEMORY_PARTS) for r in ranks]
    highest = max(totals, default=0.0)
    unit, size = binary_unit(max(highest, cap or 0.0) if cap is not None and cap <= CAP_IN_VIEW * highest else highest)
    fig = go.Figure()
    names = [f"rank {r.rank}" for r in ranks]
    for attr, label, color in MEMORY_PARTS:
        fig.add_trace(
            go.Bar(
                x=names,
                y=[getattr(r, attr) / size for r in ranks],
                name=label,
                marker={"color": color},
                hovertemplate=f"%{{x}}<br>{label} %{{y:{BYTES_SPEC}}} {unit}<extra></extra>",
            )
        )
    top = _cap(fig, cap, highest, size)
    fig.update_layout(
        barmode="stack",
        title=title or "memory per rank at its peak",
        yaxis={"title": f"memory ({unit})", "range": [0, top]},
        plot_bgcolor="white",
        height=360,
        legend={"orientation": "h", "yanchor": "top", "y": -0.15, "x": 0},
    )
    return fig

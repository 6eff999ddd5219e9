"""A verification drawn: each candidate's predicted step with its 90% interval beside its measured median with the
95% confidence interval, one row per candidate; candidates the measurement cannot tell apart drawn in grey.

Draw only: the numbers come from the verification (pipesim_executor.host.verify_compare), passed as plain lists.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import plotly.graph_objects as go

PREDICTED_COLOR = "#4C78A8"
MEASURED_COLOR = "#F58518"
GREY = "#9E9E9E"


@dataclass(frozen=True)
class IntervalRow:
    """One candidate: the predicted point and interval (the point twice without one), the measured median and its
    interval (None when it did not run), and whether the measurement cannot tell it from another candidate."""

    label: str
    predicted_ms: float
    predicted_low_ms: float
    predicted_high_ms: float
    measured_ms: float | None = None
    measured_low_ms: float | None = None
    measured_high_ms: float | None = None
    grey: bool = False


def _trace(rows: Sequence[IntervalRow], measured: bool, color: str, name: str, offset: float) -> go.Scatter:
    points, low, high, ys, texts, colors = [], [], [], [], [], []
    for y, r in enumerate(rows):
        point, lo, hi = (
            (r.measured_ms, r.measured_low_ms, r.measured_high_ms)
            if measured
            else (r.predicted_ms, r.predicted_low_ms, r.predicted_high_ms)
        )
        if point is None:
            continue
        lo, hi = point if lo is None else lo, point if hi is None else hi
        points.append(point)
        low.append(point - lo)
        high.append(hi - point)
        ys.append(y + offset)
        texts.append(f"{r.label}<br>{name}: {point:.2f} ms ({lo:.2f} - {hi:.2f})")
        colors.append(GREY if r.grey else color)
    return go.Scatter(
        x=points,
        y=ys,
        mode="markers",
        name=name,
        marker={"color": colors, "size": 9, "symbol": "circle" if measured else "diamond"},
        error_x={"type": "data", "symmetric": False, "array": high, "arrayminus": low, "color": color, "width": 4},
        hovertext=texts,
        hoverinfo="text",
    )


def intervals_figure(rows: Sequence[IntervalRow]) -> go.Figure:
    """Predicted (90% interval) and measured (95% CI) step time per candidate, side by side on one time axis."""
    figure = go.Figure(
        [
            _trace(rows, False, PREDICTED_COLOR, "predicted (90% interval)", -0.15),
            _trace(rows, True, MEASURED_COLOR, "measured (95% CI)", 0.15),
        ]
    )
    figure.update_layout(
        xaxis_title="step time (ms)",
        yaxis={
            "tickvals": list(range(len(rows))),
            "ticktext": [r.label for r in rows],
            "autorange": "reversed",
        },
        height=120 + 36 * len(rows),
        legend={"orientation": "h", "y": 1.02, "yanchor": "bottom"},
        margin={"l": 10, "r": 10, "t": 40, "b": 40},
    )
    return figure

"""The pieces every timeline figure is drawn with: colours, one bar trace per action kind, idle bands, rank lanes.

Every figure is built from data traces, never from one layout shape per action: a chart holds one `go.Bar`
trace per action kind (bars placed with `base=`), so a schedule of 10^5 actions is a handful of traces with long
arrays rather than 10^5 shapes, and stays light in a browser and in an export. Arrays go to plotly as numeric
numpy arrays: plotly validates (and copies) lists and object arrays element by element, which for 10^5 bars
costs seconds. Rows are numbers too, named through the axis's tick labels. The Gantt chart (`charts.gantt`) and
the overlay of measured on simulated (`charts.overlay`) are drawn with them.

Colours tell the action kinds apart at a glance: forward blue, full backward red, and the split backward in
colours of their own (I orange, W green), so a zero-bubble schedule does not read as a 1F1B one. Idle time is
drawn as a light grey band, and each rank's bubble fraction is in its axis label.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from types import MappingProxyType

import numpy as np
import plotly.graph_objects as go

from pipesim.ir import ActionKind
from pipesim.records import Span
from pipesim.units import format_percent, hover_ms

KIND_COLORS = MappingProxyType({"F": "#4C78A8", "B": "#D62728", "I": "#FF9F1C", "W": "#2CA02C"})
KIND_NAMES = MappingProxyType(
    {"F": "forward (F)", "B": "backward (B)", "I": "backward input (I)", "W": "backward weight (W)"}
)
IDLE_COLOR = "#E6E6E6"
COMM_COLOR = "#6B6B6B"
COLLECTIVE_COLOR = "#B07AA1"  # torch's REDUCE_GRAD / UNSHARD / RESHARD on a rank's own row
CRITICAL_COLOR = "#111111"
CYCLE_COLOR = "#FF0000"
RANK_COLORS = ("#4C78A8", "#F58518", "#54A24B", "#E45756", "#72B7B2", "#B279A2", "#EECA3B", "#9D755D")

MAX_BAR_LABELS = 400  # write action names inside bars only while they can be read
KINDS = tuple(kind.value for kind in ActionKind)


def span_hover(kind: str) -> str:
    """The action's text form rebuilt from customdata: one trace holds one kind, so the letter is fixed."""
    return (
        f"<b>%{{customdata[1]}}{kind}%{{customdata[2]}}</b> on rank %{{customdata[0]}}<br>"
        "stage %{customdata[1]}, microbatch %{customdata[2]}<br>"
        f"start {hover_ms('customdata[3]')}<br>end {hover_ms('customdata[4]')}<br>"
        f"duration {hover_ms('customdata[5]')}"
    )


def by_kind(spans: Iterable[Span]) -> dict[str, list[Span]]:
    groups: dict[str, list[Span]] = {kind: [] for kind in KINDS}
    for span in spans:
        groups[span.action.kind.value].append(span)
    return groups


def column(values: Iterable[float], count: int) -> np.ndarray:
    return np.fromiter(values, dtype=float, count=count)


def span_data(spans: Sequence[Span]) -> np.ndarray:
    """customdata columns: rank, stage, microbatch, start, end, duration."""
    n = len(spans)
    starts = column((s[2] for s in spans), n)
    ends = column((s[3] for s in spans), n)
    return (
        np.column_stack(
            [
                column((s[0] for s in spans), n),
                column((s[1][0] for s in spans), n),
                column((s[1][2] for s in spans), n),
                starts,
                ends,
                ends - starts,
            ]
        )
        if n
        else np.zeros((0, 6))
    )


def lighten(color: str, amount: float) -> str:
    """`color` mixed with white: a solid lighter colour, so that a legend swatch shows it as the bars do."""
    rgb = [int(color.lstrip("#")[i : i + 2], 16) for i in (0, 2, 4)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02X}" for c in rgb)


def span_bars(
    spans: Sequence[Span],
    rows: np.ndarray,
    kind: str,
    name: str,
    *,
    color: object = None,
    legendgroup: str | None = None,
    extra_hover: str = "",
    extra_data: np.ndarray | None = None,
    show_text: bool = False,
    showlegend: bool = True,
) -> go.Bar:
    """One horizontal bar per span, all in one trace: y is the row number, base the start.

    Text labels stay horizontal: plotly turns a label that does not fit into a vertical one, unreadable in
    narrow bars, so the layout's `uniformtext` hides those instead (see `lane_layout`).
    """
    data = span_data(spans)
    if extra_data is not None:
        data = np.column_stack([data, extra_data])
    return go.Bar(
        name=name,
        orientation="h",
        y=rows,
        x=data[:, 5],
        base=data[:, 3],
        customdata=data,
        hovertemplate=span_hover(kind) + extra_hover + f"<extra>{name}</extra>",
        marker={"color": KIND_COLORS[kind] if color is None else color, "line": {"width": 0.5, "color": "white"}},
        legendgroup=legendgroup or name,
        showlegend=showlegend,
        text=[str(s.action) for s in spans] if show_text else None,
        textposition="inside" if show_text else "none",
        textangle=0,
        insidetextanchor="middle",
        textfont={"color": "white", "size": 10},
        width=0.8,
    )


def lane_rows(spans: Sequence[Span], per_rank: int = 1, offset: int = 0) -> np.ndarray:
    """Row number of each span's bar: its rank, or rank * per_rank + offset with several rows per rank."""
    return column((s[0] * per_rank + offset for s in spans), len(spans))


def idle_bars(intervals: list[list[tuple[float, float]]], window: tuple[float, float] | None = None) -> go.Bar:
    """Idle gaps as light bars; the hover reads rank, start, end and length from customdata (plotly's %{y}
    would print the lane's tick label and %{base} is not the start on every plotly version)."""
    lo, hi = window if window is not None else (-math.inf, math.inf)
    gaps = [(rank, start, end) for rank, row in enumerate(intervals) for start, end in row if end > lo and start < hi]
    data = np.array(gaps, dtype=float).reshape(len(gaps), 3)
    return go.Bar(
        name="idle",
        orientation="h",
        y=data[:, 0],
        x=data[:, 2] - data[:, 1],
        base=data[:, 1],
        width=0.8,
        marker={"color": IDLE_COLOR, "line": {"width": 0}},
        customdata=np.column_stack([data, data[:, 2] - data[:, 1]]),
        hovertemplate=f"idle on rank %{{customdata[0]}}<br>from {hover_ms('customdata[1]')} to "
        f"{hover_ms('customdata[2]')}<br>for {hover_ms('customdata[3]')}<extra>idle</extra>",
    )


def rank_labels(
    intervals: list[list[tuple[float, float]]], total: float, names: Sequence[str] | None = None
) -> list[str]:
    """'rank r · idle x%': each rank's bubble fraction (idle / makespan) in its axis label (`names` instead of
    'rank r': a lane per replica's rank, 'replica d · rank r')."""
    names = names or [f"rank {r}" for r in range(len(intervals))]
    if total <= 0:
        return list(names)
    return [
        f"{names[r]} · idle {format_percent(sum(b - a for a, b in gaps) / total)}" for r, gaps in enumerate(intervals)
    ]


LANE_PX = 34  # a lane's height up to a dozen lanes
LANES_PX = 560  # past that the lanes share this height (at least MIN_LANE_PX each), so the time axis stays on screen
MIN_LANE_PX = 14


def lanes_height(num_lanes: int) -> int:
    """The plot's height for `num_lanes` lanes: 34 px each up to 16 lanes, then 560 px shared (14 px at least),
    so a 32-rank chart and its time axis fit a laptop's screen."""
    per_lane = LANE_PX if num_lanes * LANE_PX <= LANES_PX else max(MIN_LANE_PX, LANES_PX / max(num_lanes, 1))
    return max(280, round(per_lane * num_lanes) + 170)


def lane_layout(fig: go.Figure, labels: Sequence[str], title: str) -> go.Figure:
    """Row i is labelled labels[i]; row 0 on top."""
    fig.update_layout(
        title=title,
        barmode="overlay",
        bargap=0.15,
        height=lanes_height(len(labels)),
        xaxis={"title": "time (ms)", "rangemode": "tozero", "showgrid": True},
        yaxis={
            "tickvals": list(range(len(labels))),
            "ticktext": list(labels),
            "range": [len(labels) - 0.5, -0.5],
            "showgrid": False,
            "zeroline": False,
        },
        # Legend on the right: above the plot it collided with two-line titles.
        legend={"orientation": "v", "yanchor": "top", "y": 1, "xanchor": "left", "x": 1.01},
        plot_bgcolor="white",
        # A left margin wide enough for the longest lane label: exports (kaleido) and narrow screens cut
        # labels off where automargin alone was left to size it.
        margin={"l": 20 + 7 * max((len(label) for label in labels), default=0), "r": 10, "t": 80, "b": 40},
        uniformtext={"minsize": 8, "mode": "hide"},
    )
    fig.update_yaxes(automargin=True)
    return fig


def interval_hover(first: int) -> str:
    """ "1.23 ms from 4.56 ms to 5.79 ms" from customdata[first], [first + 1], [first + 2] (start, length, end): a
    based bar's %{x} in a hover is where the bar ends, not its length."""
    start, length, end = (f"customdata[{first + i}]" for i in range(3))
    return f"{hover_ms(length)} from {hover_ms(start)} to {hover_ms(end)}"


# A rank's other resources as thin sub-lanes of its row, so that what overlaps its compute shows: the copy engine
# (OFFLOAD, RELOAD) along the bottom, the link (an MoE stage's all-to-alls) along the top.
SUB_LANES = {"copy": (0.36, "#8c564b", "copy engine"), "link": (-0.36, "#17becf", "link")}


def resource_bars(spans: Sequence, resource: str, row: Callable[[int], int] | None = None, label: str = "") -> go.Bar:
    """One resource's spans (`SUB_LANES`) on a thin strip of each rank's row (`row(rank)`: the overlay draws two
    rows per rank), named `label` or the resource's own name."""
    offset, color, name = SUB_LANES[resource]
    name = label or name
    return go.Bar(
        name=name,
        orientation="h",
        y=[(c.rank if row is None else row(c.rank)) + offset for c in spans],
        x=[c.end - c.start for c in spans],
        base=[c.start for c in spans],
        width=0.2,
        marker={"color": color, "line": {"width": 0}},
        customdata=[[c.kind, str(c.action), c.start, c.end - c.start, c.end] for c in spans],
        hovertemplate=f"%{{customdata[0]}} %{{customdata[1]}}<br>{interval_hover(2)}<extra>{name}</extra>",
    )

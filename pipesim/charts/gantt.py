"""Plotly figures of timelines: Gantt, overlay (memory: charts_memory; comparison: charts_compare; DAG:
charts_dag).

Every figure is built from data traces, never from one layout shape per action:
a Gantt chart holds one `go.Bar` trace per action kind (bars placed with `base=`),
so a schedule of 10^5 actions is a handful of traces with long arrays rather than
10^5 shapes, and stays light in a browser and in an export.

Charts draw what they are given (a Timeline, a graph with positions, comparison rows); they never
simulate or build a graph themselves.

Colours tell the action kinds apart at a glance: forward blue, full backward red,
and the split backward in colours of their own (I orange, W green), so a
zero-bubble schedule does not read as a 1F1B one. Idle time is drawn as a light
grey band, and each rank's bubble fraction is in its axis label.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from types import MappingProxyType

import numpy as np
import plotly.graph_objects as go

from pipesim.analysis.overlay import align_step, pick_step, prediction_error
from pipesim.charts import lod as charts_lod
from pipesim.ir import Action, ActionKind
from pipesim.records import COLLECTIVE_KINDS, Span, Timeline
from pipesim.sim.metrics import idle_intervals, makespan

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
# Past this many actions in view a Gantt is drawn binned (pipesim.charts_lod): a browser draws ~10^4 SVG bars
# in about half a second, 10^5 in several (docs/benchmarks.md, large schedules).
MAX_EXACT_BARS = 10_000
AGGREGATE_BINS = 1600  # about one bin per screen pixel of a wide chart
COLOR_BY = ("kind", "chunk", "microbatch")
GROUP_COLORS = (
    "#4C78A8",
    "#F58518",
    "#54A24B",
    "#B279A2",
    "#E45756",
    "#72B7B2",
    "#EECA3B",
    "#9D755D",
    "#FF9DA6",
    "#2E2E8F",
)

_KINDS = tuple(kind.value for kind in ActionKind)


def _span_hover(kind: str) -> str:
    """The action's text form rebuilt from customdata: one trace holds one kind, so the letter is fixed."""
    return (
        f"<b>%{{customdata[1]}}{kind}%{{customdata[2]}}</b> on rank %{{customdata[0]}}<br>"
        "stage %{customdata[1]}, microbatch %{customdata[2]}<br>"
        "start %{customdata[3]:.3f} ms<br>end %{customdata[4]:.3f} ms<br>duration %{customdata[5]:.3f} ms"
    )


# --- shared pieces ----------------------------------------------------------------
# Arrays go to plotly as numeric numpy arrays: plotly validates (and copies) lists and
# object arrays element by element, which for 10^5 bars costs seconds. Rows are numbers
# too, named through the axis's tick labels.


def _by_kind(spans: Iterable[Span]) -> dict[str, list[Span]]:
    groups: dict[str, list[Span]] = {kind: [] for kind in _KINDS}
    for span in spans:
        groups[span.action.kind.value].append(span)
    return groups


def _column(values: Iterable[float], count: int) -> np.ndarray:
    return np.fromiter(values, dtype=float, count=count)


def _span_data(spans: Sequence[Span]) -> np.ndarray:
    """customdata columns: rank, stage, microbatch, start, end, duration."""
    n = len(spans)
    starts = _column((s[2] for s in spans), n)
    ends = _column((s[3] for s in spans), n)
    return (
        np.column_stack(
            [
                _column((s[0] for s in spans), n),
                _column((s[1][0] for s in spans), n),
                _column((s[1][2] for s in spans), n),
                starts,
                ends,
                ends - starts,
            ]
        )
        if n
        else np.zeros((0, 6))
    )


def _lighten(color: str, amount: float) -> str:
    """`color` mixed with white: a solid lighter colour, so that a legend swatch shows it as the bars do."""
    rgb = [int(color.lstrip("#")[i : i + 2], 16) for i in (0, 2, 4)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02X}" for c in rgb)


def _span_bars(
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
    narrow bars, so the layout's `uniformtext` hides those instead (see `_lane_layout`).
    """
    data = _span_data(spans)
    if extra_data is not None:
        data = np.column_stack([data, extra_data])
    return go.Bar(
        name=name,
        orientation="h",
        y=rows,
        x=data[:, 5],
        base=data[:, 3],
        customdata=data,
        hovertemplate=_span_hover(kind) + extra_hover + f"<extra>{name}</extra>",
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


def _rows(spans: Sequence[Span], per_rank: int = 1, offset: int = 0) -> np.ndarray:
    """Row number of each span's bar: its rank, or rank * per_rank + offset with several rows per rank."""
    return _column((s[0] * per_rank + offset for s in spans), len(spans))


def _idle_bars(intervals: list[list[tuple[float, float]]], window: tuple[float, float] | None = None) -> go.Bar:
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
        hovertemplate="idle on rank %{customdata[0]}<br>from %{customdata[1]:.3f} ms to %{customdata[2]:.3f} ms"
        "<br>for %{customdata[3]:.3f} ms<extra>idle</extra>",
    )


def _rank_labels(intervals: list[list[tuple[float, float]]], total: float) -> list[str]:
    """'rank r · idle x%': each rank's bubble fraction (idle / makespan) in its axis label."""
    if total <= 0:
        return [f"rank {r}" for r in range(len(intervals))]
    return [f"rank {r} · idle {sum(b - a for a, b in gaps) / total:.0%}" for r, gaps in enumerate(intervals)]


def _lane_layout(fig: go.Figure, labels: Sequence[str], title: str) -> go.Figure:
    """Row i is labelled labels[i]; row 0 on top."""
    fig.update_layout(
        title=title,
        barmode="overlay",
        bargap=0.15,
        height=max(280, 34 * len(labels) + 170),
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


# --- Gantt ----------------------------------------------------------------------------


def gantt_figure(
    tl: Timeline,
    *,
    title: str = "",
    critical_path: Sequence[Action] | None = None,
    color_by: str = "kind",
    window: tuple[float, float] | None = None,
    max_bars: int = MAX_EXACT_BARS,
) -> go.Figure:
    """Ranks over time: one bar trace per action kind, idle time as a light band.

    Measured transfers (`tl.comm`) show as a thin strip under each row. With
    `critical_path`, the actions on it get a thick dark outline (one extra trace).
    `color_by` colours bars by action kind (default), chunk (the stage's place among its rank's stages) or
    microbatch. `window` (start, end in ms) draws only that part of the step. Past `max_bars` actions in view
    the chart is binned (`pipesim.charts_lod`): one picture, drawn at once, with a hover per bin.
    """
    if color_by not in COLOR_BY:
        raise ValueError(f"unknown colouring {color_by!r}; choose one of {', '.join(COLOR_BY)}")
    intervals = idle_intervals(tl) if tl.spans else [[] for _ in range(tl.num_ranks)]
    total = makespan(tl)
    labels = _rank_labels(intervals, total)
    spans = tl.spans if window is None else tuple(s for s in tl.spans if s.end > window[0] and s.start < window[1])
    groups, legend = _color_groups(tl.spans, spans, color_by)
    headline = ""
    if total > 0:
        idle = sum(b - a for gaps in intervals for a, b in gaps)
        headline = f"makespan {total:.3f} ms · bubble {idle / (tl.num_ranks * total):.1%}"
    images: list[dict] = []
    if len(spans) > max_bars:
        lo, hi = window if window is not None else (min(s.start for s in spans), max(s.end for s in spans))
        traces, images = charts_lod.binned_traces(
            spans, groups, legend, tl.num_ranks, (lo, hi), bins=AGGREGATE_BINS, idle_color=IDLE_COLOR
        )
        if critical_path:
            on_path = set(critical_path)
            traces.append(charts_lod.critical_line([s for s in tl.spans if s.action in on_path], CRITICAL_COLOR))
        headline += f" · {len(spans):,} actions binned ({AGGREGATE_BINS} per rank); exact bars below {max_bars:,}"
    else:
        traces = [_idle_bars(intervals, window)] if spans else []
        show_text = len(spans) <= MAX_BAR_LABELS and color_by == "kind"
        for kind, kind_spans in _by_kind(spans).items():
            if not kind_spans:
                continue
            color = None if color_by == "kind" else [legend[g][1] for g in _group_of(kind_spans, tl.spans, color_by)]
            traces.append(
                _span_bars(
                    kind_spans,
                    _rows(kind_spans),
                    kind,
                    KIND_NAMES[kind],
                    color=color,
                    show_text=show_text,
                    showlegend=color_by == "kind",
                )
            )
        if color_by != "kind":
            traces.extend(charts_lod.legend_entries(legend))
        transfers = [c for c in tl.comm if c.kind not in COLLECTIVE_KINDS]
        collectives = [c for c in tl.comm if c.kind in COLLECTIVE_KINDS]
        if transfers:
            traces.append(_comm_bars(transfers))
        if collectives:
            traces.append(_collective_bars(collectives))
        if critical_path:
            traces.append(_critical_bars(tl, critical_path))
    heading = f"{title or tl.schedule_name or 'schedule'} ({tl.source})"
    fig = _lane_layout(go.Figure(data=traces), labels, f"{heading}<br><sup>{headline}</sup>")
    if images:
        fig.update_layout(images=images)
    if window is not None:
        fig.update_xaxes(range=list(window), rangemode="normal")
    return fig


def _chunks(all_spans: Sequence[Span]) -> dict[tuple[int, int], int]:
    """(rank, stage) -> the stage's place among its rank's stages (0 for the first chunk)."""
    stages: dict[int, set[int]] = {}
    for span in all_spans:
        stages.setdefault(span.rank, set()).add(span.action.stage)
    return {(rank, stage): i for rank, held in stages.items() for i, stage in enumerate(sorted(held))}


def _group_of(spans: Sequence[Span], all_spans: Sequence[Span], color_by: str) -> list[int]:
    """Each span's colour group: kind index, chunk, or microbatch (modulo the palette)."""
    if color_by == "kind":
        index = {kind: _KINDS.index(kind.value) for kind in ActionKind}  # enum .value is slow on 10^5 spans
        return [index[s.action.kind] for s in spans]
    if color_by == "chunk":
        chunk = _chunks(all_spans)
        return [chunk[(s.rank, s.action.stage)] % len(GROUP_COLORS) for s in spans]
    return [s.action.microbatch % len(GROUP_COLORS) for s in spans]


def _color_groups(
    all_spans: Sequence[Span], spans: Sequence[Span], color_by: str
) -> tuple[list[int], list[tuple[str, str]]]:
    """Colour group of every span in view, and each group's (legend name, colour)."""
    groups = _group_of(spans, all_spans, color_by)
    if color_by == "kind":
        return groups, [(KIND_NAMES[k], KIND_COLORS[k]) for k in _KINDS]
    count = max(groups, default=0) + 1
    if color_by == "chunk":
        return groups, [(f"chunk {g}", GROUP_COLORS[g]) for g in range(count)]
    repeat = (
        f" (+{len(GROUP_COLORS)}k)" if max((s.action.microbatch for s in spans), default=0) >= len(GROUP_COLORS) else ""
    )
    return groups, [(f"microbatch {g}{repeat}", GROUP_COLORS[g]) for g in range(count)]


def _comm_peer(kind: str, peer: int) -> str:
    """Who the transfer is with; a gradient all-reduce's `peer` is its number of replicas."""
    if kind == "allreduce":
        return f"over {peer} replicas"
    return f"{'to' if kind == 'send' else 'from'} rank {peer}"


def _collective_bars(collectives: list) -> go.Bar:
    """torch's per-stage collectives (REDUCE_GRAD, UNSHARD, RESHARD): time on the rank's own row."""
    return go.Bar(
        name="collective",
        orientation="h",
        y=[c.rank for c in collectives],
        x=[c.end - c.start for c in collectives],
        base=[c.start for c in collectives],
        width=0.5,
        marker={"color": COLLECTIVE_COLOR, "line": {"width": 0}},
        customdata=[[str(c.action)] for c in collectives],
        hovertemplate="%{customdata[0]}<br>from %{base:.3f} ms for %{x:.3f} ms<extra>collective</extra>",
    )


def _comm_bars(comm: list) -> go.Bar:
    """Measured time blocked on sends/receives: a thin strip along the bottom of each rank's row."""
    return go.Bar(
        name="blocked on transfer",
        orientation="h",
        y=_column((c.rank + 0.32 for c in comm), len(comm)),
        x=_column((c.end - c.start for c in comm), len(comm)),
        base=_column((c.start for c in comm), len(comm)),
        width=0.16,
        marker={"color": COMM_COLOR, "line": {"width": 0}},
        customdata=[[c.kind, str(c.action), _comm_peer(c.kind, c.peer)] for c in comm],
        hovertemplate="%{customdata[0]} %{customdata[1]} %{customdata[2]}<br>"
        "from %{base:.3f} ms for %{x:.3f} ms<extra>transfer</extra>",
    )


def _critical_bars(tl: Timeline, path: Sequence[Action]) -> go.Bar:
    on_path = set(path)
    spans = [s for s in tl.spans if s.action in on_path]
    return go.Bar(
        name="critical path",
        orientation="h",
        y=[s.rank for s in spans],
        x=[s.duration for s in spans],
        base=[s.start for s in spans],
        width=0.9,
        marker={"color": "rgba(0,0,0,0)", "line": {"width": 3, "color": CRITICAL_COLOR}},
        customdata=[[str(s.action)] for s in spans],
        hovertemplate="%{customdata[0]} is on the critical path<extra>critical path</extra>",
    )


# --- overlay --------------------------------------------------------------------------


def overlay_figure(simulated: Timeline, measured: Timeline, step: int | None = None) -> go.Figure:
    """Simulated and measured, rank by rank on one time axis: two rows per rank.

    `step` picks one measured step (None: the last, past warm-up); its times are
    shifted to start at 0 like the simulation's.
    """
    real = pick_step(measured, step)
    num_ranks = max(simulated.num_ranks, real.num_ranks)
    labels = [f"rank {r} · {which}" for r in range(num_ranks) for which in ("simulated", "measured")]
    deltas = {(d.rank, d.action): d for d in align_step(simulated, real)}
    traces = []
    for kind, spans in _by_kind(simulated.spans).items():
        if spans:
            traces.append(
                _span_bars(
                    spans,
                    _rows(spans, 2, 0),
                    kind,
                    f"{kind} simulated",
                    color=_lighten(KIND_COLORS[kind], 0.55),
                    legendgroup=kind,
                )
            )
    for kind, spans in _by_kind(real.spans).items():
        if not spans:
            continue
        extra = np.array([_delta_cells(deltas.get((s.rank, s.action))) for s in spans], dtype=float)
        traces.append(
            _span_bars(
                spans,
                _rows(spans, 2, 1),
                kind,
                f"{kind} measured",
                legendgroup=kind,
                extra_data=extra.reshape(len(spans), 2),
                extra_hover="<br>simulated %{customdata[6]:.3f} ms<br>measured - simulated %{customdata[7]:+.3f} ms",
            )
        )
    return _lane_layout(go.Figure(data=traces), labels, _overlay_title(simulated, real))


def _delta_cells(diff) -> tuple[float, float]:
    """Simulated duration and the difference; NaN where the action was not simulated."""
    if diff is None:
        return (math.nan, math.nan)
    return (diff.simulated_ms, diff.delta_ms)


def _overlay_title(simulated: Timeline, real: Timeline) -> str:
    name = simulated.schedule_name or real.schedule_name or "schedule"
    if not (simulated.spans and real.spans):
        return f"{name}: simulated vs measured"
    predicted, actual = makespan(simulated), makespan(real)
    error = prediction_error(predicted, actual) if actual > 0 else float("nan")
    # The makespan of the drawn step's actions, not the run's median step time
    # (which adds the optimizer step): say so, so the two figures are not confused.
    return (
        f"{name}: simulated vs measured<br><sup>actions of this step span {predicted:.3f} ms simulated, "
        f"{actual:.3f} ms measured ({error:+.1%})</sup>"
    )


# --- attribution ------------------------------------------------------------------------------------------------

ATTRIBUTION_PARTS = (
    ("compute_ms", "compute", "#4C78A8"),
    ("schedule_idle_ms", "schedule idle", IDLE_COLOR),
    ("comm_wait_ms", "communication wait", COMM_COLOR),
    ("overhead_ms", "overhead (optimizer, gaps)", "#F58518"),
)


def attribution_figure(analysis: dict) -> go.Figure:
    """Where the median measured step went on each rank: one stacked bar per rank (pipesim.attribution)."""
    rows = analysis["ranks"]
    labels = [f"rank {row['rank']}" for row in rows]
    fig = go.Figure(
        [
            go.Bar(
                y=labels,
                x=[row[key] for row in rows],
                name=name,
                orientation="h",
                marker_color=color,
                hovertemplate=f"%{{y}}: {name} %{{x:.3f}} ms<extra></extra>",
            )
            for key, name, color in ATTRIBUTION_PARTS
        ]
    )
    fig.update_layout(
        barmode="stack",
        plot_bgcolor="white",
        height=120 + 40 * len(rows),
        title=f"where the step went: {analysis['step_ms']:.2f} ms (step {analysis.get('median_step')}, the median)",
        xaxis={"title": "ms"},
        yaxis={"autorange": "reversed"},
        legend={"orientation": "h", "yanchor": "bottom", "y": 1.02, "x": 0},
    )
    return fig

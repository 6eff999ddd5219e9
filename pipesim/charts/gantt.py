"""The Gantt chart of a timeline: ranks over time, one bar per action, idle time as a light band.

Drawn with `charts.lanes` (one bar trace per action kind, so 10^5 actions stay a handful of traces); past
`MAX_EXACT_BARS` actions in view it is binned (`charts.lod`). Charts draw what they are given (a Timeline, a
graph with positions, comparison rows); they never simulate or build a graph themselves. The overlay of measured
on simulated is `charts.overlay`, where a step went `charts.attribution`, memory `charts.memory`, the comparison
`charts.compare`, the DAG `charts.dag`.
"""

from __future__ import annotations

from collections.abc import Sequence

import plotly.graph_objects as go

from pipesim.charts import lod as charts_lod
from pipesim.charts.attribution import ATTRIBUTION_PARTS, attribution_figure
from pipesim.charts.lanes import (
    COLLECTIVE_COLOR,
    COMM_COLOR,
    CRITICAL_COLOR,
    CYCLE_COLOR,
    IDLE_COLOR,
    KIND_COLORS,
    KIND_NAMES,
    KINDS,
    MAX_BAR_LABELS,
    RANK_COLORS,
    by_kind,
    column,
    idle_bars,
    interval_hover,
    lane_layout,
    lane_rows,
    rank_labels,
    resource_bars,
    span_bars,
)
from pipesim.charts.overlay import overlay_figure
from pipesim.ir import Action, ActionKind
from pipesim.records import COLLECTIVE_KINDS, COPY_KINDS, LINK_KINDS, Span, Timeline, replica_lanes
from pipesim.sim.metrics import idle_intervals, makespan
from pipesim.units import format_ms, format_percent

# The colours, and the overlay and attribution figures, are read through this module too (the app's pages, the
# DAG and memory charts): the names they have always had here.
__all__ = [
    "AGGREGATE_BINS",
    "ATTRIBUTION_PARTS",
    "COLLECTIVE_COLOR",
    "COLOR_BY",
    "COMM_COLOR",
    "CRITICAL_COLOR",
    "CYCLE_COLOR",
    "GROUP_COLORS",
    "IDLE_COLOR",
    "KIND_COLORS",
    "KIND_NAMES",
    "MAX_EXACT_BARS",
    "RANK_COLORS",
    "attribution_figure",
    "gantt_figure",
    "overlay_figure",
]

# Past this many actions in view a Gantt is drawn binned (pipesim.charts.lod): a browser draws ~10^4 SVG bars
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
    the chart is binned (`pipesim.charts.lod`): one picture, drawn at once, with a hover per bin.
    """
    if color_by not in COLOR_BY:
        raise ValueError(f"unknown colouring {color_by!r}; choose one of {', '.join(COLOR_BY)}")
    tl, names = replica_lanes(tl)  # a run that kept every data-parallel replica: a lane per replica's rank
    intervals = idle_intervals(tl) if tl.spans else [[] for _ in range(tl.num_ranks)]
    total = makespan(tl)
    labels = rank_labels(intervals, total, names)
    spans = tl.spans if window is None else tuple(s for s in tl.spans if s.end > window[0] and s.start < window[1])
    groups, legend = _color_groups(tl.spans, spans, color_by)
    headline = ""
    if total > 0:
        idle = sum(b - a for gaps in intervals for a, b in gaps)
        step_ms = tl.meta.get("step_ms")  # a simulated step (sim.steps): the step time the cards show
        timing = (
            f"step time {format_ms(step_ms)}" if isinstance(step_ms, (int, float)) else f"makespan {format_ms(total)}"
        )
        headline = f"{timing} · bubble {format_percent(idle / (tl.num_ranks * total))}"
    if window is not None:  # after a drag: say which stretch of the step is drawn
        headline += f" · showing {format_ms(window[0], unit=False)} to {format_ms(window[1])} of {format_ms(total)}"
    images: list[dict] = []
    if len(spans) > max_bars:
        lo, hi = window if window is not None else (min(s.start for s in spans), max(s.end for s in spans))
        traces, images = charts_lod.binned_traces(
            spans, groups, legend, tl.num_ranks, (lo, hi), bins=AGGREGATE_BINS, idle_color=IDLE_COLOR
        )
        if critical_path:
            on_path = set(critical_path)
            traces.append(charts_lod.critical_line([s for s in tl.spans if s.action in on_path], CRITICAL_COLOR))
        headline += (
            f" · {len(spans):,} actions binned ({AGGREGATE_BINS:,} bins per rank); exact bars below {max_bars:,}"
        )
    else:
        traces = [idle_bars(intervals, window)] if spans else []
        show_text = len(spans) <= MAX_BAR_LABELS and color_by == "kind"
        for kind, kind_spans in by_kind(spans).items():
            if not kind_spans:
                continue
            color = None if color_by == "kind" else [legend[g][1] for g in _group_of(kind_spans, tl.spans, color_by)]
            traces.append(
                span_bars(
                    kind_spans,
                    lane_rows(kind_spans),
                    kind,
                    KIND_NAMES[kind],
                    color=color,
                    show_text=show_text,
                    showlegend=color_by == "kind",
                )
            )
        if color_by != "kind":
            traces.extend(charts_lod.legend_entries(legend))
        sub_lanes = COPY_KINDS | LINK_KINDS
        transfers = [c for c in tl.comm if c.kind not in COLLECTIVE_KINDS and c.kind not in sub_lanes]
        collectives = [c for c in tl.comm if c.kind in COLLECTIVE_KINDS]
        if transfers:
            traces.append(_comm_bars(transfers))
        if collectives:
            traces.append(_collective_bars(collectives))
        for resource, kinds in (("copy", COPY_KINDS), ("link", LINK_KINDS)):
            lane = [c for c in tl.comm if c.kind in kinds]
            if lane:
                traces.append(resource_bars(lane, resource))
        if critical_path:
            traces.append(_critical_bars(tl, critical_path))
    heading = f"{title or tl.schedule_name or 'schedule'} ({tl.source})"
    fig = lane_layout(go.Figure(data=traces), labels, f"{heading}<br><sup>{headline}</sup>")
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
        index = {kind: KINDS.index(kind.value) for kind in ActionKind}  # enum .value is slow on 10^5 spans
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
        return groups, [(KIND_NAMES[k], KIND_COLORS[k]) for k in KINDS]
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
        customdata=[[str(c.action), c.start, c.end - c.start, c.end] for c in collectives],
        hovertemplate=f"%{{customdata[0]}}<br>{interval_hover(1)}<extra>collective</extra>",
    )


def _comm_bars(comm: list) -> go.Bar:
    """Measured time blocked on sends/receives: a thin strip along the bottom of each rank's row."""
    return go.Bar(
        name="blocked on transfer",
        orientation="h",
        y=column((c.rank + 0.32 for c in comm), len(comm)),
        x=column((c.end - c.start for c in comm), len(comm)),
        base=column((c.start for c in comm), len(comm)),
        width=0.16,
        marker={"color": COMM_COLOR, "line": {"width": 0}},
        customdata=[[c.kind, str(c.action), _comm_peer(c.kind, c.peer), c.start, c.end - c.start, c.end] for c in comm],
        hovertemplate=f"%{{customdata[0]}} %{{customdata[1]}} %{{customdata[2]}}<br>{interval_hover(3)}"
        "<extra>transfer</extra>",
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

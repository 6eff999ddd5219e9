"""Activation memory over time: one step line per rank, reduced for large schedules with every peak kept.

A 32-rank schedule of 10^5 actions has thousands of memory steps per rank; drawn as they are, the chart sends
megabytes to the browser and takes longer to draw than the binned Gantt above it, while a screen shows a few
hundred columns. Past `MAX_MEMORY_POINTS` points in all, each rank's line is cut into time bins and keeps, per
bin, its first, last, lowest and highest point (the M4 reduction of Jugel et al., VLDB 2014): the line looks
the same at the chart's width and every peak and trough keeps its exact height and time.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from pipesim.charts.lanes import RANK_COLORS
from pipesim.cost.model import CostModel
from pipesim.records import Timeline
from pipesim.sim.metrics import has_memory_moves, host_memory_over_time, memory_over_time, stash_counts
from pipesim.units import BYTES_SPEC, binary_unit, hover_ms

MAX_MEMORY_POINTS = 20_000  # in all ranks together: about what plotly draws in a tenth of a second
MIN_BINS = 100  # per rank, however many ranks: below this the line loses its shape


def m4_reduce(times: np.ndarray, values: np.ndarray, bins: int) -> np.ndarray:
    """Indices (sorted) of the points to keep: per time bin the first, last, lowest and highest one."""
    n = len(times)
    if n <= 4 * bins:
        return np.arange(n)
    lo, hi = float(times[0]), float(times[-1])
    width = (hi - lo) / bins or 1.0
    which = np.minimum(((times - lo) / width).astype(np.int64), bins - 1)
    order_low = np.lexsort((values, which))  # by bin, then value: the first of each bin is its lowest
    order_high = np.lexsort((-values, which))
    starts = np.flatnonzero(np.diff(which, prepend=-1))  # first point of each non-empty bin (times are sorted)
    ends = np.append(starts[1:], n) - 1
    # the bins of the sorted orders hold the same counts as `which`, so the same offsets find their heads
    keep = np.concatenate([starts, ends, order_low[starts], order_high[starts]])
    return np.unique(keep)


def memory_figure(tl: Timeline, cost: CostModel | None = None, *, max_points: int = MAX_MEMORY_POINTS) -> go.Figure:
    """Stashed activations over time, one step line per rank.

    With a cost model the y axis is bytes; without one, stashed microbatches. Past `max_points` points in all
    each line is M4-reduced (the title says so).
    """
    series = stash_counts(tl) if cost is None else memory_over_time(tl, cost)
    # Bytes in one binary unit named in the title: plotly's "~s" ticks are decimal ("26B" = 26 billion).
    unit, size = ("", 1) if cost is None else binary_unit(max((v for points in series for _, v in points), default=0))
    title = "stashed microbatches" if cost is None else f"activation memory ({unit})"
    total_points = sum(len(points) for points in series)
    bins = max(MIN_BINS, max_points // (4 * max(1, len(series)))) if total_points > max_points else None
    fig = go.Figure()
    group_of = _legend_groups(len(series))
    for rank, points in enumerate(series):
        times, values = _columns(points)
        if bins is not None:
            keep = m4_reduce(times, values, bins)
            times, values = times[keep], values[keep]
        group, first, label = group_of[rank]
        fig.add_trace(
            go.Scatter(
                name=label,
                legendgroup=label,
                showlegend=first,
                # numpy arrays go to the browser as binary: long lines stay light
                x=times,
                y=values / size,
                mode="lines",
                line={"shape": "hv", "width": 2, "color": RANK_COLORS[group % len(RANK_COLORS)]},
                hovertemplate=f"rank {rank}<br>{hover_ms('x')}<br>%{{y:{BYTES_SPEC}}} {unit}<extra></extra>"
                if cost is not None
                else f"rank {rank}<br>{hover_ms('x')}<br>%{{y}} stashed<extra></extra>",
            )
        )
    if cost is not None and has_memory_moves(tl):  # what the copy engines moved off the device, dashed
        for rank, points in enumerate(host_memory_over_time(tl, cost)):
            times, values = _columns(points)
            group, first, label = group_of[rank]
            fig.add_trace(
                go.Scatter(
                    name=f"{label} (host)",
                    legendgroup=f"{label} (host)",
                    showlegend=first,
                    x=times,
                    y=values / size,
                    mode="lines",
                    line={"shape": "hv", "width": 1.5, "dash": "dash", "color": RANK_COLORS[group % len(RANK_COLORS)]},
                    hovertemplate=f"rank {rank} host<br>{hover_ms('x')}<br>%{{y:{BYTES_SPEC}}} {unit}<extra></extra>",
                )
            )
        title = f"activation memory ({unit}): device solid, host dashed"
    heading = f"{tl.schedule_name or 'schedule'}: activation memory per rank"
    if bins is not None:
        heading += (
            f"<br><sup>{total_points:,} memory steps drawn as at most {4 * bins} points per rank "
            "(each time bin's first, last, lowest and highest: every peak kept)</sup>"
        )
    fig.update_layout(
        title=heading,
        xaxis={"title": "time (ms)", "rangemode": "tozero"},
        yaxis={"title": title, "rangemode": "tozero", "automargin": True},
        hovermode="x unified",
        plot_bgcolor="white",
        height=380,
    )
    return fig


MAX_LEGEND_RANKS = 12  # past this many ranks the legend lists groups of ranks, not every rank


def _legend_groups(num_ranks: int) -> list[tuple[int, bool, str]]:
    """Per rank: its legend group, whether it is the group's first (the one listed), and the group's name. Up to
    a dozen ranks, each rank is its own entry; past that, consecutive ranks share one of at most 8 entries and
    colours ("ranks 0-3"), so a 32-rank legend fits the chart instead of scrolling past rank 13."""
    if num_ranks <= MAX_LEGEND_RANKS:
        return [(rank, True, f"rank {rank}") for rank in range(num_ranks)]
    size = -(-num_ranks // 8)
    out = []
    for rank in range(num_ranks):
        group = rank // size
        last = min(num_ranks, (group + 1) * size) - 1
        name = f"ranks {group * size}-{last}" if last > group * size else f"rank {last}"
        out.append((group, rank == group * size, name))
    return out


def _columns(points: Sequence[tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    times = np.fromiter((t for t, _ in points), dtype=np.float64, count=len(points))
    values = np.fromiter((v for _, v in points), dtype=np.float64, count=len(points))
    return times, values

"""Level of detail for large Gantt charts: a timeline binned into one picture, drawn in a single image.

A browser draws about 10^4 SVG bars in half a second; 10^5 take seconds, and WebGL traces of that size are
no faster in a software-rendered Chromium (the app's usual case). Zoomed out, a chart of 10^5 actions has
several actions per pixel anyway, so past `charts.gantt.MAX_EXACT_BARS` the Gantt draws what a screen can show:
each rank's lane cut into `bins` time bins, each bin coloured by the share of its time each colour group
(action kind, chunk or microbatch) was busy, blended over the idle colour. One PNG in a layout image, plus one
transparent heatmap for the hover (shares per kind, number of actions started in the bin). Exact bars come back
when the caller asks for a time window holding fewer actions.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from pipesim.records import Span

ROWS_PER_LANE = 10  # image rows per rank: the top and bottom ones are transparent, the gap between lanes


@dataclass(frozen=True)
class Binned:
    """busy[lane, group, bin]: fraction of each bin's time spent on that colour group (0..1)."""

    edges: np.ndarray  # bins + 1 times, ms
    busy: np.ndarray
    started: np.ndarray  # [lane, bin]: actions that start in the bin


def bin_busy(
    lanes: np.ndarray,
    starts: np.ndarray,
    ends: np.ndarray,
    groups: np.ndarray,
    *,
    num_lanes: int,
    num_groups: int,
    window: tuple[float, float],
    bins: int,
) -> Binned:
    """Busy time per lane, group and bin, exactly (a span's time is split across the bins it covers).

    The busy time up to t of a set of spans is sum(clip(t - start, 0, duration)) = sum over started spans of
    (t - start) minus the same over ended spans; with sorted starts and ends that is two searchsorted calls
    and two cumulative sums, so the cost is O(n log n) whatever the span lengths.
    """
    lo, hi = window
    edges = np.linspace(lo, hi, bins + 1)
    busy = np.zeros((num_lanes, num_groups, bins))
    keys = lanes.astype(np.int64) * num_groups + groups.astype(np.int64)
    for key in np.unique(keys):
        mine = keys == key
        busy[key // num_groups, key % num_groups] = np.diff(_busy_until(starts[mine], ends[mine], edges))
    width = (hi - lo) / bins
    busy = np.clip(busy / width, 0.0, 1.0) if width > 0 else busy
    started = np.zeros((num_lanes, bins))
    inside = (starts >= lo) & (starts < hi)
    if width > 0:
        index = np.minimum(((starts[inside] - lo) / width).astype(np.int64), bins - 1)
        np.add.at(started, (lanes[inside].astype(np.int64), index), 1)
    return Binned(edges, busy, started)


def _busy_until(starts: np.ndarray, ends: np.ndarray, at: np.ndarray) -> np.ndarray:
    s, e = np.sort(starts), np.sort(ends)
    cs, ce = np.concatenate([[0.0], np.cumsum(s)]), np.concatenate([[0.0], np.cumsum(e)])
    ns, ne = np.searchsorted(s, at, side="right"), np.searchsorted(e, at, side="right")
    return (ns * at - cs[ns]) - (ne * at - ce[ne])


def _rgb(color: str) -> np.ndarray:
    color = color.lstrip("#")
    return np.array([int(color[i : i + 2], 16) for i in (0, 2, 4)], dtype=float)


def blend(busy: np.ndarray, colors: Sequence[str], idle_color: str) -> np.ndarray:
    """RGBA image [lane rows, bins, 4]: each bin the busy-weighted mix of its groups' colours over idle."""
    palette = np.stack([_rgb(c) for c in colors])  # groups x 3
    shares = busy.transpose(0, 2, 1)  # lanes x bins x groups
    total = np.clip(shares.sum(axis=2, keepdims=True), 0.0, 1.0)
    rgb = shares @ palette + (1.0 - total) * _rgb(idle_color)
    lanes, bins = rgb.shape[:2]
    image = np.zeros((lanes, ROWS_PER_LANE, bins, 4), dtype=np.uint8)
    image[:, 1:-1, :, :3] = np.clip(np.rint(rgb), 0, 255).astype(np.uint8)[:, None]
    image[:, 1:-1, :, 3] = 255
    return image.reshape(lanes * ROWS_PER_LANE, bins, 4)


def png_data_uri(image: np.ndarray) -> str:
    """An RGBA uint8 array as a PNG data URI (zlib only: pipesim needs no imaging library)."""
    height, width = image.shape[:2]
    raw = b"".join(b"\x00" + image[row].tobytes() for row in range(height))

    def chunk(tag: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + tag + data + struct.pack(">I", zlib.crc32(tag + data) & 0xFFFFFFFF)

    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 6, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def _floats(values: Iterable[float], count: int) -> np.ndarray:
    return np.fromiter(values, dtype=float, count=count)


def legend_entries(legend: Sequence[tuple[str, str]], used: Iterable[int] | None = None) -> list[go.Scatter]:
    """Legend-only traces: a colour key for pictures and recoloured bars."""
    keep = set(range(len(legend))) if used is None else set(used)
    return [
        go.Scatter(
            x=[None],
            y=[None],
            mode="markers",
            name=name,
            hoverinfo="skip",
            marker={"symbol": "square", "size": 12, "color": color},
        )
        for g, (name, color) in enumerate(legend)
        if g in keep
    ]


def binned_traces(
    spans: Sequence[Span],
    groups: list[int],
    legend: Sequence[tuple[str, str]],
    num_ranks: int,
    window: tuple[float, float],
    *,
    bins: int,
    idle_color: str,
) -> tuple[list, list[dict]]:
    """The binned picture as a layout image, a transparent heatmap for the hover, and the colour key."""
    n = len(spans)
    starts, ends = _floats((s[2] for s in spans), n), _floats((s[3] for s in spans), n)
    lanes = _floats((s[0] for s in spans), n)
    binned = bin_busy(
        lanes, starts, ends, np.asarray(groups), num_lanes=num_ranks, num_groups=len(legend), window=window, bins=bins
    )
    picture = blend(binned.busy, [color for _, color in legend], idle_color)
    lo, hi = window
    image = {
        "source": png_data_uri(picture),
        "xref": "x",
        "yref": "y",
        "x": lo,
        "y": -0.5,
        "sizex": hi - lo,
        "sizey": num_ranks,
        "sizing": "stretch",
        "xanchor": "left",
        "yanchor": "top",
        "layer": "below",
    }
    edges = binned.edges
    # Small integer cells: this heatmap is most of the bytes a large page sends to the browser, and the hover
    # shows whole percents and counts anyway (uint8 busy %, uint16 actions started: 3 bytes a cell, not 12).
    busy = np.rint(binned.busy.sum(axis=1).clip(0.0, 1.0) * 100).astype(np.uint8)
    started = binned.started.clip(0, np.iinfo(np.uint16).max).astype(np.uint16)
    half = (hi - lo) / bins / 2
    hover = go.Heatmap(
        x=((edges[:-1] + edges[1:]) / 2).astype(np.float32),
        y=np.arange(num_ranks, dtype=np.float32),
        z=busy,
        customdata=started,
        opacity=0,
        showscale=False,
        name="binned",
        hoverongaps=False,
        # the bin's edges come from x and the lane's name from y (its tick label)
        hovertemplate=f"%{{y}}<br>%{{x:.3f}} ms ± {half:.3g} ms<br>busy %{{z}}% · "
        "%{customdata} actions start here<br>binned: pick a time window to draw it in more detail"
        "<extra></extra>",
    )
    return [hover, *legend_entries(legend, set(groups))], [image]


def critical_line(spans: Sequence[Span], color: str) -> go.Scatter:
    """The critical path as dark strokes along the lanes: an outline per bar would be thousands of shapes."""
    gap = np.full(len(spans), np.nan)
    xs = np.column_stack(
        [_floats((s.start for s in spans), len(spans)), _floats((s.end for s in spans), len(spans)), gap]
    ).ravel()
    rows = _floats((s.rank for s in spans), len(spans))
    ys = np.column_stack([rows, rows, gap]).ravel()
    return go.Scatter(
        x=xs, y=ys, mode="lines", name="critical path", hoverinfo="skip", line={"color": color, "width": 3}
    )

"""The Gantt chart at scale and its options: binned past MAX_EXACT_BARS, colour by kind, chunk or
microbatch, a time window, hover text that says what the bar is, labels that fit."""

from __future__ import annotations

import base64
import re
import struct
import zlib

import numpy as np
import pytest

from pipesim.analysis.critical_path import critical_path
from pipesim.charts import gantt as charts
from pipesim.charts import lod as charts_lod
from pipesim.charts import memory as charts_memory
from pipesim.cost.model import CostModel
from pipesim.records import Timeline
from pipesim.schedules import build_schedule
from pipesim.sim.metrics import idle_intervals
from pipesim.sim.simulate import simulate
from pipesim.units import format_ms
from tests.test_charts import _hover, _kind_traces

COST = CostModel.uniform(forward_ms=1.0, backward_ms=2.0, weight_ms=1.0, comm_ms=0.2)


def _png(uri: str) -> np.ndarray:
    """Decode the RGBA PNG written by charts_lod (no filters, one IDAT)."""
    data = base64.b64decode(uri.split(",", 1)[1])
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    idat = data.index(b"IDAT")
    length = struct.unpack(">I", data[idat - 4 : idat])[0]
    raw = zlib.decompress(data[idat + 4 : idat + 4 + length])
    rows = np.frombuffer(raw, dtype=np.uint8).reshape(height, 1 + 4 * width)
    return rows[:, 1:].reshape(height, width, 4)


def test_idle_hover_names_the_rank_and_the_gap_length():
    tl = simulate(build_schedule("1f1b", 4, 8), COST)
    fig = charts.gantt_figure(tl)
    [idle] = [t for t in fig.data if t.name == "idle"]
    gaps = [(r, a, b) for r, row in enumerate(idle_intervals(tl)) for a, b in row]
    for i, (rank, start, end) in enumerate(gaps):
        text = _hover(idle, i)
        assert text.startswith(f"idle on rank {rank}<br>")
        assert f"from {format_ms(start)} to {format_ms(end)}" in text and f"for {format_ms(end - start)}" in text


def test_bar_labels_stay_horizontal_and_hide_when_they_do_not_fit():
    fig = charts.gantt_figure(simulate(build_schedule("1f1b", 2, 3), COST))
    for trace in _kind_traces(fig).values():
        assert trace.textangle == 0 and trace.text is not None
    assert fig.layout.uniformtext.mode == "hide" and fig.layout.uniformtext.minsize >= 8


def test_left_margin_fits_the_longest_lane_label():
    sim = simulate(build_schedule("1f1b", 2, 3), COST)
    fig = charts.overlay_figure(sim, Timeline(num_ranks=2, spans=sim.spans, source="measured"))
    longest = max(len(label) for label in fig.layout.yaxis.ticktext)
    assert fig.layout.margin.l >= 6 * longest  # ~6 px per character at plotly's 12 px tick font
    assert fig.layout.yaxis.automargin


def test_overlay_legend_tells_simulated_from_measured():
    sim = simulate(build_schedule("1f1b", 2, 3), COST)
    fig = charts.overlay_figure(sim, Timeline(num_ranks=2, spans=sim.spans, source="measured"))
    colours = {t.name: t.marker.color for t in fig.data}
    assert colours["F simulated"] != colours["F measured"] and colours["B simulated"] != colours["B measured"]
    assert all(t.marker.opacity in (None, 1) for t in fig.data)  # the legend swatch shows the bar's colour


@pytest.mark.parametrize("color_by", ["chunk", "microbatch"])
def test_colour_by_chunk_or_microbatch(color_by):
    schedule = build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=2)
    tl = simulate(schedule, COST)
    fig = charts.gantt_figure(tl, color_by=color_by)
    legend = [t.name for t in fig.data if t.showlegend is not False and t.name not in ("idle",)]
    expected = 2 if color_by == "chunk" else 4
    assert legend == [f"{color_by} {g}" for g in range(expected)]
    forward = _kind_traces(fig)["F"]
    for i, colour in enumerate(forward.marker.color):
        rank, stage, microbatch = (int(v) for v in forward.customdata[i][:3])
        group = stage // 2 if color_by == "chunk" else microbatch  # interleaved: rank r holds stages r, r + 2
        assert colour == charts.GROUP_COLORS[group]


def test_unknown_colouring_is_refused_with_the_choices():
    with pytest.raises(ValueError, match="kind, chunk, microbatch"):
        charts.gantt_figure(simulate(build_schedule("1f1b", 2, 2), COST), color_by="rank")


def test_window_draws_only_the_actions_in_it():
    tl = simulate(build_schedule("1f1b", 2, 6), COST)
    fig = charts.gantt_figure(tl, window=(5.0, 10.0))
    drawn = sum(len(t.x) for t in _kind_traces(fig).values())
    assert drawn == sum(1 for s in tl.spans if s.end > 5.0 and s.start < 10.0) < len(tl.spans)
    assert list(fig.layout.xaxis.range) == [5.0, 10.0]


def test_bins_hold_exactly_the_busy_time():
    tl = simulate(build_schedule("zb-h1", 4, 16), COST)
    n = len(tl.spans)
    lanes = np.array([s.rank for s in tl.spans], dtype=float)
    starts, ends = np.array([s.start for s in tl.spans]), np.array([s.end for s in tl.spans])
    kinds = np.array(["FBIW".index(s.action.kind.value) for s in tl.spans])
    total = ends.max()
    binned = charts_lod.bin_busy(lanes, starts, ends, kinds, num_lanes=4, num_groups=4, window=(0.0, total), bins=7)
    width = total / 7
    for rank in range(4):
        for kind in range(4):
            mine = (lanes == rank) & (kinds == kind)
            assert binned.busy[rank, kind].sum() * width == pytest.approx((ends[mine] - starts[mine]).sum())
    assert binned.started.sum() == n


def test_large_schedule_is_one_picture_with_a_hover_per_bin():
    schedule = build_schedule("1f1b", 8, 800)  # 12,800 actions: past the exact-bar limit
    tl = simulate(schedule, COST)
    fig = charts.gantt_figure(tl, critical_path=critical_path(schedule, tl, COST))
    assert len(tl.spans) > charts.MAX_EXACT_BARS
    assert not any(t.type == "bar" for t in fig.data)  # no per-action bars
    [image] = fig.layout.images
    picture = _png(image.source)
    assert picture.shape == (8 * charts_lod.ROWS_PER_LANE, charts.AGGREGATE_BINS, 4)
    # rank 0 starts with forwards only: its first bins are the forward colour
    first = picture[charts_lod.ROWS_PER_LANE // 2, 0, :3]
    assert "#" + "".join(f"{c:02X}" for c in first) == charts.KIND_COLORS["F"].upper()
    assert picture[0, 0, 3] == 0  # the gap between lanes is transparent
    [hover] = [t for t in fig.data if t.type == "heatmap"]
    text = _hover_cell(hover, 3, 10)
    # %{y} is the lane's tick label ("rank 3 · idle x%"): the browser test checks what plotly prints
    assert text.startswith("%{y}<br>") and "actions start here" in text
    half = (hover.x[1] - hover.x[0]) / 2
    in_bin = [s for s in tl.spans if s.rank == 3 and hover.x[10] - half <= s.start < hover.x[10] + half]
    assert int(np.asarray(hover.customdata)[3, 10]) == len(in_bin) and f"· {len(in_bin)} actions start" in text
    lo, hi = hover.x[10] - half, hover.x[10] + half
    busy = sum(max(0.0, min(s.end, hi) - max(s.start, lo)) for s in tl.spans if s.rank == 3) / (hi - lo)
    assert f"busy {round(100 * busy)}%" in text
    assert any(t.name == "critical path" for t in fig.data)
    assert "binned" in fig.layout.title.text


def test_a_window_with_few_actions_gets_exact_bars_again():
    tl = simulate(build_schedule("1f1b", 8, 800), COST)
    fig = charts.gantt_figure(tl, window=(100.0, 140.0))
    assert not fig.layout.images and _kind_traces(fig)


def _hover_cell(trace, lane: int, column: int) -> str:
    """The hover text of one heatmap cell (%{z} and %{customdata} filled in)."""
    cells = {"z": np.asarray(trace.z), "customdata": np.asarray(trace.customdata)}
    return re.sub(r"%\{(z|customdata)\}", lambda m: str(int(cells[m.group(1)][lane, column])), trace.hovertemplate)


def test_memory_axis_is_in_binary_units():
    cost = CostModel.uniform(1.0, 2.0, activation_bytes=3 * 2**20)
    tl = simulate(build_schedule("1f1b", 2, 4), cost)
    fig = charts_memory.memory_figure(tl, cost)
    assert fig.layout.yaxis.title.text == "activation memory (MiB)"
    assert max(max(t.y) for t in fig.data) == 6.0  # rank 0 stashes two microbatches of 3 MiB
    assert fig.layout.yaxis.tickformat is None  # no decimal SI ticks


def test_m4_keeps_every_bins_first_last_lowest_and_highest_point():
    rng = np.random.default_rng(3)
    times = np.sort(rng.uniform(0.0, 100.0, 5000))
    values = rng.integers(0, 50, 5000).astype(float)
    keep = charts_memory.m4_reduce(times, values, bins=40)
    assert len(keep) <= 4 * 40 and list(keep) == sorted(set(keep))
    assert keep[0] == 0 and keep[-1] == len(times) - 1
    which = np.minimum(((times - times[0]) / ((times[-1] - times[0]) / 40)).astype(int), 39)
    for b in range(40):
        mine = np.flatnonzero(which == b)
        kept = set(keep) & set(mine)
        assert values[list(kept)].max() == values[mine].max() and values[list(kept)].min() == values[mine].min()
        assert mine[0] in kept and mine[-1] in kept
    assert list(charts_memory.m4_reduce(times[:100], values[:100], bins=40)) == list(range(100))  # short: all


def test_a_large_memory_chart_is_reduced_with_its_peaks_kept():
    cost = CostModel.uniform(1.0, 2.0, activation_bytes=2**20)
    tl = simulate(build_schedule("1f1b", 8, 800), cost)
    full = charts_memory.memory_figure(tl, cost, max_points=10**9)
    reduced = charts_memory.memory_figure(tl, cost, max_points=4000)
    assert sum(len(t.x) for t in full.data) > 4000 >= sum(len(t.x) for t in reduced.data)
    for whole, small in zip(full.data, reduced.data, strict=True):
        assert max(small.y) == max(whole.y) and min(small.y) == min(whole.y)
        assert small.x[int(np.argmax(small.y))] == whole.x[int(np.argmax(whole.y))]  # the first peak, same time
        assert small.x[-1] == whole.x[-1]
    assert "every peak kept" in reduced.layout.title.text and "every peak" not in full.layout.title.text

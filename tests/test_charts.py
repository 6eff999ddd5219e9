"""Figure structure (traces, bars, hover), not pixels."""

from __future__ import annotations

import re

import pytest

from pipesim.analysis.compare import ComparisonRow, compare_schedules
from pipesim.analysis.critical_path import critical_path
from pipesim.charts import compare as charts_compare
from pipesim.charts import dag as charts_dag
from pipesim.charts import gantt as charts
from pipesim.charts import memory as charts_memory
from pipesim.cost.model import CostModel
from pipesim.ir import Action, B, F, make_schedule
from pipesim.records import CommSpan, Span, Timeline
from pipesim.schedules import build_schedule
from pipesim.semantics.dag import build_dag, dag_positions
from pipesim.sim.metrics import bubble_fraction, idle_intervals, memory_over_time, stash_counts
from pipesim.sim.simulate import find_deadlock, simulate
from pipesim.units import binary_unit, format_ms, format_percent

COST = CostModel.uniform(forward_ms=1.0, backward_ms=2.0, weight_ms=1.0, comm_ms=0.2)
KIND_TRACES = {name: kind for kind, name in charts.KIND_NAMES.items()}


def _hover(trace, i: int) -> str:
    """The hover text plotly would show for point i (customdata, x, y and base placeholders)."""

    def value(match: re.Match) -> str:
        field, index, spec = match.group(1), match.group(2), match.group(3) or ""
        raw = trace.customdata[i][int(index)] if field == "customdata" else getattr(trace, field)[i]
        if not spec and isinstance(raw, float) and raw.is_integer():
            return str(int(raw))
        return format(raw, spec)

    return re.sub(r"%\{(customdata|x|y|base)(?:\[(\d+)\])?(?::([^}]*))?\}", value, trace.hovertemplate)


def _kind_traces(fig):
    return {KIND_TRACES[t.name]: t for t in fig.data if t.name in KIND_TRACES}


def _spans_of(tl, kind):
    return [s for s in tl.spans if s.action.kind.value == kind]


# --- Gantt -----------------------------------------------------------------------------


@pytest.mark.parametrize("name, kinds", [("1f1b", {"F", "B"}), ("zb-h1", {"F", "I", "W"})])
def test_gantt_has_one_bar_trace_per_kind_with_one_bar_per_span(name, kinds):
    tl = simulate(build_schedule(name, 3, 4), COST)
    fig = charts.gantt_figure(tl)
    traces = _kind_traces(fig)
    assert set(traces) == kinds
    for kind, trace in traces.items():
        spans = _spans_of(tl, kind)
        assert trace.type == "bar" and trace.orientation == "h"
        assert len(trace.x) == len(spans)
        assert list(trace.base) == pytest.approx([s.start for s in spans])
        assert list(trace.x) == pytest.approx([s.end - s.start for s in spans])
        assert list(trace.y) == [s.rank for s in spans]
        assert trace.marker.color == charts.KIND_COLORS[kind]
    assert sum(len(t.x) for t in traces.values()) == len(tl.spans)


def test_gantt_hover_names_action_stage_microbatch_and_times():
    tl = simulate(build_schedule("zb-h1", 2, 3), COST)
    for kind, trace in _kind_traces(charts.gantt_figure(tl)).items():
        for i, span in enumerate(_spans_of(tl, kind)):
            text = _hover(trace, i)
            assert f"<b>{span.action}</b>" in text
            assert f"stage {span.action.stage}, microbatch {span.action.microbatch}" in text
            assert f"start {format_ms(span.start)}" in text and f"end {format_ms(span.end)}" in text
            assert f"duration {format_ms(span.end - span.start)}" in text


def test_all_four_kinds_have_distinct_colours():
    assert len(set(charts.KIND_COLORS.values())) == 4
    assert charts.IDLE_COLOR not in charts.KIND_COLORS.values()


def test_gantt_shows_idle_time_and_bubble_fraction_per_rank():
    tl = simulate(build_schedule("gpipe", 3, 2), COST)
    fig = charts.gantt_figure(tl, title="gp")
    [idle] = [t for t in fig.data if t.name == "idle"]
    gaps = [gap for row in idle_intervals(tl) for gap in row]
    assert len(idle.x) == len(gaps)
    assert sum(idle.x) == pytest.approx(sum(b - a for a, b in gaps))
    ticks = fig.layout.yaxis.ticktext
    assert len(ticks) == 3
    for rank, label in enumerate(ticks):
        assert label == f"rank {rank} · idle {format_percent(bubble_fraction(tl, rank))}"
    assert "gp" in fig.layout.title.text and f"{bubble_fraction(tl):.1%}" in fig.layout.title.text


def test_gantt_draws_measured_transfers_as_one_thin_trace():
    spans = (Span(0, Action(0, F, 0), 0.0, 1.0), Span(1, Action(1, F, 0), 1.5, 2.5))
    comm = (CommSpan(1, "recv", 0, Action(0, F, 0), 0.25, 1.5),)
    fig = charts.gantt_figure(Timeline(num_ranks=2, spans=spans, source="measured", comm=comm))
    [strip] = [t for t in fig.data if t.name == "blocked on transfer"]
    assert list(strip.x) == pytest.approx([1.25]) and list(strip.base) == pytest.approx([0.25])
    assert 1 < strip.y[0] < 1.5 and strip.width < 0.8
    assert _hover(strip, 0).startswith("recv 0F0 from rank 0")


def test_gantt_critical_path_is_one_extra_trace():
    schedule = build_schedule("1f1b", 3, 4)
    tl = simulate(schedule, COST)
    path = critical_path(schedule, tl, COST)
    fig = charts.gantt_figure(tl, critical_path=path)
    [highlight] = [t for t in fig.data if t.name == "critical path"]
    assert len(highlight.x) == len(path)
    assert sorted(highlight.customdata[i][0] for i in range(len(path))) == sorted(map(str, path))


def test_large_schedules_stay_a_handful_of_traces():
    tl = simulate(build_schedule("1f1b", 4, 2500), COST)  # 20 000 actions
    fig = charts.gantt_figure(tl, max_bars=20_000)  # exact bars asked for (the default bins them)
    assert len(fig.data) == 3  # idle, F, B
    assert sum(len(t.x) for t in _kind_traces(fig).values()) == 20_000
    assert not fig.layout.shapes


def test_empty_timeline_gives_an_empty_chart():
    fig = charts.gantt_figure(Timeline(num_ranks=2, spans=()))
    assert len(fig.data) == 0 and list(fig.layout.yaxis.ticktext) == ["rank 0", "rank 1"]


# --- overlay -----------------------------------------------------------------------------


def test_overlay_puts_simulated_and_measured_on_alternate_rows():
    schedule = build_schedule("1f1b", 2, 3)
    sim = simulate(schedule, COST)
    measured = Timeline(
        num_ranks=2,
        spans=tuple(Span(s.rank, s.action, 50 + s.start * 1.5, 50 + s.end * 1.5, 3) for s in sim.spans),
        source="measured",
    )
    fig = charts.overlay_figure(sim, measured)
    assert list(fig.layout.yaxis.ticktext) == [
        "rank 0 · simulated",
        "rank 0 · measured",
        "rank 1 · simulated",
        "rank 1 · measured",
    ]
    names = {t.name for t in fig.data}
    assert names == {"F simulated", "B simulated", "F measured", "B measured"}
    measured_f = next(t for t in fig.data if t.name == "F measured")
    sim_f = next(t for t in fig.data if t.name == "F simulated")
    assert all(y % 2 == 1 for y in measured_f.y) and all(y % 2 == 0 for y in sim_f.y)
    assert min(measured_f.base) == pytest.approx(0.0)  # the step is shifted to start at 0
    spans = _spans_of(sim, "F")
    text = _hover(measured_f, 0)
    duration = spans[0].end - spans[0].start
    # predicted - measured: the sign of the run's prediction error (the simulation was faster here)
    assert str(spans[0].action) in text and f"predicted - measured {format_ms(-0.5 * duration, signed=True)}" in text
    assert "error +" not in fig.layout.title.text and "(makespan error -33.3%)" in fig.layout.title.text


# --- memory, comparison, trade-off ---------------------------------------------------------


def test_memory_figure_has_one_step_line_per_rank():
    tl = simulate(build_schedule("1f1b", 3, 4), COST)
    fig = charts_memory.memory_figure(tl, COST)
    assert len(fig.data) == 3
    for rank, trace in enumerate(fig.data):
        assert trace.line.shape == "hv"
        assert list(trace.y) == [v for _, v in memory_over_time(tl, COST)[rank]]
    counts = charts_memory.memory_figure(tl)
    assert list(counts.data[0].y) == [v for _, v in stash_counts(tl)[0]]
    assert "stashed" in counts.layout.yaxis.title.text


def test_comparison_and_tradeoff_figures():
    rows = compare_schedules(["1f1b", "gpipe", "interleaved-1f1b"], 4, 9, COST, num_virtual_stages=2)
    good = [row for row in rows if row.error is None]
    fig = charts_compare.comparison_figure(rows)
    assert len(fig.data) == 3
    for trace in fig.data:  # horizontal bars, a row per schedule
        assert list(trace.y) == [row.schedule for row in good]
    assert list(fig.data[0].x) == pytest.approx([row.step_ms for row in good])
    assert list(fig.data[1].x) == pytest.approx([row.bubble_fraction for row in good])
    assert "interleaved-1f1b" in fig.layout.title.text  # the failed one is named with its reason
    tradeoff = charts_compare.tradeoff_figure(rows)
    points = [t for t in tradeoff.data if t.mode == "markers" and t.name != "Pareto front"]
    assert [t.name for t in points] == [row.schedule for row in good]  # a legend entry each: no labels to overlap
    unit, size = binary_unit(max(row.peak_activation_bytes for row in good))
    assert [t.x[0] for t in points] == pytest.approx([row.makespan for row in good])
    assert [t.y[0] for t in points] == pytest.approx([row.peak_activation_bytes / size for row in good])
    assert tradeoff.layout.yaxis.title.text == f"peak activations ({unit})"
    counts_only = [ComparisonRow("a", 1.0, 0.1, 0.2, 3, None)]
    assert list(charts_compare.tradeoff_figure(counts_only).data[0].y) == [3.0]


# --- DAG -----------------------------------------------------------------------------------


def _segments(trace) -> int:
    return sum(v is None for v in trace.x)


def test_dag_figure_nodes_edges_and_critical_path():
    schedule = build_schedule("zb-h1", 2, 3)
    tl = simulate(schedule, COST)
    path = critical_path(schedule, tl, COST)
    graph = build_dag(schedule, COST)
    fig = charts_dag.dag_figure(graph, dag_positions(schedule, graph, tl), critical_path=path)
    by_name = {t.name: t for t in fig.data}
    nodes = [t for t in fig.data if t.name in KIND_TRACES]
    assert sum(len(t.x) for t in nodes) == schedule.num_actions
    data_edges = sum(kind == "data" for _, _, kind in graph.edges(data="kind"))
    order_edges = sum(kind == "order" for _, _, kind in graph.edges(data="kind"))
    assert _segments(by_name["data dependency"]) == data_edges
    assert _segments(by_name["order (same rank)"]) == order_edges
    assert by_name["data dependency"].line.dash != by_name["order (same rank)"].line.dash
    assert _segments(by_name["critical path"]) == len(path) - 1
    # x is the simulated start
    starts = {str(s.action): s.start for s in tl.spans}
    for trace in nodes:
        for x, label in zip(trace.x, trace.text, strict=True):
            assert x == pytest.approx(starts[label])


def test_dag_figure_highlights_a_deadlock_cycle_in_red():
    bad = make_schedule("bad", 2, 1, [0, 1], [[Action(0, F, 0), Action(0, B, 0)], [Action(1, B, 0), Action(1, F, 0)]])
    cycle = find_deadlock(bad)
    assert cycle
    graph = build_dag(bad, COST)
    fig = charts_dag.dag_figure(graph, dag_positions(bad, graph), cycle=cycle)
    by_name = {t.name: t for t in fig.data}
    assert by_name["deadlock cycle"].line.color == charts.CYCLE_COLOR
    assert _segments(by_name["deadlock cycle"]) == len(cycle)  # closed back to the start
    assert len(by_name["in deadlock cycle"].x) == len(cycle)
    assert "deadlock" in fig.layout.title.text


def test_dag_figure_without_cost_uses_topological_depth():
    schedule = build_schedule("gpipe", 2, 2)
    graph = build_dag(schedule)
    positions = dag_positions(schedule, graph)
    assert positions.x_title == "topological depth"
    fig = charts_dag.dag_figure(graph, positions)
    forward = next(t for t in fig.data if t.name == charts.KIND_NAMES["F"])
    depth = dict(zip(forward.text, forward.x, strict=True))
    assert depth["0F0"] == 0 and depth["1F0"] == 1 and depth["0F1"] == 1


def test_dag_figure_refuses_schedules_beyond_the_cap():
    big = build_schedule("1f1b", 4, charts_dag.MAX_DAG_ACTIONS // 8 + 1)
    assert big.num_actions > charts_dag.MAX_DAG_ACTIONS
    graph = build_dag(big)
    with pytest.raises(ValueError, match=f"at most {charts_dag.MAX_DAG_ACTIONS}"):
        charts_dag.dag_figure(graph, dag_positions(big, graph))


def test_attribution_figure_stacks_the_four_parts_per_rank():
    from pipesim.analysis.attribution import attribute_run

    schedule = build_schedule("1f1b", 2, 2)
    tl = simulate(schedule, COST)
    total = max(s.end for s in tl.spans) + 1.0
    analysis = attribute_run(schedule, Timeline(2, tl.spans, "measured"), [total])
    fig = charts.attribution_figure(analysis)
    assert [t.name for t in fig.data] == [name for _, name, _ in charts.ATTRIBUTION_PARTS]
    for rank in range(2):
        assert sum(t.x[rank] for t in fig.data) == pytest.approx(total)
    assert fig.layout.barmode == "stack"


def test_the_verification_figure_draws_both_intervals_and_greys_the_indistinguishable():
    from pipesim.charts.verify import GREY, MEASURED_COLOR, IntervalRow, intervals_figure

    rows = [
        IntervalRow("a", 10.0, 9.0, 11.5, 10.4, 10.1, 10.9, grey=True),
        IntervalRow("b", 12.0, 12.0, 12.0, 13.0, 12.5, 13.2),
        IntervalRow("c", 14.0, 13.0, 15.0),  # not measured: no measured marker
    ]
    predicted, measured = intervals_figure(rows).data
    assert list(predicted.x) == [10.0, 12.0, 14.0] and list(measured.x) == [10.4, 13.0]
    assert list(predicted.error_x.arrayminus) == [1.0, 0.0, 1.0] and list(predicted.error_x.array) == [1.5, 0.0, 1.0]
    assert list(measured.error_x.arrayminus) == pytest.approx([0.3, 0.5]) and list(measured.error_x.array) == (
        pytest.approx([0.5, 0.2])
    )
    assert list(measured.marker.color) == [GREY, MEASURED_COLOR]


def test_whatif_draws_the_slowed_step_under_the_uniform_one_with_each_actions_growth() -> None:
    """Issue 30: two lanes per rank (uniform light, slowed below it); a slowed bar's hover holds its uniform time
    and how much longer it took: rank 1 twice as slow grows by its own duration there, rank 0 not at all."""
    import numpy as np

    from pipesim.charts.overlay import whatif_figure
    from pipesim.cost.perturb import Perturbation
    from pipesim.sim.steps import simulate_step

    schedule = build_schedule("1f1b", 2, 4)
    cost = CostModel.uniform().for_pipeline(2, 2)
    uniform = simulate_step(schedule, cost)
    slowed = simulate_step(schedule, Perturbation(((1, 2.0),)).apply(cost, schedule.stage_to_rank))
    fig = whatif_figure(uniform.timeline, slowed.timeline, "rank 1 2x slower")
    assert list(fig.layout.yaxis.ticktext) == [
        "rank 0 · uniform",
        "rank 0 · slowed",
        "rank 1 · uniform",
        "rank 1 · slowed",
    ]
    title = fig.layout.title.text
    growth = format_percent(slowed.step_ms / uniform.step_ms - 1, signed=True)
    assert format_ms(slowed.step_ms) in title and format_ms(uniform.step_ms) in title and growth in title
    for trace in fig.data:
        rows = np.asarray(trace.y)
        assert set(rows % 2) == ({1} if trace.name.endswith("slowed") else {0})
        if trace.name.endswith("slowed"):
            cells = np.asarray(trace.customdata, dtype=float)
            uniform_ms, extra_ms = cells[:, 6], cells[:, 7]
            on_rank_1 = rows // 2 == 1
            assert np.allclose(extra_ms[on_rank_1], uniform_ms[on_rank_1]) and np.all(extra_ms[~on_rank_1] == 0)

"""Issue 33 items 7 and 8 in the figures: one quantity one figure ("where the step went" beside the measured
median), the legend off the axis title, no lost-time mark before 0 ms, the loss chart's whole steps, and the
trade-off chart on the log scales its page's switch asks for."""

from __future__ import annotations

from pipesim.analysis.attribution import LostTime
from pipesim.analysis.compare import compare_schedules
from pipesim.charts import attribution as charts_attribution
from pipesim.charts import compare as charts_compare
from pipesim.cost.model import CostModel

ANALYSIS = {
    "median_step": 1,
    "step_ms": 72.13,
    "ranks": [{"rank": 0, "compute_ms": 60.0, "schedule_idle_ms": 10.0, "comm_wait_ms": 1.0, "overhead_ms": 1.13}],
    "steps": [
        {"step": 0, "step_ms": 79.91, "ranks": [{"rank": 0, "compute_ms": 70.0, "schedule_idle_ms": 9.91,
                                                 "comm_wait_ms": 0.0, "overhead_ms": 0.0}]},
        {"step": 1, "step_ms": 72.13, "ranks": [{"rank": 0, "compute_ms": 60.0, "schedule_idle_ms": 10.0,
                                                 "comm_wait_ms": 1.0, "overhead_ms": 1.13}]},
    ],
}  # fmt: skip


def test_the_median_step_is_not_a_second_median() -> None:
    """Two steps (72.13, 79.91): the measured step time is their median, 76.02 ms; the attribution draws an actual
    step, the lower middle one, and must not call 72.13 ms "the median" beside 76.02 ms."""
    title = charts_attribution.attribution_figure(ANALYSIS, 1).layout.title.text
    assert "72.13 ms" in title and "the median step time 76.02 ms lies between them" in title
    assert "(step 1, the median)" not in title
    odd = {**ANALYSIS, "steps": [*ANALYSIS["steps"], {**ANALYSIS["steps"][1], "step": 2, "step_ms": 70.0}]}
    assert charts_attribution.attribution_figure(odd, 1).layout.title.text.endswith("(step 1, the median)")


def test_the_legend_is_off_the_time_axis() -> None:
    legend = charts_attribution.attribution_figure(ANALYSIS).layout.legend
    assert legend.x >= 1 and legend.y > 0  # beside the plot, not below it where "time (ms)" is


def test_no_lost_time_mark_starts_before_the_step() -> None:
    lost = [
        LostTime(0, "comm_wait", -0.4, 0.6),
        LostTime(0, "schedule_idle", -1.0, -0.2),
        LostTime(1, "overhead", 2, 3),
    ]
    bars = charts_attribution.lost_time_bars(lost, lambda rank: 2 * rank + 1)
    starts = [float(b) for trace in bars for b in trace.base]
    assert starts == [0.0, 2.0] and min(starts) >= 0


def test_the_loss_chart_counts_whole_steps() -> None:
    figure = charts_attribution.loss_figure({"pipesim executor": [2.5, 2.2, 2.0], "torch reference": []})
    assert [t.name for t in figure.data] == ["pipesim executor"] and list(figure.data[0].x) == [0, 1, 2]
    axis = figure.layout.xaxis
    assert axis.dtick == 1 and axis.tickformat == "d" and axis.range[1] < 3


def test_the_tradeoff_chart_follows_the_log_switch() -> None:
    rows = compare_schedules(["naive", "1f1b", "zb-h1"], 4, 8, CostModel.uniform(1.0, 2.0, 1.0))
    assert charts_compare.tradeoff_figure(rows).layout.xaxis.type in (None, "linear")
    logged = charts_compare.tradeoff_figure(rows, log_scale=True).layout
    assert logged.xaxis.type == "log" and logged.yaxis.type == "log" and "log scales" in logged.title.text


def test_dag_labels_of_close_nodes_do_not_sit_side_by_side() -> None:
    """Item 8: on 1F1B's last rank F and B run 1 ms apart and their labels ("3F0", "3B0") overlapped."""
    from pipesim.charts.dag import label_positions
    from pipesim.schedules import build_schedule
    from pipesim.semantics.dag import build_dag, dag_positions
    from pipesim.sim.simulate import simulate

    schedule = build_schedule("1f1b", 4, 8)
    timeline = simulate(schedule, CostModel.uniform(1.0, 2.0))
    positions = dag_positions(schedule, build_dag(schedule), timeline).xy
    placed = label_positions(positions)
    width = max(x for x, _ in positions.values()) - min(x for x, _ in positions.values())
    lanes: dict = {}
    for action, (x, y) in positions.items():
        lanes.setdefault(y, []).append((x, placed[action]))
    for lane in lanes.values():
        lane.sort()
        for (x0, p0), (x1, p1) in zip(lane, lane[1:], strict=False):
            assert x1 - x0 >= 0.04 * width or p0 != p1, (x0, x1, p0)
    assert "bottom center" in placed.values() and "top center" in placed.values()

"""pipesim.analysis.attribution on synthetic measured steps whose split is known by construction."""

from __future__ import annotations

import pytest

from pipesim.analysis.attribution import attribute_run, attribute_step
from pipesim.cost.model import CostModel
from pipesim.records import CommSpan, Span, Timeline
from pipesim.schedules import build_schedule
from pipesim.sim.simulate import simulate


def measured_from(timeline: Timeline, step: int = 0, shift: dict[int, float] | None = None) -> Timeline:
    """A simulated step relabelled as measured, each rank's spans optionally delayed by `shift[rank]` ms."""
    shift = shift or {}
    spans = tuple(
        Span(s.rank, s.action, s.start + shift.get(s.rank, 0.0), s.end + shift.get(s.rank, 0.0), step)
        for s in timeline.spans
    )
    return Timeline(timeline.num_ranks, spans, "measured", timeline.schedule_name)


def test_a_step_that_runs_as_simulated_is_compute_and_schedule_idle_only():
    schedule = build_schedule("1f1b", 4, 8)
    simulated = simulate(schedule, CostModel.uniform(1.0, 2.0))
    makespan = max(s.end for s in simulated.spans)
    result = attribute_step(schedule, measured_from(simulated), 0, makespan)
    assert result.replay_ms == pytest.approx(makespan)
    for share in result.ranks:
        assert share.compute_ms == pytest.approx(8 * 3.0)
        assert share.schedule_idle_ms == pytest.approx(makespan - 24.0)
        assert share.comm_wait_ms == 0 and share.overhead_ms == pytest.approx(0.0)


def hand_built_step(send_wait: bool = False) -> tuple:
    """gpipe, 2 ranks, 1 microbatch, F = 1 ms, B = 2 ms, measured with 0.5 ms transfers and a 1 ms optimizer:
    rank 0 F0 [0, 1], B0 [5, 7] (blocked in a receive [1, 5]); rank 1 F0 [1.5, 2.5] (blocked [1, 1.5]),
    B0 [2.5, 4.5]; the step ends at 8. The replay (free transfers) runs F0 [0, 1], F0 [1, 2], B0 [2, 4], B0 [4, 6].
    """
    schedule = build_schedule("gpipe", 2, 1)
    by_text = {str(a): a for row in schedule.actions for a in row}
    spans = (
        Span(0, by_text["0F0"], 0.0, 1.0),
        Span(0, by_text["0B0"], 5.0, 7.0),
        Span(1, by_text["1F0"], 1.5, 2.5),
        Span(1, by_text["1B0"], 2.5, 4.5),
    )
    comm = [CommSpan(0, "recv", 1, by_text["1B0"], 1.0, 5.0), CommSpan(1, "recv", 0, by_text["0F0"], 1.0, 1.5)]
    if send_wait:
        comm.append(CommSpan(1, "send", 0, by_text["1B0"], 4.5, 5.0))
    return schedule, Timeline(2, spans, "measured", comm=tuple(comm))


def test_transfers_and_the_optimizer_land_where_they_belong():
    schedule, measured = hand_built_step()
    result = attribute_step(schedule, measured, 0, 8.0)
    assert result.replay_ms == pytest.approx(6.0)
    rank0, rank1 = result.ranks
    # rank 0 waited 4 ms for rank 1's gradient: 3 ms the schedule imposes, 1 ms the two transfers added
    assert (rank0.compute_ms, rank0.schedule_idle_ms, rank0.comm_wait_ms, rank0.overhead_ms) == pytest.approx(
        (3.0, 3.0, 1.0, 1.0)
    )
    # rank 1 waited 1.5 ms for its input: 1 ms the schedule imposes (rank 0's F), 0.5 ms the transfer
    assert (rank1.compute_ms, rank1.schedule_idle_ms, rank1.comm_wait_ms, rank1.overhead_ms) == pytest.approx(
        (3.0, 3.0, 0.5, 1.5)
    )
    for share in result.ranks:
        parts = share.compute_ms + share.schedule_idle_ms + share.comm_wait_ms + share.overhead_ms
        assert parts == pytest.approx(8.0)  # the four parts add up exactly
    marks = [(m.part, round(m.start, 9), round(m.end, 9)) for m in result.lost if m.rank == 0]
    assert marks == [("schedule_idle", 1.0, 4.0), ("comm_wait", 4.0, 5.0), ("overhead", 7.0, 8.0)]


def test_a_wait_for_a_send_after_the_last_action_is_communication():
    schedule, measured = hand_built_step(send_wait=True)
    rank1 = attribute_step(schedule, measured, 0, 8.0).ranks[1]
    assert (rank1.schedule_idle_ms, rank1.comm_wait_ms, rank1.overhead_ms) == pytest.approx((3.0, 1.0, 1.0))


def test_a_wait_the_schedule_imposes_is_not_communication():
    schedule = build_schedule("gpipe", 2, 2)
    simulated = simulate(schedule, CostModel.uniform(1.0, 2.0))
    makespan = max(s.end for s in simulated.spans)
    measured = measured_from(simulated)
    # rank 1 is blocked 0.5 ms in a receive while rank 0's first F still runs: the replay waits there too
    first = next(s for s in measured.spans if s.rank == 1)
    measured = Timeline(2, measured.spans, "measured", comm=(CommSpan(1, "recv", 0, first.action, 0.5, 1.0, 0),))
    result = attribute_step(schedule, measured, 0, makespan + 4.0)
    for share in result.ranks:
        assert share.comm_wait_ms == 0
        assert share.overhead_ms == pytest.approx(4.0)


def test_a_slow_action_is_compute_not_idle_and_the_run_summary_is_the_median_step():
    schedule = build_schedule("1f1b", 2, 2)
    simulated = simulate(schedule, CostModel.uniform(1.0, 2.0))
    makespan = max(s.end for s in simulated.spans)
    steps = [measured_from(simulated, step) for step in range(3)]
    spans = tuple(span for tl in steps for span in tl.spans)
    measured = Timeline(2, spans, "measured")
    doc = attribute_run(schedule, measured, [makespan + 1.0, makespan + 3.0, makespan + 2.0])
    assert doc["step_ms"] == pytest.approx(makespan + 2.0) and doc["median_step"] == 2
    assert len(doc["steps"]) == 3
    for row in doc["ranks"]:
        total = row["compute_ms"] + row["schedule_idle_ms"] + row["comm_wait_ms"] + row["overhead_ms"]
        assert total == pytest.approx(doc["step_ms"])
    with pytest.raises(ValueError, match="no span for"):
        attribute_step(build_schedule("gpipe", 2, 3), measured, 0, makespan)


def test_spread_says_when_a_run_is_too_noisy_to_judge():
    from pipesim.analysis.attribution import NOISY_STEP_CV, spread

    schedule = build_schedule("gpipe", 2, 2)
    simulated = simulate(schedule, CostModel.uniform(1.0, 2.0))
    steady = Timeline(2, tuple(s._replace(step=k) for k in range(3) for s in simulated.spans), "measured")
    calm = spread(steady, [10.0, 10.1, 9.9])
    assert calm["reliable"] and calm["step_cv"] < NOISY_STEP_CV and calm["action_cv_median"] == 0.0
    noisy = spread(steady, [10.0, 14.0, 7.0])
    assert not noisy["reliable"] and noisy["step_cv"] == pytest.approx(0.2775, abs=1e-3)  # pstdev 2.867 / mean 10.33
    assert attribute_run(schedule, steady, [10.0, 14.0, 7.0])["spread"]["reliable"] is False


def test_the_overlay_marks_each_lost_interval_under_its_measured_lane():
    from pipesim.charts.attribution import MARK_OFFSET, overlay_with_lost_time

    schedule, measured = hand_built_step()
    lost = attribute_step(schedule, measured, 0, 8.0).lost
    simulated = simulate(schedule, CostModel.uniform(1.0, 2.0))
    figure = overlay_with_lost_time(simulated, measured, lost)
    comm = next(t for t in figure.data if t.name == "lost: communication wait")
    # rank 0's 1 ms at [4, 5] and rank 1's 0.5 ms at [1, 1.5], under rows 1 and 3 (measured lanes)
    marks = sorted(tuple(round(v, 9) for v in mark) for mark in zip(comm.y, comm.base, comm.x, strict=True))
    assert marks == [(1 + MARK_OFFSET, 4.0, 1.0), (3 + MARK_OFFSET, 1.0, 0.5)]

"""pipesim.attribution on synthetic measured steps whose split is known by construction."""

from __future__ import annotations

import pytest

from pipesim.attribution import attribute_run, attribute_step
from pipesim.cost import CostModel
from pipesim.schedules import build_schedule
from pipesim.simulate import simulate
from pipesim.timeline import CommSpan, Span, Timeline


def measured_from(timeline: Timeline, step: int = 0, shift: dict[int, float] | None = None) -> Timeline:
    """A simulated step relabelled as measured, each rank's spans optionally delayed by `shift[rank]` ms."""
    shift = shift or {}
    spans = tuple(Span(s.rank, s.action, s.start + shift.get(s.rank, 0.0), s.end + shift.get(s.rank, 0.0), step)
                  for s in timeline.spans)
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


def test_optimizer_time_and_waits_land_where_they_belong():
    schedule = build_schedule("gpipe", 2, 2)
    simulated = simulate(schedule, CostModel.uniform(1.0, 2.0))
    makespan = max(s.end for s in simulated.spans)
    measured = measured_from(simulated)
    # rank 1 waited 0.5 ms in a receive that the replay (free transfers) does not expect
    first = next(s for s in measured.spans if s.rank == 1)
    measured = Timeline(2, measured.spans, "measured", comm=(CommSpan(1, "recv", 0, first.action, 0.5, 1.0, 0),))
    step_ms = makespan + 4.0  # an optimizer step and launch gaps after the last action
    result = attribute_step(schedule, measured, 0, step_ms)
    by_rank = {s.rank: s for s in result.ranks}
    assert by_rank[1].comm_wait_ms == pytest.approx(0.5)
    assert by_rank[0].comm_wait_ms == 0
    for share in result.ranks:
        parts = share.compute_ms + share.schedule_idle_ms + share.comm_wait_ms + share.overhead_ms
        assert parts == pytest.approx(step_ms)  # the four parts add up exactly
        assert min(share.compute_ms, share.schedule_idle_ms, share.comm_wait_ms, share.overhead_ms) >= 0
    assert by_rank[0].overhead_ms == pytest.approx(4.0)
    assert by_rank[1].overhead_ms == pytest.approx(4.0 - 0.5)


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
    from pipesim.attribution import NOISY_STEP_CV, spread

    schedule = build_schedule("gpipe", 2, 2)
    simulated = simulate(schedule, CostModel.uniform(1.0, 2.0))
    steady = Timeline(2, tuple(s._replace(step=k) for k in range(3) for s in simulated.spans), "measured")
    calm = spread(steady, [10.0, 10.1, 9.9])
    assert calm["reliable"] and calm["step_cv"] < NOISY_STEP_CV and calm["action_cv_median"] == 0.0
    noisy = spread(steady, [10.0, 14.0, 7.0])
    assert not noisy["reliable"] and noisy["step_cv"] == pytest.approx(0.2775, abs=1e-3)  # pstdev 2.867 / mean 10.33
    assert attribute_run(schedule, steady, [10.0, 14.0, 7.0])["spread"]["reliable"] is False

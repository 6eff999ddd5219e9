"""Several steps in a row, the step-time definition, and the dispatch gap before each action."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cost.model import CostModel, DataParallelGroup, RankRuntime
from pipesim.io.cost_file import cost_from_dict, cost_to_dict
from pipesim.ir import Action, make_schedule
from pipesim.schedules import build_schedule
from pipesim.sim.metrics import makespan
from pipesim.sim.simulate import simulate
from pipesim.sim.steps import rank_ends, simulate_steps, step_time_ms


def with_extras(cost: CostModel, overhead: float = 0.0, dispatch: float = 0.0) -> CostModel:
    return replace(cost, runtime=RankRuntime((overhead,), (dispatch,)))


def test_dispatch_gap_is_paid_before_each_action_and_hides_under_a_wait():
    # 2 ranks, one microbatch: rank 0 F0 [g, g+f]; rank 1 F0 waits for it: [g+f, g+2f] (its own gap hides
    # under the wait); rank 1 B0 [2g+2f, 2g+2f+b]; rank 0 B0 waits for it: ends 2g+2f+2b.
    f, b, g = 1.0, 2.0, 0.25
    schedule = make_schedule(
        "pair", 2, 1, [0, 1], [[Action.parse(t) for t in row] for row in (["0F0", "0B0"], ["1F0", "1B0"])]
    )
    timeline = simulate(schedule, with_extras(CostModel.uniform(f, b), dispatch=g))
    assert step_time_ms(rank_ends(timeline), (0.0, 0.0)) == pytest.approx(2 * f + 2 * b + 2 * g)
    folded = simulate(schedule, CostModel.uniform(f + g, b + g))  # the gap as part of every action: paid 4 times
    assert step_time_ms(rank_ends(folded), (0.0, 0.0)) == pytest.approx(2 * f + 2 * b + 4 * g)


def test_dispatch_gap_on_one_rank_adds_up_over_its_actions():
    schedule = build_schedule("gpipe", 1, 6)
    gap = 0.1
    timeline = simulate(schedule, with_extras(CostModel.uniform(1.0, 2.0), dispatch=gap))
    assert step_time_ms(rank_ends(timeline), (0.0,)) == pytest.approx(6 * 3.0 + 12 * gap)
    assert makespan(timeline) == pytest.approx(6 * 3.0 + 11 * gap)  # the chart's makespan starts at the first bar


def test_dispatch_gap_per_rank_must_match_the_ranks():
    schedule = build_schedule("1f1b", 2, 4)
    cost = replace(CostModel.uniform(), runtime=RankRuntime(dispatch_ms=(0.1, 0.2, 0.3)))
    with pytest.raises(ValueError, match="dispatch_ms has 3 values for 2 ranks"):
        simulate(schedule, cost)
    with pytest.raises(ValueError, match="dispatch_ms must hold finite numbers"):
        replace(CostModel.uniform(), runtime=RankRuntime(dispatch_ms=(-1.0,)))


def test_cost_file_keeps_the_dispatch_gap_and_refuses_a_wrong_type():
    cost = replace(CostModel.uniform(), runtime=RankRuntime(dispatch_ms=(0.1, 0.2)))
    assert cost_from_dict(cost_to_dict(cost)).dispatch_ms == (0.1, 0.2)
    data = cost_to_dict(cost)
    data["dispatch_ms"] = "fast"
    with pytest.raises(ValueError, match="dispatch_ms must be a list"):
        cost_from_dict(data)
    del data["dispatch_ms"]  # files written before it was measured: no gap
    assert cost_from_dict(data).dispatch_ms == ()


def test_step_time_is_the_makespan_plus_the_last_ranks_overhead():
    ranks, micro, f, b = 4, 8, 1.0, 2.0
    cost = replace(CostModel.uniform(f, b), runtime=RankRuntime((0.5, 0.5, 0.5, 3.0)))
    timeline = simulate(build_schedule("1f1b", ranks, micro), cost)
    # 1F1B: (m + p - 1)(f + b); rank 0 ends last, rank 3 ends 3(f+b)... earlier but pays a longer overhead.
    assert makespan(timeline) == pytest.approx((micro + ranks - 1) * (f + b))
    assert step_time_ms(rank_ends(timeline), cost.overhead_ms(ranks)) == pytest.approx(
        (micro + ranks - 1) * (f + b) + 0.5
    )
    late = replace(cost, runtime=RankRuntime((0.5, 0.5, 0.5, 20.0)))
    # rank 3's last action ends at (m + p - 1)(f + b) - 3(f + b) ... + its 20 ms overhead decides
    rank3_end = max(s.end for s in timeline.spans if s.rank == 3)
    assert step_time_ms(rank_ends(timeline), late.overhead_ms(ranks)) == pytest.approx(rank3_end + 20.0)


@pytest.mark.parametrize("name", ["1f1b", "gpipe", "zb-h1", "zb-h2", "zbv", "interleaved-1f1b"])
def test_with_a_barrier_every_step_takes_one_steps_time(name):
    schedule = build_schedule(name, 4, 8)
    cost = with_extras(CostModel.uniform(1.0, 2.0, 1.0 if schedule.uses_split_backward else None), 0.5, 0.05)
    one = simulate(schedule, cost)
    period = step_time_ms(rank_ends(one), cost.overhead_ms(4))
    steps = simulate_steps(schedule, cost, 3, barrier=True)
    assert steps.meta["step_times_ms"] == pytest.approx([period] * 3)
    assert steps.meta["total_ms"] == pytest.approx(3 * period)
    assert len(steps.spans) == 3 * len(one.spans) and {s.step for s in steps.spans} == {0, 1, 2}


def test_without_a_barrier_zb_h2_gains_across_steps_and_1f1b_does_not():
    cost = with_extras(CostModel.uniform(1.0, 2.0, 1.0), overhead=0.5)
    h2 = simulate_steps(build_schedule("zb-h2", 4, 8), cost, 4, barrier=False).meta["step_times_ms"]
    h2_alone = simulate_steps(build_schedule("zb-h2", 4, 8), cost, 4, barrier=True).meta["step_times_ms"]
    assert h2[0] == pytest.approx(h2_alone[0])
    assert all(t < h2_alone[0] - 1.0 for t in h2[1:])  # the next step's warm-up fills this step's tail
    plain = with_extras(CostModel.uniform(1.0, 2.0), overhead=0.5)
    one_f = simulate_steps(build_schedule("1f1b", 4, 8), plain, 4, barrier=False).meta["step_times_ms"]
    assert one_f == pytest.approx([(8 + 3) * 3.0 + 0.5] * 4)  # rank 0 starts first and ends last: no overlap


def test_without_a_barrier_each_rank_waits_for_its_own_optimizer():
    cost = with_extras(CostModel.uniform(1.0, 2.0, 1.0), overhead=0.7)
    steps = simulate_steps(build_schedule("zb-h2", 3, 6), cost, 3, barrier=False)
    for rank in range(3):
        spans = sorted((s for s in steps.spans if s.rank == rank), key=lambda s: s.start)
        assert all(a.end <= b.start + 1e-9 for a, b in zip(spans, spans[1:], strict=False))
        for step in (1, 2):
            last = max(s.end for s in spans if s.step == step - 1)
            first = min(s.start for s in spans if s.step == step)
            assert first >= last + 0.7 - 1e-9


@pytest.mark.parametrize("steps", [0, -1, 1.5, True, 10**6])
def test_number_of_steps_is_checked(steps):
    with pytest.raises(ValueError, match="number of steps"):
        simulate_steps(build_schedule("1f1b", 2, 2), CostModel.uniform(), steps)


def test_cost_file_keeps_the_data_parallel_group_and_the_overlap_factor():
    from pipesim.cost.model import LinkCost

    group = DataParallelGroup(4, LinkCost(latency_ms=0.2), sharded=True, bucket_bytes=1e6)
    cost = replace(CostModel.uniform(), dp_group=group, overlap_factor=0.7)
    back = cost_from_dict(cost_to_dict(cost))
    assert (back.dp_group, back.overlap_factor) == (group, 0.7)  # torch's collectives priced from the same group
    data = cost_to_dict(cost)
    data["sharded"] = "yes"
    with pytest.raises(ValueError, match="sharded must be true or false"):
        cost_from_dict(data)

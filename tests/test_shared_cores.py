"""Ranks sharing cores: processor sharing in the simulation, and its inverse for measured spans."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cost.model import CostModel, RankRuntime
from pipesim.io.cost_file import cost_from_dict, cost_to_dict
from pipesim.schedules import build_schedule
from pipesim.semantics.dag import dependencies
from pipesim.sim.shared_cores import sweep_shared, work_of_spans
from pipesim.sim.simulate import engine_inputs, simulate, sweep
from tests.helpers.sizes import build_checked as buildable


@pytest.mark.parametrize(
    "name", ["gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipev", "looped-bfs", "naive"]
)
def test_with_a_core_per_rank_it_is_the_plain_sweep(name):
    schedule = buildable(name, 4, 8)
    cost = replace(
        CostModel.uniform(1.3, 2.1, 0.9 if schedule.uses_split_backward else None, comm_ms=0.2),
        runtime=RankRuntime(dispatch_ms=(0.05,)),
    )
    deps = dependencies(schedule)
    durations, hops, gaps, _, _ = engine_inputs(schedule, cost, deps)
    plain = sweep(deps, durations, hops, gaps)
    shared = sweep_shared(deps, durations, hops, gaps, slots=4)
    assert shared[0] == pytest.approx(plain[0]) and shared[1] == pytest.approx(plain[1]) and not shared[2]


def test_one_core_for_two_ranks_halves_the_speed_of_overlapping_actions():
    # gpipe, 2 ranks, 2 microbatches, F = 1, B = 2, one core: rank 0's F1 and rank 1's F0 share [1, 3];
    # rank 1's F1 runs alone [3, 4], B0 alone [4, 6]; rank 0's B0 and rank 1's B1 share [6, 10]; B1 [10, 12].
    schedule = build_schedule("gpipe", 2, 2)
    timeline = simulate(schedule, replace(CostModel.uniform(1.0, 2.0), runtime=RankRuntime(shared_cores=1)))
    spans = {(s.rank, str(s.action)): (s.start, s.end) for s in timeline.spans}
    assert spans[(0, "0F1")] == pytest.approx((1.0, 3.0)) and spans[(1, "1F0")] == pytest.approx((1.0, 3.0))
    assert spans[(1, "1F1")] == pytest.approx((3.0, 4.0)) and spans[(1, "1B0")] == pytest.approx((4.0, 6.0))
    assert spans[(0, "0B0")] == pytest.approx((6.0, 10.0)) and spans[(1, "1B1")] == pytest.approx((6.0, 10.0))
    assert spans[(0, "0B1")] == pytest.approx((10.0, 12.0))
    # with its own core each rank runs as the plain simulation says
    assert simulate(schedule, replace(CostModel.uniform(1.0, 2.0), runtime=RankRuntime(shared_cores=2))) == simulate(
        schedule, CostModel.uniform(1.0, 2.0)
    )


def test_work_of_spans_integrates_the_rate():
    assert work_of_spans([(0.0, 2.0), (1.0, 3.0)], slots=1) == pytest.approx([1.5, 1.5])
    assert work_of_spans([(0.0, 2.0), (1.0, 3.0)], slots=2) == pytest.approx([2.0, 2.0])
    assert work_of_spans([(0.0, 4.0), (1.0, 2.0), (1.0, 2.0)], slots=2) == pytest.approx([3 + 2 / 3, 2 / 3, 2 / 3])


@pytest.mark.parametrize("name", ["1f1b", "zbv", "interleaved-1f1b"])
def test_work_of_spans_inverts_the_shared_simulation(name):
    schedule = buildable(name, 4, 8)
    cost = replace(
        CostModel.uniform(1.0, 2.5, 1.0 if schedule.uses_split_backward else None), runtime=RankRuntime(shared_cores=2)
    )
    timeline = simulate(schedule, cost)
    work = work_of_spans([(s.start, s.end) for s in timeline.spans], slots=2)
    expected = [cost.duration_ms(s.action.stage, s.action.kind) for s in timeline.spans]
    assert work == pytest.approx(expected)


def test_shared_cores_is_checked_and_kept_in_the_cost_file():
    cost = replace(CostModel.uniform(), runtime=RankRuntime(shared_cores=2))
    assert cost_from_dict(cost_to_dict(cost)).shared_cores == 2
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="shared_cores must be a positive integer"):
            replace(CostModel.uniform(), runtime=RankRuntime(shared_cores=bad))
    data = cost_to_dict(cost)
    data["shared_cores"] = "two"
    with pytest.raises(ValueError, match="shared_cores must be a positive integer or null"):
        cost_from_dict(data)

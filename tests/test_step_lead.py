"""Why a step's lead before its first action is priced in every rank's tail (pipesim_executor.rank.calibrate's
`priced_tails`): every rank starting L later gives the same step as every rank's tail L longer."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipesim.cost.model import CostModel, RankRuntime
from pipesim.schedules import build_schedule
from pipesim.semantics.dag import dependencies
from pipesim.sim.simulate import engine_inputs, run_engine
from pipesim.sim.steps import simulate_step


@pytest.mark.parametrize("name", ["1f1b", "gpipe", "zb-h1", "interleaved-1f1b"])
def test_a_later_start_on_every_rank_is_a_longer_tail_on_every_rank(name: str) -> None:
    schedule = build_schedule(name, num_ranks=2, num_microbatches=4)
    cost = CostModel.per_stage(
        forward_ms=[1.0 + 0.3 * s for s in range(schedule.num_stages)],
        backward_ms=[2.0 + 0.1 * s for s in range(schedule.num_stages)],
        comm_ms=0.1,
    )
    cost = replace(cost, runtime=RankRuntime(step_overhead_ms=(0.4, 0.6), dispatch_ms=(0.05,)))
    lead = 0.25
    deps = dependencies(schedule)
    inputs = engine_inputs(schedule, cost, deps)
    _, ends, _ = run_engine(deps, inputs.durations, inputs.hops, inputs.gaps, None, rank_start=[lead, lead])
    rank_end = [max(e for e, r in zip(ends, deps.ranks, strict=True) if r == rank) for rank in range(2)]
    shifted = max(end + tail for end, tail in zip(rank_end, (0.4, 0.6), strict=True))
    longer = replace(cost, runtime=RankRuntime(step_overhead_ms=(0.4 + lead, 0.6 + lead), dispatch_ms=(0.05,)))
    assert simulate_step(schedule, longer).step_ms == pytest.approx(shifted)
    assert simulate_step(schedule, longer).step_ms == pytest.approx(simulate_step(schedule, cost).step_ms + lead)

"""DualPipe: two pipelines in opposite directions over the same ranks (Schedule.pipelines), checked against
DeepSeek's README table (pipesim.schedules.published_dualpipe)."""

from __future__ import annotations

import pytest

from pipesim.cost.model import CostModel
from pipesim.cost.stage import StageCost
from pipesim.ir import Action, F, Overlap
from pipesim.schedules import build_schedule
from pipesim.schedules.published_dualpipe import DUALPIPE_TABLE, PIPESIM_NAME
from pipesim.semantics.lower import comm_plan, needed_message, producers_of
from pipesim.semantics.validate import validate
from pipesim.sim.memory import static_bytes
from pipesim.sim.metrics import compute_metrics
from pipesim.sim.simulate import simulate

ROW = {row.method: row for row in DUALPIPE_TABLE}


def _cost(f: float, b: float, w: float, overlap: float = 1.0, params: float = 0.0, stages: int = 1) -> CostModel:
    """Every stage alike; `stages` of them given one by one (so that a V's chunks are whole stages, not halves
    of a rank's share: the table counts PP stages of equal size)."""
    stage = StageCost(f, b, weight_ms=w, activation_bytes=1.0, param_bytes=params)
    return CostModel(stages=(stage,) * stages, overlap_factor=overlap)


def _built(method: str, pp: int, microbatches: int):
    """Each method at PP stages: DualPipe's directions each hold PP stages on PP ranks; DualPipeV's V holds PP
    stages on PP/2 ranks; DualPipe's count is both directions' microbatches."""
    name = PIPESIM_NAME[method]
    ranks = ROW[method].devices(pp)
    return build_schedule(name, ranks, microbatches if name == "dualpipe" else microbatches // 2)


def test_a_microbatch_runs_its_own_directions_stages_only() -> None:
    schedule = build_schedule("dualpipe", 4, 8)
    assert schedule.pipelines == 2 and schedule.pipeline_stages == 4 and schedule.num_microbatches == 4
    assert schedule.stage_to_rank == (0, 1, 2, 3, 3, 2, 1, 0)
    assert needed_message(Action(4, F, 0), 8, 4) is None  # the reverse direction's first stage reads its input
    assert producers_of(Action(5, F, 0), 8, pipeline_stages=4) == [(Action(4, F, 0),)]
    plan = comm_plan(schedule)
    assert (3, 3) not in plan.links and all(src != dst for src, dst in plan.links)  # nothing crosses from 3 to 4
    assert len(plan.links[(0, 1)]) == 4 + 4  # activations of direction 0, gradients of direction 1
    validate(schedule)


def test_its_pairs_are_cells_of_its_order_and_a_schedule_without_one_keeps_no_order() -> None:
    """The builder makes each rank's cells and its actions together: every F&B pair one Overlap cell of the order,
    in DeepSeek's places (rank p-1's first main step F0 B1 alone, then (F1 B0)); without a pair (DualPipeV on one
    rank, one microbatch) the schedule is its action lists alone."""
    dual = build_schedule("dualpipe", 4, 8)
    assert dual.order is not None and dual.params == {"microbatches_both_directions": 8}
    cells = [str(e) for e in dual.order[1]]  # rank 1: p/2 - 1 = 1 of its half, the first main step not overlapped
    assert cells[cells.index("1F2") + 1 : cells.index("1F2") + 3] == ["6B0", "(6F2;1B0)OVERLAP_F_B"]
    assert sum(isinstance(e, Overlap) for row in dual.order for e in row) > 0
    assert build_schedule("dualpipev", 1, 1).order is None
    assert build_schedule("dualpipev", 1, 2).order is not None


@pytest.mark.parametrize("pp", [4, 8])
@pytest.mark.parametrize(("f", "b", "w", "overlap"), [(1.0, 2.0, 1.0, 1.0), (1.0, 1.5, 0.5, 1.0), (1.0, 2.0, 1.0, 0.8)])
@pytest.mark.parametrize("method", ["DualPipe", "DualPipeV"])
def test_the_per_device_bubble_is_the_tables_where_its_chunks_are_even(method, pp, f, b, w, overlap) -> None:
    """The table's (PP/2-1)(F&B+B-3W), F&B the overlapped pair's time, holds to the last digit where the backward's
    input part equals the forward (I = B - W = F, the chunks of DeepSeek's figure); DualPipe on PP ranks and
    DualPipeV on PP/2 idle alike."""
    schedule = _built(method, pp, 4 * pp)
    cost = _cost(f, b, w, overlap, stages=schedule.num_stages).for_schedule(schedule)
    metrics = compute_metrics(simulate(schedule, cost), cost)
    idle = [metrics.makespan - r.busy_ms for r in metrics.ranks]
    expected = ROW[method].bubble(pp, f, b, w, overlap * (f + b))
    assert max(idle) == pytest.approx(expected, abs=1e-9)  # the busiest devices; pairs let the end ranks idle less
    if overlap == 1.0:
        assert idle == pytest.approx([expected] * len(idle), abs=1e-9)


def test_where_the_chunks_are_uneven_the_table_is_only_an_estimate() -> None:
    """B - W above F: less idle than the formula; below it: more (it assumes I = F)."""
    schedule = _built("DualPipe", 8, 32)
    for (f, b, w), sign in (((1.0, 3.0, 1.0), -1), ((2.0, 2.0, 1.0), +1)):
        cost = _cost(f, b, w).for_schedule(schedule)
        metrics = compute_metrics(simulate(schedule, cost), cost)
        idle = max(metrics.makespan - r.busy_ms for r in metrics.ranks)
        formula = ROW["DualPipe"].bubble(8, f, b, w, f + b)
        assert (idle - formula) * sign > 0


@pytest.mark.parametrize("pp", [4, 8])
@pytest.mark.parametrize("method", ["DualPipe", "DualPipeV"])
def test_activations_and_parameters_per_device_are_the_tables(method, pp) -> None:
    """PP + 1 stages' activations per device at the fullest; DualPipe's two weight copies (2x 1F1B's parameters
    per device, each stage a whole 1/PP of the model)."""
    schedule = _built(method, pp, 4 * pp)
    cost = _cost(1.0, 2.0, 1.0, params=10.0, stages=schedule.num_stages).for_schedule(schedule)
    metrics = compute_metrics(simulate(schedule, cost), cost)
    assert max(r.peak_activations for r in metrics.ranks) == ROW[method].activations(pp)
    if method == "DualPipe":
        one = build_schedule("1f1b", pp, 4 * pp)
        params = [p for p, _, _ in static_bytes(schedule, cost)]
        assert params == [ROW[method].parameters_x * p for p, _, _ in static_bytes(one, _cost(1, 2, 1, params=10.0))]


def test_the_1f1b_and_zb1p_rows_hold_too() -> None:
    pp = 4
    for method in ("1F1B", "ZB1P"):
        schedule = build_schedule(PIPESIM_NAME[method], pp, 4 * pp)
        cost = _cost(1.0, 2.0, 1.0)
        metrics = compute_metrics(simulate(schedule, cost), cost)
        assert max(metrics.makespan - r.busy_ms for r in metrics.ranks) == ROW[method].bubble(pp, 1.0, 2.0, 1.0, 3.0)
        assert max(r.peak_activations for r in metrics.ranks) == ROW[method].activations(pp)


@pytest.mark.parametrize(("ranks", "microbatches"), [(3, 8), (4, 6), (4, 9)])
def test_sizes_it_cannot_run_are_refused_by_name(ranks, microbatches) -> None:
    with pytest.raises(ValueError, match="dualpipe needs"):
        build_schedule("dualpipe", ranks, microbatches)

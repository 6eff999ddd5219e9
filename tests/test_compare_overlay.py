"""compare_schedules rows and the simulated-vs-measured alignment."""

from __future__ import annotations

import pytest

from pipesim.analysis.compare import ComparisonRow, compare_schedules, format_table
from pipesim.analysis.overlay import ActionDiff, align, pick_step, prediction_error
from pipesim.cost.model import CostModel
from pipesim.ir import Action, B, F
from pipesim.records import Span, Timeline
from pipesim.schedules import build_schedule
from pipesim.sim.metrics import compute_metrics
from pipesim.sim.simulate import simulate

COST = CostModel.uniform(forward_ms=1.0, backward_ms=2.0, weight_ms=1.0, comm_ms=0.25)


def test_rows_match_a_direct_simulation():
    rows = compare_schedules(["1f1b", "gpipe", "zb-h1"], 4, 8, COST)
    assert [row.schedule for row in rows] == ["1f1b", "gpipe", "zb-h1"]
    for row in rows:
        assert row.error is None
        metrics = compute_metrics(simulate(build_schedule(row.schedule, 4, 8), COST), COST)
        assert row.makespan == pytest.approx(metrics.makespan)
        assert row.bubble_fraction == pytest.approx(metrics.bubble_fraction)
        assert row.bubble_ratio == pytest.approx(metrics.bubble_ratio)
        assert row.peak_activations == max(r.peak_activations for r in metrics.ranks)
        assert row.peak_activation_bytes == pytest.approx(max(r.peak_activation_bytes for r in metrics.ranks))
    gpipe = rows[1]
    assert gpipe.peak_activations == 8  # GPipe stashes every microbatch on rank 0
    assert rows[0].peak_activations < gpipe.peak_activations


def test_a_schedule_whose_constraints_fail_gets_an_error_row_not_an_exception():
    rows = compare_schedules(["1f1b", "interleaved-1f1b", "dualpipev"], 4, 9, COST, num_virtual_stages=2)
    assert rows[0].error is None and rows[0].makespan > 0
    assert rows[1].error is not None and "multiple" in rows[1].error  # 9 microbatches in 2 rounds: torch refuses too
    assert rows[1].makespan is None
    assert rows[2].error is None  # a failed row leaves the others alone
    table = format_table(rows)
    assert "interleaved-1f1b" in table and "error" in table and "1f1b" in table


def test_virtual_stages_go_only_to_families_that_take_them():
    rows = compare_schedules(["1f1b", "interleaved-1f1b"], 2, 4, COST, num_virtual_stages=3)
    assert all(row.error is None for row in rows), rows
    # The comparison cuts the one-stage-per-rank costs into 3 chunks per rank.
    direct = simulate(build_schedule("interleaved-1f1b", 2, 4, num_virtual_stages=3), COST.for_stages(6, 2))
    assert rows[1].makespan == pytest.approx(compute_metrics(direct).makespan)


def test_a_cost_model_of_the_wrong_size_is_an_error_row():
    three_stages = CostModel.per_stage([1, 1, 1], [2, 2, 2])
    [row] = compare_schedules(["1f1b"], 2, 2, three_stages)
    assert row.error is not None and "stages" in row.error
    assert ComparisonRow("x", error="e").to_dict()["error"] == "e"


# --- overlay ---------------------------------------------------------------------------


def _simulated() -> Timeline:
    spans = (
        Span(0, Action(0, F, 0), 0.0, 1.0),
        Span(1, Action(1, F, 0), 1.0, 2.0),
        Span(1, Action(1, B, 0), 2.0, 4.0),
        Span(0, Action(0, B, 0), 4.0, 6.0),
    )
    return Timeline(num_ranks=2, spans=spans, source="simulated", schedule_name="hand")


def _measured() -> Timeline:
    """Two steps; step 1 starts at 100 ms and is slower; it lacks 0B0 (say, the run was cut)."""
    step0 = [Span(s.rank, s.action, s.start + 10, s.end + 10, 0) for s in _simulated().spans]
    step1 = [
        Span(0, Action(0, F, 0), 100.0, 101.5, 1),
        Span(1, Action(1, F, 0), 102.0, 103.0, 1),
        Span(1, Action(1, B, 0), 103.0, 104.5, 1),
    ]
    return Timeline(num_ranks=2, spans=tuple(step0 + step1), source="measured")


def test_align_pairs_by_rank_and_action_within_one_step():
    diffs = align(_simulated(), _measured(), step=1)
    assert [(d.rank, str(d.action)) for d in diffs] == [(0, "0F0"), (1, "1F0"), (1, "1B0")]
    first, _, last = diffs
    assert first == ActionDiff(0, Action(0, F, 0), 1.0, 1.5, 0.5, simulated_start=0.0, measured_start=0.0)
    assert last.measured_start == pytest.approx(3.0)  # shifted to the step's own start
    assert last.delta_ms == pytest.approx(-0.5)
    assert last.error == pytest.approx(prediction_error(2.0, 1.5))


def test_align_defaults_to_the_last_step_and_refuses_unknown_steps():
    assert len(align(_simulated(), _measured())) == 3
    step0 = align(_simulated(), _measured(), step=0)
    assert len(step0) == 4 and all(d.delta_ms == pytest.approx(0.0) for d in step0)
    with pytest.raises(ValueError, match="step 7.*0, 1"):
        align(_simulated(), _measured(), step=7)
    assert pick_step(_measured(), None).meta["step"] == 1


def test_prediction_error_sign_and_guard():
    assert prediction_error(90.0, 100.0) == pytest.approx(-0.1)
    assert prediction_error(110.0, 100.0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="> 0"):
        prediction_error(1.0, 0.0)


def test_memory_is_printed_in_binary_units():
    """One unit system: a stash count is not printed where bytes are meant, and bytes are KiB/MiB."""
    from pipesim.analysis.compare import ComparisonRow, format_table
    from pipesim.units import format_bytes

    assert [format_bytes(v) for v in (512, 1536, 3 * 2**20, 2**40)] == ["512 B", "1.50 KiB", "3.00 MiB", "1.00 TiB"]
    table = format_table([ComparisonRow("1f1b", 10.0, 0.1, 0.2, 4, 4 * 2**20)])
    assert "peak memory" in table.splitlines()[0] and "4.00 MiB" in table and " 4 " in table


def test_pareto_front_keeps_only_the_undominated():
    """Issue 13 item 13: the trade-off chart's front line."""
    from pipesim.analysis.compare import ComparisonRow, pareto_front

    rows = [
        ComparisonRow("slow-small", 30.0, peak_activation_bytes=1.0),
        ComparisonRow("fast-big", 10.0, peak_activation_bytes=9.0),
        ComparisonRow("dominated", 31.0, peak_activation_bytes=5.0),
        ComparisonRow("middle", 20.0, peak_activation_bytes=4.0),
        ComparisonRow("broken", error="no"),
    ]
    assert [row.schedule for row in pareto_front(rows)] == ["fast-big", "middle", "slow-small"]


def test_binary_unit_for_axes():
    """Issue 13 item 6: axes in binary units, never plotly's decimal 'B' (billions)."""
    from pipesim.units import binary_unit

    assert binary_unit(26e9) == ("GiB", 2**30)
    assert binary_unit(3 * 2**20) == ("MiB", 2**20)
    assert binary_unit(512) == ("B", 1)

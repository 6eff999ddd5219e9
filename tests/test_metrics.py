"""Metrics read off a Timeline: bubbles, idle intervals, stashed microbatches, memory."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cost.model import CostModel, StageCost
from pipesim.ir import Action
from pipesim.records import Span, Timeline, select_step
from pipesim.schedules.basic import gpipe, naive, one_f_one_b
from pipesim.schedules.interleaved import interleaved_1f1b
from pipesim.sim.metrics import (
    bubble_fraction,
    bubble_ratio,
    compute_metrics,
    idle_intervals,
    makespan,
    memory_over_time,
    stash_counts,
)
from pipesim.sim.simulate import simulate

P = Action.parse


def hand_timeline(rows, step=0):
    """rows: per rank, (action text, start, end)."""
    spans = tuple(Span(r, P(a), s, e, step) for r, row in enumerate(rows) for a, s, e in row)
    return Timeline(num_ranks=len(rows), spans=spans)


TWO_RANKS = hand_timeline(
    [
        [("0F0", 0, 1), ("0B0", 5, 7)],
        [("1F0", 1, 2), ("1B0", 2, 4)],
    ]
)


def test_idle_and_bubbles_on_a_hand_made_timeline():
    assert makespan(TWO_RANKS) == 7
    assert idle_intervals(TWO_RANKS) == [[(1, 5)], [(0, 1), (4, 7)]]
    assert bubble_fraction(TWO_RANKS) == pytest.approx(8 / 14)
    assert bubble_fraction(TWO_RANKS, rank=0) == pytest.approx(4 / 7)
    assert bubble_fraction(TWO_RANKS, rank=1) == pytest.approx(4 / 7)
    assert bubble_ratio(TWO_RANKS) == pytest.approx(8 / 6)
    with pytest.raises(ValueError, match="rank 2 is outside 0..1"):
        bubble_fraction(TWO_RANKS, rank=2)


def test_stash_counts_step_function():
    timeline = hand_timeline([[("0F0", 0, 1), ("0F1", 1, 2), ("0B0", 2, 4), ("0B1", 4, 6)]])
    assert stash_counts(timeline) == [[(0, 1), (1, 2), (4, 1), (6, 0)]]


def test_memory_with_split_backward_frees_in_two_parts():
    timeline = hand_timeline([[("0F0", 0, 1), ("0I0", 1, 2), ("0W0", 2, 3)]])
    stage = StageCost(1.0, 2.0, activation_bytes=100.0, weight_grad_bytes=30.0, input_bytes=10.0)
    cost = CostModel(stages=(stage,))
    # F stashes 100 at its start; I frees all but W's 30 at its end; W frees the rest.
    assert memory_over_time(timeline, cost) == [[(0, 100.0), (2, 30.0), (3, 0.0)]]
    # Stashed microbatches drop at the end of I, not W.
    assert stash_counts(timeline)[0][-1] == (2, 0)
    # Under recompute only the stage input is stashed.
    assert max(level for _, level in memory_over_time(timeline, cost.with_recompute(True))[0]) == 10.0


def test_frees_count_before_allocations_at_the_same_instant():
    timeline = hand_timeline([[("0F0", 0, 1), ("0B0", 1, 2), ("0F1", 2, 3), ("0B1", 3, 4)]])
    assert compute_metrics(timeline).ranks[0].peak_activations == 1


def test_select_step_shifts_to_zero_and_keeps_one_step():
    first = [Span(0, P("0F0"), 10, 11, 0), Span(0, P("0B0"), 11, 13, 0)]
    second = [Span(0, P("0F0"), 20, 21, 1), Span(0, P("0B0"), 22, 24, 1)]
    timeline = Timeline(num_ranks=1, spans=tuple(first + second), source="measured")
    step = select_step(timeline, 1)
    assert [(s.start, s.end) for s in step.spans] == [(0, 1), (2, 4)]
    assert step.source == "measured"
    assert makespan(step) == 4 and bubble_fraction(step) == 0.25
    with pytest.raises(ValueError, match=r"steps present: \[0, 1\]"):
        select_step(timeline, 5)


def test_metrics_to_dict_shape():
    cost = CostModel.uniform(1.0, 2.0, activation_bytes=8.0)
    metrics = compute_metrics(simulate(one_f_one_b(3, 4), cost), cost)
    data = metrics.to_dict()
    assert set(data) == {"makespan", "bubble_fraction", "bubble_ratio", "ranks"}
    assert [r["rank"] for r in data["ranks"]] == [0, 1, 2]
    assert {"rank", "bubble_fraction", "peak_activations", "peak_activation_bytes", "busy_ms", "idle_ms"} <= set(
        data["ranks"][0]
    )
    assert [r["peak_activation_bytes"] for r in data["ranks"]] == [24.0, 16.0, 8.0]
    assert compute_metrics(simulate(one_f_one_b(3, 4), cost)).ranks[0].peak_activation_bytes == 0.0


sizes = dict(
    ranks=st.integers(1, 6), microbatches=st.integers(1, 12), forward=st.integers(1, 5), backward=st.integers(1, 5)
)


@settings(max_examples=50, deadline=None)
@given(**sizes)
def test_bubble_closed_forms_and_peak_stash(ranks, microbatches, forward, backward):
    p, m = ranks, microbatches
    cost = CostModel.uniform(forward, backward)
    for schedule in (gpipe(p, m), one_f_one_b(p, m)):
        metrics = compute_metrics(simulate(schedule, cost), cost)
        assert metrics.bubble_fraction == pytest.approx((p - 1) / (m + p - 1))
        assert metrics.bubble_ratio == pytest.approx((p - 1) / m)
        for rank in metrics.ranks:
            assert rank.busy_ms == m * (forward + backward)
            expected = m if schedule.name == "gpipe" else min(p - rank.rank, m)
            assert rank.peak_activations == expected
            assert rank.peak_activation_bytes == expected * 1.0  # uniform() stashes 1 byte per microbatch
    metrics = compute_metrics(simulate(naive(p, m), cost))
    assert metrics.bubble_fraction == pytest.approx((p - 1) / p)
    assert all(r.peak_activations == 1 for r in metrics.ranks)


@settings(max_examples=40, deadline=None)
@given(
    ranks=st.integers(1, 6),
    groups=st.integers(1, 4),
    chunks=st.integers(2, 4),
    forward=st.integers(1, 4),
    backward=st.integers(1, 4),
)
def test_interleaved_bubble_closed_form(ranks, groups, chunks, forward, backward):
    p, m, v = ranks, ranks * groups, chunks
    metrics = compute_metrics(simulate(interleaved_1f1b(p, m, v), CostModel.uniform(forward, backward)))
    assert metrics.bubble_fraction == pytest.approx((p - 1) / (v * m + p - 1))


@settings(max_examples=30, deadline=None)
@given(**sizes)
def test_idle_plus_busy_fill_the_makespan(ranks, microbatches, forward, backward):
    timeline = simulate(one_f_one_b(ranks, microbatches), CostModel.uniform(forward, backward, comm_ms=0.25))
    total = makespan(timeline)
    for rank, gaps in enumerate(idle_intervals(timeline)):
        busy = sum(s.end - s.start for s in timeline.spans if s.rank == rank)
        assert sum(b - a for a, b in gaps) + busy == pytest.approx(total)
        assert all(0 <= a < b <= total for a, b in gaps)


def test_empty_and_degenerate_timelines():
    empty = Timeline(num_ranks=2, spans=())
    assert makespan(empty) == 0 and bubble_fraction(empty) == 0 and bubble_ratio(empty) == 0
    idle_rank = hand_timeline([[("0F0", 0, 1)], []])
    assert bubble_ratio(idle_rank) == 1.0
    assert bubble_fraction(idle_rank, rank=1) == 1.0
    assert math.isinf(bubble_ratio(hand_timeline([[("0F0", 0, 0)], [("1F0", 0, 2)]]))) is False


def test_overlapping_measured_spans_use_the_event_path():
    # Measured spans may overlap on a rank (async kernels): idle is the uncovered time,
    # peaks follow event times, not list order.
    timeline = hand_timeline([[("0F0", 0, 2), ("0F1", 1, 3), ("0B0", 4, 5), ("0B1", 3.5, 6)]])
    metrics = compute_metrics(timeline, CostModel.uniform(activation_bytes=5.0))
    assert metrics.ranks[0].idle_ms == 0.5
    assert metrics.ranks[0].peak_activations == 2
    assert metrics.ranks[0].peak_activation_bytes == 10.0


@settings(max_examples=30, deadline=None)
@given(ranks=st.integers(1, 5), microbatches=st.integers(1, 10), comm=st.integers(0, 2))
def test_peaks_agree_with_the_step_functions(ranks, microbatches, comm):
    from tests.helpers.sizes import registered_at

    cost = CostModel.uniform(1.0, 3.0, comm_ms=float(comm), activation_bytes=4.0)
    for schedule in registered_at(ranks, microbatches):
        timeline = simulate(schedule, cost)
        metrics = compute_metrics(timeline, cost)
        counts, sizes = stash_counts(timeline), memory_over_time(timeline, cost)
        for rank in metrics.ranks:
            assert rank.peak_activations == max(level for _, level in counts[rank.rank])
            assert rank.peak_activation_bytes == max(level for _, level in sizes[rank.rank])
            assert sizes[rank.rank][-1][1] == 0  # everything stashed is freed by the end of the step


def test_inner_bubble_leaves_out_ramp_and_drain_zb_h2_has_none():
    """Issue 13 item 9: ZB-H2's step-level bubble equals ZB-H1's; the per-stage (inner) one tells them apart."""
    from pipesim.schedules import build_schedule
    from pipesim.sim.metrics import bubble_fraction, inner_bubble_fraction

    cost = CostModel.uniform(1.0, 2.0, weight_ms=1.0)  # F = I = W
    h1 = simulate(build_schedule("zb-h1", 4, 8), cost)
    h2 = simulate(build_schedule("zb-h2", 4, 8), cost)
    assert bubble_fraction(h1) == pytest.approx(bubble_fraction(h2)) and bubble_fraction(h2) > 0
    assert inner_bubble_fraction(h2) == 0.0
    # zb-h1: rank r waits (3 - r) ms inside its work, out of 27 - r ms between its first and last action
    assert inner_bubble_fraction(h1) == pytest.approx((3 + 2 + 1 + 0) / (27 + 26 + 25 + 24))


@pytest.mark.parametrize("name", ["1f1b", "interleaved-1f1b", "zb-h1", "zbv", "dualpipe", "seq1f1b", "v-min"])
def test_link_busy_of_a_validated_schedule_equals_the_action_count(name):
    """A validated schedule's link time is counted per stage (one activation and one gradient per microbatch),
    not per action: it must equal the count over its actions, which an unvalidated copy of it takes."""
    import dataclasses

    from pipesim.cost.convert import cost_from_times
    from pipesim.cost.links import LinkCost
    from pipesim.schedules import build_schedule, options_for
    from pipesim.semantics.screen import is_validated
    from pipesim.semantics.validate import validate
    from pipesim.sim.metrics import link_busy_ms

    schedule = build_schedule(name, 4, 8, **options_for(name, num_virtual_stages=2))
    validate(schedule)
    unmarked = dataclasses.replace(schedule)
    assert is_validated(schedule) and not is_validated(unmarked)
    cost = dataclasses.replace(cost_from_times((1.0,), (2.0,)), links=(LinkCost(0.1, 3.0),)).for_schedule(schedule)
    counted = link_busy_ms(unmarked, cost)
    assert any(counted) and link_busy_ms(schedule, cost) == pytest.approx(counted, rel=1e-12)

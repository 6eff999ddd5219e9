"""Seq1F1B: sequence chunks as data (Schedule.seq_chunks), their causal rules, costs and memory."""

from __future__ import annotations

import dataclasses

import pytest

from pipesim.cost.convert import cost_from_times
from pipesim.cost.seq_chunks import chunk_shares
from pipesim.ir import Action, B, F
from pipesim.schedules import build_schedule
from pipesim.semantics.dag import DeadlockError, dependencies
from pipesim.semantics.lower import producers_of
from pipesim.semantics.validate import validate
from pipesim.sim.metrics import compute_metrics
from pipesim.sim.simulate import simulate

GB = 1e9


def _cost(attention: float = 0.0):
    return dataclasses.replace(cost_from_times([1.0], [2.0], activation_bytes=[GB]), attention_fraction=attention)


def _peak(schedule, cost) -> float:
    priced = cost.for_schedule(schedule)
    return max(r.peak_activation_bytes for r in compute_metrics(simulate(schedule, priced), priced).ranks)


def test_a_chunk_needs_its_earlier_chunks_forward_and_its_later_chunks_backward() -> None:
    # chunk 1 of microbatch 2 is action microbatch 5 with 2 chunks
    assert (Action(1, F, 4),) in producers_of(Action(1, F, 5), 4, seq_chunks=2)
    assert (Action(1, B, 5), Action(1, "I", 5)) in producers_of(Action(1, B, 4), 4, seq_chunks=2)
    assert all(Action(1, F, 3) not in options for options in producers_of(Action(1, F, 4), 4, seq_chunks=2))
    # the last chunk's backward needs no later chunk; the first chunk's forward no earlier one
    assert len(producers_of(Action(3, B, 5), 4, seq_chunks=2)) == 1  # its own F only (the last stage)


def test_a_backward_of_the_first_chunk_before_the_last_deadlocks() -> None:
    schedule = build_schedule("seq1f1b", 1, 1, seq_chunks=2)
    rows = (tuple(Action(0, k, u) for k, u in ((F, 0), (F, 1), (B, 0), (B, 1))),)
    with pytest.raises(DeadlockError):
        simulate(dataclasses.replace(schedule, actions=rows), _cost())


@pytest.mark.parametrize(("p", "chunks"), [(2, 2), (4, 2), (4, 4), (8, 2), (5, 3)])
def test_valid_faster_than_1f1b_and_stashes_p_minus_1_plus_s_chunks(p: int, chunks: int) -> None:
    """Rank 0 holds p-1+S chunks at its fullest, (p-1+S)/S microbatches' worth against 1F1B's p; the smaller
    units also shrink the bubble (attention left out: every chunk costs the same)."""
    m = 2 * p
    schedule = build_schedule("seq1f1b", p, m, seq_chunks=chunks)
    validate(schedule)
    one = build_schedule("1f1b", p, m)
    cost = _cost()
    assert _peak(schedule, cost) == pytest.approx((p - 1 + chunks) / chunks * GB)
    assert _peak(one, cost) == p * GB
    assert simulate(schedule, cost.for_schedule(schedule)).columns  # runs
    seq_step = compute_metrics(simulate(schedule, cost.for_schedule(schedule))).makespan
    assert seq_step < compute_metrics(simulate(one, cost)).makespan


def test_two_chunks_stash_at_most_60_percent_of_1f1b_from_5_ranks() -> None:
    """(p+1)/(2p) <= 0.6 exactly when p >= 5: at 4 ranks Seq1F1B with 2 chunks keeps 62.5% of 1F1B's peak."""
    for p in (5, 8, 16):
        ratio = _peak(build_schedule("seq1f1b", p, 2 * p), _cost()) / _peak(build_schedule("1f1b", p, 2 * p), _cost())
        assert ratio == pytest.approx((p + 1) / (2 * p)) and ratio <= 0.6
    assert _peak(build_schedule("seq1f1b", 4, 8), _cost()) / (4 * GB) == 0.625


def test_shares_of_compute_and_tokens() -> None:
    even = chunk_shares(4, 0.4, "even")
    assert sum(even.compute) == pytest.approx(1) and even.tokens == (0.25,) * 4
    assert list(even.compute) == sorted(even.compute)  # later chunks attend to more
    balanced = chunk_shares(4, 0.4, "balanced")
    assert balanced.compute == pytest.approx((0.25,) * 4)
    assert sum(balanced.tokens) == pytest.approx(1) and list(balanced.tokens) == sorted(balanced.tokens, reverse=True)
    assert chunk_shares(3, 0.0, "balanced").tokens == pytest.approx((1 / 3,) * 3)
    with pytest.raises(ValueError, match="valid: even, balanced"):
        chunk_shares(2, 0.1, "uneven")


def test_the_balanced_cut_evens_the_chunks_times_and_the_step() -> None:
    """Under causal attention an even cut makes the second chunk dearer (0.625 against 0.375 of the forward at
    a=0.5); the balanced cut gives both half, and the pipeline no longer waits on the dear chunks."""
    cost = _cost(attention=0.5)
    even = build_schedule("seq1f1b", 4, 8, seq_chunks=2)
    balanced = build_schedule("seq1f1b", 4, 8, seq_chunks=2, seq_cut="balanced")
    times = {s.action: s.end - s.start for s in simulate(even, cost.for_schedule(even)).spans}
    assert times[Action(0, F, 0)] == pytest.approx(0.375) and times[Action(0, F, 1)] == pytest.approx(0.625)
    times = {s.action: s.end - s.start for s in simulate(balanced, cost.for_schedule(balanced)).spans}
    assert times[Action(0, F, 0)] == pytest.approx(0.5) == times[Action(0, F, 1)]
    step = {s: compute_metrics(simulate(s, cost.for_schedule(s))).makespan for s in (even, balanced)}
    assert step[balanced] < step[even]


def test_its_dependencies_carry_the_sequence_edges() -> None:
    schedule = build_schedule("seq1f1b", 2, 2, seq_chunks=2)
    deps = dependencies(schedule)
    at = {a: i for i, a in enumerate(deps.actions)}
    assert at[Action(0, F, 0)] in deps.deps[at[Action(0, F, 1)]]
    assert at[Action(0, B, 1)] in deps.deps[at[Action(0, B, 0)]]


def test_too_many_chunks_are_refused_in_the_users_terms():
    """The IR counts a chunk as a microbatch; the refusal names what the user gave: microbatches x chunks."""
    with pytest.raises(ValueError, match=r"2 microbatches x 100000 sequence chunks = 200000 chunks, more than"):
        build_schedule("seq1f1b", 2, 2, seq_chunks=100000)


def test_a_models_cost_carries_its_attention_share_so_a_later_chunk_is_dearer():
    """The planner prices a model's chunks from its own attention FLOPs (ModelDescription.attention_fraction), not
    the flat default: the second of two even chunks of a 2,048-token model costs more than the first."""
    from pipesim.cost.description import ModelDescription

    description = ModelDescription(seq_len=2048)
    cost = description.to_cost_model(2)
    assert cost.attention_fraction == pytest.approx(description.attention_fraction()) and cost.attention_fraction > 0
    shares = chunk_shares(2, cost.attention_fraction, "even")
    assert shares.compute[1] > shares.compute[0]

"""Simulation: closed forms, determinism, and the semantics checked span by span."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.cost.model import CostModel
from pipesim.ir import Action, make_schedule
from pipesim.schedules.basic import gpipe, naive, one_f_one_b
from pipesim.schedules.interleaved import interleaved_1f1b
from pipesim.semantics.dag import dependencies
from pipesim.sim.metrics import makespan
from pipesim.sim.simulate import simulate
from tests.helpers.sizes import registered_at

sizes = dict(
    ranks=st.integers(1, 6), microbatches=st.integers(1, 12), forward=st.integers(1, 5), backward=st.integers(1, 5)
)


@settings(max_examples=60, deadline=None)
@given(**sizes)
def test_gpipe_and_1f1b_makespan_closed_form(ranks, microbatches, forward, backward):
    cost = CostModel.uniform(forward, backward)
    expected = (microbatches + ranks - 1) * (forward + backward)
    assert makespan(simulate(gpipe(ranks, microbatches), cost)) == expected
    assert makespan(simulate(one_f_one_b(ranks, microbatches), cost)) == expected


@settings(max_examples=60, deadline=None)
@given(**sizes)
def test_naive_makespan_closed_form(ranks, microbatches, forward, backward):
    cost = CostModel.uniform(forward, backward)
    assert makespan(simulate(naive(ranks, microbatches), cost)) == microbatches * ranks * (forward + backward)


@settings(max_examples=60, deadline=None)
@given(
    ranks=st.integers(1, 6),
    groups=st.integers(1, 4),
    chunks=st.integers(2, 4),
    forward=st.integers(1, 4),
    backward=st.integers(1, 4),
)
def test_interleaved_makespan_closed_form(ranks, groups, chunks, forward, backward):
    # Per-chunk times F/v and B/v (here integers, so sums are exact): (v*m + p - 1) chunk slots.
    microbatches = ranks * groups
    cost = CostModel.uniform(forward, backward)
    timeline = simulate(interleaved_1f1b(ranks, microbatches, chunks), cost)
    assert makespan(timeline) == (chunks * microbatches + ranks - 1) * (forward + backward)


def test_comm_delays_cross_rank_hops_only():
    cost = CostModel.uniform(1.0, 2.0, comm_ms=0.5)
    spans = {str(s.action): s for s in simulate(one_f_one_b(2, 1), cost).spans}
    assert (spans["0F0"].start, spans["1F0"].start) == (0.0, 1.5)
    assert spans["1B0"].start == 2.5  # right after 1F0 on the same rank: no transfer
    assert spans["0B0"].start == 5.0  # 1B0 ends at 4.5, gradient arrives 0.5 later
    assert makespan(simulate(one_f_one_b(2, 1), cost)) == 7.0


# Heterogeneous stages and links: stage `slowest` is the slowest in both F and B (the others faster in both).
UNEVEN = [
    ([3.0, 1.0, 2.0, 1.5], [5.0, 2.0, 4.0, 3.0], 0),
    ([1.0, 3.0, 2.0, 1.5], [2.0, 5.0, 4.0, 3.0], 1),
    ([1.0, 2.0, 1.5, 3.0], [2.0, 4.0, 3.0, 5.0], 3),
]


@pytest.mark.parametrize("forward, backward, slowest", UNEVEN)
@pytest.mark.parametrize("microbatches", [1, 2, 5, 9])
def test_uneven_stages_and_links_against_closed_forms(forward, backward, slowest, microbatches):
    """Values, not only determinism, on stages and links that all differ (per-stage costs, per-boundary links).

    GPipe: the first microbatch crosses every stage and link both ways, the slowest stage adds (m - 1) (F + B):
    sum(F + B) + 2 sum(links) + (m - 1)(F_k + B_k). Naive (one microbatch in flight): m (sum(F + B) + 2 sum(links)).
    Catches a cost model read at the wrong stage (one stage's cost for all), a transfer charged at the wrong
    boundary or on one direction only, and a deterministic but wrong engine."""
    links = [0.2, 0.7, 0.1]
    cost = CostModel.per_stage(forward, backward, comm_ms=links)
    m, through = microbatches, sum(forward) + sum(backward) + 2 * sum(links)
    expected = through + (m - 1) * (forward[slowest] + backward[slowest])
    assert makespan(simulate(gpipe(4, m), cost)) == pytest.approx(expected, abs=1e-9)
    assert makespan(simulate(naive(4, m), cost)) == pytest.approx(m * through, abs=1e-9)
    schedule = one_f_one_b(4, m)
    assert simulate(schedule, cost) == simulate(schedule, cost)  # and the same every time


def test_cost_model_must_fit_the_schedule():
    with pytest.raises(ValueError, match="3 stages but schedule"):
        simulate(one_f_one_b(4, 4), CostModel.per_stage([1, 1, 1], [2, 2, 2]))


def test_timeline_records_schedule_and_spans_per_rank():
    schedule = one_f_one_b(3, 4)
    timeline = simulate(schedule, CostModel.uniform())
    assert timeline.source == "simulated" and timeline.schedule_name == "1f1b"
    assert timeline.num_ranks == 3 and len(timeline.spans) == schedule.num_actions
    for rank in range(3):
        assert [s.action for s in timeline.spans if s.rank == rank] == list(schedule.actions[rank])


def test_split_backward_weight_runs_after_input_gradient():
    rows = [["0F0", "0I0", "0W0"], ["1F0", "1I0", "1W0"]]
    schedule = make_schedule("split", 2, 1, [0, 1], [[Action.parse(t) for t in row] for row in rows])
    cost = CostModel.uniform(1.0, 4.0, weight_ms=1.0)
    spans = {str(s.action): s for s in simulate(schedule, cost).spans}
    assert spans["1I0"].end - spans["1I0"].start == 3.0  # I = B - W
    assert spans["0I0"].start == spans["1I0"].end  # the gradient is I's output, W is not waited for
    assert spans["0W0"].end == 1 + 1 + 3 + 3 + 1


@settings(max_examples=40, deadline=None)
@given(
    ranks=st.integers(1, 5),
    microbatches=st.integers(1, 10),
    chunks=st.integers(2, 3),
    costs=st.lists(st.tuples(st.integers(1, 5), st.integers(1, 5), st.integers(0, 3)), min_size=16, max_size=16),
)
def test_spans_respect_every_dependency_and_never_overlap(ranks, microbatches, chunks, costs):
    for schedule in registered_at(ranks, microbatches, chunks):
        stages = schedule.num_stages  # at most 5 ranks x 3 chunks = 15 <= 16
        cost = CostModel.per_stage(
            [float(f) for f, _, _ in costs[:stages]],
            [float(b) for _, b, _ in costs[:stages]],
            comm_ms=[float(c) for _, _, c in costs[: max(stages - 1, 1)]],
        )
        timeline = simulate(schedule, cost)
        deps = dependencies(schedule)
        span = {s.action: s for s in timeline.spans}
        # a sequence chunk takes its share of its microbatch's time (an even cut, no attention: 1/S)
        share = 1 / schedule.seq_chunks
        for i, action in enumerate(deps.actions):
            s = span[action]
            assert s.end - s.start == pytest.approx(cost.duration_ms(action.stage, action.kind) * share, rel=1e-12)
            ready = 0.0
            if i not in deps.offsets:  # previous action on the rank
                ready = max(ready, span[deps.actions[i - 1]].end)
            for d in deps.deps[i]:
                producer = deps.actions[d]
                hop = cost.transfer_ms(producer.stage, action.stage) if deps.ranks[d] != deps.ranks[i] else 0.0
                assert s.start >= span[producer].end + hop
                ready = max(ready, span[producer].end + hop)
            group = (i, *(deps.joined or {}).get(i, ()))  # an overlapped pair starts once both halves can
            for member in group[1:]:
                consumer = deps.actions[member]
                for d in deps.deps[member]:
                    if d not in group:
                        crosses = deps.ranks[d] != deps.ranks[i]
                        hop = cost.transfer_ms(deps.actions[d].stage, consumer.stage) if crosses else 0.0
                        ready = max(ready, span[deps.actions[d]].end + hop)
            assert s.start == ready  # as soon as possible, never later
        for rank in range(schedule.num_ranks):
            own = sorted((s.start, s.end) for s in timeline.spans if s.rank == rank)
            assert all(a_end <= b_start for (_, a_end), (b_start, _) in pairwise(own))


def _reference_sweep(deps, durations, hops, gaps):  # noqa: ANN001, ANN202 - the engine's rule, spelt out
    """The engine's rule by passes over the ranks until none moves (no parking, no wake-ups): an action starts at
    its rank's clock plus its gap, or when its last producer's output arrives (plus the hop from another rank); an
    overlapped group's first member waits for every member's producers outside the group."""
    joined = deps.joined or {}
    n = len(deps.ranks)
    starts, ends = [0.0] * n, [None] * n
    pointer, clock = list(deps.offsets[:-1]), [0.0] * deps.num_ranks
    moved = True
    while moved:
        moved = False
        for rank in range(deps.num_ranks):
            while pointer[rank] < deps.offsets[rank + 1]:
                i = pointer[rank]
                group = {i, *joined.get(i, ())}
                needed = [(i, d) for d in deps.deps[i]]
                needed += [(m, d) for m in joined.get(i, ()) for d in deps.deps[m] if d not in group]
                if any(ends[d] is None for _, d in needed):
                    break
                start = clock[rank] + gaps[i]
                for m, d in needed:
                    start = max(start, ends[d] + (hops[m] if deps.ranks[d] != rank else 0.0))
                starts[i], ends[i] = start, start + durations[i]
                clock[rank], pointer[rank], moved = ends[i], i + 1, True
    return starts, ends


@settings(max_examples=25, deadline=None)
@given(ranks=st.integers(1, 5), microbatches=st.integers(1, 10), seed=st.integers(0, 10**6))
def test_the_engine_sweep_equals_the_rule_spelt_out(ranks, microbatches, seed) -> None:
    """The sweep (parked ranks in a list, the gap added always, the group test after the producers: issue 31's
    faster loop) against the rule by repeated passes, bit for bit, on every registered family with random
    durations, hops and gaps; a deadlock leaves the same actions unrun."""
    import random

    from pipesim.sim.simulate import sweep

    rng = random.Random(seed)
    for schedule in registered_at(ranks, microbatches):
        deps = dependencies(schedule)
        n = len(deps.ranks)
        durations = [rng.uniform(0.1, 3.0) for _ in range(n)]
        hops = [rng.choice([0.0, rng.uniform(0.0, 1.0)]) for _ in range(n)]
        gaps = [rng.choice([0.0, rng.uniform(0.0, 0.2)]) for _ in range(n)]
        starts, ends, stuck = sweep(deps, durations, hops, gaps)
        assert not stuck
        assert (starts, ends) == _reference_sweep(deps, durations, hops, gaps), schedule.name
        assert sweep(deps, durations, hops)[:2] == _reference_sweep(deps, durations, hops, [0.0] * n)
    rows = [[Action(0, "F", 0), Action(0, "B", 0)], [Action(1, "B", 0), Action(1, "F", 0)]]  # rank 1: B before F
    cyclic = dependencies(make_schedule("cycle", 2, 1, (0, 1), rows))
    _, ends, stuck = sweep(cyclic, [1.0] * 4, [0.0] * 4)
    assert [rank for rank, _, _ in stuck] == [0, 1] and ends[0] == 1.0 and ends[1:] == [-1.0] * 3

"""Dependency graph: edges, deadlock cycles, critical path."""

from __future__ import annotations

from itertools import pairwise

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipesim.analysis.critical_path import critical_path
from pipesim.cost.model import CostModel
from pipesim.ir import Action, make_schedule
from pipesim.schedules.basic import gpipe, naive, one_f_one_b
from pipesim.schedules.interleaved import interleaved_1f1b
from pipesim.semantics.dag import DeadlockError, build_dag, dependencies
from pipesim.semantics.validate import ScheduleError
from pipesim.sim.simulate import find_deadlock, simulate

P = Action.parse


def schedule_of(rows, microbatches):
    actions = [[P(text) for text in row.split()] for row in rows]
    return make_schedule("hand-made", len(rows), microbatches, range(len(rows)), actions)


# rank 0 wants 1B0 before it sends 0F1; rank 1 wants 0F1 before it gets to 1B0.
CROSS_DEADLOCK = schedule_of(["0F0 0B0 0F1 0B1", "1F1 1F0 1B0 1B1"], 2)


def test_dag_edges_for_two_stage_1f1b():
    graph = build_dag(one_f_one_b(2, 2), CostModel.uniform(comm_ms=0.5))
    data = {(str(u), str(v)) for u, v, kind in graph.edges(data="kind") if kind == "data"}
    order = {(str(u), str(v)) for u, v, kind in graph.edges(data="kind") if kind == "order"}
    assert data == {
        ("0F0", "1F0"),
        ("0F1", "1F1"),  # forward crosses the boundary
        ("1F0", "1B0"),
        ("1F1", "1B1"),  # last stage turns round
        ("1B0", "0B0"),
        ("1B1", "0B1"),  # gradients come back
        ("0F0", "0B0"),
        ("0F1", "0B1"),  # backward needs its own forward
    }
    # Rank 0 runs 0F0 0F1 0B0 0B1; rank 1 runs 1F0 1B0 1F1 1B1 (1F0->1B0, 1F1->1B1 stay data edges).
    assert order == {("0F0", "0F1"), ("0F1", "0B0"), ("0B0", "0B1"), ("1B0", "1F1")}
    assert graph.edges[P("0F0"), P("1F0")]["comm_ms"] == 0.5
    assert "comm_ms" not in graph.edges[P("0F0"), P("0B0")]
    assert graph.nodes[P("1B0")] == {"rank": 1, "stage": 1, "kind": "B", "microbatch": 0, "duration": 2.0}


def test_dag_split_backward_edges():
    graph = build_dag(schedule_of(["0F0 0I0 0W0", "1F0 1I0 1W0"], 1))
    assert graph.has_edge(P("1I0"), P("0I0")) and graph.has_edge(P("0I0"), P("0W0"))
    assert graph.edges[P("0I0"), P("0W0")]["kind"] == "data"
    assert "duration" not in graph.nodes[P("0F0")]


@settings(max_examples=30, deadline=None)
@given(ranks=st.integers(1, 5), microbatches=st.integers(1, 8))
def test_builders_give_acyclic_graphs_with_one_node_per_action(ranks, microbatches):
    for schedule in (naive(ranks, microbatches), gpipe(ranks, microbatches), one_f_one_b(ranks, microbatches)):
        graph = build_dag(schedule)
        assert graph.number_of_nodes() == schedule.num_actions
        assert nx.is_directed_acyclic_graph(graph)
        assert find_deadlock(schedule) is None


def test_deadlock_cycle_is_a_cycle_of_the_graph():
    cycle = find_deadlock(CROSS_DEADLOCK)
    assert cycle is not None
    graph = build_dag(CROSS_DEADLOCK)
    assert not nx.is_directed_acyclic_graph(graph)
    for producer, consumer in zip(cycle, cycle[1:] + cycle[:1], strict=True):
        assert graph.has_edge(producer, consumer), (producer, consumer)


def test_simulate_refuses_deadlock_and_shows_who_waits_on_what():
    with pytest.raises(DeadlockError) as raised:
        simulate(CROSS_DEADLOCK, CostModel.uniform())
    error = raised.value
    message = str(error)
    assert "rank 0 waits at 0B0 for 1B0 on rank 1" in message
    assert "rank 1 waits at 1F1 for 0F1 on rank 0" in message
    assert "0B0 -> 0F1 -> 1F1 -> 1F0 -> 1B0 -> 0B0" in message
    assert error.rule == "deadlock" and error.rank == 0 and error.action == P("0B0")
    assert error.cycle == find_deadlock(CROSS_DEADLOCK)
    assert isinstance(error, ScheduleError)


def test_deadlock_within_one_rank():
    schedule = schedule_of(["0B0 0F0"], 1)
    with pytest.raises(DeadlockError, match="rank 0 waits at 0B0 for 0F0 later in its own list"):
        simulate(schedule, CostModel.uniform())


def test_missing_producer_is_a_schedule_error():
    with pytest.raises(ScheduleError, match="1F0 needs 0F0, which no rank runs"):
        dependencies(schedule_of(["", "1F0 1B0"], 1))
    with pytest.raises(ScheduleError, match=r"0B0 needs 1B0 \(or 1I0\)"):
        dependencies(schedule_of(["0F0 0B0", "1F0"], 1))


def test_duplicate_action_is_a_schedule_error():
    with pytest.raises(ScheduleError, match="duplicate F"):
        dependencies(schedule_of(["0F0 0F0 0B0"], 1))


def _path_time(path, cost, ranks_of):
    """Durations along the path plus the transfers on its cross-rank hops."""
    total = sum(cost.duration_ms(a.stage, a.kind) for a in path)
    for a, b in pairwise(path):
        if ranks_of[a] != ranks_of[b]:
            total += cost.transfer_ms(a.stage, b.stage)
    return total


@settings(max_examples=40, deadline=None)
@given(
    ranks=st.integers(1, 5),
    microbatches=st.integers(1, 8),
    forward=st.integers(1, 4),
    backward=st.integers(1, 6),
    builder=st.sampled_from([naive, gpipe, one_f_one_b]),
)
def test_critical_path_lasts_the_makespan_without_comm(ranks, microbatches, forward, backward, builder):
    schedule = builder(ranks, microbatches)
    cost = CostModel.uniform(forward, backward)
    timeline = simulate(schedule, cost)
    path = critical_path(schedule, timeline, cost)
    makespan = max(s.end for s in timeline.spans)
    assert sum(cost.duration_ms(a.stage, a.kind) for a in path) == makespan
    graph = build_dag(schedule)
    assert all(graph.has_edge(a, b) for a, b in pairwise(path))


@settings(max_examples=25, deadline=None)
@given(ranks=st.integers(1, 4), groups=st.integers(1, 3), comm=st.integers(0, 3))
def test_critical_path_with_comm_adds_up_to_the_makespan(ranks, groups, comm):
    schedule = interleaved_1f1b(ranks, ranks * groups, num_virtual_stages=2)
    cost = CostModel.uniform(1.0, 2.0, comm_ms=float(comm))
    timeline = simulate(schedule, cost)
    path = critical_path(schedule, timeline, cost)
    assert path[0] == P("0F0")  # a step starts with the first forward
    ranks_of = {a: schedule.rank_of(a) for a in path}
    assert _path_time(path, cost, ranks_of) == pytest.approx(max(s.end for s in timeline.spans))

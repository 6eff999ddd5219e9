"""What crosses a rank is stated once (`pipesim.semantics.lower.CROSSINGS`): the executor's messages and the
simulator's cross-rank dependencies are the same set, for every registered family at several sizes.

The mutation this guards against: a dependency form that drops (or adds) a crossing, e.g. the gradient that
B/I of stage s waits for from stage s+1. The simulator would then price a different schedule than the one the
executor runs (1F1B at 4 x 8 drops from 33 to 27 ms) while each form still agrees with itself.
"""

from __future__ import annotations

import pytest

from pipesim.ir import Schedule
from pipesim.schedules import schedule_names
from pipesim.semantics.dag import dependencies
from pipesim.semantics.lower import comm_plan, needed_message
from tests.helpers.sizes import built_schedules

GRID = [(p, m) for p in (1, 2, 3, 4) for m in (1, 3, 4, 8)]


def _message_edges(schedule: Schedule) -> list[tuple]:
    """(producer, consumer) of every message the executor moves between ranks (`comm_plan`'s links)."""
    plan = comm_plan(schedule)
    edges = []
    for (_, dst), messages in plan.links.items():
        consumers = {needed_message(a, schedule.num_stages): a for a in schedule.actions[dst]}
        edges.extend((plan.producer[message], consumers[message]) for message in messages)
    return edges


def _dependency_edges(schedule: Schedule) -> set[tuple]:
    """(producer, consumer) of every dependency the simulator waits for across ranks (`dependencies`)."""
    deps = dependencies(schedule)
    return {
        (deps.actions[d], deps.actions[i])
        for i, producers in enumerate(deps.deps)
        for d in producers
        if deps.ranks[d] != deps.ranks[i]
    }


@pytest.mark.parametrize("name", schedule_names())
def test_every_executor_message_is_exactly_one_simulator_dependency(name):
    for schedule in built_schedules(name, GRID):
        messages = _message_edges(schedule)
        assert len(messages) == len(set(messages)), (name, "a message is sent twice")
        assert set(messages) == _dependency_edges(schedule), (name, schedule.num_ranks, schedule.num_microbatches)
        # Independent of the table both read: each stage boundary between two ranks carries one activation
        # forward and one gradient back per microbatch (a crossing dropped from the table fails here).
        placement = schedule.stage_to_rank
        boundaries = sum(placement[s] != placement[s + 1] for s in range(schedule.num_stages - 1))
        assert len(messages) == 2 * boundaries * schedule.num_microbatches, name

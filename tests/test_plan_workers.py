"""The planner's evaluation order and processes change nothing: shape by shape, in a pool of processes or
in one, every candidate gets the numbers the one-process grid gives, in grid order, with progress reported."""

from __future__ import annotations

import pytest

from pipesim.cost.description import ModelDescription
from pipesim.plan.report import best_candidate, pareto_front
from pipesim.plan.search import Evaluator, PlanInputs, PlanSpace, candidate_grid, evaluate_all

MODEL = ModelDescription(num_layers=8, hidden_size=256, ffn_size=1024, num_heads=4, seq_len=128)
INPUTS = PlanInputs.from_description(MODEL, devices=8, global_batch=32, memory_cap_bytes=2**30)
SPACE = PlanSpace(
    schedules=("gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zbv"),
    microbatch_sizes=(1, 2, 4),
    chunks=(1, 2),
    recompute=(False, True),
    w_shares=(0.3, 0.5),
    ranks=(2, 4, 8),
)


def _numbers(candidates):
    return [(c.label, c.recompute, c.error, c.step_ms, c.peak_memory_bytes, c.rank_memory) for c in candidates]


def test_one_candidate_at_a_time_equals_shape_by_shape_and_the_pool() -> None:
    """Catches a shape's cache dropped too early, a pool returning rows out of grid order, or lost candidates."""
    evaluator = Evaluator(INPUTS)
    reference = [evaluator.evaluate(c) for c in candidate_grid(INPUTS, SPACE)]  # the plain loop, all cached
    calls: list[tuple[int, int]] = []
    by_shape = evaluate_all(INPUTS, SPACE, progress=lambda done, total: calls.append((done, total)), prune=False)
    pooled = evaluate_all(INPUTS, SPACE, workers=2, prune=False)
    assert _numbers(by_shape) == _numbers(reference) == _numbers(pooled)
    assert [c.label for c in pareto_front(pooled)] == [c.label for c in pareto_front(reference)]
    assert best_candidate(pooled).label == best_candidate(reference).label
    assert calls[-1] == (len(reference), len(reference)) and all(
        a[0] < b[0] for a, b in zip(calls, calls[1:], strict=False)
    )


def test_an_evaluated_candidate_can_still_be_drawn_after_its_shape_was_dropped() -> None:
    candidates = evaluate_all(INPUTS, SPACE, prune=False)
    built = next(c for c in candidates if c.error is None and c.schedule == "zb-h1")
    schedule, cost = Evaluator(INPUTS).materialise(built)
    assert schedule.num_ranks == built.ranks and len(cost.stages) == schedule.num_stages


def test_a_pool_that_cannot_start_falls_back_to_one_process(monkeypatch: pytest.MonkeyPatch) -> None:
    import concurrent.futures

    def refuse(*args, **kwargs):
        raise OSError("no processes here")

    monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", refuse)
    assert _numbers(evaluate_all(INPUTS, SPACE, workers=2, prune=False)) == _numbers(
        evaluate_all(INPUTS, SPACE, prune=False)
    )


def _group_task_delayed(inputs, offload, group, incumbents, found):
    """The pool's shape task, slowed by a delay that depends on the shape (the test's environment picks which
    shapes), so that the processes finish in another order."""
    import os
    import time

    from pipesim.plan import prune

    name, ranks, microbatches, chunks = prune.shape_key(group[0][3])
    if (len(name) + ranks + microbatches + chunks) % 2 == int(os.environ["PLAN_TEST_SLOW"]):
        time.sleep(0.05)
    return prune._group_task_original(inputs, offload, group, incumbents, found)


def test_a_pruned_search_in_processes_answers_the_same_whichever_process_finishes_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Shapes finishing in other orders prune by other incumbents, never to another answer: the best, the
    runners-up and the front are the one-process search's (catches a shape pruned by incumbents it should not
    have had)."""
    from pipesim.plan import prune

    def fastest(candidates, fitting):  # what pruning keeps: the KEEP fastest, of all and of those that fit
        kept = sorted((c.step_ms, c.label) for c in candidates if c.built and (c.fits or not fitting))
        return kept[: prune.KEEP]

    monkeypatch.setattr(prune, "_group_task_original", prune._group_task, raising=False)
    monkeypatch.setattr(prune, "_group_task", _group_task_delayed)
    alone = evaluate_all(INPUTS, SPACE)
    for slow in ("0", "1"):  # the forked processes inherit the environment: other shapes are slow in each run
        monkeypatch.setenv("PLAN_TEST_SLOW", slow)
        pooled = evaluate_all(INPUTS, SPACE, workers=2)
        assert best_candidate(pooled).label == best_candidate(alone).label
        assert [c.label for c in pareto_front(pooled)] == [c.label for c in pareto_front(alone)]
        assert fastest(pooled, True) == fastest(alone, True) and fastest(pooled, False) == fastest(alone, False)


def test_a_copy_of_the_incumbents_does_not_learn_what_they_learn_later() -> None:
    """A shape's task is sent a copy (the pool pickles its arguments later, on its own thread)."""
    from pipesim.plan.bounds import Bound
    from pipesim.plan.prune import Incumbents

    known = Incumbents(cap=None, keep=1)
    known.add(10.0, 100.0, True)
    sent = known.copy()
    known.add(1.0, 1.0, True)
    assert known.reason_to_prune(Bound(5.0, 50.0)) is not None
    assert sent.reason_to_prune(Bound(5.0, 50.0)) is None and sent.reason_to_prune(Bound(20.0, 200.0)) is not None

"""The Python API checks its arguments where a user calls it: a wrong type is a TypeError (a bad
value a ValueError) naming the argument and what it takes, never an AttributeError from deep inside; and every
function `pipesim.__all__` exposes is covered here."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import pipesim

SCHEDULE = pipesim.build_schedule("1f1b", 2, 4)
TIMELINE = pipesim.simulate(SCHEDULE).timeline

# Each public function with a wrong argument, and the argument's name the message must give.
BAD_CALLS = {
    "build_schedule": [(lambda: pipesim.build_schedule(None, 4, 8), "schedule name")],
    "schedule_names": [],  # takes nothing
    "load_schedule": [(lambda: pipesim.load_schedule(None), "path")],
    "save_schedule": [
        (lambda: pipesim.save_schedule(None, "x.json"), "schedule"),
        (lambda: pipesim.save_schedule(SCHEDULE, None), "path"),
    ],
    "load_torch_csv": [(lambda: pipesim.load_torch_csv(None), "path")],
    "to_torch_csv": [
        (lambda: pipesim.to_torch_csv(None), "schedule"),
        (lambda: pipesim.to_torch_csv("1f1b"), "schedule"),
    ],
    "cost_from_times": [
        (lambda: pipesim.cost_from_times(None), "forward_ms"),
        (lambda: pipesim.cost_from_times("1"), "forward_ms"),
    ],
    "load_cost_file": [(lambda: pipesim.load_cost_file(None), "path")],
    "simulate": [
        (lambda: pipesim.simulate(None), "schedule"),
        (lambda: pipesim.simulate("1f1b"), "schedule"),
        (lambda: pipesim.simulate(SCHEDULE, cost="fast"), "cost"),
    ],
    "metrics": [(lambda: pipesim.metrics(None), "timeline"), (lambda: pipesim.metrics(SCHEDULE), "timeline")],
    "compare": [
        (lambda: pipesim.compare("1f1b", ranks=4, microbatches=8), "schedules"),
        (lambda: pipesim.compare(["1f1b", None], ranks=4, microbatches=8), "schedules[1]"),
        (lambda: pipesim.compare(["1f1b"], ranks="4", microbatches=8), "ranks"),
    ],
    "load_timeline": [(lambda: pipesim.load_timeline(None), "path")],
    "save_timeline": [(lambda: pipesim.save_timeline(None, "t.json"), "timeline")],
    "gantt_figure": [
        (lambda: pipesim.gantt_figure(None), "timeline"),
        (lambda: pipesim.gantt_figure(SCHEDULE), "timeline"),
    ],
    "memory_figure": [(lambda: pipesim.memory_figure(None), "timeline")],
    "comparison_figure": [
        (lambda: pipesim.comparison_figure(None), "rows"),
        (lambda: pipesim.comparison_figure([1]), "rows[0]"),
    ],
    "plan_candidates": [(lambda: pipesim.plan_candidates(None), "inputs")],
    "pareto_front": [
        (lambda: pipesim.pareto_front(None), "candidates"),
        (lambda: pipesim.pareto_front([None]), "candidates[0]"),
    ],
    "best_candidate": [(lambda: pipesim.best_candidate("abc"), "candidates")],
    "read_run": [(lambda: pipesim.read_run(None), "run_dir")],
}


def test_every_public_function_is_covered():
    functions = {name for name in pipesim.__all__ if inspect.isfunction(getattr(pipesim, name))}
    assert functions == set(BAD_CALLS)


@pytest.mark.parametrize(("name", "index"), [(n, i) for n, calls in BAD_CALLS.items() for i in range(len(calls))])
def test_a_wrong_argument_is_named(name, index, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be written, and nowhere else
    call, argument = BAD_CALLS[name][index]
    with pytest.raises((TypeError, ValueError)) as caught:
        call()
    assert not isinstance(caught.value, AttributeError)
    assert argument in str(caught.value), str(caught.value)
    assert " must be " in str(caught.value)
    assert not any(Path(tmp_path).iterdir())


def test_compare_no_longer_compares_the_letters_of_a_name():
    with pytest.raises(TypeError, match="schedules must be a list of schedule names.*got '1f1b'"):
        pipesim.compare("1f1b", ranks=4, microbatches=8)
    assert [row.schedule for row in pipesim.compare(("1f1b", "gpipe"), ranks=2, microbatches=4)] == ["1f1b", "gpipe"]

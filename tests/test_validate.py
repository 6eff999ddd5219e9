"""Validation: each rule names the rank, the action and the rule broken."""

from __future__ import annotations

import pytest

from pipesim.ir import Action, make_schedule
from pipesim.schedules.basic import one_f_one_b
from pipesim.semantics.screen import compute_rules_hold
from pipesim.semantics.validate import ScheduleError, find_problems, validate


def schedule_of(rows, placement=None, microbatches=None):
    """A schedule from text rows, e.g. ["0F0 0B0", "1F0 1B0"]."""
    actions = [[Action.parse(text) for text in row.split()] for row in rows]
    placement = list(range(len(rows))) if placement is None else placement
    count = microbatches or 1 + max(a.microbatch for row in actions for a in row)
    return make_schedule("hand-made", len(rows), count, placement, actions)


def only_problem(schedule) -> ScheduleError:
    problems = find_problems(schedule)
    assert len(problems) == 1, [str(p) for p in problems]
    with pytest.raises(ScheduleError) as raised:
        validate(schedule)
    assert str(raised.value) == str(problems[0])
    return problems[0]


def test_builders_pass():
    validate(one_f_one_b(4, 8))
    assert find_problems(one_f_one_b(4, 8)) == []


def test_split_backward_passes():
    validate(schedule_of(["0F0 0F1 0I0 0I1 0W0 0W1", "1F0 1I0 1W0 1F1 1I1 1W1"]))


def test_missing_backward():
    problem = only_problem(schedule_of(["0F0 0F1 0B0", "1F0 1B0 1F1 1B1"]))
    assert problem.rule == "missing backward"
    assert (problem.rank, problem.action) == (0, Action.parse("0B1"))
    assert "rank 0" in str(problem) and "0B1" in str(problem) and "missing backward" in str(problem)


def test_missing_forward():
    problem = only_problem(schedule_of(["0F0 0B0 0B1", "1F0 1B0 1F1 1B1"]))
    # 0B1 has no forward at all: reported as missing, not as misordered.
    assert problem.rule == "missing forward" and problem.action == Action.parse("0F1")


def test_duplicate_forward():
    problem = only_problem(schedule_of(["0F0 0F0 0B0", "1F0 1B0"]))
    assert problem.rule == "duplicate F"
    assert (problem.rank, problem.index, problem.action) == (0, 1, Action.parse("0F0"))
    assert "#2" in str(problem)  # counted from 1, as CSV cells are


def test_w_before_i():
    problem = only_problem(schedule_of(["0F0 0W0 0I0", "1F0 1I0 1W0"]))
    assert problem.rule == "W before I"
    assert (problem.rank, problem.index, problem.action) == (0, 1, Action.parse("0W0"))


def test_backward_before_forward_on_a_rank():
    problem = only_problem(schedule_of(["0F0 0F1 0B0 0B1", "1F0 1B1 1F1 1B0 "]))
    assert problem.rule == "B before F"
    assert (problem.rank, problem.index, problem.action) == (1, 1, Action.parse("1B1"))
    assert str(problem).startswith("rank 1, action 1B1 (its #2): B before F")


def test_stage_on_two_ranks():
    problem = only_problem(schedule_of(["0F0 1F0 0B0", "1B0"]))
    assert problem.rule == "stage on two ranks"
    assert (problem.rank, problem.action) == (0, Action.parse("1F0"))
    assert "stage 1 lives on rank 1" in str(problem)


def test_w_without_i_and_i_without_w():
    rules = {p.rule for p in find_problems(schedule_of(["0F0 0F1 0I0 0B1 0W1"]))}
    assert rules == {"I without W", "W without I"}


def test_b_and_i_for_the_same_microbatch():
    rules = {p.rule for p in find_problems(schedule_of(["0F0 0B0 0I0 0W0"]))}
    assert "both B and I" in rules


def test_out_of_range():
    problem = only_problem(schedule_of(["0F0 0B0 0F5"], microbatches=1))
    assert problem.rule == "out of range" and problem.index == 2


def test_find_problems_lists_them_all_in_rank_order():
    problems = find_problems(schedule_of(["0F0 0F0 0B0 0B1", "1F0 1B0 1W1"]))
    assert [(p.rank, p.rule) for p in problems][:3] == [(0, "duplicate F"), (0, "missing forward"), (1, "W without I")]
    assert len(problems) >= 3  # and the missing forwards of microbatch 1
    assert all(isinstance(p, ValueError) for p in problems)


@pytest.mark.parametrize(
    "rows",
    [
        ["0F0 0F1 0B0", "1F0 1B0 1F1 1B1"],  # a backward missing
        ["0F0 0B0 0B1", "1F0 1B0 1F1 1B1"],  # a forward missing
        ["0F0 0F0 0B0 0B1", "1F0 1B0 1F1 1B1"],  # a forward twice, the counts right
        ["0F0 0F1 0B1 0B1", "1F0 1B0 1F1 1B1"],  # a backward twice, the counts right
        ["0F0 0F1 0B0 0B1", "1F0 1B1 1F1 1B0"],  # B before F
        ["0F0 0F1 0B0 0B1", "0F0 1F0 1B0 1F1"],  # a stage on two ranks
        ["0F0 0I0", "1F0 1I0 1W0"],  # an I without its W
        ["0F0 0W0 0I0", "1F0 1I0 1W0"],  # W before its I
        ["0I0 0F0 0W0", "1F0 1I0 1W0"],  # I before its F
        ["0F0 0B0 0I0 0W0", "1F0 1I0 1W0"],  # both B and I
        ["0F0 0F1 0I0 0I1 0W0 0W0", "1F0 1I0 1W0 1F1 1I1 1W1"],  # a W twice, the counts right
        ["0F0 0F1 0I0 0B1 0W1", "1F0 1I0 1W0 1F1 1I1 1W1"],  # a W whose backward is whole
        ["0F0 0F1 0I0 0I0 0W0 0W1", "1F0 1I0 1W0 1F1 1I1 1W1"],  # an I twice, the counts right
        ["0F0 0F1 0B0 0I0 0W0", "1F0 1I0 1W0 1F1 1I1 1W1"],  # B and I of one, no backward of the other
    ],
)
def test_screen_never_passes_what_the_detailed_checks_refuse(rows):
    schedule = schedule_of(rows, microbatches=2 if "1" in rows[0] else 1)
    assert not compute_rules_hold(schedule)
    assert find_problems(schedule)


@pytest.mark.parametrize(
    "rows",
    [
        ["0F0 0F2 0I0 0I2 0W0 0W2", "1F0 1I0 1W0 1F1 1I1 1W1"],  # microbatch 2 of 2, the counts right
        ["0F0 1F1 0I0 0I1 0W0 0W1", "1F0 1I0 1W0 1F1 1I1 1W1"],  # another rank's stage, the counts right
    ],
)
def test_the_split_screen_refuses_what_is_out_of_range_or_misplaced(rows):
    schedule = schedule_of(rows, microbatches=2)
    assert not compute_rules_hold(schedule)
    assert find_problems(schedule)


@pytest.mark.parametrize(
    "rows",
    [
        ["0F0 0I0 0W0", "1F0 1I0 1W0"],
        ["0F0 0F1 0I1 0I0 0W0 0W1", "1F0 1F1 1B0 1I1 1W1"],  # W in any order after its I; B and I on one rank
    ],
)
def test_screen_passes_split_backwards(rows):
    schedule = schedule_of(rows, microbatches=2 if "1" in rows[0] else 1)
    assert compute_rules_hold(schedule) and not find_problems(schedule)


def test_screen_agrees_with_the_detailed_checks_on_every_family(monkeypatch):
    """Where the screen passes a registry-built schedule, the per-action checks it stands in for find nothing."""
    from pipesim.schedules import build_schedule, schedule_names

    screened = 0
    for name in schedule_names():
        for ranks, microbatches in ((2, 4), (4, 8)):
            try:
                schedule = build_schedule(name, ranks, microbatches)
            except ValueError:  # a family that refuses this shape
                continue
            if compute_rules_hold(schedule):
                screened += 1
                with monkeypatch.context() as patched:
                    patched.setattr("pipesim.semantics.validate.compute_rules_hold", lambda _: False)
                    assert find_problems(schedule) == [], name
    assert screened >= 4  # 1f1b, gpipe, interleaved and the rest of the plain F/B families


def test_a_validated_schedule_is_marked_and_its_dependencies_are_the_same():
    from pipesim.semantics.dag import dependencies
    from pipesim.semantics.screen import is_validated

    schedule, fresh = one_f_one_b(4, 8), one_f_one_b(4, 8)
    assert not is_validated(schedule)
    validate(schedule)
    assert is_validated(schedule) and not is_validated(fresh) and schedule == fresh  # the mark is no field
    assert dependencies(schedule).deps == dependencies(fresh).deps
    broken = schedule_of(["0F0 0F1 0B0", "1F0 1B0 1F1 1B1"])
    with pytest.raises(ScheduleError):
        validate(broken)
    assert not is_validated(broken)


def _mutations(schedule) -> list:
    """Rank lists with one fault each: two neighbours swapped, one action dropped, repeated, or its kind changed."""
    import random

    from pipesim.ir import B, F, I, W

    rng, made = random.Random(7), []
    for _ in range(60):
        rows = [list(row) for row in schedule.actions]
        rank = rng.randrange(len(rows))
        row = rows[rank]
        k = rng.randrange(len(row) - 1)
        fault = rng.randrange(4)
        if fault == 0:
            row[k], row[k + 1] = row[k + 1], row[k]
        elif fault == 1:
            del row[k]
        elif fault == 2:
            row.insert(rng.randrange(len(row)), row[k])
        else:
            row[k] = Action(row[k].stage, rng.choice((F, B, I, W)), row[k].microbatch)
        shape = (schedule.num_ranks, schedule.num_microbatches, schedule.stage_to_rank)
        made.append(make_schedule("mutated", *shape, rows))
    return made


@pytest.mark.parametrize("name", ["zbv", "v-min", "v-half", "zb-h2", "dualpipe"])
def test_the_split_backward_screen_reports_what_the_detailed_check_does(name, monkeypatch) -> None:
    """A schedule with I and W passes the list-speed screens or gets the per-action check: the problems found are
    the same either way, on sound schedules and on ones with a fault."""
    from pipesim.schedules import build_schedule
    from pipesim.semantics import validate as module

    schedule = build_schedule(name, 4, 8)
    cases = [schedule, *_mutations(schedule)]
    screened = [[str(p) for p in find_problems(case)] for case in cases]
    monkeypatch.setattr(module, "_split_in_order", lambda row, position: False)
    monkeypatch.setattr(module, "compute_rules_hold", lambda schedule: False)
    detailed = [[str(p) for p in find_problems(case)] for case in cases]
    assert screened == detailed
    assert not screened[0] and sum(map(bool, screened)) > 40  # the faults are found

"""The public constructors refuse a wrong argument in one line naming it (a TypeError for a wrong type, a
ValueError for a bad value), and accept what they take: property-based over their arguments (hypothesis)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pipesim
from pipesim.ir import ActionKind

# anything a caller might pass by mistake
WRONG = st.one_of(
    st.none(),
    st.text(max_size=5),
    st.floats(allow_nan=True),
    st.booleans(),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=2), st.integers(), max_size=2),
    st.builds(object),
)
INDEX = st.integers(min_value=0, max_value=10**6)
KIND = st.sampled_from(list(ActionKind))


def _one_line_naming(error: BaseException, name: str) -> None:
    message = str(error)
    assert "\n" not in message and name in message, message


@given(stage=INDEX, kind=KIND, microbatch=INDEX)
def test_an_action_of_whole_numbers_and_a_kind_is_the_tuple(stage, kind, microbatch):
    action = pipesim.Action(stage, kind, microbatch)
    assert tuple(action) == (stage, kind, microbatch) and type(action.stage) is int
    action_class = pipesim.Action
    parse = action_class.parse  # the public class's own reader
    assert parse(str(action)) == action
    assert pipesim.Action(np.int64(stage), kind.value, np.int32(microbatch % 2**31)) == (
        stage,
        kind,
        microbatch % 2**31,
    )  # numpy integers and a kind's letter: the same action


@given(position=st.sampled_from(["stage", "kind", "microbatch"]), wrong=WRONG)
def test_an_action_refuses_a_wrong_argument_naming_it(position, wrong):
    arguments = {"stage": 1, "kind": ActionKind.FORWARD, "microbatch": 2, position: wrong}
    if position == "kind" and isinstance(wrong, str) and wrong in {"F", "B", "I", "W"}:
        return  # a kind's letter is a kind
    with pytest.raises(TypeError) as raised:
        pipesim.Action(**arguments)
    _one_line_naming(raised.value, position)


def _number(v: object) -> bool:
    return isinstance(v, float) and v == v


def _pairs(v: object) -> bool:
    return isinstance(v, (list, tuple)) and not v  # an empty list: no slow rank


# each constructor with one argument wrong, the name its message must give, and what it may take of WRONG
CONSTRUCTORS = {
    "Timeline num_ranks": (lambda v: pipesim.Timeline(v, ()), "num_ranks", lambda v: False),
    "Timeline spans": (lambda v: pipesim.Timeline(2, v), "spans", lambda v: isinstance(v, (list, tuple, dict))),
    "LinkCost latency": (lambda v: pipesim.LinkCost(latency_ms=v), "latency_ms", _number),
    "LinkCost bandwidth": (lambda v: pipesim.LinkCost(bandwidth_gbps=v), "bandwidth_gbps", _number),
    "CostModel stages": (lambda v: pipesim.CostModel(stages=v), "stages", lambda v: False),
    "StageCost forward": (lambda v: pipesim.StageCost(forward_ms=v, backward_ms=1.0), "forward_ms", _number),
    "Perturbation slow_ranks": (lambda v: pipesim.Perturbation(slow_ranks=v), "slow_ranks", _pairs),
    "PlanSpace schedules": (lambda v: pipesim.PlanSpace(schedules=v), "schedule", lambda v: False),
    "StageCost weight": (
        lambda v: pipesim.StageCost(1.0, 2.0, weight_ms=v),
        "weight_ms",
        lambda v: v is None or (_number(v) and 0 <= v <= 2),
    ),
    "PlanInputs units": (lambda v: pipesim.PlanInputs(v, 2, 8), "units", lambda v: False),
    "PlanInputs link": (
        lambda v: pipesim.PlanInputs((pipesim.StageCost(1.0, 2.0),), 2, 8, link=v),
        "link",
        lambda v: False,
    ),
    "ModelDescription layers": (lambda v: pipesim.ModelDescription(num_layers=v), "num_layers", lambda v: False),
}


@pytest.mark.parametrize("case", sorted(CONSTRUCTORS))
@settings(max_examples=40, deadline=None)
@given(wrong=WRONG)
def test_a_public_constructor_refuses_a_wrong_argument_naming_it(case, wrong):
    build, name, takes = CONSTRUCTORS[case]
    try:
        build(wrong)
    except (TypeError, ValueError) as error:
        _one_line_naming(error, name)
    else:  # taken: it must be a value of the right kind after all
        assert takes(wrong), f"{case} took {wrong!r}"


@given(latency=st.floats(0, 1e3), bandwidth=st.floats(1e-3, 1e4))
def test_a_link_of_numbers_is_taken(latency, bandwidth):
    link = pipesim.LinkCost(latency, bandwidth)
    assert link.transfer_ms(0) == latency


@pytest.mark.parametrize(
    ("args", "named"),
    [
        ((None, 2, 2, 2, (0, 1), ((), ())), "name"),
        (("x", 2.0, 2, 2, (0, 1), ((), ())), "num_ranks"),
        (("x", 2, 2, None, (0, 1), ((), ())), "num_microbatches"),
        (("x", 2, 2, 2, [0, 1], ((), ())), "stage_to_rank"),
        (("x", 2, 2, 2, (0, 1), [[], []]), "actions"),
    ],
)
def test_a_schedule_of_wrong_types_is_refused_naming_the_argument(args, named) -> None:
    with pytest.raises(TypeError, match=named):
        pipesim.Schedule(*args)

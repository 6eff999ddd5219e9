"""Each in-situ stage's own factor: a stage of the very cut the in-situ steps ran is priced with the
factor measured on it, any other stage with its class's median over the stages."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pipesim.cost.profile import InSituTerms
from pipesim.io.cost_file import load_cost_file, save_profile
from tests.test_unit_profile import profile


def with_stage_factors():
    """The test profile with the plain class's first stage (units 0..2 at size 2) measured 1.5x its price in B and
    the last (units 3..5) 0.9x: the ends of a model whose embedding and head dominate."""
    base = profile()
    plain = replace(
        base.in_situ["plain"],
        stages={(2, 0, 3): {"backward_ms": 1.5}, (2, 3, 6): {"backward_ms": 0.9, "forward_ms": 1.2}},
    )
    return replace(base, in_situ={**base.in_situ, "plain": plain})


def test_a_stage_of_the_measured_cut_takes_its_own_factor_any_other_the_class_factor():
    terms = with_stage_factors().in_situ["plain"]
    assert terms.factor("backward_ms", 2, 0, 3) == 1.5
    assert terms.factor("backward_ms", 2, 3, 6) == 0.9 and terms.factor("forward_ms", 2, 3, 6) == 1.2
    assert terms.factor("backward_ms", 2) == pytest.approx(1.1)  # no stage named: the class's
    assert terms.factor("backward_ms", 2, 0, 2) == pytest.approx(1.1)  # another cut
    assert terms.factor("backward_ms", 4, 0, 3) == pytest.approx(1.0)  # another size
    assert terms.factor("forward_ms", 2, 0, 3) == 1.0  # a kind that stage did not measure: the class's (none: 1)


def test_the_planner_prices_the_measured_cut_with_its_stages_factors():
    plain, staged = profile(), with_stage_factors()
    for (start, stop), own in (((0, 3), 1.5), ((3, 6), 0.9)):
        before = plain.stage_kinds(2, start, stop, plain.in_situ["plain"])["backward_ms"]
        after = staged.stage_kinds(2, start, stop, staged.in_situ["plain"])["backward_ms"]
        assert after / before == pytest.approx(own / 1.1)
    other_cut = (1, 4)
    assert staged.stage_kinds(2, *other_cut, staged.in_situ["plain"]) == plain.stage_kinds(
        2, *other_cut, plain.in_situ["plain"]
    )


def test_stage_factors_round_trip_and_a_file_without_them_still_loads(tmp_path):
    path = tmp_path / "cost.json"
    save_profile(with_stage_factors(), path)
    data = json.loads(path.read_text())
    assert data["in_situ"]["plain"]["stages"][0] == {
        "microbatch_size": 2, "start": 0, "stop": 3, "factors": {"backward_ms": 1.5}
    }  # fmt: skip
    assert load_cost_file(path) == with_stage_factors()
    del data["in_situ"]["plain"]["stages"]
    path.write_text(json.dumps(data))
    assert load_cost_file(path) == profile()
    for bad, message in (
        ({"microbatch_size": 2, "start": 0, "stop": 9, "factors": {}}, "units 0..8"),
        ({"microbatch_size": 3, "start": 0, "stop": 2, "factors": {}}, "at a profiled size"),
        ({"microbatch_size": 2, "start": 0, "stop": 2, "factors": {"speed": 1.0}}, "unknown fields"),
        ({"microbatch_size": 2, "start": 0, "stop": 2, "factors": {"forward_ms": -1}}, "factors.forward_ms"),
        ({"microbatch_size": 2, "start": 0, "factors": {}}, "missing"),
        ({"microbatch_size": True, "start": 0, "stop": 2, "factors": {}}, "whole number"),
    ):
        data["in_situ"]["plain"]["stages"] = [bad]
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match=message):
            load_cost_file(path)
    with pytest.raises(ValueError, match="unknown kind"):
        InSituTerms(stages={(2, 0, 1): {"speed": 1.0}})
    with pytest.raises(ValueError, match=r"\(microbatch size, first unit, unit past the last\)"):
        InSituTerms(stages={(2, 0): {"forward_ms": 1.0}})


def test_the_profile_groups_each_classes_stage_ratios():
    from pipesim_executor.rank.unit_fit import stage_factors

    def row(cls, size, start, stop, kind, ratio):
        return {"class": cls, "size": size, "start": start, "stop": stop, "kind": kind, "ratio": ratio}

    rows = [
        row("split", 2, 0, 3, "input_ms", 1.4), row("split", 2, 3, 6, "input_ms", 0.86),
        row("split", 2, 0, 3, "weight_ms", 1.2), row("split", 2, 0, 3, "weight_ms", 1.0),  # recompute's W too
        row("plain", 2, 0, 3, "backward_ms", 1.3),
    ]  # fmt: skip
    assert stage_factors(rows, "split") == {
        (2, 0, 3): {"input_ms": 1.4, "weight_ms": pytest.approx(1.1)}, (2, 3, 6): {"input_ms": 0.86}
    }  # fmt: skip
    assert stage_factors(rows, "plain-chunked") == {}

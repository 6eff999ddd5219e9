"""The profile's check against its own in-situ steps (pipesim.analysis.profile_check) and how the launches'
in-situ steps merge (pipesim_executor.host.profile_merge.merged_in_situ_steps)."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest

from pipesim.analysis.profile_check import (
    check_line,
    check_summary,
    in_situ_step_rows,
    recorded_check,
)
from pipesim.api import plan_candidates
from pipesim.cli.main import main as pipesim_main
from pipesim.io.cost_file import save_profile
from pipesim.plan.in_situ_check import check_profile
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.search import PlanSpace
from pipesim_executor.host.profile_merge import merge_profiles, merged_in_situ_steps
from pipesim_executor.host.unit_profile import checked_profile
from tests.test_unit_profile import profile as unit_profile_fixture


def planned(p, schedule: str, size: int, microbatches: int, recompute: bool, chunks: int = 1):
    """The planner's own candidate for one configuration (what the check must compare with)."""
    inputs = PlanInputs.from_profile(p, devices=2, global_batch=size * microbatches, optimizer="sgd")
    space = PlanSpace(schedules=(schedule,), microbatch_sizes=(size,), chunks=tuple(sorted({1, chunks})))
    found = [
        c
        for c in plan_candidates(inputs, space, prune=False)
        if c.recompute == recompute and c.virtual_stages == chunks and c.error is None
    ]
    return found[0]


def row(candidate, step_ms: list[float], **changes) -> dict:
    base = {
        "microbatch_size": candidate.microbatch_size, "schedule": candidate.schedule,
        "chunks": candidate.virtual_stages, "recompute": candidate.recompute, "split_backward": False,
        "split_points": list(candidate.split), "microbatches": candidate.microbatches, "ranks": 2,
        "optimizer": "sgd", "step_ms": step_ms,
    }  # fmt: skip
    return {**base, **changes}


def with_steps(p, rows: list[dict]):
    return replace(p, provenance={**p.provenance, "in_situ": {"measured_steps": rows}})


def test_each_in_situ_configuration_is_set_beside_the_planners_prediction_of_it():
    p = unit_profile_fixture()
    one = planned(p, "1f1b", 2, 4, False)
    other = planned(p, "gpipe", 4, 2, True)
    rows = [
        row(one, [one.step_ms * 1.10] * 4 + [one.step_ms * 5]),  # the median, not the mean: one slow step
        row(other, [other.step_ms * 0.95] * 3),
        row(one, [one.step_ms] * 2),  # too few steps to check
        row(one, [one.step_ms] * 5, split_points=[0]),  # a cut the planner does not pick: not this candidate
        {"schedule": "1f1b", "step_ms": "garbage"},  # malformed: skipped
    ]
    checked = check_profile(with_steps(p, rows))
    assert [(c.schedule, c.microbatch_size, c.recompute, c.steps) for c in checked] == [
        ("1f1b", 2, False, 5),
        ("gpipe", 4, True, 3),
    ]
    assert checked[0].measured_ms == pytest.approx(one.step_ms * 1.10)
    assert checked[0].predicted_ms == pytest.approx(one.step_ms)
    assert checked[0].error == pytest.approx(1 / 1.10 - 1)
    assert checked[1].error == pytest.approx(1 / 0.95 - 1)
    summary = check_summary(checked)
    assert summary["configurations"] == 2
    assert summary["largest_error"] == pytest.approx(1 - 1 / 1.10)
    assert summary["bias"] == pytest.approx(math.sqrt((1 / 1.10) * (1 / 0.95)) - 1)
    assert len(summary["rows"]) == 2 and json.dumps(summary)  # it goes into the cost file as it is
    line = check_line(summary)[0]
    assert "its own 2 in-situ configurations" in line and f"{summary['largest_error']:.1%} at most" in line


def test_an_exact_profile_checks_to_zero_and_a_profile_without_steps_to_nothing():
    p = unit_profile_fixture()
    one = planned(p, "zb-h1", 1, 4, False)
    checked = check_profile(with_steps(p, [row(one, [one.step_ms] * 6, split_backward=True)]))
    assert len(checked) == 1 and checked[0].error == pytest.approx(0.0, abs=1e-12)
    assert check_profile(p) == [] and check_summary([]) is None and check_line(None) == []
    assert in_situ_step_rows(None) == [] and in_situ_step_rows({"in_situ": {"measured_steps": "x"}}) == []


def test_the_check_goes_into_the_cost_file_and_never_costs_the_profile(tmp_path):
    p = unit_profile_fixture()
    one = planned(p, "1f1b", 2, 4, False)
    cost = tmp_path / "cost.json"
    cost.write_text(json.dumps({"provenance": {"device": "cpu"}, "units": []}))
    checked = checked_profile(with_steps(p, [row(one, [one.step_ms * 1.2] * 3)]), cost)
    written = json.loads(cost.read_text())["provenance"]["check"]
    assert written["configurations"] == 1 and checked.provenance["check"]["bias"] == pytest.approx(1 / 1.2 - 1)
    cost.write_text("{not json")  # a file the check cannot rewrite: the profile comes back unchecked, not lost
    assert "check" not in checked_profile(with_steps(p, [row(one, [one.step_ms] * 3)]), cost).provenance
    assert checked_profile(p, cost) is p  # nothing to check: untouched


def test_every_launchs_in_situ_steps_merge_per_configuration_in_launch_order():
    def document(level: float, rows: list[dict]) -> dict:
        return {"provenance": {"measured_at": str(level), "in_situ": {"measured_steps": rows}}, "dispatch_ms": level}

    a = {"microbatch_size": 2, "schedule": "1f1b", "chunks": 1, "recompute": False, "split_backward": False,
         "split_points": [3], "microbatches": 8, "ranks": 2, "optimizer": "sgd"}  # fmt: skip
    b = {**a, "recompute": True}
    first = document(1.0, [{**a, "step_ms": [1.0, 2.0]}, {**b, "step_ms": [5.0]}])
    second = document(1.1, [{**b, "step_ms": [6.0]}, {**a, "step_ms": [3.0]}, "junk"])
    steps = merged_in_situ_steps([first, second])
    assert [(s["recompute"], s["step_ms"]) for s in steps] == [(False, [1.0, 2.0, 3.0]), (True, [5.0, 6.0])]
    merged = merge_profiles([first, second])
    assert merged["provenance"]["in_situ"]["measured_steps"] == steps
    assert first["provenance"]["in_situ"]["measured_steps"][0]["step_ms"] == [1.0, 2.0]  # the launches' own left alone


def test_the_plan_says_the_recorded_check_and_reads_nothing_from_a_forged_one(tmp_path, capsys):
    p = unit_profile_fixture()
    one = planned(p, "1f1b", 2, 4, False)
    summary = check_summary(check_profile(with_steps(p, [row(one, [one.step_ms * 1.05] * 4)])))
    path, out = tmp_path / "cost.json", tmp_path / "plan.json"
    save_profile(replace(p, provenance={**p.provenance, "check": summary}), path)
    argv = ["plan", "--cost", str(path), "--devices", "2", "--global-batch", "8", "--optimizer", "sgd"]
    assert pipesim_main([*argv, "--microbatch-sizes", "1,2", "--json", str(out)]) == 0
    assert "check    the profile predicts its own 1 in-situ configurations" in capsys.readouterr().out
    recorded = json.loads(out.read_text())["calibration"]["check"]
    assert recorded["configurations"] == 1 and recorded["bias"] == pytest.approx(1 / 1.05 - 1)
    assert "rows" not in recorded  # the figures, not every row
    save_profile(p, path)  # a profile from before the check: no line, no figures
    assert pipesim_main([*argv, "--microbatch-sizes", "1,2", "--json", str(out)]) == 0
    assert "check " not in capsys.readouterr().out and json.loads(out.read_text())["calibration"]["check"] is None


@pytest.mark.parametrize(
    "forged",
    [
        "a sentence",
        {"configurations": 0, "median_error": 0.1, "largest_error": 0.1, "bias": 0.0},
        {"configurations": True, "median_error": 0.1, "largest_error": 0.1, "bias": 0.0},
        {"configurations": 3, "median_error": float("nan"), "largest_error": 0.1, "bias": 0.0},
        {"configurations": 3, "median_error": "1%", "largest_error": 0.1, "bias": 0.0},
        {"configurations": 3, "median_error": 0.1, "largest_error": 0.1},
    ],
)
def test_a_forged_check_is_not_read(forged):
    assert recorded_check({"check": forged}) is None


def test_counts_that_do_not_add_up_are_dropped_not_shown():
    base = {"configurations": 4, "median_error": 0.02, "largest_error": 0.05, "bias": -0.01}
    assert recorded_check({"check": {**base, "inside": 3, "with_interval": 4}})["inside"] == 3
    for inside, with_interval in ((5, 4), (4, 3), (-1, 4), ("3", 4)):
        got = recorded_check({"check": {**base, "inside": inside, "with_interval": with_interval}})
        assert got["inside"] is None and got["with_interval"] == 0
        assert "inside their 90% interval" not in check_line(got)[0]


def test_forged_in_situ_rows_are_skipped_and_never_planned_big():
    p = unit_profile_fixture()
    one = planned(p, "1f1b", 2, 4, False)
    good = row(one, [one.step_ms] * 4)
    forged = [
        {**good, "schedule": 5},
        {**good, "schedule": "no-such-schedule"},
        {**good, "chunks": "x"},
        {**good, "ranks": 10**6},
        {**good, "microbatches": True},
        {**good, "microbatch_size": 8},  # beyond the profiled sizes: the planner refuses it, the check skips it
        {**good, "optimizer": ["sgd"]},  # an unreadable optimizer: the profile's first
    ]
    checked = check_profile(with_steps(p, forged))
    assert [(c.schedule, c.microbatch_size) for c in checked] == [("1f1b", 2)]  # only the last row is well formed
    assert in_situ_step_rows({"in_situ": {"measured_steps": {"a": good}}}) == []

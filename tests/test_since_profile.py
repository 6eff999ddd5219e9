"""How far the machine moved between a profile and the verification of its plan (pipesim.analysis.since_profile):
the runs' medians over the profile's own in-situ medians of the same configurations, pooled with a t-interval; and
verify-plan's reading of it from the plan's profile (pipesim_executor.host.verify._since_profile)."""

from __future__ import annotations

import json
import math

import pytest

from pipesim.analysis.profile_check import CheckedStep
from pipesim.analysis.since_profile import config_key, since_profile
from pipesim.analysis.stats import t_quantile
from pipesim.io.cost_file import save_profile
from pipesim.plan.in_situ_check import check_profile
from pipesim_executor.host.verify import _since_profile
from pipesim_executor.host.verify_compare import VerifyRow, compare, summary_lines
from tests.test_profile_check import planned, row, with_steps
from tests.test_unit_profile import profile as unit_profile_fixture


def step(schedule: str, size: int, measured: float, predicted: float, split=(3,)) -> CheckedStep:
    return CheckedStep(schedule, size, 16 // size, False, tuple(split), 10, measured, predicted, None, None)


def test_the_shared_configurations_pool_to_a_geometric_mean_with_a_t_interval():
    checked = [step("1f1b", 2, 50.0, 48.0), step("zb-h1", 2, 40.0, 40.0), step("gpipe", 4, 30.0, 33.0)]
    checked.append(step("1f1b", 4, 20.0, 20.0))  # not verified: left out
    moves = [1.05, 1.07, 1.03]
    measured = {
        config_key(s.schedule, s.microbatch_size, s.microbatches, s.recompute, s.split_points): s.measured_ms * m
        for s, m in zip(checked, moves, strict=False)
    }
    got = since_profile(checked, measured)
    logs = [math.log(m) for m in moves]
    centre = sum(logs) / 3
    half = t_quantile(0.95, 2) * math.sqrt(sum((v - centre) ** 2 for v in logs) / 2) / math.sqrt(3)
    assert got.configurations == 3 and got.ratio == pytest.approx(math.exp(centre))
    assert (got.low, got.high) == pytest.approx((math.exp(centre - half), math.exp(centre + half)))
    assert got.check_bias == pytest.approx((48 / 50 * 1.0 * 33 / 30) ** (1 / 3) - 1)
    assert got.low > 1 and "moved between them" in got.line() and "1.050x" in got.line()
    assert json.dumps(got.to_dict())


def test_no_move_is_said_so_one_configuration_has_no_interval_and_none_shared_is_none():
    checked = [step("1f1b", 2, 50.0, 50.0), step("zb-h1", 2, 40.0, 40.0)]
    keys = [config_key(s.schedule, s.microbatch_size, s.microbatches, s.recompute, s.split_points) for s in checked]
    same = since_profile(checked, {keys[0]: 51.0, keys[1]: 39.0})  # two readings: t(1) makes it wide
    assert same.low < 1 < same.high and "not informative" in same.line()
    more = [*checked, step("gpipe", 2, 30.0, 30.0), step("1f1b", 4, 20.0, 20.0)]
    more_keys = [config_key(s.schedule, s.microbatch_size, s.microbatches, s.recompute, s.split_points) for s in more]
    held = since_profile(more, dict(zip(more_keys, (50.5, 39.8, 30.2, 19.9), strict=True)))
    assert held.low < 1 < held.high and "did not move measurably" in held.line()
    one = since_profile(checked, {keys[0]: 55.0})
    assert one.configurations == 1 and one.low is None and one.ratio == pytest.approx(1.1)
    assert "1 configuration (" in one.line()
    assert since_profile(checked, {config_key("gpipe", 2, 8, False, (3,)): 50.0}) is None
    assert since_profile(checked, {keys[0]: 0.0}) is None  # a zero median is no reading


def test_verify_plan_reads_the_move_from_the_plans_profile_and_says_it(tmp_path):
    """The plan's cost_file is the profile: its in-situ steps of the verified configurations are read beside the
    runs; the line and the JSON carry it; a profile that is gone is a note, not a failure."""
    p = unit_profile_fixture()
    one, other = planned(p, "1f1b", 2, 4, False), planned(p, "gpipe", 4, 2, True)
    profile = with_steps(p, [row(one, [10.0] * 5), row(other, [20.0] * 5)])
    path = tmp_path / "cost.json"
    save_profile(profile, path)
    rows = []
    for candidate, measured in ((one, 11.0), (other, 22.4)):
        c = {"schedule": candidate.schedule, "microbatch_size": candidate.microbatch_size,
             "microbatches": candidate.microbatches, "recompute": candidate.recompute,
             "split": list(candidate.split)}  # fmt: skip
        rows.append(VerifyRow(candidate.label, c, candidate.step_ms, measured))
    notes: list[str] = []
    got = _since_profile({"inputs": {"cost_file": str(path)}}, rows, notes)
    assert got.configurations == 2 and got.ratio == pytest.approx(math.sqrt(1.1 * 1.12)) and not notes
    checked = check_profile(profile)
    assert got.check_bias == pytest.approx(math.sqrt(math.prod(c.predicted_ms / c.measured_ms for c in checked)) - 1)
    verification = compare(rows)
    verification.since_profile = got
    assert verification.to_dict()["since_profile"]["configurations"] == 2
    assert any(line.startswith("since the profile: these runs took 1.110x") for line in summary_lines(verification))
    assert _since_profile({"inputs": {"model": {}}}, rows, notes) is None and not notes  # a description's plan
    path.unlink()
    assert _since_profile({"inputs": {"cost_file": str(path)}}, rows, notes) is None
    assert len(notes) == 1 and "cannot be read" in notes[0] and str(path) in notes[0]


def test_an_interval_too_wide_to_tell_is_said_so_never_did_not_move() -> None:
    """Two noisy configurations gave 0.836x [0.043, 16.274] on a busy machine: no move is measured, and none
    can be ruled out either; a narrow interval around 1 is the machine holding still."""
    from pipesim.analysis.since_profile import SinceProfile

    wide = SinceProfile(configurations=2, ratio=0.836, low=0.043, high=16.274, check_bias=-0.264).line()
    assert "not informative" in wide and "did not move" not in wide
    narrow = SinceProfile(configurations=9, ratio=1.01, low=0.98, high=1.04, check_bias=0.0).line()
    assert "did not move measurably" in narrow

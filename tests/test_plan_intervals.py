"""The planner's predictions with their intervals, and the sizes it may predict at all: a profile keeps
its spread (and a file without one still loads), candidates that can win are sampled (their point is the median
of the draws, inside their interval), a size outside the profile is refused with the command that measures it, or
planned and marked extrapolated, with a wider interval, and never recommended while a measured size fits."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from pipesim.cli.main import main
from pipesim.cost.profile import TIME_KINDS, SizeCurve
from pipesim.io.cost_file import load_cost_file, save_profile
from pipesim.ir import ActionKind
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.intervals import IntervalOptions, attach_intervals
from pipesim.plan.report import best_candidate, ranked
from pipesim.plan.search import PlanSpace, evaluate_all
from pipesim.sim.spread import EXTRAPOLATION_SE, profile_spread
from tests.test_unit_profile import SIZES, profile


def with_spread(cv: float = 0.1, repeats: int = 20):
    curves = {kind: SizeCurve(SIZES, (cv * 1.5, cv, cv), monotone=False) for kind in TIME_KINDS}
    return replace(profile(), spread=curves, spread_repeats=repeats)


def test_the_spread_round_trips_and_a_file_without_it_still_loads(tmp_path):
    path = tmp_path / "cost.json"
    save_profile(with_spread(), path)
    data = json.loads(path.read_text())
    assert data["spread"]["repeats"] == 20 and data["spread"]["cv"]["forward_ms"] == pytest.approx([0.15, 0.1, 0.1])
    assert load_cost_file(path) == with_spread()
    del data["spread"]
    path.write_text(json.dumps(data))
    old = load_cost_file(path)
    assert old.spread == {} and old.spread_repeats == 0 and profile_spread(old, 2, False, False) is None
    data["spread"] = {"repeats": 3, "cv": {"forward_ms": [0.1, 0.1]}}
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="spread.cv.forward_ms must list one factor per microbatch size"):
        load_cost_file(path)


def test_a_size_outside_the_profile_reads_a_wider_spread():
    inside = profile_spread(with_spread(), 4, True, False)
    outside = profile_spread(with_spread(), 8, True, False)
    assert outside.cv == inside.cv  # the nearest profiled size's jitter
    further = profile_spread(with_spread(), 16, True, False)
    for kind, se in inside.price_se.items():
        assert outside.price_se[kind] == pytest.approx((se**2 + EXTRAPOLATION_SE**2) ** 0.5)  # one doubling past 4
        assert further.price_se[kind] == pytest.approx((se**2 + (2 * EXTRAPOLATION_SE) ** 2) ** 0.5)  # two


def plan(prof, sizes=(1, 2, 4), extrapolate=False, cap=None):
    inputs = PlanInputs.from_profile(prof, devices=2, global_batch=16, optimizer="sgd", memory_cap_bytes=cap)
    space = PlanSpace(schedules=("gpipe", "1f1b", "zb-h1"), microbatch_sizes=sizes, extrapolate=extrapolate)
    return inputs, attach_intervals(inputs, evaluate_all(inputs, space))


def test_candidates_that_can_win_carry_their_interval_and_are_ranked_by_the_sampled_point():
    inputs, candidates = plan(with_spread())
    sampled = [c for c in candidates if c.step_ms_p05 is not None]
    assert sampled and all(c.step_ms_p05 <= c.step_ms <= c.step_ms_p95 for c in sampled)
    # the jitter penalty: the slowest of noisy actions (draws of mean the price, whose median sits below it)
    assert all(0.97 * c.step_ms_deterministic <= c.step_ms <= 1.3 * c.step_ms_deterministic for c in sampled)
    best = best_candidate(candidates)
    assert best.step_ms_p05 is not None
    fitting = [c for c in candidates if c.error is None and c.fits]
    assert best.step_ms == min(c.step_ms for c in fitting)
    again = plan(with_spread())[1]
    assert [c.step_ms for c in again] == [c.step_ms for c in candidates]  # seeded: the same plan twice
    document = best.to_dict()
    for key in ("step_ms", "step_ms_p05", "step_ms_p95", "extrapolated"):
        assert key in document


def test_without_a_spread_a_plan_keeps_its_prices_unless_given_a_jitter():
    inputs, candidates = plan(profile())
    assert all(c.step_ms_p05 is None for c in candidates)
    jittered = attach_intervals(inputs, evaluate_all(inputs, PlanSpace(schedules=("1f1b",), microbatch_sizes=(2,))),
                                IntervalOptions(jitter=0.2, samples=50))  # fmt: skip
    assert all(c.step_ms_p05 is not None for c in jittered if c.error is None)


def test_a_size_outside_the_profile_is_refused_with_the_command_that_measures_it(tmp_path, capsys):
    with pytest.raises(ValueError, match=r"--microbatch-sizes 1,2,4,8`.*--extrapolate"):
        plan(with_spread(), sizes=(2, 8))
    path, out = tmp_path / "cost.json", tmp_path / "plan.json"
    save_profile(with_spread(), path)
    argv = ["plan", "--cost", str(path), "--devices", "2", "--global-batch", "16", "--optimizer", "sgd"]
    assert main([*argv, "--microbatch-sizes", "2,8", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "microbatch size 8 lies outside the profiled sizes 1,2,4" in err and "profile --microbatch-sizes" in err
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    assert main([*argv, "--json", str(out)]) == 0  # default: the profile's own sizes
    assert {c["microbatch_size"] for c in json.loads(out.read_text())["candidates"]} == set(SIZES)


def test_an_extrapolated_size_is_marked_wider_and_never_recommended_while_a_measured_one_fits(tmp_path, capsys):
    inputs, candidates = plan(with_spread(), sizes=(2, 4, 8), extrapolate=True)
    outside = [c for c in candidates if c.error is None and c.microbatch_size == 8]
    assert outside and all(c.extrapolated and "extrapolated" in c.label for c in outside)
    assert not any(c.extrapolated for c in candidates if c.microbatch_size != 8)
    best = best_candidate(candidates)
    assert not best.extrapolated
    assert [c.extrapolated for c in ranked(candidates) if c.fits] == sorted(
        c.extrapolated for c in ranked(candidates) if c.fits
    )
    same = {(c.schedule, c.recompute): c for c in candidates if c.microbatch_size == 4 and c.error is None}
    for c in outside:
        twin = same.get((c.schedule, c.recompute))
        if twin is not None and c.step_ms_p05 is not None and twin.step_ms_p05 is not None:
            assert (c.step_ms_p95 - c.step_ms_p05) / c.step_ms > (twin.step_ms_p95 - twin.step_ms_p05) / twin.step_ms
    path, out = tmp_path / "cost.json", tmp_path / "plan.json"
    save_profile(with_spread(), path)
    argv = ["plan", "--cost", str(path), "--devices", "2", "--global-batch", "16", "--optimizer", "sgd"]
    assert main([*argv, "--microbatch-sizes", "2,4,8", "--extrapolate", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "extrapolated: wider intervals, never recommended" in printed
    plan_json = json.loads(out.read_text())
    assert plan_json["best"]["extrapolated"] is False
    assert any(c["extrapolated"] for c in plan_json["candidates"])


def test_the_recommendation_skips_a_faster_extrapolated_candidate_while_a_measured_one_fits():
    _, candidates = plan(with_spread(), sizes=(2, 4))
    fitting = sorted((c for c in candidates if c.error is None and c.fits), key=lambda c: c.step_ms)
    fastest, runner_up = fitting[0], fitting[1]
    fastest.extrapolated = True
    assert best_candidate(candidates) is runner_up
    for c in candidates:
        c.extrapolated = c.error is None
    assert best_candidate(candidates) is fastest  # no measured size fits: the extrapolated one, said so


def test_the_plan_figure_draws_each_interval_and_crosses_an_extrapolated_size():
    from pipesim.charts.plan import pareto_figure
    from pipesim.plan.report import pareto_front

    _, candidates = plan(with_spread(), sizes=(2, 4, 8), extrapolate=True)
    figure = pareto_figure(candidates, pareto_front(candidates), best_candidate(candidates), None)
    drawn = [(x, low, high, symbol) for trace in figure.data if trace.error_x.visible
             for x, low, high, symbol in zip(trace.x, trace.error_x.arrayminus, trace.error_x.array,
                                             trace.marker.symbol, strict=True)]  # fmt: skip
    sampled = [c for c in candidates if c.step_ms_p05 is not None]
    assert len(drawn) >= len(sampled) > 0
    for c in sampled:
        assert (c.step_ms, c.step_ms - c.step_ms_p05, c.step_ms_p95 - c.step_ms) in [d[:3] for d in drawn]
    assert "x" in [d[3] for d in drawn]  # the extrapolated ones


def test_an_in_situ_factors_ci_widens_the_price_uncertainty_of_its_class_and_round_trips(tmp_path):
    """The interval carries the profile's own uncertainty: the in-situ factor of a class known to +-20% adds a
    standard error of 0.2 / 1.96 to the price of the kinds it scales, for that class only."""
    base = with_spread()
    plain = base.in_situ["plain"]
    ci = {"backward_ms": SizeCurve(SIZES, (0.2, 0.2, 0.2), monotone=False)}
    widened = replace(base, in_situ={**base.in_situ, "plain": replace(plain, ci=ci)})
    before = profile_spread(base, 2, False, False)
    after = profile_spread(widened, 2, False, False)
    backward = ActionKind.BACKWARD
    assert after.price_se[backward] == pytest.approx((before.price_se[backward] ** 2 + (0.2 / 1.96) ** 2) ** 0.5)
    assert after.price_se[ActionKind.FORWARD] == before.price_se[ActionKind.FORWARD]
    assert profile_spread(widened, 2, True, False) == profile_spread(base, 2, True, False)  # another class
    path = tmp_path / "cost.json"
    save_profile(widened, path)
    assert load_cost_file(path) == widened


def test_the_in_situ_factors_ci_is_a_seeded_bootstrap_that_narrows_with_more_steps():
    from pipesim_executor.rank.calibrate import median_ci
    from pipesim_executor.rank.unit_fit import ci_curves, factor_cis

    noisy = [10.0 + (i * 7 % 5) * 0.5 for i in range(8)]
    assert median_ci(noisy) == median_ci(noisy)  # seeded
    assert median_ci(noisy * 6) < median_ci(noisy)  # more steps, a narrower interval
    assert median_ci([1.0, 2.0]) == float("inf") and median_ci([0.0, 0.0, 0.0]) == 0.0
    rows = [{"class": "plain", "kind": "backward_ms", "size": s, "stage": st, "ratio": 1.1, "ci": ci, "steps": 7}
            for s, st, ci in ((1, 0, 0.02), (1, 1, 0.05), (2, 0, None))]  # fmt: skip
    cis = factor_cis(rows)
    assert [(r["size"], r["ci"]) for r in cis] == [(1, 0.05), (2, None)]  # the widest stage; unknown stays unknown
    curves = ci_curves(cis, "plain", (1, 2, 4))
    assert curves["backward_ms"].values == (0.05, 0.05, 0.05)  # unknown or unmeasured sizes: the widest known


def test_the_rounds_standard_error_is_the_spread_of_the_round_medians():
    """Rounds of constant steps at 10, 11 and 12 ms: the round medians' standard deviation is 1, their mean 11, so
    the price's relative standard error is 1 / 11 / sqrt(3); one round, or rounds that agree, give 0."""
    from pipesim_executor.rank.unit_fit import round_se

    assert round_se([10.0] * 4 + [11.0] * 4 + [12.0] * 4, 3) == pytest.approx(1 / 11 / 3**0.5)
    assert round_se([10.0, 11.0, 12.0], 1) == 0.0 and round_se([5.0] * 9, 3) == 0.0
    jittery = [10.0, 14.0, 9.0, 13.0] * 3  # each round the same four steps: wide spread, no drift
    assert round_se(jittery, 3) == 0.0


def test_a_profile_whose_rounds_drift_carries_the_drift_into_the_price_uncertainty(tmp_path):
    """The repetitions of one round are not independent (a slow minute slows the whole round): where the rounds'
    standard error is larger than the repetitions' (1.2533 x CV / sqrt(repeats)), the price is as uncertain as the
    rounds say; where smaller, the repetitions' stands. Round trip through the cost file; a file without it loads."""
    base = with_spread(cv=0.1, repeats=20)  # the repetitions' SE at size 2: 1.2533 x 0.1 / sqrt(20) = 2.8%
    drifting = replace(base, spread_round_se={k: SizeCurve(SIZES, (0.06, 0.06, 0.01), monotone=False)
                                              for k in TIME_KINDS})  # fmt: skip
    before, after = profile_spread(base, 2, False, False), profile_spread(drifting, 2, False, False)
    assert after.price_se[ActionKind.FORWARD] == pytest.approx(0.06)
    assert after.cv == before.cv
    assert profile_spread(drifting, 4, False, False) == profile_spread(base, 4, False, False)  # 1% < 2.8%
    path = tmp_path / "cost.json"
    save_profile(drifting, path)
    assert json.loads(path.read_text())["spread"]["round_se"]["forward_ms"] == pytest.approx([0.06, 0.06, 0.01])
    assert load_cost_file(path) == drifting
    save_profile(base, path)
    assert "round_se" not in json.loads(path.read_text())["spread"] and load_cost_file(path) == base

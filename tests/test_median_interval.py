"""Intervals of a measured median: a verification reports the median of many steps over several launches, which
moves far less than one step. The machine's term averages over the measurement's launches (and a profile of one
launch cannot split it), the actions' own jitter over its steps, and the draws still hold the deterministic step
bit for bit without a spread. A simulated verification lands inside the interval about 90% of the time."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from pipesim.cli.main import main
from pipesim.io.cost_file import load_cost_file, save_profile
from pipesim.schedules import build_schedule
from pipesim.sim.jitter import sampled_steps, step_interval
from pipesim.sim.spread import ONE_STEP, VERIFIED, Measurement, Spread, machine_cv
from pipesim.sim.steps import simulate_step
from pipesim_executor.host.verify import _interval_notes
from tests.test_jitter import uneven
from tests.test_plan_intervals import with_spread


def test_the_machine_term_averages_over_the_measured_launches_but_keeps_the_profiles_level_error():
    # a profile of two launches whose levels sat 0.10 apart (SD) and drifted 0.08 within a launch
    within, between, launches = 0.08, 0.10, 2
    drift = math.sqrt(within**2 + between**2 * (1 + 1 / launches))
    merged = replace(with_spread(), spread_drift=drift, spread_launch=between, spread_launches=launches)
    assert machine_cv(merged, 1) == drift  # one step: the profile's own figure
    by_hand = math.sqrt((within**2 + between**2) / 3 + between**2 / 2)  # 0.1023
    assert machine_cv(merged, 3) == pytest.approx(by_hand)
    assert machine_cv(merged, 3) < 0.75 * drift  # 0.1023 against 0.1463
    assert machine_cv(merged, 1000) == pytest.approx(between / math.sqrt(2), rel=0.01)  # the level error stays
    single = replace(with_spread(), spread_drift=drift)  # one launch never saw how far launches sit apart
    assert machine_cv(single, 3) == drift


def test_a_profiles_launches_are_read_from_its_provenance_and_bad_counts_are_named(tmp_path):
    path = tmp_path / "cost.json"
    save_profile(with_spread(), path)
    data = json.loads(path.read_text())
    data["provenance"]["launches"] = {"count": 3, "spread": 0.07, "levels": [0.0, 0.1, -0.1]}
    path.write_text(json.dumps(data))
    read = load_cost_file(path)
    assert (read.spread_launch, read.spread_launches) == (0.07, 3)
    data["provenance"]["launches"]["count"] = "three"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="provenance.launches.count must be a whole number from 1 to 1000"):
        load_cost_file(path)


def test_a_measurement_is_checked():
    assert VERIFIED == Measurement(3, 90) and ONE_STEP.is_one_step
    for bad in ({"launches": 0}, {"steps": True}, {"launches": 4, "steps": 2}):
        with pytest.raises(ValueError, match="measurement"):
            Measurement(**bad)


def test_without_a_spread_every_draw_of_a_median_is_the_deterministic_step_exactly():
    schedule = build_schedule("1f1b", 4, 8)
    cost = uneven(schedule.num_stages)
    interval = step_interval(schedule, cost, Spread(), 11, 0, VERIFIED)
    exact = simulate_step(schedule, cost).step_ms
    assert interval.step_ms == interval.p05_ms == interval.p95_ms == interval.deterministic_ms == exact


def test_a_medians_interval_narrows_with_the_steps_and_keeps_the_penalty_and_the_machine():
    schedule = build_schedule("1f1b", 4, 8)
    cost = uneven(schedule.num_stages)
    jitter = Spread.uniform(0.2)
    one = step_interval(schedule, cost, jitter, 400, 1)
    median = step_interval(schedule, cost, jitter, 400, 1, Measurement(3, 90))
    # the actions' own jitter averages over 90 steps: about sqrt(90) narrower than one step's, the penalty kept
    assert (median.p95_ms - median.p05_ms) < (one.p95_ms - one.p05_ms) / 5
    assert median.p05_ms < one.step_ms < median.p95_ms
    assert median.step_ms > median.deterministic_ms  # the median step is still longer than the step of medians
    machine = Spread({}, {}, 0.1)  # a machine term alone: the measurement moves as a whole, no narrower
    whole, measured = step_interval(schedule, cost, machine, 400, 1), step_interval(schedule, cost, machine, 400, 1,
                                                                                     VERIFIED)  # fmt: skip
    assert (measured.p95_ms - measured.p05_ms) == pytest.approx(whole.p95_ms - whole.p05_ms, rel=0.2)


def test_a_simulated_verification_lands_inside_its_predicted_interval_about_ninety_percent_of_the_time():
    """The truth drawn the way a verification measures it: R launches, each at a machine speed of its own (SD
    `per_launch`), each of N steps with every action's own jitter; its median against the interval predicted for
    Measurement(R, R x N) with the machine term per_launch / sqrt(R)."""
    schedule = build_schedule("1f1b", 2, 4)
    cost = uneven(schedule.num_stages)
    cv, per_launch, rounds, steps, trials = 0.15, 0.06, 3, 20, 160
    sigma = math.sqrt(math.log1p(per_launch**2))
    predicted = step_interval(schedule, cost, Spread.uniform(cv).__class__(Spread.uniform(cv).cv, {},
                              per_launch / math.sqrt(rounds)), 600, 5, Measurement(rounds, rounds * steps))  # fmt: skip
    pool, _ = sampled_steps(schedule, cost, Spread.uniform(cv), trials * rounds * steps + 1, 9)
    pool = pool[1:].reshape(trials, rounds, steps)
    machine = np.exp(np.random.default_rng(4).normal(-(sigma**2) / 2, sigma, (trials, rounds, 1)))
    medians = np.median((pool * machine).reshape(trials, -1), axis=1)
    inside = np.mean((medians >= predicted.p05_ms) & (medians <= predicted.p95_ms))
    assert 0.8 <= inside <= 0.98, inside
    single = step_interval(schedule, cost, Spread(Spread.uniform(cv).cv, {}, per_launch), 600, 5)
    assert np.mean((medians >= single.p05_ms) & (medians <= single.p95_ms)) > 0.99  # one step's: far too wide


def test_plan_records_what_its_intervals_are_of_and_one_steps_are_wider(tmp_path, capsys):
    path = tmp_path / "cost.json"
    save_profile(with_spread(cv=0.2), path)
    widths = {}
    for choice in ("verification", "step", None):
        out = tmp_path / f"{choice}.json"
        picked = [] if choice is None else ["--interval-of", choice]  # None: the default, one step's (no history)
        assert main(["plan", "--cost", str(path), "--devices", "2", "--global-batch", "16", "--optimizer", "sgd",
                     "--microbatch-sizes", "2", *picked, "--json", str(out)]) == 0  # fmt: skip
        document = json.loads(out.read_text())
        best = document["best"]
        widths[choice] = (best["step_ms_p95"] - best["step_ms_p05"]) / best["step_ms"]
        assert document["inputs"]["interval_of"] == (
            {"launches": 3, "steps": 90} if choice == "verification" else {"launches": 1, "steps": 1}
        )
    assert widths[None] == widths["step"]
    assert widths["verification"] < 0.75 * widths["step"]  # the prices' own error (5.6% here) does not average
    capsys.readouterr()
    assert main(["plan", "--cost", str(path), "--devices", "2", "--interval-of", "launch"]) == 2
    choices = "(choose from 'auto', 'verification', 'step')"
    assert f"--interval-of: invalid choice: 'launch' {choices}" in capsys.readouterr().err


def test_verify_says_when_its_rounds_are_not_what_the_plans_intervals_are_of():
    plan = {"inputs": {"interval_of": {"launches": 3, "steps": 90}}}
    assert _interval_notes(plan, 3) == []
    assert "are of the median over 3 launches, and this verification ran 1 round:" in _interval_notes(plan, 1)[0]
    assert _interval_notes({"inputs": {"interval_of": {"launches": 1, "steps": 1}}}, 3) == []  # one step's: wider
    assert _interval_notes({"inputs": {}}, 2) == []  # a plan from before it said

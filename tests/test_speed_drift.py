"""The machine's drift between a profile's in-situ rounds: read off the rounds beyond the steps' own
noise, kept in the profile, and drawn once per sampled step for every action together."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from pipesim.analysis.drift import speed_drift
from pipesim.cost.model import CostModel
from pipesim.io.cost_file import load_cost_file, save_profile
from pipesim.schedules import build_schedule
from pipesim.sim.jitter import sampled_steps
from pipesim.sim.spread import Spread, profile_spread
from pipesim.sim.steps import simulate_step
from tests.test_plan_intervals import with_spread


def rounds_of(drift: float, noise: float, series: int = 16, rounds: int = 6, steps: int = 7, seed: int = 0):
    """Synthetic in-situ rounds: each round's speed a lognormal draw of SD `drift`, each step's work a normal draw
    of CV `noise` around it (10 ms at full speed)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(series):
        speeds = np.exp(drift * rng.standard_normal(rounds))
        out.append([list(10.0 * speed * (1 + noise * rng.standard_normal(steps))) for speed in speeds])
    return out


def test_the_drift_is_what_the_rounds_vary_beyond_their_steps_noise():
    assert speed_drift(rounds_of(0.05, 0.04)) == pytest.approx(0.05, abs=0.015)
    assert speed_drift(rounds_of(0.10, 0.04, seed=1)) == pytest.approx(0.10, abs=0.025)
    # steps that vary 8% but rounds at one speed: the medians' own noise (1.25 x 8% / sqrt(7) = 3.8%) is not drift
    assert speed_drift(rounds_of(0.0, 0.08, seed=2)) < 0.015


def test_one_burst_of_other_work_does_not_set_the_drift():
    calm = rounds_of(0.03, 0.03, seed=3)
    burst = [list(rounds) for rounds in calm]
    burst[0][2] = [5 * v for v in burst[0][2]]  # one round five times slower: someone else's job
    assert speed_drift(burst) == pytest.approx(speed_drift(calm), abs=0.005)


def test_too_few_rounds_say_nothing():
    assert speed_drift([]) == 0.0
    assert speed_drift([[[10.0, 11.0]], [[12.0, 12.5]]]) == 0.0  # one round per series: no round to compare with
    assert speed_drift([[[10.0] * 3, [20.0] * 3]]) == 0.0  # 2 round medians in all < MIN_ROUNDS


def test_round_work_sums_each_steps_compute_in_whole_rounds():
    from pipesim_executor.rank.calibrate import round_work

    def step(*durations):
        return {"spans": [["0F0", 0.0, d] for d in durations], "comm": []}

    calibration = {("a",): {"timing": [step(1, 2), step(3), step(4), step(5), step(6)]}, ("b",): {"timing": [step(1)]}}
    assert round_work([calibration], 2) == [[[3, 3], [4, 5]]]  # the 5th step, half a round, is left out
    assert round_work([calibration, {("c",): {}}], 5) == []  # one round: nothing to compare


def test_the_machines_draw_moves_every_action_of_a_sample_together():
    schedule = build_schedule("1f1b", 2, 4)
    cost = CostModel.uniform(forward_ms=1.0, backward_ms=2.0)
    deterministic = simulate_step(schedule, cost).step_ms
    steps, first = sampled_steps(schedule, cost, Spread(machine_cv=0.1), 2000, seed=5)
    assert first == deterministic and steps[0] == deterministic
    ratios = steps[1:] / deterministic  # no transfers, no gaps: the step scales with its actions exactly
    assert np.std(np.log(ratios)) == pytest.approx(math.sqrt(math.log1p(0.01)), rel=0.06)
    assert np.mean(ratios) == pytest.approx(1.0, abs=0.01)  # a draw of mean 1: the point does not move with it
    assert np.array_equal(sampled_steps(schedule, cost, Spread(), 50, seed=5)[0], np.full(50, deterministic))
    with pytest.raises(ValueError, match="machine_cv must be a number in 0..5"):
        Spread(machine_cv=-0.1)


def test_a_profiles_drift_round_trips_and_widens_every_interval(tmp_path):
    base = with_spread(cv=0.05)
    drifting = replace(base, spread_drift=0.04)
    assert profile_spread(drifting, 2, False, False).machine_cv == 0.04
    assert profile_spread(base, 2, False, False).machine_cv == 0.0
    assert profile_spread(drifting, 16, True, False).machine_cv == 0.04  # extrapolated too
    path = tmp_path / "cost.json"
    save_profile(drifting, path)
    data = json.loads(path.read_text())
    assert data["spread"]["drift"] == 0.04 and load_cost_file(path) == drifting
    del data["spread"]["drift"]
    path.write_text(json.dumps(data))
    assert load_cost_file(path) == base  # a profile written before it: no drift
    for bad in (2.0, "0.1", True, -0.5):
        data["spread"]["drift"] = bad
        path.write_text(json.dumps(data))
        with pytest.raises(ValueError, match="spread.drift"):
            load_cost_file(path)
    with pytest.raises(ValueError, match="spread_drift must be a number in 0..1"):
        replace(base, spread_drift=1.5)

"""The round effect of a verification (pipesim.analysis.round_effect): the F distribution it rests on, its false-alarm
rate on simulated steady machines, and that a machine which moves during the rounds is found."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipesim.analysis.round_effect import ALPHA, f_survival, round_effect


@pytest.mark.parametrize(
    "f,d1,d2,p",
    [  # published F tables' critical values
        (10.925, 2, 6, 0.01),
        (4.965, 1, 10, 0.05),
        (3.098, 3, 20, 0.05),
        (18.00, 2, 4, 0.01),
        (161.45, 1, 1, 0.05),
        (2.0, 2, 2, 1 / 3),  # closed form for (2, 2): 1 / (1 + f)
    ],
)
def test_the_f_distribution_matches_its_tables(f, d1, d2, p):
    assert f_survival(f, d1, d2) == pytest.approx(p, rel=2e-3)


def test_the_f_distributions_edges():
    assert f_survival(0.0, 2, 3) == 1.0 and f_survival(math.inf, 2, 3) == 0.0
    assert f_survival(1e-9, 4, 8) == pytest.approx(1.0) and f_survival(1e9, 4, 8) < 1e-12


def steady(rng, candidates: int, rounds: int, steps: int, launch_cv: float, step_cv: float, moves=None) -> list:
    """One simulated verification on a machine whose speed holds (or moves by `moves`, per round): each run's own
    speed drawn (a launch), each step's noise about it, a slow step now and then."""
    moves = moves or [1.0] * rounds
    out = []
    for base in rng.uniform(50, 200, size=candidates):
        runs = []
        for r in range(rounds):
            times = base * moves[r] * math.exp(rng.normal(0, launch_cv)) * np.exp(rng.normal(0, step_cv, steps))
            times[rng.random(steps) < 0.05] *= 1.5  # a burst of other work now and then
            runs.append(times.tolist())
        out.append(runs)
    return out


@pytest.mark.parametrize("candidates,rounds,steps", [(4, 3, 20), (6, 3, 10), (3, 5, 30)])
def test_a_steady_machine_rarely_raises_the_alarm(candidates, rounds, steps):
    """On stationary data the p-values are uniform: p < 0.05 about 5% of the time, and the verdict 'moved'
    (significant at ALPHA and beyond the size gate) at most ALPHA of the time."""
    rng = np.random.default_rng(7)
    found = [round_effect(steady(rng, candidates, rounds, steps, 0.04, 0.05)) for _ in range(1500)]
    below = sum(f.p_value < 0.05 for f in found) / len(found)
    assert 0.035 <= below <= 0.065  # 5%, give or take 2 binomial standard deviations (0.56%) and the bursts
    # significant at ALPHA: 1%, and within 4 binomial standard deviations of it over 1500 (4 x 0.26%)
    assert sum(f.significant for f in found) / len(found) <= ALPHA + 0.011
    assert sum(f.moved for f in found) / len(found) <= ALPHA


def test_one_candidate_is_tested_against_its_steps():
    rng = np.random.default_rng(3)
    found = [round_effect(steady(rng, 1, 3, 30, 0.0, 0.05)) for _ in range(1000)]
    assert all(f.candidates == 1 and f.dof == (2, 87) for f in found)
    assert 0.03 <= sum(f.p_value < 0.05 for f in found) / len(found) <= 0.07
    moved = round_effect(steady(rng, 1, 3, 30, 0.0, 0.05, moves=[1.0, 1.3, 1.0]))
    assert moved.moved and moved.move == pytest.approx(0.3, abs=0.05)


def test_a_machine_that_moved_3x_is_found_and_said_so():
    """Issue 46's verification: round 0 at 315-398 ms, round 2 at 110-131 ms, four candidates."""
    rng = np.random.default_rng(1)
    found = round_effect(steady(rng, 4, 3, 10, 0.03, 0.05, moves=[1.0, 0.6, 0.33]))
    assert found.moved and found.p_value < 1e-4 and found.move == pytest.approx(2.0, rel=0.1)
    assert found.round_ratios[0] > 1 > found.round_ratios[2]
    assert found.line().startswith("not comparable: the machine's speed changed during this verification")
    assert "round 1 " in found.line() and "round 3 " in found.line()


def test_a_small_shared_drift_is_noted_but_not_a_move():
    rng = np.random.default_rng(2)
    small = round_effect(steady(rng, 6, 3, 20, 0.005, 0.02, moves=[1.0, 1.04, 1.02]))
    assert small.significant and not small.moved and "within the 10%" in small.line()
    large = round_effect(steady(rng, 6, 3, 20, 0.02, 0.02, moves=[1.0, 1.15, 1.0]))
    assert large.moved


def test_too_little_to_test_is_none_and_a_failed_round_leaves_its_candidate_out():
    assert round_effect([]) is None and round_effect([[[1.0, 2.0]]]) is None  # one round
    assert round_effect([[[1.0], [2.0]]]) is None  # one candidate, one step a round: no spread within
    assert round_effect([[[0.0, 1.0], [1.0, 1.0]]]) is None  # a step of 0: no ratio
    rng = np.random.default_rng(4)
    data = steady(rng, 3, 3, 10, 0.02, 0.02, moves=[1.0, 2.0, 1.0])
    data.append(data[0][:2])  # a candidate whose last round failed: not in the table
    found = round_effect(data)
    assert found.candidates == 3 and found.dof == (2, 4) and found.moved

"""The median's bootstrap interval over steps and rounds, and the indistinguishable groups, against closed forms."""

from __future__ import annotations

from math import comb

import numpy as np
import pytest

from pipesim.analysis import stats
from pipesim.analysis.stats import (
    MedianCI,
    RoundSpread,
    group_ranks,
    indistinguishable_groups,
    median_ci,
    pooled_round_spread,
    t_quantile,
)


def _binomial_at_least(n: int, p: float, k: int) -> float:
    return sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


def simulated_rounds(rng: np.random.Generator, groups: int, members: int, drift: float) -> list:
    """`groups` of `members` candidates, each 3 rounds of 20 steps about 10 ms: each round at a speed of its own
    (`drift`, relative SD), each step jittering by 15%."""
    return [
        [[list(10 * (1 + drift * rng.standard_normal()) * (1 + 0.15 * rng.standard_normal(20))) for _ in range(3)]
         for _ in range(members)]
        for _ in range(groups)
    ]  # fmt: skip


def test_steps_all_equal_give_an_interval_of_zero_width():
    assert median_ci([[7.5] * 20, [7.5] * 5]) == MedianCI(7.5, 7.5, 7.5)


def test_one_round_matches_the_exact_bootstrap_distribution_of_the_median():
    """For n = 11 distinct steps x_1 < ... < x_11, the resampled median is <= x_j exactly when at least 6 of the 11
    draws are <= x_j: P = P(Binomial(11, j/11) >= 6). The interval's ends are the order statistics where that
    distribution crosses 2.5% and 97.5%."""
    steps = [float(x) for x in range(1, 12)]
    cdf = [_binomial_at_least(11, j / 11, 6) for j in range(1, 12)]
    low = next(j for j, p in enumerate(cdf, start=1) if p >= 0.025)
    high = next(j for j, p in enumerate(cdf, start=1) if p >= 0.975)
    # the crossings are clear of the Monte Carlo error of 20,000 samples, so the seeded result is exact
    assert all(abs(p - q) > 0.005 for p in cdf for q in (0.025, 0.975))
    ci = median_ci([steps], samples=20_000, seed=3)
    assert (ci.median, ci.low, ci.high) == (6.0, float(low), float(high))
    assert (low, high) == (3, 9)


def test_rounds_that_drift_widen_the_interval_past_them():
    """Rounds of constant steps at 10, 11 and 12 ms: the bootstrap alone gives [10, 12] (the median of 3 rounds
    drawn with replacement is 10 with probability 7/27, 12 likewise), which a fourth round would leave one time in
    four; the rounds as clusters give Student's interval on the logarithms, 11 x exp(+-t(95%, 2 dof) x s / sqrt(3))
    with s the standard deviation of log 10, log 11, log 12. Rounds two times apart stay positive. The same 90 steps
    as one round give an interval of 11 alone (more than half the steps are 11)."""
    rounds = [[10.0] * 30, [11.0] * 30, [12.0] * 30]
    ci = median_ci(rounds)
    half = 4.302653 * np.std(np.log([10.0, 11.0, 12.0]), ddof=1) / 3**0.5
    assert ci.median == 11.0
    assert ci.low == pytest.approx(11 * np.exp(-half), abs=1e-5)
    assert ci.high == pytest.approx(11 * np.exp(half), abs=1e-5)
    assert 8.4 < ci.low < 10 and 12 < ci.high < 14.5
    assert median_ci([[100.0] * 5, [200.0] * 5, [150.0] * 5]).low > 0
    pooled = median_ci([[10.0] * 30 + [11.0] * 31 + [12.0] * 29])
    assert (pooled.low, pooled.high) == (11.0, 11.0)


@pytest.mark.parametrize(
    ("level", "dof", "expected"),  # Student's t tables
    [(0.95, 1, 12.7062), (0.95, 2, 4.3027), (0.95, 3, 3.1824), (0.95, 4, 2.7764), (0.95, 10, 2.2281),
     (0.90, 2, 2.9200), (0.90, 5, 2.0150), (0.99, 30, 2.7500)],
)  # fmt: skip
def test_t_quantile_matches_the_tables(level, dof, expected):
    assert t_quantile(level, dof) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_refuses_what_has_no_quantile():
    with pytest.raises(ValueError, match="degrees of freedom"):
        t_quantile(0.95, 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        t_quantile(1.5, 3)


def test_the_interval_over_drifting_rounds_holds_the_next_runs_median(monkeypatch):
    """Seeded simulation of the issue's check: pairs of runs of 3 rounds x 20 steps, each round's speed drifting by
    a 4% standard deviation, each step jittering by 15%. With the rounds counted as clusters, each run's median lies
    inside the other's interval for about 90% of the pairs; with the bootstrap alone (Student's part switched off),
    about 75%."""
    pairs = simulated_rounds(np.random.default_rng(29), groups=200, members=2, drift=0.04)

    def agreeing() -> float:
        inside = 0
        for a, b in pairs:
            first, second = median_ci(a, samples=400), median_ci(b, samples=400)
            inside += first.contains(second.median) and second.contains(first.median)
        return inside / len(pairs)

    clustered = agreeing()
    monkeypatch.setattr(stats, "t_quantile", lambda level, dof: 0.0)
    bootstrap_only = agreeing()
    assert clustered >= 0.88 and bootstrap_only <= 0.8


def test_the_interval_is_seeded_and_the_level_checked():
    rounds = [[10 + (i * 7919 % 13) / 10 for i in range(25)], [10.4 + (i * 104729 % 11) / 10 for i in range(25)]]
    assert median_ci(rounds, seed=1) == median_ci(rounds, seed=1)
    assert median_ci(rounds, level=0.5).high - median_ci(rounds, level=0.5).low <= (
        median_ci(rounds).high - median_ci(rounds).low
    )
    with pytest.raises(ValueError, match="between 0 and 1"):
        median_ci(rounds, level=1.0)
    with pytest.raises(ValueError, match="no step times"):
        median_ci([[], []])


def test_overlapping_intervals_form_one_group_and_share_a_rank():
    a, b, c, d = MedianCI(10, 9, 11), MedianCI(10.5, 10.8, 12), MedianCI(20, 19, 21), MedianCI(11.9, 11.9, 12.5)
    # a overlaps b, b overlaps d (a and d do not: reached through b); c stands alone
    assert indistinguishable_groups([a, b, c, d]) == [[0, 1, 3], [2]]
    assert group_ranks([a, b, c, d]) == [2.0, 2.0, 4.0, 2.0]
    assert group_ranks([c, a]) == [2.0, 1.0]
    assert a.overlaps(b) and not a.overlaps(d) and a.contains(9) and not a.contains(11.5)


def test_the_round_spread_pools_every_candidates_deviations_about_its_own_mean():
    first = [[10.0] * 5, [11.0] * 5, [12.0] * 5]
    second = [[20.0] * 5, [20.0] * 5]  # agreeing rounds still count: one degree of freedom of zero deviation
    logs = np.log([10.0, 11.0, 12.0])
    spread = pooled_round_spread([first, second, [[5.0] * 5]])  # one round: no degree of freedom, left out
    assert spread == RoundSpread(pytest.approx(float(np.sqrt(np.sum((logs - logs.mean()) ** 2) / 3))), 3)
    assert pooled_round_spread([[[5.0, 6.0]]]) is None and pooled_round_spread([]) is None


def test_a_pooled_spread_sets_the_t_interval_of_rounds_that_agreed_by_chance():
    rounds = [[10.0] * 20, [10.0] * 20, [10.0] * 20]
    assert (median_ci(rounds).low, median_ci(rounds).high) == (10.0, 10.0)  # alone: no spread seen
    ci = median_ci(rounds, pooled=RoundSpread(0.05, 24))
    half = t_quantile(0.95, 24) * 0.05 / np.sqrt(3)
    assert ci.low == pytest.approx(10 * np.exp(-half)) and ci.high == pytest.approx(10 * np.exp(half))
    # a round hit by a burst keeps the bootstrap's width (two of three rounds drawn from it: 7 draws in 27 give a
    # median of 20): a small pooled spread never hides it
    burst = [[10.0] * 20, [20.0] * 20, [10.5] * 20]
    assert median_ci(burst, pooled=RoundSpread(0.01, 24)).high == 20.0


def test_pooled_intervals_cover_the_true_median_and_are_narrower_than_each_candidates_own():
    """Seeded simulation at issue 29's size: verifications of 12 candidates, 3 rounds of 20 steps each, every run
    landing at a speed of its own (5% standard deviation about the true 10 ms), each step jittering by 15%. On the
    round spread pooled over the 12 candidates the 95% intervals hold the true median about 95% of the time, as on
    each candidate's own three rounds, and are far narrower (t(24) against t(2)). Two verifications' medians each
    inside the other's correct 95% interval is another matter: their difference has sqrt(2) times one median's
    standard error, so about 83% of the candidates agree so, not 95%."""
    verifications = simulated_rounds(np.random.default_rng(31), groups=30, members=12, drift=0.05)

    def intervals(pooled: bool) -> list[list[MedianCI]]:
        return [[median_ci(c, samples=300, pooled=pooled_round_spread(v) if pooled else None) for c in v]
                for v in verifications]  # fmt: skip

    for pooled in (True, False):
        cis = [ci for v in intervals(pooled) for ci in v]
        assert 0.9 <= np.mean([ci.contains(10.0) for ci in cis]) <= 0.99
    pooled_width = np.median([ci.high / ci.low - 1 for v in intervals(True) for ci in v])
    own_width = np.median([ci.high / ci.low - 1 for v in intervals(False) for ci in v])
    assert pooled_width < 0.7 * own_width
    pooled_cis = intervals(True)
    agree = [
        a.contains(b.median) and b.contains(a.median)
        for first, second in zip(pooled_cis[::2], pooled_cis[1::2], strict=True)
        for a, b in zip(first, second, strict=True)
    ]
    assert 0.7 <= np.mean(agree) <= 0.92

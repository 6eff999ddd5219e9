"""The median's bootstrap interval over steps and rounds, and the indistinguishable groups, against closed forms."""

from __future__ import annotations

from math import comb

import pytest

from pipesim.analysis.stats import MedianCI, group_ranks, indistinguishable_groups, median_ci


def _binomial_at_least(n: int, p: float, k: int) -> float:
    return sum(comb(n, i) * p**i * (1 - p) ** (n - i) for i in range(k, n + 1))


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


def test_rounds_that_drift_widen_the_interval_to_span_them():
    """Rounds of constant steps at 10, 11 and 12 ms: the resampled median is the median of 3 rounds drawn with
    replacement, which is 10 with probability 7/27 (at least two draws of 10) and 12 likewise: the interval is
    [10, 12]. The same 90 steps as one round give an interval of 11 alone (more than half the steps are 11)."""
    rounds = [[10.0] * 30, [11.0] * 30, [12.0] * 30]
    assert median_ci(rounds) == MedianCI(11.0, 10.0, 12.0)
    pooled = median_ci([[10.0] * 30 + [11.0] * 31 + [12.0] * 29])
    assert (pooled.low, pooled.high) == (11.0, 11.0)


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

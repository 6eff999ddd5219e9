"""When two verifications or two profiles of one plan agree (pipesim.analysis.agreement): differences with their
own intervals, at least 90% of candidates, and the same recommendation or one group."""

from __future__ import annotations

import math

import numpy as np
import pytest

from pipesim.analysis.agreement import AGREE_SHARE, difference_holds_zero, profiles_agree, verifications_agree
from pipesim.analysis.stats import MedianCI


def ci(median: float, half: float) -> MedianCI:
    return MedianCI(median, median * math.exp(-half), median * math.exp(half))


def test_a_difference_holds_zero_within_the_root_sum_of_squares():
    a = ci(100.0, 0.03)
    assert difference_holds_zero(a, ci(100.0 * math.exp(0.042), 0.03))  # 4.2% < sqrt(2) x 3% = 4.24%
    assert not difference_holds_zero(a, ci(100.0 * math.exp(0.043), 0.03))
    assert not difference_holds_zero(a, MedianCI(0.0, 0.0, 1.0))  # no ratio to read


def test_two_verifications_agree_on_90_percent_and_the_recommendation():
    first = {f"c{i}": ci(100.0 + 10 * i, 0.03) for i in range(10)}
    second = {k: ci(v.median * 1.01, 0.03) for k, v in first.items()}
    got = verifications_agree(first, second, ("c0", "c0"))
    assert (got.compared, got.agreeing, got.same_recommendation, got.agree) == (10, 10, True, True)
    second["c9"] = ci(first["c9"].median * 1.2, 0.03)  # one of ten moved: 90% still
    assert verifications_agree(first, second, ("c0", "c0")).agree
    second["c8"] = ci(first["c8"].median * 1.2, 0.03)  # two of ten: 80%
    assert verifications_agree(first, second, ("c0", "c0")).share == pytest.approx(0.8)
    assert not verifications_agree(first, second, ("c0", "c0")).agree
    second = {k: ci(v.median, 0.03) for k, v in first.items()}
    assert not verifications_agree(first, second, ("c0", "c1")).agree  # a different best, no group
    assert verifications_agree(first, second, ("c0", "c1"), ([["c1", "c0"]], [])).agree  # ... in one group
    assert verifications_agree({}, second, (None, None)).agree is None


def test_honest_intervals_meet_the_criterion_most_of_the_time():
    """Two verifications of 12 candidates with calibrated 95% intervals and no move between them: the criterion
    (>= 90%, i.e. at most one of 12 differences outside) holds about 88% of the time; the old one (every median
    inside the other's interval) about 11%."""
    rng = np.random.default_rng(0)
    se, trials, met, old = 0.02, 2000, 0, 0
    for _ in range(trials):
        truth = rng.uniform(3, 6, 12)
        a = {str(i): ci(math.exp(t + rng.normal(0, se)), 1.96 * se) for i, t in enumerate(truth)}
        b = {str(i): ci(math.exp(t + rng.normal(0, se)), 1.96 * se) for i, t in enumerate(truth)}
        met += verifications_agree(a, b, ("0", "0")).agree
        old += all(a[k].contains(b[k].median) and b[k].contains(a[k].median) for k in a)
    assert met / trials > 0.8 and old / trials < 0.2


def test_two_profiles_agree_within_their_combined_intervals():
    first = {"a": (10.0, 9.0, 11.0), "b": (20.0, 19.0, 21.0), "c": (30.0, 27.0, 33.0), "n": (5.0, 5.0, 5.0)}
    second = {"a": (10.5, 9.5, 11.5), "b": (23.0, 22.0, 24.0), "c": (31.0, 28.0, 34.0), "n": (6.0, 5.0, 7.0)}
    got = profiles_agree(first, second)
    # b: 14% apart with intervals of +-5%; n: a point claimed exact, 18% from the other's +-17%
    assert (got.compared, got.agreeing) == (4, 2) and got.share == 0.5 < AGREE_SHARE and not got.agree
    assert profiles_agree({"a": (1.0, 0.0, 2.0)}, {"a": (1.0, 0.5, 2.0)}).agree is None  # no positive interval

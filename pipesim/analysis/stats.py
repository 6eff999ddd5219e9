"""The statistics of a measurement: a median with its confidence interval, and which measurements cannot be told
apart.

A verification measures each candidate in several rounds (one run each, interleaved with the other candidates'
runs), each round a list of step times. The machine's speed drifts between rounds and the steps of one round are
correlated, so the confidence interval is a two-level bootstrap: resample the rounds, then the steps within each
resampled round, and take the median of what was drawn; the interval is the percentiles of those medians. A
single round falls back to resampling its steps. Seeded: the same measurements give the same interval.

A bootstrap over a few rounds cannot see drift beyond their own range: three rounds drawn with replacement never
give a median outside the lowest and highest round, and the true median lies outside that range one time in four
(measured: two verifications of one plan, minutes apart, had each median inside the other's interval for only 4 of
9 candidates). So from two rounds on the interval is widened to cover Student's t-interval over the round medians
as well (the rounds as clusters: centred on the pooled median, half-width t(level, R - 1) x the standard deviation
of their logarithms / sqrt(R), a ratio either way, since drift scales a step): the wider of the two, honest about
rounds that disagree, as narrow as the bootstrap when they agree.

Candidates measured in the same interleaved rounds share the machine's moves between rounds, and three rounds
say little about them alone: two degrees of freedom, so a candidate whose three rounds agreed by chance gets an
interval far narrower than the next verification's level shift (measured: two verifications of one plan, each
candidate's median inside the other's interval for 58-92% of them), and one whose rounds disagreed an interval of
t(2) = 4.3 standard errors. `pooled_round_spread` pools the round medians' log deviations of every candidate
measured together (their own means taken off: degrees of freedom the sum of rounds - 1); given one, `median_ci`
widens to Student's t on that pooled standard deviation and its degrees of freedom instead of the candidate's own
(still never narrower than its bootstrap over rounds and steps, which a burst of other work in one round widens).

Two candidates whose intervals overlap are indistinguishable: the measurement cannot say which is faster. Groups
are the connected runs of overlapping intervals (sorted by their lower ends), so a candidate belongs to exactly one
group. Pure numpy, no torch: the executor's verification and the app both read it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy loads where a statistic draws on it: a plan's report and a profile's check read the
    import numpy as np  # constants and the t quantiles here without it (13 MiB of a planner process)

BOOTSTRAP_SAMPLES = 2000  # medians drawn per interval: the 2.5% tail then rests on 50 of them
CONFIDENCE = 0.95
MAX_STEPS_PER_ROUND = 10_000  # bounds the bootstrap's work (samples x rounds x steps)
CHUNK_CELLS = 1_000_000  # draws held in memory at once (8 MB of float64)
# A predicted interval wider than +-25% of its point says little a user can act on (a step "between 50 and 150 ms"),
# and a measurement inside it is no evidence the prediction holds: such an interval is "not informative", and a
# coverage counts only the informative ones (a busy machine's +-57% intervals once reported "100% inside" errors
# of -55%).
MAX_INFORMATIVE_HALF_WIDTH = 0.25


def relative_half_width(point: float, low: float, high: float) -> float:
    """An interval's half-width relative to its point: (high - low) / 2 / point (inf for a point <= 0)."""
    return (high - low) / 2 / point if point > 0 else math.inf


def informative(point: float, low: float | None, high: float | None) -> bool | None:
    """Whether a predicted interval is narrow enough to count (None: no interval)."""
    if low is None or high is None:
        return None
    return relative_half_width(point, low, high) <= MAX_INFORMATIVE_HALF_WIDTH


@dataclass(frozen=True)
class RoundSpread:
    """How far round medians move, pooled over the candidates measured in the same rounds: the standard deviation
    of their logarithms about each candidate's mean (`log_sd`) and the degrees of freedom it rests on (`dof`)."""

    log_sd: float
    dof: int


def pooled_round_spread(measurements: Sequence[Sequence[Sequence[float]]]) -> RoundSpread | None:
    """The round spread pooled over `measurements` (each a candidate's rounds, each round its step times); None
    when no candidate has two rounds of positive medians."""
    import numpy as np

    squares, dof = 0.0, 0
    for rounds in measurements:
        medians = [float(np.median(r)) for r in rounds if len(r) > 0]
        if len(medians) < 2 or min(medians) <= 0:
            continue
        logs = np.log(medians)
        squares += float(np.sum((logs - logs.mean()) ** 2))
        dof += len(logs) - 1
    return RoundSpread(math.sqrt(squares / dof), dof) if dof else None


@dataclass(frozen=True)
class MedianCI:
    """The median of every step measured, and its confidence interval (`level`: 0.95 for 95%)."""

    median: float
    low: float
    high: float
    level: float = CONFIDENCE

    def overlaps(self, other: MedianCI) -> bool:
        """Whether the two intervals share a point: the measurement cannot order the two."""
        return self.low <= other.high and other.low <= self.high

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high


def median_ci(
    rounds: Sequence[Sequence[float]],
    *,
    level: float = CONFIDENCE,
    samples: int = BOOTSTRAP_SAMPLES,
    seed: int = 0,
    pooled: RoundSpread | None = None,
) -> MedianCI:
    """The pooled median of `rounds` (each a list of step times) with its bootstrap interval over rounds and steps,
    widened to Student's t over the round medians (on `pooled`, the spread of every candidate measured in these
    rounds, when given). ValueError for no steps, a round longer than MAX_STEPS_PER_ROUND, or a level outside
    (0, 1)."""
    import numpy as np

    if not 0 < level < 1:
        raise ValueError(f"confidence level must be between 0 and 1, got {level}")
    if samples < 1:
        raise ValueError(f"bootstrap samples must be at least 1, got {samples}")
    kept = [np.asarray(r, dtype=float) for r in rounds if len(r) > 0]
    if not kept:
        raise ValueError("no step times to take a median of")
    if max(len(r) for r in kept) > MAX_STEPS_PER_ROUND:
        raise ValueError(f"a round holds more than {MAX_STEPS_PER_ROUND} steps")
    every_step = np.concatenate(kept)
    rng = np.random.default_rng(seed)
    per_chunk = max(1, CHUNK_CELLS // (len(kept) * max(len(r) for r in kept)))
    medians = np.concatenate(
        [_bootstrap_medians(kept, min(per_chunk, samples - done), rng) for done in range(0, samples, per_chunk)]
    )
    tail = (1 - level) / 2
    low, high = np.quantile(medians, [tail, 1 - tail], method="inverted_cdf")
    centre = float(np.median(every_step))
    if len(kept) >= 2:
        medians = [float(np.median(r)) for r in kept]
        low, high = _widened_by_rounds(medians, centre, level, float(low), float(high), pooled)
    return MedianCI(centre, float(low), float(high), level)


def _widened_by_rounds(
    round_medians: list[float], centre: float, level: float, low: float, high: float, pooled: RoundSpread | None
) -> tuple[float, float]:
    """(low, high) widened to Student's t-interval over the round medians, on their logarithms where every one is
    positive (a machine's drift scales a step: the interval stays positive and as asymmetric as a ratio is), on
    the medians themselves otherwise; with `pooled`, the logarithms' standard deviation and degrees of freedom
    are the pooled ones."""
    import numpy as np

    positive = centre > 0 and min(round_medians) > 0
    if pooled is not None and positive:
        half = t_quantile(level, pooled.dof) / math.sqrt(len(round_medians)) * pooled.log_sd
        return min(low, centre * math.exp(-half)), max(high, centre * math.exp(half))
    t = t_quantile(level, len(round_medians) - 1) / math.sqrt(len(round_medians))
    if positive:
        half = t * float(np.std(np.log(round_medians), ddof=1))
        return min(low, centre * math.exp(-half)), max(high, centre * math.exp(half))
    half = t * float(np.std(round_medians, ddof=1))
    return min(low, centre - half), max(high, centre + half)


def t_quantile(level: float, dof: int) -> float:
    """The t with P(|T| <= t) = `level` for Student's T of `dof` (whole) degrees of freedom: what a `level`
    interval's half-width is in standard errors (12.71 for 95% and 1 degree, 4.30 for 2, 1.96 in the limit). By
    bisection on the closed form of P(|T| <= t) (Abramowitz and Stegun 26.7.3-4): numpy only."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be between 0 and 1, got {level}")
    if isinstance(dof, bool) or not isinstance(dof, int) or dof < 1:
        raise ValueError(f"degrees of freedom must be a whole number >= 1, got {dof!r}")
    low, high = 0.0, 1.0
    while _t_two_sided(high, dof) < level:
        high *= 2
    for _ in range(100):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_two_sided(mid, dof) < level else (low, mid)
    return (low + high) / 2


def _t_two_sided(t: float, dof: int) -> float:
    """P(|T| <= t) for Student's T of `dof` degrees of freedom (the finite series of A&S 26.7.3 and 26.7.4)."""
    theta = math.atan(t / math.sqrt(dof))
    c, s = math.cos(theta), math.sin(theta)
    if dof % 2 == 0:
        term, total = 1.0, 1.0
        for k in range(2, dof, 2):  # (1 3 .. (k-1)) / (2 4 .. k) cos^k
            term *= (k - 1) / k * c * c
            total += term
        return s * total
    if dof == 1:
        return 2 * theta / math.pi
    term, total = c, c
    for k in range(3, dof - 1, 2):  # (2 4 .. (k-1)) / (1 3 .. k) cos^k
        term *= (k - 1) / k * c * c
        total += term
    return 2 / math.pi * (theta + s * total)


def _bootstrap_medians(rounds: list[np.ndarray], samples: int, rng: np.random.Generator) -> np.ndarray:
    """`samples` medians, each of the steps drawn from rounds drawn with replacement (vectorised: rounds are padded
    to one length with NaN, and each draw keeps only positions inside its round; rounds of one length, the usual
    case, need no padding)."""
    import numpy as np

    count = len(rounds)
    longest = max(len(r) for r in rounds)
    if all(len(r) == longest for r in rounds):
        table = np.stack(rounds)
        chosen = rng.integers(0, count, size=(samples, count, 1))
        positions = rng.integers(0, longest, size=(samples, count, longest))
        return np.median(table[chosen, positions].reshape(samples, -1), axis=1)
    table = np.full((count, longest), np.nan)
    for i, r in enumerate(rounds):
        table[i, : len(r)] = r
    lengths = np.array([len(r) for r in rounds])
    chosen = rng.integers(0, count, size=(samples, count)) if count > 1 else np.zeros((samples, 1), dtype=int)
    # positions within each chosen round: uniform over that round's own steps
    positions = np.floor(rng.random((samples, count, longest)) * lengths[chosen][:, :, None]).astype(int)
    drawn = table[chosen[:, :, None], positions]
    keep = np.arange(longest)[None, None, :] < lengths[chosen][:, :, None]  # a round of n steps draws n
    drawn = np.where(keep, drawn, np.nan).reshape(samples, -1)
    return np.nanmedian(drawn, axis=1)


def indistinguishable_groups(intervals: Sequence[MedianCI]) -> list[list[int]]:
    """The indices of `intervals` in groups of mutually reachable overlaps (each index in exactly one group, groups
    ordered by their lowest interval, indices in each group by their medians)."""
    order = sorted(range(len(intervals)), key=lambda i: (intervals[i].low, intervals[i].median))
    groups: list[list[int]] = []
    reach = -math.inf
    for i in order:
        if groups and intervals[i].low <= reach:
            groups[-1].append(i)
            reach = max(reach, intervals[i].high)
        else:
            groups.append([i])
            reach = intervals[i].high
    return [sorted(g, key=lambda i: intervals[i].median) for g in groups]


def group_ranks(intervals: Sequence[MedianCI]) -> list[float]:
    """Each measurement's rank by median where the indistinguishable share one: the mean of their ranks (Spearman's
    convention for ties), so a rank correlation over them counts only the pairs the measurement can order."""
    ranks = [0.0] * len(intervals)
    start = 0
    for group in indistinguishable_groups(intervals):
        shared = start + (len(group) + 1) / 2
        for i in group:
            ranks[i] = shared
        start += len(group)
    return ranks

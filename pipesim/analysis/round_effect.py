"""Whether the machine's speed changed during one verification: a round effect in its interleaved rounds.

verify-plan runs its candidates in rounds (A B C, A B C, ...). A machine that speeds up or slows down between
rounds scales every candidate of a round alike; on the logarithm of each run's median step that is an additive
effect shared by a round (seen: one verification's rounds went from 315-398 ms to 110-131 ms, and every gap
between candidates hid inside intervals that carried that 3x move).

The test: a two-way analysis of variance without replication on the log round medians (candidates x rounds), the
round effect's mean square against the candidate x round interaction's, an F test. Why this one:
  * the rounds are blocks shared by every candidate, so the interaction holds exactly what separate runs of one
    candidate differ by on a steady machine (each launch's own speed, 1-7% on the 2-core development machine,
    and the noise of a median of its steps); a test against the steps' noise inside one run (Kruskal-Wallis
    over a candidate's steps grouped by round) would call every launch's own offset a move of the machine;
  * the medians, not the steps, so one slow step does not move a round;
  * its false-alarm rate is the nominal one on stationary data (tests/test_round_effect.py checks it on
    simulated verifications).
With one candidate there is no interaction to compare with: its steps' spread within the rounds is used (a
one-way F test on the log steps), which also counts the launches' own offsets as moves: the size gate below
keeps those out.

A round effect is reported as a move of the machine only when it is significant (p < ALPHA) AND material: the
fastest and slowest rounds' shared speeds more than MATERIAL_MOVE apart. A 2-4% drift between rounds is the
ordinary state of a shared machine (pipesim.analysis.drift) and the intervals carry it; a move of more than 10%
within minutes changes what the verification compares. Pure Python (math only).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

ALPHA = 0.01  # a verification is called not comparable one time in a hundred on a steady machine, at most
MATERIAL_MOVE = 0.10  # the rounds' shared speeds this far apart (fastest over slowest, less 1) change the verdict


@dataclass(frozen=True)
class RoundEffect:
    """The rounds' shared speeds (`round_ratios`: each round's step over the geometric mean of every round, the
    shared part only), the F statistic with its degrees of freedom and p-value, and `move`: the slowest round's
    ratio over the fastest's, less 1."""

    candidates: int
    round_ratios: tuple[float, ...]
    statistic: float
    dof: tuple[int, int]
    p_value: float
    move: float

    @property
    def significant(self) -> bool:
        return self.p_value < ALPHA

    @property
    def moved(self) -> bool:
        """The machine's speed changed during the verification: significant and material."""
        return self.significant and self.move > MATERIAL_MOVE

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "significant": self.significant, "moved": self.moved}

    def medians_text(self) -> str:
        """The rounds' shared speeds in words: 'round 1 1.42x, round 2 1.01x, round 3 0.70x'."""
        return ", ".join(f"round {n} {r:.2f}x" for n, r in enumerate(self.round_ratios, start=1))

    def line(self) -> str:
        """The verdict in one line."""
        if self.moved:
            return (
                "not comparable: the machine's speed changed during this verification (round medians, shared by "
                f"every candidate, over their mean: {self.medians_text()}; {self.move:.0%} apart, F test p = "
                f"{self.p_value:.2g}): its errors and groups say what the machine did, not the model; verify again "
                "on a steadier machine"
            )
        if self.significant:
            return (
                f"the rounds moved together by {self.move:.1%} ({self.medians_text()}; F test p = {self.p_value:.2g}),"
                f" within the {MATERIAL_MOVE:.0%} this verification tolerates"
            )
        return f"no round effect: the rounds' medians moved together by {self.move:.1%} (F test p = {self.p_value:.2g})"


def round_effect(measurements: Sequence[Sequence[Sequence[float]]]) -> RoundEffect | None:
    """The round effect over `measurements` (per candidate its rounds in order, each round its step times); the
    candidates with the most rounds measured are used (a candidate that failed a round is left out). None when
    fewer than 2 rounds, or one candidate with fewer than 2 steps in some round."""
    logs = [_log_rounds(rounds) for rounds in measurements]
    logs = [r for r in logs if r is not None]
    if not logs:
        return None
    most = max(len(r) for r in logs)
    full = [r for r in logs if len(r) == most]
    if most < 2:
        return None
    if len(full) >= 2:
        return _two_way([[statistics.median(steps) for steps in rounds] for rounds in full])
    return _one_way(full[0])


def _log_rounds(rounds: Sequence[Sequence[float]]) -> list[list[float]] | None:
    """Each round's log step times; None when a step is not positive (nothing of a ratio to read)."""
    kept = [[float(t) for t in steps] for steps in rounds if len(steps) > 0]
    if not kept or min(min(steps) for steps in kept) <= 0:
        return None
    return [[math.log(t) for t in steps] for steps in kept]


def _two_way(table: list[list[float]]) -> RoundEffect:
    """Candidates (rows) x rounds (columns) of log medians: the round effect against the interaction."""
    rows, cols = len(table), len(table[0])
    grand = statistics.fmean(v for row in table for v in row)
    row_means = [statistics.fmean(row) for row in table]
    col_means = [statistics.fmean(row[c] for row in table) for c in range(cols)]
    ss_round = rows * sum((m - grand) ** 2 for m in col_means)
    ss_rest = sum((table[r][c] - row_means[r] - col_means[c] + grand) ** 2 for r in range(rows) for c in range(cols))
    dof = (cols - 1, (cols - 1) * (rows - 1))
    return _effect(rows, [m - grand for m in col_means], ss_round, ss_rest, dof)


def _one_way(rounds: list[list[float]]) -> RoundEffect | None:
    """One candidate: its rounds' log medians' spread against its log steps' spread within the rounds."""
    if min(len(steps) for steps in rounds) < 2:
        return None
    every = [v for steps in rounds for v in steps]
    grand = statistics.fmean(every)
    means = [statistics.fmean(steps) for steps in rounds]
    ss_round = sum(len(steps) * (m - grand) ** 2 for steps, m in zip(rounds, means, strict=True))
    ss_rest = sum((v - m) ** 2 for steps, m in zip(rounds, means, strict=True) for v in steps)
    dof = (len(rounds) - 1, len(every) - len(rounds))
    centre = statistics.fmean(statistics.median(steps) for steps in rounds)
    return _effect(1, [statistics.median(steps) - centre for steps in rounds], ss_round, ss_rest, dof)


def _effect(
    candidates: int, effects: list[float], ss_round: float, ss_rest: float, dof: tuple[int, int]
) -> RoundEffect:
    if ss_rest <= 0:  # rounds that agree to the last bit within: any shared move is the whole of the variance
        statistic = math.inf if ss_round > 0 else 0.0
    else:
        statistic = (ss_round / dof[0]) / (ss_rest / dof[1])
    ratios = tuple(math.exp(e) for e in effects)
    return RoundEffect(candidates, ratios, statistic, dof, f_survival(statistic, *dof), max(ratios) / min(ratios) - 1)


def f_survival(f: float, d1: int, d2: int) -> float:
    """P(F > f) for Fisher's F with (d1, d2) degrees of freedom: the regularized incomplete beta function
    I_x(d2/2, d1/2) at x = d2 / (d2 + d1 f)."""
    if f <= 0:
        return 1.0
    if math.isinf(f):
        return 0.0
    return _betainc(d2 / 2, d1 / 2, d2 / (d2 + d1 * f))


def _betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta I_x(a, b), by its continued fraction (Lentz's method), on the side where
    it converges fast (Numerical Recipes 6.4)."""
    if x <= 0:
        return 0.0
    if x >= 1:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1) / (a + b + 2):
        return front * _beta_fraction(a, b, x) / a
    return 1.0 - front * _beta_fraction(b, a, 1 - x) / b


def _beta_fraction(a: float, b: float, x: float) -> float:
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1)
    d = 1 / (d if abs(d) > tiny else tiny)
    result = d
    for m in range(1, 500):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1 + numerator * d
            d = 1 / (d if abs(d) > tiny else tiny)
            c = 1 + numerator / c
            c = c if abs(c) > tiny else tiny
            result *= d * c
        if abs(d * c - 1) < 1e-14:
            break
    return result

"""When two measurements of one plan agree: two verifications, or two profiles' predictions.

Criteria that honest intervals can meet. The earlier ones asked every median to lie inside the other
verification's 95% interval, and every prediction of two profiles to lie within 3%: for two independent
measurements with calibrated 95% intervals one lies inside the other's with probability P(|Z| < 1.96 / sqrt 2) =
83%, so over 12 candidates all 24 containments hold between 11% and 83% of the time even when nothing is wrong
(docs/benchmarks.md has the arithmetic). Here each comparison is of a difference with its own interval:

* two verifications agree where, for at least AGREE_SHARE of the candidates both measured, the 95% interval of
  the difference of their two medians contains 0, and the two verifications recommend the same candidate (their
  measured best) or the one's best is in the other's best's group (the measurement cannot order them);
* two profiles agree where, for at least AGREE_SHARE of the candidates both price with an interval, the two
  predictions lie within their combined intervals: the difference of the two within the 90% interval of a
  difference, sqrt(h1^2 + h2^2) on logarithms, h each interval's log half-width.

On logarithms because a machine's move scales a step; an interval's half-width is read as its log half-width
(the measured intervals are nearly symmetric on that scale: pipesim.analysis.stats widens them as a ratio).
Independent errors are assumed: two verifications minutes apart share the plan, not the machine's state. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pipesim.analysis.stats import MedianCI

AGREE_SHARE = 0.90


@dataclass(frozen=True)
class Agreement:
    """How many compared candidates agree (`agreeing` of `compared`), and whether the whole does: the share at
    least AGREE_SHARE and, for two verifications, the same recommendation (`same_recommendation`)."""

    compared: int
    agreeing: int
    same_recommendation: bool | None = None

    @property
    def share(self) -> float | None:
        return self.agreeing / self.compared if self.compared else None

    @property
    def agree(self) -> bool | None:
        if not self.compared:
            return None
        return self.agreeing / self.compared >= AGREE_SHARE and self.same_recommendation is not False

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "share": self.share, "agree": self.agree}


def _log_half(low: float, high: float) -> float | None:
    """An interval's half-width on logarithms; None when it is not a positive interval."""
    return (math.log(high) - math.log(low)) / 2 if 0 < low <= high else None


def difference_holds_zero(a: MedianCI, b: MedianCI) -> bool:
    """Whether the 95% interval of log(a / b) contains 0: each interval's log half-width is 1.96 of its standard
    errors, so the difference's half-width is the root of the sum of their squares."""
    ha, hb = _log_half(a.low, a.high), _log_half(b.low, b.high)
    if ha is None or hb is None or a.median <= 0 or b.median <= 0:
        return False
    return abs(math.log(a.median / b.median)) <= math.hypot(ha, hb)


def verifications_agree(
    first: Mapping[str, MedianCI],
    second: Mapping[str, MedianCI],
    bests: tuple[str | None, str | None],
    groups: tuple[Sequence[Sequence[str]], Sequence[Sequence[str]]] = ((), ()),
) -> Agreement:
    """Two verifications of one plan: `first` and `second` (label -> the measured median with its 95% CI),
    `bests` their measured best candidates, `groups` their groups of indistinguishable candidates."""
    shared = [label for label in first if label in second]
    agreeing = sum(difference_holds_zero(first[label], second[label]) for label in shared)
    a, b = bests
    same = None if a is None or b is None else a == b or any(
        a in group and b in group for group in (*groups[0], *groups[1])
    )  # fmt: skip
    return Agreement(len(shared), agreeing, same)


def profiles_agree(
    first: Mapping[str, tuple[float, float, float]], second: Mapping[str, tuple[float, float, float]]
) -> Agreement:
    """Two profiles' plans: label -> (predicted, 90% low, 90% high) of each; candidates without a positive
    interval on either side are not compared."""
    compared = agreeing = 0
    for label, (point, low, high) in first.items():
        if label not in second:
            continue
        other, other_low, other_high = second[label]
        ha, hb = _log_half(low, high), _log_half(other_low, other_high)
        if ha is None or hb is None or point <= 0 or other <= 0:
            continue
        compared += 1
        agreeing += abs(math.log(point / other)) <= math.hypot(ha, hb)
    return Agreement(compared, agreeing)

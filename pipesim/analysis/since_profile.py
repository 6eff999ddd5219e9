"""How far the machine moved between a profile and the runs that verify its plan.

A plan priced from a unit profile is verified minutes later, and on a shared machine the speed moves between the
two: on this project's 2-core machine, the same candidates measured 0.94-1.05x the profile's own steps of the same
configuration ten minutes later (the zoo's verifications). A prediction error then mixes two things: the
model's (how far the profile predicts steps it measured itself, `pipesim.analysis.profile_check`) and the machine's
(how far the same configuration's steps moved since). Many verified candidates are configurations the profile ran
in situ (same schedule, microbatch size and count, recomputation and cut); for those, each run's median over the
profile's in-situ median is a direct reading of the move. `since_profile` pools them: the geometric mean ratio
with its 95% t-interval over the configurations (a move scales every step alike, so on logarithms), and the
profile's own mean error on the same configurations. Pure Python: the verification (pipesim_executor.host.verify)
and the app read it.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pipesim.analysis.profile_check import CheckedStep
from pipesim.analysis.stats import CONFIDENCE, MAX_INFORMATIVE_HALF_WIDTH, informative, t_quantile


@dataclass(frozen=True)
class SinceProfile:
    """The runs' medians over the profile's in-situ medians of the same configurations (`ratio`, with its 95%
    interval `low`..`high`; None with one configuration), and the profile's own mean error on them (`check_bias`:
    predicted / in-situ - 1, the geometric mean)."""

    configurations: int
    ratio: float
    low: float | None
    high: float | None
    check_bias: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def moved(self) -> bool:
        """The move is measured: its 95% interval excludes 1."""
        return self.low is not None and self.high is not None and not self.low <= 1 <= self.high

    def line(self, rounds_moved: bool = False) -> str:
        """The verification's sentence; `rounds_moved`: the machine moved during the verification itself, so
        nothing is said of its steadiness since the profile."""
        interval = "" if self.low is None or self.high is None else f" [{self.low:.3f}, {self.high:.3f}]"
        if rounds_moved:
            moved = "no reading: the machine's speed moved during this verification"
        elif self.moved:
            moved = "the machine's speed moved between them"
        elif self.low is None:
            moved = "one configuration: no interval"
        elif not informative(self.ratio, self.low, self.high):  # too wide to tell a move from none
            moved = f"not informative: the interval is wider than +-{MAX_INFORMATIVE_HALF_WIDTH:.0%}"
        else:
            moved = "the machine's speed did not move measurably"
        return (
            f"since the profile: these runs took {self.ratio:.3f}x{interval} the profile's own in-situ steps of the "
            f"same {self.configurations} configuration{'s' if self.configurations > 1 else ''} ({moved}); the "
            f"profile predicted those steps {self.check_bias:+.1%} on average"
        )


def config_key(schedule: str, size: int, microbatches: int, recompute: bool, split: Sequence[int]) -> tuple:
    """What names one configuration on both sides: a plan's candidate and a profile's in-situ step."""
    return (schedule, int(size), int(microbatches), bool(recompute), tuple(int(s) for s in split))


def since_profile(checked: Sequence[CheckedStep], measured: dict[tuple, float]) -> SinceProfile | None:
    """Pool the configurations both sides hold: `checked` (the profile's check, each in-situ median and its
    prediction) and `measured` (config_key -> the run's median). None when none is shared."""
    pairs = []
    for step in checked:
        key = config_key(step.schedule, step.microbatch_size, step.microbatches, step.recompute, step.split_points)
        now = measured.get(key)
        if now is not None and now > 0 and step.measured_ms > 0 and step.predicted_ms > 0:
            pairs.append((math.log(now / step.measured_ms), math.log(step.predicted_ms / step.measured_ms)))
    if not pairs:
        return None
    moves = [move for move, _ in pairs]
    centre = statistics.mean(moves)
    low = high = None
    if len(moves) >= 2:
        half = t_quantile(CONFIDENCE, len(moves) - 1) * statistics.stdev(moves) / math.sqrt(len(moves))
        low, high = math.exp(centre - half), math.exp(centre + half)
    bias = math.exp(statistics.mean(error for _, error in pairs)) - 1
    return SinceProfile(len(pairs), math.exp(centre), low, high, bias)

"""How far the machine's speed moves from one stretch of seconds to the next: what a prediction made from one
profile cannot know about the run it predicts.

A profile's in-situ steps run in interleaved rounds (A B C, A B C, ...), each round a few steps of one schedule. On a
shared machine the medians of those rounds differ by more than their own steps' noise explains (measured on the
2-core development machine for a CNN: round medians 4% apart, where the steps' 3.9% CV over 7 steps explains 1.8%),
and a verification run minutes later lands at yet another speed. A prediction's interval has to carry that: one
speed draw per sampled step, shared by every action (`pipesim.sim.spread.Spread.machine_cv`).

`speed_drift` reads it off the rounds: per round the median of its steps' summed compute (each rank's own work,
so waiting does not count), each round's log away from its schedule's mean round (scaled by sqrt(n / (n - 1)) for
the mean taken off), their robust standard deviation (1.4826 x the median absolute deviation: a round hit by a
burst of other work should not set the typical drift),
less in quadrature what the steps' own noise gives a median of that many steps (`MEDIAN_SE` x CV / sqrt(steps)).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

MEDIAN_SE = math.sqrt(math.pi / 2)  # the median's standard error over the mean's, for a normal spread
MAD_TO_SD = 1.4826  # the median absolute deviation of a normal sample, scaled to its standard deviation
MIN_ROUNDS = 4  # fewer round medians than this (over every series) say nothing about the drift
MAX_DRIFT = 1.0


def speed_drift(series: Sequence[Sequence[Sequence[float]]]) -> float:
    """The relative standard deviation of the machine's speed between rounds, beyond the steps' own noise (0 when
    there are fewer than MIN_ROUNDS rounds in all). `series`: per schedule (and rank) measured, its rounds in
    order, each round the summed compute of each of its steps in ms."""
    logs: list[float] = []
    noise: list[float] = []
    for rounds in series:
        medians = [statistics.median(steps) for steps in rounds if steps]
        if len(medians) < 2 or min(medians) <= 0:
            continue
        values = [math.log(m) for m in medians]
        centre, scale = statistics.fmean(values), math.sqrt(len(values) / (len(values) - 1))
        logs += [(v - centre) * scale for v in values]  # about the series' own mean, which takes one degree away
        noise += [_cv(steps) / math.sqrt(len(steps)) for steps in rounds if len(steps) > 1]
    if len(logs) < MIN_ROUNDS:
        return 0.0
    spread = MAD_TO_SD * statistics.median(abs(v) for v in logs)
    own = MEDIAN_SE * statistics.median(noise) if noise else 0.0
    return min(MAX_DRIFT, math.sqrt(max(0.0, spread**2 - own**2)))


def _cv(values: Sequence[float]) -> float:
    mean = statistics.fmean(values)
    return statistics.stdev(values) / mean if mean > 0 else 0.0

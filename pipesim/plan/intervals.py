"""The planner's predictions with their intervals, and the sizes it may predict at all.

The search (`pipesim.plan.search`) prices every candidate at its actions' medians, fast. Then, for the candidates
that can still win, `attach_intervals` draws each one's step `samples` times from its actions' spread
(`pipesim.sim.jitter.step_interval`): the candidate's `step_ms` becomes the median of the draws (the jitter
penalty included: what the recommendation and the ranking then use), `step_ms_p05` and `step_ms_p95` its 90%
interval, `step_ms_deterministic` the search's own price. Candidates are taken fastest first (by that price) until
the next one's price is slower than the best fitting candidate's sampled point, at least MIN_SAMPLED of them
and at most MAX_SAMPLED: a slower price does not overtake it in practice, since a sampled step's median is not
below its price (a step is the longest of paths of right-skewed times whose medians are the prices).

The spread comes from the profile (`pipesim.sim.spread.profile_spread`: what it measured), else from
`IntervalOptions.jitter` (a CV for every kind, typed); with neither, candidates keep their price and no interval.

The interval is of one step by default. `plan --interval-of verification` draws the interval of what verify-plan
measures (`pipesim.sim.spread.VERIFIED`): the median over its default rounds, each a launch of at least its
default steps (`pipesim.sim.jitter`), about a third narrower. It is not the default because it was over-confident
on models it was not developed with: 19 of 24 informative intervals held, against 22 of 24 for one step's on the
same runs (docs/benchmarks.md, "Intervals of a measured median"). Its machine term rests on how far the profile's
launches sat apart, and two launches can sit close while a verification's runs land several per cent from the
profile's in-situ steps of the same configuration.

A microbatch size the profile did not bracket is an extrapolation: `PlanInputs.check_sizes` refuses it with the
profile command that would measure it, unless the space allows it (`PlanSpace.extrapolate`); then the candidate
says `extrapolated`, its interval is wider, and `pipesim.plan.report.best_candidate` recommends it only when no
measured size fits.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipesim.plan.inputs import PlanInputs
from pipesim.plan.search import Candidate, Evaluator
from pipesim.sim.jitter import DEFAULT_SAMPLES, check_samples, step_interval
from pipesim.sim.spread import MAX_CV, ONE_STEP, VERIFIED, Measurement, Spread, profile_spread

MIN_SAMPLED = 24  # at least the fastest this many get an interval (what verify-plan --top K runs)
MAX_SAMPLED = 256
INTERVAL_OF = {"verification": VERIFIED, "step": ONE_STEP}  # plan --interval-of


def interval_of(measurement: Measurement = ONE_STEP) -> dict[str, int]:
    """What a plan's intervals are of, as its JSON records it under "inputs" (verify-plan reads it)."""
    return {"launches": measurement.launches, "steps": measurement.steps}


@dataclass(frozen=True)
class IntervalOptions:
    """How the planner samples: `jitter` the CV of every action when the model's source measured no spread (None:
    no interval without a profile's spread), `samples` draws per candidate, `seed` of the generator, `measurement`
    what the interval is of."""

    jitter: float | None = None
    samples: int = DEFAULT_SAMPLES
    seed: int = 0
    measurement: Measurement = ONE_STEP

    def __post_init__(self) -> None:
        if self.jitter is not None:
            Spread.uniform(self.jitter)  # the one check of a CV: 0..MAX_CV
        check_samples(self.samples)
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--seed must be a whole number >= 0, got {self.seed!r}")


def candidate_spread(inputs: PlanInputs, candidate: Candidate, split: bool, options: IntervalOptions) -> Spread | None:
    """The spread of one candidate's actions: the profile's where it kept one, else the typed jitter."""
    if inputs.profile is not None:
        chunked = candidate.virtual_stages > 1
        size, recompute = candidate.microbatch_size, candidate.recompute
        measured = profile_spread(inputs.profile, size, split, recompute, chunked, options.measurement)
        if measured is not None:
            return measured
    return None if options.jitter is None else Spread.uniform(min(options.jitter, MAX_CV))


def attach_intervals(
    inputs: PlanInputs, candidates: list[Candidate], options: IntervalOptions | None = None
) -> list[Candidate]:
    """Each candidate that can still win gets its sampled point and interval (see the module docstring); the list
    is changed in place and returned."""
    options = options or IntervalOptions()
    for candidate in candidates:
        if candidate.error is None:
            candidate.extrapolated = inputs.extrapolates(candidate.microbatch_size)
    if options.jitter is None and (inputs.profile is None or not inputs.profile.spread):
        return candidates  # nothing measured or given to draw from: the prices stand, with no interval
    built = sorted((c for c in candidates if c.built), key=lambda c: c.step_ms)
    evaluator = Evaluator(inputs)
    best_point = float("inf")
    for count, candidate in enumerate(built[:MAX_SAMPLED]):
        if count >= MIN_SAMPLED and candidate.step_ms > best_point:
            break
        schedule, cost = evaluator.materialise(candidate)
        spread = candidate_spread(inputs, candidate, schedule.uses_split_backward, options)
        if spread is None:
            return candidates
        interval = step_interval(schedule, cost, spread, options.samples, options.seed, options.measurement)
        candidate.step_ms_deterministic = candidate.step_ms
        candidate.step_ms, candidate.step_ms_p05, candidate.step_ms_p95 = (
            interval.step_ms,
            interval.p05_ms,
            interval.p95_ms,
        )
        candidate.throughput = inputs.global_batch / candidate.step_ms * 1e3
        if candidate.fits and not candidate.extrapolated:
            best_point = min(best_point, candidate.step_ms)
    return candidates

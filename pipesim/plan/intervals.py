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

The interval is of what verify-plan measures (`pipesim.sim.spread.VERIFIED`: the median over its default rounds,
each a launch of at least its default steps, `pipesim.sim.jitter`) where earlier verifications on this machine
recorded how far launches land apart (`pipesim.io.launch_history`, `machine_launch_spread`), else of one step
(`measured_by`, `plan --interval-of auto`). A median's interval whose machine term rested on the profile's own two
launches was over-confident on models it was not developed with: 19 of 24 informative intervals held, against 22
of 24 for one step's on the same runs (docs/benchmarks.md, "Intervals of a measured median"), since two launches
can sit close while a verification's runs land several per cent apart. The same runs re-planned with the launch
spread of the earlier held-out set's verifications: 23 of 24 held (docs/benchmarks.md, "The machine's launch
spread").

A microbatch size the profile did not bracket is an extrapolation: `PlanInputs.check_sizes` refuses it with the
profile command that would measure it, unless the space allows it (`PlanSpace.extrapolate`); then the candidate
says `extrapolated`, its interval is wider, and `pipesim.plan.report.best_candidate` recommends it only when no
measured size fits.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pipesim.io.launch_history import LaunchSpread, model_key, pooled_launch_spread, read_records, resolve
from pipesim.plan.inputs import PlanInputs
from pipesim.plan.search import Candidate, Evaluator
from pipesim.sim.jitter import DEFAULT_SAMPLES, check_samples, step_interval
from pipesim.sim.spread import MAX_CV, ONE_STEP, VERIFIED, Measurement, Spread, profile_spread

if TYPE_CHECKING:
    from pipesim.cost.profile import UnitProfile

MIN_SAMPLED = 24  # at least the fastest this many get an interval (what verify-plan --top K runs)
MAX_SAMPLED = 256
INTERVAL_OF = {"verification": VERIFIED, "step": ONE_STEP}  # plan --interval-of (and "auto", `measured_by`)


def measured_by(choice: str, launches: LaunchSpread | None) -> Measurement:
    """What the intervals are of for `plan --interval-of` `choice`: "auto" (the default) is verify-plan's median
    where earlier verifications on this machine measured how far its launches land apart (`launches`), else one
    step: a median's interval resting on the profile's two launches alone was over-confident."""
    if choice == "auto":
        return ONE_STEP if launches is None else VERIFIED
    return INTERVAL_OF[choice]


def interval_of(measurement: Measurement = ONE_STEP) -> dict[str, int]:
    """What a plan's intervals are of, as its JSON records it under "inputs" (verify-plan reads it)."""
    return {"launches": measurement.launches, "steps": measurement.steps}


@dataclass(frozen=True)
class IntervalOptions:
    """How the planner samples: `jitter` the CV of every action when the model's source measured no spread (None:
    no interval without a profile's spread), `samples` draws per candidate, `seed` of the generator, `measurement`
    what the interval is of, `launch_spread` the spread of launches that earlier verifications measured (a
    relative standard deviation; None: the profile's own launches say it)."""

    jitter: float | None = None
    samples: int = DEFAULT_SAMPLES
    seed: int = 0
    measurement: Measurement = ONE_STEP
    launch_spread: float | None = None  # how far launches land apart on this machine (pipesim.io.launch_history)

    def __post_init__(self) -> None:
        if self.jitter is not None:
            Spread.uniform(self.jitter)  # the one check of a CV: 0..MAX_CV
        check_samples(self.samples)
        spread = self.launch_spread
        if spread is not None:
            Spread(machine_cv=spread)  # the one check of a machine's spread: a number in 0..MAX_CV
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ValueError(f"--seed must be a whole number >= 0, got {self.seed!r}")


def candidate_spread(inputs: PlanInputs, candidate: Candidate, split: bool, options: IntervalOptions) -> Spread | None:
    """The spread of one candidate's actions: the profile's where it kept one, else the typed jitter."""
    if inputs.profile is not None:
        chunked = candidate.virtual_stages > 1
        size, recompute = candidate.microbatch_size, candidate.recompute
        measured = profile_spread(
            inputs.profile, size, split, recompute, chunked, options.measurement, options.launch_spread
        )
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


def machine_launch_spread(profile: UnitProfile | None, history: str | None = None) -> tuple[LaunchSpread | None, str]:
    """The launch spread earlier verifications measured for `profile`'s model on this machine (`history`: a
    --launch-history value, None for the default record), and one line saying what the intervals rest on: that
    spread, or the profile's own launches. A record that cannot be read is said in the line, and not used."""
    path = resolve(history)
    if profile is None or path is None:
        return None, ""
    device = profile.provenance.get("device") if isinstance(profile.provenance.get("device"), str) else "cpu"
    try:
        records, skipped = read_records(path)
    except ValueError as error:
        return None, f"note: the launch history cannot be read ({error}); intervals rest on the profile's launches"
    pooled = pooled_launch_spread(records, model_key(profile.model), device)
    damaged = f"{skipped} damaged line{'s' * (skipped != 1)} of the launch history {path} skipped" if skipped else ""
    if pooled is None:
        return None, f"note: {damaged}" if damaged else ""
    return pooled, f"intervals: {pooled.line()}" + (f" ({damaged})" if damaged else "")

"""How far each action's time varies from step to step, and how far its measured price may be off: what a
prediction's interval is drawn from (`pipesim.sim.jitter`).

Two sources, one value (`Spread`):

* typed costs: `--jitter CV`, the same coefficient of variation for every kind of action, and no uncertainty of
  the prices themselves (they were typed, not measured);
* a model profiled unit by unit (`pipesim.cost.profile.UnitProfile.spread`): per kind and profiled size the CV of
  the stages it timed whole over their repetitions, and the standard error of the median those repetitions give,
  relative (1.2533 x CV / sqrt(repetitions), the median's asymptotic error under a normal spread): the profile's own
  uncertainty, which every action of the kind shares in one sample; or, where it is larger, the standard error
  the profile's rounds give (`UnitProfile.spread_round_se`: how far a stage's median moved from round to round, the
  machine's drift, which repetitions of one round share and so cannot average away).

A microbatch size beyond the profiled ones reads the nearest size's spread and widens the price's uncertainty by
`EXTRAPOLATION_SE` per doubling away from them (a size the profile never ran: how far off its price may be is not
measured, and grows with the distance).

What an interval is of (`Measurement`): one step, or the median of a measurement made of several launches, as
verify-plan's rounds are. The machine's term differs between the two (`machine_cv`). A profile of K launches
splits its drift into the drift inside a launch (`within`, seconds apart) and the spread of the launches' levels
(`between`, minutes apart). One step lands at one launch's level and one moment's speed:
within^2 + between^2, plus the profile's own level error between^2 / K. The median of R launches averages the
first two terms over its R launches, and the level error stays:

    machine_cv^2 = (within^2 + between^2) / R + between^2 / K

R = 1 gives the single step's drift, which the profile keeps. A profile of one launch never saw `between`, so its
drift is the one step's, whatever R is. `pipesim.sim.jitter.step_interval` averages the actions' own jitter over
the measurement's steps.

Two launches read `between` off one degree of freedom, and on the development VM they sat 1-3% apart while the
same model's verifications landed 4-15% apart (docs/benchmarks.md). Where earlier verifications on the machine
measured it (`pipesim.io.launch_history`: each candidate's round medians, pooled), that reading replaces the
profile's when larger, in both kinds of interval; a profile of one launch then counts as K = 1.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipesim.cost.model import CostModel
from pipesim.ir import ActionKind

if TYPE_CHECKING:  # a profile is read only where one is given (the profile's modules stay out of `simulate`)
    from pipesim.cost.profile import UnitProfile

MAX_CV = 5.0  # a coefficient of variation above 500% is a measuring error, not a spread
MEDIAN_SE = math.sqrt(math.pi / 2)  # the median's standard error over the mean's, for a normal spread
Z95 = 1.96  # a 95% interval's half-width in standard errors
EXTRAPOLATION_SE = 0.10  # the relative uncertainty added to every price per doubling beyond the profiled sizes
MAX_MEASURED = 1_000_000


@dataclass(frozen=True)
class Measurement:
    """What a predicted interval is of: the median of `steps` steps measured over `launches` separate launches of
    the run (Measurement(1, 1): one step)."""

    launches: int = 1
    steps: int = 1

    def __post_init__(self) -> None:
        for name in ("launches", "steps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_MEASURED:
                raise ValueError(
                    f"a measurement's {name} must be a whole number from 1 to {MAX_MEASURED:,}, got {value!r}"
                )
        if self.steps < self.launches:
            raise ValueError(f"a measurement of {self.launches} launches has at least as many steps, got {self.steps}")

    @property
    def is_one_step(self) -> bool:
        return self.steps == 1


ONE_STEP = Measurement()
# What verify-plan measures by default, and what the planner's intervals are of: its interleaved rounds, each a
# launch of every candidate, and its measured steps per round (at least: a run of short steps measures more)
VERIFY_ROUNDS = 3
VERIFY_STEPS = 30
VERIFIED = Measurement(VERIFY_ROUNDS, VERIFY_ROUNDS * VERIFY_STEPS)


@dataclass(frozen=True)
class Spread:
    """Per action kind: `cv`, the coefficient of variation of one action's time from step to step (0.2 = 20%), and
    `price_se`, the relative standard error of the price itself (one draw per sample for every action of the
    kind: a price measured too low makes every such action slow together), and `machine_cv`, how far the
    machine's speed in the run predicted may sit from the one the prices were measured at (one draw per sample for
    every action together: a profile's `spread_drift`). Missing kinds vary by 0."""

    cv: Mapping[ActionKind, float] = field(default_factory=dict)
    price_se: Mapping[ActionKind, float] = field(default_factory=dict)
    machine_cv: float = 0.0

    def __post_init__(self) -> None:
        value = self.machine_cv
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_CV:
            raise ValueError(f"a spread's machine_cv must be a number in 0..{MAX_CV:g}, got {value!r}")
        for label, table in (("cv", self.cv), ("price_se", self.price_se)):
            for kind, value in table.items():
                if not isinstance(kind, ActionKind):
                    raise ValueError(f"a spread's {label} is keyed by action kind (F, B, I, W), got {kind!r}")
                if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= MAX_CV:
                    raise ValueError(
                        f"a spread's {label} of {kind.value} must be a number in 0..{MAX_CV:g}, got {value!r}"
                    )

    @classmethod
    def uniform(cls, cv: float) -> Spread:
        """Every kind of action varying by `cv` (the CLI's `--jitter CV` for typed costs)."""
        if isinstance(cv, bool) or not isinstance(cv, (int, float)) or not 0 <= cv <= MAX_CV:
            raise ValueError(f"--jitter is a coefficient of variation in 0..{MAX_CV:g} (0.2 = 20%), got {cv!r}")
        return cls({kind: float(cv) for kind in ActionKind})

    @property
    def is_zero(self) -> bool:
        return not any(self.cv.values()) and not any(self.price_se.values()) and not self.machine_cv

    def widened(self, extra_se: float) -> Spread:
        """The same spread with every kind's price uncertain by `extra_se` more (added in quadrature)."""
        kinds = (
            set(self.cv)
            | set(self.price_se)
            | {ActionKind.FORWARD, ActionKind.BACKWARD, ActionKind.BACKWARD_INPUT, ActionKind.BACKWARD_WEIGHT}
        )
        return Spread(
            dict(self.cv),
            {k: min(MAX_CV, math.hypot(self.price_se.get(k, 0.0), extra_se)) for k in kinds},
            self.machine_cv,
        )


# Which measured kind of a unit profile (pipesim.cost.profile.TIME_KINDS) each action kind of a candidate runs, by
# (split backward, recomputation): the same table the in-situ steps are timed against.
_PROFILE_KINDS = {
    (False, False): {ActionKind.FORWARD: "forward_ms", ActionKind.BACKWARD: "backward_ms"},
    (True, False): {
        ActionKind.FORWARD: "forward_split_ms",
        ActionKind.BACKWARD_INPUT: "input_ms",
        ActionKind.BACKWARD_WEIGHT: "weight_ms",
    },
    (False, True): {ActionKind.FORWARD: "forward_recompute_ms", ActionKind.BACKWARD: "backward_recompute_ms"},
    (True, True): {
        ActionKind.FORWARD: "forward_recompute_ms",
        ActionKind.BACKWARD_INPUT: "input_recompute_ms",
        ActionKind.BACKWARD_WEIGHT: "weight_ms",
    },
}


def machine_cv(profile: UnitProfile, launches: int = 1, between: float | None = None) -> float:
    """The machine's term of a prediction from `profile` for a median over `launches` launches (the module
    docstring): the profile's drift for one launch, or for a profile of one launch. `between`, a launch spread
    measured elsewhere (earlier verifications on this machine, `pipesim.io.launch_history`), replaces the
    profile's own reading of it where it is larger: the drift inside a launch stays the profile's."""
    drift, own, count = profile.spread_drift, profile.spread_launch, profile.spread_launches
    if between is None or between <= own:
        if launches <= 1 or count < 2:
            return drift
        between = own
    if count < 2:  # one launch: its drift is all inside it, and its level is one launch's
        within_squared, count = drift**2, 1
    else:
        within_squared = max(0.0, drift**2 - own**2 * (1 + 1 / count))
    return min(MAX_CV, math.sqrt((within_squared + between**2) / launches + between**2 / count))


def profile_spread(
    profile: UnitProfile,
    size: int,
    split: bool,
    recompute: bool,
    chunked: bool = False,
    measurement: Measurement = ONE_STEP,
    between: float | None = None,
) -> Spread | None:
    """The spread of a candidate's actions from a profile that kept its (None for a profile written before it
    did): each kind's CV at `size` (the nearest profiled size beyond them) and its price's standard error: over the
    repetitions or over the rounds (the larger), and the in-situ factor's own (its 95% CI's half-width / 1.96, for
    the candidate's class), widened by EXTRAPOLATION_SE per doubling outside the profiled sizes; and the machine's
    term for `measurement`, shared by every action of a sample (`machine_cv`, with `between` where earlier
    verifications measured the launch spread)."""
    if not profile.spread:
        return None
    repeats = max(profile.spread_repeats, 1)
    factor_ci = profile.in_situ_terms(split, chunked).ci
    cv: dict[ActionKind, float] = {}
    price_se: dict[ActionKind, float] = {}
    for kind, measured in _PROFILE_KINDS[(split, recompute)].items():
        curve = profile.spread.get(measured)
        if curve is None:
            continue
        cv[kind] = min(MAX_CV, curve.at(size))
        factor_se = factor_ci[measured].at(size) / Z95 if measured in factor_ci else 0.0
        within = MEDIAN_SE * cv[kind] / math.sqrt(repeats)
        drift = profile.spread_round_se[measured].at(size) if measured in profile.spread_round_se else 0.0
        price_se[kind] = min(MAX_CV, math.hypot(max(within, drift), factor_se))
    spread = Spread(cv, price_se, machine_cv(profile, measurement.launches, between))
    sizes = profile.microbatch_sizes
    if sizes[0] <= size <= sizes[-1]:
        return spread
    doublings = abs(math.log2(size / (sizes[0] if size < sizes[0] else sizes[-1])))
    return spread.widened(EXTRAPOLATION_SE * doublings)


def cost_spread(cost: CostModel) -> Spread | None:
    """The spread a run's stage cost file kept (`executor run --profile`: its meta's "spread", the in-situ steps'
    coefficient of variation per action kind and the fewest actions each rests on), or None when it kept none."""
    meta = cost.provenance.meta if isinstance(cost.provenance.meta, dict) else {}
    raw = meta.get("spread")
    if raw is None:
        return None
    if not isinstance(raw, dict) or not isinstance(raw.get("cv"), dict):
        raise ValueError(f'cost file: meta.spread must be {{"cv": {{kind: CV}}, "repeats": n}}, got {raw!r:.60}')
    repeats = raw.get("repeats", 0)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 0:
        raise ValueError(f"cost file: meta.spread.repeats must be a whole number >= 0, got {repeats!r:.40}")
    cv: dict[ActionKind, float] = {}
    for name, value in raw["cv"].items():
        try:
            kind = ActionKind(name)
        except ValueError:
            raise ValueError(
                f"cost file: meta.spread.cv: unknown action kind {name!r:.20}; valid: F, B, I, W"
            ) from None
        cv[kind] = value
    Spread(cv)  # checks every CV before it is used
    se = {k: min(MAX_CV, MEDIAN_SE * v / math.sqrt(repeats)) for k, v in cv.items()} if repeats else {}
    return Spread(cv, se)

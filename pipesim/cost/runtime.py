"""What each rank spends outside the schedule's actions: the gap before each action, the step's tail, and the
cores ranks share. The second of a cost model's concerns (`CostModel.runtime`), which a profile run measures
(pipesim_executor.rank.calibrate) and the CLI's --dispatch, --overhead and --shared-cores set.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# The optimizers pipesim prices and the executor runs, with the state each keeps per parameter (SGD none, SGD with
# momentum one buffer, Adam two): the one list of their names (the planner, the profile, the executor, the app).
OPTIMIZER_STATES = {"sgd": 0, "sgd-momentum": 1, "adam": 2}
OPTIMIZERS = tuple(OPTIMIZER_STATES)


@dataclass(frozen=True)
class RankRuntime:
    """Per-rank time outside the actions.

    `step_overhead_ms` is each rank's time per step after its last action (optimizer step, gradient zeroing;
    one value for every rank, or one per rank). `dispatch_ms` is the gap a rank's runtime leaves before each
    action it starts (Python dispatch, posting receives, timing marks; one value or one per rank): small per
    action, but paid once per action on the critical path, so a step of hundreds of actions feels it.
    `shared_cores` is how many ranks can compute at full speed at once when the ranks share one machine's
    cores (CPU ranks: cores / threads per rank); None means one device per rank. With fewer than the ranks,
    the simulation shares them (pipesim.sim.shared_cores) and the stage costs are full-speed times.
    """

    step_overhead_ms: tuple[float, ...] = ()
    dispatch_ms: tuple[float, ...] = ()
    shared_cores: int | None = None

    def __post_init__(self) -> None:
        for name in ("step_overhead_ms", "dispatch_ms"):
            values = getattr(self, name)
            if not isinstance(values, tuple) or not all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0 for v in values
            ):
                raise ValueError(
                    f"{name} must hold finite numbers >= 0 (a tuple, one per rank or one for all), got {values!r}"
                )
        if self.shared_cores is not None and (
            isinstance(self.shared_cores, bool) or not isinstance(self.shared_cores, int) or self.shared_cores < 1
        ):
            raise ValueError(f"shared_cores must be a positive integer or None, got {self.shared_cores!r}")

    def overhead_ms(self, num_ranks: int) -> tuple[float, ...]:
        """Per rank, the step's time after its last action (zeros when none was measured)."""
        return per_rank(self.step_overhead_ms, num_ranks, "step_overhead_ms")

    def dispatch_per_rank(self, num_ranks: int) -> tuple[float, ...]:
        """Per rank, the gap before each action (zeros when none was measured)."""
        return per_rank(self.dispatch_ms, num_ranks, "dispatch_ms")


def per_rank(values: tuple[float, ...], num_ranks: int, name: str) -> tuple[float, ...]:
    """One value for every rank, or one per rank; none means zero."""
    if not values:
        return (0.0,) * num_ranks
    if len(values) == 1:
        return (float(values[0]),) * num_ranks
    if len(values) != num_ranks:
        raise ValueError(f"{name} has {len(values)} values for {num_ranks} ranks: give 1 or {num_ranks}")
    return tuple(float(v) for v in values)


def check_finite_non_negative(name: str, value: object) -> None:
    """A ValueError naming `name` unless `value` is a finite number >= 0 (not a bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class OptimizerTime:
    """One optimizer's step (and gradient zeroing) on a rank: `fixed_ms` plus `ms_per_byte` per parameter byte it
    updates, fitted by the profile over several parameter sets."""

    fixed_ms: float = 0.0
    ms_per_byte: float = 0.0

    def __post_init__(self) -> None:
        check_finite_non_negative("fixed_ms", self.fixed_ms)
        check_finite_non_negative("ms_per_byte", self.ms_per_byte)

    def step_ms(self, param_bytes: float) -> float:
        """The step of a rank holding `param_bytes` of parameters (none: nothing to step)."""
        return self.fixed_ms + self.ms_per_byte * param_bytes if param_bytes > 0 else 0.0


@dataclass(frozen=True)
class RuntimeTerms:
    """What a rank spends outside its actions as a function of what it holds, for pricing any cut of a model: the
    dispatch gap before each action, the step's fixed tail after the last action (the wait for the last sends,
    the loss, the barrier's way out, and the step's lead before its first action beyond its dispatch gap, which
    shifts every rank alike: pipesim_executor.rank.calibrate.priced_tails), the optimizer's step on the rank's
    parameters, and the cores ranks share. A profile (`pipesim.cost.profile.UnitProfile.runtime_terms`) or a
    calibration from a run gives them."""

    dispatch_ms: float = 0.0
    tail_ms: float = 0.0
    optimizer: OptimizerTime | None = None
    core_slots: int | None = None

    def __post_init__(self) -> None:
        check_finite_non_negative("dispatch_ms", self.dispatch_ms)
        check_finite_non_negative("tail_ms", self.tail_ms)
        if self.core_slots is not None and (
            isinstance(self.core_slots, bool) or not isinstance(self.core_slots, int) or self.core_slots < 1
        ):
            raise ValueError(f"core_slots must be a positive integer or None, got {self.core_slots!r}")

    def rank_runtime(self, param_bytes: Sequence[float], replicas: int = 1) -> RankRuntime:
        """The `RankRuntime` of one replica whose ranks hold `param_bytes` each: every rank's tail plus its
        optimizer step, the dispatch gap, and the cores shared when the processes of all replicas outnumber them
        (each replica simulated on its share, as the executor's prediction does)."""
        optimizer = self.optimizer or OptimizerTime()
        overhead = tuple(self.tail_ms + optimizer.step_ms(b) for b in param_bytes)
        slots = None
        if self.core_slots is not None:
            share = max(1, self.core_slots // max(1, replicas))
            slots = share if share < len(param_bytes) else None
        return RankRuntime(overhead, (self.dispatch_ms,), slots)

"""The full memory of each rank: parameters, gradients, optimizer state and stashed activations.

Activations follow `pipesim.semantics.lower`'s liveness (what F stashes, what B, I and W free), read through the
metrics of `pipesim.sim.metrics` (`memory_over_time`, `compute_metrics`) or, for the planner, walked over each rank's
action list: a rank runs its actions one after another, so its stash level after each action depends only on that
order, never on the times, and the peak of that walk is the peak the simulated timeline shows (a test checks it).

Static memory per rank: the parameters of its stages, one gradient of the same size, and the optimizer's state
(`OPTIMIZER_STATES`: SGD none, SGD with momentum one buffer, Adam two; in the parameters' dtype, as torch keeps
them). The peak is counted as static plus the activation peak, i.e. with gradients allocated for the whole step
(gradient accumulation, or `zero_grad(set_to_none=False)`); with `set_to_none=True` a rank whose activation
peak comes before its first backward peaks lower by up to its gradient bytes. Sizes come from the cost model
(`StageCost.param_bytes`, `activation_bytes`, ...): a model description or a profile's cost file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from pipesim.cost.model import CostModel
from pipesim.cost.runtime import OPTIMIZER_STATES
from pipesim.ir import ActionKind, Schedule
from pipesim.records import Timeline
from pipesim.semantics.lower import stash_table
from pipesim.sim.metrics import compute_metrics, memory_over_time, stash_sizes

_KINDS = tuple(ActionKind)


def check_optimizer(optimizer: str) -> str:
    if optimizer not in OPTIMIZER_STATES:
        raise ValueError(f"unknown optimizer {optimizer!r}; valid: {', '.join(OPTIMIZER_STATES)}")
    return optimizer


@dataclass(frozen=True)
class RankMemory:
    """One rank's memory in bytes: static parts and the activation peak."""

    rank: int
    param_bytes: float
    grad_bytes: float
    optimizer_bytes: float
    peak_activation_bytes: float

    @property
    def static_bytes(self) -> float:
        return self.param_bytes + self.grad_bytes + self.optimizer_bytes

    @property
    def peak_bytes(self) -> float:
        return self.static_bytes + self.peak_activation_bytes

    def to_dict(self) -> dict[str, float]:
        return {
            "rank": self.rank,
            "param_bytes": self.param_bytes,
            "grad_bytes": self.grad_bytes,
            "optimizer_bytes": self.optimizer_bytes,
            "peak_activation_bytes": self.peak_activation_bytes,
            "peak_bytes": self.peak_bytes,
        }


def static_bytes(schedule: Schedule, cost: CostModel, optimizer: str = "adam") -> list[tuple[float, float, float]]:
    """Per rank, (parameter, gradient, optimizer state) bytes of the stages it holds."""
    return placement_static_bytes(schedule.stage_to_rank, schedule.num_ranks, cost, optimizer)


def placement_static_bytes(
    stage_to_rank: Sequence[int], num_ranks: int, cost: CostModel, optimizer: str = "adam"
) -> list[tuple[float, float, float]]:
    """`static_bytes` of a placement alone: the planner prices candidates whose schedule is not built."""
    params = [0.0] * num_ranks
    for stage, rank in enumerate(stage_to_rank):
        params[rank] += cost.stage(stage).param_bytes
    return [parameter_state_bytes(p, optimizer) for p in params]


def parameter_state_bytes(param_bytes: float, optimizer: str) -> tuple[float, float, float]:
    """(parameter, gradient, optimizer state) bytes that parameters of `param_bytes` take in training."""
    states = OPTIMIZER_STATES[check_optimizer(optimizer)]
    return param_bytes, param_bytes, states * param_bytes


def training_bytes(param_bytes: float, activation_bytes: float, optimizer: str) -> float:
    """The least memory a whole model takes to train one step: its parameters with their gradients and optimizer
    state (as the planner prices each rank's, `static_bytes`) and one microbatch's activations through every
    layer. The executor refuses a model this says cannot fit the machine before any process starts."""
    return sum(parameter_state_bytes(param_bytes, optimizer)) + activation_bytes


def peak_activations_by_order(schedule: Schedule, cost: CostModel) -> list[float]:
    """Per rank, the peak stashed bytes, walking its actions in order with `pipesim.semantics.lower`'s liveness."""
    table = stash_table(stash_sizes(cost, range(schedule.num_stages)))
    peaks = []
    for actions in schedule.actions:
        level = peak = 0.0
        for stage, kind, _ in actions:
            level += table[stage][kind][1]
            if level > peak:
                peak = level
        peaks.append(peak)
    return peaks


def rank_memory(
    schedule: Schedule, cost: CostModel, optimizer: str = "adam", timeline: Timeline | None = None
) -> list[RankMemory]:
    """Every rank's memory at its peak; from a (simulated or measured) timeline's metrics when one is given."""
    if timeline is None:
        peaks = peak_activations_by_order(schedule, cost)
    else:
        peaks = [r.peak_activation_bytes for r in compute_metrics(timeline, cost).ranks]
    return [
        RankMemory(rank, p, g, o, peak)
        for rank, ((p, g, o), peak) in enumerate(zip(static_bytes(schedule, cost, optimizer), peaks, strict=True))
    ]


def total_memory_over_time(
    timeline: Timeline, schedule: Schedule, cost: CostModel, optimizer: str = "adam"
) -> list[list[tuple[float, float]]]:
    """Per rank, (time, bytes) of static memory plus stashed activations (`timeline.memory_over_time`)."""
    static = [sum(parts) for parts in static_bytes(schedule, cost, optimizer)]
    return [[(t, static[r] + level) for t, level in row] for r, row in enumerate(memory_over_time(timeline, cost))]


class OrderWalk:
    """A schedule's per-rank action order, held as codes to take many peaks under different sizes at once.

    The planner evaluates one schedule under many cost models (recompute on or off, W shares, splits):
    the walk is `peak_activations_by_order` with the delta of each action looked up in a per-(stage, kind)
    table, a running sum and a max per rank, at C speed (`itertools.accumulate`: the same additions in the same
    order). No numpy: importing it took a tenth of a second in each of the plan's processes.
    """

    def __init__(self, schedule: Schedule) -> None:
        self.num_stages = schedule.num_stages
        width = len(_KINDS)
        kind_index = {kind: i for i, kind in enumerate(_KINDS)}
        self.codes = [[stage * width + kind_index[kind] for stage, kind, _ in actions] for actions in schedule.actions]

    def peaks(self, cost: CostModel) -> list[float]:
        table = stash_table(stash_sizes(cost, range(self.num_stages)))
        deltas = [table[stage][kind][1] for stage in range(self.num_stages) for kind in _KINDS]
        lookup = deltas.__getitem__
        return [max(0.0, max(accumulate(map(lookup, codes)), default=0.0)) for codes in self.codes]

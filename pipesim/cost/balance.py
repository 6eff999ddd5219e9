"""Stage balancing: cut L layers into S contiguous stages so that the slowest stage is as fast as possible.

The classic linear partition problem, solved exactly: a binary search over the candidate bottlenecks (every
contiguous sum is one, so the optimum is among them) with a greedy feasibility test, which is exact because
packing layers greedily into a stage never hurts the stages after it. The split is returned as split points,
the unit indices where each stage after the first starts: the convention of the executor's `--split-points`
(executor.config.check_split_points). Among the optimal splits the greedy one (every stage as full as the
bottleneck allows, the last stages taking the rest) is returned, so the result is deterministic.

With several chunks per rank (interleaved, V shapes) the S stages are ranks x chunks; each is balanced alone,
which is what the slowest stage, the quantity schedules are costed with, depends on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate


@dataclass(frozen=True)
class Balance:
    """A split of `len(costs)` layers into stages: its split points, per-stage costs and the slowest one."""

    split_points: tuple[int, ...]
    stage_costs: tuple[float, ...]

    @property
    def bottleneck(self) -> float:
        return max(self.stage_costs)

    @property
    def imbalance(self) -> float:
        """Slowest stage over the mean stage (1.0: perfectly balanced)."""
        mean = sum(self.stage_costs) / len(self.stage_costs)
        return self.bottleneck / mean if mean > 0 else 1.0


def _check(costs: Sequence[float], num_stages: int) -> list[float]:
    values = [float(c) for c in costs]
    if not values:
        raise ValueError("give at least one layer cost")
    if any(not (v >= 0 and v < float("inf")) for v in values):
        raise ValueError(f"layer costs must be finite numbers >= 0, got {list(costs)}")
    if not isinstance(num_stages, int) or num_stages < 1:
        raise ValueError(f"the number of stages must be a positive integer, got {num_stages!r}")
    if num_stages > len(values):
        raise ValueError(
            f"{num_stages} stages need at least {num_stages} layers; there are {len(values)}: "
            "every stage holds at least one layer"
        )
    return values


def stage_costs(costs: Sequence[float], split_points: Sequence[int]) -> tuple[float, ...]:
    """Per stage, the sum of its layers' costs."""
    bounds = [0, *split_points, len(costs)]
    return tuple(float(sum(costs[a:b])) for a, b in zip(bounds, bounds[1:], strict=False))


def _greedy(prefix: list[float], num_stages: int, limit: float) -> tuple[int, ...] | None:
    """Split points that keep every stage at most `limit` with each stage holding >= 1 layer, or None.

    Each stage takes as many layers as fit under `limit` while leaving one layer for each stage still to come.
    """
    count = len(prefix) - 1
    points = []
    start = 0
    for remaining in range(num_stages - 1, 0, -1):
        # the furthest end such that sum(start:end) <= limit (the same subtraction as the candidates)
        end, last = start, count - remaining
        while end < last and prefix[end + 1] - prefix[start] <= limit:
            end += 1
        if end <= start:
            return None
        points.append(end)
        start = end
    if prefix[count] - prefix[start] > limit:
        return None
    return tuple(points)


def balance(costs: Sequence[float], num_stages: int) -> Balance:
    """The split of layers with `costs` into `num_stages` contiguous stages minimising the slowest stage."""
    values = _check(costs, num_stages)
    prefix = [0.0, *accumulate(values)]
    n = len(values)
    # Every stage cost is prefix[j] - prefix[i]: the optimum is one of these sums. Computing them with the same
    # subtraction the greedy test uses keeps the comparison exact in floating point.
    candidates = sorted({prefix[j] - prefix[i] for i in range(n) for j in range(i + 1, n + 1)})
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if _greedy(prefix, num_stages, candidates[mid]) is not None:
            hi = mid
        else:
            lo = mid + 1
    points = _greedy(prefix, num_stages, candidates[lo])
    assert points is not None, "the largest candidate (the whole model) always fits"
    return Balance(points, stage_costs(values, points))


def format_split_points(points: Sequence[int]) -> str:
    """The text `executor run --split-points` takes: comma-separated unit indices."""
    return ",".join(str(p) for p in points)


def check_split_points(split_points: Sequence[int], num_layers: int, num_stages: int) -> tuple[int, ...]:
    """The one check of explicit stage boundaries (layer indices where a stage starts), with the splitter that
    makes them: for the executor's launcher and the ranks that cut the model (executor.config delegates here),
    and for a model description cut at a plan's split (pipesim.cost.description)."""
    points = tuple(int(p) for p in split_points)
    if len(points) != num_stages - 1:
        raise ValueError(
            f"split_points {list(points)} give {len(points) + 1} stages but the schedule has {num_stages}: "
            f"give {num_stages - 1} layer indices"
        )
    previous = 0
    for point in points:
        if not previous < point < num_layers:
            raise ValueError(
                f"split_points {list(points)} must increase strictly and lie in 1..{num_layers - 1} "
                f"(the model has {num_layers} layers); every stage needs at least one layer"
            )
        previous = point
    return points
